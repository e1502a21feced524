# A benchmark experiment: each iteration burns `compute_s` seconds of CPU time, then reports.
# The reported `compute_s` is the CPU time really used (what counts as trial compute) and
# `t_report` the wall-clock time of the report (for start-up measurements).
#
#   python -m tunetrain sweep benchmarks/experiments/busy.py --set iterations=3 --set compute_s=0.2

from __future__ import annotations

import time
from typing import Any

import ray.train
from ray import tune

from tunetrain import Experiment


def burn(seconds: float) -> float:
    """Busy this thread for `seconds` of CPU time; returns the CPU time really used."""
    start = time.thread_time()
    x = 1.0
    while time.thread_time() - start < seconds:
        for _ in range(2000):
            x = x * 1.0000001 + 1e-9
    return time.thread_time() - start


def train_loop(config: dict[str, Any]) -> None:
    for step in range(config["iterations"]):
        used = burn(config["compute_s"])
        loss = (config["x"] - 0.3) ** 2 + 1.0 / (step + 1)  # better x, lower loss; falls with steps
        ray.train.report({"loss": loss, "compute_s": used, "t_report": time.time()})


experiment = Experiment(
    name="bench_busy",  # MLflow experiment
    train_loop=train_loop,  # burns CPU, reports once per iteration
    space={"x": tune.uniform(0.0, 1.0)},  # the one hyperparameter; the optimum is x=0.3
    defaults={
        "iterations": 3,  # reports per trial
        "compute_s": 0.2,  # CPU seconds per iteration
    },
    metric="loss",  # lower is better
    mode="min",
    scheduler="fifo",  # every trial runs to its end unless --scheduler asha
    searcher="random",  # seeded random search
    num_samples=4,  # trials
    seed=0,  # root seed
)
