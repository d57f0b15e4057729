#!/usr/bin/env bash
# The whole test suite, from nothing: makes a virtual environment per interpreter, installs this
# project with its test and docs extras (jax comes from PyPI), checks style and runs pytest.
# Runs on the default python3 (jax 0.10.x on 3.11) and, where one is found, at the same time on
# Python 3.12 with the newest jax (there the unit tests that start no process and those marked
# across_jax, unless FULL_312=1: the rest runs once, on the default Python, to keep CI under 20
# minutes).
# Extra arguments go to pytest, e.g. `bash scripts/test.sh -m "not slow"` (a -m of yours
# replaces the default selection below).
#
# CI's run (the default) leaves out the tests marked `whole` (tests/conftest.py's WHOLE_ONLY:
# other front ends, the ecosystem matrices, benchmark smoke runs...) to fit in 20 minutes on
# 2 cores; `bash scripts/test.sh --whole` (or WHOLE=1) runs every test, on both Pythons.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$(pwd)
work="${HATCH_JAXEXPORT_TEST_VENVS:-$root/.venvs}"
if [ "${1:-}" = "--whole" ]; then WHOLE=1; shift; fi
if [ "${WHOLE:-0}" = "1" ]; then selection=(); FULL_312=1; else selection=(-m "not whole"); fi
# the whole run also draws every fuzz example (CI's run draws the first third of each test's)
if [ "${WHOLE:-0}" = "1" ]; then export HATCH_JAXEXPORT_TEST_WHOLE=1; fi

find_python312() {  # a Python 3.12 that really runs (pyenv shims exist for absent versions)
  local cand candidates=()
  if command -v pyenv >/dev/null 2>&1; then
    candidates+=("$(pyenv root)"/versions/3.12*/bin/python3.12)
  fi
  candidates+=("$(command -v python3.12 2>/dev/null || true)")
  for cand in "${candidates[@]}"; do
    if [ -n "$cand" ] && [ -x "$cand" ] && "$cand" -c 'import sys; assert sys.version_info[:2] == (3, 12)' \
        >/dev/null 2>&1; then
      echo "$cand"
      return 0
    fi
  done
  return 1
}

prepare() {  # prepare PYTHON NAME EXTRAS: the environment, its bytecode and the style check
  local python=$1 name=$2 extras=$3
  local venv="$work/$name"
  echo "=== $name: $("$python" --version 2>&1) ==="
  [ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
  # uv resolves and installs the test environment (jax, flax, mkdocs...) several times faster
  # than pip; pip only installs uv itself, and the tests still use both.
  "$venv/bin/python" -m pip install -q --disable-pip-version-check --upgrade pip uv
  "$venv/bin/python" -m uv pip install -q --python "$venv/bin/python" --upgrade -e ".[$extras]" \
    "jax[cpu]" ruff
  # bytecode for the environment and this project, written once here: where
  # PYTHONDONTWRITEBYTECODE is set (as on this project's CI machines) every fresh process the
  # tests start would otherwise compile jax's sources again (``import jax``: 3.6 s against
  # 1.4 s on 2 cores). A file that does not compile (some packages ship Python 2 test data)
  # stays source; the exit status says only that.
  "$venv/bin/python" -m compileall -q -j 0 hatch_jaxexport tests \
    "$("$venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
    >/dev/null 2>&1 || true
  "$venv/bin/python" -c 'import jax, sys; print("jax", jax.__version__, "on Python", sys.version.split()[0])'
  "$venv/bin/python" -m ruff check .
}

run_tests() {  # run_tests NAME [pytest args...]
  local venv="$work/$1"; shift
  # three workers on CI's 2 cores (TEST_JOBS=0: none): most tests wait on subprocesses,
  # builds, downloads and installs, so two at a time left a core idle a fifth of the time (the
  # Python 3.11 run took 1,065 s with three against 1,223 s with two); a test file stays on one
  # worker (its module fixtures are built once), and each worker has its own caches
  # (tests/conftest.py)
  "$venv/bin/python" -m pytest -n "${TEST_JOBS:-3}" --dist loadfile "$@"
}

# The ecosystem extra (flax, equinox, diffrax, optax) only here: the slow ecosystem test runs on
# this Python and fails, not skips, without it.
prepare python3 py-default test,docs,ecosystem
py312=$(find_python312) || py312=""
if [ -n "$py312" ]; then
  # The newest jax's run goes beside the first one: its environment is made, then its tests
  # run, while the first run's tests go (they mostly wait on subprocesses, and the first run's
  # last minutes are one or two long tests on one core: CI took 1,370 s with the runs one after
  # the other); its output is printed after the first run's.
  # The integration tests (front ends, fresh venvs, version skew in both directions) and the
  # examples run on the default Python only. FULL_312=1: everything (with the ecosystem extra,
  # which the ecosystem tests need). CI's run: the unit tests that start no process, and the
  # process-starting ones that exercise a jax API which changes between releases
  # (``across_jax``: tests/conftest.py ACROSS_JAX); every other slow test runs on the default
  # Python, and changes with our code, not with jax. Two workers (TEST_JOBS_312): it finishes
  # long before the first run either way, and with three its fixtures' builds crowded the
  # first run's (a clean-clone run took 1,150 s against 1,184 s with three). The export
  # options' matrix is left out too (its wheel's build took 124 s of the newest jax's run):
  # the jax API it calls is exported, loaded and transformed by the across_jax files
  # (test_export, test_transforms, test_forms).
  extras312=test,docs
  if [ "${FULL_312:-0}" = "1" ]; then extras312=test,docs,ecosystem; fi
  log312=$(mktemp "${TMPDIR:-/tmp}/jaxexport-py312-XXXXXX")
  (
    prepare "$py312" py312 "$extras312"  # errexit: a failure here ends this run with its status
    if [ "${FULL_312:-0}" = "1" ]; then run_tests py312 "$@"
    else TEST_JOBS=${TEST_JOBS_312:-2} run_tests py312 -m "(not slow or across_jax) and not whole" tests/unit \
      --ignore tests/unit/runtime/artifacts/test_option_matrix.py "$@"; fi
  ) >"$log312" 2>&1 &
  pid312=$!
fi
status=0
run_tests py-default "${selection[@]}" "$@" || status=$?
if [ -n "$py312" ]; then
  status312=0
  wait "$pid312" || status312=$?
  cat "$log312"; rm -f "$log312"
  if [ "$status" -ne 0 ]; then exit "$status"; fi
  exit "$status312"
fi
if [ "$status" -ne 0 ]; then exit "$status"; fi
echo "=== no Python 3.12 interpreter found: skipping the newest-jax run ==="
