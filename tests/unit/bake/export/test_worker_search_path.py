"""The export workers import the package from its folder even where build isolation strips it.

pip's isolated builds run every process with a ``sitecustomize`` that removes from ``sys.path``
the folders the target environment's ``.pth`` files add; after one editable install, one of them
is the package's own folder (issue 44). Here that ``sitecustomize`` is pip's, word for word, and
the target environment a folder with the ``.pth`` hatchling's editable install writes: no
install, no index, one worker's export.
"""

from __future__ import annotations

import os
import sys
import textwrap

from hatch_jaxexport.bake import export_package
from hatch_jaxexport.bake.export.search_path import SEARCH_PATH_ENV, restore_search_path
from hatch_jaxexport.bake.flow import lacks_module
from hatch_jaxexport.errors import ExportError

#: pip's ``BuildEnvironment`` sitecustomize (pip 23 to 25), with its two lists filled in.
PIP_SITECUSTOMIZE = """
import os, site, sys

# First, drop system-sites related paths.
original_sys_path = sys.path[:]
known_paths = set()
for path in {system_sites!r}:
    site.addsitedir(path, known_paths=known_paths)
system_paths = set(
    os.path.normcase(path)
    for path in sys.path[len(original_sys_path):]
)
original_sys_path = [
    path for path in original_sys_path
    if os.path.normcase(path) not in system_paths
]
sys.path = original_sys_path

# Second, add lib directories.
# ensuring .pth file are processed.
for path in {lib_dirs!r}:
    assert not path in sys.path
    site.addsitedir(path)
"""

MODULE = """
from hatch_jaxexport import exportable


@exportable({"x": ("n", "float32")})
def halve(x):
    return x / 2
"""


def test_a_worker_imports_the_package_a_pth_file_of_the_target_names(tmp_path, monkeypatch):
    """Before the fix: ``No module named 'jxe_pth'``, as the second ``pip install -e .``."""
    source = tmp_path / "src"
    (source / "jxe_pth").mkdir(parents=True)
    (source / "jxe_pth" / "__init__.py").write_text(MODULE)
    target_site = tmp_path / "target-site"  # after `pip install -e .`
    target_site.mkdir()
    (target_site / "_editable_impl_jxe_pth.pth").write_text(f"{source}\n")
    isolation = tmp_path / "isolation"
    isolation.mkdir()
    (isolation / "sitecustomize.py").write_text(textwrap.dedent(PIP_SITECUSTOMIZE).format(
        system_sites=[str(target_site)], lib_dirs=[]))
    monkeypatch.setenv("PYTHONPATH", str(isolation))  # as pip's build environment sets it
    result = export_package("jxe_pth", tmp_path / "out", search_path=[source])
    assert [a.function for a in result.manifest.artifacts] == ["jxe_pth:halve"]


def test_restore_puts_back_only_the_missing_folders_in_order(tmp_path, monkeypatch):
    kept, lost, also = (str(tmp_path / name) for name in ("kept", "lost", "also"))
    monkeypatch.setattr(sys, "path", ["/cwd", kept, "/site"])
    value = os.pathsep.join([lost, kept, also, lost])
    assert restore_search_path({SEARCH_PATH_ENV: value}) == [lost, also]
    assert sys.path == [lost, also, "/cwd", kept, "/site"]
    assert restore_search_path({}) == []


def test_the_dependency_hint_is_not_given_when_the_package_itself_is_missing():
    """The hint to install the run-time dependencies is for a module the package imports; its
    own folder missing from the workers' path is no dependency's doing."""
    def failed(module: str) -> ExportError:
        return ExportError([f"cannot import package 'jxe_pth': ModuleNotFoundError: No module "
                            f"named '{module}'"])

    assert lacks_module(failed("optax"), "jxe_pth")
    assert not lacks_module(failed("jxe_pth"), "jxe_pth")
    assert not lacks_module(failed("jxe_pth.helpers"), "jxe_pth")
