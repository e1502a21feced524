"""Target 1, trial start-up: from a trial's start to its first report, minus the first
iteration's compute, for tunetrain's single-worker (in-process) and 2-worker (TorchTrainer)
trials against the naive nested-TorchTrainer pattern (a Tune function that builds a
TorchTrainer with TuneReportCallback and calls fit(), everything at Ray's defaults).

Both sides measure the same two events: Tune's ``on_trial_start`` (tunetrain records it as
the MLflow run's start time) and the first report's wall-clock time (reported by the loop).

    python benchmarks/startup.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c


def tunetrain_arm(params: dict[str, Any]) -> dict[str, Any]:
    c.tunetrain_sweep(
        str(c.EXPERIMENTS / "busy.py"),
        num_samples=params["trials"],
        max_concurrent=1,
        workers_per_trial=params["workers"],
        overrides={"iterations": 2, "compute_s": 0.2},
    )
    startups = []
    for run in c.child_runs("bench_busy"):
        first_report = c.metric_history(run.info.run_id, "t_report")[0].value
        compute = c.metric_history(run.info.run_id, "compute_s")[0].value
        startups.append(first_report - run.info.start_time / 1000 - compute)
    return {"startups": startups}


def naive_arm(params: dict[str, Any]) -> dict[str, Any]:
    import ray
    from ray import tune
    from ray.train import RunConfig, ScalingConfig
    from ray.train.torch import TorchTrainer
    from ray.tune.integration.ray_train import TuneReportCallback

    burn = c.busy_module().burn
    workers = params["workers"]
    # The naive driver holds Tune's default 1 CPU: give Ray one logical CPU per worker plus
    # one for the driver, or 2-worker trials could never start on 2 CPUs.
    ray.init(num_cpus=workers + 1, log_to_driver=False, include_dashboard=False)
    storage = str(Path.cwd() / "naive")

    def loop(config: dict[str, Any]) -> None:
        for step in range(2):
            used = burn(0.2)
            ray.train.report({"loss": 1.0 / (step + 1), "compute_s": used, "t_report": time.time()})

    def trial(config: dict[str, Any]) -> None:
        TorchTrainer(
            loop,
            train_loop_config=config,
            scaling_config=ScalingConfig(num_workers=workers),
            run_config=RunConfig(storage_path=storage, callbacks=[TuneReportCallback()]),  # type: ignore[list-item]
        ).fit()

    class Clock(tune.Callback):
        def __init__(self) -> None:
            self.start: dict[str, float] = {}
            self.startups: list[float] = []

        def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            self.start[trial.trial_id] = time.time()

        def on_trial_result(
            self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
        ) -> None:
            if result["training_iteration"] == 1:
                self.startups.append(result["t_report"] - self.start[trial.trial_id] - result["compute_s"])

    clock = Clock()
    tune.Tuner(
        trial,
        param_space={"x": tune.uniform(0, 1)},
        tune_config=tune.TuneConfig(num_samples=params["trials"], max_concurrent_trials=1),
        run_config=tune.RunConfig(storage_path=storage, callbacks=[clock], verbose=0),
    ).fit()
    return {"startups": clock.startups}


ARMS = {"tunetrain": tunetrain_arm, "naive": naive_arm}


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    if c.arm_main(ARMS, args):
        return
    root = c.work_root("startup")
    trials = 1 if args.smoke else max(3, args.repeats)
    rows = []
    medians: dict[tuple[str, int], float] = {}
    for workers in (1,) if args.smoke else (1, 2):
        for arm in ("naive", "tunetrain"):
            result = c.run_arm(
                "startup.py", arm, {"trials": trials, "workers": workers}, workdir=root / f"{arm}{workers}"
            )
            medians[arm, workers] = c.median(result["startups"])
            label = (
                "naive nested TorchTrainer"
                if arm == "naive"
                else "tunetrain " + ("in process" if workers == 1 else "TorchTrainer")
            )
            rows.append(
                [f"{workers}", label, trials, medians[arm, workers], min(result["startups"]), max(result["startups"])]
            )
    one, two = medians["tunetrain", 1], medians.get(("tunetrain", 2), float("nan"))
    ratio = {w: medians.get(("tunetrain", w), float("nan")) / medians.get(("naive", w), float("nan")) for w in (1, 2)}
    print(
        c.section(
            title="1. Trial start-up",
            command="python benchmarks/startup.py",
            target="<= 1 s for single-worker trials, <= 8 s for 2-worker DDP trials "
            "(start to first report, minus the first iteration's compute)",
            headers=["workers", "pattern", "trials", "median s", "min s", "max s"],
            rows=rows,
            verdict=c.verdict(one <= 1.0 and two <= 8.0, f"1 worker {one:.2f} s, 2 workers {two:.2f} s")
            + f" Ratio to the naive pattern: 1 worker {ratio[1]:.3f}x, 2 workers {ratio[2]:.3f}x.",
            notes="Trials run one at a time (`--max-concurrent 1`), 2 iterations of 0.2 s CPU each. The first trial of "
            "each arm includes Ray's cold worker start.",
        )
    )


if __name__ == "__main__":
    main()
