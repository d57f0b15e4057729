"""Layer 1, formats: what the other layers read and write, as pure data.

Specs (structures, shapes, dtypes, constraints), concrete sizes, mesh and partition specs, the
manifest and the portable index (schema, validation, hashes) and the settings read from the
environment. Pure: no jax at import and no I/O beyond reading what it is handed. It may import
nothing of hatch_jaxexport but ``hatch_jaxexport.errors``.

It also holds ``__version__`` (Hatch reads it here at build time; every manifest records it):
this package is imported by every import of ``hatch_jaxexport``, so the version costs no module
of its own.
"""

__version__ = "0.1.0"

__all__ = ["__version__", "companion_wheels", "concrete_sizes", "coverage", "cpu_targets",
           "device_targets",
           "dimensions", "dtype_names",
           "export_spec", "inventory", "jax_window", "manifest", "manifest_reader", "mesh",
           "options", "portable_index", "record_spans", "records", "settings", "signatures",
           "sources", "spec", "statics",
           "structure_text", "tpu_targets", "xla_objects"]
