"""Searcher "hyperopt": Ray Tune's HyperOptSearch, with a space of its own for conditional
choices (Ray's converter gives every branch the same labels)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ray.tune.search import Searcher
from ray.tune.search.sample import Categorical, Domain

from tunetrain.algorithms._pairing import check_options, searcher_owns_space
from tunetrain.experiment import Experiment


def build_hyperopt(
    experiment: Experiment,
    name: str,
    options: dict[str, Any],
    *,
    seed: int,
    max_concurrent: int,
    points: list[dict[str, Any]] | None,
    evaluated: list[tuple[dict[str, Any], list[float]]] | None,
) -> tuple[Searcher, int]:
    """HyperOptSearch (its first trial counted as 1) for ``experiment``: see build_searcher."""
    from ray.tune.search.hyperopt import HyperOptSearch

    if points:
        options["points_to_evaluate"] = points
    check_options("searcher", name, HyperOptSearch, options)
    options.setdefault("random_state_seed", seed)
    if searcher_owns_space(experiment):
        options["space"] = hyperopt_space(experiment.space)
    return HyperOptSearch(metric=experiment.primary_metric, mode=experiment.primary_mode, **options), 1


def hyperopt_space(space: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A HyperOpt space (nested ``hp.choice``) for a Ray Tune space with conditional choices.

    Ray's own converter labels every branch of a choice with the same prefix, so branches
    sharing a parameter name (``lr`` for both SGD and Adam) collide in HyperOpt
    (DuplicateLabel); here each branch's labels carry its index. Everything else is Ray's
    conversion."""
    from hyperopt import hp
    from ray.tune.search.hyperopt import HyperOptSearch

    out: dict[str, Any] = {}
    for key, value in space.items():
        label = f"{prefix}/{key}" if prefix else key
        if isinstance(value, Mapping):
            out[key] = hyperopt_space(value, label)
        elif isinstance(value, Categorical) and any(isinstance(c, Mapping) for c in value.categories):
            branches = [
                hyperopt_space(option, f"{label}/{i}") if isinstance(option, Mapping) else option
                for i, option in enumerate(value.categories)
            ]
            out[key] = hp.choice(label, branches)
        elif isinstance(value, Domain):
            out[key] = HyperOptSearch.convert_search_space({key: value}, prefix=prefix)[key]
        else:
            out[key] = value
    return out
