"""The version of hatch-jaxexport (read by Hatch at build time; written into every manifest)."""

__version__ = "0.1.0"
