"""Plots of a recorded sweep, as matplotlib figures (``fig.savefig("x.png")`` saves one).

Every function takes a :class:`tunetrain.results.analysis.Sweep` and returns a new
``matplotlib.figure.Figure`` (not through pyplot, so nothing global changes and nothing
needs a display). :func:`sweep_figures` gives the ones that fit the sweep.
"""

from __future__ import annotations

import contextlib
import math
from typing import Any, Literal

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import LogNorm, Normalize
from matplotlib.figure import Figure

from tunetrain.errors import ExperimentError
from tunetrain.results.analysis import Sweep
from tunetrain.tracking import schema

__all__ = [
    "learning_curves",
    "metric_vs_params",
    "parallel_coordinates",
    "param_importances",
    "pareto_front",
    "pbt_lineage",
    "plot_importances",
    "rungs",
    "sweep_figures",
]


def _numeric(series: pd.Series) -> bool:
    return bool(pd.api.types.is_numeric_dtype(series)) and not pd.api.types.is_bool_dtype(series)


def _metric(sweep: Sweep, metric: str | None) -> str:
    metric = metric or sweep.metric
    if metric not in sweep.metrics:
        raise ExperimentError(
            f"Metric {metric!r} not recorded in sweep {sweep.name!r}; it has: {', '.join(map(repr, sweep.metrics))}.",
            fix="Pass one of those names.",
        )
    return metric


def _param(sweep: Sweep, param: str) -> str:
    if param not in sweep.params:
        raise ExperimentError(
            f"Parameter {param!r} not searched in sweep {sweep.name!r}; it has: {', '.join(map(repr, sweep.params))}.",
            fix="Pass one of those names.",
        )
    return param


def _norm(sweep: Sweep, param: str, values: pd.Series) -> Normalize:
    low, high = float(values.min()), float(values.max())
    if sweep.is_log_scale(param) and low > 0:
        return LogNorm(low, high if high > low else low * 10)
    return Normalize(low, high if high > low else low + 1)


def learning_curves(sweep: Sweep, *, metric: str | None = None, color_by: str | None = None) -> Figure:
    """One line per trial: ``metric`` over steps, coloured by a parameter (the first
    numeric one by default; log colour scale for log-scale parameters)."""
    metric = _metric(sweep, metric)
    history = sweep.history(metric)
    trials = sweep.trials().set_index("trial")
    if color_by is None:
        numeric = [p for p in sweep.params if _numeric(trials[f"config/{p}"])]
        color_by = numeric[0] if numeric else None
    fig = Figure(figsize=(8, 5), layout="constrained")
    ax = fig.add_subplot()
    cmap = colormaps["viridis"]
    column = f"config/{_param(sweep, color_by)}" if color_by else None
    norm = _norm(sweep, color_by, trials[column]) if color_by and column and _numeric(trials[column]) else None
    categories = sorted(map(str, trials[column].unique())) if column and norm is None else []
    for trial, points in history.groupby("trial"):
        value: Any = trials.loc[trial, column] if column else None
        if norm is not None:
            color = cmap(norm(float(value)))
        elif categories:
            color = colormaps["tab10"](categories.index(str(value)) % 10)
        else:
            color = None
        ax.plot(points["step"], points["value"], color=color, alpha=0.8, linewidth=1.2)
    ax.set_xlabel("step (training iteration)")
    ax.set_ylabel(metric)
    ax.set_title(f"{sweep.name}: learning curves" + (f" by {color_by}" if color_by else ""))
    if norm is not None:
        fig.colorbar(_mappable(norm), ax=ax, label=color_by)
    elif categories:
        for i, name in enumerate(categories):
            ax.plot([], [], color=colormaps["tab10"](i % 10), label=name)
        ax.legend(title=color_by)
    return fig


def _mappable(norm: Normalize, cmap: Any = None) -> Any:
    from matplotlib.cm import ScalarMappable

    return ScalarMappable(norm=norm, cmap=cmap or colormaps["viridis"])


def _choice_key(value: Any) -> Any:
    """A choice as found in a trial's config (64, 64.0 or "64" alike) or in the space; a
    choice that reads as NaN or infinite ("nan") stays text (NaN equals nothing, as a key)."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return str(value)
    return number if math.isfinite(number) and not isinstance(value, bool) else str(value)


def _scaled(sweep: Sweep, param: str, values: pd.Series) -> tuple[np.ndarray, list[float], list[str]]:
    """Values of one parameter on a 0..1 axis, with tick positions and labels. A categorical
    dimension (``tune.choice``, numbers too) gets one evenly spaced tick per choice, in the
    space's order: a linear scale would put ticks at values that are no choice."""
    choices = sweep.choices(param)
    if choices is not None:
        spot = {_choice_key(c): i / max(1, len(choices) - 1) for i, c in enumerate(choices)}
        ys = np.array([spot.get(_choice_key(v), np.nan) for v in values])
        return ys, [spot[_choice_key(c)] for c in choices], [str(c) for c in choices]
    if _numeric(values):
        x = values.astype(float).to_numpy()
        if not np.isfinite(x).any():  # no trial (e.g. every one diverged): an axis without ticks
            return np.full(len(x), np.nan), [], []
        log = sweep.is_log_scale(param) and np.nanmin(x) > 0
        t = np.log10(x) if log else x
        low, high = np.nanmin(t), np.nanmax(t)
        span = high - low if high > low else 1.0
        ticks = [0.0, 0.5, 1.0]
        labels = [f"{(10 ** (low + f * span) if log else low + f * span):.3g}" for f in ticks]
        return (t - low) / span, ticks, labels
    names = sorted(map(str, values.dropna().unique()))
    positions = {name: i / max(1, len(names) - 1) for i, name in enumerate(names)}
    return np.array([positions.get(str(v), np.nan) for v in values]), list(positions.values()), names


def parallel_coordinates(sweep: Sweep, *, metric: str | None = None, params: list[str] | None = None) -> Figure:
    """One line per trial across an axis per parameter and a last axis for the trial's
    best ``metric``; the line's colour is that value (best trials drawn on top)."""
    metric = _metric(sweep, metric)
    params = [_param(sweep, p) for p in (params or sweep.params)]
    mode = dict(sweep.objectives).get(metric, sweep.mode)
    trials = sweep.trials()
    column = f"best_{metric}" if f"best_{metric}" in trials else metric
    trials = trials[trials[column].map(lambda v: isinstance(v, float) and math.isfinite(v))]
    fig = Figure(figsize=(max(6, 1.6 * (len(params) + 1)), 5), layout="constrained")
    ax = fig.add_subplot()
    axes: list[tuple[np.ndarray, list[float], list[str]]] = [_scaled(sweep, p, trials[f"config/{p}"]) for p in params]
    axes.append(_scaled(sweep, metric, trials[column]))
    norm = Normalize(float(trials[column].min()), float(trials[column].max())) if len(trials) else Normalize()
    cmap = colormaps["viridis_r" if mode == "min" else "viridis"]
    order = trials[column].argsort().to_numpy()
    if mode == "min":
        order = order[::-1]  # the best (smallest) last, on top
    for row in order:
        ys = [scaled[row] for scaled, _, _ in axes]
        ax.plot(range(len(axes)), ys, color=cmap(norm(trials[column].iloc[row])), alpha=0.8)
    for i, (_, ticks, labels) in enumerate(axes):
        ax.axvline(i, color="0.6", linewidth=0.8)
        for tick, label in zip(ticks, labels, strict=True):
            ax.annotate(label, (i, tick), xytext=(3, 0), textcoords="offset points", fontsize=7, va="center")
    ax.set_xticks(range(len(axes)), [*params, f"best {metric}" if column.startswith("best_") else metric])
    ax.set_yticks([])
    ax.set_xlim(-0.2, len(axes) - 0.6)
    ax.set_title(f"{sweep.name}: parallel coordinates ({metric}, {mode})")
    fig.colorbar(_mappable(norm, cmap), ax=ax, label=metric)
    return fig


def param_importances(
    sweep: Sweep,
    *,
    metric: str | None = None,
    evaluator: Literal["fanova", "mdi", "ped_anova"] = "fanova",
    seed: int = 0,
) -> pd.Series:
    """How much each parameter explains ``metric`` (shares summing to 1), by Optuna's
    importance evaluators fed with the sweep's trials (their best value of the metric)."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no INFO line per study
    metric = _metric(sweep, metric)
    mode = dict(sweep.objectives).get(metric, sweep.mode)
    evaluators: dict[str, Any] = {
        "fanova": optuna.importance.FanovaImportanceEvaluator,
        "mdi": optuna.importance.MeanDecreaseImpurityImportanceEvaluator,
        "ped_anova": optuna.importance.PedAnovaImportanceEvaluator,
    }
    if evaluator not in evaluators:
        raise ValueError(f"evaluator must be one of {sorted(evaluators)}, but got {evaluator=}.")
    trials = sweep.trials()
    column = f"best_{metric}" if f"best_{metric}" in trials else metric
    trials = trials[trials[column].map(lambda v: isinstance(v, float) and math.isfinite(v))]
    distributions: dict[str, Any] = {}
    for param in sweep.params:
        values = trials[f"config/{param}"].dropna()
        if values.nunique() < 2:
            continue  # a constant explains nothing (and Optuna refuses single-value ranges)
        if _numeric(values):
            log = sweep.is_log_scale(param) and float(values.min()) > 0
            distributions[param] = FloatDistribution(float(values.min()), float(values.max()), log=log)
        else:
            distributions[param] = CategoricalDistribution(sorted(map(str, values.unique())))
    if len(trials) >= 2 and trials[column].nunique() < 2:
        raise ExperimentError(
            f"Parameter importance explains how {metric!r} varies, and in sweep {sweep.name!r} every trial has the "
            f"same {column} ({trials[column].iloc[0]!r}).",
            fix="Nothing to explain: compare the trials' learning curves instead.",
        )
    if len(trials) < 2 or not distributions:
        raise ExperimentError(
            f"Parameter importance needs at least 2 trials with a finite {metric!r} and a parameter that varies; "
            f"sweep {sweep.name!r} has {len(trials)} such trial(s) and varying parameters {sorted(distributions)}.",
            fix="Run more trials.",
        )
    study = optuna.create_study(direction="minimize" if mode == "min" else "maximize")
    for _, row in trials.iterrows():
        params = {}
        for param, dist in distributions.items():
            value = row[f"config/{param}"]
            if isinstance(value, float) and math.isnan(value):
                continue
            params[param] = str(value) if isinstance(dist, CategoricalDistribution) else float(value)
        study.add_trial(
            optuna.trial.create_trial(
                params=params, distributions={k: distributions[k] for k in params}, value=float(row[column])
            )
        )
    kwargs: dict[str, Any] = {} if evaluator == "ped_anova" else {"seed": seed}
    importances = optuna.importance.get_param_importances(study, evaluator=evaluators[evaluator](**kwargs))
    return pd.Series(importances, name=f"importance of {metric}", dtype=float)


def plot_importances(
    sweep: Sweep, *, metric: str | None = None, evaluator: Literal["fanova", "mdi", "ped_anova"] = "fanova"
) -> Figure:
    """A bar per parameter: its share of :func:`param_importances`."""
    importances = param_importances(sweep, metric=metric, evaluator=evaluator).sort_values()
    fig = Figure(figsize=(7, 1.2 + 0.45 * len(importances)), layout="constrained")
    ax = fig.add_subplot()
    ax.barh(list(importances.index), importances.to_numpy(), color="tab:blue")
    ax.set_xlabel(f"importance for {metric or sweep.metric} ({evaluator})")
    ax.set_title(f"{sweep.name}: hyperparameter importance")
    return fig


def metric_vs_params(sweep: Sweep, *, metric: str | None = None) -> Figure:
    """One scatter per parameter: each trial's best ``metric`` against the parameter's
    value (log x axis for log-scale parameters, categories side by side)."""
    metric = _metric(sweep, metric)
    trials = sweep.trials()
    column = f"best_{metric}" if f"best_{metric}" in trials else metric
    params = sweep.params
    cols = min(3, max(1, len(params)))
    rows = math.ceil(len(params) / cols) or 1
    fig = Figure(figsize=(4 * cols, 3.2 * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False).ravel()
    for ax, param in zip(axes, params, strict=False):
        values = trials[f"config/{param}"]
        if _numeric(values):
            ax.scatter(values, trials[column], s=18, alpha=0.8)
            if sweep.is_log_scale(param) and float(values.min()) > 0:
                ax.set_xscale("log")
        else:
            names = sorted(map(str, values.dropna().unique()))
            ax.scatter([names.index(str(v)) if str(v) in names else np.nan for v in values], trials[column], s=18)
            ax.set_xticks(range(len(names)), names)
        ax.set_xlabel(param)
        ax.set_ylabel(f"best {metric}" if column.startswith("best_") else metric)
    for ax in axes[len(params) :]:
        ax.set_visible(False)
    fig.suptitle(f"{sweep.name}: {metric} against each parameter")
    return fig


def rungs(sweep: Sweep) -> Figure:
    """For ASHA/HyperBand: how many trials reached each rung (the step counts at which the
    scheduler stopped trials, and the full budget)."""
    trials = sweep.trials()
    end = int(trials["iterations"].max() or 0)  # the longest trial's end: a bar, not a rung
    if schema.ASHA_RUNGS_TAG in sweep.tags:  # ASHA's own rungs, as the sweep's scheduler had them
        rungs = {int(r) for r in sweep.tags[schema.ASHA_RUNGS_TAG].split(",") if r}
    else:  # older sweeps, HyperBand: where the scheduler did stop trials
        rungs = set(map(int, trials[trials["status"] == "stopped_early"]["iterations"]))
    levels = sorted(r for r in rungs if 0 < r < end)
    reached = [int((trials["iterations"] >= level).sum()) for level in [*levels, end]]
    fig = Figure(figsize=(7, 4), layout="constrained")
    ax = fig.add_subplot()
    ax.bar([*map(str, levels), f"end ({end})"], reached, color="tab:blue")
    for i, count in enumerate(reached):
        ax.annotate(str(count), (i, count), ha="center", va="bottom")
    ax.set_xlabel("rung (steps)")
    ax.set_ylabel("trials that reached it")
    ax.set_title(f"{sweep.name}: trials reaching each rung ({sweep.scheduler})")
    return fig


def pbt_lineage(sweep: Sweep) -> Figure:
    """For PBT/PB2: each trial as a line over its steps, and an arrow from donor to
    recipient at every exploit (labelled with the new values)."""
    trials = sweep.trials().sort_values("trial_index")
    exploits = sweep.pbt_exploits()
    row = {name: i for i, name in enumerate(trials["trial"])}
    fig = Figure(figsize=(9, 1.5 + 0.5 * len(trials)), layout="constrained")
    ax = fig.add_subplot()
    for name, iterations in zip(trials["trial"], trials["iterations"], strict=True):
        ax.plot([0, iterations], [row[name], row[name]], color="0.7", linewidth=3)
    for (step, trial, donor), changes in exploits.groupby(["step", "trial", "donor"], sort=False):
        ax.annotate(
            "",
            xy=(step, row[trial]),
            xytext=(step, row[donor]),
            arrowprops={"arrowstyle": "->", "color": "tab:red"},
        )
        text = ", ".join(f"{p}={_short(v)}" for p, v in zip(changes["param"], changes["new"], strict=True))
        ax.annotate(text, (step, row[trial]), xytext=(4, 4), textcoords="offset points", fontsize=7)
    ax.set_yticks(range(len(row)), list(row))
    ax.set_xlabel("step (training iteration)")
    ax.set_title(f"{sweep.name}: PBT lineage ({len(exploits.groupby(['step', 'trial']))} exploits)")
    return fig


def _short(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def pareto_front(sweep: Sweep, *, metrics: tuple[str, str] | None = None) -> Figure:
    """Every trial's last values of two objectives, the Pareto-optimal ones highlighted."""
    if metrics is None:
        if len(sweep.objectives) < 2:
            raise ExperimentError(
                f"Sweep {sweep.name!r} has one objective ({sweep.metric!r}); a Pareto front needs two.",
                fix="Pass metrics=(a, b) to plot two recorded metrics.",
            )
        metrics = (sweep.objectives[0][0], sweep.objectives[1][0])
    x, y = (_metric(sweep, m) for m in metrics)
    trials = sweep.trials()
    front = trials[trials["pareto"]] if "pareto" in trials else trials.iloc[0:0]
    fig = Figure(figsize=(6, 5), layout="constrained")
    ax = fig.add_subplot()
    ax.scatter(trials[x], trials[y], color="0.6", s=18, label="trial")
    ordered = front.sort_values(x)
    ax.plot(ordered[x], ordered[y], "o-", color="tab:red", label="Pareto-optimal")
    ax.set_xlabel(x)
    ax.set_ylabel(y)
    ax.legend()
    ax.set_title(f"{sweep.name}: Pareto front")
    return fig


# Fewer finished trials than this, and the report draws no importance chart: a ranking of
# several hyperparameters from a handful of points is noise drawn as a bar chart.
IMPORTANCE_MIN_TRIALS = 8


def _finished(sweep: Sweep) -> int:
    """Trials with a finite best value of the sweep's metric."""
    column = f"best_{sweep.metric}"
    trials = sweep.trials()
    return int(trials[column].map(lambda v: isinstance(v, float) and math.isfinite(v)).sum()) if column in trials else 0


def importance_omitted(sweep: Sweep) -> str | None:
    """Why the report shows no importance chart for this sweep (too few finished trials),
    or None when it may show one."""
    finished = _finished(sweep)
    if not sweep.params or finished >= IMPORTANCE_MIN_TRIALS:
        return None
    return (
        f"No hyperparameter importance: {finished} trial(s) finished with a finite {sweep.metric}, and ranking "
        f"{len(sweep.params)} hyperparameter(s) needs at least {IMPORTANCE_MIN_TRIALS}; "
        "plots.param_importances(sweep) computes it anyway."
    )


def sweep_figures(sweep: Sweep) -> dict[str, Figure]:
    """The figures that fit this sweep, by file-friendly name: learning curves, metric vs
    parameters, parallel coordinates, importance (IMPORTANCE_MIN_TRIALS+ finished trials), rungs (ASHA/HyperBand), PBT
    lineage (PBT/PB2 with exploits), Pareto front (several objectives)."""
    figures: dict[str, Figure] = {}
    if sweep.metric not in sweep.metrics:
        return figures  # nothing reported (every trial failed before its first report)
    figures["learning_curves"] = learning_curves(sweep)
    if sweep.params:
        figures["metric_vs_params"] = metric_vs_params(sweep)
        figures["parallel_coordinates"] = parallel_coordinates(sweep)
        if importance_omitted(sweep) is None:
            with contextlib.suppress(ExperimentError):  # nothing varies: no importance
                figures["importance"] = plot_importances(sweep)
    if sweep.scheduler in ("asha", "hyperband"):
        figures["rungs"] = rungs(sweep)
    if sweep.scheduler in ("pbt", "pb2") and not sweep.pbt_exploits().empty:
        figures["pbt_lineage"] = pbt_lineage(sweep)
    if len(sweep.objectives) > 1:
        figures["pareto_front"] = pareto_front(sweep)
    return figures
