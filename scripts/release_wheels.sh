#!/usr/bin/env bash
# This project's release files: the sdist, the py3-none-any wheel, and one cpXY-none-any wheel per
# supported Python carrying our modules' checked-hash bytecode for it (hatch_build.py says why).
#   bash scripts/release_wheels.sh OUT_DIR [PYTHON...]
# PYTHON: the interpreters to build bytecode wheels with (default: python3.11 python3.12
# python3.13 where found). Builds are isolated (python -m build) and reproducible.
set -euo pipefail
[ -n "${HATCH_BUILD_HOOK_ENABLE_CUSTOM:-}" ] && { echo "unset HATCH_BUILD_HOOK_ENABLE_CUSTOM first" >&2; exit 2; }
out=${1:?usage: bash scripts/release_wheels.sh OUT_DIR [PYTHON...]}; shift
cd "$(dirname "$0")/.."
pythons=("$@")
if [ ${#pythons[@]} -eq 0 ]; then
  for v in 3.11 3.12 3.13; do
    for found in "python$v" "$(pyenv root 2>/dev/null)"/versions/"$v".*/bin/python; do
      if "$found" -c pass 2>/dev/null; then pythons+=("$found"); break; fi
    done
  done
fi
tools=$(mktemp -d); trap 'rm -rf "$tools"' EXIT
builder() {  # a virtual environment of `build` for interpreter $1, in a scratch folder
  local venv="$tools/py3$("$1" -c 'import sys; print(sys.version_info[1])')"
  [ -x "$venv/bin/python" ] || { "$1" -m venv "$venv" && "$venv/bin/python" -m pip install -q --disable-pip-version-check build; }
  echo "$venv/bin/python"
}
"$(builder "${pythons[0]}")" -m build --sdist --wheel -o "$out" .
for python in "${pythons[@]}"; do
  HATCH_BUILD_HOOK_ENABLE_CUSTOM=true "$(builder "$python")" -m build --wheel -o "$out" .
done
ls -l "$out"
