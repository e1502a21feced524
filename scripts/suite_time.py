"""Where the suite's time goes, from a pytest log that printed every test's duration.

    CI=true PYTEST_ADDOPTS=--durations=0 bash .ci/run > ci.log 2>&1
    python scripts/suite_time.py ci.log

Splits the time (call, setup and teardown together, per test) three ways: the tests marked
``own_ray`` (a sweep in a process of its own, a cluster, a kernel, a benchmark script), the
other tests of 10 s or more, and the rest; then lists the first two groups, slowest first.
The ``own_ray`` tests are collected here (``pytest --collect-only -m own_ray``), so run it
from the checkout that made the log."""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
from pathlib import Path

DURATION = re.compile(r"([\d.]+)s (?:call|setup|teardown)\s+(\S+)")


def own_ray_tests() -> set[str]:
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "own_ray"],
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.strip() for line in done.stdout.splitlines() if "::" in line}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("log", help="a pytest log with --durations=0")
    args = parser.parse_args()
    per_test: collections.defaultdict[str, float] = collections.defaultdict(float)
    for line in Path(args.log).read_text().splitlines():
        if match := DURATION.match(line):
            per_test[match.group(2)] += float(match.group(1))
    own = own_ray_tests()
    groups = {
        "own_ray": {t: s for t, s in per_test.items() if t in own},
        "other tests of 10 s or more": {t: s for t, s in per_test.items() if t not in own and s >= 10},
        "the rest": {t: s for t, s in per_test.items() if t not in own and s < 10},
    }
    print(f"{sum(per_test.values()):.0f} s in {len(per_test)} tests (pytest leaves out those under 5 ms)")
    for name, tests in groups.items():
        print(f"{name}: {sum(tests.values()):.0f} s in {len(tests)} tests")
    for name in ("own_ray", "other tests of 10 s or more"):
        print(f"\n{name}:")
        for test, seconds in sorted(groups[name].items(), key=lambda item: -item[1]):
            print(f"  {seconds:6.1f}  {test}")


if __name__ == "__main__":
    main()
