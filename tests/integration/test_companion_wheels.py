"""Companion wheels (``companion-wheels``): each accelerator target's executables in a wheel of
their own, installed by the package's extra.

Real parts: the Hatch hook's build (the TPU executables compiled deviceless with libtpu from
the package index), uv installing ``jxe-tpu[tpu-v5e]`` from a find-links folder into a fresh
virtual environment and pip resolving it, ``jaxexport verify`` and ``inspect`` there; then,
on this CPU machine, a package whose CPU executables are split too (``"all"``), so that the
loader's every case runs here in fresh processes: the companion installed (shipped from it),
missing, of another version (a real second build), damaged, installed twice; default mode
serves each from StableHLO with nothing on stderr and names the companion in
``call_report()``, strict mode raises naming it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from _buildkit import EXECUTABLES_MODULE, hatch_pyproject, inprocess_build, write_project
from conftest import make_venv, run

from hatch_jaxexport.bake.executables.companion_split import split_wheel
from hatch_jaxexport.errors import ExportError
from hatch_jaxexport.formats.manifest_reader import parse_manifest

TPU_TABLE = '''
platforms = ["cpu", "tpu"]
executables = ["x86_64-avx2"]
tpu-targets = ["v5e", "v5e:2x2"]
companion-wheels = "accelerators"
'''

CPU_TABLE = '''
executables = ["x86_64-avx2"]
companion-wheels = "all"
'''

on_linux_x86 = pytest.mark.skipif(sys.platform != "linux" or
                                  __import__("platform").machine() != "x86_64",
                                  reason="libtpu and the x86-64 executables: Linux x86-64 only")


def build(tmp: Path, name: str, package: str, table: str, version: str = "0.1.0"
          ) -> dict[str, Path]:
    """The project built by the Hatch hook into ``tmp/dist-<version>``: every wheel written
    there, by file name."""
    pyproject = hatch_pyproject(name, table).replace('version = "0.1.0"',
                                                     f'version = "{version}"')
    root = write_project(tmp / f"project-{version}", {
        "pyproject.toml": pyproject,
        f"{package}/__init__.py": '"""Companions."""\n' + EXECUTABLES_MODULE})
    out = tmp / f"dist-{version}"
    inprocess_build(root, out)
    return {path.name: path for path in sorted(out.glob("*.whl"))}


def manifest_in(wheel: Path, folder: str) -> tuple[bytes, dict]:
    with zipfile.ZipFile(wheel) as archive:
        data = archive.read(f"{folder}/manifest.json")
    return data, json.loads(data)


@pytest.fixture(scope="module")
def tpu_wheels(tmp_path_factory):
    return build(tmp_path_factory.mktemp("companions-tpu"), "jxe-tpu", "jxe_tpu", TPU_TABLE)


@pytest.mark.slow
@on_linux_x86
def test_the_hatch_hook_writes_a_companion_per_tpu_host_and_the_extras(tpu_wheels):
    assert sorted(tpu_wheels) == ["jxe_tpu-0.1.0-py3-none-any.whl",
                                  "jxe_tpu_jaxexport_tpu_v5e-0.1.0-py3-none-any.whl",
                                  "jxe_tpu_jaxexport_tpu_v5e_2x2-0.1.0-py3-none-any.whl"]
    main = tpu_wheels["jxe_tpu-0.1.0-py3-none-any.whl"]
    raw, manifest = manifest_in(main, "jxe_tpu/_jaxexport")
    # the package's wheel keeps the StableHLO and the CPU executables, lists its companions
    assert {e["backend"] for e in manifest["executables"]} == {"cpu"}
    read = parse_manifest(raw)
    assert [(c.extra, c.distribution, c.package, c.platform, c.executables, c.version)
            for c in read.companions] == [
        ("tpu-v5e", "jxe-tpu-jaxexport-tpu-v5e", "jxe_tpu_jaxexport_tpu_v5e", "tpu", 5, "0.1.0"),
        ("tpu-v5e-2x2", "jxe-tpu-jaxexport-tpu-v5e-2x2", "jxe_tpu_jaxexport_tpu_v5e_2x2", "tpu",
         5, "0.1.0")]
    with zipfile.ZipFile(main) as archive:
        metadata = archive.read("jxe_tpu-0.1.0.dist-info/METADATA").decode()
        assert not [n for n in archive.namelist() if ".tpu-v5-lite" in n]
    for line in ("Provides-Extra: tpu", "Provides-Extra: tpu-v5e", "Provides-Extra: tpu-v5e-2x2",
                 'Requires-Dist: jxe-tpu-jaxexport-tpu-v5e==0.1.0; extra == "tpu-v5e"',
                 'Requires-Dist: jxe-tpu-jaxexport-tpu-v5e==0.1.0; extra == "tpu"',
                 'Requires-Dist: jxe-tpu-jaxexport-tpu-v5e-2x2==0.1.0; extra == "tpu"'):
        assert line in metadata.splitlines(), metadata
    # each companion: its host's executables only, the manifest the package pins, pure
    companion = tpu_wheels["jxe_tpu_jaxexport_tpu_v5e-0.1.0-py3-none-any.whl"]
    data, own = manifest_in(companion, "jxe_tpu_jaxexport_tpu_v5e/_jaxexport/jxe_tpu")
    assert {(e["target"], e["topology"]) for e in own["executables"]} == \
        {("tpu-v5-lite", "v5e:1x1")}
    assert own["artifacts"] == [] and own["package"] == "jxe_tpu"
    assert __import__("hashlib").sha256(data).hexdigest() == read.companions[0].manifest_sha256
    with zipfile.ZipFile(companion) as archive:
        wheel_text = archive.read(
            "jxe_tpu_jaxexport_tpu_v5e-0.1.0.dist-info/WHEEL").decode()
    assert "Tag: py3-none-any" in wheel_text


@pytest.mark.slow
@on_linux_x86
def test_uv_installs_the_extra_from_find_links_and_pip_resolves_it(tpu_wheels, project_wheel,
                                                                   tmp_path):
    dist = next(iter(tpu_wheels.values())).parent
    python = make_venv(tmp_path / "venv", "jxe-tpu[tpu-v5e]", "jax==" +
                       __import__("importlib.metadata").metadata.version("jax"),
                       find_links=[dist, project_wheel.parent])
    listed = run([python, "-m", "pip", "list", "--format", "json"]).stdout
    names = {entry["name"] for entry in json.loads(listed)}
    assert {"jxe-tpu", "jxe-tpu-jaxexport-tpu-v5e"} <= names, names
    assert "jxe-tpu-jaxexport-tpu-v5e-2x2" not in names
    env = {"JAX_PLATFORMS": "cpu"}
    verified = run([python, "-m", "hatch_jaxexport", "verify", "jxe_tpu"], env=env)
    assert verified.stdout.startswith("jxe_tpu: OK"), verified.stdout
    shown = run([python, "-m", "hatch_jaxexport", "inspect", "jxe_tpu"], env=env).stdout
    assert "companion wheel: jxe-tpu-jaxexport-tpu-v5e==0.1.0 [tpu-v5e], 5 executable(s) " \
        "for tpu" in shown and ": installed" in shown, shown
    assert "companion wheel: jxe-tpu-jaxexport-tpu-v5e-2x2==0.1.0 [tpu-v5e-2x2]" in shown
    assert "is not installed (the package's extra [tpu-v5e-2x2] installs " \
        "jxe-tpu-jaxexport-tpu-v5e-2x2==0.1.0)" in shown, shown
    assert "compiled deviceless for v5e:1x1" in shown  # its rows join the wheel's own
    served = run([python, "-c", "import numpy as np, jxe_tpu as m\n"
                  "print(m.double(np.ones(8, np.float32)).tolist(), "
                  "[r.tier for r in m.double.call_report()])"],
                 env={**env, "HATCH_JAXEXPORT_CACHE": "0"})
    assert served.stdout.strip() == "[3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0, 3.0] ['shipped']"
    assert served.stderr == ""
    # pip's resolver (a dry run against this environment's jax): the extra names both
    report = run([python, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links",
                  dist, "--report", "-", "--quiet", "--ignore-installed", "--no-deps",
                  "jxe-tpu[tpu]"]).stdout
    assert [i["metadata"]["name"] for i in json.loads(report)["install"]] == ["jxe-tpu"]
    extras = run([python, "-m", "pip", "install", "--dry-run", "--no-index", "--find-links",
                  dist, "--find-links", project_wheel.parent, "--report", "-", "--quiet",
                  "jxe-tpu[tpu]"]).stdout
    would = sorted(i["metadata"]["name"] for i in json.loads(extras)["install"])
    assert would == ["jxe-tpu-jaxexport-tpu-v5e-2x2"], would  # the rest is installed


# -- the loader's cases, on this CPU (the CPU executables split too) ------------------------

SERVE = """
import json, numpy as np, jxe_cw as m
out = m.double(np.ones(8, np.float32))
print(json.dumps({"value": out.tolist(),
                  "served": [[r.tier, r.not_shipped] for r in m.double.call_report()]}))
"""


@pytest.fixture(scope="module")
def cpu_wheels(tmp_path_factory):
    """jxe_cw 0.1.0 and 0.2.0, each split with its CPU executables in a companion."""
    tmp = tmp_path_factory.mktemp("companions-cpu")
    return tmp, build(tmp, "jxe-cw", "jxe_cw", CPU_TABLE), \
        build(tmp, "jxe-cw", "jxe_cw", CPU_TABLE, version="0.2.0")


def site_of(tmp: Path, *wheels: Path) -> Path:
    site = tmp / "site"
    for wheel in wheels:
        zipfile.ZipFile(wheel).extractall(site)
    return site


def serve(site: Path, *more: Path, strict: bool = False) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(map(str, (site, *more))),
           "JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_CACHE": "0"}
    env.pop("HATCH_JAXEXPORT_STRICT", None)
    if strict:
        env["HATCH_JAXEXPORT_STRICT"] = "1"
    return subprocess.run([sys.executable, "-c", SERVE], env=env, text=True,
                          capture_output=True, timeout=300)


def served(proc: subprocess.CompletedProcess[str]) -> tuple[str, str]:
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stderr == ""  # nothing new in the user's process
    found = json.loads(proc.stdout)
    assert found["value"] == [3.0] * 8
    ((tier, why),) = found["served"]
    return tier, why or ""


@pytest.mark.slow
@on_linux_x86
def test_the_loader_uses_a_companion_only_where_it_is_this_build(cpu_wheels, tmp_path):
    _, first, second = cpu_wheels
    main, companion = first["jxe_cw-0.1.0-py3-none-any.whl"], \
        first["jxe_cw_jaxexport_cpu_x86_64_avx2-0.1.0-py3-none-any.whl"]
    name = "companion wheel jxe-cw-jaxexport-cpu-x86-64-avx2"
    # installed: its executable serves the first call
    assert served(serve(site_of(tmp_path / "ok", main, companion)))[0] == "shipped"
    # missing: StableHLO, the report says which extra installs it
    tier, why = served(serve(site_of(tmp_path / "missing", main)))
    assert tier != "shipped" and f"{name} is not installed (the package's extra " \
        "[cpu-x86-64-avx2] installs" in why, why
    # another version's companion (a real second build), under the same name
    other = site_of(tmp_path / "other", main,
                    second["jxe_cw_jaxexport_cpu_x86_64_avx2-0.2.0-py3-none-any.whl"])
    tier, why = served(serve(other))
    assert tier != "shipped" and f"{name} 0.2.0 is not the one this build of jxe_cw wrote" \
        in why, why
    strict = serve(other, strict=True)
    assert strict.returncode != 0 and name in strict.stderr and "HATCH_JAXEXPORT_STRICT" in \
        strict.stderr, strict.stderr[-2000:]
    # installed twice (two folders on the path): neither is trusted
    twice = site_of(tmp_path / "twice", main, companion)
    extra_site = site_of(tmp_path / "twice-2", companion)
    tier, why = served(serve(twice, extra_site))
    assert tier != "shipped" and f"{name} is installed 2 times" in why, why
    strict = serve(twice, extra_site, strict=True)
    assert strict.returncode != 0 and "installed 2 times" in strict.stderr


@pytest.mark.slow
@on_linux_x86
def test_a_damaged_companion_executable_is_refused_by_its_hash(cpu_wheels, tmp_path):
    _, first, _ = cpu_wheels
    main, companion = first["jxe_cw-0.1.0-py3-none-any.whl"], \
        first["jxe_cw_jaxexport_cpu_x86_64_avx2-0.1.0-py3-none-any.whl"]
    site = site_of(tmp_path, main, companion)
    _, own = manifest_in(companion, "jxe_cw_jaxexport_cpu_x86_64_avx2/_jaxexport/jxe_cw")
    (record,) = [e for e in own["executables"] if e["artifact"].startswith("jxe_cw:double/")]
    blob = site / "jxe_cw_jaxexport_cpu_x86_64_avx2" / "_jaxexport" / "jxe_cw" / record["file"]
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0xFF
    blob.write_bytes(bytes(data))
    tier, _ = served(serve(site))
    assert tier != "shipped"
    strict = serve(site, strict=True)
    assert strict.returncode != 0 and "jxe-cw-jaxexport-cpu-x86-64-avx2" in strict.stderr and \
        "SHA-256" in strict.stderr, strict.stderr[-2000:]
    verified = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_cw"],
                   env={"PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu"}, check=False)
    assert verified.returncode == 1 and record["file"] in verified.stdout, verified.stdout


@pytest.mark.slow
@on_linux_x86
def test_two_splits_of_one_wheel_give_the_same_bytes(cpu_wheels, tmp_path):
    """Reproducible: the build's companions, and ``jaxexport companions`` over the wheel the
    build would have written without them, byte for byte."""
    tmp, first, _ = cpu_wheels
    root = tmp / "project-0.1.0"
    pyproject = root / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace('companion-wheels = "all"', ""))
    (whole,) = inprocess_build(root, tmp_path / "whole")
    run([sys.executable, "-m", "hatch_jaxexport", "companions", whole, "--out",
         tmp_path / "split", "--split", "all"])
    for path in sorted((tmp_path / "split").glob("*.whl")):
        assert path.read_bytes() == first[path.name].read_bytes(), path.name
    assert len(list((tmp_path / "split").glob("*.whl"))) == 2
    shutil.rmtree(tmp_path / "split")
    again = split_wheel(whole, tmp_path / "split", "all")
    assert again.companions["cpu-x86-64-avx2"].read_bytes() == \
        first[again.companions["cpu-x86-64-avx2"].name].read_bytes()
    # a wheel split already is refused (its executables are elsewhere), nothing written
    with pytest.raises(ExportError, match="already lists companion wheels"):
        split_wheel(first["jxe_cw-0.1.0-py3-none-any.whl"], tmp_path / "again", "all")
    assert not list((tmp_path / "again").glob("*.whl"))
    # the CI matrix's last step: merge the builders' wheels, then split
    (tmp_path / "other-builder").mkdir()
    copy = Path(shutil.copy(whole, tmp_path / "other-builder"))
    merged = run([sys.executable, "-m", "hatch_jaxexport", "merge", whole, copy, "--out",
                  tmp_path / "merged", "--companion-wheels", "all"]).stdout
    assert "installed by the extra [cpu-x86-64-avx2]" in merged, merged
    for path in sorted((tmp_path / "merged").glob("*.whl")):
        assert path.read_bytes() == first[path.name].read_bytes(), path.name


@pytest.mark.slow
@on_linux_x86
def test_setuptools_and_the_wrapping_backend_write_the_same_companions(cpu_wheels,
                                                                        project_wheel):
    """Isolated builds (``python -m build``) through setuptools' backend (its ``bdist_wheel``
    writes into a temporary folder that must hold one wheel: the companion goes beside it) and
    the wrapping backend over flit: the package's wheel and its companion in the output
    folder, the companion's executables those of the Hatch hook's, byte for byte."""
    from _buildkit import flit_pyproject, links_env, python_m_build, setuptools_pyproject

    tmp, first, _ = cpu_wheels
    hatch_companion = first["jxe_cw_jaxexport_cpu_x86_64_avx2-0.1.0-py3-none-any.whl"]
    folder = "jxe_cw_jaxexport_cpu_x86_64_avx2/_jaxexport/jxe_cw"
    expected = {(e["artifact"], e["sha256"]) for e in
                manifest_in(hatch_companion, folder)[1]["executables"]}
    env = {**links_env(project_wheel.parent), "SOURCE_DATE_EPOCH": "1700000000"}
    for name, pyproject in (("setuptools", setuptools_pyproject("jxe-cw", "jxe_cw", CPU_TABLE)),
                            ("wrapped", flit_pyproject("jxe_cw", CPU_TABLE))):
        module = '"""Companions."""\n' + EXECUTABLES_MODULE
        root = write_project(tmp / name, {"pyproject.toml": pyproject,
                                          "jxe_cw/__init__.py": module})
        run(python_m_build("--wheel", "-o", tmp / f"dist-{name}", root), env=env)
        built = sorted(p.name for p in (tmp / f"dist-{name}").glob("*.whl"))
        assert built == ["jxe_cw-0.1.0-py3-none-any.whl",
                         "jxe_cw_jaxexport_cpu_x86_64_avx2-0.1.0-py3-none-any.whl"], (name, built)
        companion = tmp / f"dist-{name}" / built[1]
        assert {(e["artifact"], e["sha256"]) for e in
                manifest_in(companion, folder)[1]["executables"]} == expected, name
        _, main = manifest_in(tmp / f"dist-{name}" / built[0], "jxe_cw/_jaxexport")
        assert "executables" not in main and main["companions"][0]["extra"] == \
            "cpu-x86-64-avx2", name
