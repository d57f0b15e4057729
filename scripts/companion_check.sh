#!/usr/bin/env bash
# Companion wheels on a device machine: example_pkg installed from a find-links folder with pip, with the extra
# [tpu-v5e] (its companion wheel) and without; the accelerator check's first calls, strict, on both.
set -o pipefail
export PYTHONUNBUFFERED=1
PY=${PY:-python3}; $PY -c 'import jax' 2>/dev/null || PY=python
W=${1:?usage: bash scripts/companion_check.sh WHEEL_DIR (the wheels of COMPANION_WHEELS=accelerators bash scripts/accelerator_bundle.sh WHEEL_DIR cpu,tpu)}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
quiet() { grep -v -E '^[WIE][0-9]{4} |Source Location|libtpu_init_utils|^WARNING: Logging|hugepage|warnings.warn' ; }
ls -l $W
for mode in extra plain; do
  echo "=== $mode"
  v=/tmp/v-$mode; rm -rf $v
  $PY -m venv --system-site-packages --without-pip $v || exit 1
  # rehearsal on a CPU machine whose jax lives in another venv: SITE_PTH names its site-packages
  [ -n "${SITE_PTH:-}" ] && echo "$SITE_PTH" > $(echo $v/lib/python3*/site-packages)/machine.pth
  $v/bin/python -c 'import jax, sys; print("venv", sys.prefix, "jax", jax.__version__, jax.__file__)' || $v/bin/python -c 'import sys; print(sys.path)'
  req="example_pkg[tpu-v5e]"; [ $mode = plain ] && req=example_pkg
  $PY -m pip --python $v/bin/python install -q --no-index --find-links $W "$req" 2>&1 | quiet
  $PY -m pip --python $v/bin/python list 2>/dev/null | grep -i -E "^(example|hatch)"
  $v/bin/python -m hatch_jaxexport inspect example_pkg 2>&1 | quiet | grep -E "^companion wheel|^precompiled"
  $v/bin/python -m hatch_jaxexport verify example_pkg 2>&1 | quiet | cut -c1-200
  # a user's first call, default mode: its tier and why, and what it printed on stderr
  # beyond the TPU runtime's own log lines
  $v/bin/python - > $OUT/$mode-call.txt 2> $OUT/$mode-call.stderr <<'PY'
import jax
jax.devices()
from example_pkg.benchmarks import WORKLOADS
for name in ("tiny", "mlp"):
    f, args = WORKLOADS[name]()
    jax.block_until_ready(f(*args))
    print(name, [(r.tier, (r.not_shipped or "")[:300]) for r in f.call_report()])
PY
  cat $OUT/$mode-call.txt
  echo "stderr lines: $(wc -l < $OUT/$mode-call.stderr), beyond the runtime's log: $(quiet < $OUT/$mode-call.stderr | grep -c .)"
  quiet < $OUT/$mode-call.stderr | head -5
  PYTHON=$v/bin/python timeout 280 $v/bin/python scripts/accelerator_check.py --platform tpu --runs 1 --steps source_cold,baked_cold --json $OUT/$mode.json --budget-seconds 200 2>&1 | quiet | tail -25
done
