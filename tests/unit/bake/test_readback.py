"""The build's read-back (``bake.verify.read_back``) and each record once (``_dedupe.one_per_id``).

On real exports: a manifest is read as the loader reads it (its index, each function's records
through the record spans, the whole file) and every file it names hashed; a manifest that lists
a record twice, a damaged blob, spans that hide a record, fail it, naming the package. A
package whose family is split over two workers and whose sizes come from ``concrete=`` and a
recording that repeats them bakes each size once.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sys
from pathlib import Path

import pytest
from conftest import run

from hatch_jaxexport.bake.verify import read_back, verify_folder
from hatch_jaxexport.bake.workers._dedupe import one_per_id
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.manifest import MANIFEST_NAME, ConcreteRecord
from hatch_jaxexport.formats.manifest_reader import parse_manifest
from hatch_jaxexport.formats.record_spans import SPANS_KEY
from hatch_jaxexport.formats.signatures import SIGNATURES_NAME


def _concrete(sha: str = "a" * 64, sizes: dict | None = None) -> ConcreteRecord:
    return ConcreteRecord(function="pkg:f", structure_index=0, static={"k": 1}, platform="cpu",
                          sizes=sizes or {"n": 3}, inputs=[[[3], "float32"]], call="",
                          file="f.concrete.jaxexport", sha256=sha, size=8)


def test_identical_records_are_kept_once_and_different_ones_name_both():
    one = _concrete()
    assert one_per_id("pkg", "concrete-size artifact", [(one, "concrete="),
                                                        (one, "the recording")]) == [one]
    other = _concrete("b" * 64, {"n": 3, "m": 1})
    with pytest.raises(ExportError) as err:
        one_per_id("pkg", "concrete-size artifact", [(one, "sizes from concrete="),
                                                      (other, "sizes from the recording")])
    assert str(err.value) == (
        f"pkg: two different concrete-size artifacts claim {one.id}: one from sizes from "
        f"concrete= (file f.concrete.jaxexport, SHA-256 {'a' * 12}, 8 bytes, sizes "
        "{'n': 3}), one from sizes from the recording (file f.concrete.jaxexport, SHA-256 "
        f"{'b' * 12}, 8 bytes, sizes {{'n': 3, 'm': 1}})")


@pytest.fixture
def folder(demo_site: Path, tmp_path: Path) -> Path:
    """A copy of a real export's artifact folder (``jxe_demo``, two workers)."""
    return Path(shutil.copytree(demo_site / "jxe_demo" / "_jaxexport", tmp_path / "art"))


def _rewrite(folder: Path, change) -> None:
    """The folder's manifest, changed by ``change`` and written as the build writes it."""
    manifest = parse_manifest((folder / MANIFEST_NAME).read_bytes())
    (folder / MANIFEST_NAME).write_bytes(change(manifest).to_bytes())


def test_a_real_export_reads_back(folder: Path):
    manifest = read_back(folder, "jxe_demo", "the export")
    assert manifest == parse_manifest((folder / MANIFEST_NAME).read_bytes())
    assert len({r.function for r in manifest.artifacts}) > 3


def test_a_record_written_twice_fails_the_read_back_and_verify(folder: Path):
    _rewrite(folder, lambda m: m._replace(artifacts=(*m.artifacts, m.artifacts[0])))
    with pytest.raises(ExportError) as err:
        read_back(folder, "jxe_demo", "the export")
    assert str(err.value).startswith("jxe_demo: the export failed the build's read-back")
    assert "listed twice" in str(err.value)
    assert "listed twice" in " ".join(verify_folder(folder, "jxe_demo").problems)


def test_a_damaged_blob_fails_the_read_back(folder: Path):
    record = parse_manifest((folder / MANIFEST_NAME).read_bytes()).artifacts[0]
    data = bytearray((folder / record.file).read_bytes())
    data[len(data) // 2] ^= 1
    (folder / record.file).write_bytes(bytes(data))
    with pytest.raises(ExportError, match=f"{record.id}: _jaxexport/{record.file} does not "
                                          "match its SHA-256"):
        read_back(folder, "jxe_demo", "the export")


def test_spans_that_hide_a_record_fail_and_a_manifest_without_spans_only_the_build(folder):
    data = (folder / MANIFEST_NAME).read_bytes()
    whole = json.loads(data)
    table = whole.pop(SPANS_KEY)
    name, runs = next((n, r) for n, r in table["functions"].items()
                      if _holds_several(r.get("artifacts", [])[:1], data))
    start, end, first = runs["artifacts"][0]
    one = json.JSONDecoder().raw_decode(data[start:end].decode())[1]
    runs["artifacts"][0] = [start, start + one, first]  # the run ends after its first record
    body = data[:data.rfind(f',"{SPANS_KEY}":'.encode())]
    table["sha256"] = hashlib.sha256(body).hexdigest()
    spans = json.dumps(table, sort_keys=True, separators=(",", ":")).encode()
    (folder / MANIFEST_NAME).write_bytes(body + f',"{SPANS_KEY}":'.encode() + spans + b"}\n")
    with pytest.raises(ExportError, match=f"the records of {name}, read as its first call "
                                          "reads them, differ from the whole manifest's"):
        read_back(folder, "jxe_demo", "the export")
    # no spans at all: an older wheel's manifest, which the loader reads whole; not the build's
    (folder / MANIFEST_NAME).write_bytes(
        json.dumps(whole, sort_keys=True, separators=(",", ":")).encode() + b"\n")
    assert verify_folder(folder, "jxe_demo").problems == []
    with pytest.raises(ExportError, match="record spans are missing"):
        read_back(folder, "jxe_demo", "the export")


def _holds_several(runs: list, data: bytes) -> bool:
    """Whether the first of ``runs`` (a function's runs of records) holds two or more."""
    return any(len(json.loads(b"[" + data[s:e] + b"]")) > 1 for s, e, _ in runs)


def test_verify_refuses_a_hand_tampered_duplicate_record(demo_site: Path, tmp_path: Path):
    site = Path(shutil.copytree(demo_site, tmp_path / "site",
                                ignore=shutil.ignore_patterns("__pycache__")))
    art = site / "jxe_demo" / "_jaxexport"
    whole = json.loads((art / MANIFEST_NAME).read_text())
    whole.pop(SPANS_KEY)
    whole["artifacts"].append(whole["artifacts"][0])  # by hand: the same record twice
    (art / MANIFEST_NAME).write_text(json.dumps(whole))
    proc = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_demo"],
               env={"PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu"}, check=False)
    assert proc.returncode != 0 and "listed twice" in proc.stdout + proc.stderr


PACKAGE = '''
from hatch_jaxexport import exportable

TRACES = {"count": 0}


@exportable({"x": ("n", "float32")}, static={"k": [1, 2]}, concrete={"n": [3, 4]}, ad_order=1)
def lengthy(x, k=1):
    """``range(len(x))``: not shape-polymorphic, served at concrete sizes only."""
    TRACES["count"] += 1
    return sum(x[i] * i * k for i in range(len(x)))
'''


def test_a_family_over_two_workers_and_repeated_sizes_bake_each_size_once(tmp_path: Path):
    from hatch_jaxexport.bake import export_package

    (tmp_path / "jxe_twice").mkdir()
    (tmp_path / "jxe_twice" / "__init__.py").write_text(PACKAGE)
    sizes = [{"n": 3}, {"n": 4}, {"n": 3}, {"n": 5}]  # concrete= repeated, and itself
    (tmp_path / "jxe_twice" / SIGNATURES_NAME).write_text(json.dumps(
        {"version": 2, "functions": {"jxe_twice:lengthy": {"0": sizes}}}))
    result = export_package("jxe_twice", tmp_path / "out", jobs=2, on_error="skip",
                            search_path=[tmp_path], platforms=("cpu",))
    concrete = result.manifest.concrete
    assert sorted((c.static["k"], c.sizes["n"]) for c in concrete) == [
        (1, 3), (1, 4), (1, 5), (2, 3), (2, 4), (2, 5)]
    assert len({c.file for c in concrete}) == len(concrete)  # each exported once
    assert read_back(tmp_path / "out", "jxe_twice", "again") == parse_manifest(
        result.manifest.to_bytes())


def test_a_family_is_one_workers_share():
    from hatch_jaxexport.bake.export.exporter import ExportTask
    from hatch_jaxexport.bake.workers._worker import share_of

    tasks = [(None, ExportTask("p:f", 0, {"k": k}, "cpu", kind, False, {}, {}))
             for k in (1, 2, 3) for kind in ("primal", "jvp", "vjp")]
    shares = [share_of(tasks, worker, 2) for worker in range(2)]
    assert sorted(t.id for share in shares for _, t in share) == sorted(t.id for _, t in tasks)
    assert [sorted({t.static["k"] for _, t in share}) for share in shares] == [[1, 3], [2]]
    assert [len(share) for share in shares] == [6, 3]  # whole families, none split
