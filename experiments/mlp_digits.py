# An MLP on scikit-learn's bundled digits data set (8x8 images, 10 classes, no download),
# swept over learning rate, hidden size and dropout with ASHA: the README's demo.
#
#   python -m tunetrain sweep experiments/mlp_digits.py
#   python -m tunetrain sweep experiments/mlp_digits.py --num-samples 16 --set batch_size=32
#
# Each epoch reports train_loss, val_loss, val_acc and n_params and saves a checkpoint; a
# trial resumes from its latest checkpoint when Ray Train restarts it, and PBT starts a trial
# from another's checkpoint with new hyperparameters (experiments/pbt_digits.py). The
# optimizer is Adam unless config["optimizer"] says otherwise (see make_optimizer).

from __future__ import annotations

import os
import tempfile
from typing import Any

import ray.train
import ray.train.torch
import torch
from ray import tune
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from sklearn.preprocessing import StandardScaler
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from tunetrain import CheckpointPolicy, Experiment, StopRule, load_state_dicts, state_dicts

EPOCHS = 12


def make_datasets(seed: int) -> tuple[TensorDataset, TensorDataset]:
    """Digits, split 80/20 (the split is fixed, whatever the trial seed), standardised by
    scikit-learn's StandardScaler fitted on the training split: pixels that are constant there
    keep scale 1, so held-out rows stay in range."""
    x, y = load_digits(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    scaler = StandardScaler().fit(x_train)
    to_tensor = lambda a: torch.tensor(scaler.transform(a), dtype=torch.float32)
    return (
        TensorDataset(to_tensor(x_train), torch.tensor(y_train)),
        TensorDataset(to_tensor(x_val), torch.tensor(y_val)),
    )


def make_optimizer(params: Any, config: dict[str, Any]) -> torch.optim.Optimizer:
    """Adam or SGD. Settings come from config["optimizer"] when it is a dict (a conditional
    space: experiments/conditional_digits.py), else from the top level of config."""
    settings = config["optimizer"] if isinstance(config.get("optimizer"), dict) else config
    name = settings.get("name", config.get("optimizer", "adam"))
    weight_decay = settings.get("weight_decay", 0.0)
    if name == "sgd":
        return torch.optim.SGD(
            params, lr=settings["lr"], momentum=settings.get("momentum", 0.0), weight_decay=weight_decay
        )
    return torch.optim.Adam(
        params, lr=settings["lr"], betas=(settings.get("beta1", 0.9), 0.999), weight_decay=weight_decay
    )


def build_model(config: dict[str, Any]) -> nn.Module:
    """The MLP (also what a checkpoint's "model" state loads into, see docs/analysis.md)."""
    return nn.Sequential(
        nn.Linear(64, config["hidden"]),
        nn.ReLU(),
        nn.Dropout(config["dropout"]),
        nn.Linear(config["hidden"], 10),
    )


def train_loop(config: dict[str, Any]) -> None:
    torch.set_num_threads(1)  # one CPU per worker: two trials share 2 cores side by side
    train_set, val_set = make_datasets(seed=0)
    train_loader = ray.train.torch.prepare_data_loader(
        DataLoader(train_set, batch_size=config["batch_size"], shuffle=True)
    )
    # Not sharded: every worker evaluates the whole held-out split, so the reported val_loss
    # and val_acc are the split's, however many workers the trial has.
    # prepare_data_loader without its sampler: moved to the worker's device (GPU or CPU) only.
    val_loader = ray.train.torch.prepare_data_loader(DataLoader(val_set, batch_size=256), add_dist_sampler=False)
    model = ray.train.torch.prepare_model(build_model(config))  # DDP-wrapped with several workers
    optimizer = make_optimizer(model.parameters(), config)
    loss_fn = nn.CrossEntropyLoss()

    start_epoch = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:  # restarted by Ray Train: go on from the latest checkpoint
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, "state.pt"))
        load_state_dicts(model, optimizer, state["model"], state["optimizer"])  # into DDP's module too
        for group in optimizer.param_groups:  # this config's lr etc., not the checkpoint's (PBT)
            group.update(optimizer.defaults)
        start_epoch = state["epoch"] + 1

    for epoch in range(start_epoch, config["epochs"]):
        model.train()
        train_loss, seen = 0.0, 0
        for x, y in train_loader:  # this worker's shard of the training split
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            train_loss += loss.item() * len(y)
            seen += len(y)
        model.eval()
        val_loss, correct = 0.0, 0
        with torch.no_grad():
            for x, y in val_loader:
                logits = getattr(model, "module", model)(x)  # the plain model: no DDP collective
                val_loss += loss_fn(logits, y).item() * len(y)
                correct += (logits.argmax(dim=1) == y).sum().item()
        metrics = {
            "epoch": epoch,
            "train_loss": train_loss / seen,  # the mean over this worker's shard
            "val_loss": val_loss / len(val_set),
            "val_acc": correct / len(val_set),
            "n_params": sum(p.numel() for p in model.parameters()),
        }
        with tempfile.TemporaryDirectory() as folder:
            if ray.train.get_context().get_world_rank() == 0:
                # The plain model's keys (no DDP "module." prefix): loads into nn.Sequential as is.
                model_state, optimizer_state = state_dicts(model, optimizer)
                torch.save(
                    {"model": model_state, "optimizer": optimizer_state, "epoch": epoch},
                    os.path.join(folder, "state.pt"),
                )
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))
            else:
                ray.train.report(metrics)


def export_model(checkpoint_dir: str, config: dict[str, Any]) -> nn.Module:
    """The trained MLP from a checkpoint, for MLflow's Model Registry (`tunetrain register`,
    and a sweep's end): standardised pixels (as make_datasets gives them) in, 10 logits out."""
    model = build_model(config)
    model.load_state_dict(torch.load(os.path.join(checkpoint_dir, "state.pt"))["model"])
    return model.eval()


def export_example(config: dict[str, Any]) -> Any:
    """Four held-out rows: the registered model's input example (and so its signature)."""
    return make_datasets(seed=0)[1].tensors[0][:4].numpy()


experiment = Experiment(
    name="mlp_digits",  # the MLflow experiment holding every sweep of this file
    train_loop=train_loop,  # runs on every Ray Train worker
    space={
        "lr": tune.loguniform(1e-4, 3e-1),  # Adam learning rate
        "hidden": tune.choice([16, 64, 256]),  # width of the hidden layer
        "dropout": tune.uniform(0.0, 0.5),  # dropout after the hidden layer
    },
    defaults={
        "batch_size": 64,  # per-worker batch size
        "epochs": EPOCHS,  # epochs per trial (one report each)
    },
    metric="val_acc",  # validation accuracy decides the best trial
    mode="max",  # higher is better
    scheduler="asha",  # stops poor trials at rungs 1, 2, 4, 8 epochs
    scheduler_options={"grace_period": 1, "reduction_factor": 2},  # ASHA's first rung and halving rate
    # No searcher named: "auto" picks the best measured for ASHA (the plan says which and why).
    num_samples=8,  # trials in the sweep
    workers_per_trial=1,  # DDP processes per trial
    resources_per_worker={"CPU": 1},  # so two trials run side by side on 2 CPUs
    stop=StopRule(iterations_from=lambda c: c["epochs"]),  # a trial ends after its last epoch (one report each)
    seed=0,  # root seed: trial seeds and the searcher derive from it
    checkpoint=CheckpointPolicy(num_to_keep=2),  # keep the 2 best checkpoints by val_acc
    export_model=export_model,  # a checkpoint as a torch model: registered in MLflow at the end
    export_example=export_example,  # its input example
)
