# A benchmark experiment for PBT: each iteration burns `compute_s` seconds of CPU time and
# reports with a checkpoint of the step reached (PBT hands it to the recipient); `t_report`
# is the report's wall-clock time, `restored` whether the loop started from a checkpoint.
#
#   python -m tunetrain sweep benchmarks/experiments/pbt_busy.py --workers-per-trial 2

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import ray.train
from ray import tune

from tunetrain import Experiment, StopRule, load_experiment

# busy.py's CPU burner, loaded as tunetrain loads experiments (shipped to workers by value).
load_experiment(Path(__file__).resolve().parent / "busy.py")
burn = sys.modules["tunetrain_experiment_busy"].burn


def train_loop(config: dict[str, Any]) -> None:
    step, restored = 0, 0.0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            step, restored = json.load(f)["step"], 1.0
    while step < config["iterations"]:
        used = burn(config["compute_s"])
        step += 1
        metrics = {"score": config["rate"] * step, "compute_s": used, "t_report": time.time(), "restored": restored}
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step}, f)
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


experiment = Experiment(
    name="bench_pbt",  # MLflow experiment
    train_loop=train_loop,  # burns CPU, checkpoints every iteration
    space={"rate": tune.grid_search([1.0, 1000.0])},  # the population: 2 trials; the faster rate wins
    defaults={
        "iterations": 12,  # reports per trial
        "compute_s": 0.3,  # CPU seconds per iteration
    },
    metric="score",  # higher is better
    mode="max",
    scheduler="pbt",  # the worse trial takes the better one's checkpoint every 4 steps
    scheduler_options={"perturbation_interval": 4, "quantile_fraction": 0.5, "synch": True},
    searcher="random",  # the grid's points, once each
    num_samples=1,  # samples of the grid
    workers_per_trial=2,  # DDP-sized trials ...
    resources_per_worker={"CPU": 0.5},  # ... both trials side by side on 2 CPUs
    stop=StopRule(max_iterations=12),
    seed=0,  # root seed
)
