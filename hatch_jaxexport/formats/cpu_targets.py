"""Precompiled executables' targets, and whether this machine's CPU can run one.

XLA:CPU compiles for the host's instruction set: the executable's bytes carry the LLVM feature
string of the target (``+avx2,+avx512f,...``), and XLA only logs, does not refuse, when it loads
one on a CPU that lacks a feature, so running it risks SIGILL. A build therefore compiles each
target in a process whose ``XLA_FLAGS`` caps the instruction set, records the features the
executable was built for, and the loader compares them with what the operating system reports
before it loads anything. Any doubt (a feature it cannot map, an OS whose features it cannot
read, ``XLA_FLAGS`` that change code generation) means "no": the StableHLO is compiled instead.

What the OS reports is read by archspec (the runtime asks it; this module only interprets the
answer, a ``CpuProbe``, so that recorded answers of every OS can be tested on any machine):
Linux's ``/proc/cpuinfo``, macOS's ``sysctl`` and the ``cpuid`` instruction on Windows all come
back as feature names in ``/proc/cpuinfo`` spelling, which is what ``LLVM_TO_LINUX`` maps to.

Pure: no jax, nothing read at import.
"""

import re
from collections.abc import Iterable, Mapping


class Target:
    """A compile target: the machine it is for and the ``XLA_FLAGS`` that select it. A slotted
    class, not a NamedTuple: this module is imported by a first call a shipped executable
    serves, where creating a NamedTuple class costs 0.1-0.2 ms (``runtime.call.choice.Choice``
    says more)."""

    __slots__ = ("description", "machine", "name", "xla_flags")

    def __init__(self, name: str, machine: str, xla_flags: tuple[str, ...],
                 description: str) -> None:
        self.name = name
        #: ``platform.machine()`` of the builder and the user (``x86_64``, ``aarch64``).
        self.machine = machine
        self.xla_flags = xla_flags
        #: What the target is, for people (docs, ``inspect``).
        self.description = description


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

#: Other names of targets: the x86-64 micro-architecture levels of the psABI (GCC's and LLVM's
#: ``-march=x86-64-v3``), the names people know the two x86-64 targets by. Builds accept them and
#: record the ``TARGETS`` name, so wheels made before the aliases existed stay valid. (A level
#: is the target's instruction-set cap; the executable still needs the builder's other features,
#: such as SHA or ADX, which the loader checks.)
TARGET_ALIASES: dict[str, str] = {"x86-64-v3": "x86_64-avx2", "x86-64-v4": "x86_64-avx512"}

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
    # aarch64 (Linux's hwcap names, which archspec also gives for Apple's M-series)
    "neon": ("asimd",), "fp-armv8": ("fp",), "crc": ("crc32",), "lse": ("atomics",),
    "rdm": ("asimdrdm",), "fullfp16": ("fphp", "asimdhp"), "dotprod": ("asimddp",),
    "rcpc": ("lrcpc",), "fp16fml": ("asimdfhm",), "jsconv": ("jscvt",),
    "complxnum": ("fcma",), "ccpp": ("dcpop",), "ccdp": ("dcpodp",), "rand": ("rng",),
    "pauth": ("paca", "pacg"), "lse2": ("uscat",), "rcpc-immo": ("ilrcpc",),
    "altnzcv": ("flagm2",), "fptoint": ("frint",), "rcpc3": ("lrcpc3",),
    "sve-aes": ("sveaes",), "sve2-aes": ("sveaes",), "sve2-sha3": ("svesha3",),
    "sve2-sm4": ("svesm4",), "sve2-bitperm": ("svebitperm",), "f32mm": ("svef32mm",),
    "f64mm": ("svef64mm",),
}

#: LLVM aarch64 features whose name means more on aarch64 than the same host flag does (LLVM's
#: ``aes`` includes PMULL, ``sha2`` SHA-1, ``sha3`` SHA-512, ``sm4`` SM3), or that x86 spells the
#: same for something else: used for ``aarch64`` executables only.
AARCH64_LLVM_TO_LINUX: dict[str, tuple[str, ...]] = {
    "aes": ("aes", "pmull"), "sha2": ("sha1", "sha2"), "sha3": ("sha3", "sha512"),
    "sm4": ("sm3", "sm4"),
}

#: macOS's ``sysctl machdep.cpu`` names (lower-cased) of x86 features that archspec passes on
#: as they are, and ``/proc/cpuinfo``'s names of the same features (archspec converts a few
#: others itself: ``avx1.0``, ``sse4.2``, ``lahf``...). Exact renames only: one that implies
#: another feature would claim what the OS did not say.
DARWIN_TO_LINUX: dict[str, str] = {
    "sse3": "pni", "em64t": "lm", "prefetchw": "3dnowprefetch", "rdwrfsgs": "fsgsbase",
    "clfsh": "clflush", "xd": "nx", "1gbpage": "pdpe1gb", "mon": "monitor",
    "avx512vnni": "avx512_vnni", "avx512bitalg": "avx512_bitalg",
    "avx512vpcdq": "avx512_vpopcntdq",
}

#: LLVM features that select how code is scheduled or hardened, not which instructions it may
#: use (``prefer-no-gather``), or CPU protections XLA's code never relies on (shadow stacks,
#: indirect-branch tracking, which Linux shows only when the kernel enables them), x86
#: instructions only the kernel may run (``xsaves``, ``invpcid``, ``pconfig``, ``wbnoinvd``
#: fault outside ring 0, and macOS does not list them), or on aarch64
#: the architecture versions and facilities of the kernel and hypervisor (exception levels,
#: PAN, RAS, performance monitors, trace) that user code never executes, and Apple's zero-cycle
#: moves (``zcm``, ``zcz``, tuning): no host flag is needed for them. Nor for the hardware
#: random-number instructions (``rdrnd``, ``rdseed``): no XLA operation draws hardware entropy,
#: and Linux hides ``rdseed`` where it is unreliable (AMD's Zen 5 erratum) while cpuid, which
#: LLVM reads when XLA compiles on such a machine, still reports it.
#: (A prefix tuple and a set, not a regular expression: every first call of a shipped
#: executable checks its features, and compiling the pattern cost 0.3 ms of it.)
NOT_INSTRUCTION_PREFIXES = ("prefer-", "fast-", "slow-", "tuning-", "false-deps-", "idiom-",
                            "allow-light-", "retpoline", "lvi-", "harden-", "v8", "v9", "zcm",
                            "zcz")
NOT_INSTRUCTION_NAMES = frozenset({
    "macrofusion", "branchfusion", "shstk", "ibt", "outline-atomics",
    "xsaves", "invpcid", "pconfig", "wbnoinvd", "rdrnd", "rdseed",
    "el2vmsa", "el3", "vh", "pan", "pan-rwv", "lor", "uaops", "sel2", "tlb-rmi", "ras",
    "perfmon", "specrestrict", "ccidx", "predres", "nv", "mpam", "am", "spe", "trbe", "ete",
    "tracev8.4"})


def is_not_instruction(feature: str) -> bool:
    """Whether an LLVM feature needs no host flag (``NOT_INSTRUCTION_PREFIXES``/``_NAMES``)."""
    return feature in NOT_INSTRUCTION_NAMES or feature.startswith(NOT_INSTRUCTION_PREFIXES)

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


#: An LLVM target triple's OS part, as ``platform.system()`` names the OS.
_TRIPLE_SYSTEMS = {b"linux": "Linux", b"darwin": "Darwin", b"macosx": "Darwin",
                   b"macos": "Darwin", b"windows": "Windows"}
#: ``x86_64-unknown-linux-gnu``, ``arm64-apple-macosx14.0.0``, ``x86_64-pc-windows-msvc``.
_TRIPLE = rb"\b(?:x86_64|aarch64|arm64)-[a-z0-9_]+-(linux|darwin|macosx|macos|windows)"


def executable_system(executable: bytes) -> str | None:
    """The OS a serialized XLA:CPU executable was compiled for (``Linux``, ``Darwin``,
    ``Windows``), from the target triple XLA stores in it; ``None`` when none is found.

    Its code is an object file of that OS's format and calling convention: the same CPU
    features on another OS do not make it runnable there."""
    match = re.search(_TRIPLE, executable)
    return _TRIPLE_SYSTEMS[match.group(1)] if match else None


class CpuProbe:
    """What the operating system said about this CPU, as archspec read it (a slotted class,
    as ``Target`` says why).

    Recorded values of every OS can be fed to ``host_features`` on any machine: the runtime
    builds one from archspec's detection (``archspec.cpu.detect``) and ``archspec.cpu.host()``.
    """

    __slots__ = ("listed", "model", "model_features", "system", "vendor")

    def __init__(self, system: str, listed: frozenset[str], model: str = "", vendor: str = "",
                 model_features: frozenset[str] = frozenset()) -> None:
        #: ``platform.system()``: ``Linux``, ``Darwin``, ``Windows``.
        self.system = system
        #: The features the OS listed, in ``/proc/cpuinfo`` spelling: Linux's
        #: ``/proc/cpuinfo``, macOS's ``sysctl machdep.cpu`` on x86-64, ``cpuid`` on Windows
        #: x86-64. Empty where the OS lists none (macOS on Apple silicon, Windows on ARM).
        self.listed = listed
        #: The microarchitecture archspec matched (``m2``), its vendor and its known
        #: features: only read where the OS lists no features.
        self.model, self.vendor, self.model_features = model, vendor, model_features


def host_features(probe: CpuProbe) -> frozenset[str] | None:
    """This CPU's features in ``/proc/cpuinfo`` spelling, or ``None`` where they cannot be
    confirmed (then no shipped executable is used).

    Where the OS lists features they are taken as listed (macOS's x86 spellings renamed,
    ``DARWIN_TO_LINUX``). macOS on Apple silicon lists none in a form archspec reads; there
    archspec names the M-series model from ``machdep.cpu.brand_string`` and the model's
    features are those archspec knows for that model (every chip of one generation, Pro, Max
    or Ultra, has the same cores); a model newer than archspec knows is taken as the newest it
    knows, which has fewer.
    Anything else (Windows on ARM, an unknown model) is ``None``.
    """
    if probe.listed:
        if probe.system != "Darwin":
            return probe.listed
        return probe.listed | {DARWIN_TO_LINUX[f] for f in probe.listed if f in DARWIN_TO_LINUX}
    if probe.system == "Darwin" and probe.vendor == "Apple" and probe.model_features:
        return probe.model_features
    return None


def linux_cpu_flags(cpuinfo: str) -> frozenset[str]:
    """The feature flags of the first processor in a ``/proc/cpuinfo`` text (x86 ``flags``,
    ARM ``Features``); empty if it has none."""
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        if key.strip() in ("flags", "Features"):
            return frozenset(value.split())
    return frozenset()


def missing_features(required: Iterable[str], host_flags: frozenset[str],
                     machine: str | None = None) -> list[str]:
    """The required LLVM features this host lacks (or that cannot be mapped), sorted.

    ``machine`` (``aarch64``) selects the names that mean more on that machine
    (``AARCH64_LLVM_TO_LINUX``); a name neither table knows must be a host flag as it is."""
    special = AARCH64_LLVM_TO_LINUX if machine == "aarch64" else {}
    missing = []
    for feature in required:
        if is_not_instruction(feature):
            continue
        flags = special.get(feature) or LLVM_TO_LINUX.get(feature) or (
            feature.replace(".", "_").replace("-", "_"),)
        if not all(flag in host_flags for flag in flags):
            missing.append(feature)
    return sorted(missing)


def codegen_xla_flags(xla_flags: str) -> list[str]:
    """The entries of an ``XLA_FLAGS`` value that may change the code XLA generates."""
    return [flag for flag in xla_flags.split() if not re.match(NEUTRAL_XLA_FLAGS, flag)]


def canonical_target(name: str) -> str | None:
    """The ``TARGETS`` name of ``name`` (itself, or the target an alias names such as
    ``x86-64-v3``), ``None`` for an unknown name: what a build records in its manifest."""
    if name in TARGETS:
        return name
    return TARGET_ALIASES.get(name)


def default_targets(machine: str) -> list[str]:
    """The targets a build compiles when it asks for executables without naming any."""
    return [name for name, target in TARGETS.items() if target.machine == machine]


def machine_name(machine: str) -> str:
    """``platform.machine()`` in the spelling of ``TARGETS`` (``AMD64``/``arm64`` too)."""
    return {"amd64": "x86_64", "x64": "x86_64", "arm64": "aarch64"}.get(machine.lower(),
                                                                        machine.lower())


def describe_targets(targets: Mapping[str, Target] = TARGETS) -> str:
    """``x86_64-avx2 (x86-64-v3), x86_64-avx512 (x86-64-v4), aarch64``: the names and their
    aliases, for error messages."""
    aliases = {canonical: alias for alias, canonical in TARGET_ALIASES.items()}
    return ", ".join(f"{name} ({aliases[name]})" if name in aliases else name
                     for name in targets)


__all__ = ["AARCH64_LLVM_TO_LINUX", "DARWIN_TO_LINUX", "LLVM_TO_LINUX", "NEUTRAL_XLA_FLAGS",
           "NOT_INSTRUCTION_NAMES", "NOT_INSTRUCTION_PREFIXES", "TARGETS", "TARGET_ALIASES",
           "CpuProbe", "Target", "canonical_target", "codegen_xla_flags", "default_targets",
           "describe_targets", "executable_system", "host_features", "is_not_instruction",
           "linux_cpu_flags", "machine_name", "missing_features", "required_features"]
