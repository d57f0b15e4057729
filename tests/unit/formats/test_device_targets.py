"""Device targets: a TPU's or GPU's executable, described and matched exactly, on recorded
descriptions (what the lent TPU v5e said of itself), on any machine."""

from __future__ import annotations

import json

import pytest

from hatch_jaxexport import ArtifactError
from hatch_jaxexport.formats.device_targets import (
    BACKEND_FLAG_VARIABLES,
    PROGRAM_NEUTRAL_FLAGS,
    DeviceDescription,
    backend_flags,
    description_mismatch,
    device_target_name,
    program_flags,
    target_problem,
    target_text,
)
from hatch_jaxexport.formats.manifest import ExecutableRecord, Manifest
from hatch_jaxexport.formats.manifest_reader import parse_manifest
from hatch_jaxexport.runtime.executables.shipped import Host, mismatch

#: The lent TPU v5e's backend (FIELD-NOTES "A real TPU").
V5E_VERSION = ("PJRT C API\nTFRT TPU v5 lite\nBuilt on Jun 17 2026 11:08:48 (1781719728) "
               "cl/933746096")
V5E = DeviceDescription("tpu", "TPU v5 lite", 1, V5E_VERSION, "0.10.2", "0.10.2")


def tpu_record(**changes) -> ExecutableRecord:
    record = ExecutableRecord(
        artifact="pkg:f/0/tpu", artifact_sha256="a" * 64, target="tpu-v5-lite",
        inputs=[[[4], "float32"]], outputs=[[[4], "float32"]], file="pkg_f.tpu-v5-lite.0.xla",
        sha256="b" * 64, size=10, jax_version="0.10.2", jaxlib_version="0.10.2",
        backend="tpu", platform_version=V5E_VERSION, machine="x86_64", xla_flags=[],
        cpu_features=[], system="Linux", device_kind="TPU v5 lite", device_count=1)
    return record._replace(**changes)


def host(device: DeviceDescription, **changes) -> Host:
    """The process ``device`` describes, as ``this_host("tpu")`` builds it (no CPU features
    read: a device's executable needs none)."""
    values = {"jax_version": device.jax_version, "jaxlib_version": device.jaxlib_version,
              "backend": device.platform, "platform_version": device.platform_version,
              "machine": "x86_64", "cpu_flags": None, "xla_flags": (), "system": "Linux",
              "device": device, **changes}
    return Host(**values)


@pytest.mark.parametrize("platform, kind, name", [
    ("tpu", "TPU v5 lite", "tpu-v5-lite"),
    ("tpu", "TPU v4", "tpu-v4"),
    ("tpu", "TPU7x", "tpu-tpu7x"),
    ("cuda", "NVIDIA H100 80GB HBM3", "cuda-nvidia-h100-80gb-hbm3"),
    ("rocm", "AMD Instinct MI300X", "rocm-amd-instinct-mi300x"),
    ("cpu", "cpu", "cpu"),
])
def test_a_target_is_named_after_its_device(platform, kind, name):
    assert device_target_name(platform, kind) == name


def test_the_recorded_v5e_matches_its_own_executable():
    assert description_mismatch(tpu_record(), V5E) is None
    assert mismatch(tpu_record(), host(V5E)) is None
    more = DeviceDescription("tpu", "TPU v5 lite", 8, V5E_VERSION, "0.10.2", "0.10.2")
    assert mismatch(tpu_record(), host(more)) is None  # 1 device needed, 8 local


@pytest.mark.parametrize("device, reason", [
    (DeviceDescription("tpu", "TPU v4", 1, V5E_VERSION, "0.10.2", "0.10.2"),
     "compiled for device kind TPU v5 lite, this process has TPU v4"),
    (DeviceDescription("tpu", "TPU v5 lite", 1,
                       V5E_VERSION.replace("Jun 17", "Jul 01"), "0.10.2", "0.10.2"),
     "compiled for backend version PJRT C API TFRT TPU v5 lite Built on Jun 17"),
    (DeviceDescription("tpu", "TPU v5 lite", 1, V5E_VERSION, "0.10.1", "0.10.2"),
     "compiled for jax 0.10.2, this process has 0.10.1"),
    (DeviceDescription("tpu", "TPU v5 lite", 1, V5E_VERSION, "0.10.2", "0.10.1"),
     "compiled for jaxlib 0.10.2, this process has 0.10.1"),
    (DeviceDescription("tpu", "TPU v5 lite", 0, V5E_VERSION, "0.10.2", "0.10.2"),
     "compiled for 1 tpu device(s), this process has 0"),
    (DeviceDescription("", "", 0, "", "0.10.2", "0.10.2"),
     "compiled for tpu, this process runs no device"),
    (DeviceDescription("cuda", "NVIDIA H100 80GB HBM3", 1, "12.8", "0.10.2", "0.10.2"),
     "compiled for tpu, this process runs cuda"),
    (DeviceDescription("tpu", "TPU v5 lite", 1, V5E_VERSION, "0.10.2", "0.10.2",
                       "--xla_tpu_enable_latency_hiding_scheduler=true"),
     "compiled with LIBTPU_INIT_ARGS '', this process has "
     "'--xla_tpu_enable_latency_hiding_scheduler=true'"),
])
def test_any_field_that_differs_is_a_no_naming_it(device, reason):
    for why in (description_mismatch(tpu_record(), device), mismatch(tpu_record(), host(device))):
        assert why is not None and why.startswith(reason), why


#: What the lent v5e's image sets in every process, the compiling one included.
BARRIER = "--xla_tpu_use_enhanced_launch_barrier=true"


def v5e_with(flags: str) -> DeviceDescription:
    """The recorded v5e in a process whose ``LIBTPU_INIT_ARGS`` is ``flags``, read as
    ``this_host`` reads it."""
    return DeviceDescription("tpu", "TPU v5 lite", 1, V5E_VERSION, "0.10.2", "0.10.2",
                             backend_flags("tpu", {"LIBTPU_INIT_ARGS": flags}))


@pytest.mark.parametrize("compiled, process", [
    (BARRIER, BARRIER),
    (BARRIER, f"  {BARRIER}\n"),  # normalized the same way on both sides
    (f"{BARRIER} --xla_foo=1", f"{BARRIER}\t --xla_foo=1 "),
    ("", ""),
    # the launch barrier leaves the program as it is (measured: PROGRAM_NEUTRAL_FLAGS), so a
    # deviceless build's executable (none set) serves the lent TPU's processes (it set)
    ("", BARRIER),
    (BARRIER, ""),
    (BARRIER, "--xla_tpu_use_enhanced_launch_barrier=false"),
    (f"{BARRIER} --xla_foo=1", f"--xla_foo=1 {BARRIER}"),
])
def test_an_executable_is_served_under_the_backend_flags_it_was_compiled_under(
        compiled, process):
    record = tpu_record(backend_flags=backend_flags("tpu", {"LIBTPU_INIT_ARGS": compiled}))
    assert description_mismatch(record, v5e_with(process)) is None
    assert mismatch(record, host(v5e_with(process))) is None


@pytest.mark.parametrize("compiled, process, reason", [
    ("", "--xla_foo=1", "compiled with LIBTPU_INIT_ARGS '', this process has '--xla_foo=1'"),
    ("--xla_foo=1", BARRIER,
     f"compiled with LIBTPU_INIT_ARGS '--xla_foo=1', this process has '{BARRIER}'"),
    ("--xla_foo=1 --xla_bar=2", f"--xla_bar=2 {BARRIER} --xla_foo=1",  # the order counts
     f"compiled with LIBTPU_INIT_ARGS '--xla_foo=1 --xla_bar=2', this process has "
     f"'--xla_bar=2 {BARRIER} --xla_foo=1'"),
])
def test_other_backend_flags_are_a_no_naming_both(compiled, process, reason):
    record = tpu_record(backend_flags=compiled)
    assert description_mismatch(record, v5e_with(process)) == reason
    assert mismatch(record, host(v5e_with(process))) == reason


def test_only_measured_flags_are_left_out_of_the_match():
    assert program_flags(f" {BARRIER}  --xla_foo=1 ") == "--xla_foo=1"
    assert PROGRAM_NEUTRAL_FLAGS == {BARRIER, "--xla_tpu_use_enhanced_launch_barrier=false"}


def v5e_host_of(devices: int) -> DeviceDescription:
    return DeviceDescription("tpu", "TPU v5 lite", devices, V5E_VERSION, "0.10.2", "0.10.2")


@pytest.mark.parametrize("host_devices, have, served", [
    (0, 1, True), (0, 4, True),      # records from before the host was recorded: as before
    (1, 1, True), (1, 4, False),     # compiled within a 1x1 host: that host only
    (4, 4, True), (4, 1, False), (4, 8, False), (8, 8, True),
])
def test_an_executable_is_served_on_a_host_of_its_size_only(host_devices, have, served):
    record = tpu_record(host_device_count=host_devices,
                        target=device_target_name("tpu", "TPU v5 lite", host_devices))
    why = description_mismatch(record, v5e_host_of(have))
    assert (why is None) == served
    if not served:
        assert why == f"compiled for a host of {host_devices} tpu device(s), this process has " \
            f"{have}"
        assert mismatch(record, host(v5e_host_of(have))) == why


def test_a_hosts_size_is_in_the_target_name_and_checked_by_verify():
    assert device_target_name("tpu", "TPU v5 lite", 1) == "tpu-v5-lite"
    assert device_target_name("tpu", "TPU v5 lite", 4) == "tpu-v5-lite-x4"
    assert device_target_name("tpu", "TPU v6 lite", 8) == "tpu-v6-lite-x8"
    good = tpu_record(host_device_count=4, target="tpu-v5-lite-x4", topology="v5e:2x2")
    assert target_problem(good, "tpu") is None
    assert target_problem(good._replace(target="tpu-v5-lite"), "tpu") == \
        "target 'tpu-v5-lite' does not name its device ('tpu-v5-lite-x4')"
    assert target_text(good) == "tpu-v5-lite-x4 (TPU v5 lite, 1 device of a 4-device host, " \
        "compiled deviceless for v5e:2x2)"


def test_host_and_topology_round_trip_and_are_written_only_where_set():
    deviceless = tpu_record(host_device_count=4, target="tpu-v5-lite-x4", topology="v5e:2x2",
                            file="pkg_f.tpu-v5-lite-x4.0.xla")
    manifest = Manifest(package="pkg", generator="t", jax_version="0.10.2",
                        jaxlib_version="0.10.2", artifacts=(),
                        executables=(deviceless, tpu_record()))
    read = parse_manifest(manifest.to_bytes())
    assert sorted(read.executables) == sorted([deviceless, tpu_record()])
    written = {e["file"]: e for e in json.loads(manifest.to_bytes())["executables"]}
    assert written[deviceless.file]["host_device_count"] == 4
    assert written[deviceless.file]["topology"] == "v5e:2x2"
    assert "host_device_count" not in written[tpu_record().file]
    assert "topology" not in written[tpu_record().file]


@pytest.mark.parametrize("changes", [
    {"host_device_count": -1}, {"host_device_count": 10**9}, {"topology": "x" * 100},
    {"device_kind": "", "device_count": 0, "host_device_count": 4},
    {"device_kind": "", "device_count": 0, "topology": "v5e:1x1"},
])
def test_a_host_or_topology_out_of_range_or_without_a_device_is_corrupt(changes):
    raw = json.loads(manifest_bytes(tpu_record()).split(b',"record_spans"')[0] + b"}")
    raw["executables"][0].update(changes)
    with pytest.raises(ArtifactError, match="corrupt manifest"):
        parse_manifest(json.dumps(raw).encode())


def test_backend_flags_are_read_only_for_a_platform_that_has_them():
    environ = {"LIBTPU_INIT_ARGS": f" {BARRIER} "}
    assert backend_flags("tpu", environ) == BARRIER
    assert backend_flags("cuda", environ) == backend_flags("cpu", environ) == ""
    assert backend_flags("tpu", {}) == ""
    # the executable cache's key reads none for a CPU entry without importing this module
    # (runtime/executables/_executable_cache.py): XLA:CPU has no such variable
    assert "cpu" not in BACKEND_FLAG_VARIABLES


def test_a_device_executable_needs_as_many_devices_as_it_was_compiled_for():
    two = tpu_record(device_count=2)
    assert mismatch(two, host(V5E)) == "compiled for 2 tpu device(s), this process has 1"


def test_xla_flags_that_change_code_generation_are_a_no_on_a_device_too():
    why = mismatch(tpu_record(), host(V5E, xla_flags=("--xla_tpu_foo=1",)))
    assert why is not None and why.startswith("XLA_FLAGS sets --xla_tpu_foo=1")


def test_a_cpu_stand_in_is_checked_for_its_device_and_its_cpu_features():
    cpu = DeviceDescription("cpu", "cpu", 1, "cpu", "0.10.2", "0.10.2")
    record = tpu_record(backend="cpu", target="cpu", device_kind="cpu", platform_version="cpu",
                        artifact="pkg:f/0/cpu", cpu_features=["avx512f"])
    plain = host(cpu, cpu_flags=frozenset({"avx2"}))
    assert mismatch(record, plain) == "this CPU lacks avx512f"
    assert mismatch(record, host(cpu, cpu_flags=frozenset({"avx2", "avx512f"}))) is None


def test_inspect_and_verify_read_the_description():
    assert target_text(tpu_record()) == "tpu-v5-lite (TPU v5 lite, 1 device)"
    assert target_problem(tpu_record(), "tpu") is None
    assert target_problem(tpu_record(), "cpu") == "compiled for tpu from a cpu artifact"
    assert target_problem(tpu_record(target="tpu-v4"), "tpu") == \
        "target 'tpu-v4' does not name its device ('tpu-v5-lite')"
    assert target_text(tpu_record(backend_flags=BARRIER)) == \
        f"tpu-v5-lite (TPU v5 lite, 1 device, LIBTPU_INIT_ARGS '{BARRIER}')"
    cpu_target = tpu_record(target="x86_64-avx2", backend="cpu", device_kind="", device_count=0)
    assert target_problem(cpu_target, "cpu") is None and target_text(cpu_target) == "x86_64-avx2"


def manifest_bytes(*executables: ExecutableRecord) -> bytes:
    return Manifest("pkg", "hatch-jaxexport 0.1.0", "0.10.2", "0.10.2", (),
                    executables=executables).to_bytes()


def test_device_records_round_trip_and_cpu_records_keep_their_bytes():
    cpu = tpu_record(target="x86_64-avx2", backend="cpu", device_kind="", device_count=0,
                     file="pkg_f.x86_64-avx2.0.xla", artifact="pkg:f/0/cpu")
    data = manifest_bytes(tpu_record(), cpu)
    parsed = parse_manifest(data)
    assert sorted(parsed.executables, key=lambda e: e.id) == sorted([tpu_record(), cpu],
                                                                    key=lambda e: e.id)
    assert parsed.to_bytes() == data
    written = {e["target"]: e for e in json.loads(data.split(b',"record_spans"')[0] + b"}")
               ["executables"]}
    assert written["tpu-v5-lite"]["device_kind"] == "TPU v5 lite"
    assert "device_kind" not in written["x86_64-avx2"]  # a CPU manifest as it was written
    assert "device_count" not in written["x86_64-avx2"]


def test_backend_flags_round_trip_and_are_written_only_where_set():
    flagged = tpu_record(backend_flags=BARRIER, file="pkg_f.tpu-v5-lite.1.xla",
                         inputs=[[[8], "float32"]])
    data = manifest_bytes(flagged, tpu_record())
    parsed = parse_manifest(data)
    assert sorted(parsed.executables, key=lambda e: e.id) == \
        sorted([flagged, tpu_record()], key=lambda e: e.id)
    assert parsed.to_bytes() == data
    written = {e["file"]: e for e in json.loads(data.split(b',"record_spans"')[0] + b"}")
               ["executables"]}
    assert written[flagged.file]["backend_flags"] == BARRIER
    assert "backend_flags" not in written[tpu_record().file]  # as written before the field
    assert b"backend_flags" not in manifest_bytes(tpu_record())


@pytest.mark.parametrize("value, match", [
    (["--xla_foo=1"], "backend_flags must be str"),
    (7, "backend_flags must be str"),
    ("x" * 20000, "backend_flags is over"),
])
def test_backend_flags_of_another_type_or_size_are_corrupt(value, match):
    raw = json.loads(manifest_bytes(tpu_record()).split(b',"record_spans"')[0] + b"}")
    raw["executables"][0]["backend_flags"] = value
    with pytest.raises(ArtifactError, match=match):
        parse_manifest(json.dumps(raw).encode())


def test_backend_flags_without_a_device_target_are_corrupt():
    cpu = tpu_record(target="x86_64-avx2", backend="cpu", device_kind="", device_count=0,
                     backend_flags=BARRIER)
    with pytest.raises(ArtifactError, match="set without a device_kind"):
        parse_manifest(manifest_bytes(cpu))


def test_a_reader_takes_the_fields_it_knows_as_older_readers_take_the_device_fields():
    raw = json.loads(manifest_bytes(tpu_record()).split(b',"record_spans"')[0] + b"}")
    raw["executables"][0]["a_field_of_a_later_version"] = {"any": 1}
    (record,) = parse_manifest(json.dumps(raw).encode()).executables
    assert record == tpu_record()


@pytest.mark.parametrize("changes", [{"device_count": 0}, {"device_kind": ""},
                                     {"device_count": -1}])
def test_a_device_kind_without_a_device_count_is_corrupt(changes):
    raw = json.loads(manifest_bytes(tpu_record()).split(b',"record_spans"')[0] + b"}")
    raw["executables"][0].update(changes)
    with pytest.raises(ArtifactError, match="device_kind without a device_count"):
        parse_manifest(json.dumps(raw).encode())


def test_on_this_cpu_a_tpu_executable_is_not_loaded_and_the_report_says_why():
    """The real probe on a machine without a TPU: nothing is read or loaded, the call then
    compiles the StableHLO, and ``not_shipped`` carries the reason."""
    from hatch_jaxexport.runtime.executables.shipped import ShippedExecutables, this_host

    assert this_host("tpu").device_description().device_count == 0
    read = []
    shipped = ShippedExecutables([tpu_record()], read.append, lambda: None, "pkg:f", "tpu")
    leaves = [((4,), "float32", False)]
    assert shipped.compiled_for(leaves, None) is None and read == []
    assert shipped.why_not(leaves) == "tpu-v5-lite: compiled for tpu, this process runs no device"
