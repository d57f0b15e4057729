#!/usr/bin/env bash
# The wheels the accelerator check installs on a device machine that reaches no network, built
# here (no accelerator needed: jax lowers for any platform on the CPU):
#   bash scripts/accelerator_bundle.sh OUT [PLATFORMS] [--worktree]
# - hatch_jaxexport's wheel, built from HEAD (git archive; --worktree: the working tree);
# - example_pkg's wheel with artifacts for PLATFORMS (default cpu,tpu): its pyproject's
#   `platforms` line is rewritten in a copy (the committed example keeps ["cpu", "cuda"]), and
#   its isolated build exports with this python's jax release (pinned by PIP_CONSTRAINT), the
#   release the device runs (JAX_VERSION=... to pin another);
#   Where PLATFORMS has tpu, the copy also gets `tpu-targets = ["v5e"]` (TPU_TARGETS=v5e,v6e:8
#   for others, TPU_TARGETS= for none): the build compiles TPU v5e executables here, without a
#   TPU (libtpu at the pin of this jax, installed once into the user's cache by the build);
#   COMPANION_WHEELS=accelerators: those go into companion wheels beside the package's wheel
#   (`companion-wheels`; built with `python -m build`, which keeps them: `pip wheel` keeps one)
# - flatbuffers and archspec, the runtime's pure-Python dependencies (pip download --no-deps).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
[ $# -ge 1 ] || { echo "usage: $0 OUT [PLATFORMS] [--worktree]" >&2; exit 2; }
out=$(mkdir -p "$1" && cd "$1" && pwd)
platforms=${2:-cpu,tpu}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/accelerator-bundle-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
if [ "${3:-}" = "--worktree" ] || [ "${2:-}" = "--worktree" ]; then
  [ "${2:-}" = "--worktree" ] && platforms=cpu,tpu
  source_dir=$root
else
  source_dir=$tmp/source
  mkdir -p "$source_dir"
  git -C "$root" archive HEAD | tar -x -C "$source_dir"
fi
jax_version=${JAX_VERSION:-$("$python" -c 'import jax; print(jax.__version__)')}
printf 'jax==%s\njaxlib==%s\n' "$jax_version" "$jax_version" > "$tmp/constraints.txt"
"$python" -m pip wheel -q --no-deps --no-build-isolation -w "$out" "$source_dir"
cp -r "$source_dir/example_pkg" "$tmp/example_pkg"
rm -rf "$tmp/example_pkg/dist" "$tmp/example_pkg/build" "$tmp"/example_pkg/src/example_pkg/_jaxexport
tpu_targets=${TPU_TARGETS-v5e}
case ",$platforms," in *,tpu,*) ;; *) tpu_targets="" ;; esac
companions=${COMPANION_WHEELS:-none}
"$python" - "$tmp/example_pkg/pyproject.toml" "$platforms" "$tpu_targets" "$companions" <<'PY'
import json, re, sys
path, platforms = sys.argv[1], sys.argv[2].split(",")
tpu = [t for t in sys.argv[3].split(",") if t]
text = open(path).read()
line = "platforms = " + json.dumps(platforms)
if tpu:  # compiled by this build, without a TPU
    line += "\ntpu-targets = " + json.dumps(tpu)
if sys.argv[4] != "none":
    line += "\ncompanion-wheels = " + json.dumps(sys.argv[4])
new, count = re.subn(r"(?m)^platforms = \[.*\]$", line, text)
if count != 1:
    sys.exit(f"{path}: expected one `platforms = [...]` line in the hook's table, found {count}")
open(path, "w").write(new)
PY
if [ "$companions" = none ]; then
  PIP_CONSTRAINT="$tmp/constraints.txt" PIP_FIND_LINKS="$out ${PIP_FIND_LINKS:-}" \
    "$python" -m pip wheel -q --no-deps -w "$out" "$tmp/example_pkg"
else
  PIP_CONSTRAINT="$tmp/constraints.txt" PIP_FIND_LINKS="$out ${PIP_FIND_LINKS:-}" \
    "$python" -m build -q --wheel -o "$out" "$tmp/example_pkg" 2>&1 | grep -E 'jaxexport: (companion|example_pkg-)' || true
fi
"$python" -m pip download -q --no-deps -d "$out" flatbuffers archspec
ls -l "$out"
# what the wheel carries for a device: its executables per target, read from its manifest
"$python" - "$out" "$tpu_targets" <<'PY'
import collections, glob, json, sys, zipfile
out, asked = sys.argv[1], [t for t in sys.argv[2].split(",") if t]
found = collections.Counter()
for wheel in sorted(glob.glob(f"{out}/example_pkg-*.whl") +
                    glob.glob(f"{out}/example_pkg_jaxexport_*.whl")):
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.endswith("manifest.json") and "/_jaxexport/" in name:
                manifest = json.loads(archive.read(name))
                mine = collections.Counter((e["target"], e.get("device_kind", ""),
                                            e["platform_version"])
                                           for e in manifest.get("executables", []))
                for (target, kind, version), count in sorted(mine.items()):
                    print(f"{wheel.rsplit('/', 1)[-1]}: {count} executable(s) for {target} "
                          f"({kind or 'cpu'}; {' / '.join(version.splitlines())})")
                found.update(mine)
tpu = sum(count for (_, kind, _), count in found.items() if kind.startswith("TPU"))
if asked and not tpu:
    sys.exit(f"error: tpu-targets {asked} asked for, and the wheel has no TPU executable")
PY
