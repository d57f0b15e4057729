#!/usr/bin/env bash
# A package's executables compiled on the device machine and merged into its wheel (issue 60),
# on a machine that reaches no network and may not install into its python:
#   bash scripts/tpu_executables.sh [--platform tpu] [--out DIR] WHEEL...
# WHEEL...: this project's wheel, the package's (the one whose name is not hatch_jaxexport,
# flatbuffers or archspec; built on a CPU machine with the device's platform in `platforms`,
# e.g. by scripts/accelerator_bundle.sh), flatbuffers and archspec. Steps, each printed:
# 1. installs all but the package's wheel with --no-index --no-deps into OUT/site, put first on
#    PYTHONPATH (it holds no jax: the machine's stays the one imported; an older
#    hatch_jaxexport elsewhere on PYTHONPATH does not shadow this one);
# 2. `jaxexport compile-executables` compiles the package's artifacts of the platform for the
#    device jax sees (OUT/device/), timed;
# 3. `jaxexport merge` puts them into the package's wheel (OUT/merged/), installs that into
#    OUT/site, runs `jaxexport verify` and the executables' lines of `jaxexport inspect`;
# 4. prints the wheel sizes without and with the executables, and the compile time;
# 5. where the package has `benchmarks.WORKLOADS` (example_pkg), runs each workload's first call
#    in a fresh process, strict, and prints how it was served (`shipped` is the point).
# OUT defaults to .device/tpu_executables. --platform cpu stands in for a device in tests.
# Then give OUT/merged/*.whl to scripts/accelerator_check.sh in place of the package's wheel.
set -euo pipefail
python=${PYTHON:-python3}
platform=tpu
out=.device/tpu_executables
while [ $# -gt 0 ]; do
  case $1 in
    --platform) platform=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    *) break ;;
  esac
done
[ $# -ge 2 ] || { echo "usage: $0 [--platform tpu] [--out DIR] WHEEL..." >&2; exit 2; }
rm -rf "$out/site" "$out/device" "$out/merged"
mkdir -p "$out/site"
out=$(cd "$out" && pwd)
tools=()
package_wheel=""
for wheel in "$@"; do
  case $(basename "$wheel") in
    hatch_jaxexport-*|flatbuffers-*|archspec-*) tools+=("$wheel") ;;
    *.whl) [ -z "$package_wheel" ] || { echo "error: two package wheels: $package_wheel $wheel" >&2; exit 2; }
           package_wheel=$wheel ;;
    *) echo "error: not a wheel: $wheel" >&2; exit 2 ;;
  esac
done
[ -n "$package_wheel" ] || { echo "error: no package wheel among $*" >&2; exit 2; }
package=$(basename "$package_wheel" | cut -d- -f1)
echo "== 1. install ${tools[*]##*/} into $out/site"
"$python" -m pip install -q --no-index --no-deps --target "$out/site" "${tools[@]}"
for shadow in jax jaxlib numpy; do
  if [ -e "$out/site/$shadow" ]; then echo "error: give no $shadow wheel: the machine's is used" >&2; exit 2; fi
done
export PYTHONPATH="$out/site${PYTHONPATH:+:$PYTHONPATH}"
jaxexport() { "$python" -m hatch_jaxexport "$@"; }
echo "== 2. compile $package's $platform executables"
started=$("$python" -c 'import time; print(time.time())')
jaxexport compile-executables "$package_wheel" --out "$out/device" --platform "$platform"
seconds=$("$python" -c "import time; print(f'{time.time() - $started:.1f}')")
echo "== 3. merge, install, verify"
jaxexport merge "$package_wheel" "$out/device/$(basename "$package_wheel")" --out "$out/merged"
merged="$out/merged/$(basename "$package_wheel")"
"$python" -m pip install -q --no-index --no-deps --target "$out/site" "$merged"
jaxexport verify "$package"
shown=$(jaxexport inspect "$package")
echo "$shown" | grep '^precompiled executables'
echo "$shown" | sed -n '/^precompiled executables/,$p' | grep -c ' usable$' | sed 's/$/ of them usable here/'
echo "== 4. sizes"
"$python" - "$package_wheel" "$merged" "$seconds" <<'PY'
import json, os, sys, zipfile
before, after, seconds = sys.argv[1], sys.argv[2], sys.argv[3]
with zipfile.ZipFile(after) as archive:
    name = next(n for n in archive.namelist() if n.endswith("/_jaxexport/manifest.json"))
    records = json.loads(archive.read(name).decode().split(',"record_spans"')[0] + "}")
    found = records.get("executables", [])
    raw = sum(archive.getinfo(f"{name.rsplit('/', 1)[0]}/{e['file']}").file_size for e in found)
b, a = os.path.getsize(before), os.path.getsize(after)
print("| wheel | bytes |\n| --- | ---: |")
print(f"| StableHLO only | {b:,} |")
print(f"| with {len(found)} executable(s) ({raw:,} bytes before compression) | {a:,} "
      f"(+{a - b:,}, {a / b:.2f}x) |")
print(f"compile-executables: {seconds} s (wall, with the backend's start)")
PY
echo "== 5. first calls"
"$python" - "$package" <<'PY'
import importlib.util, subprocess, sys
package = sys.argv[1]
if importlib.util.find_spec(f"{package}.benchmarks") is None:
    print(f"{package} has no benchmarks.WORKLOADS: no calls run")
    sys.exit(0)
names = subprocess.run([sys.executable, "-c", f"from {package}.benchmarks import WORKLOADS; "
                        "print(' '.join(WORKLOADS))"], capture_output=True, text=True,
                       check=True).stdout.split()
code = ("import sys, time\nfrom {p}.benchmarks import WORKLOADS\nfn, args = WORKLOADS[sys.argv[1]]()\n"
        "import jax\njax.devices()\nt = time.perf_counter()\njax.block_until_ready(fn(*args))\n"
        "ms = (time.perf_counter() - t) * 1e3\n"
        "print(sys.argv[1], f'{{ms:.1f}} ms', [(r.tier, r.not_shipped) for r in fn.call_report()])")
env = {"HATCH_JAXEXPORT_STRICT": "1", "HATCH_JAXEXPORT_CACHE": "0"}
import os
for name in names:
    proc = subprocess.run([sys.executable, "-c", code.format(p=package), name],
                          capture_output=True, text=True, env={**os.environ, **env})
    print(proc.stdout.strip() or f"{name}: failed ({proc.returncode}) {proc.stderr[-800:]}")
PY
