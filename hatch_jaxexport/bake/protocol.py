"""The build's worker protocol: what a build asks of a worker process, and what it answers.

Two kinds of worker: an export worker (``WorkerRequest``, ``WorkerResult``: ``_worker``) and an
executable compiler (``CompileRequest``, ``CompileResult``: ``executables._compiler``). Each file is
JSON in the build's staging folder, written and read only here. Each carries ``PROTOCOL_VERSION``
and are checked where they are read: a file of another version, with a field missing or one this
side does not know (a worker from another hatch-jaxexport on the path), is an ``ExportError`` naming
the file and what differs, never a ``KeyError`` deep in the build.
"""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from hatch_jaxexport.errors import ExportError

#: The version of both files; a change of a field's name or meaning raises it.
PROTOCOL_VERSION = 1

_Message = TypeVar("_Message", "WorkerRequest", "WorkerResult", "CompileRequest",
                   "CompileResult")


@dataclass(frozen=True)
class WorkerRequest:
    """One worker's share of a package's export."""

    #: How messages name this kind of file.
    kind: ClassVar[str] = "export worker request"

    package: str
    #: Platforms of the functions whose spec names none.
    default_platforms: tuple[str, ...]
    #: This worker's index and the number of workers: it exports every ``workers``-th task.
    worker: int
    workers: int
    #: Where the blobs go (the staging folder) and where this worker writes its result.
    out_dir: str
    result: str
    #: Only list the tasks (``list_tasks``): nothing is exported.
    list_only: bool = False
    #: The executable targets the build compiles for (the worker plans what they compile).
    executables: tuple[str, ...] = ()
    #: The source tree's signatures file, read before the one beside the imported package.
    signatures: str | None = None
    #: The progress file the worker appends its plan and finished tasks to (``progress``).
    progress: str | None = None

    def write(self, path: Path) -> None:
        _write(self, path)

    @classmethod
    def read(cls, path: Path) -> WorkerRequest:
        values = _checked(cls, path)
        return cls(**{**values, "default_platforms": tuple(values["default_platforms"]),
                      "executables": tuple(values.get("executables", ()))})


@dataclass
class WorkerResult:
    """What one worker exported, or why it could not (``fatal``)."""

    #: How messages name this kind of file.
    kind: ClassVar[str] = "export worker result"

    #: ``ArtifactRecord`` fields of each artifact exported, with their export time by id.
    records: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)
    #: Exports that failed: the task, the structure and the described error.
    failures: list[dict[str, Any]] = field(default_factory=list)
    #: Why the worker could not work at all (the build fails); ``None`` when it could.
    fatal: list[str] | None = None
    #: Lines for the build log (a concrete-size form that could not be made...).
    notes: list[str] = field(default_factory=list)
    jax_version: str = ""
    jaxlib_version: str = ""
    #: Every task of the package (all workers'), and their ids where only listing.
    task_count: int = 0
    tasks: list[str] = field(default_factory=list)
    #: ``ConcreteRecord`` and ``FailedCall`` fields of the concrete-size artifacts (``sized``).
    concrete: list[dict[str, Any]] = field(default_factory=list)
    failed_calls: list[dict[str, Any]] = field(default_factory=list)
    #: What the executable compilers compile, per artifact (``executables.compiling``).
    executable_plans: list[dict[str, Any]] = field(default_factory=list)
    #: This worker's portable variants (``concrete.portable_export``), ``None`` for none.
    portable: dict[str, Any] | None = None

    def write(self, path: Path) -> None:
        _write(self, path)

    @classmethod
    def read(cls, path: Path) -> WorkerResult:
        return cls(**_checked(cls, path))


@dataclass(frozen=True)
class CompileRequest:
    """One executable target's compiles: the plans (``executables.compiling.plan_for``)."""

    #: How messages name this kind of file.
    kind: ClassVar[str] = "executable compiler request"

    package: str
    #: The target's name (``formats.cpu_targets.TARGETS``).
    target: str
    plans: list[dict[str, Any]]
    out_dir: str
    result: str
    #: A device compile's (``executables.device_compile``; ``target`` and ``plans`` are then
    #: found by the compiler, which sees the device): the platform asked for (``""``: jax's
    #: default backend) and the folder of the artifacts it compiles (the package's
    #: ``_jaxexport`` folder in the unpacked wheel).
    platform: str = ""
    blobs: str = ""

    def write(self, path: Path) -> None:
        _write(self, path)

    @classmethod
    def read(cls, path: Path) -> CompileRequest:
        return cls(**_checked(cls, path))


@dataclass
class CompileResult:
    """The executables one target's compiler wrote, and its notes for the build log."""

    #: How messages name this kind of file.
    kind: ClassVar[str] = "executable compiler result"

    #: ``ExecutableRecord`` fields of each executable compiled.
    records: list[dict[str, Any]] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    #: A device compile's: the device it compiled for (``DeviceDescription.to_json``), and why
    #: it compiled nothing at all (the wrong device, a package that does not import).
    device: dict[str, Any] = field(default_factory=dict)
    fatal: list[str] = field(default_factory=list)

    def write(self, path: Path) -> None:
        _write(self, path)

    @classmethod
    def read(cls, path: Path) -> CompileResult:
        return cls(**_checked(cls, path))


def _write(message: WorkerRequest | WorkerResult | CompileRequest | CompileResult,
           path: Path) -> None:
    path.write_text(json.dumps({"version": PROTOCOL_VERSION, **dataclasses.asdict(message)}))


def _checked(cls: type[_Message], path: Path) -> dict[str, Any]:
    """The fields of ``cls`` in the JSON file at ``path``; ``ExportError`` if they are not."""
    what = f"{cls.kind} {path.name}"
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as err:
        raise ExportError([f"{what} cannot be read: {err}"]) from None
    if not isinstance(data, dict) or data.get("version") != PROTOCOL_VERSION:
        given = data.get("version") if isinstance(data, dict) else type(data).__name__
        raise ExportError([f"{what} is of protocol version {given!r}, expected "
                           f"{PROTOCOL_VERSION} (a worker of another hatch-jaxexport?)"])
    known = {f.name for f in dataclasses.fields(cls)}
    required = {f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING
                and f.default_factory is dataclasses.MISSING}
    values = {k: v for k, v in data.items() if k != "version"}
    unknown, missing = sorted(set(values) - known), sorted(required - set(values))
    if unknown or missing:
        raise ExportError([f"{what}: missing field(s) {missing or 'none'}, unknown field(s) "
                           f"{unknown or 'none'} (protocol version {PROTOCOL_VERSION})"])
    return values


__all__ = ["PROTOCOL_VERSION", "CompileRequest", "CompileResult", "WorkerRequest", "WorkerResult"]
