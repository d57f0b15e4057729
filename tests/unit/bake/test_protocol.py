"""The export workers' request and result files (``bake/protocol.py``): typed,
versioned, and checked where they are read."""

from __future__ import annotations

import json

import pytest

from hatch_jaxexport.bake.protocol import PROTOCOL_VERSION, WorkerRequest, WorkerResult
from hatch_jaxexport.errors import ExportError


def _request(tmp_path) -> WorkerRequest:
    return WorkerRequest(package="pkg", default_platforms=("cpu", "cuda"), worker=1, workers=2,
                         out_dir=str(tmp_path), result=str(tmp_path / "r.json"),
                         executables=("x86_64-avx2",), signatures=None, progress=None)


def test_a_request_and_a_result_read_back_as_written(tmp_path):
    request = _request(tmp_path)
    request.write(tmp_path / "q.json")
    assert WorkerRequest.read(tmp_path / "q.json") == request
    result = WorkerResult(records=[{"id": "a"}], seconds={"a": 0.5}, notes=["n"],
                          jax_version="0.10.2", task_count=3, fatal=None)
    result.write(tmp_path / "r.json")
    assert WorkerResult.read(tmp_path / "r.json") == result
    assert json.loads((tmp_path / "r.json").read_text())["version"] == PROTOCOL_VERSION


@pytest.mark.parametrize("change, expected", [
    (lambda d: d.update(version=PROTOCOL_VERSION + 1),
     f"is of protocol version {PROTOCOL_VERSION + 1}, expected {PROTOCOL_VERSION}"),
    (lambda d: d.pop("version"), f"is of protocol version None, expected {PROTOCOL_VERSION}"),
    (lambda d: d.pop("package"), "missing field(s) ['package'], unknown field(s) none"),
    (lambda d: d.update(jobs=2), "missing field(s) none, unknown field(s) ['jobs']"),
])
def test_a_request_of_another_shape_is_an_export_error_naming_the_file(tmp_path, change,
                                                                      expected):
    _request(tmp_path).write(tmp_path / ".request-1.json")
    data = json.loads((tmp_path / ".request-1.json").read_text())
    change(data)
    (tmp_path / ".request-1.json").write_text(json.dumps(data))
    with pytest.raises(ExportError) as caught:
        WorkerRequest.read(tmp_path / ".request-1.json")
    assert f"export worker request .request-1.json {expected}" in str(caught.value) or \
        f"export worker request .request-1.json: {expected}" in str(caught.value)


def test_an_unreadable_result_is_an_export_error(tmp_path):
    (tmp_path / ".result-0.json").write_text("{not json")
    with pytest.raises(ExportError, match=r"export worker result \.result-0\.json cannot be "
                                          r"read"):
        WorkerResult.read(tmp_path / ".result-0.json")


def test_an_executable_compilers_files_read_back_and_name_their_kind(tmp_path):
    from hatch_jaxexport.bake.protocol import CompileRequest, CompileResult

    request = CompileRequest(package="pkg", target="x86_64-avx2", plans=[{"artifact": "a"}],
                             out_dir=str(tmp_path), result=str(tmp_path / "r.json"))
    request.write(tmp_path / "q.json")
    assert CompileRequest.read(tmp_path / "q.json") == request
    (tmp_path / "r.json").write_text(json.dumps({"version": PROTOCOL_VERSION, "records": [],
                                                 "notes": [], "seconds": 1}))
    with pytest.raises(ExportError, match=r"executable compiler result r\.json: missing "
                                          r"field\(s\) none, unknown field\(s\) \['seconds'\]"):
        CompileResult.read(tmp_path / "r.json")
