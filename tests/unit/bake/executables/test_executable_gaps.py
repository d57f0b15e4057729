"""``executables = true`` is never silent: a function or structure that gets no executable for
want of sizes gets a line that names it, its symbols and the ``executable_sizes=`` to add; the
summary counts executables per function and in all (0 too), and ``inspect`` always says how
many the package ships."""

from __future__ import annotations

import shutil
import sys

from conftest import FIXTURES, run

from hatch_jaxexport.bake.executables.compiling import size_gap_lines

TAIL = ("record the sizes real calls use (HATCH_JAXEXPORT_RECORD=1 while the tests run), or "
        "add executable_sizes={%s} to its @exportable")
PARTLY = ("jaxexport: warning: jxe_unsized:partly gets no precompiled executable for structure 1 "
          "(x: float32[b, n]): symbol b has no size; " + TAIL % '"n": [4], "b": [...]')
UNSIZED = ("jaxexport: warning: jxe_unsized:unsized gets no precompiled executable: symbol n has "
           "no size; " + TAIL % '"n": [...]')


def bake(tmp_path, *options: str):
    shutil.copytree(FIXTURES / "jxe_unsized", tmp_path / "jxe_unsized")
    proc = run([sys.executable, "-m", "hatch_jaxexport", "export", "jxe_unsized", "--out",
                tmp_path / "jxe_unsized" / "_jaxexport", "--path", tmp_path, *options])
    shown = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_unsized"],
                env={"PYTHONPATH": str(tmp_path)})
    return proc.stderr.splitlines(), shown.stdout.splitlines()


def test_functions_and_structures_without_sizes_are_named_with_the_option_to_add(tmp_path):
    lines, shown = bake(tmp_path, "--executables", "x86_64-avx2")
    assert PARTLY in lines and UNSIZED in lines
    (summary,) = [line for line in lines if line.startswith("jaxexport: jxe_unsized: 2 func")]
    assert summary.endswith("; 1 precompiled executable(s) for x86_64-avx2, "
                            f"{summary.rsplit(', ', 1)[1].split(' (')[0]} "
                            "(jxe_unsized:partly 1)"), summary
    assert any(line.startswith("precompiled executables: 1, ") for line in shown), shown


def test_without_executables_nothing_is_said_at_build_and_inspect_says_0(tmp_path):
    lines, shown = bake(tmp_path)
    assert not any("precompiled" in line for line in lines), lines
    assert [line for line in shown if line.startswith("precompiled executables:")] == [
        "precompiled executables: 0 (the first call of each signature compiles the StableHLO; "
        "see executables = true and executable_sizes= in docs/executables.md)"]


def test_a_function_with_some_structures_compiled_names_only_the_others():
    plans = [{"function": "p:f", "structure_index": 0, "structure": "x: float32[n]",
              "sizes": [{"n": 4}], "targets": ["x86_64-avx2"]},
             {"function": "p:f", "structure_index": 1, "structure": "x: float32[b, n]",
              "missing": ["b"], "sizes": [], "named": {"n": [4]}},
             {"function": "p:g", "structure_index": 0, "structure": "x: float32[a, c]",
              "missing": ["a", "c"], "sizes": [], "named": {}}]
    assert size_gap_lines(plans) == [
        "p:f gets no precompiled executable for structure 1 (x: float32[b, n]): symbol b has no "
        "size; " + TAIL % '"n": [4], "b": [...]',
        "p:g gets no precompiled executable: symbols a, c have no size; "
        + TAIL % '"a": [...], "c": [...]']
    assert size_gap_lines(plans[:1]) == []
