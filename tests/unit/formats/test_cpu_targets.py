"""Targets of precompiled executables, and the CPU-feature check made before loading one."""

from __future__ import annotations

import io
import json
import warnings
from pathlib import Path
from types import SimpleNamespace

import pytest
from archspec.cpu import detect

from hatch_jaxexport.formats.cpu_targets import (
    TARGET_ALIASES,
    TARGETS,
    CpuProbe,
    canonical_target,
    codegen_xla_flags,
    default_targets,
    describe_targets,
    executable_system,
    host_features,
    is_not_instruction,
    linux_cpu_flags,
    machine_name,
    missing_features,
    required_features,
)
from hatch_jaxexport.formats.manifest import ExecutableRecord
from hatch_jaxexport.runtime.executables import shipped
from hatch_jaxexport.runtime.executables.shipped import Host, _cpu_flags, mismatch

X86_FLAGS = ("fpu lm sse sse2 pni pclmulqdq ssse3 fma cx16 sse4_1 sse4_2 movbe popcnt aes avx "
             "f16c rdrand lahf_lm abm 3dnowprefetch bmi1 avx2 bmi2 sha_ni")
X86_CPUINFO = (f"processor\t: 0\nvendor_id\t: AuthenticAMD\nflags\t\t: {X86_FLAGS}\n\n"
               "processor\t: 1\nflags\t\t: fpu\n")
ARM_CPUINFO = "processor\t: 0\nFeatures\t: fp asimd aes pmull sha1 sha2 crc32 atomics asimdrdm\n"


def test_cpuinfo_flags_of_the_first_processor():
    flags = linux_cpu_flags(X86_CPUINFO)
    assert "avx2" in flags and "sha_ni" in flags and len(flags) > 5
    assert linux_cpu_flags(ARM_CPUINFO) >= {"asimd", "atomics", "crc32"}
    assert linux_cpu_flags("model name : something\n") == frozenset()


@pytest.mark.parametrize("llvm, present", [
    ("avx2", True), ("sse4.2", True), ("64bit", True), ("sse3", True), ("bmi", True),
    ("lzcnt", True), ("pclmul", True), ("prfchw", True), ("rdrnd", True), ("sahf", True),
    ("sha", True), ("crc32", True), ("avx512f", False), ("avx512bw", False),
    ("amx-tile", False), ("some-future-extension", False),
    # tuning and hardening features need no instruction of the host
    ("prefer-no-gather", True), ("fast-variable-perlane-shuffle", True), ("shstk", True),
])
def test_llvm_features_map_to_linux_flags(llvm, present):
    assert (missing_features([llvm], linux_cpu_flags(X86_CPUINFO)) == []) is present


@pytest.mark.parametrize("feature, needs_no_flag", [
    # each prefix, with what follows it
    ("prefer-256-bit", True), ("fast-gather", True), ("slow-3ops-lea", True),
    ("tuning-fast-imm-vector-shift", True), ("false-deps-popcnt", True), ("idiom-x", True),
    ("allow-light-256-bit", True), ("retpoline-indirect-calls", True), ("lvi-cfi", True),
    ("harden-sls-ret", True), ("v8.2a", True), ("v9a", True), ("zcm", True), ("zcz-gp", True),
    # the exact names: only as they are
    ("macrofusion", True), ("shstk", True), ("outline-atomics", True), ("xsaves", True),
    ("rdseed", True), ("pan", True), ("pan-rwv", True), ("ras", True), ("am", True),
    ("tracev8.4", True), ("tracev8x4", False), ("pans", False), ("rasx", False),
    ("amx-tile", False), ("xsave", False), ("ibt-x", False), ("avx2", False),
    ("sve", False), ("fastx", False),
])
def test_features_that_need_no_host_flag(feature, needs_no_flag):
    """Scheduling, hardening, kernel-only and architecture-version features: a prefix or an
    exact name each (``pan`` is one, ``pans`` is not)."""
    assert is_not_instruction(feature) is needs_no_flag
    assert (missing_features([feature], frozenset()) == []) is needs_no_flag


def test_aarch64_features_map_to_linux_flags():
    flags = linux_cpu_flags(ARM_CPUINFO)
    assert missing_features(["neon", "fp-armv8", "crc", "lse", "rdm", "aes", "v8.2a"], flags) == []
    assert missing_features(["sve", "dotprod"], flags) == ["dotprod", "sve"]


def test_required_features_read_from_executable_bytes():
    blob = (b"\x00\x12junk" + b"+64bit,+adx,+avx,+avx2,-avx512f,+sse4.2,+prefer-no-gather"
            + b"\x00more junk, +not,+a,+list")
    assert required_features(blob) == ["64bit", "adx", "avx", "avx2", "prefer-no-gather",
                                       "sse4.2"]
    assert required_features(b"no features here") == []


def test_xla_flags_that_may_change_code_generation():
    assert codegen_xla_flags("") == []
    assert codegen_xla_flags("--xla_force_host_platform_device_count=8 --xla_dump_to=/tmp") == []
    assert codegen_xla_flags("--xla_cpu_max_isa=AVX2 --xla_dump_to=/x") == [
        "--xla_cpu_max_isa=AVX2"]


def test_targets_per_machine():
    assert default_targets("x86_64") == ["x86_64-avx2", "x86_64-avx512"]
    assert default_targets("aarch64") == ["aarch64"]
    assert default_targets("riscv64") == []
    assert machine_name("AMD64") == "x86_64" and machine_name("arm64") == "aarch64"
    assert TARGETS["x86_64-avx2"].xla_flags == ("--xla_cpu_max_isa=AVX2",)


# --- every host users run: recorded probe outputs through archspec -------------------------
# The files in probes/ are representative outputs of each OS (see their first lines), not
# captured on this project's machines: only Linux x86-64 runs here. Each is fed to archspec's
# own detection for that OS (its I/O replaced by the recording), then through the runtime's
# `_cpu_flags` and `host_features`, exactly as `this_host()` does on such a machine.

PROBES = Path(__file__).parent / "probes"

#: What a host needs of an executable compiled on a Skylake-class x86-64 builder: the x86_64-avx2
#: target's features (AVX2 level, the builder's other features), and the x86_64-avx512 target's.
X86_AVX2_EXECUTABLE = ["64bit", "adx", "aes", "avx", "avx2", "bmi", "bmi2", "clflushopt", "cmov",
                       "crc32", "cx16", "cx8", "f16c", "fma", "fsgsbase", "fxsr", "invpcid",
                       "lzcnt", "mmx", "movbe", "pclmul", "popcnt", "prfchw", "rdrnd", "rdseed",
                       "sahf", "sse", "sse2", "sse3", "sse4.1", "sse4.2", "ssse3", "x87",
                       "xsave", "xsavec", "xsaveopt", "xsaves"]
X86_AVX512_EXECUTABLE = [*X86_AVX2_EXECUTABLE, "avx512f", "avx512dq", "avx512cd", "avx512bw",
                         "avx512vl", "evex512"]
#: An executable compiled on an Apple M1 (LLVM's names, the architecture versions and the
#: system-level features included).
M1_EXECUTABLE = ["aes", "altnzcv", "ccdp", "ccidx", "ccpp", "complxnum", "crc", "dit", "dotprod",
                 "flagm", "fp-armv8", "fp16fml", "fptoint", "fullfp16", "jsconv", "lse", "lse2",
                 "neon", "pauth", "perfmon", "predres", "ras", "rcpc", "rcpc-immo", "rdm", "sb",
                 "sha2", "sha3", "specrestrict", "ssbs", "v8.5a", "vh", "zcm", "zcz"]


class _RecordedCpuid:
    """archspec's ``CPUID`` answering from a recording (``registers_for(eax, ecx)``)."""

    def __init__(self, registers: dict[str, list[str]]) -> None:
        self.registers = {tuple(int(part, 16) for part in key.split(",")): values
                          for key, values in registers.items()}

    def registers_for(self, eax: int, ecx: int = 0) -> SimpleNamespace:
        values = self.registers.get((eax, ecx), ["0x0"] * 4)
        return SimpleNamespace(**dict(zip(("eax", "ebx", "ecx", "edx"),
                                          (int(v, 16) for v in values), strict=True)))


def _recording(name: str) -> str:
    lines = (PROBES / name).read_text().splitlines(keepends=True)
    return "".join(line for line in lines if not line.startswith("#"))


@pytest.fixture
def recorded_host(monkeypatch):
    """``recorded_host(system, machine, probe file)``: archspec sees that OS, machine and
    recording; its caches are cleared before and after, so nothing leaks to other tests."""
    def clear():
        for cached in (detect._machine, detect.host, detect._darwin_sysctl_data):
            cached.cache_clear()

    def use(system: str, machine: str, name: str) -> frozenset[str] | None:
        clear()
        monkeypatch.setattr(detect.platform, "system", lambda: system)
        monkeypatch.setattr(detect.platform, "machine", lambda: machine)
        if name.endswith(".cpuinfo"):
            text = _recording(name)
            monkeypatch.setattr(detect, "open", lambda *a, **k: io.StringIO(text),
                                raising=False)
            monkeypatch.setattr(shipped, "read_proc_cpuinfo", lambda: text)
        elif name.endswith(".sysctl"):
            text = _recording(name)
            monkeypatch.setattr(detect, "_check_output", lambda args, env: text)
        else:
            registers = json.loads((PROBES / name).read_text())["registers"]
            monkeypatch.setattr(detect, "CPUID", lambda: _RecordedCpuid(registers))
        return _cpu_flags(system)

    yield use
    monkeypatch.undo()
    clear()


@pytest.mark.parametrize("system, machine, name, has, lacks", [
    ("Linux", "x86_64", "linux-x86_64-coffeelake.cpuinfo", {"avx2", "fma", "lm"},
     {"avx512f", "sha_ni"}),
    ("Linux", "x86_64", "linux-x86_64-icelake-server.cpuinfo", {"avx512f", "avx512_vnni"},
     {"amx_tile"}),
    ("Linux", "aarch64", "linux-aarch64-graviton3.cpuinfo", {"asimd", "sve", "bf16", "i8mm"},
     {"sve2", "sme"}),
    ("Darwin", "arm64", "macos-arm64-m1.sysctl", {"asimd", "atomics", "asimddp", "sha3"},
     {"bf16", "i8mm", "sme"}),
    ("Darwin", "arm64", "macos-arm64-m2pro.sysctl", {"bf16", "i8mm", "bti"}, {"sme"}),
    ("Darwin", "arm64", "macos-arm64-m4max.sysctl", {"bf16", "sme", "sme2"}, {"sve"}),
    ("Darwin", "x86_64", "macos-x86_64-coffeelake.sysctl", {"avx2", "pni", "lm", "lahf_lm",
                                                            "abm", "3dnowprefetch"}, {"avx512f"}),
    ("Darwin", "x86_64", "macos-x86_64-imacpro.sysctl", {"avx512f", "avx512bw", "fsgsbase"},
     {"avx512_vnni"}),
    ("Windows", "AMD64", "windows-x86_64-coffeelake.cpuid.json", {"avx2", "lm", "pni", "abm"},
     {"avx512f"}),
    ("Windows", "AMD64", "windows-x86_64-icelake-server.cpuid.json", {"avx512f", "avx512_vnni",
                                                                     "sha_ni"}, {"amx_tile"}),
])
def test_each_os_recorded_probe_yields_its_features(recorded_host, system, machine, name, has,
                                                    lacks):
    flags = recorded_host(system, machine, name)
    assert flags is not None and has <= flags and not lacks & flags


def test_an_executable_compiled_where_cpuid_reports_rdseed_runs_where_linux_hides_it(
        recorded_host):
    # Zen 5 under Linux 6.18: no rdseed in /proc/cpuinfo (AMD's erratum), while the executable
    # compiled on that very machine lists it (LLVM reads cpuid); XLA's code never runs it
    flags = recorded_host("Linux", "x86_64", "linux-x86_64-zen5-rdseed-hidden.cpuinfo")
    assert flags is not None and "rdseed" not in flags and "avx512f" in flags
    assert missing_features(X86_AVX2_EXECUTABLE, flags, "x86_64") == []
    assert missing_features(X86_AVX512_EXECUTABLE, flags, "x86_64") == []
    assert missing_features([*X86_AVX2_EXECUTABLE, "amx-tile"], flags, "x86_64") == [
        "amx-tile"]  # an instruction set the CPU lacks still refuses the executable


@pytest.mark.parametrize("system, machine, name", [
    ("Linux", "x86_64", "linux-x86_64-coffeelake.cpuinfo"),
    ("Darwin", "x86_64", "macos-x86_64-coffeelake.sysctl"),
    ("Windows", "AMD64", "windows-x86_64-coffeelake.cpuid.json"),
])
def test_an_avx512_executable_is_refused_without_avx512_and_the_avx2_one_used(
        recorded_host, system, machine, name):
    flags = recorded_host(system, machine, name)
    assert missing_features(X86_AVX2_EXECUTABLE, flags, "x86_64") == []
    assert missing_features(X86_AVX512_EXECUTABLE, flags, "x86_64") == [
        "avx512bw", "avx512cd", "avx512dq", "avx512f", "avx512vl", "evex512"]


@pytest.mark.parametrize("system, machine, name", [
    ("Linux", "x86_64", "linux-x86_64-icelake-server.cpuinfo"),
    ("Darwin", "x86_64", "macos-x86_64-imacpro.sysctl"),
    ("Windows", "AMD64", "windows-x86_64-icelake-server.cpuid.json"),
])
def test_an_avx512_executable_is_used_with_avx512(recorded_host, system, machine, name):
    flags = recorded_host(system, machine, name)
    assert missing_features(X86_AVX512_EXECUTABLE, flags, "x86_64") == []
    assert missing_features([*X86_AVX512_EXECUTABLE, "amx-tile"], flags, "x86_64") == [
        "amx-tile"]


def test_an_aarch64_executable_on_apple_m_series(recorded_host):
    m1 = recorded_host("Darwin", "arm64", "macos-arm64-m1.sysctl")
    assert missing_features(M1_EXECUTABLE, m1, "aarch64") == []
    # what only later models have is refused on an M1, and confirmed on them
    assert missing_features([*M1_EXECUTABLE, "bf16", "i8mm"], m1, "aarch64") == ["bf16", "i8mm"]
    m2 = recorded_host("Darwin", "arm64", "macos-arm64-m2pro.sysctl")
    assert missing_features([*M1_EXECUTABLE, "bf16", "i8mm", "bti"], m2, "aarch64") == []
    assert missing_features(["neon", "sme"], m2, "aarch64") == ["sme"]
    m4 = recorded_host("Darwin", "arm64", "macos-arm64-m4max.sysctl")
    assert missing_features(["neon", "sme", "sme2"], m4, "aarch64") == []
    # a feature no table knows cannot be confirmed
    assert missing_features(["neon", "some-future-extension"], m4, "aarch64") == [
        "some-future-extension"]


def test_an_aarch64_executable_on_linux_arm(recorded_host):
    flags = recorded_host("Linux", "aarch64", "linux-aarch64-graviton3.cpuinfo")
    assert missing_features(["neon", "fp-armv8", "crc", "lse", "aes", "sha2", "sha3", "sm4",
                             "sve", "bf16", "i8mm", "rand", "dotprod", "v8.4a"], flags,
                            "aarch64") == []
    assert missing_features(["neon", "sve2", "sme"], flags, "aarch64") == ["sme", "sve2"]


def test_hosts_whose_features_cannot_be_confirmed(recorded_host, monkeypatch):
    # Windows on ARM: archspec's cpuid detection is x86 only; it lists nothing
    assert recorded_host("Windows", "ARM64", "windows-x86_64-coffeelake.cpuid.json") is None
    # a Mac whose brand string names no model archspec knows
    assert recorded_host("Darwin", "arm64", "macos-arm64-m1.sysctl") is not None
    detect._darwin_sysctl_data.cache_clear()
    detect.host.cache_clear()
    monkeypatch.setattr(detect, "_check_output",
                        lambda args, env: "machdep.cpu.brand_string: Apple Virtual Processor\n")
    assert _cpu_flags("Darwin") is None
    # a detection that fails (no /proc/cpuinfo) is a "no", never an error or a warning
    def unreadable(*args, **kwargs):
        raise OSError("no /proc/cpuinfo")

    detect.host.cache_clear()
    monkeypatch.setattr(detect, "open", unreadable, raising=False)
    monkeypatch.setattr(shipped, "read_proc_cpuinfo", unreadable)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _cpu_flags("Linux") is None
    assert _cpu_flags("Plan9") is None


def test_host_features_of_a_probe():
    listed = frozenset({"avx2", "sse3", "em64t"})
    assert host_features(CpuProbe("Linux", listed)) == listed
    assert host_features(CpuProbe("Darwin", listed)) == listed | {"pni", "lm"}
    apple = CpuProbe("Darwin", frozenset(), "m1", "Apple", frozenset({"asimd", "fp"}))
    assert host_features(apple) == {"asimd", "fp"}
    assert host_features(CpuProbe("Linux", frozenset(), "m1", "Apple",
                                  frozenset({"asimd", "fp"}))) is None
    assert host_features(CpuProbe("Darwin", frozenset(), "m1", "generic",
                                  frozenset({"asimd", "fp"}))) is None
    assert host_features(CpuProbe("Windows", frozenset())) is None


def test_aarch64_names_that_mean_more_than_the_flag():
    # LLVM's aarch64 `aes` includes PMULL, `sha3` SHA-512; on x86 `aes` is the AES-NI flag
    assert missing_features(["aes", "sha3"], frozenset({"aes", "sha3"}), "aarch64") == [
        "aes", "sha3"]
    assert missing_features(["aes"], frozenset({"aes"}), "x86_64") == []
    assert missing_features(["bti"], frozenset({"bti"}), "aarch64") == []


def test_the_os_that_compiled_an_executable():
    assert executable_system(b"\x00junk x86_64-unknown-linux-gnu\x00") == "Linux"
    assert executable_system(b"..arm64-apple-macosx14.0.0..") == "Darwin"
    assert executable_system(b"..aarch64-apple-darwin..") == "Darwin"
    assert executable_system(b"..x86_64-pc-windows-msvc..") == "Windows"
    assert executable_system(b"no triple here") is None


def _record(**fields) -> ExecutableRecord:
    base = dict(artifact="a", artifact_sha256="0" * 64, target="x86_64-avx512", inputs=[],
                outputs=[], file="a.xla", sha256="0" * 64, size=1, jax_version="1",
                jaxlib_version="1", backend="cpu", platform_version="cpu", machine="x86_64",
                xla_flags=[], cpu_features=X86_AVX512_EXECUTABLE)
    return ExecutableRecord(**{**base, **fields})


def test_mismatch_checks_the_os_and_the_cpu_features(recorded_host):
    def host(cpu_flags, system="Linux"):
        return Host("1", "1", "cpu", "cpu", "x86_64", cpu_flags, (), system)

    icelake = recorded_host("Linux", "x86_64", "linux-x86_64-icelake-server.cpuinfo")
    assert mismatch(_record(), host(icelake)) is None
    assert mismatch(_record(cpu_features=[*X86_AVX512_EXECUTABLE, "amx-tile"]),
                    host(icelake)) == "this CPU lacks amx-tile"
    avx2 = host(recorded_host("Linux", "x86_64", "linux-x86_64-coffeelake.cpuinfo"))
    assert mismatch(_record(), avx2).startswith("this CPU lacks avx512bw, avx512cd")
    # a record that does not say which OS compiled it is used on Linux only, as before
    windows = host(recorded_host("Windows", "AMD64", "windows-x86_64-icelake-server.cpuid.json"),
                   system="Windows")
    assert "does not say which OS compiled it" in mismatch(_record(), windows)
    assert mismatch(_record(), host(None)) == \
        "Linux on x86_64 does not say which CPU features it has (archspec found none)"


@pytest.mark.parametrize("name, canonical", [
    ("x86-64-v3", "x86_64-avx2"), ("x86-64-v4", "x86_64-avx512"), ("x86_64-avx2", "x86_64-avx2"),
    ("x86_64-avx512", "x86_64-avx512"), ("aarch64", "aarch64"), ("x86-64-v5", None),
    ("x86_64_v3", None),
])
def test_target_aliases_name_the_standard_levels(name, canonical):
    assert canonical_target(name) == canonical
    assert all(alias not in TARGETS and target in TARGETS
               for alias, target in TARGET_ALIASES.items())
    assert describe_targets() == "x86_64-avx2 (x86-64-v3), x86_64-avx512 (x86-64-v4), aarch64"


@pytest.mark.parametrize("name", sorted(p.name for p in PROBES.glob("*.cpuinfo")))
def test_reading_cpuinfo_stops_after_the_first_block_with_its_features(name):
    """A first call reads ``/proc/cpuinfo`` only up to the first processor's features: the
    same flags as the whole file gives, without generating every other CPU's block."""
    path = PROBES / name
    whole = path.read_text()
    read = shipped.read_proc_cpuinfo(str(path))
    assert linux_cpu_flags(read) == linux_cpu_flags(whole) and linux_cpu_flags(read)
    processors = [line for line in read.splitlines() if line.startswith("processor")]
    assert len(processors) == 1 and whole.startswith(read)
    if sum(line.startswith("processor\t") for line in whole.splitlines()) > 1:
        assert len(read) < len(whole)  # the second processor's block is not read
