"""The in-process runner: a single-worker trial's train loop in the (reused) Tune trial process."""

from __future__ import annotations

from typing import Any

import ray
import ray.train
from ray import tune

from tunetrain import _internals
from tunetrain.trial._worker import (
    NODES_KEY,
    TrialSpec,
    numbers_as_floats,
    this_node,
    trial_index,
    worst_for_diverged,
)

_LocalTrainFnUtils: Any = _internals.train_fn_utils_base()


class _TuneBridge(_LocalTrainFnUtils):
    """Ray Train's local-mode utilities with every ``ray.train.report`` forwarded to Tune.

    Ray's own local mode (``ScalingConfig(num_workers=0)``) only keeps the last report; a
    Tune trial needs each one (the scheduler decides on it, the checkpoint is persisted).
    """

    def __init__(
        self,
        *,
        session: Any,
        experiment_name: str,
        initial_checkpoint: Any = None,
        objectives: tuple[tuple[str, str], ...] = (),
        dataset_shards: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(experiment_name=experiment_name, dataset_shards=dataset_shards)
        self._session = session
        self._initial_checkpoint = initial_checkpoint
        self._objectives = objectives
        self._first = True

    def report(self, metrics: dict[str, Any], checkpoint: Any = None, *args: Any, **kwargs: Any) -> None:
        # The Tune session persists the checkpoint into the trial's storage before it returns,
        # so the train loop may delete its temporary folder right after, as with Train.
        metrics = worst_for_diverged(numbers_as_floats(metrics), self._objectives)
        if self._first:
            metrics[NODES_KEY], self._first = [this_node()], False
        self._session.report(metrics, checkpoint=checkpoint)
        self._last_metrics = metrics

    def get_checkpoint(self) -> Any:
        # The checkpoint Tune restored this trial from (failure retry, PBT exploit, resume),
        # then the latest one reported: what Train's get_checkpoint gives a worker.
        return self._session.loaded_checkpoint or self._initial_checkpoint


def run_trial_in_process(config: dict[str, Any], spec: TrialSpec) -> None:
    """The Tune function of a single-worker trial: run the train loop right here."""
    name = tune.get_context().get_trial_name()
    if name in spec.finished:
        return
    index = trial_index(name)
    session = _internals.tune_session()
    initial = None
    if session.loaded_checkpoint is None and spec.initial_checkpoint is not None:
        initial = ray.train.Checkpoint.from_directory(spec.initial_checkpoint)
    (shards,) = spec.shards(1, node_ids=[ray.get_runtime_context().get_node_id()])
    _internals.set_train_fn_utils(
        _TuneBridge(
            session=session,
            experiment_name=name,
            initial_checkpoint=initial,
            objectives=spec.objectives,
            dataset_shards=shards,
        )
    )
    # The train loop is written for Ray Train: ray.train.* work while it runs.
    try:
        with _internals.train_api_in_tune_function(session):
            spec.worker_loop(name, index)(config)
    finally:
        _internals.set_train_fn_utils(None)
