"""Companion wheels' names and their records in the package's manifest."""

from __future__ import annotations

import json

import pytest

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.formats.companion_wheels import (
    companion_distribution,
    companion_extra,
    companion_package,
    install_hint,
    is_split,
    normalized_distribution,
    platform_extras,
)
from hatch_jaxexport.formats.manifest import CompanionRecord, ExecutableRecord, Manifest
from hatch_jaxexport.formats.manifest_reader import parse_manifest, read_manifest_index

SHA = "ab" * 32


def executable(target: str, backend: str = "cpu", **fields: object) -> ExecutableRecord:
    return ExecutableRecord(
        artifact="pkg:f/0/cpu", artifact_sha256=SHA, target=target, inputs=[[[8], "float32"]],
        outputs=[[[8], "float32"]], file=f"f.{target}.xla", sha256=SHA, size=10,
        jax_version="0.10.2", jaxlib_version="0.10.2", backend=backend, platform_version="",
        machine="x86_64", xla_flags=[], cpu_features=[], **fields)


@pytest.mark.parametrize(("record", "extra"), [
    (executable("tpu-v5-lite", "tpu", device_kind="TPU v5 lite", device_count=1,
                host_device_count=1, topology="v5e:1x1"), "tpu-v5e"),
    (executable("tpu-v5-lite-x4", "tpu", device_kind="TPU v5 lite", device_count=1,
                host_device_count=4, topology="v5e:2x2"), "tpu-v5e-2x2"),
    (executable("tpu-v4", "tpu", device_kind="TPU v4", device_count=1, host_device_count=4,
                topology="v4:2x2x1"), "tpu-v4-2x2x1"),
    (executable("cuda-nvidia-h100-80gb-hbm3", "cuda", device_kind="NVIDIA H100 80GB HBM3",
                device_count=1), "cuda-nvidia-h100-80gb-hbm3"),
    (executable("x86_64-avx2"), "cpu-x86-64-avx2"),
])
def test_an_executables_extra_names_its_target_as_pep_685_compares_extras(record, extra):
    assert companion_extra(record) == extra
    assert is_split(record, "all")
    assert is_split(record, "accelerators") == (record.backend != "cpu")
    assert not is_split(record, "none")


def test_the_distribution_and_package_derive_from_the_packages_name():
    assert normalized_distribution("Example_Pkg..x") == "example-pkg-x"
    assert companion_distribution("Example_Pkg", "tpu-v5e") == "example-pkg-jaxexport-tpu-v5e"
    assert companion_package("Example_Pkg", "tpu-v5e") == "example_pkg_jaxexport_tpu_v5e"


def companion(extra: str, platform: str = "tpu", **fields: object) -> CompanionRecord:
    values = {"extra": extra, "distribution": f"pkg-jaxexport-{extra}", "version": "1.0",
              "package": f"pkg_jaxexport_{extra.replace('-', '_')}", "platform": platform,
              "manifest_sha256": SHA, "executables": 3, "size": 100, **fields}
    return CompanionRecord(**values)


def test_every_companion_has_its_extra_and_its_platforms():
    records = [companion("tpu-v5e"), companion("tpu-v6e"), companion("cpu-x86-64-v3", "cpu")]
    assert platform_extras(records) == {
        "cpu": ["pkg-jaxexport-cpu-x86-64-v3"],
        "cpu-x86-64-v3": ["pkg-jaxexport-cpu-x86-64-v3"],
        "tpu": ["pkg-jaxexport-tpu-v5e", "pkg-jaxexport-tpu-v6e"],
        "tpu-v5e": ["pkg-jaxexport-tpu-v5e"], "tpu-v6e": ["pkg-jaxexport-tpu-v6e"]}
    assert install_hint(records[0]) == \
        "the package's extra [tpu-v5e] installs pkg-jaxexport-tpu-v5e==1.0"


def manifest_bytes(*companions: CompanionRecord) -> bytes:
    return Manifest(package="pkg", generator="hatch-jaxexport 0.1.0", jax_version="0.10.2",
                    jaxlib_version="0.10.2", artifacts=(), companions=companions).to_bytes()


def test_the_manifest_lists_its_companions_and_reads_them_back():
    records = (companion("tpu-v5e"), companion("tpu-v5e-2x2"))
    data = manifest_bytes(*records)
    assert parse_manifest(data).companions == records
    assert read_manifest_index(data).companions == records
    # a manifest without companions is the bytes it was before they existed
    assert b"companions" not in manifest_bytes()


@pytest.mark.parametrize(("change", "problem"), [
    ({"package": "../evil"}, "bare package name"),
    ({"package": "a.b"}, "bare package name"),
    ({"extra": "tpu v5e"}, "bare package name"),
    ({"distribution": "x/y"}, "bare package name"),
    ({"manifest_sha256": "00"}, "SHA-256"),
    ({"executables": -1}, "SHA-256"),
    ({"size": "big"}, "companions[0].size must be int"),
])
def test_a_corrupt_companion_record_is_refused(change, problem):
    data = json.loads(manifest_bytes(companion("tpu-v5e")))
    data["companions"][0].update(change)
    data.pop("record_spans")
    with pytest.raises(ArtifactError, match="companions") as info:
        parse_manifest(json.dumps(data).encode())
    assert problem in str(info.value)


def test_two_companions_for_one_extra_are_refused():
    data = json.loads(manifest_bytes(companion("tpu-v5e")))
    data["companions"].append({**data["companions"][0], "package": "other"})
    data.pop("record_spans")
    with pytest.raises(ArtifactError, match="two companions have one extra"):
        parse_manifest(json.dumps(data).encode())
