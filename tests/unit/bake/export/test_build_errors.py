"""Build errors a new user meets: once, short, at the line of their code, with what to try.

``jxe_mistakes`` holds two classic mistakes: two symbols broadcast together (``batch`` and ``n``,
with ``ad_order=1``: the primal, jvp and vjp artifacts fail for the same reason) and a Python
``if`` on a symbolic size. Each failure is one line naming the function, structure, platform and
the artifact kinds, with the file:line of the user's code, then a hint line.
"""

from __future__ import annotations

import os
import sys

import pytest
from conftest import FIXTURES, run

from hatch_jaxexport.bake import export_package
from hatch_jaxexport.bake.export.diagnose import (
    BAKE_FIXED,
    first_line,
    hints_for,
    slice_constraints,
)
from hatch_jaxexport.bake.flow import missing_local_platform
from hatch_jaxexport.errors import ExportError

SOURCE = (FIXTURES / "jxe_mistakes" / "__init__.py").read_text().splitlines()


def line_of(marker: str) -> int:
    return next(i for i, line in enumerate(SOURCE, 1) if marker in line)


BROADCAST_LINE = (
    "jxe_mistakes:difference, structure 0 (x: float32[batch, 3]; y: float32[n, 3]), platform "
    f"cpu, primal, jvp, vjp artifacts at jxe_mistakes/__init__.py:{line_of('broadcast error')}: "
    "TypeError: sub got incompatible shapes for broadcasting: (batch, 3), (n, 3).")
BROADCAST_HINT = (
    "    hint: 'batch' and 'n' are independent symbols: jax.export cannot prove they are equal. "
    "If they are the same size, write one name in both specs, or add constraints=[\"n == batch\"]"
    " to @exportable; otherwise the computation mixes sizes that differ")
IF_LINE = (
    "jxe_mistakes:first_two, structure 0 (x: float32[a]), platform cpu, primal artifact at "
    f"jxe_mistakes/__init__.py:{line_of('inconclusive comparison')}: "
    "InconclusiveDimensionOperation: Symbolic dimension comparison 'a' > '2' is inconclusive.")
IF_HINT = ("    hint: a Python `if` or comparison on a symbolic size (a > 2) has no single answer "
           "for every size: use jnp.where / jax.lax.cond, add constraints=[\"a >= 3\"] to "
           f"@exportable if it always holds, {BAKE_FIXED}")


def cli_export(tmp_path, *options: str, verbose: bool = False,
               env: dict[str, str] | None = None):
    return run([sys.executable, "-m", "hatch_jaxexport", *(["-v"] if verbose else []), "export",
                "jxe_mistakes", "--out", tmp_path / "out", *options], check=False,
               env={"PYTHONPATH": str(FIXTURES), **(env or {})})


def test_each_cause_is_one_line_at_the_users_line_with_a_hint(tmp_path):
    with pytest.raises(ExportError) as caught:
        export_package("jxe_mistakes", tmp_path / "out", search_path=[FIXTURES])
    assert caught.value.failures == [f"{BROADCAST_LINE}\n{BROADCAST_HINT}", f"{IF_LINE}\n{IF_HINT}"]
    assert str(caught.value).splitlines()[0] == "4 exports of jxe_mistakes failed, for 2 reasons:"
    assert not (tmp_path / "out").exists()


def test_the_command_line_prints_the_block_once_without_a_traceback(tmp_path):
    proc = cli_export(tmp_path)
    assert proc.returncode == 1
    block = proc.stderr[proc.stderr.index("jaxexport: error: "):].splitlines()
    assert block == ["jaxexport: error: 4 exports of jxe_mistakes failed, for 2 reasons:",
                     f"  - {BROADCAST_LINE}", BROADCAST_HINT, f"  - {IF_LINE}", IF_HINT]
    assert proc.stderr.count("incompatible shapes") == 1
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("switch", ["-v", "HATCH_JAXEXPORT_TRACEBACK"])
def test_verbose_or_the_variable_shows_the_whole_traceback(tmp_path, switch):
    env = {"HATCH_JAXEXPORT_TRACEBACK": "1"} if switch.isupper() else {}
    proc = cli_export(tmp_path, verbose=switch == "-v", env=env)
    assert proc.returncode == 1
    assert BROADCAST_LINE in proc.stderr
    assert "Traceback (most recent call last)" in proc.stderr
    assert 'jxe_mistakes/__init__.py", line ' in proc.stderr  # the worker's frames of the user


def test_a_build_without_the_local_platform_warns(tmp_path):
    proc = cli_export(tmp_path, "--platform", "tpu")
    assert ("jaxexport: warning: platforms = ['tpu'] lacks cpu, the platform this machine runs: "
            "here jxe_mistakes's functions will trace their source instead of loading artifacts; "
            "add 'cpu' to platforms if its users may run on cpu") in proc.stderr
    assert missing_local_platform(("cpu", "cuda")) is None
    assert missing_local_platform(("cuda",)) == "cpu"
    assert "lacks" not in cli_export(tmp_path).stderr


def test_hints_name_each_pair_of_independent_symbols():
    hints = hints_for("TypeError: add got incompatible shapes for broadcasting: (a, k), (b, k), "
                      "(c, 1).")
    assert ["'a' and 'b'" in h for h in hints] == [True, False, False]
    assert ["'a' and 'c'" in h for h in hints] == [False, True, False]
    assert "'b' and 'c'" in hints[2]
    assert hints_for("TypeError: add got incompatible shapes for broadcasting: (3,), (4,).") == []
    (less,) = hints_for("Symbolic dimension comparison 'n' < '8' is inconclusive.")
    assert 'constraints=["n <= 7"]' in less
    assert hints_for("ValueError: something else entirely") == []


@pytest.mark.parametrize(("error", "says"), [
    ("TypeError: '_DimExpr' object cannot be interpreted as an integer",
     "as a Python int (len(x), int(...)"),
    ("InconclusiveDimensionOperation: Symbolic dimension 'n' used in a context that requires "
     "a constant", "a symbolic size (n) as a Python int"),
    ("TypeError: sub got incompatible shapes for broadcasting: (- min(n, 2) + n,), "
     "(max(0, n - 2),).", "add constraints=['n >= 2'] to @exportable"),
    ("InconclusiveDimensionOperation: Symbolic dimension comparison 'n' < '100' is "
     "inconclusive.", 'constraints=["n <= 99"]'),
])
def test_code_that_is_not_shape_polymorphic_gets_its_fix_and_fixed_sizes(error, says):
    """len()/int() of a size, a slice that needs a lower bound, a Python comparison: each hint
    names its fix and the way out that always works (bake the sizes users call with)."""
    (hint,) = hints_for(error)
    assert says in hint
    assert "HATCH_JAXEXPORT_RECORD=1" in hint and "concrete=/executable_sizes=" in hint


def test_exportable_under_custom_gradient_gets_told_to_go_above_it():
    """The body under ``@jax.custom_gradient`` returns its gradient function: jax's own error
    names a function among the outputs, and the hint says where ``@exportable`` goes."""
    import jax
    import jax.numpy as jnp

    def body(x):
        return jnp.sin(x), lambda g: (g,)

    with pytest.raises(TypeError) as info:
        jax.export.export(jax.jit(body))(jax.ShapeDtypeStruct((3,), jnp.float32))
    (hint,) = hints_for(str(info.value))
    assert "put @exportable above @jax.custom_gradient, not below it" in hint


def test_slice_constraints_take_the_largest_bound_per_symbol():
    error = "(- min(n, 2) + n,), (max(0, n - 3),), (- min(4, m) + m,)"
    assert slice_constraints(error) == ["m >= 4", "n >= 3"]
    assert slice_constraints("(n, 3)") == []


def test_the_first_line_keeps_the_line_a_colon_announces():
    assert first_line("ValueError: bad. Examples are:\n  custom_call @x\nmore") == \
        "ValueError: bad. Examples are: custom_call @x"
    assert first_line("TypeError: one\ntwo") == "TypeError: one"
    assert len(first_line("E: " + "x" * 1000)) == 300


def test_an_import_error_names_the_users_line(tmp_path):
    package = tmp_path / "jxe_badspec"
    package.mkdir()
    (package / "__init__.py").write_text(
        "from hatch_jaxexport import exportable\n\n\n"
        "@exportable({'x': ('n', 'float')})\n"
        "def f(x):\n    return x\n")
    with pytest.raises(ExportError) as caught:
        export_package("jxe_badspec", tmp_path / "out", search_path=[tmp_path])
    (failure,) = caught.value.failures
    assert failure.startswith("cannot import package 'jxe_badspec': SpecError: ")
    assert failure.endswith("(at jxe_badspec/__init__.py:4)"), failure
    assert str(tmp_path) not in failure
    assert os.sep + "site-packages" not in failure


def _failure(function: str, index: int, error: str, location: str | None,
             platform: str = "cpu") -> dict:
    return {"task": {"function": function, "structure_index": index, "static": {},
                     "platform": platform, "kind": "primal", "batched": False},
            "structure": f"x: float32[n{index}]", "error": error, "location": location}


def test_failures_of_one_cause_at_one_place_fold_into_one_message_in_one_order():
    """Issue 37: a build's many failures that are one cause at one line print as one message
    with the count, the functions and one example, the same whatever order workers finished."""
    import random

    from hatch_jaxexport.bake.export.diagnose import fold_failures

    inconclusive = ("InconclusiveDimensionOperation: Symbolic dimension comparison 'n{}' >= "
                    "'2' is inconclusive.")
    failures = [_failure(f"mypkg:f{i % 3}", i, inconclusive.format(i), "mypkg/ops.py:12")
                for i in range(6)]
    failures.append(_failure("mypkg:g", 0, "ValueError: something else", "mypkg/other.py:3"))
    messages = fold_failures(failures)
    shuffled = failures[:]
    random.Random(0).shuffle(shuffled)
    assert fold_failures(shuffled) == messages
    assert len(messages) == 2
    folded = next(m for m in messages if "InconclusiveDimensionOperation" in m)
    lines = folded.splitlines()
    assert lines[0] == ("6 exports failed with InconclusiveDimensionOperation at "
                        "mypkg/ops.py:12 (6 structures of mypkg:f0, mypkg:f1, mypkg:f2); "
                        "for example:")
    assert lines[1].startswith("  mypkg:f0, structure 0 (x: float32[n0]), platform cpu")
    assert lines[2].startswith("    hint: a Python `if` or comparison on a symbolic size")
    assert len(lines) == 3  # one example, one hint: not six of each
