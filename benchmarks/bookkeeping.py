"""Target 3, bookkeeping: 200 trials of 1 s with one result each, tracking on, against the
theoretical minimum (trials x 1 s / concurrent slots) and against plain Ray Tune function
trials with reused actors (no tracking) running the same trials.

Ray's own release gate for this shape of sweep is 1.28x the minimum.

    python benchmarks/bookkeeping.py
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c


def tunetrain_arm(params: dict[str, Any]) -> dict[str, Any]:
    seconds, _ = c.tunetrain_sweep(
        str(c.EXPERIMENTS / "busy.py"),
        num_samples=params["trials"],
        overrides={"iterations": 1, "compute_s": params["seconds"]},
    )
    runs = c.child_runs("bench_busy")
    assert len(runs) == params["trials"], "every trial has its MLflow run"
    return {"wall": seconds}


def tune_arm(params: dict[str, Any]) -> dict[str, Any]:
    from ray import tune

    burn = c.busy_module().burn
    c.init_ray(log_to_driver=False, include_dashboard=False)
    seconds = params["seconds"]

    def trial(config: dict[str, Any]) -> None:
        used = burn(seconds)
        tune.report({"loss": config["x"], "compute_s": used})

    start = time.perf_counter()
    tune.Tuner(
        tune.with_resources(trial, {"CPU": 1}),
        param_space={"x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(num_samples=params["trials"], reuse_actors=True),
        run_config=tune.RunConfig(storage_path=str(Path.cwd() / "tune"), verbose=0),
    ).fit()
    return {"wall": time.perf_counter() - start}


ARMS = {"tunetrain": tunetrain_arm, "tune": tune_arm}


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    if c.arm_main(ARMS, args):
        return
    root = c.work_root("bookkeeping")
    cpus = os.cpu_count() or 1
    trials, seconds, repeats = (6, 0.1, 1) if args.smoke else (200, 1.0, args.repeats)
    minimum = trials * seconds / cpus
    rows = []
    ratios: dict[str, float] = {}
    for arm in ("tune", "tunetrain"):
        walls = [
            c.run_arm("bookkeeping.py", arm, {"trials": trials, "seconds": seconds}, workdir=root / f"{arm}-{i}")[
                "wall"
            ]
            for i in range(repeats)
        ]
        ratios[arm] = c.median(walls) / minimum
        label = "plain Ray Tune (reuse_actors, no tracking)" if arm == "tune" else "tunetrain (MLflow on)"
        rows.append([label, trials, repeats, minimum, c.median(walls), ratios[arm]])
    print(
        c.section(
            title="3. Bookkeeping",
            command="python benchmarks/bookkeeping.py",
            target=f"{trials} trials x {seconds:g} s, one result each, tracking on: <= 1.3x the theoretical minimum",
            headers=["arm", "trials", "repeats", "minimum s", "median wall s", "ratio to minimum"],
            rows=rows,
            verdict=c.verdict(
                ratios["tunetrain"] <= 1.3, f"{ratios['tunetrain']:.3f}x (plain Ray Tune {ratios['tune']:.3f}x)"
            ),
            notes=f"Minimum = trials x {seconds:g} s / {cpus} concurrent slots (1 CPU per trial). Wall time is the "
            "sweep alone, without Ray's start-up.",
        )
    )


if __name__ == "__main__":
    main()
