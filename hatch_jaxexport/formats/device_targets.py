"""Precompiled executables' device targets: an accelerator (a TPU, a GPU) described exactly.

An executable compiled by a TPU's or GPU's backend runs only on that backend: the same device
kind (``TPU v5 lite``, ``NVIDIA H100 80GB HBM3``), a backend of the same build (its platform
version: libtpu's build, the CUDA driver stack) and the same jax and jaxlib. Unlike XLA:CPU's
instruction sets there is nothing finer to check, and nothing to check it with on a user's
machine but what the backend says of itself. So a device target is that description, recorded
in the executable's manifest record (``formats.manifest.ExecutableRecord``: ``backend``,
``device_kind``, ``device_count``, ``platform_version``, ``jax_version``, ``jaxlib_version``,
``backend_flags``) and compared field by field with the running process's
(``DeviceDescription``), and an executable is used only where every field is the same. The
backend's compiler options from the environment (``LIBTPU_INIT_ARGS``) are part of the
description: TPU VM images set them in every process, the compiling one included, so an
executable compiled under them is used where the same options are set, and nowhere else. It is
the same kind of target as ``formats.cpu_targets``' (one record, one ``target`` name, one match
before anything is loaded), compiled by ``jaxexport compile-executables`` on a machine with the
device instead of by the build.

Pure: no jax, nothing read at import. The runtime builds a ``DeviceDescription`` from jax
(``runtime.executables.shipped.this_host``); tests feed recorded ones of a TPU on any machine.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

#: The platforms (jax.export's names) whose executables are described by their device.
ACCELERATOR_PLATFORMS = ("tpu", "cuda", "rocm")

#: Environment variables that pass compiler options to an accelerator's backend: a process
#: whose options differ from those the executable was compiled under may compile other code
#: than it holds, so it is not used there.
BACKEND_FLAG_VARIABLES = {"tpu": "LIBTPU_INIT_ARGS"}

#: Backend options measured to leave a compiled program as it is, byte for byte: an executable
#: compiled without one is the one a process with it would compile, so matching leaves them
#: out on both sides. ``--xla_tpu_use_enhanced_launch_barrier=true`` is added by jax itself
#: (``cloud_tpu_init``) in every process that starts a TPU backend, and by nothing in a
#: deviceless build; libtpu 0.0.42.1 compiled the same bytes with it,
#: with ``=false`` and with none, deviceless (``tests/integration/test_deviceless_tpu.py``), and
#: on the TPU itself (docs/gpu.md). Every other option counts: one that changes the scheduler
#: or rematerialization changes the bytes.
PROGRAM_NEUTRAL_FLAGS = frozenset({"--xla_tpu_use_enhanced_launch_barrier=true",
                                   "--xla_tpu_use_enhanced_launch_barrier=false"})


def program_flags(flags: str) -> str:
    """``flags`` without the options that leave a compiled program as it is
    (``PROGRAM_NEUTRAL_FLAGS``): what an executable's match compares."""
    return " ".join(word for word in flags.split() if word not in PROGRAM_NEUTRAL_FLAGS)


def backend_flags(platform: str, environ: Mapping[str, str]) -> str:
    """The backend options ``environ`` sets for ``platform`` (``BACKEND_FLAG_VARIABLES``),
    normalized as the compiler and the loader both record them: split on whitespace and
    joined by one space (``""``: none set, or a platform without such a variable)."""
    variable = BACKEND_FLAG_VARIABLES.get(platform)
    return " ".join(environ.get(variable, "").split()) if variable else ""


class DeviceDescription:
    """What a process's backend says of itself, in the terms a device target records (a slotted
    class, as ``formats.cpu_targets.Target`` says why).

    ``device_count`` is the number of the backend's devices this process has (local
    devices): an executable compiled for N devices needs at least N."""

    __slots__ = ("backend_flags", "device_count", "device_kind", "jax_version",
                 "jaxlib_version", "platform", "platform_version")

    def __init__(self, platform: str, device_kind: str, device_count: int,
                 platform_version: str, jax_version: str, jaxlib_version: str,
                 backend_flags: str = "") -> None:
        #: jax.export's name of the platform (``tpu``, ``cuda``, ``rocm``; ``cpu``).
        self.platform = platform
        self.device_kind, self.device_count = device_kind, device_count
        self.platform_version = platform_version
        self.jax_version, self.jaxlib_version = jax_version, jaxlib_version
        #: The backend's compiler options from the environment (``backend_flags``).
        self.backend_flags = " ".join(backend_flags.split())

    def to_json(self) -> dict[str, Any]:
        """The description as JSON (``compile-executables`` prints it, tests record it)."""
        return {name: getattr(self, name) for name in self.__slots__}


def device_target_name(platform: str, device_kind: str, host_device_count: int = 0) -> str:
    """The target name of executables compiled for ``device_kind`` on ``platform``:
    ``tpu-v5-lite`` for ``TPU v5 lite``, ``cuda-nvidia-h100-80gb-hbm3``; a name that can be part
    of a file name (letters, digits and ``-``) and never one of ``cpu_targets.TARGETS``. Where
    the host it was compiled for has more than one device, their number follows
    (``tpu-v5-lite-x4``): the same program compiles to other bytes on another host."""
    slug = "".join(c if c.isascii() and c.isalnum() else " " for c in device_kind.lower())
    words = slug.split()
    if words and words[0] == platform:
        words = words[1:]
    host = [f"x{host_device_count}"] if host_device_count > 1 else []
    return "-".join([platform, *words[:11], *host])


def is_device_record(record: Any) -> bool:
    """Whether an ``ExecutableRecord`` has a device target (its device kind recorded): those
    are matched by ``description_mismatch``; CPU targets by their features."""
    return bool(record.device_kind)


def description_mismatch(record: Any, have: DeviceDescription) -> str | None:
    """Why an executable with a device target (``record``, an ``ExecutableRecord``) cannot run
    in the process ``have`` describes; ``None`` when every field matches (and the process has
    as many devices as it was compiled for). The backend options must be the same, word for
    word: the ones it was compiled under, or none where it was compiled under none."""
    if record.backend != have.platform:
        return f"compiled for {record.backend}, this process runs {have.platform or 'no device'}"
    for field, wanted, found in (("device kind", record.device_kind, have.device_kind),
                                 ("jax", record.jax_version, have.jax_version),
                                 ("jaxlib", record.jaxlib_version, have.jaxlib_version),
                                 ("backend version", record.platform_version,
                                  have.platform_version)):
        if wanted != found:
            return f"compiled for {field} {_short(wanted)}, this process has {_short(found)}"
    if record.device_count > have.device_count:
        return (f"compiled for {record.device_count} {record.backend} device(s), this process "
                f"has {have.device_count}")
    host = record.host_device_count
    if host and host != have.device_count:
        return (f"compiled for a host of {host} {record.backend} device(s), this process has "
                f"{have.device_count}")
    wanted_flags = program_flags(record.backend_flags)
    if wanted_flags != program_flags(have.backend_flags):
        variable = BACKEND_FLAG_VARIABLES.get(record.backend, "backend options")
        return (f"compiled with {variable} {_short(wanted_flags)!r}, this process has "
                f"{_short(have.backend_flags)!r}")
    return None


def target_problem(record: Any, artifact_platform: str | None) -> str | None:
    """What is wrong with a device target's record (``verify``, the release check): its name
    must be ``device_target_name`` of its platform and device kind, it needs one device or
    more, and it must be compiled from an artifact of its platform. ``None`` for a CPU target's
    record or a sound one."""
    if not is_device_record(record):
        return None
    if record.backend not in (*ACCELERATOR_PLATFORMS, "cpu"):
        return f"its backend {record.backend!r} is not one of {', '.join(ACCELERATOR_PLATFORMS)}"
    host = record.host_device_count
    wanted = device_target_name(record.backend, record.device_kind, host)
    if record.target != wanted:
        return f"target {record.target!r} does not name its device ({wanted!r})"
    if record.device_count < 1:
        return f"device_count {record.device_count} (at least 1)"
    if host and host < record.device_count:
        return f"host_device_count {host} is less than its device_count {record.device_count}"
    if artifact_platform is not None and artifact_platform != record.backend:
        return f"compiled for {record.backend} from a {artifact_platform} artifact"
    return None


def target_text(record: Any) -> str:
    """``tpu-v5-lite (TPU v5 lite, 1 device)``: a target as ``inspect`` shows it, with the
    backend options it was compiled under where there were some (``..., LIBTPU_INIT_ARGS
    '--xla_tpu_use_enhanced_launch_barrier=true')``)."""
    if not is_device_record(record):
        return str(record.target)
    flags = ""
    if record.backend_flags:
        variable = BACKEND_FLAG_VARIABLES.get(record.backend, "backend options")
        flags = f", {variable} {_short(record.backend_flags)!r}"
    of_host = f" of a {record.host_device_count}-device host" \
        if record.host_device_count > 1 else ""
    built = f", compiled deviceless for {record.topology}" if record.topology else ""
    return f"{record.target} ({record.device_kind}, {record.device_count} device" \
        f"{'s' if record.device_count != 1 else ''}{of_host}{flags}{built})"


def _short(text: str) -> str:
    """A platform version on one line (libtpu's holds newlines), at most 120 characters."""
    flat = " ".join(str(text).split())
    return flat if len(flat) <= 120 else flat[:117] + "..."


__all__ = ["ACCELERATOR_PLATFORMS", "BACKEND_FLAG_VARIABLES", "PROGRAM_NEUTRAL_FLAGS",
           "DeviceDescription", "backend_flags", "description_mismatch", "device_target_name",
           "is_device_record", "program_flags", "target_problem", "target_text"]
