"""Layer 3, bake: turning a package's ``@exportable`` functions into artifacts, and checking them.

Discovery, the exporter, the one orchestration flow every integration calls, the export workers,
build options, verification, warmup, the portable export and the release check. It may import
``runtime``, ``formats`` and ``errors``, never ``integrations``. Importing it imports no jax; the
names below are its public facade.
"""

from hatch_jaxexport.bake._orchestrate import BuildResult, discover, export_package, list_tasks

__all__ = ["BuildResult", "discover", "export_package", "list_tasks"]
