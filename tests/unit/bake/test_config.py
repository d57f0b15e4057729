"""Option validation shared by the Hatch hook and setuptools, and the setuptools wiring."""

from __future__ import annotations

import os
import re

import pytest

from hatch_jaxexport.bake.config import (
    HATCHLING_HOOK_KEYS,
    ConfigError,
    ExportOptions,
    merge_requirement,
    parse_options,
    requirement_conflicts,
)
from hatch_jaxexport.bake.flow import describe_result

HATCH = "tool.hatch.build.targets.wheel.hooks.jaxexport"


def errors_of(raw: dict, prefix: str = HATCH, **kwargs) -> list[str]:
    with pytest.raises(ConfigError) as info:
        parse_options(raw, prefix, **kwargs)
    return info.value.errors


def test_defaults():
    options = parse_options({}, HATCH)
    assert options == ExportOptions()
    assert options.packages is None and options.platforms == ("cpu",)
    assert options.jobs == 1 and options.on_error == "fail" and options.editable == "in-place"
    assert options.requirement_for("0.10.2") is None  # the project's own jax range stays
    assert parse_options({"jax-requirement": True}, HATCH).requirement_for("0.10.2") == \
        "jax>=0.10.2"


def test_every_option():
    options = parse_options({
        "packages": ["alpha", "beta"], "platforms": ["cuda", "cpu", "cuda"], "jobs": 3,
        "on-error": "skip", "jax-requirement": "jax[cpu]>={version},<1", "editable": "trace",
    }, HATCH)
    assert options == ExportOptions(("alpha", "beta"), ("cuda", "cpu"), 3, "skip",
                                    "jax[cpu]>={version},<1", "trace")
    assert options.requirement_for("0.9.1") == "jax[cpu]>=0.9.1,<1"


def test_shorthands():
    assert parse_options({"platforms": "tpu"}, HATCH).platforms == ("tpu",)
    assert parse_options({"jobs": "auto"}, HATCH).jobs == max(1, os.cpu_count() or 1)
    assert parse_options({"jax-requirement": False}, HATCH).requirement_for("1.0") is None
    assert parse_options({}, HATCH).requirement_for("1.0") is None  # the project's range stays
    assert parse_options({"jax-requirement": True}, HATCH).jax_requirement == "jax>={version}"


def test_all_errors_reported_together_with_full_paths():
    raw = {"packages": ["ok", "not-a-name", 3], "platforms": [], "jobs": "x",
           "on-error": "warn", "jax-requirement": "jax>=>{version}", "editable": True,
           "platfroms": ["cpu"], "colour": "blue"}
    assert errors_of(raw) == [
        f"{HATCH}.colour is not an option of hatch-jaxexport; known options: packages, "
        "platforms, jobs, on-error, jax-requirement, editable, executables, executable-jaxlibs, "
        "executables-from, jax-releases, tpu-targets, companion-wheels",
        f"{HATCH}.platfroms is not an option of hatch-jaxexport (did you mean `platforms`?); "
        "known options: packages, platforms, jobs, on-error, jax-requirement, editable, "
        "executables, executable-jaxlibs, executables-from, jax-releases, tpu-targets, "
        "companion-wheels",
        f"{HATCH}.packages[1] must be the import name of a top-level package (like "
        "\"my_pkg\"), got 'not-a-name'",
        f"{HATCH}.packages[2] must be the import name of a top-level package (like "
        "\"my_pkg\"), got 3",
        f"{HATCH}.platforms must be a non-empty array of 'cpu', 'cuda', 'rocm', 'tpu', got []",
        f"{HATCH}.jobs must be an int >= 1 or \"auto\", got 'x'",
        f"{HATCH}.on-error must be 'fail' or 'skip', got 'warn'",
        errors_of(raw)[7],  # the requirement parser's wording varies with packaging's version
        f"{HATCH}.editable must be 'in-place' or 'trace', got True",
    ]
    assert errors_of(raw)[7].startswith(
        f"{HATCH}.jax-requirement must be true, false or a requirement like \"jax>={{version}}\""
        ", got 'jax>=>{version}': ")


@pytest.mark.parametrize("raw, message", [
    ({"jobs": 0}, "jobs must be an int >= 1 or \"auto\", got 0"),
    ({"jobs": True}, "jobs must be an int >= 1 or \"auto\", got True"),
    ({"jobs": 1.5}, "jobs must be an int >= 1 or \"auto\", got 1.5"),
    ({"packages": []}, "packages must be a non-empty array of top-level package names, got []"),
    ({"packages": "pkg"}, "packages must be a non-empty array of top-level package names, "
                          "got 'pkg'"),
    ({"packages": ["a", "a"]}, "packages must be an array without duplicates, got ['a', 'a']"),
    ({"packages": ["a.b"]}, "packages[0] must be the import name of a top-level package "
                            "(like \"my_pkg\"), got 'a.b'"),
    ({"platforms": ["gpu"]}, "platforms[0] must be one of 'cpu', 'cuda', 'rocm', 'tpu', "
                             "got 'gpu'"),
    ({"platforms": {"cpu": 1}}, "platforms must be a non-empty array of 'cpu', 'cuda', 'rocm', "
                                "'tpu', got {'cpu': 1}"),
    ({"jax-requirement": 1}, "jax-requirement must be true, false or a requirement like "
                             "\"jax>={version}\", got 1"),
    ({"on-error": None}, "on-error must be 'fail' or 'skip', got None"),
])
def test_one_error(raw, message):
    assert errors_of(raw, "tool.jaxexport") == [f"tool.jaxexport.{message}"]


def test_message_of_one_and_of_many_errors():
    with pytest.raises(ConfigError) as one:
        parse_options({"jobs": 0}, "tool.jaxexport")
    assert str(one.value) == ("invalid hatch-jaxexport configuration: tool.jaxexport.jobs must "
                              "be an int >= 1 or \"auto\", got 0")
    with pytest.raises(ConfigError) as two:
        parse_options({"jobs": 0, "on-error": 1}, "tool.jaxexport")
    assert str(two.value).splitlines() == [
        "invalid hatch-jaxexport configuration (2 errors):",
        "  - tool.jaxexport.jobs must be an int >= 1 or \"auto\", got 0",
        "  - tool.jaxexport.on-error must be 'fail' or 'skip', got 1"]
    assert isinstance(two.value, ValueError)


def test_hatchling_keys_pass_through_only_where_asked():
    raw = {"require-runtime-dependencies": True, "dependencies": ["x"],
           "enable-by-default": False, "require-runtime-features": ["a"], "jobs": 2}
    assert parse_options(raw, HATCH, passthrough=HATCHLING_HOOK_KEYS).jobs == 2
    assert len(errors_of(raw, "tool.jaxexport")) == 4  # setuptools has no such keys


def test_describe_result(tmp_path):
    from conftest import FIXTURES

    from hatch_jaxexport.bake import export_package

    messages: list[str] = []
    result = export_package("jxe_demo", tmp_path / "out", search_path=[FIXTURES],
                            on_error="skip", log=messages.append, captured_warn_bytes=128)
    lines, summary = describe_result(result, 2.5)
    lookup = next(i for i, line in enumerate(lines) if line.startswith("  jxe_demo.funcs:lookup"))
    assert lines[lookup + 1:lookup + 3] == [
        "    captures 1 array(s), 128 B, frozen at build time:",
        "      jxe_demo.funcs.TABLE float32[4,8] 128 B"]
    (warning,) = [m for m in messages if "captures" in m]  # 128 B is at the lowered threshold
    assert warning.startswith("warning: jxe_demo.funcs:lookup captures jxe_demo.funcs.TABLE "
                              "float32[4,8] 128 B (warning threshold 128 B): the value is frozen")
    reduce = next(line for line in lines if line.startswith("  jxe_demo.reduce: "))
    assert re.fullmatch(r"  jxe_demo\.reduce: 2 structure\(s\), platforms cpu, 2 artifact\(s\), "
                        r"[0-9.]+ kB, [0-9.]+ s", reduce), reduce
    assert any(line.startswith("  jxe_demo.funcs:gpu_only: 1 structure(s), platforms cuda")
               for line in lines)
    n = len(result.manifest.artifacts)
    functions = [line for line in lines if not line.startswith("    ")]
    assert summary.startswith(f"jxe_demo: {len(functions)} function(s), {n} artifact(s), ")
    assert f", 2.5 s (jax {result.manifest.jax_version}); adds " in summary
    assert re.search(r"to the wheel \(\d+ file\(s\), uncompressed\)$", summary), summary


# -- setuptools: the entry point does nothing without [tool.jaxexport] --------------------------

def _distribution(root):
    from setuptools.dist import Distribution

    return Distribution({"name": "demo", "src_root": str(root)})


def test_setuptools_plugin_ignores_projects_without_the_table(tmp_path):
    from hatch_jaxexport.integrations.setuptools_plugin import (
        finalize_distribution_options,
        read_table,
    )

    assert read_table(tmp_path) is None  # no pyproject.toml
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n[tool.other]\na = 1\n")
    assert read_table(tmp_path) is None
    (tmp_path / "pyproject.toml").write_text("not [valid toml")
    assert read_table(tmp_path) is None  # setuptools reports that itself
    dist = _distribution(tmp_path)
    before = dict(dist.cmdclass)
    finalize_distribution_options(dist)
    assert dist.cmdclass == before


def test_setuptools_plugin_wires_the_command_when_the_table_exists(tmp_path):
    from hatch_jaxexport.integrations.setuptools_plugin import (
        COMMAND,
        finalize_distribution_options,
    )

    (tmp_path / "pyproject.toml").write_text(
        "[tool.jaxexport]\nplatforms = ['cpu', 'tpu']\njax-requirement = true\n")
    dist = _distribution(tmp_path)
    finalize_distribution_options(dist)
    finalize_distribution_options(dist)  # idempotent
    build = dist.get_command_class("build")
    assert [name for name, _ in build.sub_commands].count(COMMAND) == 1
    command = dist.get_command_class(COMMAND)
    assert command.editable_mode is False
    for method in ("get_outputs", "get_output_mapping", "get_source_files", "run"):
        assert callable(getattr(command, method))
    assert dist._jaxexport_options.platforms == ("cpu", "tpu")
    assert dist.get_command_class("egg_info")._jaxexport_wrapped


def test_setuptools_plugin_reports_config_errors(tmp_path):
    from hatch_jaxexport.integrations.setuptools_plugin import finalize_distribution_options

    (tmp_path / "pyproject.toml").write_text("[tool]\njaxexport = 3\n")
    with pytest.raises(ConfigError, match=r"tool\.jaxexport must be a table, got 3"):
        finalize_distribution_options(_distribution(tmp_path))
    (tmp_path / "pyproject.toml").write_text("[tool.jaxexport]\njobs = -1\nplatform = 'cpu'\n")
    with pytest.raises(ConfigError) as info:
        finalize_distribution_options(_distribution(tmp_path))
    assert info.value.errors == [
        "tool.jaxexport.platform is not an option of hatch-jaxexport (did you mean "
        "`platforms`?); known options: packages, platforms, jobs, on-error, jax-requirement, "
        "editable, executables, executable-jaxlibs, executables-from, jax-releases, tpu-targets, "
        "companion-wheels",
        "tool.jaxexport.jobs must be an int >= 1 or \"auto\", got -1"]


# -- the jax requirement, merged into the project's own ------------------------------------------

@pytest.mark.parametrize("own, added, expected", [
    (["jax"], "jax>=0.10.2", ["jax>=0.10.2"]),
    (["jax>=0.5"], "jax>=0.10.2", ["jax>=0.10.2"]),
    (["jax[cpu]>=0.5"], "jax>=0.10.2", ["jax[cpu]>=0.10.2"]),
    (["jax>=0.11"], "jax>=0.10.2", ["jax>=0.11"]),  # the project's is stricter: it stays
    (["jax>=0.10.2"], "jax>0.10.2", ["jax>0.10.2"]),  # same version: > is the stricter
    (["jax<2"], "jax>=0.10.2,<3", ["jax<2,>=0.10.2"]),
    (["JAX!=0.10.1"], "jax>=0.10.2", ["JAX!=0.10.1,>=0.10.2"]),
    (["jax==0.10.*"], "jax>=0.10.2", ["jax==0.10.*,>=0.10.2"]),
    (["numpy>=2", "jax", "hatch-jaxexport"], "jax>=0.10.2",
     ["numpy>=2", "jax>=0.10.2", "hatch-jaxexport"]),
    # A marker on the project's requirement is kept: where it needs jax, it needs this one.
    (['jax>=0.5; sys_platform != "win32"'], "jax>=0.10.2",
     ['jax>=0.10.2; sys_platform != "win32"']),
    (['jax>=0.11; python_version >= "3.12"', 'jax; python_version < "3.12"'], "jax>=0.10.2",
     ['jax>=0.11; python_version >= "3.12"', 'jax>=0.10.2; python_version < "3.12"']),
])
def test_merge_requirement_names_jax_once_with_the_stricter_bounds(own, added, expected):
    assert merge_requirement(own, added) == (expected, None)


@pytest.mark.parametrize("own, added", [
    (["numpy"], "jax>=0.10.2"),  # no requirement on jax: add it
    (["jax @ https://example.org/jax-0.10.2-py3-none-any.whl"], "jax>=0.10.2"),  # direct ref
    (["jax"], 'jax>=0.10.2; sys_platform == "linux"'),  # a marker of its own: add it as is
])
def test_merge_requirement_leaves_what_it_cannot_merge_to_be_added(own, added):
    assert merge_requirement(own, added) == (own, added)


PER_PYTHON = ['jax==0.12.0.1; python_version >= "3.12"', 'jax==0.10.2; python_version < "3.12"']


def test_a_pin_per_python_built_on_one_keeps_the_other_pythons_pin():
    """Built on 3.12 (jax 0.12.0.1): tightening the 3.11 pin would give ``==0.10.2,>=0.12.0.1``,
    which no jax satisfies; it is kept as the project wrote it, nothing is added unmarked, and
    the build's warning says why and what to do."""
    merged, leftover = merge_requirement(PER_PYTHON, "jax>=0.12.0.1")
    assert merged == ['jax==0.12.0.1,>=0.12.0.1; python_version >= "3.12"',
                      'jax==0.10.2; python_version < "3.12"']
    assert leftover is None  # an unmarked jax>=0.12.0.1 would make 3.11 uninstallable again
    (conflict,) = requirement_conflicts(PER_PYTHON, "jax>=0.12.0.1")
    assert conflict.startswith("the project's requirement `jax==0.10.2; python_version < "
                               "\"3.12\"` admits no jax that is also >=0.12.0.1 (the jax these "
                               "artifacts were exported with): kept as it is")
    assert "build one wheel per Python" in conflict


@pytest.mark.parametrize("own", [["jax>=0.12,<0.11"], ["jax<0.12"], ["jax==0.10.*"]])
def test_bounds_that_cross_are_a_conflict_and_a_wildcard_is_not_judged(own):
    conflicts = requirement_conflicts(own, "jax>=0.12.0.1")
    assert len(conflicts) == (0 if "*" in own[0] else 1), conflicts
    assert merge_requirement(own, "jax>=0.12.0.1")[0] == (
        own if conflicts else ["jax==0.10.*,>=0.12.0.1"])


def test_requirements_that_merge_have_no_conflict():
    for own, added in [(["jax>=0.10.2"], "jax>0.10.2"), (["jax<2"], "jax>=0.10.2,<3"),
                       (["JAX!=0.10.1"], "jax>=0.10.2")]:
        assert requirement_conflicts(own, added) == [], own


def test_merge_requirement_refuses_a_bad_requirement():
    with pytest.raises(ValueError, match=r"merge_requirement: expected a requirement such as "
                       r"'jax>=0.10.2', got 'jax>>1'"):
        merge_requirement(["jax"], "jax>>1")


# -- a configuration error that escapes the build backend: the message, no traceback -------------

ESCAPE = """
import sys
from hatch_jaxexport.bake.config import brief_uncaught_build_errors, parse_options
from hatch_jaxexport.errors import ConfigError, ExportError, SpecError
try:
    parse_options({"job": 2}, "tool.jaxexport")
except ConfigError:
    brief_uncaught_build_errors()
    brief_uncaught_build_errors()  # twice: still one report
    if sys.argv[1] == "config":
        raise
if sys.argv[1] == "export":
    raise ExportError(["f, structure 0, platform cpu, primal artifact: TypeError: x"] * 2)
if sys.argv[1] == "spec":
    raise SpecError("@exportable spec of f: bad dtype")
raise RuntimeError("something else")
"""


def test_an_uncaught_config_error_prints_its_message_alone(run_python):
    proc = run_python(ESCAPE.replace("sys.argv[1]", "'config'"), check=False)
    assert proc.returncode == 1
    assert proc.stderr == (
        "error: invalid hatch-jaxexport configuration: tool.jaxexport.job is not an option of "
        "hatch-jaxexport (did you mean `jobs`?); known options: packages, platforms, jobs, "
        "on-error, jax-requirement, editable, executables, executable-jaxlibs, executables-from, "
        "jax-releases, tpu-targets, companion-wheels\n")


def test_an_uncaught_export_error_points_at_the_list_above_in_one_line(run_python):
    """The reporter listed the problems just before: the last-resort report does not repeat
    them, nor print the backend's frames; ``HATCH_JAXEXPORT_TRACEBACK=1`` gives everything."""
    proc = run_python(ESCAPE.replace("sys.argv[1]", "'export'"), check=False)
    assert proc.returncode == 1
    assert proc.stderr == ("error: the export failed: every problem is listed above "
                           "(HATCH_JAXEXPORT_TRACEBACK=1 shows the whole errors with their "
                           "tracebacks)\n")
    spec = run_python(ESCAPE.replace("sys.argv[1]", "'spec'"), check=False)
    assert spec.stderr == "error: @exportable spec of f: bad dtype\n"
    full = run_python(ESCAPE.replace("sys.argv[1]", "'export'"), check=False,
                      env={"HATCH_JAXEXPORT_TRACEBACK": "1"})
    assert full.stderr.startswith("Traceback (most recent call last)")
    assert "TypeError: x" in full.stderr


def test_other_uncaught_errors_keep_their_traceback(run_python):
    proc = run_python(ESCAPE.replace("sys.argv[1]", "'other'"), check=False)
    assert proc.returncode == 1
    assert proc.stderr.startswith("Traceback (most recent call last)")
    assert proc.stderr.rstrip().endswith("RuntimeError: something else")


def test_caught_config_errors_keep_their_type_in_process():
    from hatch_jaxexport.bake.config import brief_uncaught_build_errors

    brief_uncaught_build_errors()
    with pytest.raises(ConfigError):
        parse_options({"job": 2}, HATCH)


def run_cli(*args: str) -> str:
    """The command line's stderr."""
    import subprocess
    import sys

    return subprocess.run([sys.executable, "-m", "hatch_jaxexport", *args], capture_output=True,
                          text=True).stderr


def test_executable_targets_take_the_standard_level_names_too():
    """``x86-64-v3``/``x86-64-v4`` name today's ``x86_64-avx2``/``x86_64-avx512`` (kept as the
    manifest's names), in the build options, the command line and ``@exportable``."""
    from hatch_jaxexport import exportable

    assert parse_options({"executables": ["x86-64-v3", "x86_64-avx2", "x86-64-v4"]},
                         HATCH).executables == ("x86_64-avx2", "x86_64-avx512")

    @exportable({"x": ("4", "float32")}, executables=["x86-64-v4"])
    def f(x):
        return x

    assert tuple(f.export_spec.executables) == ("x86_64-avx512",)
    refused = run_cli("export", "p", "--out", "o", "--executables", "avx3")
    assert "invalid choice: 'avx3'" in refused and "'x86-64-v3'" in refused


def test_executables_option():
    import platform

    from hatch_jaxexport.formats.cpu_targets import default_targets, machine_name

    assert parse_options({}, HATCH).executables == ()
    assert parse_options({"executables": False}, HATCH).executables == ()
    assert parse_options({"executables": True}, HATCH).executables == tuple(
        default_targets(machine_name(platform.machine())))
    assert parse_options({"executables": ["x86_64-avx2", "x86_64-avx2"]},
                         HATCH).executables == ("x86_64-avx2",)
    with pytest.raises(ConfigError) as caught:
        parse_options({"executables": ["x86_64-avx2", "avx3"], "jobs": 0}, HATCH)
    assert f"{HATCH}.executables[1] must be one of 'x86_64-avx2', 'x86_64-avx512', " \
           f"'aarch64', 'x86-64-v3', 'x86-64-v4', got 'avx3'" in str(caught.value)
    with pytest.raises(ConfigError, match=r"executables must be true, false or an array"):
        parse_options({"executables": "yes"}, HATCH)


def test_executable_jaxlibs_option():
    assert parse_options({}, HATCH).executable_jaxlibs == ()
    assert parse_options({"executable-jaxlibs": ["0.10.1", "0.10.1", "0.9.2"]},
                         HATCH).executable_jaxlibs == ("0.10.1", "0.9.2")
    assert errors_of({"executable-jaxlibs": ["0.10.1", "latest", 3]}) == [
        f"{HATCH}.executable-jaxlibs[1] must be a jax version such as \"0.10.1\", got 'latest'",
        f"{HATCH}.executable-jaxlibs[2] must be a jax version such as \"0.10.1\", got 3"]
    assert errors_of({"executables-from": ["wheels/*.zip", 3]}) == [
        f"{HATCH}.executables-from[0] must be a path or pattern ending in .whl, got "
        "'wheels/*.zip'",
        f"{HATCH}.executables-from[1] must be a path or pattern ending in .whl, got 3"]
    assert parse_options({"executables-from": ["a/*.whl", "a/*.whl"]},
                         HATCH).executables_from == ("a/*.whl",)
    assert errors_of({"executable-jaxlibs": "0.10.1"}) == [
        f"{HATCH}.executable-jaxlibs must be an array of jax versions such as [\"0.10.1\"], "
        "got '0.10.1'"]


def test_tpu_targets_add_their_keys_to_the_executables_targets():
    options = parse_options({"executables": ["x86-64-v3"], "platforms": ["cpu", "tpu"],
                             "tpu-targets": ["v5e", "v5e:2x2", "v6e:8", "v5e:1x1", "V4"]}, HATCH)
    assert options.executables == ("x86_64-avx2", "tpu:v5e:1x1", "tpu:v5e:2x2", "tpu:v6e:2x4",
                                   "tpu:v4:2x2x1")
    assert parse_options({"platforms": ["tpu"], "tpu-targets": ["v5p"]}, HATCH).executables == \
        ("tpu:v5p:2x2x1",)


def test_tpu_targets_errors_name_the_entry_the_known_hosts_and_a_missing_platform():
    errors = errors_of({"tpu-targets": ["v5e:3x3", "v9", 4], "platforms": ["cpu"]})
    known = ("a TPU generation, or a generation and its host's topology or device count: v4 "
             "(4 device(s): v4:2x2x1); v5p (4 device(s): v5p:2x2x1); v5e (1 device(s): "
             "v5e:1x1, 4 device(s): v5e:2x2, 8 device(s): v5e:2x4); v6e (1 device(s): v6e:1x1, "
             "4 device(s): v6e:2x2, 8 device(s): v6e:2x4)")
    assert errors == [f"{HATCH}.tpu-targets[0] must be {known}; got 'v5e:3x3'",
                      f"{HATCH}.tpu-targets[1] must be {known}; got 'v9'",
                      f"{HATCH}.tpu-targets[2] must be {known}; got 4",
                      f"{HATCH}.tpu-targets compiles the functions' tpu artifacts, but "
                      f"{HATCH}.platforms (['cpu']) lacks \"tpu\": add it"]
    assert errors_of({"tpu-targets": "v5e", "platforms": ["tpu"]})[0].startswith(
        f"{HATCH}.tpu-targets must be an array of TPU targets such as [\"v5e\", \"v5e:2x2\"]")


def test_a_function_picks_its_own_targets_among_cpu_and_tpu_hosts():
    """``function_targets``: a function's list (CPU targets, TPU hosts) replaces the build's;
    ``True`` is the builder's CPU targets and the build's TPU hosts; ``False`` none."""
    from types import SimpleNamespace

    from hatch_jaxexport.bake.executables.compiling import (
        function_targets,
        resolve_targets,
        target_platform,
    )

    build = ("x86_64-avx2", "tpu:v5e:1x1")
    spec = SimpleNamespace
    assert function_targets(spec(executables=None), build) == list(build)
    assert function_targets(spec(executables=False), build) == []
    assert function_targets(spec(executables=True), build) == [*resolve_targets(True),
                                                                "tpu:v5e:1x1"]
    assert function_targets(spec(executables=("tpu:v6e:2x4",)), build) == ["tpu:v6e:2x4"]
    assert [target_platform(t) for t in build] == ["cpu", "tpu"]
