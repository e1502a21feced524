"""The scheduler and searcher a sweep will use, chosen and checked in one call before
anything runs: the plan asks this layer once instead of step by step."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from tunetrain.algorithms._pairing import check_pairing
from tunetrain.algorithms._schedulers import budget_warning, build_scheduler
from tunetrain.algorithms._searchers import build_searcher, resolve_searcher, searcher_live_limit
from tunetrain.experiment import Experiment

# Searchers with a model of the space: with every dimension pinned there is nothing to learn.
_MODEL_BASED = ("optuna", "async_bohb", "hyperopt")


@dataclasses.dataclass(frozen=True)
class ChosenAlgorithms:
    searcher: str  # the searcher's name, `auto` decided
    searcher_note: str  # why that one (printed in the plan, recorded on the parent run)
    live_limit: int  # the searcher's own limit on running trials (searcher_live_limit)
    warning: str | None  # what the scheduler's layout says of the stop rule (budget_warning)


def choose_algorithms(
    experiment: Experiment,
    *,
    searched: bool,
    max_concurrent: int,
    seed: int,
    points: list[dict[str, Any]] | None,
    evaluated: Sequence[tuple[dict[str, Any], list[float]]],
) -> ChosenAlgorithms:
    """The searcher resolved (``auto``; random when nothing is ``searched``), the pairing
    checked, and the scheduler and searcher built once so that bad options fail now, before
    anything starts (the run builds them again, from the plan)."""
    searcher, note = resolve_searcher(experiment)
    if not searched and searcher in _MODEL_BASED:
        searcher, note = "random", "every dimension is pinned"
    chosen = experiment.replace(searcher=searcher)
    check_pairing(chosen)
    live_limit = searcher_live_limit(build_scheduler(experiment), max_concurrent)
    build_searcher(chosen, seed=seed, max_concurrent=live_limit, points=points, evaluated=list(evaluated))
    return ChosenAlgorithms(searcher, note, live_limit, budget_warning(experiment))
