"""Same-script A/B of ASHA's stops at a rung that misleads (issue 40): Ray's ASHA unchanged
("old") against tunetrain's, where a rung whose values rank the trials unlike the next rung
stops no trial ("new", tunetrain.algorithms._rung_trust).

    cd benchmarks && python rung_rule_ab.py mfh 10       # the 8 mfh tasks, 10 seeds
    cd benchmarks && python rung_rule_ab.py curves 10    # the recorded real curves

Only the ``tunetrain async_bohb`` arm of search_quality.py (what ``auto`` is under ASHA), at
k = 1, 4 and 8, the same budget (30 full trials of compute), as budget_rule_ab.py compares
the model's budget rules. Prints each task's median final regret per rule and the geometric
mean over the tasks; the raw results go to /tmp/rung_rule_ab_<family>.json. 2 processes."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from budget_rule_ab import compare


def _job(job: tuple[str, str, int, int]) -> tuple[str, str, int, int, float]:
    import search_quality

    from tunetrain.algorithms import _rung_trust

    rule, name, k, seed = job
    # The worker keeps the real check once, then swaps in "never misleads" for "old" jobs.
    real = globals().setdefault("_real_misleads", _rung_trust.SkipsMisleadingRungs._misleads)
    _rung_trust.SkipsMisleadingRungs._misleads = (lambda self, rung: False) if rule == "old" else real  # type: ignore[method-assign]
    result = search_quality.run_one((name, "tunetrain async_bohb", k, seed, search_quality.BUDGET_TRIALS))
    return rule, name, k, seed, result["curve"][-1][-1]


if __name__ == "__main__":
    compare(
        sys.argv[1] if len(sys.argv) > 1 else "mfh", int(sys.argv[2]) if len(sys.argv) > 2 else 10, _job, "rung_rule_ab"
    )
