"""Security: no pickle, eval or exec in the package; loading unpickles nothing; a manifest cannot
make the loader import a module outside the package it belongs to."""

from __future__ import annotations

import ast
import json
import shutil
import sys
from pathlib import Path

import pytest

from hatch_jaxexport import ArtifactError
from hatch_jaxexport.runtime.artifacts.pytrees import load_type, resolve

PACKAGE_DIR = Path(__file__).resolve().parents[2] / "hatch_jaxexport"
UNSAFE_MODULES = {"pickle", "_pickle", "cPickle", "cloudpickle", "dill", "marshal", "shelve",
                  "joblib", "copyreg"}
UNSAFE_CALLS = {"eval", "exec", "compile", "__import__", "execfile"}


def _name_of(node: ast.AST) -> str:
    """The last name of ``a.b.c`` (``c``), or of a bare name."""
    return node.attr if isinstance(node, ast.Attribute) else getattr(node, "id", "")


def _unsafe_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    found = []
    for node in ast.walk(tree):
        where = f"{path.name}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Import):
            found += [f"{where} import {a.name}" for a in node.names
                      if a.name.split(".")[0] in UNSAFE_MODULES]
        elif isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] in \
                UNSAFE_MODULES:
            found.append(f"{where} from {node.module} import ...")
        elif isinstance(node, ast.ImportFrom) and \
                any(alias.name == "serialize_executable" for alias in node.names):
            found.append(f"{where} from {node.module} import serialize_executable (pickle-based)")
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in UNSAFE_CALLS:
            found.append(f"{where} {node.func.id}(...)")
        elif isinstance(node, ast.Name) and node.id in UNSAFE_MODULES:
            found.append(f"{where} name {node.id}")
        elif isinstance(node, ast.Attribute) and node.attr == "serialize_executable" and \
                _name_of(node.value) == "experimental":
            # jax.experimental.serialize_executable pickles; the PjRt client's methods of the
            # same name (client.serialize_executable / deserialize_executable: the precompiled
            # executables a wheel ships) are plain bytes, and are not flagged
            found.append(f"{where} .{node.attr} (pickle-based)")
    return found


#: The one module that may use pickle: the per-user executable cache. It reads back only what
#: this machine's processes wrote into the user's cache folder (like JAX's own compilation
#: cache), through an unpickler that resolves jax's classes only; nothing from a wheel.
PICKLE_ALLOWED = "runtime/executables/_executable_cache.py"


def test_the_package_source_has_no_pickle_eval_or_exec() -> None:
    sources = sorted(PACKAGE_DIR.rglob("*.py"))
    assert len(sources) >= 10
    found = [use for path in sources if path != PACKAGE_DIR / PICKLE_ALLOWED
             for use in _unsafe_uses(path)]
    assert found == []
    allowed = PACKAGE_DIR / PICKLE_ALLOWED
    uses = _unsafe_uses(allowed)
    assert not [use for use in uses if "(...)" in use]  # no eval, exec, compile, __import__
    text = allowed.read_text()
    # every read goes through the restricted unpickler: no pickle.load(s), no bare Unpickler
    assert "pickle.load(" not in text and "pickle.loads(" not in text
    assert text.count("_restricted(") >= 3 and "def find_class" in text


def test_the_scan_would_notice(tmp_path: Path) -> None:
    sample = tmp_path / "probe.py"
    sample.write_text(
        '"""pickle, eval( and exec( in a docstring are fine."""  # and in comments: exec(\n'
        "import pickle\nfrom marshal import loads\nx = eval('1')\nexec('y = 2')\n"
        "z = pickle.loads(b'')\nimport jax.experimental.serialize_executable as s\n"
        "s.deserialize_and_load(1, 2, 3)\nw = jax.experimental.serialize_executable\n")
    assert sorted(use.split(" ", 1)[1] for use in _unsafe_uses(sample)) == sorted([
        "import pickle", "from marshal import ...", "eval(...)", "exec(...)", "name pickle",
        ".serialize_executable (pickle-based)"])


LOAD_EVERYTHING = r"""
import pickle, _pickle, sys
def refuse(*args, **kwargs):
    raise AssertionError("something unpickled while loading artifacts")
for module in (pickle, _pickle):
    for name in ("load", "loads", "Unpickler"):
        setattr(module, name, refuse)
import jax.numpy as jnp, numpy as np
from jxe_demo import funcs
x = np.ones((2, 3), np.float32)
funcs.scale(x); funcs.reduce(x); funcs.poly(x[0], mode="exact"); funcs.stats(x[0])
funcs.split(x[0]); funcs.dense({"w": x.T, "b": x[0, :2]}, x); funcs.combine(x[0], y=x[0])
print("loaded without unpickling")
"""


def test_loading_artifacts_unpickles_nothing(demo_site, run_python) -> None:
    proc = run_python(LOAD_EVERYTHING, env={"PYTHONPATH": str(demo_site), "JAX_PLATFORMS": "cpu",
                                            "HATCH_JAXEXPORT_STRICT": "1"})
    assert proc.stdout.strip() == "loaded without unpickling"


@pytest.mark.parametrize("ref", ["jxe_sentinel:Thing", "jxe_demox.funcs:Stats", "jxe_dem:Stats",
                                 "jxe_nowhere.deep.module:Thing"])
def test_resolve_refuses_modules_neither_imported_nor_declared(ref: str) -> None:
    before = set(sys.modules)
    with pytest.raises(ArtifactError, match=r"outside package 'jxe_demo': module .* is not "
                       r"imported, .* not one 'jxe_demo' declares in Requires-Dist; refusing"):
        resolve(ref, "jxe_demo")
    new = {name.partition(".")[0] for name in set(sys.modules) - before}
    assert new <= set(sys.stdlib_module_names), new  # importlib.metadata reads METADATA


@pytest.mark.parametrize("ref", ["jxe_demo", "jxe_demo:", ":Stats", "", ".jxe_demo:Stats",
                                 "..jxe_demo:Stats", "jxe_demo.funcs:Stats()", "a b:C",
                                 "jxe_demo..funcs:Stats", "jxe_demo.funcs:.Stats"])
def test_resolve_refuses_malformed_names(ref: str) -> None:
    before = set(sys.modules)
    with pytest.raises(ArtifactError, match="malformed pytree type"):
        resolve(ref, "jxe_demo")
    assert set(sys.modules) == before


@pytest.mark.parametrize("ref", ["os:PathLike", "builtins:object",
                                 "json.decoder:JSONDecoder"])
def test_an_imported_class_that_is_no_pytree_node_is_refused(ref: str) -> None:
    """Modules already imported are searched, but only a pytree node type can be loaded."""
    with pytest.raises(ArtifactError, match=f"cannot register pytree type {ref!r}"):
        load_type(ref, "jxe_demo")


def test_resolve_finds_types_inside_the_package(demo) -> None:
    assert resolve("jxe_demo.funcs:Stats", "jxe_demo") is demo.Stats
    with pytest.raises(ArtifactError, match=r"cannot find pytree type 'jxe_demo\.nowhere:X'"):
        resolve("jxe_demo.nowhere:X", "jxe_demo")
    with pytest.raises(ArtifactError, match="is not a class"):
        resolve("jxe_demo.funcs:TRACES", "jxe_demo")


def test_resolve_walks_namespaces_only(demo, monkeypatch: pytest.MonkeyPatch) -> None:
    """No module ``__getattr__`` hook runs (lazy loaders import on attribute access), and the
    walk never steps from a class into a module."""
    import types

    asked: list[str] = []
    lazy = types.ModuleType("jxe_lazy")
    lazy.__getattr__ = lambda name: asked.append(name) or type(name, (), {})
    monkeypatch.setitem(sys.modules, "jxe_lazy", lazy)
    with pytest.raises(ArtifactError, match="is not a class defined in 'jxe_lazy'"):
        resolve("jxe_lazy:Thing", "jxe_demo")
    assert asked == []
    with pytest.raises(ArtifactError, match=r"is not a class defined in 'jxe_demo\.funcs'"):
        resolve("jxe_demo.funcs:jax.numpy.ndarray", "jxe_demo")


@pytest.fixture
def site_with_sentinel(demo_site: Path, tmp_path: Path) -> Path:
    """A copy of ``demo_site`` beside a module that records being imported."""
    site = tmp_path / "site"
    shutil.copytree(demo_site, site, ignore=shutil.ignore_patterns("__pycache__"))
    (site / "jxe_sentinel.py").write_text(
        "import collections\nfrom pathlib import Path\n"
        "Path(__file__).with_name('IMPORTED').touch()\n"
        "Thing = collections.namedtuple('Thing', 'a')\n")
    return site


def _name_pytree_type(site: Path, ref: str) -> None:
    path = site / "jxe_demo" / "_jaxexport" / "manifest.json"
    manifest = json.loads(path.read_text())
    for record in manifest["artifacts"]:
        if record["function"] == "jxe_demo.funcs:scale":
            record["pytree_types"] = [ref]
    path.write_text(json.dumps(manifest))


CALL_SCALE = r"""
import sys, warnings
import numpy as np
from hatch_jaxexport import ArtifactError, FallbackWarning
from jxe_demo import funcs
before = set(sys.modules)
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = funcs.scale(np.zeros((2, 2), np.float32))
    print("RESULT", out.tolist())
    for w in caught:
        if issubclass(w.category, FallbackWarning):
            print("FALLBACK", w.message)
except ArtifactError as err:
    print("ARTIFACTERROR", err)
new = sorted(m for m in set(sys.modules) - before if not m.startswith(("jxe_demo", "jax",
                                                                     "jaxlib", "scipy")))
print("NEW", new)
"""


@pytest.mark.parametrize("strict", ["0", "1"])
def test_a_manifest_naming_a_module_outside_the_package_never_imports_it(
        site_with_sentinel: Path, run_python, strict: str, maintainer_warnings) -> None:
    _name_pytree_type(site_with_sentinel, "jxe_sentinel:Thing")
    proc = run_python(CALL_SCALE, env={"PYTHONPATH": str(site_with_sentinel),
                                       "JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_STRICT": strict})
    assert not (site_with_sentinel / "IMPORTED").exists()
    word = "ARTIFACTERROR" if strict == "1" else "FALLBACK"
    assert f"{word} jxe_demo.funcs:scale: no usable baked artifact" in proc.stdout
    assert "manifest names pytree type 'jxe_sentinel:Thing' outside package 'jxe_demo'" \
        in proc.stdout


def _install_metadata(site: Path, name: str, top_level: str, requires: list[str]) -> None:
    """Make ``top_level`` in ``site`` look like an installed distribution ``name``."""
    info = site / f"{name.replace('-', '_')}-1.0.dist-info"
    info.mkdir()
    lines = ["Metadata-Version: 2.1", f"Name: {name}", "Version: 1.0",
             *(f"Requires-Dist: {r}" for r in requires)]
    (info / "METADATA").write_text("\n".join(lines) + "\n")
    (info / "top_level.txt").write_text(top_level + "\n")


@pytest.mark.parametrize("requirement", ["jxe-sentinel>=1", "JXE_Sentinel", "jxe-sentinel; "
                                         'extra == "more"', "jxe-other"])
def test_a_module_is_imported_only_from_a_distribution_the_package_declares(
        site_with_sentinel: Path, run_python, requirement: str) -> None:
    """Not yet imported, the type's module is imported only when the wheel's ``Requires-Dist``
    names the distribution that provides it (an extra's requirement does not count)."""
    _install_metadata(site_with_sentinel, "jxe-sentinel", "jxe_sentinel", [])
    _install_metadata(site_with_sentinel, "jxe-demo", "jxe_demo", ["jax", requirement])
    _name_pytree_type(site_with_sentinel, "jxe_sentinel:Thing")
    proc = run_python(CALL_SCALE, env={"PYTHONPATH": str(site_with_sentinel),
                                       "JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_STRICT": "1"})
    declared = "extra" not in requirement and "other" not in requirement
    assert (site_with_sentinel / "IMPORTED").exists() == declared
    if declared:
        assert "RESULT [[0.0, 0.0], [0.0, 0.0]]" in proc.stdout, proc.stdout
    else:
        assert "ARTIFACTERROR jxe_demo.funcs:scale: no usable baked artifact" in proc.stdout
        assert "module 'jxe_sentinel' is not imported, and it is from distribution " \
            "jxe-sentinel, not one 'jxe_demo' declares in Requires-Dist" in proc.stdout


def test_a_qualname_cannot_walk_into_other_modules(site_with_sentinel: Path, run_python) -> None:
    _name_pytree_type(site_with_sentinel, "jxe_demo.funcs:jax.scipy.special.X")
    proc = run_python(CALL_SCALE, env={"PYTHONPATH": str(site_with_sentinel),
                                       "JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_STRICT": "1"})
    assert "ARTIFACTERROR" in proc.stdout and "is not a class defined in 'jxe_demo.funcs'; " \
        "refusing to look into other modules" in proc.stdout, proc.stdout
    assert not any("scipy" in line for line in proc.stdout.splitlines()
                   if line.startswith("NEW")), proc.stdout


@pytest.mark.parametrize("strict", ["0", "1"])
def test_a_manifest_naming_an_unregistered_dataclass_is_an_artifact_problem(
        site_with_sentinel: Path, run_python, strict: str, maintainer_warnings) -> None:
    (site_with_sentinel / "jxe_demo" / "extra.py").write_text(
        "import dataclasses\n@dataclasses.dataclass\nclass Config:\n    a: int = 0\n")
    _name_pytree_type(site_with_sentinel, "jxe_demo.extra:Config")
    proc = run_python(CALL_SCALE, env={"PYTHONPATH": str(site_with_sentinel),
                                       "JAX_PLATFORMS": "cpu", "HATCH_JAXEXPORT_STRICT": strict},
                      check=False)
    assert proc.returncode == 0, proc.stderr[-1500:]
    word = "ARTIFACTERROR" if strict == "1" else "FALLBACK"
    assert f"{word} jxe_demo.funcs:scale: no usable baked artifact" in proc.stdout


def test_the_client_methods_for_shipped_executables_are_not_pickle(tmp_path: Path) -> None:
    sample = tmp_path / "probe.py"
    sample.write_text("blob = client.serialize_executable(exe)\n"
                      "exe = device.client.deserialize_executable(blob, devices)\n"
                      "from jax.experimental import serialize_executable\n"
                      "s = jax.experimental.serialize_executable\n")
    assert [use.split(" ", 1)[1] for use in _unsafe_uses(sample)] == [
        "from jax.experimental import serialize_executable (pickle-based)",
        ".serialize_executable (pickle-based)"]
