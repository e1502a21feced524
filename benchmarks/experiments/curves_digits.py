# Real learning curves for the search benchmark (issue 40): the digits MLP, every config of a
# 300-point grid of 4 hyperparameters (log-scaled learning rate, integer width, categorical
# optimizer, dropout) trained 20 epochs; val_loss and the epoch's wall time at every epoch.
#
#   python -m tunetrain sweep benchmarks/experiments/curves_digits.py --no-report --no-register
#
# benchmarks/record_curves.py runs it (and a second seed of every 6th config) and writes
# benchmarks/data/curves_digits.json.gz, which benchmarks/_curves.py replays.

from __future__ import annotations

import os
import time
from typing import Any

import ray.train
import torch
from ray import tune
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tunetrain import CheckpointPolicy, Experiment, StopRule

EPOCHS = 2 if os.environ.get("CURVES_SMOKE") else 20
SPACE: dict[str, list[Any]] = {
    "lr": [1e-4, 3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
    "hidden": [16, 32, 64, 128, 256],
    "optimizer": ["adam", "sgd"],
    "dropout": [0.0, 0.1, 0.2, 0.3, 0.5],
}
# The second seed (benchmarks/record_curves.py sets CURVES_REPEAT=1): a 72-config sub-grid.
REPEAT_SPACE = {**SPACE, "hidden": [16, 64, 256], "dropout": [0.0, 0.3]}


def make_datasets() -> tuple[TensorDataset, TensorDataset]:
    """Digits, split 80/20 and standardised as experiments/mlp_digits.py does (fixed split)."""
    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_train)
    to_tensor = lambda a: torch.tensor(scaler.transform(a), dtype=torch.float32)
    return TensorDataset(to_tensor(x_train), torch.tensor(y_train)), TensorDataset(
        to_tensor(x_val), torch.tensor(y_val)
    )


def train_loop(config: dict[str, Any]) -> None:
    torch.set_num_threads(1)  # one CPU per trial: two side by side on 2 cores, as timed
    train_set, val_set = make_datasets()
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=512)
    model = nn.Sequential(
        nn.Linear(64, config["hidden"]), nn.ReLU(), nn.Dropout(config["dropout"]), nn.Linear(config["hidden"], 10)
    )
    if config["optimizer"] == "sgd":
        optimizer: torch.optim.Optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"], momentum=0.9)
    else:
        optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    loss_fn = nn.CrossEntropyLoss()
    for _ in range(EPOCHS):
        start = time.perf_counter()
        model.train()
        for x, y in train_loader:
            optimizer.zero_grad()
            loss_fn(model(x), y).backward()
            optimizer.step()
        model.eval()
        val_loss, correct = 0.0, 0
        with torch.no_grad():
            for x, y in val_loader:
                logits = model(x)
                val_loss += loss_fn(logits, y).item() * len(y)
                correct += (logits.argmax(dim=1) == y).sum().item()
        ray.train.report(
            {
                "val_loss": val_loss / len(val_set),
                "val_acc": correct / len(val_set),
                "epoch_s": time.perf_counter() - start,
            }
        )


def grid_space() -> dict[str, Any]:
    """The full grid; the second seed's sub-grid (CURVES_REPEAT=1); the 4 configs of
    benchmarks/record_curves.py --smoke (CURVES_SMOKE=1)."""
    if os.environ.get("CURVES_SMOKE"):
        return {k: tune.grid_search(v[:2]) if k in ("lr", "optimizer") else v[0] for k, v in SPACE.items()}
    chosen = REPEAT_SPACE if os.environ.get("CURVES_REPEAT") else SPACE
    return {k: tune.grid_search(v) for k, v in chosen.items()}


experiment = Experiment(
    name="curves_digits",
    train_loop=train_loop,
    space=grid_space(),
    metric="val_loss",
    mode="min",
    scheduler="fifo",
    searcher="grid",
    num_samples=1,
    resources_per_worker={"CPU": 1},
    stop=StopRule(max_iterations=EPOCHS),
    seed=0,
    baseline=False,
    checkpoint=CheckpointPolicy(num_to_keep=1),
)
