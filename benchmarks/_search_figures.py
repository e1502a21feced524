"""The measures, tables' cells and anytime plots of benchmarks/search_quality.py."""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any


def regret_at(curve: list[Any], x: float, axis: int) -> float:
    """A multi-fidelity run's regret at wall time (axis 0) or compute (axis 1) ``x``."""
    value = math.inf
    for point in curve:
        if point[axis] > x:
            break
        value = point[2]
    return value


def final(run: Mapping[str, Any]) -> float:
    curve = run["curve"]
    if not curve:
        return math.inf
    return float(curve[-1][2] if isinstance(curve[-1], list | tuple) else curve[-1])


def spread(values: list[float]) -> str:
    """Median [25th-75th percentile]."""
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 3
    return f"{q[1]:.3g} [{q[0]:.3g}-{q[2]:.3g}]"


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else math.inf


def _runs(results: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in results if all(r[key] == value for key, value in match.items())]


def reach_fraction(
    results: list[dict[str, Any]], name: str, arm: str, k: int, target: float, *, budget_s: float
) -> float:
    """The share of the wall budget (``budget_s`` at k=1) after which ``arm``'s median regret is
    at or below ``target``."""
    budget = budget_s / k
    runs = _runs(results, problem=name, arm=arm, k=k)
    for i in range(1, 101):
        x = budget * i / 100
        if _median([regret_at(r["curve"], x, 0) for r in runs]) <= target:
            return i / 100
    return math.inf


def _figure(panels: int) -> tuple[Any, Any]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = 2 if panels > 4 else 1
    columns = math.ceil(panels / rows)
    return plt.subplots(rows, columns, figsize=(4 * columns, 3.5 * rows), squeeze=False)


def _save(fig: Any, axes: Any, k: int, path: Path, xlabel: str) -> None:
    import matplotlib.pyplot as plt

    for ax in axes[-1]:
        ax.set_xlabel(xlabel)
    for ax in axes[:, 0]:
        ax.set_ylabel("median regret")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"Median regret at {k} trials at once (benchmarks/search_quality.py)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


def plot(
    results: list[dict[str, Any]],
    arms: list[str],
    k: int,
    axis: int,
    path: Path,
    *,
    problems: list[str],
    budget_s: dict[str, float],
) -> None:
    """Median regret against wall time (axis 0) or compute (axis 1), one panel a problem;
    ``budget_s``: each problem's budget at k=1."""
    fig, axes = _figure(len(problems))
    for ax, name in zip(axes.flat, problems, strict=False):
        budget = budget_s[name] / k * (k if axis == 1 else 1)
        xs = [budget * i / 60 for i in range(1, 61)]
        for arm in arms:
            runs = _runs(results, problem=name, arm=arm, k=k)
            if runs:
                ys = [_median([regret_at(r["curve"], x, axis) for r in runs]) for x in xs]
                # a regret of 0 (a tabular problem's best found) is drawn at 1e-4, the log scale's floor
                ax.plot(xs, [max(y, 1e-4) if math.isfinite(y) else float("nan") for y in ys], label=arm)
        ax.set_title(name)
        ax.set_yscale("log")
    _save(fig, axes, k, path, "simulated wall time, s" if axis == 0 else "compute, worker-seconds")


def plot_trials(results: list[dict[str, Any]], arms: list[str], k: int, path: Path, *, problems: list[str]) -> None:
    """Single-fidelity runs: the median best regret after each trial, one panel a problem."""
    fig, axes = _figure(len(problems))
    for ax, name in zip(axes.flat, problems, strict=False):
        for arm in arms:
            curves = [r["curve"] for r in _runs(results, problem=name, arm=arm, k=k)]
            if curves:
                n = min(len(c) for c in curves)
                ys = [_median([c[i] for c in curves]) for i in range(n)]
                ax.plot(range(1, n + 1), [max(y, 1e-6) for y in ys], label=arm)
        ax.set_title(name)
        ax.set_yscale("log")
    _save(fig, axes, k, path, "trials ended")
