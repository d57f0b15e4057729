"""Shipped executables: a fresh process's first calls load them instead of compiling, only on an
exact match, and every mismatch or damage falls back to the artifact's StableHLO."""

from __future__ import annotations

import json
import platform
import shutil
import sys
from pathlib import Path

import pytest
from conftest import COUNT_COMPILES, run

from hatch_jaxexport.formats.cpu_targets import linux_cpu_flags, missing_features
from hatch_jaxexport.formats.manifest import MANIFEST_NAME

pytestmark = pytest.mark.skipif(platform.machine() != "x86_64",
                                reason="the fixture compiles the x86-64 targets")

SCRIPT = COUNT_COMPILES + """
calls = {
    "chain": lambda: m.chain(np.ones((8, 4), f32), np.full(4, 0.5, f32)),
    "square3": lambda: m.square(np.arange(3, dtype=f32)),
    "square5": lambda: m.square(np.arange(5, dtype=f32)),
    "poly_fast": lambda: m.poly(np.arange(4, dtype=f32), "fast"),
    "poly_exact": lambda: m.poly(np.arange(4, dtype=f32), "exact"),
    "combine": lambda: m.combine(np.arange(4, dtype=f32), y=np.ones(4, f32)),
    "stats": lambda: m.stats(np.arange(6, dtype=f32).reshape(2, 3)),
    "solve": lambda: m.solve(np.eye(6, dtype=f32) * 3 + 1, np.arange(6, dtype=f32)),
    "square4": lambda: m.square(np.arange(4, dtype=f32)),
    "unsized": lambda: m.unsized(np.arange(-2, 3, dtype=f32)),
    "opted_out": lambda: m.opted_out(np.ones(4, f32)),
    "avx2_only": lambda: m.avx2_only(np.ones(4, f32)),
}
out = {"results": {}, "compiles": {}, "types": {}}
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    for name, call in calls.items():
        before = len(compiles)
        value = call()
        out["compiles"][name] = len(compiles) - before
        out["types"][name] = type(value).__name__
        out["results"][name] = [np.asarray(a).tolist() for a in jax.tree_util.tree_leaves(value)]
        if name == "chain":  # the first call: what a shipped one imports of the compile path
            out["compile_path"] = sorted(n for n in sys.modules if n.rsplit(".", 1)[-1] in (
                "tiers", "tier_policy", "_fresh_compile", "_user_cache", "_background",
                "native_vjp", "direct_module", "signatures", "structure_text", "jax_window",
                "inventory", "_user_frame", "readers", "_recorder", "_source_calls", "refusals",
                "notices", "family", "sources", "_compile_path", "_executable_cache",
                "entry_names", "cache_folders", "footprint", "source_errors", "pytrees",
                "aux_keys", "device_targets") and n.startswith(("hatch_jaxexport.",
                                                                 "importlib.")))
            out["ours"] = sorted(n for n in sys.modules if n.startswith("hatch_jaxexport"))
    with jax.enable_x64(True):
        before = len(compiles)
        out["results"]["wide"] = np.asarray(m.wide(np.arange(4, dtype=np.float64))).tolist()
        out["compiles"]["wide"] = len(compiles) - before
out["warnings"] = [str(w.message) for w in caught]
out["tiers"] = {name: sorted(t for c in tiered_calls(getattr(m, name)) for t in c.tiers.values())
                for name in ("chain", "square", "poly", "combine", "stats", "solve", "wide",
                             "unsized", "opted_out", "avx2_only")}
out["avx2_only"] = sorted(t for c in tiered_calls(m.avx2_only) if c.shipped is not None
                          for t in c.shipped.used.values())
out["targets"] = sorted(t for c in tiered_calls(m.chain) if c.shipped is not None
                        for t in c.shipped.used.values())
out["traced"] = m.TRACES["count"]
print(json.dumps(out))
"""


def run_calls(site: Path, check: bool = True, **env: str) -> dict:
    """Run ``SCRIPT`` in a fresh process on ``site``: strict, no caches, no tiering."""
    proc = run([sys.executable, "-c", SCRIPT], check=check, env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": "0", "HATCH_JAXEXPORT_STRICT": "1",
        "HATCH_JAXEXPORT_TIERED": "0", **env})
    if not check and proc.returncode != 0:
        return {"error": proc.stderr}
    return json.loads(proc.stdout.splitlines()[-1])


@pytest.fixture(scope="module")
def reference(exec_site) -> dict:
    """The same calls with shipped executables off: every one compiles the StableHLO."""
    return run_calls(exec_site, HATCH_JAXEXPORT_EXECUTABLES="0")


def copy_site(exec_site: Path, tmp_path: Path) -> Path:
    shutil.copytree(exec_site, tmp_path / "site")
    return tmp_path / "site"


def edit_manifest(site: Path, edit) -> None:
    path = site / "jxe_exec" / "_jaxexport" / MANIFEST_NAME
    manifest = json.loads(path.read_text())
    for record in manifest["executables"]:
        edit(record)
    path.write_text(json.dumps(manifest))


def test_reference_compiles_every_call(reference):
    assert reference["traced"] == 0 and not reference["warnings"]
    assert all(n >= 1 for n in reference["compiles"].values()), reference["compiles"]
    assert set(reference["tiers"]["square"]) == {"compiled"}


def test_first_calls_load_shipped_executables_and_compile_nothing(exec_site, reference):
    shipped = run_calls(exec_site)
    assert shipped["traced"] == 0 and not shipped["warnings"]
    assert shipped["results"] == reference["results"]
    assert shipped["types"] == reference["types"]  # the namedtuple and dict outputs too
    sized = ("chain", "square3", "square5", "poly_fast", "poly_exact", "combine", "stats",
             "solve", "wide")
    assert {name: shipped["compiles"][name] for name in sized} == dict.fromkeys(sized, 0)
    # a size no executable was compiled for, and a function without sizes: the StableHLO
    assert shipped["compiles"]["square4"] >= 1 and shipped["compiles"]["unsized"] >= 1
    assert shipped["tiers"]["square"] == ["compiled", "shipped", "shipped"]
    assert shipped["tiers"]["poly"] == ["shipped", "shipped"]
    assert shipped["tiers"]["unsized"] == ["compiled"]
    assert shipped["tiers"]["opted_out"] == ["compiled"]  # executables=False
    assert shipped["tiers"]["avx2_only"] == ["shipped"]
    assert shipped["avx2_only"] == ["x86_64-avx2"]  # its own target list, not the build's
    for name in ("chain", "combine", "stats", "solve", "wide"):
        assert shipped["tiers"][name] == ["shipped"], name
    # a first call served by a shipped executable imports nothing of the compile path (the
    # executable cache and its folders, the quick tier, the compiler, the direct compile), of
    # the recorder, of messages, notices or reports, of the source's calls, refusals and
    # mark, of the family, of the pytree registrations, aux data keys or device targets, of
    # the recorded sources, nor importlib's resource readers: a StableHLO one needs the
    # compile path (without a cache folder, not the tiering policy: no tier without one)
    assert shipped["compile_path"] == []
    executables = "hatch_jaxexport.runtime.executables."
    assert {executables + "_compile_path", executables + "_fresh_compile",
            executables + "direct_module", "hatch_jaxexport.runtime.disk.cache_folders",
            } <= set(reference["compile_path"])
    assert executables + "tier_policy" not in reference["compile_path"]
    # all of ours the package's import and a shipped first call load: 40 (the 39 of
    # benchmarks/import_weight.py's package, whose count docs/performance.md gives, and
    # tpu_targets, which avx2_only's executable_targets= reads at decoration)
    assert len(shipped["ours"]) <= 40, "\n".join(shipped["ours"])
    # both targets match a CPU with AVX-512: the one compiled for more of its features runs
    host = linux_cpu_flags(Path("/proc/cpuinfo").read_text())
    assert shipped["targets"] == ["x86_64-avx512" if "avx512f" in host else "x86_64-avx2"]


def test_executables_of_another_jaxlib_are_not_used(exec_site, tmp_path, reference):
    site = copy_site(exec_site, tmp_path)
    edit_manifest(site, lambda r: r.update(jaxlib_version="0.4.1"))
    other = run_calls(site)
    assert other["results"] == reference["results"] and not other["warnings"]
    assert "shipped" not in json.dumps(other["tiers"])
    assert other["traced"] == 0


def test_an_executable_needing_a_cpu_feature_this_cpu_lacks_is_not_used(exec_site, tmp_path,
                                                                         reference):
    host = linux_cpu_flags(Path("/proc/cpuinfo").read_text())
    absent = next(f for f in ("amx-tile", "avx512fp16", "sha512", "avx10.1-512", "cmpccxadd")
                  if missing_features([f], host))
    site = copy_site(exec_site, tmp_path)
    edit_manifest(site, lambda r: r.update(cpu_features=sorted([*r["cpu_features"], absent])))
    lacking = run_calls(site)
    assert lacking["results"] == reference["results"] and not lacking["warnings"]
    assert "shipped" not in json.dumps(lacking["tiers"])


def test_the_most_capable_matching_target_is_chosen(exec_site, tmp_path, reference):
    # only the AVX2 executables can run: the AVX-512 ones name a feature this CPU lacks
    host = linux_cpu_flags(Path("/proc/cpuinfo").read_text())
    absent = next(f for f in ("amx-tile", "avx512fp16", "sha512", "cmpccxadd")
                  if missing_features([f], host))
    site = copy_site(exec_site, tmp_path)
    edit_manifest(site, lambda r: r.update(cpu_features=[*r["cpu_features"], absent])
                  if r["target"] == "x86_64-avx512" else None)
    avx2_only = run_calls(site)
    assert avx2_only["tiers"]["chain"] == ["shipped"]
    assert avx2_only["targets"] == ["x86_64-avx2"]
    assert avx2_only["results"] == reference["results"]


def test_xla_flags_that_change_code_generation_turn_shipped_executables_off(exec_site,
                                                                            reference):
    flagged = run_calls(exec_site, XLA_FLAGS="--xla_cpu_enable_fast_min_max=false")
    assert "shipped" not in json.dumps(flagged["tiers"])
    assert flagged["results"] == reference["results"]
    # a flag that only dumps or counts devices does not
    neutral = run_calls(exec_site,
                        XLA_FLAGS="--xla_force_host_platform_device_count=2")
    assert neutral["tiers"]["chain"] == ["shipped"]


def test_a_damaged_executable_falls_back_with_a_warning_or_raises_when_strict(
        exec_site, tmp_path, reference, maintainer_warnings):
    site = copy_site(exec_site, tmp_path)
    folder = site / "jxe_exec" / "_jaxexport"
    for blob in folder.glob("jxe_exec_chain-*.xla"):
        data = bytearray(blob.read_bytes())
        data[len(data) // 2] ^= 0xFF
        blob.write_bytes(bytes(data))
    lenient = run_calls(site, HATCH_JAXEXPORT_STRICT="0")
    assert lenient["results"] == reference["results"]
    assert lenient["tiers"]["chain"] == ["compiled"]
    assert any("shipped executable" in w and "SHA-256" in w for w in lenient["warnings"])
    strict = run_calls(site, check=False)
    assert "ArtifactError" in strict["error"] and "jxe_exec_chain" in strict["error"]


def test_the_off_switch(exec_site):
    off = run_calls(exec_site, HATCH_JAXEXPORT_EXECUTABLES="0")
    assert "shipped" not in json.dumps(off["tiers"])


TRANSFORM_SCRIPT = """
import json, logging, sys
import numpy as np, jax
compiled = []

class Compiles(logging.Handler):
    def emit(self, record):  # each XLA compile, jax's or one straight from an artifact's bytes
        text = record.getMessage()
        if text.startswith("Finished XLA compilation of "):
            compiled.append(text.split()[4])

logging.getLogger("jax").addHandler(Compiles())
jax.config.update("jax_log_compiles", True)
import jxe_exec as m
w = np.linspace(-1, 1, 4).astype(np.float32)
x = (np.arange(12, dtype=np.float32) / 10).reshape(3, 4)
out = {}
out["grad"] = np.asarray(jax.grad(m.loss)(w, x)).tolist()
out["jvp"] = [np.asarray(v).tolist() for v in jax.jvp(m.loss, (w, x), (np.ones_like(w),
                                                                       np.zeros_like(x)))]
out["compiled"] = compiled
out["scipy_linalg"] = "scipy.linalg" in sys.modules
out["traced"] = m.TRACES["count"]
print(json.dumps(out))
"""


def run_transforms(site: Path, cache: str, **env: str) -> dict:
    proc = run([sys.executable, "-c", TRANSFORM_SCRIPT], env={
        "PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": cache, "HATCH_JAXEXPORT_STRICT": "1",
        **env})
    return json.loads(proc.stdout.splitlines()[-1])


def ours(compiled: list[str]) -> list[str]:
    """The compiles of artifacts (``jit(call)``: a member, ``jit(primal)``), not jax's own
    eager operations (``jit(broadcast_in_dim)``... that ``jax.grad`` runs on the side)."""
    return [name for name in compiled if name in ("jit(call)", "jit(primal)")]


def test_grad_and_jvp_of_a_loaded_function_run_shipped_member_executables(exec_site, tmp_path):
    shipped = run_transforms(exec_site, "0")
    assert shipped["traced"] == 0
    assert ours(shipped["compiled"]) == []  # primal, vjp and jvp members: all shipped
    assert not shipped["scipy_linalg"]  # no LAPACK initialisation for a LAPACK-free function
    reference = run_transforms(exec_site, "0", HATCH_JAXEXPORT_EXECUTABLES="0")
    assert len(ours(reference["compiled"])) >= 2
    assert shipped["grad"] == reference["grad"] and shipped["jvp"] == reference["jvp"]


def test_without_shipped_executables_a_second_process_compiles_no_member(exec_site, tmp_path):
    cache = str(tmp_path / "cache")
    first = run_transforms(exec_site, cache, HATCH_JAXEXPORT_EXECUTABLES="0")
    second = run_transforms(exec_site, cache, HATCH_JAXEXPORT_EXECUTABLES="0")
    assert len(ours(first["compiled"])) >= 2
    assert ours(second["compiled"]) == []  # the executable cache served every member
    assert second["grad"] == first["grad"] and second["jvp"] == first["jvp"]


@pytest.mark.parametrize("tree", [
    {"a": 0, "b": (0, 0)}, [0, None, (0,)], (), 0, {1: 0}, {"x": [0, {"y": 0}]}, None])
def test_plain_output_trees_are_read_from_the_manifest_text(tree):
    import jax

    from hatch_jaxexport.runtime.artifacts.program import plain_tree

    expected = jax.tree_util.tree_structure(tree)
    assert plain_tree(str(expected)) == expected


def test_other_trees_need_the_artifact():
    import collections

    import jax

    from hatch_jaxexport.runtime.artifacts.program import plain_tree

    pair = collections.namedtuple("Pair", "a b")
    assert plain_tree(str(jax.tree_util.tree_structure(pair(0, 0)))) is None
    assert plain_tree("PyTreeDef(CustomNode(Foo[()], [*]))") is None
    assert plain_tree("not a tree") is None and plain_tree("PyTreeDef(__import__('os'))") is None


def test_inspect_lists_each_executable_and_whether_this_machine_uses_it(exec_site, tmp_path):
    site = copy_site(exec_site, tmp_path)
    edit_manifest(site, lambda r: r.update(jaxlib_version="0.4.1")
                  if r["target"] == "x86_64-avx2" else None)
    out = run([sys.executable, "-m", "hatch_jaxexport", "inspect", "jxe_exec"],
              env={"PYTHONPATH": str(site)}).stdout
    records = json.loads((site / "jxe_exec" / "_jaxexport" / MANIFEST_NAME).read_text())[
        "executables"]
    # an avx512 target compiled on a host without AVX-512 needs none of it: usable there too
    host_avx512 = "avx512f" in linux_cpu_flags(Path("/proc/cpuinfo").read_text())
    usable = sum(r["target"] == "x86_64-avx512" and
                 (host_avx512 or not any("avx512" in f for f in r["cpu_features"]))
                 for r in records)
    assert f"precompiled executables: {len(records)}, " in out
    assert f"can use {usable}\n" in out
    assert "not used: compiled for jaxlib 0.4.1, this process has" in out
