"""The long run of the generated-packages test (issue 58): draw packages, build, install, call
and check each as ``tests/integration/test_generated_packages.py`` does, and print what they
covered.

    python scripts/generated_packages.py --examples 40 [--seed 7] [--keep DIR]

Every example runs to its end (no shrinking, no stop at the first failure); each failing
package is printed whole (its source and recording), then the summary line,
``N packages, M calls, 0 mismatches, 0 exceptions, ...``. Exits 1 if anything failed. Run it
with the project's environment (``.venvs/py-default/bin/python``); 30-45 s per package on
2 cores.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1] / "tests"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--examples", type=int, default=10, help="packages to draw")
    parser.add_argument("--seed", type=int, default=None, help="hypothesis seed (random if "
                        "not given)")
    parser.add_argument("--keep", type=Path, default=None, help="build in this folder and keep "
                        "it (default: a temporary folder, removed)")
    options = parser.parse_args()
    sys.path.insert(0, str(TESTS))
    import conftest
    from _genpkg import Tally, exercise, packages, report
    from hypothesis import HealthCheck, Phase, given, seed, settings

    conftest._share_bytecode()
    tally = Tally()
    broken: list[str] = []
    with tempfile.TemporaryDirectory(prefix="jaxexport-generated-") as scratch:
        root = options.keep or Path(scratch)

        @settings(max_examples=options.examples, deadline=None, database=None,
                  phases=[Phase.generate],
                  suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
        @given(packages())
        def draw(package) -> None:  # type: ignore[no-untyped-def]
            index = tally.packages + len(broken)
            try:
                failures = exercise(package, root / f"package-{index}", tally)
            except Exception as err:  # a recording run, the build or the install failed
                broken.append(f"package {index}: {err}")
                tally.exceptions.append(broken[-1])
                failures = [broken[-1]]
            print(f"package {index}: {len(package.functions)} function(s), "
                  f"{len(failures)} failure(s); {tally.line()}", flush=True)
            if failures:
                print(report(package, failures), flush=True)

        if options.seed is not None:
            draw = seed(options.seed)(draw)
        draw()
    print(tally.line())
    return 1 if tally.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
