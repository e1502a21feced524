"""Target 7, search efficiency: on the digits MLP, ASHA reaches the best validation loss that
random search with FIFO reaches, in <= 0.5x the compute (epochs), median over 5 seeds.

For each seed: FIFO runs 16 trials x 12 epochs; its best val_loss is the target. ASHA runs
32 trials from the same seeded random searcher (its first 16 configs are FIFO's); its
compute to target is the number of epochs all its trials had run when its best val_loss
first reached the target (points in report order).

    python benchmarks/search_efficiency.py
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c


def _sweep_points(name: str) -> list[tuple[int, float]]:
    """(timestamp ms, val_loss) of every report of every trial of the sweep named ``name``."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{Path.cwd() / 'mlflow.db'}")
    runs = c.child_runs("bench_digits")
    parents = {r.data.tags["mlflow.parentRunId"] for r in runs}
    (parent,) = [p for p in parents if client.get_run(p).info.run_name == name]
    points = []
    for run in runs:
        if run.data.tags["mlflow.parentRunId"] == parent:
            points += [(m.timestamp, m.value) for m in c.metric_history(run.info.run_id, "val_loss")]
    return sorted(points)


def seed_arm(params: dict[str, Any]) -> dict[str, Any]:
    seed, trials = params["seed"], params["trials"]
    file = str(c.EXPERIMENTS / "digits_loss.py")
    common: dict[str, Any] = {"seed": seed, "overrides": {"epochs": params["epochs"]}}
    c.tunetrain_sweep(file, scheduler="fifo", num_samples=trials, name="fifo", **common)
    c.tunetrain_sweep(file, scheduler="asha", num_samples=2 * trials, name="asha", **common)
    fifo = _sweep_points("fifo")
    target = min(value for _, value in fifo)
    asha = _sweep_points("asha")
    best, reached = math.inf, None
    for spent, (_, value) in enumerate(asha, start=1):
        best = min(best, value)
        if best <= target:
            reached = spent
            break
    return {"fifo_compute": len(fifo), "target": target, "asha_compute": reached, "asha_total": len(asha)}


ARMS = {"seed": seed_arm}


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    if c.arm_main(ARMS, args):
        return
    root = c.work_root("search_efficiency")
    seeds, params = (1, {"trials": 2, "epochs": 2}) if args.smoke else (5, {"trials": 16, "epochs": 12})
    rows, ratios = [], []
    for seed in range(seeds):
        r = c.run_arm("search_efficiency.py", "seed", {**params, "seed": seed}, workdir=root / f"seed{seed}")
        ratio = r["asha_compute"] / r["fifo_compute"] if r["asha_compute"] is not None else math.inf
        ratios.append(ratio)
        reached = r["asha_compute"] if r["asha_compute"] is not None else f"not reached ({r['asha_total']} run)"
        rows.append([seed, r["target"], r["fifo_compute"], reached, ratio])
    median = c.median(ratios)
    print(
        c.section(
            title="7. Search efficiency",
            command="python benchmarks/search_efficiency.py",
            target="ASHA reaches random search's (FIFO's) best val_loss in <= 0.5x the compute, median over 5 seeds",
            headers=["seed", "FIFO best val_loss", "FIFO epochs", "ASHA epochs to reach it", "ratio"],
            rows=rows,
            verdict=c.verdict(median <= 0.5, f"median ratio {median:.3f}"),
            notes=f"{params['trials']} FIFO trials x {params['epochs']} epochs; ASHA (grace 1, reduction factor 2, "
            f"max_t {params['epochs']}) with {2 * params['trials']} trials from the same seeded random searcher.",
        )
    )


if __name__ == "__main__":
    main()
