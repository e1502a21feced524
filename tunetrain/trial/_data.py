"""Ray Data datasets in trials: built once per sweep in the driver and materialized in Ray's
object store, then split for each trial's workers as Ray Train's TorchTrainer splits them
(``DataConfig.configure``: ``streaming_split`` with the experiment's DataConfig), so that
``ray.train.get_dataset_shard(name)`` works on every runner.

Why materialized once: a trial's workers hold the CPUs they asked for, and Ray Data's own
read and map tasks need CPUs of their own; built lazily inside trials on a full machine, they
wait forever (seen: 2 one-CPU trials on 2 CPUs, no message). Materialized before the first
trial starts, while every CPU is free, the trials only read blocks from the object store,
which needs no task; and no trial builds the data again."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, TextIO

from tunetrain.errors import ExperimentError


def build_datasets(datasets: Mapping[str, Any], *, stream: TextIO = sys.stdout) -> dict[str, Any]:
    """Each of the experiment's datasets (a ``ray.data.Dataset``, or a function that returns
    one) built and materialized in Ray's object store; Ray must be connected."""
    from ray.data import Dataset

    built: dict[str, Any] = {}
    for name, value in datasets.items():
        dataset = value if isinstance(value, Dataset) else value()
        if not isinstance(dataset, Dataset):
            raise ExperimentError(
                f"Experiment.datasets[{name!r}] is a function that must return a ray.data.Dataset, but it returned "
                f"{type(dataset).__name__}.",
                fix="Return the dataset, e.g. lambda: ray.data.from_numpy(x).",
            )
        built[name] = dataset.materialize()
    if built:
        sizes = ", ".join(f"{name} ({ds.count():,} rows)" for name, ds in built.items())
        print(f"Datasets: {sizes}; built once, in Ray's object store, shared by every trial.", file=stream, flush=True)
    return built


def dataset_shards(
    datasets: Mapping[str, Any],
    data_config: Any,
    *,
    world_size: int,
    worker_handles: list[Any] | None = None,
    worker_node_ids: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Each rank's ``{name: DataIterator}``, as a TorchTrainer gives its workers (no datasets:
    an empty dict per rank)."""
    if not datasets:
        return [{} for _ in range(world_size)]
    from ray.train import DataConfig

    config = data_config if data_config is not None else DataConfig()
    shards: list[dict[str, Any]] = config.configure(
        dict(datasets), world_size=world_size, worker_handles=worker_handles, worker_node_ids=worker_node_ids
    )
    return shards
