"""Target 1, trial start-up: from a trial's start to its first report, minus the first
iteration's compute, for tunetrain's single-worker (in-process) and 2-worker (reused worker
group, and a TorchTrainer per trial) trials against the naive nested-TorchTrainer pattern (a Tune function that builds a
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
        trial_runner=params.get("runner", "auto"),
        overrides={"iterations": 2, "compute_s": 0.2},
    )
    startups = []
    for run in sorted(c.child_runs("bench_busy"), key=lambda r: int(r.data.tags["tunetrain.trial_index"])):
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
    c.init_ray(num_cpus=workers + 1, log_to_driver=False, include_dashboard=False)
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
    later: dict[tuple[str, int], float] = {}  # trials after the first one (a warm slot)
    arms = [(1, "naive", "auto"), (1, "tunetrain", "auto")]
    if not args.smoke:
        arms += [(2, "naive", "auto"), (2, "tunetrain", "torch_trainer"), (2, "tunetrain", "worker_group")]
    labels = {
        "naive": "naive nested TorchTrainer",
        "auto": "tunetrain in process",
        "torch_trainer": "tunetrain TorchTrainer",
        "worker_group": "tunetrain worker group",
    }
    for workers, arm, runner in arms:
        key = arm if arm == "naive" else runner
        result = c.run_arm(
            "startup.py",
            arm,
            {"trials": trials, "workers": workers, "runner": runner},
            workdir=root / f"{key}{workers}",
        )
        startups = result["startups"]
        medians[key, workers] = c.median(startups)
        later[key, workers] = c.median(startups[1:]) if len(startups) > 1 else float("nan")
        rows.append(
            [f"{workers}", labels[key], trials, startups[0], later[key, workers], medians[key, workers], max(startups)]
        )
    one = medians["auto", 1]
    two_first = medians.get(("worker_group", 2), float("nan"))
    two_later = later.get(("worker_group", 2), float("nan"))
    first_group = rows[-1][3] if not args.smoke else float("nan")
    first_trainer = rows[-2][3] if not args.smoke else float("nan")
    ratio = {
        w: medians.get(("auto" if w == 1 else "worker_group", w), float("nan"))
        / medians.get(("naive", w), float("nan"))
        for w in (1, 2)
    }
    met = one <= 1.0 and two_later <= 1.0 and first_group <= first_trainer * 1.1
    print(
        c.section(
            title="1. Trial start-up",
            command="python benchmarks/startup.py",
            target="<= 1 s for single-worker trials; 2-worker trials after a slot's first <= 1 s, the first "
            "no slower than a TorchTrainer trial (start to first report, minus the first iteration's compute)",
            headers=["workers", "pattern", "trials", "first s", "later median s", "median s", "max s"],
            rows=rows,
            verdict=c.verdict(
                met,
                f"1 worker {one:.2f} s; 2 workers (worker group) first {first_group:.2f} s against the "
                f"TorchTrainer's {first_trainer:.2f} s, later {two_later:.2f} s (median {two_first:.2f} s)",
            )
            + f" Ratio to the naive pattern: 1 worker {ratio[1]:.3f}x, 2 workers {ratio[2]:.3f}x.",
            notes="Trials run one at a time (`--max-concurrent 1`), 2 iterations of 0.2 s CPU each. The first trial of "
            "each arm includes Ray's cold worker start (and, for the worker group, starting its workers and "
            "the torch process group); the later ones reuse the trial process (and its group).",
        )
    )


if __name__ == "__main__":
    main()
