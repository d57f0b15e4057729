"""``scripts/tpu_executables.sh``, what the TPU machine runs for issue 60, works as written: here
with ``--platform cpu`` standing in for the TPU (this machine has none), on this project's
wheel and example_pkg's (its ``cpu`` artifacts compiled by ``compile-executables``, as a TPU
compiles its ``tpu`` ones): every step runs offline, the merged wheel verifies, the sizes are
printed, and every workload's first call in a fresh process is served ``shipped``."""

from __future__ import annotations

import sys

from conftest import ROOT, run


def test_the_tpu_script_compiles_merges_installs_and_serves(tmp_path, project_wheel,
                                                            example_wheel):
    out = tmp_path / "out"
    proc = run(["bash", ROOT / "scripts" / "tpu_executables.sh", "--platform", "cpu", "--out",
                out, project_wheel, example_wheel], cwd=tmp_path,
               env={"PYTHON": sys.executable})
    text = proc.stdout
    assert "example_pkg: OK" in text, text
    assert "executable(s) for cpu 'cpu'" in text, text
    assert "| StableHLO only |" in text and "compile-executables: " in text, text
    calls = dict(line.split(" ", 1) for line in text.split("== 5. first calls\n")[1]
                 .splitlines())
    assert set(calls) == {"tiny", "mlp", "solve", "deep", "trace_heavy"}, text
    assert all(line.endswith("[('shipped', None)]") for line in calls.values()), calls
    assert list((out / "merged").glob("example_pkg-*.whl"))
