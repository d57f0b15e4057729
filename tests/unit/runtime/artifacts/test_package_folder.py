"""Where a package's artifact folder is found: the folder on disk, else importlib.resources;
and which of its paths may be read (``check_inside``)."""

from __future__ import annotations

import importlib
import importlib.resources
import pathlib
import sys
import zipfile

import pytest

from hatch_jaxexport.errors import ArtifactError
from hatch_jaxexport.runtime.artifacts.package_artifacts import check_inside, package_folder


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


def test_check_inside_refuses_every_way_out_of_the_folder(tmp_path):
    """The quick answer for a plain entry (one ``lstat``) never lets a way out through: a
    symlink out, ``..``, a symlink to a folder outside, a path below a symlinked folder."""
    base, outside = tmp_path / "pkg" / "_jaxexport", tmp_path / "elsewhere"
    base.mkdir(parents=True)
    outside.mkdir()
    (outside / "secret.bin").write_bytes(b"x")
    (base / "plain.jaxexport").write_bytes(b"x")
    (base / "inner.jaxexport").symlink_to(base / "plain.jaxexport")
    (base / "out.jaxexport").symlink_to(outside / "secret.bin")
    (base / "out_folder").symlink_to(outside)
    for inside in ("plain.jaxexport", "inner.jaxexport", "missing.jaxexport"):
        check_inside(base / inside, base, inside)
    for way_out in (base / "out.jaxexport", base / "..", base / "out_folder",
                    base / "out_folder" / "secret.bin", base / ".." / ".." / "elsewhere"):
        with pytest.raises(ArtifactError, match="resolves outside"):
            check_inside(way_out, base, str(way_out))
    # a symlinked package folder: its entries are inside it wherever it really is
    linked = tmp_path / "linked"
    linked.symlink_to(base)
    check_inside(linked / "plain.jaxexport", linked, "plain.jaxexport")
