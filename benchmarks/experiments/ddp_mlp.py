# A benchmark experiment: a 3-layer MLP trained with DDP on a fixed random batch; each report
# gives the mean iteration time of the last `block` iterations (`iter_s`).
#
#   python -m tunetrain sweep benchmarks/experiments/ddp_mlp.py --workers-per-trial 2

from __future__ import annotations

import time
from typing import Any

import ray.train
import ray.train.torch
import torch
from ray import tune

from tunetrain import Experiment


def make_model() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(256, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 1024),
        torch.nn.ReLU(),
        torch.nn.Linear(1024, 10),
    )


def train_block(model: torch.nn.Module, optimizer: torch.optim.Optimizer, iterations: int) -> tuple[float, float]:
    """`iterations` SGD steps on one fixed batch; returns (last loss, mean seconds per step)."""
    x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
    start = time.perf_counter()
    for _ in range(iterations):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
    return loss.item(), (time.perf_counter() - start) / iterations


def train_loop(config: dict[str, Any]) -> None:
    torch.set_num_threads(1)  # one CPU per worker
    model = ray.train.torch.prepare_model(make_model())  # DDP over the trial's workers
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    for _ in range(config["blocks"]):
        loss, iter_s = train_block(model, optimizer, config["block"])
        ray.train.report({"loss": loss, "iter_s": iter_s})


experiment = Experiment(
    name="bench_ddp",  # MLflow experiment
    train_loop=train_loop,  # DDP on every worker
    space={"lr": tune.loguniform(1e-3, 1e-1)},  # SGD learning rate
    defaults={
        "blocks": 15,  # reports per trial
        "block": 20,  # iterations per report
    },
    metric="loss",  # lower is better
    mode="min",
    scheduler="fifo",  # every trial runs to its end
    searcher="random",  # seeded random search
    num_samples=1,  # trials
    workers_per_trial=2,  # DDP processes per trial
    seed=0,  # root seed
)
