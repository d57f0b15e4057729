"""The loader in fresh processes: no tracing, zipped packages, damaged artifacts, x64, imports."""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path

import pytest
from conftest import FIXTURES

CALL_ALL = """
import json, sys, warnings
import jax.numpy as jnp
from jxe_demo import funcs
x = jnp.ones((3, 4))
funcs.scale(x); funcs.reduce(x); funcs.reduce(jnp.ones((2, 3, 4)))
funcs.poly(jnp.ones(3), mode="exact"); funcs.combine(jnp.ones(2), y=jnp.ones(2))
funcs.dense({"w": jnp.ones((4, 2)), "b": jnp.ones(2)}, x); funcs.stats(jnp.ones(3))
funcs.split(jnp.ones(3)); funcs.listy([jnp.ones(2), jnp.ones(2)], 1.0)
print(json.dumps(funcs.TRACES))
"""


def _env(site: Path, **extra: str) -> dict[str, str]:
    return {"PYTHONPATH": str(site), "JAX_PLATFORMS": "cpu", **extra}


def test_installed_artifacts_never_trace_the_source(demo_site, run_python):
    proc = run_python(CALL_ALL, env=_env(demo_site, HATCH_JAXEXPORT_STRICT="1"))
    assert json.loads(proc.stdout.splitlines()[-1]) == {"count": 0}


def test_without_artifacts_the_same_calls_trace(tmp_path, run_python, maintainer_warnings):
    """The counter above can fail: from source, every call traces (with a warning)."""
    shutil.copytree(FIXTURES / "jxe_demo", tmp_path / "jxe_demo")
    proc = run_python(CALL_ALL, env=_env(tmp_path))
    assert json.loads(proc.stdout.splitlines()[-1])["count"] >= 9
    assert "FallbackWarning" in proc.stderr and "has no baked artifacts" in proc.stderr


def test_zipped_package_loads_through_importlib_resources(demo_site, tmp_path, run_python):
    archive = tmp_path / "site.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted((demo_site / "jxe_demo").rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts:
                zf.write(path, path.relative_to(demo_site).as_posix())
    proc = run_python(CALL_ALL + "print(funcs.__file__)",
                      env=_env(archive, HATCH_JAXEXPORT_STRICT="1"))
    assert "site.zip" in proc.stdout
    assert json.loads(proc.stdout.splitlines()[-2]) == {"count": 0}


@pytest.fixture
def damaged_site(demo_site, tmp_path):
    site = tmp_path / "site"
    shutil.copytree(demo_site, site, ignore=shutil.ignore_patterns("__pycache__"))
    manifest = json.loads((site / "jxe_demo" / "_jaxexport" / "manifest.json").read_text())
    record = next(r for r in manifest["artifacts"] if r["function"] == "jxe_demo.funcs:scale")
    return site, manifest, site / "jxe_demo" / "_jaxexport" / record["file"]


CALL_SCALE = """
import warnings
import jax.numpy as jnp
from hatch_jaxexport import ArtifactError
from jxe_demo import funcs
try:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = funcs.scale(jnp.ones((2, 2)))
    print("RESULT", float(out[0, 0]), funcs.TRACES["count"])
    for w in caught:
        print("WARNING", w.category.__name__, w.message)
except ArtifactError as err:
    print("ARTIFACTERROR", err)
"""


def test_blob_with_wrong_hash_falls_back_or_raises_in_strict_mode(damaged_site, run_python,
                                                                  maintainer_warnings):
    site, _, blob = damaged_site
    data = bytearray(blob.read_bytes())
    data[len(data) // 2] ^= 0x40
    blob.write_bytes(bytes(data))
    proc = run_python(CALL_SCALE, env=_env(site))
    assert "RESULT 1.68294" in proc.stdout and " 1\n" in proc.stdout  # traced once
    assert "WARNING FallbackWarning" in proc.stdout
    assert "does not match the manifest's SHA-256" in proc.stdout
    strict = run_python(CALL_SCALE, env=_env(site, HATCH_JAXEXPORT_STRICT="1"))
    assert "ARTIFACTERROR jxe_demo.funcs:scale: no usable baked artifact" in strict.stdout
    assert "SHA-256" in strict.stdout


def test_truncated_blob_with_matching_hash_is_refused_by_jax_cleanly(damaged_site, run_python):
    site, manifest, blob = damaged_site
    data = blob.read_bytes()[:200]
    blob.write_bytes(data)
    import hashlib

    for record in manifest["artifacts"]:
        if record["file"] == blob.name:
            record.update(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
    (site / "jxe_demo" / "_jaxexport" / "manifest.json").write_text(json.dumps(manifest))
    proc = run_python(CALL_SCALE, env=_env(site, HATCH_JAXEXPORT_STRICT="1"))
    assert proc.returncode == 0
    assert "ARTIFACTERROR" in proc.stdout and "jax could not deserialize" in proc.stdout


def test_a_corrupt_record_of_another_function_leaves_this_one_running(damaged_site,
                                                                      run_python):
    site, manifest, _ = damaged_site
    other = next(r for r in manifest["artifacts"] if r["function"] == "jxe_demo.funcs:poly")
    other["file"] = "../../outside.jaxexport"  # refused, but only where poly is called
    (site / "jxe_demo" / "_jaxexport" / "manifest.json").write_text(json.dumps(manifest))
    proc = run_python(CALL_SCALE, env=_env(site, HATCH_JAXEXPORT_STRICT="1"))
    assert "RESULT 1.68294" in proc.stdout and proc.stdout.split()[2] == "0", \
        proc.stdout + proc.stderr  # from the artifact: traced 0 times
    poly = run_python("from jxe_demo import funcs\nimport jax.numpy as jnp\n"
                      "from hatch_jaxexport import ArtifactError\n"
                      "try:\n    funcs.poly(jnp.ones(3))\n"
                      "except ArtifactError as err:\n    print('ARTIFACTERROR', err)\n",
                      env=_env(site, HATCH_JAXEXPORT_STRICT="1"))
    assert "ARTIFACTERROR" in poly.stdout and "unsafe artifact file" in poly.stdout, \
        poly.stdout + poly.stderr
    inspect = run_python("import sys\nfrom hatch_jaxexport.integrations.cli import main\n"
                         "sys.exit(main(['inspect', 'jxe_demo']))\n", env=_env(site),
                         check=False)
    assert inspect.returncode != 0 and "unsafe artifact file" in inspect.stdout + inspect.stderr


def test_corrupt_manifest_runs_the_source_and_says_so_once(damaged_site, run_python):
    site, _, _ = damaged_site
    (site / "jxe_demo" / "_jaxexport" / "manifest.json").write_bytes(b'{"schema_version": 1,')
    proc = run_python(CALL_SCALE, env=_env(site))
    assert proc.returncode == 0
    assert "RESULT" in proc.stdout and "ARTIFACTERROR" not in proc.stdout  # the source's result
    (line,) = [line for line in proc.stderr.splitlines() if "jxe_demo" in line]
    assert "corrupt manifest jxe_demo/_jaxexport/manifest.json: not valid JSON" in line
    strict = run_python(CALL_SCALE, env=_env(site, HATCH_JAXEXPORT_STRICT="1"))
    assert "ARTIFACTERROR jxe_demo.funcs:scale: " in strict.stdout
    assert "corrupt manifest jxe_demo/_jaxexport/manifest.json: not valid JSON" in strict.stdout


def test_symlinked_blob_outside_the_package_is_refused(damaged_site, tmp_path, run_python):
    site, _, blob = damaged_site
    outside = tmp_path / "outside.bin"
    outside.write_bytes(blob.read_bytes())
    blob.unlink()
    blob.symlink_to(outside)
    proc = run_python(CALL_SCALE, env=_env(site, HATCH_JAXEXPORT_STRICT="1"))
    assert "ARTIFACTERROR" in proc.stdout and "resolves outside" in proc.stdout


X64 = """
import jax, numpy as np
from jxe_demo import funcs
x = np.linspace(0, 1, 5)
out = funcs.precise(x)
ref = jax.jit(funcs.precise.__wrapped__)(x)
print(out.dtype, float(abs(out - ref).max()), funcs.TRACES["count"])
"""


def test_float64_artifact_runs_with_x64_on(demo_site, run_python):
    proc = run_python(X64, env=_env(demo_site, JAX_ENABLE_X64="1", HATCH_JAXEXPORT_STRICT="1"))
    dtype, diff, traces = proc.stdout.split()
    assert dtype == "float64" and float(diff) == 0.0 and traces == "1"  # 1: the reference jit


def test_float64_artifact_with_x64_off_says_so(demo_site, run_python):
    """Strict mode refuses it (by default the call runs the source, in float32)."""
    proc = run_python(X64, env=_env(demo_site, HATCH_JAXEXPORT_STRICT="1"), check=False)
    assert proc.returncode == 1
    assert "hatch_jaxexport.errors.DtypeMismatch: jxe_demo.funcs:precise: no exported structure " \
        "accepts this call: structure 0: argument 'x' expects float64[n], a 64-bit dtype, got " \
        "float64, but jax_enable_x64 is off; turn it on before the call (jax.config.update(" \
        "'jax_enable_x64', True), or JAX_ENABLE_X64=1 in the environment)" in proc.stderr


def test_importing_the_runtime_stays_light(run_python):
    proc = run_python(
        "import sys, hatch_jaxexport, hatch_jaxexport.runtime.call.loader\n"
        "heavy = {'hatchling', 'setuptools', 'pytest', 'jax'} & {m.split('.')[0] for m in "
        "sys.modules}\nprint(sorted(heavy))")
    assert proc.stdout.strip() == "[]"


def test_exporting_leaves_the_callers_process_untouched(tmp_path, run_python):
    fixture = FIXTURES / "jxe_demo"
    shutil.copytree(fixture, tmp_path / "jxe_demo")
    proc = run_python(
        "import sys, jax\n"
        "from hatch_jaxexport.bake import export_package\n"
        f"r = export_package('jxe_demo', {str(tmp_path / 'out')!r},"
        f" search_path=[{str(tmp_path)!r}])\n"
        "print(len(r.manifest.artifacts), jax.config.jax_traceback_in_locations_limit,"
        " any(m.startswith('jxe_demo') for m in sys.modules))")
    count, limit, imported = proc.stdout.split()
    assert int(count) >= 10 and limit != "0" and imported == "False"
