"""Manifest writing, reading and validation."""

from __future__ import annotations

import json

import pytest

from hatch_jaxexport import ArtifactError
from hatch_jaxexport.formats.manifest import (
    SCHEMA_VERSION,
    JaxSet,
    check_file_name,
    is_sha256_hex,
    set_manifest_name,
)
from hatch_jaxexport.formats.manifest_reader import parse_manifest


@pytest.fixture
def manifest_json(demo_site):
    return json.loads((demo_site / "jxe_demo" / "_jaxexport" / "manifest.json").read_text())


SET = {"manifest": "manifest-jax-0.8.1.json", "jax_version": "0.8.1",
       "jaxlib_version": "0.8.1", "jax_released": "2025-11-18"}


def _bytes(data) -> bytes:
    return json.dumps(data).encode()


def test_manifest_round_trips_and_records_every_field(demo_site, manifest_json):
    raw = (demo_site / "jxe_demo" / "_jaxexport" / "manifest.json").read_bytes()
    manifest = parse_manifest(raw)
    assert manifest.to_bytes() == raw
    assert manifest.schema_version == SCHEMA_VERSION
    assert manifest.package == "jxe_demo"
    record = next(r for r in manifest.artifacts if r.function == "jxe_demo.funcs:constrained")
    assert record.constraints == ["a >= 2"]
    assert record.in_avals == ["float32[a,b]", "float32[b]"]
    assert record.platform == "cpu" and record.vjp_order == 0
    assert len(record.sha256) == 64 and len(record.fingerprint) == 64
    assert record.spec["args"]["x"] == {"kind": "array", "shape": ["a", "b"], "dtype": "float32"}
    poly = sorted(r.static["mode"] for r in manifest.artifacts
                  if r.function == "jxe_demo.funcs:poly")
    assert poly == ["exact", "fast"]


def test_captured_constants_are_recorded_and_an_older_manifest_without_them_parses(
        manifest_json):
    manifest = parse_manifest(_bytes(manifest_json))
    (lookup,) = [r for r in manifest.artifacts if r.function == "jxe_demo.funcs:lookup"]
    assert lookup.captured_constants == [{"name": "jxe_demo.funcs.TABLE", "shape": [4, 8],
                                          "dtype": "float32", "bytes": 128}]
    scale = next(r for r in manifest.artifacts if r.function == "jxe_demo.funcs:scale")
    assert scale.captured_constants == []
    for record in manifest_json["artifacts"]:  # as written before the field existed
        del record["captured_constants"]
    older = parse_manifest(_bytes(manifest_json))
    assert all(r.captured_constants == [] for r in older.artifacts)
    assert older.schema_version == SCHEMA_VERSION == 1


def test_other_jax_releases_sets_round_trip(manifest_json):
    """A wheel baked with ``jax-releases`` lists each other release's set (its manifest file
    and release date); a manifest without sets omits the key."""
    manifest = parse_manifest(_bytes(manifest_json))
    assert manifest.jax_sets == () and b"jax_sets" not in manifest.to_bytes()
    manifest_json["jax_sets"] = [SET]
    with_sets = parse_manifest(_bytes(manifest_json))
    assert with_sets.jax_sets == (JaxSet(**SET),)
    assert parse_manifest(with_sets.to_bytes()) == with_sets
    assert set_manifest_name("0.8.1") == SET["manifest"]


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda m: m.update(schema_version=SCHEMA_VERSION + 1),
     r"schema version 2, newer than this hatch-jaxexport reads \(1\); upgrade"),
    (lambda m: m.update(schema_version="1"), r"schema_version must be an int"),
    (lambda m: m.update(artifacts={}), r"'artifacts' must be a list"),
    (lambda m: m["artifacts"][0].update(file="../../etc/passwd"), r"unsafe artifact file"),
    (lambda m: m["artifacts"][0].update(file="/etc/passwd"), r"unsafe artifact file"),
    (lambda m: m["artifacts"][0].update(file="sub/x.jaxexport"), r"unsafe artifact file"),
    (lambda m: m["artifacts"][0].update(sha256="zz"), r"not a SHA-256"),
    (lambda m: m["artifacts"][0].update(size=10**20), r"out of range"),
    (lambda m: m["artifacts"][0].update(size=True), r"size must be int"),
    (lambda m: m["artifacts"][0].pop("platform"), r"artifacts\[0\] lacks 'platform'"),
    (lambda m: m["artifacts"][0].update(in_avals=[1]), r"in_avals must be list\[str\]"),
    (lambda m: m["artifacts"].append(m["artifacts"][0]), r"listed twice"),
    (lambda m: m.update(package=None), r"'package' must be a string"),
    (lambda m: m["artifacts"][0].update(captured_constants={}),
     r"captured_constants must be list\[dict\[str, Any\]\]"),
    (lambda m: m["artifacts"][0].update(captured_constants=[{"name": "T"}]),
     r"artifacts\[0\]\.captured_constants\[0\] must be an object with exactly 'name', "),
    (lambda m: m["artifacts"][0].update(captured_constants=[
        {"name": "T", "shape": [-1], "dtype": "float32", "bytes": 4}]),
     r"captured_constants\[0\] 'shape' must be a list of ints >= 0"),
    (lambda m: m["artifacts"][0].update(captured_constants=[
        {"name": 3, "shape": [1], "dtype": "float32", "bytes": 4}]),
     r"'name' must be a string or null"),
    (lambda m: m["artifacts"][0].update(captured_constants=[
        {"name": None, "shape": [1], "dtype": "float32", "bytes": True}]),
     r"'bytes' must be an int >= 0"),
    (lambda m: m["artifacts"][0].update(jax_config={"jax_enable_x64": "yes"}),
     r"jax_enable_x64 = 'yes' has the wrong type"),
    (lambda m: m["artifacts"][0].update(jax_config={"jax_future_flag": 1}),
     r"names 'jax_future_flag', not one of jax_enable_x64, jax_default_matmul_precision"),
    (lambda m: m["artifacts"][0].update(variant={"jax_default_matmul_precision": "high"}),
     r"variant of .* names 'jax_default_matmul_precision', not one of jax_enable_x64"),
    (lambda m: m["artifacts"][0].update(jax_config=[]), r"jax_config must be dict"),
    (lambda m: m.update(jax_sets={}), r"'jax_sets' must be a list"),
    (lambda m: m.update(jax_sets=[dict(SET, manifest="../manifest.json")]),
     r"unsafe artifact file '../manifest.json'"),
    (lambda m: m.update(jax_sets=[dict(SET, manifest="manifest.json")]),
     r"jax_sets\[0\] must name another manifest"),
    (lambda m: m.update(jax_sets=[dict(SET, jax_released="June")]),
     r"jax_sets\[0\] must name another manifest and the set's jax release date"),
    *[(lambda m, d=date: m.update(jax_released=d), r"'jax_released' must be a date")
      for date in ("2025-11-1", "2025-11-180", "2025/11/18", "2025-11-18\n", "20251118",
                   "\uff12025-11-18", "2025-1a-18", "-2025-11-1")],
    (lambda m: m.update(jax_sets=[dict(SET, jax_released="2025-11-18\n")]),
     r"jax_sets\[0\] must name another manifest and the set's jax release date"),
    (lambda m: m.update(jax_sets=[{"manifest": "manifest-jax-0.8.1.json"}]),
     r"jax_sets\[0\] lacks 'jax_version'"),
])
def test_corrupt_manifest_is_a_clear_artifact_error(manifest_json, mutate, message):
    mutate(manifest_json)
    with pytest.raises(ArtifactError, match=message):
        parse_manifest(_bytes(manifest_json))


@pytest.mark.parametrize("data", [b"", b"\xff\xfe", b"[1, 2]", b"{", b"null", b"[" * 100000])
def test_garbage_manifest_is_a_clear_artifact_error(data):
    with pytest.raises(ArtifactError, match="manifest"):
        parse_manifest(data)


@pytest.mark.parametrize("name", ["a.jaxexport", "f_x-0123.jaxexport", "_x", "x" * 200])
def test_safe_file_names(name):
    assert check_file_name(name) == name


@pytest.mark.parametrize("name", ["..", "a/../b", "C:\\x", "", ".hidden", "a\\b", 3, None,
                                  "a.jaxexport\n", "-a", "x" * 201, "a b", "\u00e9.jaxexport"])
def test_unsafe_file_names(name):
    with pytest.raises(ArtifactError):
        check_file_name(name)


@pytest.mark.parametrize("value, valid", [
    ("0123456789abcdef" * 4, True), ("f" * 64, True), ("F" * 64, False), ("f" * 63, False),
    ("f" * 65, False), ("f" * 64 + "\n", False), ("g" * 64, False), (None, False),
    (b"f" * 64, False), (int("f" * 64, 16), False),
])
def test_sha256_digests_are_64_lowercase_hex_digits(value, valid):
    assert is_sha256_hex(value) is valid


def test_manifests_without_a_recorded_jax_config_still_read(manifest_json):
    """Manifests written before the jax config was recorded: nothing to compare, no variant."""
    for record in manifest_json["artifacts"]:
        assert record["jax_config"]["jax_enable_x64"] in (True, False)
        del record["jax_config"], record["variant"]
    manifest = parse_manifest(_bytes(manifest_json))
    assert all(r.jax_config == {} and r.variant == {} for r in manifest.artifacts)


def test_config_variants_have_their_own_ids_and_may_share_a_call(manifest_json):
    """Two variants of one artifact (``x64="both"``) are distinct records; the id says which."""
    first = manifest_json["artifacts"][0]
    other = {**first, "file": "other.jaxexport", "variant": {"jax_enable_x64": True}}
    first["variant"] = {"jax_enable_x64": False}
    manifest_json["artifacts"].append(other)
    ids = {r.id for r in parse_manifest(_bytes(manifest_json)).artifacts}
    assert any(i.endswith("[jax_enable_x64=True]") or "[jax_enable_x64=True]/" in i
               for i in ids)
    assert any("[jax_enable_x64=False]" in i for i in ids)


@pytest.fixture(scope="module")
def exec_manifest_json(exec_site):
    return json.loads((exec_site / "jxe_exec" / "_jaxexport" / "manifest.json").read_text())


def test_executables_round_trip_in_the_manifest(exec_site, exec_manifest_json):
    raw = (exec_site / "jxe_exec" / "_jaxexport" / "manifest.json").read_bytes()
    manifest = parse_manifest(raw)
    assert manifest.to_bytes() == raw  # deterministic, key by key
    assert len(manifest.executables) == len(exec_manifest_json["executables"]) > 0
    by_artifact = {r.id: r for r in manifest.artifacts}
    for record in manifest.executables:
        artifact = by_artifact[record.artifact]
        assert record.artifact_sha256 == artifact.sha256
        assert record.file.endswith(".xla") and record.cpu_features
        blob = (exec_site / "jxe_exec" / "_jaxexport" / record.file).read_bytes()
        assert len(blob) == record.size
        assert blob[:2] not in (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")  # no pickle


def test_a_manifest_without_executables_omits_the_key(manifest_json):
    assert "executables" not in manifest_json
    assert parse_manifest(_bytes(manifest_json)).executables == ()


@pytest.mark.parametrize("mutate, message", [
    (lambda e: e.update(file="../evil.xla"), "unsafe artifact file"),
    (lambda e: e.update(sha256="xyz"), "malformed SHA-256"),
    (lambda e: e.update(inputs=[[[-1], "float32"]]), "inputs must be"),
    (lambda e: e.update(outputs=[["8", "float32"]]), "outputs must be"),
    (lambda e: e.pop("cpu_features"), "lacks 'cpu_features'"),
    (lambda e: e.update(size=-5), "size is out of range"),
])
def test_corrupt_executable_records_are_artifact_errors(exec_manifest_json, mutate, message):
    data = json.loads(json.dumps(exec_manifest_json))
    mutate(data["executables"][0])
    with pytest.raises(ArtifactError, match=message):
        parse_manifest(_bytes(data))


def test_an_executable_listed_twice_is_refused(exec_manifest_json):
    data = json.loads(json.dumps(exec_manifest_json))
    data["executables"].append(data["executables"][0])
    with pytest.raises(ArtifactError, match="listed twice"):
        parse_manifest(_bytes(data))


def test_the_index_validates_one_function_and_full_validates_every_record(manifest_json):
    from hatch_jaxexport.formats.manifest_reader import read_manifest_index

    victim = next(r for r in manifest_json["artifacts"] if r["function"] == "jxe_demo.funcs:poly")
    victim["sha256"] = "not a digest"
    index = read_manifest_index(_bytes(manifest_json))
    scale = index.function("jxe_demo.funcs:scale")  # another function's record is not read
    assert {r.function for r in scale.artifacts} == {"jxe_demo.funcs:scale"}
    assert scale.artifacts == tuple(r for r in parse_manifest(
        _bytes({**manifest_json, "artifacts": [
            r for r in manifest_json["artifacts"] if r is not victim]})).artifacts
        if r.function == "jxe_demo.funcs:scale")
    with pytest.raises(ArtifactError, match=r"artifacts\[\d+\]\.sha256 is not a SHA-256"):
        index.function("jxe_demo.funcs:poly")
    with pytest.raises(ArtifactError, match=r"artifacts\[\d+\]\.sha256 is not a SHA-256"):
        index.full()
    assert index.function("jxe_demo.funcs:nothing_by_this_name").artifacts == ()


@pytest.mark.parametrize(("mutate", "message"), [
    (lambda m: m["artifacts"].append(7), r"artifacts\[\d+\] must be an object, got int"),
    (lambda m: m["artifacts"][0].pop("function"), r"artifacts\[0\] lacks 'function'"),
    (lambda m: m["skipped"].append({"function": 3}), r"skipped\[0\]\.function must be str"),
    (lambda m: m.update(executables=[{"artifact": None}]),
     r"executables\[0\]\.artifact must be str"),
    (lambda m: m.update(executables={}), r"'executables' must be a list"),
])
def test_a_record_no_function_can_be_told_from_is_corrupt_for_every_function(
        manifest_json, mutate, message):
    from hatch_jaxexport.formats.manifest_reader import read_manifest_index

    mutate(manifest_json)
    with pytest.raises(ArtifactError, match=message):
        read_manifest_index(_bytes(manifest_json))


# --------------------------------------------------------------------------------------------
# Several records naming one file: identical modules stored once (bake/workers/_dedupe.py)


def _shared_manifest(*files: tuple[str, str, int]):
    """A manifest of recorded-call artifacts of one function, one per ``(file, sha256,
    size)``, told apart by their calls."""
    from hatch_jaxexport.formats.manifest import ConcreteRecord, Manifest

    records = tuple(ConcreteRecord(
        function="pkg:f", structure_index=-1, static={}, platform="cpu", sizes={},
        inputs=[[[6], "float32"]], call=f'{{"x":{{"array":[[6],"float32"]}},"k":{i}}}',
        file=file, sha256=sha, size=size) for i, (file, sha, size) in enumerate(files))
    return Manifest(package="pkg", generator="hatch-jaxexport test", jax_version="0.10.2",
                    jaxlib_version="0.10.2", artifacts=(), concrete=records)


def test_records_may_share_a_file_with_the_same_sha256_and_size():
    digest = "a" * 64
    manifest = parse_manifest(_shared_manifest(("f.jaxexport", digest, 10),
                                               ("f.jaxexport", digest, 10)).to_bytes())
    assert [c.file for c in manifest.concrete] == ["f.jaxexport", "f.jaxexport"]
    assert len({c.id for c in manifest.concrete}) == 2


@pytest.mark.parametrize("other", [("b" * 64, 10), ("a" * 64, 11)])
def test_a_file_named_with_other_contents_is_a_conflict(other):
    data = _shared_manifest(("f.jaxexport", "a" * 64, 10), ("f.jaxexport", *other)).to_bytes()
    with pytest.raises(ArtifactError, match=r"names file f\.jaxexport, which another record "
                       r"lists with other contents: expected SHA-256 [ab]{16}\.\.\. and "
                       r"1[01] bytes, given [ab]{16}\.\.\. and 1[01] bytes"):
        parse_manifest(data)


def test_a_record_id_listed_twice_is_still_refused_when_its_file_is_the_same():
    digest = "a" * 64
    data = json.loads(_shared_manifest(("f.jaxexport", digest, 10)).to_bytes())
    data["concrete"].append(dict(data["concrete"][0]))
    with pytest.raises(ArtifactError, match="listed twice"):
        parse_manifest(_bytes(data))


def test_the_manifest_is_compact_and_deterministic():
    manifest = _shared_manifest(("g.jaxexport", "b" * 64, 3), ("f.jaxexport", "a" * 64, 10))
    raw = manifest.to_bytes()
    assert raw.count(b"\n") == 1 and b": " not in raw and b", " not in raw
    assert parse_manifest(raw).to_bytes() == raw
    assert manifest._replace(concrete=manifest.concrete[::-1]).to_bytes() == raw
