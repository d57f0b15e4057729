"""Loaded functions under every JAX transformation, against the same transformation of the source.

The matrix (``transform_matrix.py``) runs in a fresh process, over a wheel built with the Hatch
hook, with ``HATCH_JAXEXPORT_STRICT=1`` and a trace counter that must not move while the
loaded function is transformed.
"""

from __future__ import annotations

import json
import shutil
import sys
import zipfile
from pathlib import Path

import pytest
from conftest import FIXTURES, TESTS, run
from transform_matrix import cases

HERE = TESTS  # the support modules beside conftest.py


@pytest.fixture(scope="session")
def ad_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """``jxe_ad`` as installed from a wheel built with the Hatch hook (a pure wheel, unpacked)."""
    from _buildkit import hatch_pyproject, inprocess_build

    tmp = tmp_path_factory.mktemp("ad-wheel")
    project = tmp / "project"
    shutil.copytree(FIXTURES / "jxe_ad", project / "jxe_ad",
                    ignore=shutil.ignore_patterns("__pycache__"))
    (project / "pyproject.toml").write_text(
        hatch_pyproject("jxe-ad", "jobs = 2\n") + "\n[tool.hatch.build.targets.wheel]\n"
        'packages = ["jxe_ad"]\n')
    (wheel,) = inprocess_build(project, tmp / "dist")
    site = tmp / "site"
    with zipfile.ZipFile(wheel) as archive:
        archive.extractall(site)
    assert (site / "jxe_ad" / "_jaxexport" / "manifest.json").is_file()
    return site


@pytest.fixture(scope="session")
def matrix(ad_site: Path) -> dict[str, dict]:
    proc = run([sys.executable, HERE / "transform_matrix.py"],
               env={"PYTHONPATH": str(ad_site), "HATCH_JAXEXPORT_STRICT": "1"})
    return json.loads(proc.stdout)


@pytest.mark.parametrize("case", cases())
def test_transformation_of_loaded_equals_source_without_tracing(matrix, case):
    result = matrix[case]
    assert "error" not in result, result.get("error")
    assert result["traced"] == 0, "the source was traced"
    assert result["equal"], "loaded and source results differ"


FALLBACKS = """
import warnings, json
import jax, jax.numpy as jnp
from hatch_jaxexport import ArtifactError
import jxe_ad as m
x = jnp.linspace(0.1, 1.0, 4)
out = {}
for name, run in {
    "hessian_ad1": lambda: jax.hessian(lambda x: m.array1(x).sum())(x),
    "jvp_ad0": lambda: jax.jvp(m.array0, (x,), (x,)),
    "vmap_ad0": lambda: jax.vmap(m.array0)(jnp.stack([x, x])),
    "grad_native_vjp": lambda: jax.grad(lambda x: m.native_vjp(x).sum())(x),
    "grad_int_arg": lambda: jax.grad(lambda x: m.with_int(x, jnp.int32(3))[0].sum())(x),
}.items():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            run()
            out[name] = [str(w.message) for w in caught]
        except ArtifactError as err:
            out[name] = "ArtifactError: " + str(err)
print(json.dumps(out))
"""


def _fallbacks(ad_site, run_python, strict: bool) -> dict:
    env = {"PYTHONPATH": str(ad_site)}
    if strict:
        env["HATCH_JAXEXPORT_STRICT"] = "1"
    return json.loads(run_python(FALLBACKS, env=env).stdout)


def test_transformations_beyond_what_was_baked_trace_the_source_with_a_warning(
        ad_site, run_python, maintainer_warnings):
    out = _fallbacks(ad_site, run_python, strict=False)
    assert out["hessian_ad1"] == [
        "jxe_ad.array1: tracing the source: a second-order derivative (jax.hessian, jax.jacfwd of "
        "jax.jacrev...) needs the vjp_jvp artifact, which was not baked; set ad_order=2 (or "
        "vjp_order=2 for reverse mode only) in @exportable(...)"]
    assert out["jvp_ad0"] == [
        "jxe_ad.array0: tracing the source: differentiation (forward mode, jax.jvp or "
        "jax.jacfwd, or reverse mode, jax.grad or jax.vjp, which jax linearizes through it) "
        "needs the jvp artifact, which was not baked; set ad_order=1 (or vjp_order=1 for "
        "reverse mode only) in @exportable(...)"]
    assert out["vmap_ad0"] == []  # sequential fallback: no source needed
    assert out["grad_native_vjp"] == []  # jax's own vjp_order mechanism
    assert out["grad_int_arg"] == []


def test_strict_mode_names_the_transformation_that_needed_a_missing_artifact(ad_site, run_python):
    out = _fallbacks(ad_site, run_python, strict=True)
    assert out["hessian_ad1"].startswith("ArtifactError: jxe_ad.array1: a second-order "
                                         "derivative (jax.hessian")
    assert "needs the vjp_jvp artifact" in out["hessian_ad1"]
    assert out["jvp_ad0"].startswith("ArtifactError: jxe_ad.array0: differentiation (forward "
                                     "mode")
    assert out["vmap_ad0"] == []


MEMBERS_READ = """
import json, os, sys
import jax, jax.numpy as jnp
import jxe_ad as m
folder = os.path.join(os.path.dirname(m.__file__), "_jaxexport")
with open(os.path.join(folder, "manifest.json")) as f:
    kinds = {r["file"]: r["kind"] for r in json.load(f)["artifacts"]
             if r["function"] == "jxe_ad.array1"}
opened = []
sys.addaudithook(lambda event, args: opened.append(os.path.basename(os.fsdecode(args[0])))
                 if event == "open" and isinstance(args[0], (str, bytes)) else None)
source = m.array1.__wrapped__
x = jnp.linspace(0.1, 1.0, 4)
out = {}
for name, run in (
        ("grad", lambda f: jax.grad(lambda x: f(x).sum())(x)),
        ("jit_grad", lambda f: jax.jit(jax.grad(lambda x: f(x).sum()))(x + 1.0)),
        ("jvp", lambda f: jax.jvp(f, (x,), (x + 0.5,))[1])):
    opened.clear()
    value = run(m.array1)
    out[name] = sorted({kinds[f] for f in opened if f in kinds})
    out[name + "_equal"] = bool(jnp.allclose(value, run(source), rtol=1e-5))
print(json.dumps(out))
"""


def test_reverse_mode_never_reads_the_jvp_member(ad_site, run_python, tmp_path):
    """An eager ``jax.grad`` and ``jax.jit(jax.grad(...))`` of an ``ad_order`` function type
    its ``jvp`` member from the primal and transpose it into the ``vjp``: the ``jvp`` blob is
    read (and deserialized) only by forward mode, which evaluates it. Every result equals the
    source's. An executable cache of its own: what other tests cached changes no read."""
    out = json.loads(run_python(MEMBERS_READ, env={
        "PYTHONPATH": str(ad_site), "HATCH_JAXEXPORT_STRICT": "1",
        "HATCH_JAXEXPORT_CACHE": str(tmp_path / "cache")}).stdout)
    assert out["grad"] == ["primal", "vjp"]
    assert out["jit_grad"] == []  # both members already read; the jvp still not
    assert out["jvp"] == ["jvp"]
    assert out["grad_equal"] and out["jit_grad_equal"] and out["jvp_equal"]


DESERIALIZED = """
import json, os
import jax, jax.numpy as jnp
from jax import export
import jxe_ad as m
deserialized = []
read = export.deserialize  # counted, then called: jax's own deserializer does the work
export.deserialize = lambda *a, **k: deserialized.append(1) or read(*a, **k)
fn = getattr(m, os.environ["JXE_FUNCTION"])
x = jnp.linspace(0.1, 1.0, 4)
value = jax.grad(lambda v: fn(v).sum())(x)
source = jax.grad(lambda v: fn.__wrapped__(v).sum())(x)
print(json.dumps({"deserialized": len(deserialized),
                  "tiers": sorted(s.tier for s in fn.call_report()),
                  "equal": bool(jnp.allclose(value, source, rtol=1e-5))}))
"""


@pytest.mark.parametrize("function", ["array1", "native_vjp"])
def test_a_cached_eager_gradient_deserializes_nothing(ad_site, run_python, tmp_path, function):
    """A process whose executables are all in the cache runs an eager ``jax.grad`` without
    deserializing any ``Exported``, of an ``ad_order`` family (typed from the manifest's
    records) as of a ``vjp_order`` function (jax's serialized VJP, typed from its record):
    the forward and backward executables need only the artifact's hash. The first process
    compiles both, which needs them. Strict mode: nothing falls back."""
    env = {"PYTHONPATH": str(ad_site), "HATCH_JAXEXPORT_STRICT": "1", "JXE_FUNCTION": function,
           "HATCH_JAXEXPORT_CACHE": str(tmp_path / "cache"), "HATCH_JAXEXPORT_TIERED": "0"}
    first, second = (json.loads(run_python(DESERIALIZED, env=env).stdout) for _ in range(2))
    assert first["deserialized"] >= 1 and first["tiers"] == ["compiled", "compiled"]
    assert second["deserialized"] == 0 and second["tiers"] == ["cached", "cached"]
    assert first["equal"] and second["equal"]


def test_each_ad_family_in_the_manifest_agrees_with_itself_and_a_damaged_text_does_not(
        ad_site):
    """The manifest writes a family's types in each member's record; the loader trusts that
    text only where every record agrees with the primal's (``members_agree``)."""
    from hatch_jaxexport.runtime.artifacts.family import inexact_indices, members_agree

    records = json.loads((ad_site / "jxe_ad" / "_jaxexport" / "manifest.json").read_text())
    families: dict[tuple, dict] = {}
    for r in records["artifacts"]:
        key = (r["function"], r["structure_index"], json.dumps(r["static"]), r["platform"])
        families.setdefault(key, {})[(r["kind"], r["batched"])] = (r["in_avals"], r["out_avals"])
    checked = 0
    for members in families.values():
        primal_in, primal_out = members.pop(("primal", False))
        if not members:
            continue
        din = inexact_indices([t.partition("[")[0] for t in primal_in])
        dout = inexact_indices([t.partition("[")[0] for t in primal_out])
        assert members_agree(primal_in, primal_out, members, din, dout), members
        for key, (member_in, member_out) in members.items():
            damaged = {**members, key: (member_in, [t.replace("float32", "float16")
                                                    for t in member_out])}
            if damaged[key] != members[key]:
                assert not members_agree(primal_in, primal_out, damaged, din, dout), key
            short = {**members, key: (member_in[:-1], member_out)}
            assert not members_agree(primal_in, primal_out, short, din, dout), key
        checked += 1
    assert checked >= 3


def test_build_reports_and_inspect_shows_companion_artifacts(ad_site):
    manifest = json.loads((ad_site / "jxe_ad" / "_jaxexport" / "manifest.json").read_text())
    members = sorted((r["kind"], r["batched"]) for r in manifest["artifacts"]
                     if r["function"] == "jxe_ad.array2")
    assert members == sorted((k, b) for k in ("primal", "jvp", "vjp", "jvp_jvp", "vjp_jvp")
                             for b in (False, True))
    shown = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_ad"],
                env={"PYTHONPATH": str(ad_site)}).stdout
    assert "vjp_jvp+batched" in shown


NESTED_VMAP = """
import json
import jax, jax.numpy as jnp, numpy as np
import jxe_ad as m
x = np.linspace(0.1, 1.0, 2 * 3 * 5, dtype=np.float32).reshape(2, 3, 5)
y = np.cos(x)
scale = np.float32(0.5)
array = jax.vmap(jax.vmap(m.array2))
multi = jax.vmap(jax.vmap(m.multi2, in_axes=(0, 0, None)), in_axes=(0, 0, None))
before = m.TRACES["count"]
values = [array(x), multi(x, y, scale)]
programs = [str(jax.make_jaxpr(array)(x)), str(jax.make_jaxpr(multi)(x, y, scale))]
traces = m.TRACES["count"] - before
source = [jax.vmap(jax.vmap(m.array2.__wrapped__))(x),
          jax.vmap(jax.vmap(m.multi2.__wrapped__, in_axes=(0, 0, None)),
                   in_axes=(0, 0, None))(x, y, scale)]
print(json.dumps({"traces": traces, "loops": [("scan" in p or "while" in p) for p in programs],
                  "shapes": [list(v.shape) for v in values],
                  "equal": [bool(jnp.allclose(v, s, rtol=1e-5)) for v, s in zip(values, source)]}))
"""


def test_a_vmap_of_a_vmap_is_one_call_of_the_batched_member(ad_site, run_python):
    """``vmap=True`` bakes the batched member; under a second ``vmap`` (a kernel's ``vmap`` of
    ``vmap`` of its distance) the two batch axes fold into one call of it, an unbatched
    scalar broadcast, so the program has no ``lax.map`` loop (one example at a time, where the
    source's nested ``vmap`` is one vectorized program); strict, nothing traced, the source's
    values."""
    out = json.loads(run_python(NESTED_VMAP, env={
        "PYTHONPATH": str(ad_site), "HATCH_JAXEXPORT_STRICT": "1"}).stdout)
    assert out["traces"] == 0
    assert out["loops"] == [False, False]
    assert out["shapes"] == [[2, 3, 5], [2, 3, 5]]
    assert out["equal"] == [True, True]
