"""Shipped executables: a wheel's precompiled XLA executables, used only on an exact match.

A first call on a fresh machine otherwise compiles the artifact's StableHLO, which costs more
than everything else in the call. When the wheel ships an executable of the artifact for the
call's exact argument types, and this process is the one it was compiled for (jax and jaxlib
versions, backend and its version, machine, no ``XLA_FLAGS`` that change code generation, and
every CPU feature it was compiled for present on this CPU, checked against what the OS reports
before anything is loaded; for a device target, ``formats.device_targets``: the same device
kind, at least as many devices and the backend options from the environment it was compiled
under, ``LIBTPU_INIT_ARGS`` word for word), the loader loads
it, onto one device, instead of compiling. Any doubt is a "no",
never a crash: the StableHLO path is always there. A damaged executable (its SHA-256 or jax's
deserializer refuses it) is a ``FallbackWarning``, or an ``ArtifactError`` in strict mode.
"""

from __future__ import annotations

import functools
import os
import platform
import threading
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

from hatch_jaxexport.errors import ArtifactError, FallbackWarning
from hatch_jaxexport.formats.manifest import ExecutableRecord, signature_text
from hatch_jaxexport.formats.settings import shipped_executables_wanted, strict_mode
from hatch_jaxexport.runtime.jaxcompat import compiled_from_executable, device_identity

if TYPE_CHECKING:
    from hatch_jaxexport.formats.device_targets import DeviceDescription

# Imported in functions: the CPU targets' table, only when an artifact's records are matched
# against this host (``HATCH_JAXEXPORT_EXECUTABLES=0`` matches none); the device targets', only
# for a record with a device target (a CPU executable's match reads no device description).


class Host:
    """What this process is, in the terms an ``ExecutableRecord`` records (a slotted class, as
    ``formats.cpu_targets.Target`` says why)."""

    __slots__ = ("backend", "cpu_flags", "describe", "device", "jax_version", "jaxlib_version",
                 "machine", "platform_version", "system", "xla_flags")

    def __init__(self, jax_version: str, jaxlib_version: str, backend: str,
                 platform_version: str, machine: str, cpu_flags: frozenset[str] | None,
                 xla_flags: tuple[str, ...], system: str = "Linux",
                 device: DeviceDescription | None = None,
                 describe: Callable[[], DeviceDescription] | None = None) -> None:
        self.jax_version, self.jaxlib_version = jax_version, jaxlib_version
        self.backend, self.platform_version, self.machine = backend, platform_version, machine
        #: The CPU's features in ``/proc/cpuinfo`` spelling; ``None`` where the OS does not say
        #: (``formats.cpu_targets.host_features``).
        self.cpu_flags = cpu_flags
        #: ``XLA_FLAGS`` entries that may change code generation.
        self.xla_flags = xla_flags
        #: ``platform.system()``: an executable is an object file of its OS.
        self.system = system
        #: What this process's backend of the platform says of itself (device kind, device
        #: count, ...), which a device target's record must match; ``None``: not read (yet).
        self.device = device
        #: Reads ``device`` at its first need (``device_description``): ``this_host`` leaves
        #: it to the first device target's record, which a CPU executable's match never is.
        self.describe = describe

    def device_description(self) -> DeviceDescription | None:
        """``device``, read now where it was left to its first need; ``None``: not read."""
        if self.device is None and self.describe is not None:
            self.device, self.describe = self.describe(), None
        return self.device


def read_proc_cpuinfo(path: str = "/proc/cpuinfo") -> str:
    """Linux's ``/proc/cpuinfo`` up to the end of the first block that lists the features
    (``OSError`` where there is none): the first processor's, which ``linux_cpu_flags`` reads.
    The file has a block per logical CPU, generated as it is read (the kernel measures each
    one's frequency), so on a large server the whole file costs milliseconds of a first call."""
    lines: list[str] = []
    seen_features = False
    with open(path, encoding="utf-8", errors="replace") as cpuinfo:
        for line in cpuinfo:
            if seen_features and not line.strip():
                break
            seen_features = seen_features or line.partition(":")[0].strip() in (
                "flags", "Features")
            lines.append(line)
    return "".join(lines)


def _cpu_flags(system: str) -> frozenset[str] | None:
    """This CPU's features as archspec reads them from the OS, ``None`` where it cannot.

    archspec (imported here: only a process that considers a shipped executable pays for it)
    runs the first detection of this OS that works, as its own ``detected_info`` does, but
    without its warning when one fails: a failure is only a "no". ``archspec.cpu.host()``
    (the known model) is asked only where macOS lists no features (Apple silicon)."""
    from hatch_jaxexport.formats.cpu_targets import CpuProbe, host_features, linux_cpu_flags

    if system == "Linux":  # the kernel's flags line, which archspec's Linux detection reads
        # too: read directly, far cheaper than importing archspec, a large part of a
        # shipped executable's first call
        try:
            listed = linux_cpu_flags(read_proc_cpuinfo())
        except OSError:
            listed = frozenset()
        if listed:
            return host_features(CpuProbe(system, frozenset(listed)))
    try:
        import archspec.cpu
        from archspec.cpu import detect

        for factory in detect.INFO_FACTORY.get(system, ()):
            try:
                listed = frozenset(factory().features)
            except Exception:
                continue
            if listed or system != "Darwin":
                return host_features(CpuProbe(system, listed))
            model = archspec.cpu.host()
            return host_features(CpuProbe(system, listed, model.name, model.vendor,
                                          frozenset(model.features)))
    except Exception:  # not installed, or a machine it does not know: no features
        return None
    return None


@functools.cache
def this_host(platform_name: str = "cpu") -> Host:
    """This process, as executables of ``platform_name`` (``cpu``, ``tpu``, ``cuda``...) are
    matched against it (read once: none of it changes while a process runs). A process
    without such devices has a description with none (every device target's executable is
    then "no"), read at the first device target's record; an accelerator's host reads no CPU
    features (none of its records needs them)."""
    import jax
    import jaxlib

    from hatch_jaxexport.formats.cpu_targets import codegen_xla_flags, machine_name

    identity = device_identity(platform_name)
    system = platform.system()
    return Host(jax.__version__, jaxlib.__version__, platform_name,
                identity[0] if identity is not None else "", machine_name(platform.machine()),
                _cpu_flags(system) if platform_name == "cpu" else None,
                tuple(codegen_xla_flags(os.environ.get("XLA_FLAGS", ""))), system,
                describe=functools.partial(_device_description, platform_name, identity))


def _device_description(platform_name: str, identity: tuple[str, str, int] | None
                        ) -> DeviceDescription:
    """This process's backend of ``platform_name`` (``identity``: ``device_identity``'s
    version, device kind and count, ``None`` without such devices) as a device target records
    it, with the backend options of this process's environment."""
    import jax
    import jaxlib

    from hatch_jaxexport.formats.device_targets import DeviceDescription, backend_flags

    version, kind, count = identity if identity is not None else ("", "", 0)
    return DeviceDescription(platform_name if identity is not None else "", kind, count,
                             version, jax.__version__, jaxlib.__version__,
                             backend_flags(platform_name, os.environ))


def mismatch(record: ExecutableRecord, host: Host) -> str | None:
    """Why ``record`` cannot run in this process, or ``None`` when it matches exactly: a
    device target's description (``formats.device_targets``), then what every executable
    must match, then for a CPU executable the CPU features it needs."""
    if record.device_kind:  # a device target (``device_targets.is_device_record``)
        from hatch_jaxexport.formats.device_targets import description_mismatch

        device = host.device_description()
        if device is None:
            return "this process's devices were not read"
        why = description_mismatch(record, device)
        if why is not None:
            return why
    for field, wanted, have in (("jax", record.jax_version, host.jax_version),
                                ("jaxlib", record.jaxlib_version, host.jaxlib_version),
                                ("backend", record.backend, host.backend),
                                ("backend version", record.platform_version,
                                 host.platform_version),
                                ("machine", record.machine, host.machine)):
        if wanted != have:
            return f"compiled for {field} {wanted}, this process has {have}"
    if host.xla_flags:
        return f"XLA_FLAGS sets {' '.join(host.xla_flags)}, which may change code generation"
    if record.backend != "cpu":  # a device's executable: no object code of the host's
        return None
    # The builder's OS (``ExecutableRecord.system``, from the executable's target triple): the
    # code is its object format and calling convention. Records made before it was recorded
    # are used on Linux only, as they always were.
    built_on = record.system
    if built_on and built_on != host.system:
        return f"compiled on {built_on}, this process runs on {host.system}"
    if not built_on and host.system != "Linux":
        return f"the executable does not say which OS compiled it (only Linux, not " \
            f"{host.system}, uses such executables)"
    if host.cpu_flags is None:
        return (f"{host.system} on {host.machine} does not say which CPU features it has "
                "(archspec found none)")
    if not record.cpu_features:
        return "the executable does not say which CPU features it needs"
    from hatch_jaxexport.formats.cpu_targets import missing_features

    missing = missing_features(record.cpu_features, host.cpu_flags, host.machine)
    if missing:
        return f"this CPU lacks {', '.join(missing)}"
    return None


class ShippedExecutables:
    """The shipped executables of one artifact, chosen per call signature.

    Args:
        records: The artifact's ``ExecutableRecord``s.
        read: Reads and verifies an executable's bytes (size and SHA-256) by record.
        out_tree: The artifact's output tree (read lazily: only a match needs it).
        name: The function's name, for messages.
        platform: The artifact's platform: the backend whose description the records are
            matched against, and whose first local device an executable is loaded onto.
        companions: The package's companion wheels of that platform
            (``artifacts.installed_companions.Companion``), whose executables are among
            ``records`` where usable; each one's ``problem`` says why not. An installed one
            that is wrong (another build, installed twice, damaged) is told once, as a
            damaged executable is: strict mode raises it at the first call that would use it.
    """

    def __init__(self, records: Sequence[ExecutableRecord], read: Callable[[Any], bytes],
                 out_tree: Callable[[], Any], name: str, platform: str = "cpu",
                 companions: Sequence[Any] = ()) -> None:
        self.records = list(records)
        self.companions = list(companions)
        #: The files of ``records`` that a companion wheel holds (``_load`` names it).
        self.in_companion = {r.file: c.record.distribution for c in self.companions
                             for r in records if c.holds(r)}
        #: Why executables this process tried were refused (``why_not`` says it).
        self.refused: list[str] = []
        self.platform = platform
        self.read = read
        self.out_tree = out_tree
        self.name = name
        self.lock = threading.Lock()
        self.usable: list[ExecutableRecord] | None = None
        #: Flat argument types -> the target of the executable loaded for them.
        self.used: dict[str, str] = {}

    def _usable(self) -> list[ExecutableRecord]:
        """The records this process could run, most CPU features first."""
        if self.usable is None:
            host = this_host(self.platform)
            matching = [r for r in self.records if mismatch(r, host) is None]
            self.usable = sorted(matching, key=lambda r: -len(r.cpu_features))
        return self.usable

    def compiled_for(self, leaves: Sequence[tuple[Any, str, bool]], in_tree: Any) -> Any | None:
        """A loaded executable for these flat argument types (shape, dtype, weak), or ``None``.

        Weak types do not matter: an artifact's inputs are strong, and a weak-typed array of
        the input's dtype holds the same buffer (``entries.artifact_types``)."""
        if not shipped_executables_wanted():
            return None
        if self.companions:
            self._check_companions()
        if not self.records:
            return None
        wanted = [[list(shape), dtype] for shape, dtype, _ in leaves]
        with self.lock:
            for record in self._usable():
                if record.inputs == wanted:
                    compiled = self._load(record, in_tree)
                    if compiled is not None:
                        self.used[signature_text(wanted)] = record.target
                    return compiled
        return None

    def why_not(self, leaves: Sequence[tuple[Any, str, bool]]) -> str:
        """Why no shipped executable serves these flat argument types (``compiled_for`` gave
        ``None``): switched off, none for these types, or why this process cannot run those
        compiled for them."""
        if not shipped_executables_wanted():
            return "HATCH_JAXEXPORT_EXECUTABLES=0 turns them off"
        wanted = [[list(shape), dtype] for shape, dtype, _ in leaves]
        for_these = [r for r in self.records if r.inputs == wanted]
        unused = "".join(f"; {why}" for why in (*self.refused, *(
            c.problem for c in self.companions if c.problem)))
        if not for_these:
            shipped = sorted({signature_text(r.inputs) for r in self.records})
            return (f"none for {signature_text(wanted)}; the wheel has them for "
                    f"{'; '.join(shipped) or 'no signature'}{unused}")
        host = this_host(self.platform)
        reasons = [f"{r.target}: {mismatch(r, host) or 'unusable'}" for r in for_these]
        return "; ".join(dict.fromkeys(reasons)) + unused

    def _check_companions(self) -> None:
        """Tell once of installed companion wheels that are wrong (the logger, as a call the
        wheel does not cover: the user's process sees nothing new, ``call_report()`` names
        it), or raise it in strict mode; a missing one is the user's choice."""
        # imported here: only a wheel split into companion wheels has any
        from hatch_jaxexport.runtime.artifacts.installed_companions import strict_problem

        problem = strict_problem(self.companions)
        if problem and strict_mode():
            raise ArtifactError(f"{self.name}: {problem} (HATCH_JAXEXPORT_STRICT is set)")
        if problem:
            # imported here: only a companion that cannot serve has something to tell
            from hatch_jaxexport.runtime.notices import DROP_IN, notify

            for companion in self.companions:
                if companion.problem and not companion.missing and not companion.told:
                    companion.told = True
                    notify(f"{self.name}: {companion.problem}; compiling the artifact instead",
                           FallbackWarning, DROP_IN)
        self.companions = [c for c in self.companions if c.problem]

    def _load(self, record: ExecutableRecord, in_tree: Any) -> Any | None:
        try:
            blob = self.read(record)
            return compiled_from_executable(blob, record.inputs, record.outputs, in_tree,
                                            self.out_tree(), self.name, self.platform)
        except Exception as err:
            companion = self.in_companion.get(record.file)
            where = f" of the companion wheel {companion}" if companion else ""
            reason = (f"{self.name}: shipped executable {record.file}{where} is unusable "
                      f"({type(err).__name__}: {err}); compiling the artifact instead")
            if strict_mode():
                raise ArtifactError(f"{reason} (HATCH_JAXEXPORT_STRICT is set)") from None
            # imported here: only a damaged install has something to tell
            from hatch_jaxexport.runtime.notices import DROP_IN, NEEDS_FIX, notify

            # a damaged install: served all the same; a companion's, silently (the
            # report says it), as a companion of another build is
            notify(reason, FallbackWarning, DROP_IN if companion else NEEDS_FIX)
            self.refused.append(reason)
            self.records.remove(record)
            self.usable = None
            return None


__all__ = ["Host", "ShippedExecutables", "mismatch", "read_proc_cpuinfo", "this_host"]
