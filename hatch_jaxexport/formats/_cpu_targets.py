"""Precompiled executables' targets, and whether this machine's CPU can run one.

XLA:CPU compiles for the host's instruction set: the executable's bytes carry the LLVM feature
string of the target (``+avx2,+avx512f,...``), and XLA only logs, does not refuse, when it loads
one on a CPU that lacks a feature, so running it risks SIGILL. A build therefore compiles each
target in a process whose ``XLA_FLAGS`` caps the instruction set, records the features the
executable was built for, and the loader compares them with what the operating system reports
before it loads anything. Any doubt (a feature it cannot map, an OS whose features it cannot
read, ``XLA_FLAGS`` that change code generation) means "no": the StableHLO is compiled instead.

Pure: no jax, nothing read at import.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import NamedTuple


class Target(NamedTuple):
    """A compile target: the machine it is for and the ``XLA_FLAGS`` that select it."""

    name: str
    #: ``platform.machine()`` of the builder and the user (``x86_64``, ``aarch64``).
    machine: str
    xla_flags: tuple[str, ...]
    #: What the target is, for people (docs, ``inspect``).
    description: str


#: Every target a build can name. An x86-64 target keeps the builder's features up to the
#: instruction set it names (AVX2 drops every AVX-512 feature), so a target runs on CPUs that
#: have at least the builder's features of that level.
TARGETS: dict[str, Target] = {
    "x86_64-avx2": Target("x86_64-avx2", "x86_64", ("--xla_cpu_max_isa=AVX2",),
                          "x86-64 up to AVX2 (the baseline of most CPUs since 2015)"),
    "x86_64-avx512": Target("x86_64-avx512", "x86_64", ("--xla_cpu_max_isa=AVX512",),
                            "x86-64 up to AVX-512"),
    "aarch64": Target("aarch64", "aarch64", (), "64-bit ARM, the builder's features"),
}

#: LLVM feature names that differ from Linux's ``/proc/cpuinfo`` flags. Others match once
#: ``.`` and ``-`` become ``_`` (``sse4.2`` -> ``sse4_2``, ``amx-tile`` -> ``amx_tile``).
LLVM_TO_LINUX: dict[str, tuple[str, ...]] = {
    # x86-64
    "64bit": ("lm",), "bmi": ("bmi1",), "crc32": ("sse4_2",), "lzcnt": ("abm",),
    "pclmul": ("pclmulqdq",), "prfchw": ("3dnowprefetch",), "rdrnd": ("rdrand",),
    "sahf": ("lahf_lm",), "sha": ("sha_ni",), "sse3": ("pni",), "x87": ("fpu",),
    "cx8": ("cx8",), "avx512bf16": ("avx512_bf16",), "avx512bitalg": ("avx512_bitalg",),
    "avx512vbmi2": ("avx512_vbmi2",), "avx512vnni": ("avx512_vnni",),
    "avx512vpopcntdq": ("avx512_vpopcntdq",), "avx512vp2intersect": ("avx512_vp2intersect",),
    "avx512fp16": ("avx512_fp16",), "avxvnni": ("avx_vnni",), "avxifma": ("avx_ifma",),
    "avxvnniint8": ("avx_vnni_int8",), "avxneconvert": ("avx_ne_convert",),
    "evex512": ("avx512f",), "kl": ("keylocker",),
    # aarch64
    "neon": ("asimd",), "fp-armv8": ("fp",), "crc": ("crc32",), "lse": ("atomics",),
    "rdm": ("asimdrdm",), "fullfp16": ("fphp", "asimdhp"), "dotprod": ("asimddp",),
    "rcpc": ("lrcpc",), "sha2": ("sha2",), "sha3": ("sha3",), "sm4": ("sm4",),
    "fp16fml": ("asimdfhm",), "jsconv": ("jscvt",), "complxnum": ("fcma",),
    "ccpp": ("dcpop",), "i8mm": ("i8mm",), "bf16": ("bf16",), "sve": ("sve",),
    "sve2": ("sve2",), "rand": ("rng",), "flagm": ("flagm",), "ssbs": ("ssbs",),
    "sb": ("sb",), "pauth": ("paca", "pacg"), "bti": ("bt",), "mte": ("mte",),
}

#: LLVM features that select how code is scheduled or hardened, not which instructions it may
#: use (``prefer-no-gather``), or CPU protections XLA's code never relies on (shadow stacks,
#: indirect-branch tracking, which Linux shows only when the kernel enables them): no host
#: flag is needed for them.
NOT_INSTRUCTIONS = re.compile(r"^(prefer-|fast-|slow-|tuning-|false-deps-|idiom-|"
                              r"allow-light-|retpoline|lvi-|harden-|macrofusion$|"
                              r"branchfusion$|shstk$|ibt$|v8|v9|outline-atomics$)")

#: ``XLA_FLAGS`` entries that do not change the code XLA generates (dumps, device counts);
#: any other flag in the user's ``XLA_FLAGS`` means a shipped executable may not be what this
#: process would compile, so it is not used.
#: (A pattern's text: ``re`` compiles it on its first use, so a process that loads an executable
#: without ``XLA_FLAGS`` set never pays for it.)
NEUTRAL_XLA_FLAGS = (r"^--(xla_dump_|xla_force_host_platform_device_count|"
                     r"xla_log_|xla_hlo_profile$|xla_gpu_)")

#: A run of five or more ``+name``/``-name`` entries joined by commas: LLVM's feature string.
#: (Only a build searches for it: compiled by ``re`` on that first use.)
_FEATURE_STRING = rb"(?:[+-][a-z0-9][A-Za-z0-9_.\-]*,){4,}[+-][a-z0-9][A-Za-z0-9_.\-]*"


def required_features(executable: bytes) -> list[str]:
    """The features a serialized XLA:CPU executable was compiled for (``+`` entries), sorted.

    XLA stores the target's LLVM feature string in the executable; ``[]`` when none is found
    (then the loader cannot prove the executable runs here, and does not use it).
    """
    found: set[str] = set()
    for match in re.finditer(_FEATURE_STRING, executable):
        for item in match.group(0).decode("ascii").split(","):
            if item.startswith("+"):
                found.add(item[1:])
    return sorted(found)


def linux_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in a ``/proc/cpuinfo`` text (x86 ``flags``,
    ARM ``Features``); empty if it has none."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def missing_features(required: Iterable[str], host_flags: frozenset[str]) -> list[str]:
    """The required LLVM features this host lacks (or that cannot be mapped), sorted."""
    missing = []
    for feature in required:
        if NOT_INSTRUCTIONS.match(feature):
            continue
        flags = LLVM_TO_LINUX.get(feature) or (feature.replace(".", "_").replace("-", "_"),)
        if not all(flag in host_flags for flag in flags):
            missing.append(feature)
    return sorted(missing)


def codegen_xla_flags(xla_flags: str) -> list[str]:
    """The entries of an ``XLA_FLAGS`` value that may change the code XLA generates."""
    return [flag for flag in xla_flags.split() if not re.match(NEUTRAL_XLA_FLAGS, flag)]


def default_targets(machine: str) -> list[str]:
    """The targets a build compiles when it asks for executables without naming any."""
    return [name for name, target in TARGETS.items() if target.machine == machine]


def machine_name(machine: str) -> str:
    """``platform.machine()`` in the spelling of ``TARGETS`` (``AMD64``/``arm64`` too)."""
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(machine.lower(),
                                                                        machine.lower())


def describe_targets(targets: Mapping[str, Target] = TARGETS) -> str:
    """``x86_64-avx2, x86_64-avx512, aarch64``: the names, for error messages."""
    return ", ".join(targets)


__all__ = ["LLVM_TO_LINUX", "NEUTRAL_XLA_FLAGS", "NOT_INSTRUCTIONS", "TARGETS", "Target",
           "codegen_xla_flags", "default_targets", "describe_targets", "linux_cpu_flags",
           "machine_name", "missing_features", "required_features"]
