"""``sweep --warm-start``: the completed trials of earlier sweeps, handed to the searcher as
evaluated points (Optuna's ``study.add_trial``), so that it starts informed and does not run
them again.

A reference is a sweep (its name or parent run id) or one trial (its run id), in the sweep's
own tracking store, or in another one written ``URI#REF``
(``sqlite:///old.db#mlp_digits-20261130-101500``). Only completed trials are used (one stopped
early reached its value in fewer steps). A trial is skipped, with one line saying why, when it
does not fit this sweep: a searched dimension it has no value for (added since), a value
outside this sweep's range, a parameter this experiment no longer has (removed), a fixed value
that differs, or no final value of every objective.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tunetrain import space as spaces
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.redaction import redact

if TYPE_CHECKING:
    from tunetrain.tracking import TrackingURI


@dataclasses.dataclass(frozen=True)
class WarmStart:
    """What the earlier sweeps give a new one."""

    # (flat config of the searched dimensions, final value per objective) of each trial used.
    points: list[tuple[dict[str, Any], list[float]]]
    lines: list[str]  # one per trial skipped, and one per source
    sources: list[str]  # "SWEEP (N of M completed trials)", as the parent run records it


def check_searcher(experiment: Experiment) -> None:
    """Refuse a warm start the searcher cannot take, with the reason."""
    from tunetrain.algorithms import resolve_searcher

    experiment = experiment.replace(searcher=resolve_searcher(experiment)[0])
    if experiment.searcher in ("random", "grid"):
        raise ExperimentError(
            f"--warm-start gives earlier results to a searcher that learns from them, but got searcher "
            f"{experiment.searcher!r}, which draws its trials without looking at any result.",
            fix="Use --searcher optuna (or drop --warm-start).",
        )
    if experiment.searcher == "hyperopt":
        raise ExperimentError(
            "--warm-start is not available with searcher 'hyperopt': Ray Tune's HyperOptSearch takes points "
            "to evaluate but not their results (no evaluated_rewards), so it would run them again.",
            fix="Use --searcher optuna, which takes earlier trials as completed trials of its study.",
        )
    if spaces.has_conditional(experiment.space):
        raise ExperimentError(
            "--warm-start is not available for a conditional space (a choice between sets of parameters): "
            "Optuna's define-by-run study has no fixed distributions to add earlier trials to.",
            fix="Pin the branch with --set (then the space is flat), or drop --warm-start.",
        )


def read_warm_start(refs: Sequence[str], experiment: Experiment, *, tracking_uri: TrackingURI) -> WarmStart:
    """The evaluated points the sweeps (or trials) ``refs`` give ``experiment``."""
    from tunetrain.results.analysis import existing_store, load_sweep, nested_config

    check_searcher(experiment)
    points: list[tuple[dict[str, Any], list[float]]] = []
    lines: list[str] = []
    sources: list[str] = []
    for ref in refs:
        given, _, name = ref.rpartition("#")
        uri: str | TrackingURI = given or tracking_uri  # the sweep's store, resolved once by the session
        try:
            sweep = load_sweep(name, tracking_uri=uri)
            runs, label = list(sweep.runs), sweep.name
        except ExperimentError as not_a_sweep:
            try:
                runs, label = [existing_store(uri).run(name)], f"run {name}"
            except ExperimentError:
                raise ExperimentError(
                    f"--warm-start {ref!r} is neither a sweep (name or parent run id) nor a trial's run id in {uri}.",
                    fix="Pass a sweep name from `tunetrain list` (or URI#SWEEP for another store).",
                ) from not_a_sweep
        completed = [run for run in runs if run.tags.get("tunetrain.status") == "completed"]
        used = 0
        for run in sorted(completed, key=lambda r: r.name):
            config = spaces.flatten(nested_config(run.params))
            why = misfit(config, experiment) or _no_values(run.metrics, experiment)
            if why:
                lines.append(f"warm start: skipped {label}/{run.name}: {why}")
                continue
            searched = {key: config[key] for key in spaces.free_dimensions(experiment.space)}
            points.append((searched, [float(run.metrics[metric]) for metric, _ in experiment.objectives]))
            used += 1
        sources.append(f"{label} ({used} of {len(completed)} completed trials)")
        others = len(runs) - len(completed)
        lines.append(f"warm start: {used} trial(s) of {label} given to the searcher ({others} not completed)")
    return WarmStart(points=points, lines=lines, sources=sources)


def misfit(config: dict[str, Any], experiment: Experiment) -> str:
    """Why an earlier trial's config (flat) does not fit the experiment's space; "" when it does."""
    space = spaces.flatten(experiment.space)
    fixed = {**spaces.flatten(experiment.defaults), **{k: v for k, v in space.items() if not spaces.is_distribution(v)}}
    for key, dimension in space.items():
        if not spaces.is_distribution(dimension):
            continue
        if key not in config:
            return f"it has no value of {key}, which this sweep searches (a dimension added since)"
        if spaces.is_grid(dimension):
            if config[key] not in dimension["grid_search"]:
                return f"{key}={config[key]!r} is not a point of this sweep's {spaces.describe(dimension)}"
            continue
        try:
            spaces.checked(key, config[key], dimension, said=f"{key}={config[key]!r}")
        except ExperimentError as outside:
            return f"{outside.message.rstrip('.')} (this sweep's range)"
    for key, value in config.items():
        if key not in space and key not in fixed:
            return f"it has {key}={value!r}, which this experiment no longer has (a dimension removed)"
        if key in fixed and not spaces.same_value(value, fixed[key]):
            return f"its fixed value {key}={value!r} differs from this sweep's {fixed[key]!r}"
    return ""


def _no_values(metrics: dict[str, float], experiment: Experiment) -> str:
    for metric, _ in experiment.objectives:
        value = metrics.get(metric)
        if value is None or not math.isfinite(value):
            return f"no final finite {metric}"
    return ""


def config_of(ref: str, *, tracking_uri: str | TrackingURI | None = None) -> dict[str, Any]:
    """The config (flat: dotted keys) of a sweep's best trial (``ref``: its name or parent run
    id) or of one trial (``ref``: its run id), as recorded in the tracking store."""
    from tunetrain.results.analysis import existing_store, load_sweep, nested_config

    try:
        return spaces.flatten(load_sweep(ref, tracking_uri=tracking_uri).best_config())
    except ExperimentError as not_a_sweep:
        store = existing_store(tracking_uri)
        try:
            run = store.run(ref)
        except ExperimentError:
            raise ExperimentError(
                f"--config-from {ref!r} is neither a sweep (name or parent run id) nor a trial's run id in "
                f"{redact(store.tracking_uri)}.",
                fix="Pass a sweep name from `tunetrain list` or a run id from `tunetrain show SWEEP --all-columns`, "
                "and the store's --tracking-uri.",
            ) from not_a_sweep
        return spaces.flatten(nested_config(run.params))
