"""Layer 3, bake: turning a package's ``@exportable`` functions into artifacts, and checking them.

``config`` (a build's options, validated), ``flow`` (the one export flow every integration calls),
``protocol`` (what a build and its worker processes exchange) and ``jax_envs`` (environments with
another jax release, for its exports or executables) at the top, then the rooms in the order a
build runs: ``export/`` (discover, export one function), ``concrete/`` (concrete-size artifacts),
``executables/`` (precompiled executables), ``workers/`` (the subprocess workers and the folder
they fill), ``check/`` (the release check); beside them ``verify`` and ``warmup`` (commands on an
installed package) and ``wheel_bake`` (baking a wheel another build backend built). It may import
``runtime``, ``formats`` and ``errors``, never ``integrations``. Importing it imports no jax; the
names below are its API: its rooms and modules, and the facade of one package's export.
"""

from hatch_jaxexport.bake.workers.orchestrate import (
    BuildResult,
    discover,
    export_package,
    list_tasks,
)

__all__ = ["BuildResult", "check", "concrete", "config", "discover", "executables", "export",
           "export_package", "flow", "jax_envs", "list_tasks", "protocol", "verify", "warmup",
           "wheel_bake", "workers"]
