# Real learning curves for the search benchmark (issue 40): a small 1-D CNN on MNIST-1D (the
# `mnist1d` package generates it, no download; 4,000 training and 1,000 held-out sequences of
# 40), every config of a 300-point grid of 4 hyperparameters (log-scaled learning rate,
# integer channels, categorical optimizer, log-scaled weight decay) trained 20 epochs;
# val_loss and the epoch's wall time at every epoch.
#
#   python -m tunetrain sweep benchmarks/experiments/curves_mnist1d.py --no-report --no-register
#
# benchmarks/record_curves.py runs it (and a second seed of every 6th config) and writes
# benchmarks/data/curves_mnist1d.json.gz, which benchmarks/_curves.py replays.

from __future__ import annotations

import os
import tempfile
import time
from pathlib import Path
from typing import Any

import ray.train
import torch
from ray import tune
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tunetrain import CheckpointPolicy, Experiment, StopRule

EPOCHS = 2 if os.environ.get("CURVES_SMOKE") else 20
SPACE: dict[str, list[Any]] = {
    "lr": [3e-4, 1e-3, 3e-3, 1e-2, 3e-2],
    "channels": [8, 16, 32, 64],
    "optimizer": ["adam", "sgd", "rmsprop"],
    "weight_decay": [0.0, 1e-5, 1e-4, 1e-3, 1e-2],
}
# The second seed (benchmarks/record_curves.py sets CURVES_REPEAT=1): a 60-config sub-grid.
REPEAT_SPACE = {**SPACE, "channels": [8, 32], "weight_decay": [0.0, 1e-4]}


def make_datasets() -> tuple[TensorDataset, TensorDataset]:
    """The package's default, seeded data set, generated once per machine (1.5 s) and kept in
    the temporary folder: the train loop is shipped to Ray's workers by value, so a cache in
    this module would not outlive a trial."""
    path = Path(tempfile.gettempdir()) / "tunetrain-mnist1d-default.pt"
    if not path.exists():
        from mnist1d.data import get_dataset_args, make_dataset

        data = make_dataset(get_dataset_args())
        part = path.with_suffix(f".{os.getpid()}.part")
        torch.save({k: torch.tensor(data[k]) for k in ("x", "y", "x_test", "y_test")}, part)
        os.replace(part, path)
    data = torch.load(path)
    as_set = lambda x, y: TensorDataset(x.float().unsqueeze(1), y.long())
    return as_set(data["x"], data["y"]), as_set(data["x_test"], data["y_test"])


def build_model(channels: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv1d(1, channels, 5, padding=2), nn.ReLU(),
        nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
        nn.Conv1d(channels, channels, 3, stride=2, padding=1), nn.ReLU(),
        nn.Flatten(), nn.Linear(channels * 10, 10),
    )  # fmt: skip


def train_loop(config: dict[str, Any]) -> None:
    torch.set_num_threads(1)  # one CPU per trial: two side by side on 2 cores, as timed
    train_set, val_set = make_datasets()
    train_loader = DataLoader(train_set, batch_size=64, shuffle=True)
    val_loader = DataLoader(val_set, batch_size=500)
    model = build_model(config["channels"])
    options = {"lr": config["lr"], "weight_decay": config["weight_decay"]}
    optimizer: torch.optim.Optimizer = {
        "adam": lambda: torch.optim.Adam(model.parameters(), **options),
        "sgd": lambda: torch.optim.SGD(model.parameters(), momentum=0.9, **options),
        "rmsprop": lambda: torch.optim.RMSprop(model.parameters(), **options),
    }[config["optimizer"]]()
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
        loss = val_loss / len(val_set)
        ray.train.report(
            {
                "val_loss": loss if loss == loss and loss < 1e6 else 1e6,  # a diverged trial: its worst, recorded
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
    name="curves_mnist1d",
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
