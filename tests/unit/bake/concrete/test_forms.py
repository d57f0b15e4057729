"""Concrete-size forms of primal artifacts (``bake/concrete/forms.py``): the build writes
one per size a function names, refined at build; the loader compiles it for a first call of
exactly those types (no shape refinement in the user's process) and the symbolic artifact for
any other, refined from its text form without jax's lowering where the wheel has one."""

from __future__ import annotations

import json
import sys
import textwrap

import pytest
from conftest import run

SOURCE = '''
import typing

from hatch_jaxexport import exportable
import jax.numpy as jnp


class Pair(typing.NamedTuple):  # a class of the package's own, in and out
    a: typing.Any
    b: typing.Any


@exportable({"p": Pair(a=("n", "float32"), b=("n", "float32"))}, executable_sizes={"n": [3]})
def paired(p):
    return Pair(p.a * jnp.sin(p.b), p.b + 1)


@exportable({"x": ("b, n", "float32")}, executable_sizes={"b": [2], "n": [3]})
def scaled(x):
    return jnp.tanh(x) * x.shape[0]


@exportable({"x": ("n", "float32")}, static={"mode": ["sin", "cos"]},
            executable_sizes={"n": [5]})
def wave(x, mode="sin"):
    return jnp.sin(x) if mode == "sin" else jnp.cos(x)


@exportable({"x": ("n", "float32")})
def unsized(x):
    return x + 1


@exportable({"x": ("n", "float32"), "w": ("n", "float32")}, vjp_order=1,
            executable_sizes={"n": [6]})
def weighted(x, w):
    return jnp.sum(jnp.sin(x) * w)


@exportable({"x": ("n", "float32"), "w": ("n", "float32")}, ad_order=1,
            executable_sizes={"n": [6]})
def weighted_family(x, w):
    return jnp.sum(jnp.sin(x) * w)


@exportable({"x": ("4, 3", "float32")}, vjp_order=1)
def fixed(x):
    return jnp.sum(jnp.tanh(x) ** 2)


@exportable({"x": ("n", "float32")}, concrete={"n": [4]})
def lengthy(x):  # not shape-polymorphic: baked as a concrete-size artifact at n=4
    return sum(x[i] * i for i in range(len(x)))
'''

#: The text forms' names (``formats.manifest.TEXT_FORMS``): the call's module, the VJP's.
TEXT = ("text", "vjp_text")

PROBE = '''
import json, sys
import numpy as np
import jax
from jax._src.interpreters import mlir
import jxe_sized

refined = []
original = mlir.refine_polymorphic_shapes
def counting(module):  # jax's own pass, counted: every call still runs it
    refined.append(1)
    return original(module)
mlir.refine_polymorphic_shapes = counting
lowered = []
original_lower = mlir.lower_jaxpr_to_module
def counting_lower(*args, **kwargs):  # every jax lowering of a jaxpr, counted
    lowered.append(1)
    return original_lower(*args, **kwargs)
mlir.lower_jaxpr_to_module = counting_lower

def count(fn, *args, **kwargs):
    before, lowered_before = len(refined), len(lowered)
    out = np.asarray(fn(*args, **kwargs))
    found = {"refined": len(refined) - before, "lowered": len(lowered) - lowered_before}
    ref = np.asarray(fn.__wrapped__(*args, **kwargs))
    jitted = np.asarray(jax.jit(fn.__wrapped__, static_argnames="mode")(*args, **kwargs)
                        if kwargs else jax.jit(fn.__wrapped__)(*args))
    return {**found, "close": bool(np.allclose(out, ref, atol=1e-6)),
            "as_jit": out.dtype == jitted.dtype and bool(np.array_equal(out, jitted))}

def count_grad(fn, *args):
    """``jax.grad`` of ``fn``: our lowerings and refinements (jax.grad's own cotangent of ones,
    an eager op it compiles for any function, is compiled first), and the gradient beside
    ``jax.jit(jax.grad(source))``'s."""
    jax.grad(lambda v: v)(np.float32(0.5))
    before, lowered_before = len(refined), len(lowered)
    out = np.asarray(jax.grad(fn)(*args))
    found = {"refined": len(refined) - before, "lowered": len(lowered) - lowered_before}
    ref = np.asarray(jax.jit(jax.grad(fn.__wrapped__))(*args))
    return {**found, "close": bool(np.allclose(out, ref, atol=1e-6))}

def after_eager(fn, x):
    """Once its eager calls run the executable's own dispatch (the fast path keeps it):
    ``jax.jit``, ``jax.grad`` and ``vmap`` of the function, then eager calls again."""
    src = fn.__wrapped__
    found = [fn(x), fn(x), jax.jit(fn)(x), jax.grad(fn)(x), jax.vmap(fn)(np.stack([x, x])),
             fn(x)]
    want = [src(x), src(x), src(x), jax.grad(src)(x), jax.vmap(src)(np.stack([x, x])), src(x)]
    return all(np.allclose(a, b, atol=1e-6) for a, b in zip(found, want))

print(json.dumps({
    "grad sized": count_grad(jxe_sized.weighted, np.linspace(0, 1, 6, dtype=np.float32),
                             np.ones(6, np.float32)),
    "grad family sized": count_grad(jxe_sized.weighted_family,
                                    np.linspace(0, 1, 6, dtype=np.float32),
                                    np.ones(6, np.float32)),
    "grad other": count_grad(jxe_sized.weighted, np.linspace(0, 1, 7, dtype=np.float32),
                             np.ones(7, np.float32)),
    "fixed": count(jxe_sized.fixed, np.ones((4, 3), np.float32)),
    "concrete": count(jxe_sized.lengthy, np.linspace(0, 1, 4, dtype=np.float32)),
    "grad fixed": count_grad(jxe_sized.fixed, np.ones((4, 3), np.float32)),
    "sized": count(jxe_sized.scaled, np.ones((2, 3), np.float32)),
    "other": count(jxe_sized.scaled, np.ones((4, 3), np.float32)),
    "static": count(jxe_sized.wave, np.linspace(0, 1, 5, dtype=np.float32), mode="cos"),
    "unsized": count(jxe_sized.unsized, np.ones(5, np.float32)),
    "paired": count(jxe_sized.paired, jxe_sized.Pair(np.linspace(0, 1, 4, dtype=np.float32),
                                                     np.ones(4, np.float32))),
    "concrete transformed": after_eager(jxe_sized.lengthy,  # after its first call's count
                                        np.linspace(0, 1, 4, dtype=np.float32)),
}))
'''


@pytest.fixture(scope="module")
def sized_site(tmp_path_factory):
    site = tmp_path_factory.mktemp("sized")
    (site / "jxe_sized").mkdir()
    (site / "jxe_sized" / "__init__.py").write_text(textwrap.dedent(SOURCE))
    run([sys.executable, "-m", "hatch_jaxexport", "export", "jxe_sized", "--out",
         site / "jxe_sized" / "_jaxexport", "--path", site, "--platform", "cpu",
         "--platform", "cuda"])
    return site


def _probe(site, env=None):
    out = run([sys.executable, "-c", PROBE], env={"PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu",
                                                "HATCH_JAXEXPORT_CACHE": "0", **(env or {})})
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_the_build_writes_a_refined_module_per_named_size(sized_site):
    from jax import export

    folder = sized_site / "jxe_sized" / "_jaxexport"
    manifest = json.loads((folder / "manifest.json").read_text())
    by_function, texts = {}, {}
    # an accelerator's artifacts get the same forms as the cpu ones: jax's lowering of
    # call_exported cost a TPU's first call 40-90 ms over the source's (docs/gpu.md)
    forms = {platform: sorted((r["function"], r["kind"], e.get("form") or "", str(e["inputs"]))
                              for r in manifest["artifacts"] if r["platform"] == platform
                              for e in r["sized"]) for platform in ("cpu", "cuda")}
    assert forms["cuda"] == forms["cpu"] and forms["cpu"]
    for record in manifest["artifacts"]:
        if record["platform"] != "cpu":
            continue
        by_function.setdefault(record["function"], []).extend(
            e for e in record["sized"] if e.get("form") not in TEXT)
        texts.setdefault(record["function"], []).extend(
            e for e in record["sized"] if e.get("form") in TEXT)
    assert {r["platform"] for r in manifest["artifacts"]} == {"cpu", "cuda"}
    assert [e["inputs"] for e in by_function["jxe_sized:scaled"]] == [[[[2, 3], "float32"]]]
    assert len(by_function["jxe_sized:wave"]) == 2  # one per static value
    assert by_function["jxe_sized:unsized"] == []  # no size named, none recorded
    assert by_function["jxe_sized:paired"] == []  # the package's class: its text form only
    assert by_function["jxe_sized:fixed"] == []  # no symbol: the artifact is of one size
    # a family's unbatched members get their forms too (an eager jax.grad runs the vjp)
    family = [r for r in manifest["artifacts"]
              if r["function"] == "jxe_sized:weighted_family" and r["platform"] == "cpu"]
    assert {r["kind"]: len([e for e in r["sized"] if e.get("form") not in TEXT])
            for r in family} == {"primal": 1, "jvp": 1, "vjp": 1}
    # an artifact with its VJP (vjp_order) gets the VJP's form too: primal inputs, cotangent
    vjp_inputs = [[[6], "float32"]] * 2 + [[[], "float32"]]
    assert [(e["inputs"], e.get("form")) for e in by_function["jxe_sized:weighted"]] == [
        ([[[6], "float32"]] * 2, None), (vjp_inputs, "vjp")]
    for entry in [*by_function["jxe_sized:scaled"], *by_function["jxe_sized:wave"],
                  *by_function["jxe_sized:weighted"]]:
        data = (folder / entry["file"]).read_bytes()
        assert len(data) == entry["size"] and str(sized_site).encode() not in data
        exported = export.deserialize(bytearray(data))
        text = exported.mlir_module()
        assert "?x" not in text and "shape_assertion" not in text, text[:400]
        assert [list(a.shape) for a in exported.in_avals] == [d for d, _ in entry["inputs"]]
    # every symbolic cpu artifact has its module as text too (one per static value), for the
    # sizes no form was baked at; an artifact without symbols needs none
    assert {name: len(found) for name, found in texts.items()} == {
        "jxe_sized:scaled": 1, "jxe_sized:wave": 2, "jxe_sized:unsized": 1,
        "jxe_sized:weighted": 2, "jxe_sized:weighted_family": 3, "jxe_sized:fixed": 0,
        "jxe_sized:paired": 1,
    }  # with vjp_order: the call's and the VJP's; the family: its primal, jvp and vjp
    for entry in [e for found in texts.values() for e in found]:
        data = (folder / entry["file"]).read_bytes()
        assert entry["inputs"] == [] and len(data) == entry["size"]
        assert str(sized_site).encode() not in data and b"loc(" not in data  # no build path
        assert data.count(b"func.func public @main(") == 1 and b"?x" in data


def test_a_call_of_a_named_size_compiles_without_shape_refinement(sized_site):
    out = _probe(sized_site, {"HATCH_JAXEXPORT_EXECUTABLES": "0"})
    # a named size: its module compiled from its bytes (``DirectModule``), nothing lowered,
    # the numbers of ``jax.jit`` of the source bit for bit
    assert out["sized"] == {"refined": 0, "lowered": 0, "close": True, "as_jit": True}
    assert out["static"] == {"refined": 0, "lowered": 0, "close": True, "as_jit": True}
    for other in ("other", "unsized", "paired"):  # the symbolic artifact (one taking and
        # returning a class of the package's too): its text refined in C++,
        # compiled from the bytes: nothing lowered, the numbers of jax.jit of the source
        assert out[other] == {"refined": 0, "lowered": 0, "close": True, "as_jit": True}, out
    # an artifact without symbols is already of the call's size: compiled from its bytes
    assert out["fixed"] == {"refined": 0, "lowered": 0, "close": True, "as_jit": True}
    # and so is a concrete-size artifact (code that is not shape-polymorphic), whose
    # executable then serves eager calls, refusing tracers to the artifact's transformations
    assert out["concrete"] == {"refined": 0, "lowered": 0, "close": True, "as_jit": True}
    assert out["concrete transformed"] is True


def test_an_eager_gradient_at_a_named_size_lowers_neither_program(sized_site):
    out = _probe(sized_site, {"HATCH_JAXEXPORT_EXECUTABLES": "0"})
    # the forward's and the serialized VJP's concrete-size forms, both compiled from bytes
    assert out["grad sized"] == {"refined": 0, "lowered": 0, "close": True}, out
    assert out["grad fixed"] == {"refined": 0, "lowered": 0, "close": True}, out
    # through the transformation family (ad_order): its members' forms, compiled from bytes
    assert out["grad family sized"] == {"refined": 0, "lowered": 0, "close": True}, out
    # another size: the forward and the serialized VJP refined from their text forms, nothing
    # lowered, the same gradient
    assert out["grad other"] == {"refined": 0, "lowered": 0, "close": True}, out


def test_a_damaged_static_shape_form_falls_back_to_the_symbolic_artifact(sized_site, tmp_path):
    import shutil

    site = tmp_path / "site"
    shutil.copytree(sized_site, site)
    folder = site / "jxe_sized" / "_jaxexport"
    manifest = json.loads((folder / "manifest.json").read_text())
    (entry,) = [e for r in manifest["artifacts"] if r["function"] == "jxe_sized:scaled"
                and r["platform"] == "cpu" for e in r["sized"] if e.get("form") not in TEXT]
    (folder / entry["file"]).write_bytes(b"damaged")
    out = _probe(site)
    # the symbolic artifact serves the size, refined from its text form (nothing lowered)
    assert out["sized"] == {"refined": 0, "lowered": 0, "close": True, "as_jit": True}, out
    problems = run([sys.executable, "-m", "hatch_jaxexport", "verify", "jxe_sized"],
                   env={"PYTHONPATH": str(site)}, check=False)
    assert problems.returncode == 1 and entry["file"] in problems.stdout


def test_the_manifest_refuses_a_static_shape_form_outside_the_folder(sized_site):
    from hatch_jaxexport.errors import ArtifactError
    from hatch_jaxexport.formats.manifest_reader import parse_manifest

    raw = json.loads((sized_site / "jxe_sized" / "_jaxexport" / "manifest.json").read_text())
    (record,) = [r for r in raw["artifacts"] if r["function"] == "jxe_sized:scaled"
                 and r["platform"] == "cpu"]
    record["sized"][0]["file"] = "../evil.jaxexport"
    with pytest.raises(ArtifactError, match="unsafe artifact file"):
        parse_manifest(json.dumps(raw).encode())
    record["sized"][0] = {"file": "x.jaxexport"}
    with pytest.raises(ArtifactError, match="exactly inputs, file, sha256 and size"):
        parse_manifest(json.dumps(raw).encode())
    (vjp_form,) = [json.loads(json.dumps(e)) for r in raw["artifacts"]
                   if r["function"] == "jxe_sized:weighted" and r["platform"] == "cpu"
                   for e in r["sized"] if e.get("form") == "vjp"]
    record["sized"][0] = {**vjp_form, "form": "call"}  # a call's form has no form key
    with pytest.raises(ArtifactError, match="form must be one of vjp, text, vjp_text, got 'call'"):
        parse_manifest(json.dumps(raw).encode())


@pytest.mark.parametrize("spoil", ["damaged text", "another jaxlib"])
def test_without_a_usable_text_form_jax_lowers_the_symbolic_artifact(sized_site, tmp_path,
                                                                      spoil):
    """A text form is used only as this jaxlib printed it and as the manifest hashed it;
    otherwise the usual lowering serves the call, with the same numbers."""
    import shutil

    site = tmp_path / "site"
    shutil.copytree(sized_site, site)
    folder = site / "jxe_sized" / "_jaxexport"
    manifest = json.loads((folder / "manifest.json").read_text())
    if spoil == "damaged text":
        for entry in [e for r in manifest["artifacts"] for e in r["sized"]
                      if e.get("form") in TEXT]:
            (folder / entry["file"]).write_text("module {}")
    else:
        manifest["jaxlib_version"] = "0.0.1"
        (folder / "manifest.json").write_text(json.dumps(manifest))
    out = _probe(site, {"HATCH_JAXEXPORT_EXECUTABLES": "0"})
    for other in ("other", "unsized"):
        assert out[other]["refined"] == 1 and out[other]["lowered"] >= 1, out
        assert out[other]["close"] and out[other]["as_jit"], out
    assert out["sized"] == {"refined": 0, "lowered": 0, "close": True, "as_jit": True}


def test_the_manifest_refuses_a_text_form_that_names_sizes(sized_site):
    from hatch_jaxexport.errors import ArtifactError
    from hatch_jaxexport.formats.manifest_reader import parse_manifest

    raw = json.loads((sized_site / "jxe_sized" / "_jaxexport" / "manifest.json").read_text())
    (text,) = [e for r in raw["artifacts"] if r["function"] == "jxe_sized:unsized"
               and r["platform"] == "cpu" for e in r["sized"]]
    text["inputs"] = [[[4], "float32"]]
    with pytest.raises(ArtifactError, match="text form, whose inputs must be empty"):
        parse_manifest(json.dumps(raw).encode())
