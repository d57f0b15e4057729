"""Many builders, one wheel: ``jaxexport merge`` puts the executables that several builders
compiled (here: one build per x86-64 target, as two CI runners would) into one wheel.

The merge of the two one-target wheels carries what one build with both targets carries, is the
same bytes whatever the order of its inputs, passes ``verify``, and runs its executables; a
wheel built from other source is refused with the artifact that differs.
"""

from __future__ import annotations

import json
import platform
import shutil
import sys
import zipfile

import pytest
from _buildkit import hatch_pyproject, inprocess_build, members, write_project
from conftest import FIXTURES, run

from hatch_jaxexport.bake.executables.merge import merge_wheels
from hatch_jaxexport.errors import ExportError

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the builds compile the x86-64 targets")

MANIFEST = "jxe_scalars/_jaxexport/manifest.json"


def build(tmp_path, name: str, targets: list[str], edit: str = "",
          jaxlibs: tuple[str, ...] = (), extra: str = "") -> zipfile.Path:
    options = f"executables = {json.dumps(targets)}\n{extra}"
    if jaxlibs:
        options += f"executable-jaxlibs = {json.dumps(list(jaxlibs))}\n"
    project = write_project(tmp_path / name, {"pyproject.toml": hatch_pyproject(
        "jxe-scalars", options)})
    shutil.copytree(FIXTURES / "jxe_scalars", project / "jxe_scalars",
                    ignore=shutil.ignore_patterns("__pycache__"))
    if edit:
        module = project / "jxe_scalars" / "__init__.py"
        module.write_text(module.read_text().replace("x * scale + 1", edit))
    (wheel,) = inprocess_build(project, tmp_path / name / "dist")
    return wheel


@pytest.fixture(scope="module")
def wheels(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("merge")
    return {"avx2": build(tmp, "avx2", ["x86_64-avx2"]),
            "avx512": build(tmp, "avx512", ["x86_64-avx512"]),
            "both": build(tmp, "both", ["x86_64-avx2", "x86_64-avx512"]),
            "edited": build(tmp, "edited", ["x86_64-avx2"], edit="x * scale + 2")}


def executables(wheel) -> list[tuple[str, str, str, str]]:
    manifest = json.loads(members(wheel)[MANIFEST])
    return sorted((e["artifact"], e["target"], e["jaxlib_version"], json.dumps(e["inputs"]))
                  for e in manifest["executables"])


def other_jax() -> str:
    """A jaxlib release beside this one that installs on this Python."""
    from importlib.metadata import version

    return "0.10.1" if version("jaxlib") != "0.10.1" else "0.10.2"


def test_the_merge_carries_what_one_build_of_both_targets_carries(wheels, tmp_path):
    merged = merge_wheels([wheels["avx2"], wheels["avx512"]], tmp_path / "a")
    assert merged.name == wheels["both"].name
    assert executables(merged) == executables(wheels["both"])
    assert len(executables(merged)) == 2
    assert sorted(members(merged)) == sorted(members(wheels["both"]))
    mine, theirs = (json.loads(members(w)[MANIFEST]) for w in (merged, wheels["both"]))
    assert mine["artifacts"] == theirs["artifacts"]  # one StableHLO, the same
    again = merge_wheels([wheels["avx512"], wheels["avx2"]], tmp_path / "b")
    assert again.read_bytes() == merged.read_bytes()  # reproducible, whatever the order


def test_the_merged_wheel_verifies_and_runs_its_executables(wheels, tmp_path):
    out = run([sys.executable, "-m", "hatch_jaxexport", "merge", wheels["avx2"],
               wheels["avx512"], "--out", tmp_path / "dist"])
    assert "with 2 precompiled executable(s) from 2 wheels" in out.stdout
    site = tmp_path / "site"
    zipfile.ZipFile(next((tmp_path / "dist").glob("*.whl"))).extractall(site)
    verified = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_scalars"],
                   env={"PYTHONPATH": str(site)})
    assert verified.stdout.startswith("jxe_scalars: OK"), verified.stdout
    served = run([sys.executable, "-c", "import numpy as np, jxe_scalars as m\n"
                  "print(m.scaled(np.ones(4, np.float32), 2.0).tolist(), "
                  "[r.tier for r in m.scaled.call_report()])"],
                 env={"PYTHONPATH": str(site), "HATCH_JAXEXPORT_STRICT": "1",
                      "HATCH_JAXEXPORT_CACHE": "0"})
    assert served.stdout.strip() == "[3.0, 3.0, 3.0, 3.0] ['shipped']"


def test_wheels_of_other_source_are_refused_naming_the_artifact(wheels, tmp_path):
    with pytest.raises(ExportError) as refused:
        merge_wheels([wheels["avx2"], wheels["edited"]], tmp_path / "out")
    text = str(refused.value)
    assert "artifact jxe_scalars:scaled/0/cpu differs (SHA-256 " in text
    assert "build every wheel from the same source with the same jax" in text
    assert not (tmp_path / "out").exists()
    with pytest.raises(ExportError, match="merge needs two or more builds of one wheel"):
        merge_wheels([wheels["avx2"]], tmp_path / "out")


def test_the_hook_adds_the_executables_other_builders_compiled(wheels, tmp_path):
    """``executables-from``: the last builder (here avx2) builds the wheel with the avx512
    runner's executables in it; the result carries what one build of both targets carries.
    A wheel of other source is refused, naming the artifact, and the build fails."""
    project = tmp_path / "last"
    built = build(project, "avx2", ["x86_64-avx2"],
                  extra=f"executables-from = [{json.dumps(str(wheels['avx512']))}]\n")
    assert executables(built) == executables(wheels["both"])
    assert sorted(members(built)) == sorted(members(wheels["both"]))
    with pytest.raises(ExportError) as refused:
        build(tmp_path / "refused", "avx2", ["x86_64-avx2"],
              extra=f"executables-from = [{json.dumps(str(wheels['edited']))}]\n")
    assert "artifact jxe_scalars:scaled/0/cpu differs (SHA-256 " in str(refused.value)


@pytest.mark.slow
def test_builders_with_other_targets_and_jaxlibs_merge_into_the_build_of_all(tmp_path_factory):
    """Two runners, each compiling its own target with this jaxlib and another one
    (``executable-jaxlibs``): the merge carries the executables of both targets for both
    jaxlibs, as one build of everything does, and verifies."""
    from importlib.metadata import version

    tmp, other = tmp_path_factory.mktemp("merge-jaxlibs"), other_jax()
    first = build(tmp, "avx2", ["x86_64-avx2"], jaxlibs=(other,))
    second = build(tmp, "avx512", ["x86_64-avx512"], jaxlibs=(other,))
    everything = build(tmp, "all", ["x86_64-avx2", "x86_64-avx512"], jaxlibs=(other,))
    merged = merge_wheels([first, second], tmp / "merged")
    assert executables(merged) == executables(everything)
    assert {(target, jaxlib) for _, target, jaxlib, _ in executables(merged)} == {
        (target, jaxlib) for target in ("x86_64-avx2", "x86_64-avx512")
        for jaxlib in (version("jaxlib"), other)}
    assert sorted(members(merged)) == sorted(members(everything))
    site = tmp / "site"
    zipfile.ZipFile(merged).extractall(site)
    verified = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_scalars"],
                   env={"PYTHONPATH": str(site)})
    assert verified.stdout.startswith("jxe_scalars: OK"), verified.stdout
