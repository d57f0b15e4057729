"""This project's wheel with its own bytecode (``hatch_build.py``): a baked library's first call
compiles none of our modules from source, whatever the installer and ``PYTHONDONTWRITEBYTECODE``.
"""

from __future__ import annotations

import os
import struct
import sys
import zipfile
from pathlib import Path

from conftest import ROOT, run

TAG = f"cp{sys.version_info.major}{sys.version_info.minor}-none-any"


def _build(out: Path, *, bytecode: bool) -> Path:
    out.mkdir(parents=True)
    env = {"HATCH_BUILD_HOOK_ENABLE_CUSTOM": "true" if bytecode else "false"}
    run([sys.executable, "-m", "build", "--wheel", "--no-isolation", "-o", out, ROOT], env=env,
        cwd=out)
    (wheel,) = out.glob("hatch_jaxexport-*.whl")
    return wheel


def test_the_bytecode_wheel_is_tagged_for_its_python_reproducible_and_names_no_build_path(
        tmp_path):
    first, second = (_build(tmp_path / name, bytecode=True) for name in ("a", "b"))
    assert first.name.endswith(f"-{TAG}.whl"), first.name
    assert first.read_bytes() == second.read_bytes()
    with zipfile.ZipFile(first) as wheel:
        names = set(wheel.namelist())
        sources = {n for n in names if n.endswith(".py")}
        tag = sys.implementation.cache_tag
        for source in sources:
            folder, _, file = source.rpartition("/")
            pyc = f"{folder}/__pycache__/{file[:-3]}.{tag}.pyc"
            assert pyc in names, pyc
            data = wheel.read(pyc)
            # PEP 552 flags: 0b11 is a hash-based pyc whose hash Python checks against the source
            assert struct.unpack("<I", data[4:8])[0] == 0b11, pyc
            assert str(ROOT).encode() not in data and str(tmp_path).encode() not in data, pyc
        assert f"Tag: {TAG}" in wheel.read(
            next(n for n in names if n.endswith(".dist-info/WHEEL"))).decode()


def test_an_installer_that_compiles_nothing_imports_the_shipped_bytecode(tmp_path):
    links = tmp_path / "links"
    links.mkdir()
    for bytecode in (False, True):
        wheel = _build(tmp_path / f"build-{bytecode}", bytecode=bytecode)
        wheel.rename(links / wheel.name)
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip", venv])
    python = venv / "bin" / "python"
    # pip --no-compile writes no bytecode, as uv writes none by default
    run([sys.executable, "-m", "pip", "--python", python, "install", "-q", "--no-index",
         "--no-deps", "--no-compile", "--find-links", links, "hatch-jaxexport"])
    site = Path(run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"]
                    ).stdout.strip())
    assert (site / "hatch_jaxexport" / "__pycache__").is_dir(), "pip chose the py3 wheel"
    probe = ("import hatch_jaxexport, sys\n"
             "from hatch_jaxexport.runtime.call import loader\n"
             "print(hatch_jaxexport.__file__)\n"
             "print(sorted(m for m in sys.modules if m.startswith('hatch_jaxexport')))")
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": ""}
    proc = run([python, "-v", "-c", probe], env=env, cwd=tmp_path)
    assert proc.stdout.splitlines()[0].startswith(str(site)), proc.stdout
    modules = eval(proc.stdout.splitlines()[-1])  # a list of names this test's child printed
    from_bytecode = [line for line in proc.stderr.splitlines()
                     if line.startswith("# code object from") and "hatch_jaxexport" in line]
    assert len(modules) > 20 and len(from_bytecode) == len(modules), (modules, from_bytecode)
    assert not list(site.glob("hatch_jaxexport/**/__pycache__/*.opt-*.pyc"))

    # an installed source edited afterwards: its hash no longer matches, Python compiles the edit
    errors = site / "hatch_jaxexport" / "errors.py"
    errors.write_text(errors.read_text() + "\nEDITED = True\n")
    edited = run([python, "-c", "import hatch_jaxexport.errors as e; print(e.EDITED)"], env=env,
                 cwd=tmp_path)
    assert edited.stdout.strip() == "True"
