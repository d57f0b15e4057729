"""Portable variants (``concrete=``): concrete-size StableHLO for runtimes without JAX.

Fast tests: the option's validation, the interface JSON, refusals, the build's portable.json,
``verify`` and the ``portable`` command. The slow test builds example_pkg's wheel, installs it
into a virtual environment WITHOUT jax, and compiles and runs two functions with IREE.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import numpy as np
import pytest
from conftest import export_into_copy, make_venv, run

from hatch_jaxexport import ExportError, SpecError, exportable
from hatch_jaxexport.bake.concrete.portable_export import (
    custom_call_reason,
    export_variant,
    plan_variants,
)
from hatch_jaxexport.errors import ArtifactError, NotPortable
from hatch_jaxexport.formats.portable_index import (
    INTERFACE_SUFFIX,
    IREE_F64_FLAG,
    PORTABLE_INDEX,
    parse_index,
)

ROOT = Path(__file__).resolve().parents[4]
IREE_PACKAGES = ["iree-base-compiler", "iree-base-runtime", "numpy"]


def _spec_error(**kwargs) -> str:
    structure = kwargs.pop("structure", {"x": ("n, k", "float32")})
    with pytest.raises(SpecError) as info:
        exportable(structure, **kwargs)(lambda x: x)
    return str(info.value)


# --------------------------------------------------------------------------------------------
# The option


def test_concrete_is_validated_when_the_decorator_runs():
    assert "concrete names 'q', which is not a dimension symbol of any structure (symbols: " \
           "k, n)" in _spec_error(concrete={"q": [2]})
    assert "concrete sizes of 'n' must be ints >= 1, got 0" in _spec_error(
        concrete={"n": [0], "k": [1]})
    assert "must be ints >= 1, got True" in _spec_error(concrete={"n": [True], "k": [1]})
    assert "must be a list of ints >= 1" in _spec_error(concrete={"n": "4", "k": [1]})
    assert "concrete lists no sizes for 'n'" in _spec_error(concrete={"n": [], "k": [1]})
    assert "concrete must map dimension symbols" in _spec_error(concrete=[4])
    assert "concrete gives sizes for the symbol(s) n, but every structure also uses k; give " \
           "sizes for every symbol" in _spec_error(concrete={"n": [4]})
    assert "concrete gives sizes for no symbol, but every structure also uses k, n" \
        in _spec_error(concrete={})
    message = _spec_error(structure={"x": ("n", "float32", ["n >= 8"])}, concrete={"n": [4]})
    assert "structure 0: concrete sizes {'n': 4}: they violate the constraint 'n >= 8'" \
        in message
    assert message.startswith("@exportable spec of ")  # names the function


def test_concrete_lands_in_the_spec_and_plans_one_variant_per_combination():
    fn = exportable({"x": ("n, k", "float32")}, {"x": ("n", "float32")},
                    static={"mode": ["a", "b"]}, concrete={"n": [2, 3], "k": 4})(
        lambda x, mode="a": x)
    assert fn.export_spec.concrete == {"n": (2, 3), "k": (4,)}
    names = [p.name for p in plan_variants(fn)]
    assert len(names) == len(set(names)) == 8  # 2 structures x 2 sizes of n x 2 modes
    assert "lambda_s0_mode_a_k4_n2" in names and "lambda_s1_mode_b_n3" in names
    plain = exportable({"x": ("n", "float32")})(lambda x: x)
    assert plain.export_spec.concrete is None and plan_variants(plain) == []


# --------------------------------------------------------------------------------------------
# Exporting one variant


def test_interface_names_every_flat_input_and_output_in_jax_order():
    import jax
    import jax.numpy as jnp

    @exportable({"params": {"w": ("n, m", "float32"), "b": ("m,", "float32")},
                 "xs": [("n,", "float32"), ("n,", "int32")]},
                static={"flip": [False]}, concrete={"n": [3], "m": [2]})
    def model(params, xs, flip=False):
        y = xs[0] @ params["w"] + params["b"] + xs[1].sum()
        return (y, {"total": jnp.sum(y)})

    (plan,) = plan_variants(model)
    variant = export_variant(model, plan, "pkg")
    iface = variant.interface
    assert [(i["name"], i["path"], i["shape"], i["dtype"], i["mlir_type"])
            for i in iface["inputs"]] == [
        ("params['b']", ["params", "b"], [2], "float32", "2xf32"),
        ("params['w']", ["params", "w"], [3, 2], "float32", "3x2xf32"),
        ("xs[0]", ["xs", 0], [3], "float32", "3xf32"),
        ("xs[1]", ["xs", 1], [3], "int32", "3xi32"),
    ]
    assert [(o["name"], o["path"], o["shape"]) for o in iface["outputs"]] == [
        ("result[0]", [0], [2]), ("result[1]['total']", [1, "total"], [])]
    assert iface["module"]["name"] == "jit_model_flip_False_m2_n3"
    assert iface["iree"]["function"] == "jit_model_flip_False_m2_n3.main"
    assert iface["static"] == {"flip": False} and iface["concrete"] == {"m": 2, "n": 3}
    assert iface["platform"] == "cpu" and iface["package"] == "pkg"
    assert iface["module"]["stablehlo_version"]
    # no symbolic shapes, no custom calls, no file paths in the text
    assert "custom_call" not in variant.text and "?" not in variant.text.split("{")[0]
    assert "func.func public @main(%arg0: tensor<2xf32>" in variant.text
    assert str(ROOT) not in variant.text and ROOT.as_posix().encode() not in variant.bytecode
    assert variant.bytecode.startswith(b"ML\xefR")  # MLIR bytecode (a VHLO portable artifact)
    # the flattened order is jax's
    args = ({"w": np.zeros((3, 2), np.float32), "b": np.zeros(2, np.float32)},
            [np.zeros(3, np.float32), np.zeros(3, np.int32)])
    assert len(jax.tree_util.tree_leaves(args)) == len(iface["inputs"])


def test_unused_arguments_are_kept_and_float64_gets_the_iree_flag():
    @exportable({"x": ("n", "float64"), "unused": ("n", "float32")}, concrete={"n": [4]})
    def grow(x, unused):
        return x * 2

    variant = export_variant(grow, plan_variants(grow)[0])
    assert [i["name"] for i in variant.interface["inputs"]] == ["x", "unused"]
    assert variant.interface["iree"]["compile_flags"] == ["--iree-input-type=stablehlo",
                                                          IREE_F64_FLAG]
    assert variant.interface["inputs"][0]["dtype"] == "float64"


def test_lapack_and_callbacks_are_refused_with_a_reason():
    import jax
    import jax.numpy as jnp

    @exportable({"a": ("n, n", "float32"), "b": ("n,", "float32")}, concrete={"n": [3]})
    def solve(a, b):
        return jnp.linalg.solve(a, b)

    with pytest.raises(NotPortable, match=r"uses LAPACK custom calls \(lapack_sgetrf_ffi"):
        export_variant(solve, plan_variants(solve)[0])

    @exportable({"x": ("n", "float32")}, concrete={"n": [3]})
    def noisy(x):
        jax.debug.print("x = {}", x)
        return x

    with pytest.raises(NotPortable, match="calls back into Python"):
        export_variant(noisy, plan_variants(noisy)[0])


def test_custom_call_reasons():
    assert custom_call_reason([]) is None
    assert custom_call_reason(["shape_assertion", "stablehlo.dynamic_reduce_window"]) is None
    assert "LAPACK" in custom_call_reason(["lapack_dpotrf_ffi"])
    assert "cu_threefry" in custom_call_reason(["cu_threefry2x32"])


# --------------------------------------------------------------------------------------------
# The build, verify and the command line


@pytest.fixture(scope="module")
def portable_site(tmp_path_factory) -> tuple[Path, list[str]]:
    lines: list[str] = []
    site = export_into_copy(tmp_path_factory.mktemp("portable-site"), "jxe_portable",
                            on_error="skip", jobs=2, log=lines.append)
    return site, lines


def _index(site: Path) -> dict:
    return json.loads((site / "jxe_portable" / "_jaxexport" / PORTABLE_INDEX).read_text())


def test_build_writes_variants_and_records_what_is_not_portable(portable_site):
    site, lines = portable_site
    index = _index(site)
    assert index["schema_version"] == 1 and index["package"] == "jxe_portable"
    assert [(v["function"].split(":")[-1], v["variant"]) for v in index["variants"]] == [
        ("stack", "stack_batch2_m3_n4"), ("stack", "stack_batch3_m3_n4"),
        ("wave", "wave_mode_cos_n5"), ("wave", "wave_mode_sin_n5")]
    folder = site / "jxe_portable" / "_jaxexport"
    for variant in index["variants"]:
        for kind, entry in variant["files"].items():
            data = (folder / entry["file"]).read_bytes()
            assert len(data) == entry["size"], kind
        interface = json.loads((folder / variant["files"]["interface"]["file"]).read_text())
        assert interface["variant"] == variant["variant"]
        assert interface["files"] == {k: e["file"] for k, e in variant["files"].items()}
    (refused,) = index["unsupported"]
    assert refused["function"] == "jxe_portable:lsolve" and refused["requested"] is True
    assert "LAPACK" in refused["reason"]
    not_requested = {e["function"]: e["reason"] for e in index["not_requested"]}
    assert not_requested["jxe_portable:double"] is None
    assert "lapack_spotrf" in not_requested["jxe_portable:cholesky"]
    assert any(line.startswith("warning: skipped portable variant jxe_portable:lsolve")
               for line in lines), lines
    assert any(line.startswith("warning: portable: jxe_portable:cholesky cannot be made "
                               "portable: uses LAPACK") for line in lines), lines
    assert any("portable: 4 variant(s) of 2 function(s)" in line for line in lines), lines
    # the main manifest is untouched by all this
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["skipped"] == [] and len(manifest["artifacts"]) == 6


def test_a_refused_variant_fails_the_build_with_on_error_fail(tmp_path):
    with pytest.raises(ExportError) as info:
        export_into_copy(tmp_path, "jxe_portable")
    message = str(info.value)
    assert "portable variant jxe_portable:lsolve (variant lsolve_n3, sizes {'n': 3}): uses " \
           "LAPACK custom calls" in message
    assert "remove the function's concrete= option, or set on-error = \"skip\"" in message
    assert not (tmp_path / "jxe_portable" / "_jaxexport").exists()


def test_packages_without_concrete_get_no_portable_index(demo_site):
    assert (demo_site / "jxe_demo" / "_jaxexport" / "manifest.json").is_file()
    assert not (demo_site / "jxe_demo" / "_jaxexport" / PORTABLE_INDEX).exists()


def _cli(site: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return run([sys.executable, "-m", "hatch_jaxexport", *args],
               env={"PYTHONPATH": os.pathsep.join([str(site), str(ROOT)])}, check=check)


def test_verify_accounts_for_portable_files(portable_site, tmp_path):
    site, _ = portable_site
    assert re.search(r"OK, \d+ function\(s\), 6 artifact\(s\)",
                     _cli(site, "verify", "jxe_portable").stdout)
    copy = tmp_path / "site"
    shutil.copytree(site, copy)
    folder = copy / "jxe_portable" / "_jaxexport"
    mlir = next(folder.glob("wave_mode_sin*.mlir"))
    mlir.write_text(mlir.read_text().replace("stablehlo.sine", "stablehlo.sinx"))
    (folder / "stray.mlir").write_text("")
    proc = _cli(copy, "verify", "jxe_portable", check=False)
    assert proc.returncode == 1
    assert f"portable jxe_portable:wave/wave_mode_sin_n5 text: _jaxexport/{mlir.name} " \
           "does not match its SHA-256" in proc.stdout
    assert "_jaxexport/stray.mlir: file not listed in the manifest" in proc.stdout


def test_portable_command_lists_and_writes_a_bundle(portable_site, tmp_path):
    site, _ = portable_site
    out = _cli(site, "portable", "jxe_portable").stdout
    assert "jxe_portable: 4 portable variant(s)" in out
    assert "stack_batch2_m3_n4" in out and "layers[0]['b']: float32[3]" in out
    assert "refused: jxe_portable:lsolve (variant lsolve_n3" in out
    assert "not portable: jxe_portable:cholesky: uses LAPACK" in out
    assert "no concrete= sizes (not baked): jxe_portable:double" in out
    assert json.loads(_cli(site, "portable", "jxe_portable", "--json").stdout)["variants"]

    bundle = tmp_path / "bundle"
    _cli(site, "portable", "jxe_portable", "--function", "wave", "--variant", "wave_mode_cos_n5",
         "--out", str(bundle))
    names = sorted(p.name for p in bundle.iterdir())
    assert names[0] == "README.md" and len(names) == 4
    (interface,) = bundle.glob(f"*{INTERFACE_SUFFIX}")
    assert json.loads(interface.read_text())["static"] == {"mode": "cos"}
    readme = (bundle / "README.md").read_text()
    assert "iree-compile \\\n    --iree-input-type=stablehlo \\\n    " \
           "--iree-hal-target-backends=llvm-cpu" in readme
    assert "--input=5xf32=1 \\\n    --input=f32=1" in readme
    assert "examples/iree_host/" in readme

    proc = _cli(site, "portable", "jxe_portable", "--function", "lsolve", "--out",
                str(tmp_path / "x"), check=False)
    assert proc.returncode == 1 and "'lsolve' has no portable variant (jxe_portable:lsolve: " \
                                      "uses LAPACK" in proc.stderr
    proc = _cli(site, "portable", "jxe_demo_missing", check=False)
    assert proc.returncode == 1 and "cannot find package 'jxe_demo_missing'" in proc.stderr


def test_portable_index_is_validated():
    good = {"schema_version": 1, "package": "p", "generator": "g", "jax_version": "0",
            "platform": "cpu", "variants": [], "unsupported": [], "not_requested": []}
    assert parse_index(json.dumps(good).encode())["package"] == "p"
    with pytest.raises(ArtifactError, match="newer than this hatch-jaxexport reads"):
        parse_index(json.dumps({**good, "schema_version": 2}).encode())
    entry = {"file": "../escape.mlir", "size": 1, "sha256": "0" * 64}
    bad = {**good, "variants": [{"function": "f", "variant": "v", "files": {
        "text": entry, "bytecode": entry, "interface": entry}}]}
    with pytest.raises(ArtifactError, match="unsafe artifact file"):
        parse_index(json.dumps(bad).encode())
    with pytest.raises(ArtifactError, match="not valid JSON"):
        parse_index(b"{")


# --------------------------------------------------------------------------------------------
# End to end: the wheel, a virtual environment without jax, IREE


RUNNER = textwrap.dedent("""
    import importlib.resources, importlib.util, json, subprocess, sys, time
    import numpy as np
    import iree.compiler as ireec
    import iree.runtime as ireert

    assert importlib.util.find_spec("jax") is None, "jax is installed"
    # find the package without importing it (its __init__ imports jax)
    spec = importlib.util.find_spec("example_pkg")
    folder = importlib.resources.files(importlib.util.module_from_spec(spec)) / "_jaxexport"
    index = json.loads((folder / "portable.json").read_text())
    data = np.load(sys.argv[1])
    report = {"unsupported": index["unsupported"], "not_requested": index["not_requested"],
              "runs": []}

    def leaf(tree, path):
        for part in path:
            tree = tree[part]
        return tree

    params = [{"w": data[f"w{i}"], "b": data[f"b{i}"]} for i in range(3)]
    arguments = {"mlp_apply": {"params": params, "x": data["x"]},
                 "deep_stack": {"x": data["xd"]}}
    for variant in index["variants"]:
        iface = json.loads((folder / variant["files"]["interface"]["file"]).read_text())
        short = iface["function"].split(":")[-1]
        kinds = ["text", "bytecode"] if short == "mlp_apply" else ["text"]
        for kind in kinds:
            source = (folder / variant["files"][kind]["file"]).read_bytes()
            started = time.perf_counter()
            vmfb = ireec.compile_str(source, target_backends=["llvm-cpu"],
                                     extra_args=iface["iree"]["compile_flags"]
                                     + ["--iree-llvmcpu-target-cpu=host"])
            compile_s = time.perf_counter() - started
            context = ireert.SystemContext(config=ireert.Config("local-task"))
            context.add_vm_module(ireert.VmModule.copy_buffer(context.instance, vmfb))
            module, function = iface["iree"]["function"].split(".")
            inputs = [np.asarray(leaf(arguments[short], i["path"]), dtype=i["dtype"])
                      for i in iface["inputs"]]
            assert [list(a.shape) for a in inputs] == [i["shape"] for i in iface["inputs"]]
            result = context.modules[module][function](*inputs)
            result = np.asarray(result.to_host() if hasattr(result, "to_host") else result)
            expected = data["y" if short == "mlp_apply" else "yd"]
            report["runs"].append({"function": short, "kind": kind, "compile_s": compile_s,
                                   "shape": list(result.shape),
                                   "max_abs_diff": float(np.max(np.abs(result - expected)))})
    print(json.dumps(report))
""")


@pytest.fixture(scope="module")
def example_wheel(tmp_path_factory) -> Path:
    """example_pkg's wheel, built with the Hatch hook (in process; exports in workers)."""
    from _buildkit import EXAMPLE, copy_project, inprocess_build

    base = tmp_path_factory.mktemp("example-wheel")
    source = copy_project(EXAMPLE, base / "example_pkg")
    (wheel,) = inprocess_build(source, base / "dist")
    return wheel


@pytest.fixture(scope="module")
def runtime_venv(tmp_path_factory, example_wheel) -> Path:
    """A virtual environment with IREE's compiler and runtime, numpy and example_pkg's wheel
    (installed without its dependencies): no jax, no hatch-jaxexport."""
    python = make_venv(tmp_path_factory.mktemp("iree") / "venv", *IREE_PACKAGES)
    run([python, "-m", "pip", "install", "-q", "--no-deps", example_wheel])
    return python


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """Inputs and JAX's results for mlp_apply (batch 4) and deep_stack (batch 8), computed in a
    fresh process (jax.jit of the source)."""
    path = tmp_path_factory.mktemp("reference") / "reference.npz"
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {str(ROOT / "example_pkg" / "src")!r})
        import jax, numpy as np
        from example_pkg import deep, nn
        rng = np.random.default_rng(7)
        params = nn.init_mlp(3)
        for layer in params:
            layer["b"] = rng.standard_normal(layer["b"].shape).astype(np.float32)
        x = rng.standard_normal((4, 8)).astype(np.float32)
        xd = rng.standard_normal((8, 16)).astype(np.float32)
        np.savez({str(path)!r}, x=x, xd=xd,
                 y=np.asarray(jax.jit(nn.mlp_apply.__wrapped__)(params, x)),
                 yd=np.asarray(jax.jit(deep.deep_stack.__wrapped__)(xd)),
                 **{{f"{{k}}{{i}}": layer[k] for i, layer in enumerate(params) for k in "wb"}})
    """)
    run([sys.executable, "-c", code], env={"JAX_PLATFORMS": "cpu"})
    return path


@pytest.mark.slow
def test_wheel_runs_through_iree_without_jax(tmp_path, example_wheel, runtime_venv, reference):
    with zipfile.ZipFile(example_wheel) as archive:
        names = [n for n in archive.namelist() if n.startswith("example_pkg/_jaxexport/")]
        manifest = json.loads(archive.read("example_pkg/_jaxexport/manifest.json"))
        index = json.loads(archive.read("example_pkg/_jaxexport/portable.json"))
    assert [v["variant"] for v in index["variants"]] == ["deep_stack_batch8", "mlp_apply_batch4"]
    # manifest.json, the blobs and their forms (concrete-size and text: one file may serve
    # several records, the same module's bytes); portable.json and 3 files a variant
    sized = len({form["file"] for a in manifest["artifacts"] for form in a.get("sized", [])})
    assert len(names) == 1 + len(manifest["artifacts"]) + sized + 1 + 3 * 2
    script = tmp_path / "runner.py"
    script.write_text(RUNNER)
    proc = run([runtime_venv, script, reference], cwd=tmp_path, env={"PYTHONPATH": ""})
    report = json.loads(proc.stdout.strip().splitlines()[-1])
    runs = {(r["function"], r["kind"]): r for r in report["runs"]}
    assert sorted(runs) == [("deep_stack", "text"), ("mlp_apply", "bytecode"),
                            ("mlp_apply", "text")], report
    assert runs[("mlp_apply", "text")]["shape"] == [4, 4]
    assert runs[("deep_stack", "text")]["shape"] == [8, 16]
    for item in runs.values():
        assert item["max_abs_diff"] < 1e-4, item
    print("IREE runs:", json.dumps(report["runs"]))
    # the LAPACK solve is reported as not portable, with the reason
    reasons = {e["function"]: e["reason"] for e in report["not_requested"]}
    assert "LAPACK" in reasons["example_pkg.solve"]
    assert report["unsupported"] == []


@pytest.mark.slow
def test_bundle_compiles_and_runs_with_the_iree_command_line_tools(
        tmp_path, example_wheel, runtime_venv, reference):
    site = tmp_path / "site"
    with zipfile.ZipFile(example_wheel) as archive:
        archive.extractall(site)
    bundle = tmp_path / "bundle"
    _cli(site, "portable", "example_pkg", "--function", "mlp_apply", "--out", str(bundle))
    (interface_path,) = bundle.glob(f"*{INTERFACE_SUFFIX}")
    interface = json.loads(interface_path.read_text())
    source = bundle / interface["files"]["text"]
    readme = (bundle / "README.md").read_text()
    assert f"{source.name} -o " in readme
    # the README's compile command, with the tools of the venv
    tools = runtime_venv.parent
    vmfb = tmp_path / "mlp.vmfb"
    run([tools / "iree-compile", *interface["iree"]["compile_flags"],
         "--iree-hal-target-backends=llvm-cpu", "--iree-llvmcpu-target-cpu=host", source,
         "-o", vmfb])
    data = np.load(reference)
    arrays = {"params": [{"w": data[f"w{i}"], "b": data[f"b{i}"]} for i in range(3)],
              "x": data["x"]}
    inputs = []
    for item in interface["inputs"]:
        value = arrays
        for part in item["path"]:
            value = value[part]
        path = tmp_path / f"in{item['index']}.npy"
        np.save(path, value)
        inputs.append(f"--input=@{path}")
    run([tools / "iree-run-module", "--device=local-task", f"--module={vmfb}",
         f"--function={interface['module']['entry']}", *inputs,
         f"--output=@{tmp_path / 'out.npy'}"])
    result = np.load(tmp_path / "out.npy")
    assert result.shape == (4, 4)
    assert float(np.max(np.abs(result - data["y"]))) < 1e-4
