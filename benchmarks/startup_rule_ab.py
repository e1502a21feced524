"""Same-script A/B of how tunetrain's TPE starts when trials run side by side (issue 40):
exactly ``n_startup_trials`` random draws whatever the concurrency, the rest with the running
trials as liars ("exact", FidelityTPESearch today), against random draws until
``n_startup_trials`` trials have a result ("results", the rule of Optuna's TPESampler that
Ray's stock OptunaSearch inherits: at k trials at once it draws up to k - 1 more at random),
and Ray's stock ``OptunaSearch`` itself ("stock").

    python benchmarks/startup_rule_ab.py                      # 40 seeds, trial lengths 0.5-1.5 s
    python benchmarks/startup_rule_ab.py --equal-cost         # every trial 1 s long
    python benchmarks/startup_rule_ab.py --seeds 10 --ks 4    # fewer

Single-fidelity problems (Branin, Hartmann-6), FIFO, 60 trials, regret of the best trial;
the ``tunetrain optuna`` and ``Ray OptunaSearch`` arms of search_quality.py. Seeds are paired
(seed s draws the same first configurations under every rule), so each problem and k gets a
paired Wilcoxon signed-rank test of "exact" against "stock" beside the medians. The raw
results go to the work folder's startup_rule_ab/results.json."""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c

RULES = ("exact", "results", "stock")
PROBLEMS = ("branin", "hartmann6")
TRIALS = 60

Job = tuple[str, str, int, int, bool]


def _results_rule(self: Any, number: int, known: list[Any]) -> bool:
    """Random while fewer than n_startup_trials trials have a result (Optuna's TPESampler)."""
    from tunetrain.algorithms import _tpe

    done = sum(1 for t in known if t.state in _tpe._FINISHED or t.intermediate_values)
    return bool(number < self._n_startup or done < self._n_startup)


def _job(job: Job) -> tuple[str, str, int, int, float]:
    rule, name, k, seed, equal = job
    if equal:  # read by _search_arms._sf_cost in this worker process
        os.environ["TUNETRAIN_BENCH_EQUAL_COST"] = "1"
    import search_quality

    from tunetrain.algorithms import _tpe

    # The worker keeps the real rule once, then swaps in Optuna's for "results" jobs.
    real = globals().setdefault("_real_starting", _tpe.FidelityTPESearch._starting)
    _tpe.FidelityTPESearch._starting = _results_rule if rule == "results" else real  # type: ignore[method-assign]
    arm = "Ray OptunaSearch" if rule == "stock" else "tunetrain optuna"
    result = search_quality.run_one((name, arm, k, seed, TRIALS))
    return rule, name, k, seed, float(result["curve"][-1])


def main() -> None:
    from scipy.stats import wilcoxon

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--ks", nargs="+", type=int, default=[4, 8])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--equal-cost", action="store_true", help="every trial 1 s long")
    args = parser.parse_args()
    jobs = [(r, n, k, s, args.equal_cost) for n in PROBLEMS for k in args.ks for s in range(args.seeds) for r in RULES]
    with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
        results = pool.map(_job, jobs, chunksize=1)
    out = c.work_root("startup_rule_ab") / "results.json"
    out.write_text(json.dumps(results))
    print(f"results: {out}", file=sys.stderr)
    regret = {(rule, n, k, s): v for rule, n, k, s, v in results}
    print("| problem | k | " + " | ".join(RULES) + " | exact below stock | Wilcoxon p |")
    print("| --- | --- |" + " --- |" * (len(RULES) + 2))
    for n in PROBLEMS:
        for k in args.ks:
            cells = []
            for rule in RULES:
                values = [regret[(rule, n, k, s)] for s in range(args.seeds)]
                q = statistics.quantiles(values, n=4)
                cells.append(f"{statistics.median(values):.3g} [{q[0]:.3g}-{q[2]:.3g}]")
            exact = [regret[("exact", n, k, s)] for s in range(args.seeds)]
            stock = [regret[("stock", n, k, s)] for s in range(args.seeds)]
            wins = sum(a < b for a, b in zip(exact, stock, strict=True))
            p = float(wilcoxon(exact, stock).pvalue)
            print(f"| {n} | {k} | " + " | ".join(cells) + f" | {wins}/{args.seeds} | {p:.2f} |")


if __name__ == "__main__":
    main()
