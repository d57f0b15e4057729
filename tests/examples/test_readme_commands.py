"""The README's shell commands work as written, from the repository root where the README is.

Every command of the README's ``bash`` blocks is checked, by its section:

- **Install** runs as written (slow: in a copy of the checkout, whose root is where the
  commands stand, with a fresh virtual environment's ``pip`` first on ``PATH``): pip builds
  this project's wheel into ``wheels/`` and installs it with its dependencies, and the exported
  find-links variables name that folder, so that a pip with no index finds the wheel there.
  A fast test runs the previous, wrong, command through the same steps and sees them fail.
- **Quick start** is not run (``scripts/demo.py`` builds and installs example_pkg, as
  ``tests/integration`` does; ``scripts/test.sh`` is the whole suite): each script exists,
  ``demo.py --help`` and ``bash -n`` accept it, with every option the README passes.
- The installed package's commands (``python -m hatch_jaxexport inspect``, ``python -m pytest
  --jaxexport-check``) need a reader's baked project, so they are checked against the command
  line and the pytest plugin, not run: the command exists and its ``--help`` lists every
  option the README passes; the release check names its source (``--jaxexport-source``).

A command of any other kind fails the check until this file learns how to check it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT, make_venv, run
from test_getting_started import bash_blocks, checkout_copy

README = ROOT / "README.md"
#: After the README's install commands: what they left in the shell, and whether an isolated
#: build's pip (no index, only the variables) would find the wheel.
PROBE = """
echo "PIP_FIND_LINKS=$PIP_FIND_LINKS"
echo "UV_FIND_LINKS=$UV_FIND_LINKS"
(cd "$(mktemp -d)" && pip download -q --no-deps --no-index --dest found hatch-jaxexport && ls found)
"""
#: What the install section said before it was fixed: from the root, there is no such folder.
WRONG_INSTALL = "pip wheel --no-deps --wheel-dir wheels ./hatch-jaxexport\n"


def sections(markdown: str) -> dict[str, str]:
    """The text of each ``## `` section of a Markdown page, by heading."""
    parts = re.split(r"^## +(.+)$", markdown, flags=re.M)
    return {title.strip(): body for title, body in zip(parts[1::2], parts[2::2], strict=True)}


def section_commands(title: str) -> list[list[str]]:
    """The commands of a README section's bash blocks, split as bash would (comments dropped,
    continued lines joined)."""
    text = "\n".join(bash_blocks(sections(README.read_text())[title]))
    lines = text.replace("\\\n", " ").splitlines()
    return [argv for line in lines if (argv := shlex.split(line, comments=True))]


def install_script() -> str:
    return "\n".join(bash_blocks(sections(README.read_text())["Install"]))


def run_steps(commands: str, root: Path, env: dict[str, str] | None = None
              ) -> subprocess.CompletedProcess[str]:
    """``commands`` as one bash script from ``root`` (stopping at the first failure), then
    ``PROBE``."""
    script = "set -euo pipefail\n" + commands + PROBE
    return run(["bash", "-c", script], cwd=root, env=env, check=False, timeout=900)


def long_options(argv: list[str]) -> list[str]:
    return [arg.split("=", 1)[0] for arg in argv if arg.startswith("--")]


def assert_help_lists(help_argv: list[str], options: list[str], cwd: Path) -> None:
    proc = run([sys.executable, *help_argv], cwd=cwd, env={"PYTHONPATH": ""})
    missing = [o for o in options if not re.search(rf"(?<![\w-]){re.escape(o)}(?![\w-])",
                                                   proc.stdout)]
    assert not missing, f"{' '.join(help_argv)} does not list {missing}"


def check_documented_command(argv: list[str], tmp_path: Path) -> None:
    """Check one README command that is not run (see the module docstring)."""
    if argv[:1] == ["bash"] and argv[1].endswith(".sh"):
        assert (ROOT / argv[1]).is_file(), argv
        run(["bash", "-n", ROOT / argv[1]])
    elif argv[:1] == ["python"] and argv[1].endswith(".py"):
        assert (ROOT / argv[1]).is_file(), argv
        assert_help_lists([str(ROOT / argv[1]), "--help"], long_options(argv[2:]), tmp_path)
    elif argv[:3] == ["python", "-m", "hatch_jaxexport"]:
        assert_help_lists(["-m", "hatch_jaxexport", argv[3], "--help"], long_options(argv[4:]),
                          tmp_path)
    elif argv[:3] == ["python", "-m", "pytest"] or argv[:1] == ["pytest"]:
        args = argv[3:] if argv[0] == "python" else argv[1:]
        if "--jaxexport-check" in long_options(args):
            # from a project's root, `import mypkg` of a src layout finds the installed copy
            assert "--jaxexport-source" in long_options(args), argv
        assert_help_lists(["-m", "pytest", "--help"], long_options(args), tmp_path)
    else:
        raise AssertionError(f"the README shows a command this test cannot check: {argv}")


def test_the_readme_shows_the_commands_this_file_checks():
    found = sections(README.read_text())
    assert {"Quick start", "Install", "Example"} <= set(found)
    install = section_commands("Install")
    assert [argv[:2] for argv in install] == [["pip", "wheel"], ["pip", "install"],
                                              ["export", "PIP_FIND_LINKS=$PWD/wheels"]]
    assert install[0][-1] == ".", "the README stands in the root: build the project in '.'"
    commands = [argv for title in found if title != "Install"
                for argv in section_commands(title)]
    assert any("--jaxexport-check" in argv for argv in commands)
    assert any(argv[:4] == ["python", "-m", "hatch_jaxexport", "inspect"] for argv in commands)


def test_the_commands_not_run_exist_with_the_options_they_pass(tmp_path):
    for title in sections(README.read_text()):
        if title != "Install":
            for argv in section_commands(title):
                check_documented_command(argv, tmp_path)


def test_a_wrong_install_command_fails_the_steps(tmp_path):
    """The check of the install commands is not vacuous: the command the README used to show
    fails from the root, and so do the steps."""
    checkout = checkout_copy(tmp_path / "hatch-jaxexport")
    proc = run_steps(WRONG_INSTALL, checkout,
                     {"PATH": os.pathsep.join([str(Path(sys.executable).parent),
                                               os.environ.get("PATH", "")])})
    assert proc.returncode != 0
    assert "Invalid requirement: './hatch-jaxexport'" in proc.stdout + proc.stderr
    assert "PIP_FIND_LINKS=" not in proc.stdout  # stopped at the failure


@pytest.mark.slow
def test_the_install_commands_run_as_written_from_the_repository_root(tmp_path):
    checkout = checkout_copy(tmp_path / "hatch-jaxexport")
    venv = tmp_path / "venv"
    python = make_venv(venv)  # the reader's environment: `pip` is its pip
    env = {"PATH": os.pathsep.join([str(venv / "bin"), os.environ.get("PATH", "")]),
           "VIRTUAL_ENV": str(venv), "PYTHONPATH": ""}
    proc = run_steps(install_script(), checkout, env)
    assert proc.returncode == 0, f"{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    wheels = checkout / "wheels"
    (wheel,) = wheels.glob("hatch_jaxexport-*-py3-none-any.whl")
    exported = dict(line.split("=", 1) for line in proc.stdout.splitlines()
                    if line.startswith(("PIP_FIND_LINKS=", "UV_FIND_LINKS=")))
    assert exported == {"PIP_FIND_LINKS": str(wheels), "UV_FIND_LINKS": str(wheels)}
    assert wheel.name in proc.stdout  # a pip without an index found it through the variable
    installed = run([python, "-c", "import importlib.metadata as m, hatch_jaxexport, jax; "
                     "print(m.version('hatch-jaxexport'), hatch_jaxexport.__file__)"],
                    cwd=tmp_path, env=env).stdout.split()
    assert wheel.name.startswith(f"hatch_jaxexport-{installed[0]}-")
    assert Path(installed[1]).is_relative_to(venv), "installed into the reader's environment"
