#!/usr/bin/env bash
# The GPU check, on a machine that reaches no network: installs the given wheels (this
# project's and example_pkg's) with --no-deps into the python that already has jax with its GPU
# plugin, then runs scripts/gpu_check.py (example_pkg's cuda artifacts, strict, against the
# source, and their first calls beside the source's). Paste what it prints into docs/gpu.md.
#   bash scripts/gpu_check.sh dist/hatch_jaxexport-*.whl dist/example_pkg-*.whl [-- --runs 3]
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
wheels=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do wheels+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#wheels[@]} -gt 0 ] || { echo "usage: $0 WHEEL... [-- gpu_check.py options]" >&2; exit 2; }
"$python" -m pip install -q --no-deps --no-index --force-reinstall "${wheels[@]}"
"$python" -c 'import jax; print("jax", jax.__version__, jax.devices())'
exec "$python" scripts/gpu_check.py --platform "${GPU_CHECK_PLATFORM:-cuda}" "$@"
