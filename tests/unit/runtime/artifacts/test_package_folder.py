"""Where a package's artifact folder is found: the folder on disk, else importlib.resources."""

from __future__ import annotations

import importlib
import importlib.resources
import pathlib
import sys
import zipfile

import pytest

from hatch_jaxexport.runtime.artifacts.package_artifacts import package_folder


@pytest.fixture
def packages(tmp_path, monkeypatch):
    """A package on disk (``on_disk``) and one in a zip file (``zipped``), both importable."""
    for name, where in (("on_disk", tmp_path / "plain"), ("zipped", tmp_path / "build")):
        (where / name / "_jaxexport").mkdir(parents=True)
        (where / name / "__init__.py").write_text("")
        (where / name / "_jaxexport" / "manifest.json").write_text("{}")
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted((tmp_path / "build").rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(tmp_path / "build").as_posix())
    monkeypatch.syspath_prepend(str(archive))
    monkeypatch.syspath_prepend(str(tmp_path / "plain"))
    yield
    for name in ("on_disk", "zipped"):
        sys.modules.pop(name, None)


def test_a_package_on_disk_is_its_folder_as_importlib_resources_gives_it(packages):
    importlib.import_module("on_disk")
    folder = package_folder("on_disk")
    assert isinstance(folder, pathlib.Path)
    assert folder == importlib.resources.files("on_disk")
    assert (folder / "_jaxexport" / "manifest.json").read_bytes() == b"{}"


def test_a_zipped_package_is_read_through_importlib_resources(packages):
    module = importlib.import_module("zipped")
    assert "site.zip" in module.__file__
    folder = package_folder("zipped")
    assert not isinstance(folder, pathlib.Path)  # a zip file's Traversable, not a folder
    assert (folder / "_jaxexport" / "manifest.json").read_bytes() == b"{}"


def test_a_package_not_imported_yet_is_found_through_importlib_resources(packages):
    assert "on_disk" not in sys.modules
    assert package_folder("on_disk") == importlib.resources.files("on_disk")
