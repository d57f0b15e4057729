#!/usr/bin/env bash
# A real library's own suite on a device machine (benchmarks/peer_device.py writes BUNDLE):
#   bash scripts/peer_device_run.sh BUNDLE [SIDES]     # SIDES: "plain baked" (default)
# Installs each side with --no-index --no-deps into a folder of its own, after the machine's
# PYTHONPATH (its jax stays the one imported), with bytecode, then runs the suite's files
# (BUNDLE/files.txt) in one pytest process per side with the report plugin. Writes
# junit-SIDE.xml, served-SIDE.json, seconds-SIDE.txt and pytest-SIDE.txt into $OUT.
# PYTEST_LIMIT=SECONDS interrupts a side's pytest there (SIGINT: pytest still writes what ran),
# so that a side too long for one device call still reports its tests.
# BUNDLE/index.txt (TensorFlow, for dm-pix) names what the machine's own index installs
# (DEVICE_INDEX, default file:///opt/pypi/simple), with its dependencies, once for both
# sides and for later calls on the same machine, last on the path (the machine's jax and
# numpy stay the ones imported).
set -uo pipefail
bundle=$(cd "${1:?usage: $0 BUNDLE [SIDES]}" && pwd)
sides=${2:-plain baked}
OUT=${OUT:-/tmp/peer-out}; mkdir -p "$OUT"
PY=${PY:-python3}; $PY -c 'import jax' 2>/dev/null || PY=python
work=$(mktemp -d "${TMPDIR:-/tmp}/peer-device-XXXXXX")
mapfile -t files < "$bundle/files.txt"
indexed=
if [ -f "$bundle/index.txt" ]; then  # kept for the next call of the same list (40 s each)
  indexed=${TMPDIR:-/tmp}/peer-device-index-$(cksum < "$bundle/index.txt" | cut -d' ' -f1)
  start=$(date +%s)
  if [ ! -f "$indexed/.complete" ]; then
    rm -rf "$indexed"
    PIP_CONFIG_FILE=/dev/null $PY -m pip install --isolated -q --only-binary=:all: \
      --index-url "${DEVICE_INDEX:-file:///opt/pypi/simple}" --target "$indexed" \
      $(cat "$bundle/index.txt") 2>&1 | tail -3 && touch "$indexed/.complete"
  fi
  echo "== from the index: $(tr '\n' ' ' < "$bundle/index.txt")($(( $(date +%s) - start )) s)"
fi
for side in $sides; do
  site=$work/site-$side
  extra=()
  [ "$side" = baked ] && extra=("$bundle"/baked/*.whl) || extra=("$bundle"/plain/*.whl)
  $PY -m pip install -q --no-index --no-deps --target "$site" "$bundle"/deps/*.whl "${extra[@]}" 2>&1 | tail -3
  $PY -m compileall -q "$site" >/dev/null 2>&1  # bytecode, as pip's own installs write it
  mkdir -p "$work/plugin" && cp "$bundle/_peer_report.py" "$work/plugin/"
  rm -rf "$work/suite-$side" && cp -r "$bundle/suite" "$work/suite-$side"
  start=$(date +%s.%N)
  (cd "$work/suite-$side" && \
    PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$work/plugin:$site${indexed:+:$indexed}" \
    PEER_SUITES_REPORT="$OUT/served-$side.json" PEER_SUITES_TIME="$bundle/timed.txt" HATCH_JAXEXPORT_CACHE="$work/cache-$side" \
    ${PYTEST_LIMIT:+timeout -s INT -k 30 $PYTEST_LIMIT} $PY -m pytest "${files[@]}" -p _peer_report -p no:cacheprovider -q --continue-on-collection-errors \
      --junitxml="$OUT/junit-$side.xml" > "$OUT/pytest-$side.txt" 2>&1)
  $PY -c "print(round($(date +%s.%N) - $start, 1))" > "$OUT/seconds-$side.txt"
  echo "== $side: $(tail -1 "$OUT/pytest-$side.txt") ($(cat "$OUT/seconds-$side.txt") s)"
done
