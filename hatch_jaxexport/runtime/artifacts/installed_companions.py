"""Finding a package's companion wheels: its executables for one target, installed by an extra.

The package's manifest lists its companions (``formats.companion_wheels``), each with the
SHA-256 of the manifest it wrote into the companion. A process looks for a companion only when
a call of its platform considers shipped executables (a CPU process never looks for a TPU
companion), once per process: ``importlib.util.find_spec`` locates its import package without
importing anything, ``importlib.metadata`` says whether more than one distribution of that name
is installed and at which version (the package's, exactly), and its manifest must be the one
the package's manifest names, byte for byte (another version, another build, an edited file:
the StableHLO path). Its executables are
then read and checked, file by file, as those inside the wheel are (size and SHA-256 at load,
the exact target by ``executables.shipped``).

What cannot be used is said, never raised: ``problem`` holds why (``call_report()`` and
``inspect`` show it, the ``hatch_jaxexport`` logger has it, the user's process sees nothing
new); strict mode raises it instead, naming the companion (``strict_problem``). Not installed is no
problem: the user did not ask for that extra.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import pathlib
import threading
from collections.abc import Callable
from typing import Any

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.companion_wheels import companion_folder, install_hint
from hatch_jaxexport.formats.manifest import (
    MANIFEST_NAME,
    CompanionRecord,
    ExecutableRecord,
    sha256_hex,
)
from hatch_jaxexport.formats.manifest_reader import ManifestIndex, read_manifest_index


class Companion:
    """One companion wheel of a package, as this process found it: its folder and manifest
    index where it is usable, else why not (``problem``; ``missing`` when not installed)."""

    __slots__ = ("files", "index", "missing", "package", "problem", "record", "root", "told")

    def __init__(self, record: CompanionRecord, package: str) -> None:
        self.record, self.package = record, package
        self.root: Any = None
        self.index: ManifestIndex | None = None
        self.problem = ""
        self.missing = False
        #: The files of the executables read from it so far.
        self.files: set[str] = set()
        #: Whether this process was told of its problem (once, however many functions).
        self.told = False

    @property
    def name(self) -> str:
        return f"companion wheel {self.record.distribution}"

    def holds(self, record: ExecutableRecord) -> bool:
        """Whether ``record`` is one of this companion's (read by ``executables``)."""
        return self.index is not None and record.file in self.files

    def executables(self, function: str) -> tuple[ExecutableRecord, ...]:
        """``function``'s executables in the companion (none where it is unusable)."""
        if self.index is None:
            return ()
        try:
            found = self.index.function(function).executables
            self.files.update(r.file for r in found)
            return found
        except ArtifactError as err:
            self.problem = f"{self.name}: {err}"
            self.index = None
            return ()

    def read(self, record: ExecutableRecord, read_file: Callable[..., bytes]) -> bytes:
        """An executable's bytes, checked against its record by ``read_file``
        (``package_artifacts.read_checked_file``: ``ArtifactError`` otherwise)."""
        return read_file(self.root, record.file, record.size, record.sha256, f"{self.name}: ")


def find_companion(record: CompanionRecord, package: str) -> Companion:
    """``package``'s companion ``record`` as installed in this environment (``Companion``)."""
    found = Companion(record, package)
    spec = importlib.util.find_spec(record.package)
    if spec is None or not spec.submodule_search_locations:
        found.missing = True
        found.problem = f"{found.name} is not installed ({install_hint(record)})"
        return found
    installed = [d for d in importlib.metadata.distributions(name=record.distribution)]
    if len(installed) > 1:
        places = sorted({str(d.locate_file("")) for d in installed})
        found.problem = (f"{found.name} is installed {len(installed)} times "
                         f"({', '.join(places)}): which one this build wrote is unclear; "
                         f"uninstall all but one ({install_hint(record)})")
        return found
    version = installed[0].version if installed else "(no metadata)"
    if version != record.version:
        found.problem = (f"{found.name} {version} is not the one this build of {package} "
                         f"wrote ({record.version}); {install_hint(record)}")
        return found
    _, artifact_dir, folder = companion_folder(record, package)
    root = pathlib.Path(next(iter(spec.submodule_search_locations))) / artifact_dir / folder
    try:
        data = (root / MANIFEST_NAME).read_bytes()
    except OSError as err:
        found.problem = f"{found.name} has no executables of {package} ({err})"
        return found
    if sha256_hex(data) != record.manifest_sha256:
        found.problem = (f"{found.name} {version} is not the one this build of {package} "
                         f"wrote (its manifest's SHA-256 differs from the one the package "
                         f"pins: another build, or a file changed); {install_hint(record)}")
        return found
    try:
        index = read_manifest_index(data, where=f"{record.package}/{artifact_dir}/{folder}")
    except ArtifactError as err:
        found.problem = f"{found.name}: {err}"
        return found
    found.root, found.index = root, index
    return found


class Companions:
    """A package's companion wheels, each found on first need, once per process."""

    def __init__(self, records: tuple[CompanionRecord, ...], package: str) -> None:
        self.records, self.package = records, package
        self.found: dict[str, Companion] = {}
        self.lock = threading.Lock()

    def for_platform(self, platform: str) -> list[Companion]:
        """The companions of ``platform``'s executables, found (a CPU process never looks
        for a TPU companion)."""
        wanted = [r for r in self.records if r.platform == platform]
        if not wanted:
            return []
        with self.lock:
            for record in wanted:
                if record.extra not in self.found:
                    self.found[record.extra] = find_companion(record, self.package)
            return [self.found[r.extra] for r in wanted]


def strict_problem(companions: list[Companion]) -> str:
    """The problems of installed companions that strict mode raises (a missing one is the
    user's choice of extras, not a problem), ``""`` where none."""
    return "; ".join(c.problem for c in companions if c.problem and not c.missing)


__all__ = ["Companion", "Companions", "find_companion", "strict_problem"]
