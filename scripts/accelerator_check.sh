#!/usr/bin/env bash
# The accelerator check, on a machine that reaches no network and may not install into its
# python: installs the given wheels (this project's, example_pkg's with the platform's
# artifacts, flatbuffers, archspec) with --no-index --no-deps into a folder of their own, puts it
# on PYTHONPATH after the machine's own entries (its jax stays the one imported: the folder holds
# no jax), then runs scripts/accelerator_check.py with the options after `--`.
#   bash scripts/accelerator_check.sh [--site DIR] WHEEL... -- --platform tpu [--runs 2] [--json F]
# --site DIR: install there (kept); default: a temporary folder, removed at the end.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
python=${PYTHON:-python3}
if [ -z "${PYTHON:-}" ] && ! python3 -c 'import jax' >/dev/null 2>&1 && command -v python >/dev/null; then
  python=python  # the machine's jax lives in `python`, not `python3`
fi
case $python in */*) python=$(cd "$(dirname "$python")" && pwd)/$(basename "$python") ;; esac
site=""
if [ "${1:-}" = "--site" ]; then site=$2; shift 2; fi
wheels=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do wheels+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
if [ ${#wheels[@]} -eq 0 ] || [ $# -eq 0 ]; then
  echo "usage: $0 [--site DIR] WHEEL... -- --platform tpu|cuda|rocm|cpu [accelerator_check.py options]" >&2
  exit 2
fi
if [ -z "$site" ]; then
  site=$(mktemp -d "${TMPDIR:-/tmp}/accelerator-site-XXXXXX")
  trap 'rm -rf "$site"' EXIT
fi
# --upgrade: a folder kept from an earlier run gets these wheels, not keeps the old ones
"$python" -m pip install -q --no-index --no-deps --upgrade --target "$site" "${wheels[@]}"
for shadow in jax jaxlib numpy; do  # never shadow the machine's own
  if [ -e "$site/$shadow" ]; then echo "error: $site holds $shadow; give no jax wheels" >&2; exit 2; fi
done
export PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$site"
(cd / && "$python" -c 'import importlib.util as u, sys, jax  # no backend starts here
print("python", sys.version.split()[0], "jax", jax.__version__, "from", jax.__file__)
for name in ("hatch_jaxexport", "example_pkg"): print(name, "from", u.find_spec(name).origin)')
"$python" "$here/accelerator_check.py" "$@"
