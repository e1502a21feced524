"""Schedulers and searchers by name, built from Ray Tune's own classes (part of the tuner layer).

The searcher proposes configs, the scheduler decides which trials go on: tunetrain only
picks the class, derives defaults from the experiment and passes the user's options on.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler, TrialScheduler
from ray.tune.search import BasicVariantGenerator, SearchAlgorithm, Searcher

from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment


class _RecordsEarlyStops:
    """Mixin for a Ray Tune scheduler: remembers the trials it stopped before they ended.

    Tune hands the scheduler a trial's last result again, marked ``done``, when the train
    loop returned by itself; a STOP for that result is not an early stop.
    """

    early_stopped: dict[str, int]

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        decision: str = super().on_trial_result(tune_controller, trial, result)  # type: ignore[misc]
        if decision == TrialScheduler.STOP and not result.get("done"):
            self.early_stopped[trial.trial_id] = int(result.get("training_iteration", 0))
        return decision


class RecordingASHA(_RecordsEarlyStops, AsyncHyperBandScheduler):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.early_stopped = {}


class RecordingFIFO(_RecordsEarlyStops, FIFOScheduler):
    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.early_stopped = {}


def _check_options(kind: str, name: str, cls: type, options: Mapping[str, Any]) -> None:
    for key in ("metric", "mode"):
        if key in options:
            raise ExperimentError(
                f"{kind}_options must not set {key!r} (got {options[key]!r}): it comes from the experiment.",
                fix=f"Set Experiment.{key} instead.",
            )
    valid = [p for p in inspect.signature(cls).parameters if p not in ("self", "metric", "mode")]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ExperimentError(
            f"Unknown {kind} option(s) {', '.join(map(repr, unknown))} for {kind} {name!r} "
            f"({cls.__name__}); valid options are: {', '.join(valid) or '(none)'}.",
            fix=f"Use only those keys in {kind}_options.",
        )


def build_scheduler(experiment: Experiment) -> RecordingASHA | RecordingFIFO:
    options = dict(experiment.scheduler_options)
    if experiment.scheduler == "fifo":
        _check_options("scheduler", "fifo", FIFOScheduler, options)
        return RecordingFIFO(**options)
    _check_options("scheduler", "asha", AsyncHyperBandScheduler, options)
    # ASHA's budget is the stop rule's, so that its last rung is the trial's end.
    options.setdefault("max_t", experiment.stop.max_iterations or 100)
    options.setdefault("grace_period", 1)
    options.setdefault("reduction_factor", 2)
    try:
        return RecordingASHA(**options)
    except AssertionError as exc:  # Ray validates ASHA's options with asserts
        raise ExperimentError(
            f"Invalid ASHA options {options!r}: {exc}.",
            fix="Use max_t > 0, 0 < grace_period <= max_t and reduction_factor > 1.",
        ) from exc


def build_searcher(experiment: Experiment, *, seed: int, max_concurrent: int) -> tuple[SearchAlgorithm | Searcher, int]:
    """The searcher, and the number its first trial is counted as (0 or 1, Tune differs by class)."""
    options = dict(experiment.searcher_options)
    if experiment.searcher == "random":
        _check_options("searcher", "random", BasicVariantGenerator, options)
        options.setdefault("random_state", seed)
        return BasicVariantGenerator(max_concurrent=max_concurrent, **options), 0
    if experiment.searcher == "hyperopt":
        from ray.tune.search.hyperopt import HyperOptSearch

        _check_options("searcher", "hyperopt", HyperOptSearch, options)
        # Seeded so that the same root seed suggests the same sequence again.
        options.setdefault("random_state_seed", seed)
        return HyperOptSearch(**options), 1
    from ray.tune.search.optuna import OptunaSearch

    _check_options("searcher", "optuna", OptunaSearch, options)
    if "sampler" not in options:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)  # no per-trial INFO lines on the console
        # Seeded so that the same root seed suggests the same sequence again.
        options["sampler"] = optuna.samplers.TPESampler(seed=seed)
    # Tune wraps a Searcher in a ConcurrencyLimiter(max_concurrent) and counts trials from 1.
    return OptunaSearch(**options), 1
