"""Bake room 1, export: from a package's source to ``jax.export`` artifacts.

``discovery`` (import the package, collect its ``@exportable`` functions), ``exporter`` (one
function x structure x static values x platform through ``jax.export``: the blob and its
record), ``sharded`` (a mesh variant as jax sees it), ``captured`` (the arrays a function closes
over), ``body_warnings`` (what the package's code warns while a function is traced, kept with
its records), ``diagnose`` (what a failed export tells its author) and ``search_path`` (the
folders a worker imports the package from, where build isolation strips them). It may import
``runtime``, ``formats`` and ``errors``, never another room of the build.
"""

__all__ = ["body_warnings", "captured", "diagnose", "discovery", "exporter", "search_path",
           "sharded"]
