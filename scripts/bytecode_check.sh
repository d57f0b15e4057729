#!/usr/bin/env bash
# Our modules' bytecode on a device machine: the first call of example_pkg's tiny and mlp (served
# from its shipped executables) in fresh processes, hatch-jaxexport installed three ways:
#   pip:   the py3-none-any wheel, compiled by pip's install (the usual case);
#   none:  the py3-none-any wheel, nothing compiled (uv's default; PYTHONDONTWRITEBYTECODE=1 in
#          every run, as in many container images, so no run writes any);
#   wheel: this project's cpXY-none-any wheel (hatch_build.py), nothing compiled by the installer.
# example_pkg is compiled by pip in every way: only our modules differ. The per-user executable
# cache is off (HATCH_JAXEXPORT_CACHE=0): every run is served from the wheel.
#   bash scripts/bytecode_check.sh WHEEL_DIR [RUNS]
# MODES="pip wheel" runs some ways only (the summary compares each with the first given). On the
# TPU v5e each fresh process costs about 9 s (the runtime's start): 3 ways x 2 workloads x
# (RUNS + 1) processes, so RUNS=2 takes about 3 minutes there (RUNS=4 did not finish in 190 s).
# WHEEL_DIR: COMPANION_WHEELS=accelerators bash scripts/accelerator_bundle.sh WHEEL_DIR cpu,tpu,
# plus HATCH_BUILD_HOOK_ENABLE_CUSTOM=true python -m build --wheel -o WHEEL_DIR (a cpXY wheel
# for the device's Python). Rehearsal on a CPU machine whose jax lives in another environment:
# SITE_PTH=that environment's site-packages.
set -o pipefail
export PYTHONUNBUFFERED=1
PY=${PY:-python3}; $PY -c 'import jax' 2>/dev/null || PY=python
W=${1:?usage: bash scripts/bytecode_check.sh WHEEL_DIR [RUNS]}; RUNS=${2:-5}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
tag=$($PY -c 'import sys; print(f"cp{sys.version_info[0]}{sys.version_info[1]}")')
plain=$(ls "$W"/hatch_jaxexport-*-py3-none-any.whl) || exit 1
shipped=$(ls "$W"/hatch_jaxexport-*-"$tag"-none-any.whl) || exit 1
probe=$(mktemp --suffix=.py)
cat > "$probe" <<'PY'
"""One fresh process: import the package, then one workload's first call (after jax.devices())."""
import json, sys, time
import jax
jax.devices()
start = time.perf_counter()
from example_pkg.benchmarks import WORKLOADS
imported = time.perf_counter()
f, args = WORKLOADS[sys.argv[1]]()
made = time.perf_counter()
jax.block_until_ready(f(*args))
done = time.perf_counter()
print(json.dumps({"name": sys.argv[1], "import_ms": (imported - start) * 1e3,
                  "call_ms": (done - made) * 1e3, "tiers": [r.tier for r in f.call_report()],
                  "ours": __import__("hatch_jaxexport").__file__, "backend": jax.default_backend(),
                  "modules": sum(m.startswith("hatch_jaxexport") for m in sys.modules)}))
PY
MODES=${MODES:-pip none wheel}
for mode in $MODES; do
  v=/tmp/bytecode-$mode; rm -rf $v
  $PY -m venv --system-site-packages --without-pip $v || exit 1
  [ -n "${SITE_PTH:-}" ] && echo "$SITE_PTH" > "$(echo $v/lib/python3*/site-packages)/machine.pth"
  ours=$plain; compile=--no-compile
  [ $mode = wheel ] && ours=$shipped
  [ $mode = pip ] && compile=--compile
  $PY -m pip --python $v/bin/python install -q --no-index --no-deps $compile "$ours" || exit 1
  $PY -m pip --python $v/bin/python install -q --no-index --find-links "$W" "example_pkg[tpu-v5e]" || exit 1
  echo "$mode: $(find $v -path '*hatch_jaxexport*' -name '*.pyc' | wc -l) pyc files of ours"
  : > "$OUT/$mode.jsonl"
  for run in $(seq 0 "$RUNS"); do  # run 0: reads every file once, not counted
    for name in tiny mlp; do
      line=$(cd / && PYTHONDONTWRITEBYTECODE=1 HATCH_JAXEXPORT_CACHE=0 $v/bin/python "$probe" $name 2>>"$OUT/$mode.stderr" | tail -1) || exit 1
      [ "$run" -gt 0 ] && echo "$line" >> "$OUT/$mode.jsonl"
    done
  done
done
$PY - "$OUT" $MODES <<'PY'
import json, statistics, sys
from pathlib import Path
out = Path(sys.argv[1])
rows = {m: [json.loads(l) for l in (out / f"{m}.jsonl").read_text().splitlines()] for m in sys.argv[2:]}
print("| workload | our bytecode | served | our modules | import (ms) | first call (ms) | import + call (ms) | of pip's |")
print("|---|---|---|---:|---:|---:|---:|---:|")
summary = {}
for name in ("tiny", "mlp"):
    floor = None
    for mode, found in rows.items():
        mine = [r for r in found if r["name"] == name]
        med = lambda k: statistics.median(r[k] for r in mine)
        total = statistics.median(r["import_ms"] + r["call_ms"] for r in mine)
        floor = floor or total
        summary[f"{name}/{mode}"] = {"import_ms": med("import_ms"), "call_ms": med("call_ms"), "total_ms": total,
                                     "ratio": total / floor, "tiers": mine[0]["tiers"], "runs": len(mine)}
        print(f"| {name} | {mode} | {'/'.join(sorted(set(mine[0]['tiers'])))} | {mine[0]['modules']} | "
              f"{med('import_ms'):.1f} | {med('call_ms'):.1f} | {total:.1f} | {total / floor:.2f}x |")
print("backend", rows["pip"][0]["backend"], "ours from", rows["wheel"][0]["ours"])
(out / "bytecode.json").write_text(json.dumps(summary, indent=1))
PY
