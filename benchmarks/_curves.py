"""Recorded real learning curves (benchmarks/data/curves_<problem>.json.gz, made by
benchmarks/record_curves.py from tunetrain's own sweeps of real PyTorch training) as problems
of the simulated backend: a config's value after epoch i is the val_loss its recorded trial
reported then, and epoch i costs the wall seconds that epoch took.

A tabular benchmark: the searchers search the space the grid spans (log-scaled floats and
integers as ranges, categoricals as choices) and each suggestion is snapped to the nearest
recorded grid point per dimension (log distance for a log-spaced dimension), as tabular
benchmarks with continuous spaces do (HPOBench's and YAHPO's nearest-neighbour lookups)."""

from __future__ import annotations

import gzip
import itertools
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import _simulated as sim  # benchmarks/ is on the path, as for the other scripts
from ray import tune

DATA = Path(__file__).resolve().parent / "data"
PROBLEMS = ("digits", "mnist1d", "chars")


def load(problem: str, folder: Path = DATA) -> dict[str, Any]:
    with gzip.open(folder / f"curves_{problem}.json.gz", "rt") as f:
        return dict(json.load(f))


class Table:
    """One problem's curves: the first seed's full grid, and the second seed's sub-grid."""

    def __init__(self, data: Mapping[str, Any]) -> None:
        first = f"curves_{data['problem']}"
        self.rows = [r for r in data["rows"] if r["sweep"] == first]
        self.repeats = [r for r in data["rows"] if r["sweep"] != first]
        self.keys = list(self.rows[0]["config"])
        self.grid = {k: sorted({r["config"][k] for r in self.rows}, key=_order) for k in self.keys}
        self._by_point = {self._point(r["config"]): r for r in self.rows}
        self.max_t = min(len(r["val_loss"]) for r in self.rows)

    def _point(self, config: Mapping[str, Any]) -> tuple[Any, ...]:
        return tuple(_nearest(config[k], self.grid[k]) for k in self.keys)

    def row(self, config: Mapping[str, Any]) -> Mapping[str, Any]:
        return self._by_point[self._point(config)]

    def space(self) -> dict[str, Any]:
        """Ranges for numeric dimensions (log-scaled where the grid is), choices otherwise."""
        space: dict[str, Any] = {}
        for key, values in self.grid.items():
            if not all(isinstance(v, int | float) and not isinstance(v, bool) for v in values):
                space[key] = tune.choice(values)
            elif all(isinstance(v, int) for v in values):
                space[key] = (
                    tune.lograndint(min(values), max(values) + 1) if _log_spaced(values) else tune.choice(values)
                )
            elif _log_spaced(values):
                space[key] = tune.loguniform(min(values), max(values))
            else:
                space[key] = tune.uniform(min(values), max(values))
        return space

    def median_trial_s(self) -> float:
        """The median over the grid of a config's total recorded epoch time (its full trial)."""
        totals = sorted(sum(r["epoch_s"][: self.max_t]) for r in self.rows)
        return float(totals[len(totals) // 2])

    def noise_floor(self) -> float:
        """The median absolute difference of the final val_loss between the two seeds of a
        config (the sub-grid recorded twice): regrets below it are not told apart."""
        firsts = {self._point(r["config"]): r["val_loss"][-1] for r in self.rows}
        gaps = sorted(abs(firsts[self._point(r["config"])] - r["val_loss"][-1]) for r in self.repeats)
        return gaps[len(gaps) // 2] if gaps else math.nan

    def rung_correlation(self, epoch: int) -> float:
        """Spearman's rank correlation, over the grid, between the val_loss after ``epoch`` and
        the final one: how well stopping at that epoch ranks configurations (1: perfectly;
        low or negative: the low fidelity misleads)."""
        from scipy.stats import spearmanr

        early = [r["val_loss"][epoch - 1] for r in self.rows]
        final = [r["val_loss"][self.max_t - 1] for r in self.rows]
        return float(spearmanr(early, final).statistic)

    def regret_choosing_at(self, epoch: int) -> float:
        """The final val_loss of the config that is best after ``epoch``, less the best final
        one: what keeping only the leader at that epoch costs (Egele et al. 2023's i-Epoch
        with k=1, over the whole grid)."""
        leader = min(self.rows, key=lambda r: r["val_loss"][epoch - 1])
        return float(leader["val_loss"][self.max_t - 1]) - min(float(r["val_loss"][self.max_t - 1]) for r in self.rows)

    def problem(self, name: str) -> sim.Problem:
        def value(config: Mapping[str, Any], i: int) -> float:
            return float(self.row(config)["val_loss"][i - 1])

        def cost(config: Mapping[str, Any], i: int) -> float:
            return float(self.row(config)["epoch_s"][i - 1])

        optimum = min(float(r["val_loss"][self.max_t - 1]) for r in self.rows)
        return sim.Problem(f"curves_{name}", self.space(), self.max_t, value, cost, optimum, "multi-fidelity")


def curve_problem(name: str, folder: Path = DATA) -> sim.Problem:
    """The recorded problem ``name`` (digits, mnist1d, chars) for the simulated backend."""
    return Table(load(name, folder)).problem(name)


def _order(value: Any) -> tuple[int, Any]:
    return (0, value) if isinstance(value, int | float) else (1, str(value))


def _log_spaced(values: list[Any]) -> bool:
    positive = [v for v in values if v > 0]
    if len(positive) != len(values) or len(values) < 3:
        return False
    ratios = [b / a for a, b in itertools.pairwise(values)]
    return max(ratios) / min(ratios) < 3 and min(ratios) >= 1.5


def _nearest(value: Any, grid: list[Any]) -> Any:
    if value in grid:
        return value
    numeric = [v for v in grid if isinstance(v, int | float)]
    if not isinstance(value, int | float) or len(numeric) != len(grid):
        raise KeyError(f"{value!r} is not one of {grid}")
    log = _log_spaced(grid)
    measure = (lambda v: math.log(v)) if log and value > 0 else (lambda v: float(v))
    return min(grid, key=lambda v: abs(measure(v) - measure(value)))
