"""``benchmarks/peer_suites.py``'s arithmetic, without building anything: calls that pass a
callable are counted apart from the served share, strict refusals of calls no recorded artifact
covers count as refusals with the fix, and test files an sdist cannot import are left out."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import ROOT


@pytest.fixture(scope="module")
def peer_suites() -> Any:
    spec = importlib.util.spec_from_file_location("peer_suites",
                                                  ROOT / "benchmarks" / "peer_suites.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["peer_suites"] = module  # dataclasses resolve their module by name
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules["peer_suites"]
    return module


def row(function: str, tier: str, reason: str | None = None) -> dict[str, Any]:
    return {"function": function, "signature": "-", "tier": tier, "seconds": None,
            "not_shipped": reason, "label": ""}


def test_calls_that_pass_a_callable_are_counted_apart(peer_suites):
    baked = peer_suites.SuiteRun(outcomes={"t": "passed"}, served=[
        row("q:trapezoid", "compiled"), row("q:simpson", "compiled"),
        row("q:simpson", "traced", "no artifact was baked for this call's signature"),
        row("q:quadgk", "traced", "no artifact was baked for this call's signature"),
        row("q:romberg", "traced", "an argument is a callable")])
    plain = peer_suites.SuiteRun(outcomes={"t": "passed"})
    figures = peer_suites.compare(plain, baked, ("q:quadgk",))
    assert (figures["served"], figures["traced"], figures["served_share"]) == (2, 1, 0.667)
    assert figures["callable_calls"] == 2
    assert figures["callable_tiers"] == {"traced": 2}
    assert all("quadgk" not in r and "romberg" not in r for r in figures["traced_reasons"])


def test_a_strict_refusal_of_an_unrecorded_call_counts_as_refused(peer_suites):
    baked = peer_suites.SuiteRun(outcomes={"t": "passed"}, served=[
        row("q:simpson", "traced", "no artifact was baked for this call's signature")])
    head = "hatch_jaxexport.errors.ArtifactError: {}: no usable baked artifact " \
           "(HATCH_JAXEXPORT_STRICT is set): "
    messages = {  # a call no run recorded (here: one the source refuses), one whose export failed
        "a": head.format("q:simpson") + "no artifact was baked for this call's signature "
                                        "(record it with HATCH_JAXEXPORT_RECORD=1 and rebuild)",
        "b": head.format("q:simpson") + "this call was recorded, but its export failed at build "
                                        "time: NotImplementedError: ...; fix the cause and rebuild",
        "c": "ValueError: x must be increasing"}
    strict = peer_suites.SuiteRun(outcomes=dict.fromkeys(messages, "failed"), messages=messages,
                                  reports=messages)
    baked.outcomes = dict.fromkeys(messages, "passed")
    figures = peer_suites.compare_strict(baked, strict)
    assert figures["strict_refused"] == {"q:simpson (no recorded call)": 1,
                                         "q:simpson (export failed at build)": 1}
    assert figures["strict_other_count"] == 1


def test_files_the_sdist_cannot_import_are_left_out(peer_suites):
    lib = peer_suites.LIBRARIES["quadax"]
    copied = [str(Path("tests") / n) for n in ("test_adaptive.py", "test_sampled.py",
                                               "test_adaptive_cube.py", "test_utils.py")]
    assert peer_suites.select(lib, copied, fast=False, tensorflow=False) == [
        "tests/test_sampled.py", "tests/test_utils.py"]
    assert all(f.split("::")[0].endswith(".py") for f in lib.fast)
    assert {f"quadax._adaptive:{n}" for n in ("quadgk", "quadcc", "quadts")} <= set(lib.callables)


def staged(function: str, transformation: str, tier: str, count: int,
           reason: str | None = None) -> dict[str, Any]:
    return {"function": function, "transformation": transformation, "tier": tier,
            "count": count, "reason": reason}


def test_staged_calls_are_counted_beside_first_eager_calls(peer_suites, capsys):
    """The report plugin writes first eager calls and staged calls; the summary counts the
    staged ones by their counts, per transformation and function, callables apart."""
    served, rows = peer_suites.read_report({"served": [row("q:simpson", "compiled")], "staged": [
        staged("q:simpson", "jit", "served", 40), staged("q:simpson", "vmap", "served", 3),
        staged("q:trapezoid", "jit(vmap)", "traced", 5, "no artifact was baked for this "
                                                        "call's signature"),
        staged("q:quadgk", "jit", "traced", 7, "no artifact was baked for this call's "
                                               "signature")]})
    assert peer_suites.read_report([row("q:simpson", "compiled")]) == (served, [])  # older
    baked = peer_suites.SuiteRun(outcomes={"t": "passed"}, served=served, staged=rows)
    figures = peer_suites.compare(peer_suites.SuiteRun(outcomes={"t": "passed"}), baked,
                                  ("q:quadgk",))
    assert (figures["served"], figures["traced"]) == (1, 0)
    assert figures["staged"] == {
        "served": 43, "traced": 5, "served_share": 0.896, "callable_calls": 7,
        "by_transformation": {"jit": {"served": 40}, "jit(vmap)": {"traced": 5},
                              "vmap": {"served": 3}},
        "by_function": {"q:simpson": {"jit served": 40, "vmap served": 3},
                        "q:trapezoid": {"jit(vmap) traced": 5}},
        "traced_reasons": ["q:trapezoid under jit(vmap): no artifact was baked for this "
                           "call's signature"]}
    peer_suites.print_staged(figures["staged"])
    printed = capsys.readouterr().out
    assert "43 served from artifacts, 5 traced (90% served)" in printed
    assert "staged calls that pass a callable (traced by design, not counted above): 7" in printed


#: The wrapping backend's output through ``python -m build`` (dm-pix kept on flit), as printed.
WRAPPED_BUILD = """\
* Building wheel...
jaxexport: exporting dm_pix for cpu (1 worker(s), on-error skip)
  dm_pix._src.metrics:ssim: 0 structure(s), platforms -, 0 artifact(s), 0 B, 0.00 s, 12 skipped
jaxexport: warning: skipped 12 exports failed with TypeError at dm_pix/_src/metrics.py:241 (4 \
structures of dm_pix._src.metrics:ssim); for example:
jaxexport: dm_pix: exported 66 artifact(s), 389,736 bytes; skipped 12 into /tmp/x/dm_pix/_jaxexport
jaxexport: dm_pix: 18 function(s), 66 artifact(s), 389.7 kB, 9.4 s (jax 0.10.2); adds 1.1 MB to \
the wheel (129 file(s), uncompressed), 12 skipped
Successfully built dm_pix-0.4.5-py3-none-any.whl
"""


def test_the_wrapping_backends_build_lines_are_read_as_the_hooks(peer_suites):
    lines = peer_suites.bake_lines(WRAPPED_BUILD)
    assert [line.split(":")[1].strip() for line in lines] == ["warning", "dm_pix"]
    assert "18 function(s)" in lines[1]
    assert peer_suites.bake_lines("  " + WRAPPED_BUILD.replace("\n", "\n  ")) == lines


def test_the_flit_entry_keeps_dm_pix_and_only_its_patch_differs(peer_suites):
    hatch, flit = peer_suites.LIBRARIES["dm-pix"], peer_suites.LIBRARIES["dm-pix-flit"]
    assert flit.patch_path.name == "dm-pix-0.4.5-flit.patch" and flit.patch_path.is_file()
    assert hatch.patch_path.name == "dm-pix-0.4.5.patch" and not hatch.twice and flit.twice
    assert {k: v for k, v in vars(flit).items() if k not in ("patch", "twice")} == \
        {k: v for k, v in vars(hatch).items() if k not in ("patch", "twice")}
    assert "dm-pix-flit" not in peer_suites.DEFAULT


def test_the_flit_patch_changes_only_the_build_system_and_adds_the_table():
    """Its source hunks are the hatchling patch's; in pyproject.toml flit's own configuration
    stays, but for hatch-jaxexport in the dependencies (the decorated modules import it)."""
    hatch = (ROOT / "peers" / "dm-pix-0.4.5.patch").read_text()
    flit = (ROOT / "peers" / "dm-pix-0.4.5-flit.patch").read_text()
    head = "diff -ruN a/pyproject.toml"
    assert flit.split(head)[0] == hatch.split(head)[0]
    added = [line[1:] for line in flit.split(head)[1].splitlines()
             if line.startswith("+") and not line.startswith("+++")]
    removed = [line[1:] for line in flit.split(head)[1].splitlines()
               if line.startswith("-") and not line.startswith("---")]
    assert removed == ['requires = ["flit_core >=3.2,<4"]', 'build-backend = "flit_core.buildapi"']
    assert 'build-backend = "hatch_jaxexport.integrations.pep517"' in added
    assert '    "hatch-jaxexport",' in added
    assert "[tool.jaxexport]" in added and 'backend = "flit_core.buildapi"' in added
    assert not any("hatch.build" in line or "tool.hatch" in line for line in added)


def test_a_refusal_is_counted_for_the_function_it_names_not_a_prefix_of_it(peer_suites):
    """dm-pix's ``flat_nd_linear_interpolate`` starts ``..._constant``'s name: a refusal of
    the latter counts for the latter, whatever order the set of names is in."""
    short, long = "p:flat_nd_linear_interpolate", "p:flat_nd_linear_interpolate_constant"
    reason = "no exported structure accepts this call"
    baked = peer_suites.SuiteRun(outcomes={"t": "passed"}, served=[
        row(short, "traced", reason), row(long, "traced", reason)])
    message = f"hatch_jaxexport.errors.ShapeMismatch: {long}: {reason}"
    strict = peer_suites.SuiteRun(outcomes={"t": "failed"}, messages={"t": message},
                                  reports={"t": message + " (record it to serve it)"})
    figures = peer_suites.compare_strict(baked, strict)
    assert figures["strict_refused"] == {long: 1}, figures
    assert peer_suites.named_in(message, {short, long}) == [long, short]


@pytest.fixture()
def peer_device(peer_suites, monkeypatch) -> Any:
    """``benchmarks/peer_device.py``, importing this module's ``peer_suites``."""
    monkeypatch.syspath_prepend(str(ROOT / "benchmarks"))
    monkeypatch.setitem(sys.modules, "peer_suites", peer_suites)
    spec = importlib.util.spec_from_file_location("peer_device",
                                                  ROOT / "benchmarks" / "peer_device.py")
    assert spec is not None and spec.loader is not None
    peer_device = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(peer_device)
    return peer_device


def test_a_device_bundle_carries_both_sides_needs_and_the_pins_of_the_devices_own(
        peer_suites, peer_device):
    """``peer_device.py bundle`` carries what either environment holds that the device lacks,
    never jax or the library itself, and a package the device has where the library's test
    requirements pin it (jax-cosmo's plain sdist needs ``setuptools<81``): the docs' command
    runs again without a wheel added by hand."""
    lib = peer_suites.LIBRARIES["jax-cosmo"]
    baked = {"jax": "0.10.2", "jax-cosmo": "0.1.0", "hatch-jaxexport": "0.1.0",
             "pyccl": "3.3.6", "setuptools": "84.0.0", "archspec": "0.2.7"}
    plain = {"jax": "0.10.2", "jax-cosmo": "0.1.0", "pyccl": "3.3.6", "pyyaml": "6.0.4",
             "setuptools": "80.9.0"}
    assert peer_device.to_carry(lib, baked, plain) == {
        "pyccl": "3.3.6", "archspec": "0.2.7", "pyyaml": "6.0.4", "setuptools": "80.9.0"}
    tinygp = peer_suites.LIBRARIES["tinygp"]  # no pinned test requirement: setuptools stays
    assert "setuptools" not in peer_device.to_carry(tinygp, baked, plain)


def test_a_device_bundle_leaves_to_the_devices_index_what_it_installs_with_its_needs(
        peer_suites, peer_device, tmp_path):
    """TensorFlow (dm-pix's reference values) is 600 MB installed and a device call carries
    64 MiB: the bundle carries none of what the device's own index installs with it (its
    dependencies, transitively, as installed here; extras and markers that do not apply left
    out), and still carries what only the library's side needs."""
    site = tmp_path / "site-packages"
    for name, requires in {"tensorflow": ["keras>=3", "absl-py", "tensorflow-io; extra == 'io'",
                                          "tensorflow-intel; sys_platform == 'win32'"],
                           "keras": ["h5py", "absl_py"], "h5py": [], "absl-py": [],
                           "chex": ["absl-py", "toolz"], "toolz": [], "tensorflow-io": []}.items():
        info = site / f"{name.replace('-', '_')}-1.0.dist-info"
        info.mkdir(parents=True)
        info.joinpath("METADATA").write_text(
            f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n"
            + "".join(f"Requires-Dist: {r}\n" for r in requires))
    from_index = peer_device.needed_by({"tensorflow"}, [site])
    assert from_index == {"tensorflow", "keras", "h5py", "absl-py"}
    lib = peer_suites.LIBRARIES["dm-pix"]
    env = {name: "1.0" for name in ("tensorflow", "keras", "h5py", "absl-py", "chex", "toolz")}
    assert peer_device.to_carry(lib, env, env, from_index) == {"chex": "1.0", "toolz": "1.0"}
