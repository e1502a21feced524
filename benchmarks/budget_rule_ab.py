"""Same-script A/B of the budget ``async_bohb`` fits its model on (issue 40): BOHB's rule alone
("old") against BOHB's rule moved up to a later budget when the rung measure says the budget
misleads ("new", tunetrain.algorithms._tpe._trusted).

    cd benchmarks && python budget_rule_ab.py mfh 10       # the 8 mfh tasks, 10 seeds
    cd benchmarks && python budget_rule_ab.py curves 10    # the recorded real curves

Only the ``tunetrain async_bohb`` arm of search_quality.py, at k = 1, 4 and 8, the same budget
(30 full trials of compute). Prints each task's median final regret per rule and the geometric
mean over the tasks; the raw results go to /tmp/budget_rule_ab_<family>.json. 2 processes."""

from __future__ import annotations

import json
import math
import multiprocessing
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

RULES = ("old", "new")
CONCURRENCY = (1, 4, 8)


def _job(job: tuple[str, str, int, int]) -> tuple[str, str, int, int, float]:
    import search_quality

    import tunetrain.algorithms._tpe as tpe

    rule, name, k, seed = job
    # The worker process keeps the real rule once, then swaps in BOHB's alone for "old" jobs.
    real = globals().setdefault("_real_trusted", tpe._trusted)
    tpe._trusted = (lambda known, budget, minimum=0: budget) if rule == "old" else real
    result = search_quality.run_one((name, "tunetrain async_bohb", k, seed, search_quality.BUDGET_TRIALS))
    return rule, name, k, seed, result["curve"][-1][-1]


def main(family: str, seeds: int) -> None:
    compare(family, seeds, _job, "budget_rule_ab")


def compare(family: str, seeds: int, job: Callable[[tuple[str, str, int, int]], Any], name: str) -> None:
    """Run ``job`` for each rule, task, k and seed (2 processes), print the medians and their
    geometric means, and keep the raw results in /tmp/<name>_<family>.json."""
    from _search_arms import CURVES, MFH

    names = CURVES if family == "curves" else MFH
    jobs = [(rule, n, k, s) for n in names for k in CONCURRENCY for s in range(seeds) for rule in RULES]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        results = pool.map(job, jobs, chunksize=1)
    Path(f"/tmp/{name}_{family}.json").write_text(json.dumps(results))
    finals: dict[tuple[str, str, int], list[float]] = {}
    for rule, n, k, _, value in results:
        finals.setdefault((rule, n, k), []).append(value)
    for k in CONCURRENCY:
        geomean: dict[str, Any] = {}
        for rule in RULES:
            medians = [statistics.median(finals[(rule, n, k)]) for n in names]
            geomean[rule] = math.exp(statistics.mean(math.log(max(m, 1e-6)) for m in medians))
            print(f"k={k} {rule}: " + " ".join(f"{n} {m:.4g}" for n, m in zip(names, medians, strict=True)))
        print(f"k={k} geometric mean: old {geomean['old']:.4g}, new {geomean['new']:.4g}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "mfh", int(sys.argv[2]) if len(sys.argv) > 2 else 10)
