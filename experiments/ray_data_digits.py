# A logistic-regression-sized MLP on scikit-learn's bundled digits (no download), read through
# Ray Data as a Ray Train loop reads it: ray.train.get_dataset_shard("train").iter_torch_batches.
#
#   python -m tunetrain sweep experiments/ray_data_digits.py
#   python -m tunetrain sweep experiments/ray_data_digits.py --workers-per-trial 2 --num-samples 2
#
# The datasets are built once per sweep (the functions below run in the driver after Ray
# starts), materialized in Ray's object store and split for each trial's workers as a
# TorchTrainer splits them: each worker of a 2-worker trial reads its half of each epoch.

from __future__ import annotations

import numpy as np
import ray.data
import ray.train
import ray.train.torch
import torch
from ray import tune
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn

from tunetrain import Experiment, StopRule


def _split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=0, stratify=y)
    scaler = StandardScaler().fit(x_train)
    return scaler.transform(x_train).astype(np.float32), scaler.transform(x_val).astype(np.float32), y_train, y_val


def train_data() -> ray.data.Dataset:
    x, _, y, _ = _split()
    return ray.data.from_items([{"x": row, "y": int(label)} for row, label in zip(x, y, strict=True)])


def val_data() -> ray.data.Dataset:
    _, x, _, y = _split()
    return ray.data.from_items([{"x": row, "y": int(label)} for row, label in zip(x, y, strict=True)])


def train_loop(config: dict) -> None:
    model = ray.train.torch.prepare_model(
        nn.Sequential(nn.Linear(64, config["hidden"]), nn.ReLU(), nn.Linear(config["hidden"], 10))
    )
    optimizer = torch.optim.Adam(model.parameters(), lr=config["lr"])
    train, val = ray.train.get_dataset_shard("train"), ray.train.get_dataset_shard("val")
    for epoch in range(config["epochs"]):
        model.train()
        for batch in train.iter_torch_batches(batch_size=config["batch_size"]):
            optimizer.zero_grad()
            nn.functional.cross_entropy(model(batch["x"]), batch["y"]).backward()
            optimizer.step()
        model.eval()
        correct = seen = 0
        with torch.no_grad():
            for batch in val.iter_torch_batches(batch_size=256):
                correct += int((model(batch["x"]).argmax(dim=1) == batch["y"]).sum())
                seen += len(batch["y"])
        ray.train.report({"val_acc": correct / max(seen, 1), "epoch": epoch + 1})


experiment = Experiment(
    name="ray_data_digits",
    train_loop=train_loop,
    datasets={"train": train_data, "val": val_data},  # built once per sweep, split per worker
    space={
        "lr": tune.loguniform(1e-3, 3e-2),  # Adam's step size
        "hidden": tune.choice([32, 128]),  # hidden units
    },
    defaults={"epochs": 5, "batch_size": 64},  # epochs per trial; rows per batch and worker
    metric="val_acc",  # held-out accuracy
    mode="max",
    num_samples=4,  # trials
    scheduler="asha",  # early stopping of the weak
    stop=StopRule(max_iterations=5),  # one report per epoch
    seed=0,  # the root seed
)
