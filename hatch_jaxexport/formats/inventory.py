"""What a manifest serves, counted and sized for people: the build summary, ``inspect``,
``verify`` and the release check count it one way (``Inventory``).

Apart from ``formats.manifest`` because no call needs it: a first call imports the records,
not the reports (a NamedTuple class costs 0.1 ms to create).
"""

import json
from collections.abc import Mapping, Sequence
from typing import Any, NamedTuple

from hatch_jaxexport.formats.manifest import ArtifactRecord, Manifest


def summarize(artifacts: Sequence[ArtifactRecord]) -> str:
    """One line: how many artifacts and bytes, and how many of them transformations added."""
    extra = [a for a in artifacts if (a.kind, a.batched) != ("primal", False)]
    total = sum(a.size for a in artifacts)
    text = f"{len(artifacts)} artifact(s), {total:,} bytes"
    if extra:
        text += (f"; of these, {len(extra)} for transformations (ad_order/vmap), "
                 f"{sum(a.size for a in extra):,} bytes")
    return text


class Inventory(NamedTuple):
    """What a manifest serves, counted one way for the build summary, ``inspect`` and
    ``verify``, so that the three agree entry for entry: every artifact kind (symbolic,
    concrete-size, recorded call of a function) counts, and a function counts once whichever
    kinds serve it."""

    functions: int
    symbolic: int
    #: Concrete-size artifacts of a structure (``ConcreteRecord.structure_index >= 0``).
    concrete: int
    #: Artifacts of recorded calls (``structure_index`` -1: a spec-less function's, or calls
    #: no structure accepted).
    recorded: int
    #: The artifacts' bytes, each record counted (two records may share one file).
    bytes: int
    #: Distinct files the manifest lists (artifacts, concrete-size forms, concrete-size
    #: artifacts, executables) and their bytes: what the artifacts add to the wheel, besides
    #: the manifest itself.
    files: int
    stored: int
    #: Distinct files among the artifacts (fewer than ``artifacts`` where identical modules
    #: are stored once, ``bake.workers._dedupe``).
    distinct_artifacts: int = 0

    @property
    def artifacts(self) -> int:
        return self.symbolic + self.concrete + self.recorded

    def text(self) -> str:
        """``3 function(s), 7 artifact(s) (2 symbolic, 2 concrete-size, 3 recorded calls),
        12.0 kB``; without concrete-size or recorded ones, ``2 function(s), 6 artifact(s),
        5.1 kB`` as before they existed."""
        return (f"{self.functions} function(s), {self.artifacts} artifact(s)"
                f"{self.kinds_text()}, {byte_text(self.bytes)}")

    def kinds_text(self) -> str:
        """`` (2 symbolic, 2 concrete-size, 3 recorded call(s))``, or ``""`` where every
        artifact is symbolic."""
        if not (self.concrete or self.recorded):
            return ""
        return (f" ({self.symbolic} symbolic, {self.concrete} concrete-size, "
                f"{self.recorded} recorded call(s))")


def inventory(manifest: Manifest) -> Inventory:
    """The manifest's ``Inventory``."""
    recorded = [c for c in manifest.concrete if c.structure_index < 0]
    files: dict[str, int] = {}
    for record in manifest.artifacts:
        files[record.file] = record.size
        files.update((entry["file"], entry["size"]) for entry in record.sized)
    files.update((r.file, r.size) for r in (*manifest.concrete, *manifest.executables))
    return Inventory(
        functions=len({r.function for r in (*manifest.artifacts, *manifest.concrete)}),
        symbolic=len(manifest.artifacts), concrete=len(manifest.concrete) - len(recorded),
        recorded=len(recorded),
        bytes=sum(r.size for r in (*manifest.artifacts, *manifest.concrete)),
        files=len(files), stored=sum(files.values()),
        distinct_artifacts=len({r.file for r in (*manifest.artifacts, *manifest.concrete)}))


def byte_text(n: int) -> str:
    """A size for people: ``340.2 kB``, ``16.8 MB``, ``48 B`` (decimal units)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def constant_text(entry: Mapping[str, Any]) -> str:
    """One captured constant: ``pkg.m.TABLE float32[8,4] 128 B`` (``(unnamed)`` if no name)."""
    shape = ",".join(str(d) for d in entry["shape"])
    return f"{entry['name'] or '(unnamed)'} {entry['dtype']}[{shape}] {byte_text(entry['bytes'])}"


def captured_by_function(artifacts: Sequence[ArtifactRecord]) -> dict[str, list[dict[str, Any]]]:
    """Each function's captured constants over all its artifacts, without repeats, largest first;
    functions that capture nothing are left out."""
    found: dict[str, dict[str, dict[str, Any]]] = {}
    for record in artifacts:
        for entry in record.captured_constants:
            key = json.dumps(entry, sort_keys=True)
            found.setdefault(record.function, {}).setdefault(key, entry)
    return {name: sorted(entries.values(), key=lambda e: (-e["bytes"], e["name"] or "",
                                                          e["dtype"], e["shape"]))
            for name, entries in sorted(found.items())}


__all__ = ["Inventory", "byte_text", "captured_by_function", "constant_text", "inventory",
           "summarize"]
