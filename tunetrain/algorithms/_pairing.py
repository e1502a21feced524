"""Which searchers go with which schedulers, and options checked against Ray's classes."""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from tunetrain import space as spaces
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment

OPTUNA_SAMPLERS = ("tpe", "cmaes", "nsga2", "gp", "random")

# Which searchers each scheduler works with. Ray Tune refuses a search algorithm with PBT
# and PB2 (they explore by themselves, from the population).
# PB2 also needs continuous dimensions, which a grid does not have.
_SEARCHERS_FOR = {"pbt": ("random", "grid"), "pb2": ("random",)}


def check_options(kind: str, name: str, cls: type, options: Mapping[str, Any]) -> None:
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


def check_pairing(experiment: Experiment) -> None:
    """Refuse scheduler/searcher/objective combinations Ray Tune does not run, saying which work."""
    allowed = _SEARCHERS_FOR.get(experiment.scheduler)
    if allowed and experiment.searcher not in allowed:
        if experiment.searcher == "grid":
            reason = "PB2 tunes continuous dimensions, which a grid has not"
        else:
            reason = "Ray Tune refuses a search algorithm with population-based training, which explores by itself"
        raise ExperimentError(
            f"Scheduler {experiment.scheduler!r} cannot be paired with searcher {experiment.searcher!r}: {reason}. "
            f"{experiment.scheduler!r} works with searcher {' or '.join(map(repr, allowed))}.",
            fix=f"Use --searcher {allowed[0]}, or another scheduler (fifo, asha, hyperband, median) with "
            f"{experiment.searcher!r}.",
        )
    if experiment.multi_objective and experiment.searcher == "hyperopt":
        raise ExperimentError(
            f"Searcher 'hyperopt' searches on one metric, but the experiment has {len(experiment.objectives)} "
            f"({', '.join(m for m, _ in experiment.objectives)}).",
            fix="Use searcher 'optuna' (NSGA-II by default for several metrics), 'random' or 'grid'.",
        )
    grids = [key for key, value in spaces.iter_leaves(experiment.space) if spaces.is_grid(value)]
    if experiment.searcher == "grid" and not grids:
        raise ExperimentError(
            "Searcher 'grid' runs the tune.grid_search dimensions of the space, but the space has none.",
            fix='Use tune.grid_search([...]) for the dimensions to cover, e.g. {"lr": tune.grid_search([1e-3, 1e-2])}.',
        )
    if grids and experiment.searcher not in ("random", "grid"):
        raise ExperimentError(
            f"tune.grid_search (at {', '.join(grids)}) needs searcher 'grid' or 'random', "
            f"but got searcher={experiment.searcher!r}.",
            fix="Use --searcher grid, or replace grid_search with tune.choice.",
        )


def searcher_owns_space(experiment: Experiment) -> bool:
    """Whether the searcher gets the search space itself (Tune's param_space then holds only
    constants): Optuna or HyperOpt with a conditional space."""
    return experiment.searcher in ("optuna", "hyperopt") and spaces.has_conditional(experiment.space)
