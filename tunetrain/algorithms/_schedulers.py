"""Schedulers by name: Ray Tune's classes, with defaults derived from the experiment."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray.tune.schedulers import (
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
)
from ray.tune.search.sample import Categorical, Domain, Float, Integer

from tunetrain import rungs
from tunetrain import space as spaces
from tunetrain.algorithms._pairing import check_options
from tunetrain.algorithms._recording import (
    RecordingASHA,
    RecordingFIFO,
    RecordingHyperBand,
    RecordingMedian,
    RecordingPBT,
    RecordsExploits,
)
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment

# Ray Tune's own default budget of ASHA and HyperBand, used when nothing gives a better one.
DEFAULT_MAX_T = 100
# Schedulers whose decisions are laid out over a trial's budget of iterations (max_t).
_BUDGETED = {"asha": "max_t", "hyperband": "max_t", "pbt": "perturbation_interval", "pb2": "perturbation_interval"}


def budget_warning(experiment: Experiment) -> str | None:
    """Why the scheduler's budget is a guess (Ray's default max_t of 100 iterations, as no
    StopRule(max_iterations=...) or option gives it), or None when it is not."""
    option = _BUDGETED.get(experiment.scheduler)
    if option is None or option in experiment.scheduler_options or experiment.stop.max_iterations is not None:
        return None
    return (
        f"scheduler {experiment.scheduler!r} lays out its {option} for max_t={DEFAULT_MAX_T} iterations (the "
        "default: the experiment sets no StopRule(max_iterations=...) and no scheduler_options "
        f"{option!r}); if its trials report fewer times, a trial stopped at its last report cannot be told "
        "from one that finished. Set StopRule(max_iterations=N), N = the reports a trial makes "
        "(or StopRule(iterations_from=...) to work it out from the config)."
    )


def asha_rungs(experiment: Experiment) -> tuple[list[int], int] | None:
    """ASHA's rungs (the iteration counts at which it may stop a trial) and its max_t, as
    :func:`build_scheduler` sets them; None for another scheduler."""
    if experiment.scheduler != "asha":
        return None
    options = dict(experiment.scheduler_options)
    max_t = int(options.get("max_t", experiment.stop.max_iterations or DEFAULT_MAX_T))
    grace, rf = int(options.get("grace_period", 1)), float(options.get("reduction_factor", 2))
    return rungs.asha_milestones(grace, rf, max_t), max_t


def build_scheduler(experiment: Experiment) -> Any:
    """The experiment's scheduler, with defaults derived from it; it decides on the first metric."""
    name = experiment.scheduler
    options = dict(experiment.scheduler_options)
    max_t = experiment.stop.max_iterations or DEFAULT_MAX_T
    metric = {"metric": experiment.primary_metric, "mode": experiment.primary_mode}
    if name == "fifo":
        check_options("scheduler", name, FIFOScheduler, options)
        return RecordingFIFO(**options)
    if name == "asha":
        skip = options.pop("skip_misleading_rungs", True)  # tunetrain's own option (_rung_trust)
        if not isinstance(skip, bool):
            raise ExperimentError(
                f"scheduler_options['skip_misleading_rungs'] is true or false, but got {skip!r}.",
                fix="Use scheduler_options={'skip_misleading_rungs': False} for Ray's ASHA unchanged.",
            )
        check_options("scheduler", name, AsyncHyperBandScheduler, options)
        options["skip_misleading_rungs"] = skip
        # ASHA's budget is the stop rule's, so that its last rung is the trial's end.
        options.setdefault("max_t", max_t)
        options.setdefault("grace_period", 1)
        options.setdefault("reduction_factor", 2)
        return _construct(
            RecordingASHA, "ASHA", options, metric, "max_t > 0, 0 < grace_period <= max_t, reduction_factor > 1"
        )
    if name == "hyperband":
        check_options("scheduler", name, HyperBandScheduler, options)
        options.setdefault("max_t", max_t)
        options.setdefault("reduction_factor", 3)
        return _construct(RecordingHyperBand, "HyperBand", options, metric, "max_t > 0, reduction_factor > 1")
    if name == "median":
        check_options("scheduler", name, MedianStoppingRule, options)
        # Compare trials at equal iteration counts, not equal seconds (Ray's default).
        options.setdefault("time_attr", "training_iteration")
        options.setdefault("grace_period", 1)
        options.setdefault("min_samples_required", 3)
        return _construct(RecordingMedian, "median stopping", options, metric, "grace_period >= 0")
    if name == "pbt":
        check_options("scheduler", name, PopulationBasedTraining, options)
        options.setdefault("time_attr", "training_iteration")
        options.setdefault("perturbation_interval", max(1, max_t // 4))
        if "hyperparam_mutations" not in options:
            options["hyperparam_mutations"] = pbt_mutations(experiment.space)
            # Perturbed values stay inside the space's ranges (Ray multiplies by 0.8/1.2 unbounded).
            options.setdefault("custom_explore_fn", _ClipToSpace(experiment.space))
        if not options["hyperparam_mutations"]:
            raise ExperimentError(
                "Scheduler 'pbt' mutates the search space's dimensions, but the space has none to mutate.",
                fix='Give a space such as {"lr": tune.loguniform(1e-4, 1e-1)}, or hyperparam_mutations in '
                "scheduler_options.",
            )
        options.setdefault("log_config", False)  # tunetrain records exploits in MLflow itself
        return _construct(RecordingPBT, "PBT", options, metric, "perturbation_interval > 0")
    return _build_pb2(experiment, options, metric, max_t)


def _construct(cls: Any, label: str, options: dict[str, Any], metric: dict[str, Any], rule: str) -> Any:
    try:
        return cls(**options, **metric)
    except (AssertionError, ValueError, TypeError) as exc:  # Ray validates options with asserts
        raise ExperimentError(f"Invalid {label} options {options!r}: {exc}", fix=f"Use {rule}.") from exc


def _build_pb2(experiment: Experiment, options: dict[str, Any], metric: dict[str, Any], max_t: int) -> Any:
    try:
        from ray.tune.schedulers.pb2 import PB2
    except ImportError as exc:  # PB2 needs GPy and scikit-learn
        raise ExperimentError(
            f"Scheduler 'pb2' needs GPy, which is not installed here ({exc}).",
            fix="pip install GPy, or use scheduler 'pbt'.",
        ) from exc
    check_options("scheduler", "pb2", PB2, options)
    options.setdefault("time_attr", "training_iteration")
    options.setdefault("perturbation_interval", max(1, max_t // 4))
    if "hyperparam_bounds" not in options:
        options["hyperparam_bounds"] = {
            key: [domain.lower, domain.upper]
            for key, domain in spaces.iter_leaves(experiment.space)
            if isinstance(domain, Float | Integer)
        }
    if not options["hyperparam_bounds"]:
        raise ExperimentError(
            "Scheduler 'pb2' tunes continuous dimensions (tune.uniform, tune.loguniform, tune.randint), "
            "but the space has none.",
            fix="Add one, or give hyperparam_bounds in scheduler_options, or use scheduler 'pbt'.",
        )
    options.setdefault("log_config", False)

    class RecordingPB2(RecordsExploits, PB2):  # defined here: PB2 needs GPy
        pass

    return _construct(RecordingPB2, "PB2", options, metric, "perturbation_interval > 0")


def pbt_mutations(space: Mapping[str, Any]) -> dict[str, Any]:
    """PBT's hyperparam_mutations from a search space: every distribution of the space, with
    choices as lists (PBT shifts to a neighbouring value) and numbers as their Tune domain
    (PBT multiplies by 0.8 or 1.2, or resamples). Nested dicts stay nested."""
    out: dict[str, Any] = {}
    for key, value in space.items():
        if spaces.is_grid(value):
            out[key] = list(value["grid_search"])
        elif isinstance(value, Mapping):
            inner = pbt_mutations(value)
            if inner:
                out[key] = inner
        elif isinstance(value, Categorical):
            out[key] = list(value.categories)
        elif isinstance(value, Domain):
            out[key] = value
    return out


class _ClipToSpace:
    """PBT's ``custom_explore_fn``: clips perturbed numbers into their dimension's range."""

    def __init__(self, space: Mapping[str, Any]) -> None:
        self.bounds = {
            key: (domain.lower, domain.upper)
            for key, domain in spaces.iter_leaves(space)
            if isinstance(domain, Float | Integer)
        }

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        for key, (lower, upper) in self.bounds.items():
            *path, last = key.split(".")
            node = config
            for part in path:
                node = node[part]
            value = node[last]
            node[last] = type(value)(min(max(value, lower), upper))
        return config
