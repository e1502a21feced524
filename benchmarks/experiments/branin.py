# A benchmark experiment with a known optimum: the Branin function (minimum 0.397887 at three
# points), one report per trial, no training. Regret = the best loss found - 0.397887.
#
#   python -m tunetrain sweep benchmarks/experiments/branin.py --num-samples 10

from __future__ import annotations

import math
from typing import Any

import ray.train
from ray import tune

from tunetrain import Experiment, StopRule

OPTIMUM = 0.397887  # Branin's global minimum


def branin(x1: float, x2: float) -> float:
    b, c, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x2 - b * x1**2 + c * x1 - 6) ** 2 + 10 * (1 - t) * math.cos(x1) + 10


def train_loop(config: dict[str, Any]) -> None:
    ray.train.report({"loss": branin(config["x1"], config["x2"])})


experiment = Experiment(
    name="bench_branin",  # MLflow experiment
    train_loop=train_loop,  # one report: the function's value
    space={"x1": tune.uniform(-5.0, 10.0), "x2": tune.uniform(0.0, 15.0)},  # Branin's usual domain
    metric="loss",  # the function's value
    mode="min",  # lower is better
    scheduler="fifo",  # nothing to stop early
    searcher="optuna",  # TPE: it learns from what it is given
    num_samples=10,  # trials per sweep
    stop=StopRule(max_iterations=1),  # one report each
    max_concurrent=1,  # sequential: each suggestion sees every earlier result
    seed=0,  # root seed
)
