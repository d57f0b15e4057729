"""The exporter and build orchestrator: determinism, no path leaks, collected failures, the CLI."""

from __future__ import annotations

import getpass
import json
import re
import shutil
import sys
import warnings
from pathlib import Path

import pytest
from conftest import FIXTURES, run

from hatch_jaxexport import ExportError, FallbackWarning
from hatch_jaxexport.bake import discover, export_package, list_tasks


def _tree_bytes(folder: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir())}


def test_exports_from_two_directories_with_shifted_lines_are_identical(tmp_path):
    first, second = tmp_path / "checkout-one", tmp_path / "elsewhere" / "checkout-two"
    shutil.copytree(FIXTURES / "jxe_demo", first / "jxe_demo")
    shutil.copytree(FIXTURES / "jxe_demo", second / "jxe_demo")
    funcs = second / "jxe_demo" / "funcs.py"
    funcs.write_text("# shifted\n\n\n" + funcs.read_text())
    a = export_package("jxe_demo", tmp_path / "a", search_path=[first], jobs=2)
    export_package("jxe_demo", tmp_path / "b", search_path=[second], jobs=1)
    assert len(a.manifest.artifacts) == 18
    assert _tree_bytes(tmp_path / "a") == _tree_bytes(tmp_path / "b")
    leaks = [str(tmp_path).encode(), b"checkout-one", b"funcs.py", getpass.getuser().encode()
             if getpass.getuser() not in ("root",) else b"/root/"]
    for name, data in _tree_bytes(tmp_path / "a").items():
        for leak in leaks:
            assert leak not in data, (name, leak)


def test_every_structure_static_value_and_platform_is_a_task():
    tasks = list_tasks("jxe_demo", platforms=("cpu", "tpu"), search_path=[FIXTURES])
    assert "jxe_demo.reduce/0/cpu" in tasks and "jxe_demo.reduce/1/tpu" in tasks
    assert "jxe_demo.funcs:poly/0/mode='exact'/tpu" in tasks
    assert "jxe_demo.funcs:gpu_only/0/cuda" in tasks  # its own platforms win
    assert not any(t.startswith("jxe_demo.funcs:gpu_only") and t.endswith("/cpu") for t in tasks)
    assert len(tasks) == 2 * 17 + 1


def test_export_failures_are_collected_and_name_function_structure_platform(tmp_path):
    with pytest.raises(ExportError) as info:
        export_package("jxe_failing", tmp_path / "out", search_path=[FIXTURES], jobs=2)
    failures = info.value.failures
    assert len(failures) == 3, failures
    text = "\n".join(failures)
    assert "jxe_failing:with_callback, structure 0 (x: float32[n]), platform cpu, primal " \
           "artifact: ValueError: the function calls back into Python" in text
    assert "jxe_failing:eigenvalues, structure 0 (x: float32[n, n]), platform cuda, primal " \
           "artifact: ValueError: Cannot serialize code with custom calls whose targets have no " \
           "compatibility" in text
    assert "@cuhybrid_eig_real" in text  # the line after jax's "Examples are:"
    assert "leave the platform out of this function's @exportable(platforms=...)" in text
    assert "jxe_failing:dynamic_loop, structure 0 (x: float32[]; n: int32[]), platform cpu, " \
           "primal artifact: ValueError: Reverse-mode differentiation does not work for " \
           "lax.while_loop" in text
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_on_error_skip_records_failures_and_the_loader_falls_back(tmp_path, run_python,
                                                                  maintainer_warnings):
    from conftest import export_into_copy

    messages: list[str] = []
    site = export_into_copy(tmp_path, "jxe_failing", on_error="skip", log=messages.append)
    manifest = json.loads((site / "jxe_failing" / "_jaxexport" / "manifest.json").read_text())
    assert {r["function"] for r in manifest["artifacts"]} == {"jxe_failing:fine",
                                                              "jxe_failing:eigenvalues"}
    assert sorted((s["function"], s["platform"]) for s in manifest["skipped"]) == [
        ("jxe_failing:dynamic_loop", "cpu"), ("jxe_failing:eigenvalues", "cuda"),
        ("jxe_failing:with_callback", "cpu")]
    assert sum(m.startswith("warning: skipped") for m in messages) == 3
    proc = run_python("import jax.numpy as jnp, jxe_failing as m\n"
                      "print(float(m.dynamic_loop(jnp.float32(1.0), jnp.int32(2))))",
                      env={"PYTHONPATH": str(site)})
    assert proc.stdout.strip() == "2.25"
    # the structure, its cause (where, and the fix) and the command: what the build log said
    assert "its export for structure 0 (x: float32[]; n: int32[]) on cpu failed at build time " \
           "and was skipped: ValueError: Reverse-mode" in proc.stderr
    assert "`python -m hatch_jaxexport export jxe_failing --out DIR` shows each failure" \
        in proc.stderr
    reasons = [s["reason"] for s in manifest["skipped"]]
    assert all("\n" not in r and len(r) < 1600 for r in reasons), reasons  # no tracebacks
    assert any(r.endswith("remove the callback from the exported function") for r in reasons)


def test_import_errors_name_the_module():
    with pytest.raises(ExportError, match=r"cannot import module 'jxe_broken.bad_module': "
                                          r"ModuleNotFoundError: No module named "
                                          r"'this_module_does_not_exist'"):
        list_tasks("jxe_broken", search_path=[FIXTURES])
    with pytest.raises(ExportError, match=r"cannot import package 'no_such_package_xyz'"):
        list_tasks("no_such_package_xyz", search_path=[FIXTURES])


def test_duplicate_names_are_an_error(tmp_path):
    pkg = tmp_path / "jxe_dupes"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for module in ("one", "two"):
        (pkg / f"{module}.py").write_text(
            "from hatch_jaxexport import exportable\n"
            "@exportable('shared', {'x': ('n', 'float32')})\ndef f(x):\n    return x\n")
    with pytest.raises(ExportError, match=r"two exportables are named 'shared'"):
        list_tasks("jxe_dupes", search_path=[tmp_path])


def test_refuses_to_replace_a_folder_it_did_not_write(tmp_path):
    (tmp_path / "precious.txt").write_text("keep me")
    with pytest.raises(ExportError, match="refusing to replace"):
        export_package("jxe_demo", tmp_path, search_path=[FIXTURES])
    assert (tmp_path / "precious.txt").exists()


def test_discover_in_process_returns_sorted_exportables(monkeypatch):
    monkeypatch.syspath_prepend(str(FIXTURES))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FallbackWarning)
        names = [fn.name for fn in discover("jxe_failing")]
    assert names == sorted(names) and "jxe_failing:fine" in names


def test_cli_export_and_inspect(tmp_path):
    site = tmp_path / "site"
    shutil.copytree(FIXTURES / "jxe_demo", site / "jxe_demo")
    out = run([sys.executable, "-m", "hatch_jaxexport", "export", "jxe_demo", "--out",
               site / "jxe_demo" / "_jaxexport", "--path", site, "--jobs", "2"])
    assert "wrote 18 artifact(s)" in out.stdout
    lookup = re.search(r"^  jxe_demo\.funcs:lookup: 1 structure\(s\), platforms cpu, 1 "
                       r"artifact\(s\), [0-9.]+ kB, [0-9.]+ s \[\d+/15, [0-9.]+ s elapsed"
                       r"(?:, about [0-9.]+ s left)?\]\n"  # the time left: builds over 10 s
                       r"    captures 1 array\(s\), 128 B, frozen at build time:\n"
                       r"      jxe_demo\.funcs\.TABLE float32\[4,8\] 128 B\n", out.stderr, re.M)
    assert lookup, out.stderr  # the function's progress line, its captured arrays under it
    assert re.search(r"\[15/15, [0-9.]+ s elapsed\]$", out.stderr, re.M), out.stderr
    shown = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_demo"],
                env={"PYTHONPATH": str(site)})
    lines = shown.stdout.splitlines()
    assert lines[0].startswith("jxe_demo: 15 function(s), 18 artifact(s), ")
    assert lines[1].split() == ["function", "structure", "static", "platform", "member", "vjp",
                                "bytes"]
    assert any("jxe_demo.funcs:poly" in line and '{"mode": "exact"}' in line for line in lines)
    captured = lines.index("jxe_demo.funcs:lookup:")  # the only function that captures an array
    assert lines[captured:captured + 3] == ["jxe_demo.funcs:lookup:",
                                            "  captures 1 array(s), 128 B, frozen at build time:",
                                            "    jxe_demo.funcs.TABLE float32[4,8] 128 B"]
    as_json = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_demo", "--json"],
                  env={"PYTHONPATH": str(site)})
    assert len(json.loads(as_json.stdout)["artifacts"]) == 18


def test_cli_errors_are_one_clear_line_without_traceback(tmp_path):
    proc = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "json"], check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip() == "jaxexport: error: package 'json' carries no baked artifacts"
    debug = run([sys.executable, "-m", "hatch_jaxexport", "--debug", "inspect", "json"],
                check=False)
    assert "Traceback" in debug.stderr
    helped = run([sys.executable, "-m", "hatch_jaxexport", "export", "--help"])
    assert "--on-error {fail,skip}" in helped.stdout


def test_a_skip_reason_keeps_the_first_line_the_place_and_the_first_hint():
    """Issue 37: the manifest stays small however many skips, and still says what to do."""
    from hatch_jaxexport.bake.workers.orchestrate import skip_reason

    error = ("InconclusiveDimensionOperation: Symbolic dimension comparison 'n' >= '2' is "
             "inconclusive.")
    reason = skip_reason({"error": error, "location": "mypkg/ops.py:12",
                          "message": error + "\n" + "traceback line\n" * 500})
    assert reason.startswith(error + " (at mypkg/ops.py:12); hint: a Python `if` or comparison")
    assert "traceback" not in reason and len(reason) < 600
