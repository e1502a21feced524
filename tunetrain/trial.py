"""The trial driver: one Ray Tune trial runs one Ray Train ``TorchTrainer``.

This is the Train V2 pattern for tuning distributed training: a small Tune function builds
a ``TorchTrainer`` whose reports reach Tune through ``TuneReportCallback`` and calls
``fit()``. Passing a TorchTrainer into ``Tuner`` is deprecated in Train V2.

The driver holds no CPU (see :data:`DRIVER_RESOURCES`), seeds every worker from the trial's
seed and its rank, and gives each launch a unique Train run name (reusing a name makes
Train resume that run's old state).
"""

from __future__ import annotations

import dataclasses
import re
import uuid
from collections.abc import Callable
from typing import Any

import ray.train
from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig, ScalingConfig
from ray.train.torch import TorchTrainer
from ray.tune.integration.ray_train import CHECKPOINT_PATH_KEY, TuneReportCallback

from tunetrain.context import TrialContext, _set_context
from tunetrain.seeding import derive_seed, seed_everything

# A trial driver that takes Tune's default 1 CPU starves its own Train workers on a small
# machine (two trials on 2 CPUs deadlock), and Ray rejects {"CPU": 0}; a token memory
# request gives the driver a resource bundle that costs nothing schedulable.
DRIVER_RESOURCES: dict[str, float] = {"memory": 1}

# The key under which Train's TuneReportCallback passes a reported checkpoint's path.
CHECKPOINT_KEY = CHECKPOINT_PATH_KEY

_NAME = "trial_{:04d}"
_NAME_PATTERN = re.compile(r"^trial_(\d+)$")


def trial_name(index: int) -> str:
    return _NAME.format(index)


def trial_index(name: str) -> int:
    """The index in a name made by :func:`trial_name`."""
    match = _NAME_PATTERN.match(name)
    if match is None:
        raise ValueError(f"Not a tunetrain trial name: {name!r}.")
    return int(match.group(1))


@dataclasses.dataclass(frozen=True)
class TrialNamer:
    """Ray Tune ``trial_name_creator``: ``trial_0000``, ``trial_0001``, ... in creation order.

    Tune's experiment tag starts with the searcher's trial counter, which counts from 0 or 1
    depending on the search algorithm class; ``first`` says which.
    """

    first: int

    def __call__(self, trial: Any) -> str:
        return trial_name(int(str(trial.experiment_tag).split("_", 1)[0]) - self.first)


def trial_dirname(trial: Any) -> str:
    """Ray Tune ``trial_dirname_creator``: short and unique."""
    return f"{trial.custom_trial_name}_{trial.trial_id}"


@dataclasses.dataclass(frozen=True)
class TrialSpec:
    """Everything a trial driver needs besides the config (shipped once via the object store)."""

    train_loop: Callable[[dict[str, Any]], Any]
    num_workers: int
    use_gpu: bool
    resources_per_worker: dict[str, float]
    placement_strategy: str
    root_seed: int
    storage_path: str
    num_to_keep: int | None
    score_attribute: str
    score_order: str
    max_failures: int = 0


def _worker_main(
    train_loop: Callable[[dict[str, Any]], Any], name: str, index: int, trial_seed: int
) -> Callable[[dict[str, Any]], Any]:
    """Wrap the user's train loop: seed this worker and set its context, then run it unchanged."""

    def train_loop_per_worker(config: dict[str, Any]) -> Any:
        context = ray.train.get_context()
        rank = context.get_world_rank()
        worker_seed = derive_seed(trial_seed, rank)
        seed_everything(worker_seed)
        _set_context(
            TrialContext(
                trial_name=name,
                trial_index=index,
                trial_seed=trial_seed,
                worker_seed=worker_seed,
                rank=rank,
                world_size=context.get_world_size(),
            )
        )
        try:
            return train_loop(config)
        finally:
            _set_context(None)

    return train_loop_per_worker


def run_trial(config: dict[str, Any], spec: TrialSpec) -> None:
    """The Tune function of one trial: build the TorchTrainer and run it to the end."""
    name = tune.get_context().get_trial_name()
    index = trial_index(name)
    seed = derive_seed(spec.root_seed, index)
    trainer = TorchTrainer(
        _worker_main(spec.train_loop, name, index, seed),
        train_loop_config=config,
        scaling_config=ScalingConfig(
            num_workers=spec.num_workers,
            use_gpu=spec.use_gpu,
            resources_per_worker=spec.resources_per_worker,
            placement_strategy=spec.placement_strategy,
        ),
        run_config=RunConfig(
            name=f"{name}-{uuid.uuid4().hex[:8]}",
            storage_path=spec.storage_path,
            callbacks=[TuneReportCallback()],  # type: ignore[list-item]  # a Train V2 UserCallback
            checkpoint_config=CheckpointConfig(
                num_to_keep=spec.num_to_keep,
                checkpoint_score_attribute=spec.score_attribute,
                checkpoint_score_order=spec.score_order,
            ),
            failure_config=FailureConfig(max_failures=spec.max_failures),
        ),
    )
    trainer.fit()
