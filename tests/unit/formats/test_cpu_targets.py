"""Targets of precompiled executables, and the CPU-feature check made before loading one."""

from __future__ import annotations

import pytest

from hatch_jaxexport.formats._cpu_targets import (
    TARGETS,
    codegen_xla_flags,
    default_targets,
    linux_cpu_flags,
    machine_name,
    missing_features,
    required_features,
)

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
