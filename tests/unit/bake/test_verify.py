"""``python -m hatch_jaxexport verify PACKAGE``: artifacts checked against the manifest's hashes."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
import zipfile
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import run

from hatch_jaxexport.bake.verify import verify_package, verify_report


def verify(site: Path, package: str = "jxe_demo"):
    return run([sys.executable, "-m", "hatch_jaxexport", "verify", package],
               env={"PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu"}, check=False)


def _copy_site(site: Path, copy: Path) -> Path:
    """A site of baked packages copied, for a test to damage."""
    shutil.copytree(site, copy, ignore=shutil.ignore_patterns("__pycache__"))
    return copy


@pytest.fixture
def site(demo_site: Path, tmp_path: Path) -> Path:
    return _copy_site(demo_site, tmp_path / "site")


def _art(site: Path) -> Path:
    return site / "jxe_demo" / "_jaxexport"


def _manifest(site: Path) -> dict:
    return json.loads((_art(site) / "manifest.json").read_text())


def _record(site: Path, function: str = "jxe_demo.funcs:scale") -> dict:
    return next(r for r in _manifest(site)["artifacts"] if r["function"] == function)


def test_intact_package_is_one_ok_line(site: Path) -> None:
    proc = verify(site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    manifest = _manifest(site)
    total = sum(r["size"] for r in manifest["artifacts"])
    functions = len({r["function"] for r in manifest["artifacts"]})
    assert proc.stdout == (
        f"jxe_demo: OK, {functions} function(s), {len(manifest['artifacts'])} artifact(s), "
        f"{total:,} bytes match "
        f"_jaxexport/manifest.json (schema 1, built with jax {manifest['jax_version']})\n")
    assert "jax" not in proc.stderr


def test_in_process_api_on_the_imported_demo(demo) -> None:
    assert verify_package("jxe_demo") == []
    report = verify_report("jxe_demo")
    assert report.ok and report.manifest is not None and report.summary().startswith(
        "jxe_demo: OK, ")


def _flip(site: Path) -> str:
    record = _record(site)
    blob = _art(site) / record["file"]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x01
    blob.write_bytes(bytes(data))
    return rf"jxe_demo.funcs:scale/0/cpu: _jaxexport/{record['file']} does not match its " \
           r"SHA-256 \(damaged or modified after the build\)"


def _truncate(site: Path) -> str:
    record = _record(site)
    blob = _art(site) / record["file"]
    blob.write_bytes(blob.read_bytes()[:100])
    return rf"_jaxexport/{record['file']} has 100 bytes, the manifest says {record['size']:,}"


def _grow(site: Path) -> str:
    record = _record(site)
    blob = _art(site) / record["file"]
    blob.write_bytes(blob.read_bytes() + b"\0" * 10)
    return rf"_jaxexport/{record['file']} has more bytes, the manifest says {record['size']:,}"


def _delete(site: Path) -> str:
    record = _record(site, "jxe_demo.funcs:dense")
    (_art(site) / record["file"]).unlink()
    return rf"jxe_demo.funcs:dense/0/cpu: _jaxexport/{record['file']} is missing"


def _extra_file(site: Path) -> str:
    (_art(site) / "payload.jaxexport").write_bytes(b"unlisted")
    return r"_jaxexport/payload.jaxexport: file not listed in the manifest"


def _extra_folder(site: Path) -> str:
    (_art(site) / "sub").mkdir()
    return r"_jaxexport/sub: folder not listed in the manifest"


def _link_out(site: Path) -> str:
    record = _record(site)
    blob = _art(site) / record["file"]
    outside = site.parent / "outside.bin"
    outside.write_bytes(blob.read_bytes())  # identical bytes: only the link gives it away
    blob.unlink()
    blob.symlink_to(outside)
    return rf"_jaxexport/{record['file']} is a link that resolves outside _jaxexport/"


def _foreign_pytree(site: Path) -> str:
    manifest = _manifest(site)
    manifest["artifacts"][0]["pytree_types"] = ["os:PathLike"]
    (_art(site) / "manifest.json").write_text(json.dumps(manifest))
    return r"pytree type 'os:PathLike' is outside package 'jxe_demo'"


def _unsafe_name(site: Path) -> str:
    manifest = _manifest(site)
    manifest["artifacts"][0]["file"] = "../funcs.py"
    (_art(site) / "manifest.json").write_text(json.dumps(manifest))
    return r"manifest names an unsafe artifact file '../funcs.py'"


def _bad_json(site: Path) -> str:
    (_art(site) / "manifest.json").write_bytes(b'{"schema_version": 1,')
    return r"corrupt manifest jxe_demo/_jaxexport/manifest.json: not valid JSON"


def _newer_schema(site: Path) -> str:
    manifest = _manifest(site)
    manifest["schema_version"] = 99
    (_art(site) / "manifest.json").write_text(json.dumps(manifest))
    return r"schema version 99, newer than this hatch-jaxexport reads"


def _manifest_link(site: Path) -> str:
    manifest = _art(site) / "manifest.json"
    outside = site.parent / "manifest.json"
    outside.write_bytes(manifest.read_bytes())
    manifest.unlink()
    manifest.symlink_to(outside)
    return r"manifest.json is a link that resolves outside _jaxexport/"


def _other_package(site: Path) -> str:
    manifest = _manifest(site)
    manifest["package"] = "someone_else"
    (_art(site) / "manifest.json").write_text(json.dumps(manifest))
    return r"the manifest is for package 'someone_else', not 'jxe_demo'"


DAMAGE: list[Callable[[Path], str]] = [
    _flip, _truncate, _grow, _delete, _extra_file, _extra_folder, _link_out, _foreign_pytree,
    _unsafe_name, _bad_json, _newer_schema, _manifest_link, _other_package]


@pytest.mark.parametrize("damage", DAMAGE, ids=[d.__name__.strip("_") for d in DAMAGE])
def test_each_problem_is_listed_with_exit_1(site: Path, damage: Callable[[Path], str]) -> None:
    expected = damage(site)
    proc = verify(site)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "jxe_demo: 1 problem(s):", proc.stdout
    assert len(lines) == 2, proc.stdout
    import re

    assert re.search(expected, lines[1]), (expected, lines[1])


def test_several_problems_are_all_listed(site: Path) -> None:
    _flip(site)
    _delete(site)
    _extra_file(site)
    proc = verify(site)
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert lines[0] == "jxe_demo: 3 problem(s):"
    assert sorted(line.split(":")[0] for line in lines[1:]) == [
        "  - _jaxexport/payload.jaxexport", "  - jxe_demo.funcs", "  - jxe_demo.funcs"]


def test_a_package_without_artifacts_or_not_installed_fails(tmp_path: Path) -> None:
    proc = verify(tmp_path, "json")
    assert proc.returncode == 1
    assert proc.stdout.splitlines()[1] == \
        "  - json carries no baked artifacts (_jaxexport/manifest.json not found)"
    missing = verify(tmp_path, "no_such_package_xyz")
    assert missing.returncode == 1
    assert "cannot find package 'no_such_package_xyz'" in missing.stdout


def test_a_zipped_package_verifies(site: Path, tmp_path: Path) -> None:
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted((site / "jxe_demo").rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(site).as_posix())
    proc = verify(archive)
    assert proc.returncode == 0 and proc.stdout.startswith("jxe_demo: OK, "), proc.stdout
    with zipfile.ZipFile(archive, "a") as zf:
        zf.writestr("jxe_demo/_jaxexport/extra.bin", b"x")
    extra = verify(archive)
    assert extra.returncode == 1 and "extra.bin: file not listed" in extra.stdout


def test_verify_never_imports_jax_or_the_package_modules(site: Path) -> None:
    code = ("import sys\nfrom hatch_jaxexport.bake.verify import verify_package\n"
            "print(verify_package('jxe_demo'), 'jax' in sys.modules, "
            "'jxe_demo.funcs' in sys.modules)")
    proc = run([sys.executable, "-c", code], env={"PYTHONPATH": str(site)})
    assert proc.stdout.split() == ["[]", "False", "False"]


@pytest.fixture
def exec_copy(exec_site: Path, tmp_path: Path) -> Path:
    return _copy_site(exec_site, tmp_path / "exec-site")


def test_precompiled_executables_are_verified_too(exec_copy: Path) -> None:
    art = exec_copy / "jxe_exec" / "_jaxexport"
    manifest = json.loads((art / "manifest.json").read_text())
    records = manifest["executables"]
    intact = verify(exec_copy, "jxe_exec")
    assert intact.returncode == 0, intact.stdout
    assert f"and {len(records)} precompiled executable(s), " \
           f"{sum(r['size'] for r in records):,} bytes, match" in intact.stdout
    damaged, orphan = records[0], records[1]
    blob = bytearray((art / damaged["file"]).read_bytes())
    blob[100] ^= 0xFF
    (art / damaged["file"]).write_bytes(bytes(blob))
    orphan["artifact_sha256"] = "0" * 64  # as if compiled from another artifact
    (art / "manifest.json").write_text(json.dumps(manifest))
    (art / "stray.x86_64-avx2.0.xla").write_bytes(b"not listed")
    broken = verify(exec_copy, "jxe_exec")
    assert broken.returncode == 1
    assert damaged["file"] in broken.stdout and "SHA-256" in broken.stdout
    assert f"compiled from artifact {orphan['artifact']}, which the manifest does not list " \
           "with that SHA-256" in broken.stdout
    assert "_jaxexport/stray.x86_64-avx2.0.xla: file not listed in the manifest" in broken.stdout


def test_another_jax_releases_set_is_verified_like_the_main_one(site: Path,
                                                                tmp_path: Path) -> None:
    """A wheel baked with ``jax-releases``: each set's manifest and the blobs its records name
    are checked (its files counted as listed), and a damaged blob of a set is named with it.
    The set here is this jax's own export relabelled as another release's, added by the
    build's own ``add_jax_set``."""
    from hatch_jaxexport.bake.workers.jax_sets import add_jax_set

    other = _copy_site(site, tmp_path / "other")
    raw = _manifest(other)
    raw["jax_version"], raw["jax_released"] = "0.8.1", "2025-11-18"
    for record in raw["artifacts"]:  # other bytes, as another jax writes them
        blob = _art(other) / record["file"]
        blob.write_bytes(blob.read_bytes() + b"\0")
        record["size"] += 1
        record["sha256"] = hashlib.sha256(blob.read_bytes()).hexdigest()
    (_art(other) / "manifest.json").write_text(json.dumps(raw))
    add_jax_set(_art(site), _art(other), lambda line: None)
    proc = verify(site)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "jax 0.8.1's set matches manifest-jax-0.8.1.json" in proc.stdout
    damaged = next(_art(site).glob("jax0.8.1-*.jaxexport"))
    damaged.write_bytes(damaged.read_bytes()[:-1])
    proc = verify(site)
    assert proc.returncode == 1
    assert "jax 0.8.1's set: " in proc.stdout and damaged.name in proc.stdout
    (_art(site) / "manifest-jax-0.8.1.json").unlink()
    assert "manifest-jax-0.8.1.json is missing" in verify(site).stdout
