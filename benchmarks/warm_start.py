"""Warm start: on the Branin function (known optimum), 10 trials of an earlier sweep given to
Optuna's TPE (``--warm-start``) and 10 new ones reach a better regret than 10 cold trials,
median over 5 seeds. 20 cold trials are shown too: warm start against running more trials.

For each seed s: an earlier sweep of 10 trials (root seed 100 + s); a warm sweep of 10 trials
(root seed s) started from it; a cold sweep of 10 and one of 20 trials (root seed s). Regret is
the best loss found minus Branin's minimum (warm: over the earlier and the new trials).

    python benchmarks/warm_start.py
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c

OPTIMUM = 0.397887


def _best(name: str) -> float:
    from tunetrain.results.analysis import load_sweep

    return float(load_sweep(name).best(1).iloc[0]["best_loss"])


def seed_arm(params: dict[str, Any]) -> dict[str, Any]:
    seed, trials = params["seed"], params["trials"]
    file = str(c.EXPERIMENTS / "branin.py")
    c.tunetrain_sweep(file, num_samples=trials, seed=100 + seed, name="earlier", report=False, register=False)
    common: dict[str, Any] = {"seed": seed, "report": False, "register": False}
    c.tunetrain_sweep(file, num_samples=trials, warm_start=["earlier"], name="warm", **common)
    c.tunetrain_sweep(file, num_samples=trials, name="cold", **common)
    c.tunetrain_sweep(file, num_samples=2 * trials, name="cold2x", **common)
    return {
        "earlier": _best("earlier") - OPTIMUM,
        "warm": min(_best("earlier"), _best("warm")) - OPTIMUM,
        "warm_new": _best("warm") - OPTIMUM,
        "cold": _best("cold") - OPTIMUM,
        "cold2x": _best("cold2x") - OPTIMUM,
    }


ARMS = {"seed": seed_arm}


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    if c.arm_main(ARMS, args):
        return
    root = c.work_root("warm_start")
    seeds, trials = (1, 2) if args.smoke else (5, 10)
    results = [
        c.run_arm("warm_start.py", "seed", {"seed": seed, "trials": trials}, workdir=root / f"seed{seed}")
        for seed in range(seeds)
    ]
    rows = [[seed, r["earlier"], r["warm_new"], r["warm"], r["cold"], r["cold2x"]] for seed, r in enumerate(results)]
    warm, cold, cold2x = (c.median([r[key] for r in results]) for key in ("warm", "cold", "cold2x"))
    rows.append(["median", "", "", warm, cold, cold2x])
    print(
        c.section(
            title="13. Warm start",
            command="python benchmarks/warm_start.py",
            target=f"{trials} warm + {trials} new trials reach a better median regret than {trials} cold trials "
            f"(Branin, Optuna TPE, {seeds} seeds)",
            headers=[
                "seed",
                f"earlier {trials}: regret",
                f"warm {trials} new only",
                "warm: earlier + new",
                f"cold {trials}",
                f"cold {2 * trials}",
            ],
            rows=rows,
            verdict=c.verdict(warm < cold, f"median regret {warm:.4g} warm vs {cold:.4g} cold ({cold2x:.4g} cold x2)"),
            notes="Regret: best loss found - 0.397887 (Branin's minimum). One trial at a time, so that every "
            "suggestion sees every earlier result; the warm sweep's sampler draws from a seed of its own "
            "(docs/carry_forward.md).",
        )
    )


if __name__ == "__main__":
    main()
