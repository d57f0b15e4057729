"""``jaxexport warmup`` run as a user runs it: a fresh process on an exported package.

Without ``--dims`` nothing can be warmed: the command must fail (not print "warmed 0") and say
how to give every missing symbol in one command line.
"""

from __future__ import annotations

import json
import sys

from conftest import COUNT_COMPILES, run

WARMUP = [sys.executable, "-m", "hatch_jaxexport", "warmup", "jxe_demo"]
EVERY_SYMBOL = ("jaxexport warmup jxe_demo --dims a=SIZE --dims b=SIZE --dims c=SIZE "
                "--dims i=SIZE --dims n=SIZE --dims o=SIZE")


def _env(site, tmp_path) -> dict[str, str]:
    return {"PYTHONPATH": str(site), "HATCH_JAXEXPORT_CACHE": str(tmp_path / "cache")}


def test_warmup_without_dims_fails_and_names_every_missing_symbol(demo_site, tmp_path):
    proc = run(WARMUP, env=_env(demo_site, tmp_path), check=False)
    assert proc.returncode == 1
    assert "warmed" not in proc.stdout  # no "warmed 0 call signature(s)"
    last = proc.stderr.strip().splitlines()[-2:]
    assert last == ["jaxexport: error: warmed nothing: no size for the symbols a, b, c, i, n, o. "
                    "Give them all, e.g.", f"  {EVERY_SYMBOL}"]
    # Each skipped structure names all its missing symbols, each with its own --dims.
    assert ("skipped: jxe_demo.funcs:dense structure 0 (params: {w: float32[i, o], b: "
            "float32[o]}; x: float32[n, i]): no value for i, n, o (give --dims i=SIZE "
            "--dims n=SIZE --dims o=SIZE)") in proc.stderr


def test_partial_warmup_succeeds_and_shows_the_command_that_warms_the_rest(demo_site, tmp_path):
    proc = run([*WARMUP, "--dims", "a=2", "--dims", "b=3,4"], env=_env(demo_site, tmp_path))
    assert proc.stdout.startswith("warmed ")
    assert int(proc.stdout.split()[1]) > 0
    assert proc.stderr.strip().splitlines()[-1] == (
        "to warm the skipped structures too, give every symbol a size: jaxexport warmup "
        "jxe_demo --dims a=2 --dims b=3,4 --dims c=SIZE --dims i=SIZE --dims n=SIZE "
        "--dims o=SIZE")
    assert ("skipped: jxe_demo.reduce structure 1 (x: float32[a, b, c]): no value for c "
            "(give --dims c=SIZE)") in proc.stderr


def test_the_example_command_warms_everything(demo_site, tmp_path):
    sizes = EVERY_SYMBOL.replace("SIZE", "2").split()[3:]
    proc = run([*WARMUP, *sizes], env=_env(demo_site, tmp_path))
    assert "no value for" not in proc.stderr and "give every symbol" not in proc.stderr
    assert int(proc.stdout.split()[1]) > 0


def test_a_package_without_exportables_is_an_error(tmp_path):
    (tmp_path / "jxe_empty").mkdir()
    (tmp_path / "jxe_empty" / "__init__.py").write_text("X = 1\n")
    proc = run([sys.executable, "-m", "hatch_jaxexport", "warmup", "jxe_empty"],
               env=_env(tmp_path, tmp_path), check=False)
    assert proc.returncode == 1
    assert proc.stderr.strip().splitlines()[-1] == (
        "jaxexport: error: warmed nothing: jxe_empty has no @exportable functions")


def test_without_dims_the_sizes_named_at_build_are_warmed(exec_site, tmp_path):
    proc = run([sys.executable, "-m", "hatch_jaxexport", "warmup", "jxe_exec"],
               env=_env(exec_site, tmp_path))
    assert proc.stdout.startswith("warmed ")
    # square's concrete= sizes, solve's executable_sizes=, loss's sizes: all without --dims
    assert "jxe_exec:square [0] {'n': 3}" in proc.stdout + proc.stderr
    assert "jxe_exec:square [0] {'n': 5}" in proc.stdout + proc.stderr
    assert "jxe_exec:solve [0] {'n': 6}" in proc.stdout + proc.stderr
    # a function that names no sizes still needs --dims
    assert "jxe_exec:unsized structure 0 (x: float32[n]): no value for n" in proc.stderr
    with_dims = run([sys.executable, "-m", "hatch_jaxexport", "warmup", "jxe_exec", "--dims",
                     "n=7"], env=_env(exec_site, tmp_path))
    assert "jxe_exec:square [0] {'n': 7}" in with_dims.stdout + with_dims.stderr  # --dims wins
    assert "no value for n" not in with_dims.stderr


GRADIENTS = COUNT_COMPILES + """
w, x = np.linspace(-1, 1, 4).astype(f32), np.ones((3, 4), f32)
jax.block_until_ready(jax.grad(lambda v: v)(f32(1.0)))  # jax's own eager seed
before = len(compiles)
jax.block_until_ready((jax.grad(m.native_loss)(w, x), jax.grad(m.loss)(w, x)))
native = tiered_calls(m.native_loss)[0]
print(json.dumps({"compiles": len(compiles) - before, "primal": list(native.tiers.values()),
                  "vjp": list(native.jitted.backward_call.tiers.values())}))
"""


def test_warmup_fills_the_cache_for_eager_gradients_too(exec_site, tmp_path):
    """A function with gradients (jax's own VJP, or the family's vjp member) is warmed through
    its pullback as well: a later process's eager jax.grad compiles none of them."""
    env = {**_env(exec_site, tmp_path), "HATCH_JAXEXPORT_EXECUTABLES": "0",
           "HATCH_JAXEXPORT_TIERED": "0"}
    run([sys.executable, "-m", "hatch_jaxexport", "warmup", "jxe_exec"], env=env)
    found = json.loads(run([sys.executable, "-c", GRADIENTS], env=env).stdout.splitlines()[-1])
    assert found == {"compiles": 0, "primal": ["cached"], "vjp": ["cached"]}
