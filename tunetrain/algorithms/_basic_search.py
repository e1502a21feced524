"""Searchers "random" and "grid": Ray Tune's BasicVariantGenerator, seeded."""

from __future__ import annotations

from typing import Any

from ray.tune.search import BasicVariantGenerator

from tunetrain.algorithms._pairing import check_options
from tunetrain.experiment import Experiment


def build_basic(
    experiment: Experiment,
    name: str,
    options: dict[str, Any],
    *,
    seed: int,
    max_concurrent: int,
    points: list[dict[str, Any]] | None,
    evaluated: list[tuple[dict[str, Any], list[float]]] | None,
) -> tuple[BasicVariantGenerator, int]:
    """Tune's variant generator (its first trial counted as 0) for ``experiment``."""
    if points:
        options["points_to_evaluate"] = points
    check_options("searcher", name, BasicVariantGenerator, options)
    options.setdefault("random_state", seed)
    return BasicVariantGenerator(max_concurrent=max_concurrent, **options), 0
