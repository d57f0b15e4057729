"""Companion wheels: a package's executables for one accelerator target, in a wheel of their own.

A wheel that carries executables for a dozen TPU hosts outgrows the package index's file limit,
and every CPU user would download them. So a build can leave them out of the package's wheel
and put each target's into a companion wheel, installed through an extra of the package
(``pip install mylib[tpu-v5e]``, ``mylib[tpu]`` for every TPU target), as jax itself ships
``libtpu`` and its CUDA plugins.

Names, from the package's distribution and the executables' target (all of them derived, so
that every builder of one source names them alike):

- the extra: ``tpu-v5e`` for a TPU host compiled deviceless (its topology: ``tpu-v5e-2x2`` for
  a host of four chips), a device target's own name otherwise (``cuda-nvidia-h100-80gb-hbm3``),
  ``cpu-<target>`` for a CPU target (``cpu-x86-64-avx2`` for ``x86_64-avx2``, where the
  maintainer splits those too), normalized as PEP 685 compares extras;
  every companion of a platform is also in the platform's extra (``tpu``);
- the distribution: ``<package's distribution>-jaxexport-<extra>``
  (``example-pkg-jaxexport-tpu-v5e``), at the package's version, pinned exactly by the extra;
- the import package that holds the files: the distribution's name in snake case
  (``example_pkg_jaxexport_tpu_v5e``), with ``_jaxexport/<package>/`` inside (a manifest of
  the executables only, and their blobs), one folder per package of the wheel.

The package's manifest lists its companions (``CompanionRecord``), each with the SHA-256 of
the companion's manifest: the loader trusts a companion only where that matches (the same
build of the same version), and then checks every executable as it checks one in the wheel.
"""

from hatch_jaxexport.formats.manifest import ARTIFACT_DIR, CompanionRecord, ExecutableRecord

#: What the build splits into companion wheels (the ``companion-wheels`` option): nothing,
#: the accelerator targets' executables (TPU, GPU), or every target's, the CPU's too.
SPLIT_CHOICES = ("none", "accelerators", "all")
_INFIX = "-jaxexport-"


def normalized_distribution(name: str) -> str:
    """A distribution name as PEP 503 normalizes it: lower case, runs of ``-_.`` one ``-``."""
    out: list[str] = []
    for character in name.lower():
        if character in "-_.":
            if out and out[-1] != "-":
                out.append("-")
        else:
            out.append(character)
    return "".join(out).strip("-")


def companion_extra(record: ExecutableRecord) -> str:
    """The extra (and the last part of the companion's name) of an executable's target."""
    if record.topology:  # a TPU host compiled deviceless: tpu-v5e, tpu-v5e-2x2
        generation, _, host = record.topology.partition(":")
        text = "-".join(["tpu", generation, *([host] if host and host != "1x1" else [])])
    elif record.device_kind:
        text = record.target
    else:
        text = f"cpu-{record.target}"
    return normalized_distribution(text)  # an extra's name as PEP 685 compares them


def is_split(record: ExecutableRecord, split: str) -> bool:
    """Whether ``split`` (of ``SPLIT_CHOICES``) puts ``record`` into a companion wheel."""
    return split == "all" or (split == "accelerators" and record.backend != "cpu")


def companion_distribution(distribution: str, extra: str) -> str:
    """``example-pkg-jaxexport-tpu-v5e``: the companion of ``distribution`` for ``extra``."""
    return f"{normalized_distribution(distribution)}{_INFIX}{extra}"


def companion_package(distribution: str, extra: str) -> str:
    """The import package a companion's files live in: its distribution's name in snake case."""
    return companion_distribution(distribution, extra).replace("-", "_")


def companion_folder(record: CompanionRecord, package: str) -> tuple[str, str, str]:
    """Where, inside the companion's import package, ``package``'s executables lie: the
    parts of ``<companion package>/_jaxexport/<package>``."""
    return record.package, ARTIFACT_DIR, package


def platform_extras(records: "list[CompanionRecord] | tuple[CompanionRecord, ...]"
                    ) -> dict[str, list[str]]:
    """Extra -> the companion distributions it requires: each companion's own extra, and one
    per platform (``tpu``) with every companion of that platform, in name order."""
    extras: dict[str, list[str]] = {}
    for record in sorted(records, key=lambda r: r.extra):
        extras.setdefault(record.extra, []).append(record.distribution)
        if record.platform != record.extra:
            extras.setdefault(record.platform, []).append(record.distribution)
    return {extra: sorted(set(names)) for extra, names in sorted(extras.items())}


def install_hint(record: CompanionRecord) -> str:
    """What installs a companion: the package's extra, and what it pins."""
    return f"the package's extra [{record.extra}] installs {record.distribution}=={record.version}"


__all__ = ["SPLIT_CHOICES", "companion_distribution", "companion_extra", "companion_folder",
           "companion_package", "install_hint", "is_split", "normalized_distribution",
           "platform_extras"]
