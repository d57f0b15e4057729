"""What each jax release a wheel serves costs: build time and wheel size against the number of
jax releases baked (``jax-releases``).

    python benchmarks/jax_releases.py [--releases 0.9.2,0.8.1,0.6.2] [--package example_pkg]

Builds ``example_pkg`` (14 functions: symbolic and fixed shapes, gradients, pytrees,
concrete-size forms, cpu and cuda) as a wheel with hatchling's builder in this process (the
exports run in their worker processes, as in any build), first with this environment's jax
alone, then adding one more release of ``--releases`` per row. Each row's releases export in
environments made beforehand (``bake.jax_envs``, in the user's cache folder), so the build time
is the exports' own; making an environment, once per release and machine, is printed apart.
Prints one markdown table: releases baked, build seconds, wheel bytes (compressed), the
artifact folder's bytes and files, and each against the one-release build.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run from a checkout without installing


def _build(project: Path, releases: list[str], out: Path) -> tuple[float, Path]:
    """Build ``project``'s wheel with ``jax-releases = releases``: seconds and the wheel."""
    from hatchling.builders.wheel import WheelBuilder
    from hatchling.plugin.manager import PluginManager

    from hatch_jaxexport.integrations import hatch_plugin

    pyproject = project / "pyproject.toml"
    text = pyproject.read_text().split("\njax-releases", 1)[0].rstrip("\n")
    pyproject.write_text(text + (f"\njax-releases = {releases!r}\n".replace("'", '"')
                                 if releases else "\n"))
    manager = PluginManager()
    manager.manager.register(hatch_plugin, name="jaxexport")
    shutil.rmtree(out, ignore_errors=True)
    started = time.perf_counter()
    (wheel,) = WheelBuilder(str(project), plugin_manager=manager).build(
        directory=str(out), versions=["standard"])
    return time.perf_counter() - started, Path(wheel)


def _folder(wheel: Path, package: str) -> tuple[int, int]:
    """The artifact folder's uncompressed bytes and file count in ``wheel``."""
    with zipfile.ZipFile(wheel) as archive:
        infos = [i for i in archive.infolist() if i.filename.startswith(f"{package}/_jaxexport/")]
    return sum(i.file_size for i in infos), len(infos)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--releases", default="0.9.2,0.8.1,0.6.2",
                        help="the other jax releases, added one per row (comma-separated)")
    parser.add_argument("--package", default="example_pkg")
    args = parser.parse_args(argv)
    import jax

    from hatch_jaxexport.bake.jax_envs import environment_python
    from hatch_jaxexport.bake.workers.orchestrate import list_tasks  # noqa: F401 - warms imports

    releases = [v for v in args.releases.split(",") if v and v != jax.__version__]
    for version in releases:  # made once per machine; the rows measure the exports alone
        started = time.perf_counter()
        environment_python(version, [], lambda line: None)
        print(f"environment with jax {version}: {time.perf_counter() - started:.1f} s "
              "(made once per machine and release, then reused)")
    with tempfile.TemporaryDirectory(prefix="jax-releases-bench-") as tmp:
        project = Path(shutil.copytree(ROOT / args.package, Path(tmp) / "project",
                                       ignore=shutil.ignore_patterns("_jaxexport", "dist")))
        rows = []
        for count in range(len(releases) + 1):
            seconds, wheel = _build(project, releases[:count], Path(tmp) / "dist")
            folder, files = _folder(wheel, args.package)
            rows.append((", ".join([jax.__version__, *releases[:count]]), seconds,
                         wheel.stat().st_size, folder, files))
    base = rows[0]
    print(f"\n{args.package}, built with jax {jax.__version__} on Python "
          f"{sys.version.split()[0]}\n")
    print("| jax releases baked | build s | x | wheel bytes | x | artifact bytes | x | files |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, seconds, size, folder, files in rows:
        print(f"| {name} | {seconds:.1f} | {seconds / base[1]:.2f} | {size:,} | "
              f"{size / base[2]:.2f} | {folder:,} | {folder / base[3]:.2f} | {files} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
