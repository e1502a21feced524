"""tunetrain's TPE searcher (FidelityTPESearch) driven as Tune's controller drives it, on the
search benchmark's simulated backend (benchmarks/_simulated.py: the real searcher and
scheduler, simulated time), without Ray: what it suggests at several trials at once, its
start-up count and its reproducible mode. What only a real sweep shows (the CLI, the plan's
concurrency reaching the searcher, the MLflow record) is in tests/test_search.py."""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from ray import tune

from tunetrain.algorithms._tpe import DRAWN_BY

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _search_arms
import _simulated as sim

ITERATIONS = 4


def _loss(config: Mapping[str, Any], step: int) -> float:
    return (config["x"] - 0.3) ** 2 + 1.0 / (step + 1) + config.get("k", 0) / 10


def _run(
    space: dict[str, Any],
    *,
    searcher: str = "optuna",
    trials: int,
    at_once: int,
    options: Mapping[str, Any] | None = None,
    cost: Callable[[Mapping[str, Any], int], float] = lambda config, step: 1.0,
    seed: int = 11,
) -> list[Any]:
    """The study's trials after a FIFO sweep of ``trials`` trials, ``at_once`` at a time."""
    problem = sim.Problem("policy", space, ITERATIONS, _loss, cost, 0.0, "single-fidelity")
    arm = _search_arms._tunetrain_arm(problem, searcher, seed, at_once, options or {}, trials=trials)
    events = sim.simulate(problem, arm, workers=at_once, wall_s=None, trials=trials)
    assert len({e.trial for e in events}) == trials
    assert isinstance(arm, sim.RayArm)
    return list(arm.searcher.study.trials)


@pytest.mark.parametrize("searcher", ["optuna", "async_bohb"])
def test_eight_trials_at_once_all_get_different_configurations(searcher: str) -> None:
    # 8 configurations in the space, 8 trials at once: random draws would repeat one with
    # probability 1 - 8!/8**8 (99.8 %).
    space = {"x": tune.choice([0.1, 0.5]), "k": tune.choice([0, 1, 2, 3])}
    trials = _run(space, searcher=searcher, trials=8, at_once=8)
    assert len({(t.params["x"], t.params["k"]) for t in trials}) == 8, [t.params for t in trials]


def test_exactly_the_configured_start_up_trials_are_random_at_four_at_once() -> None:
    trials = _run({"x": tune.uniform(0.0, 1.0)}, trials=14, at_once=4, options={"n_startup_trials": 6})
    drawn = [t.user_attrs[DRAWN_BY] for t in trials]
    # Ray's OptunaSearch draws at random until 6 trials have ended: 6 plus those started
    # meanwhile (up to 3 more at 4 at once, Ray issue #52535).
    assert drawn == ["random"] * 6 + ["model"] * 8, drawn


def test_reproducible_search_gives_the_same_configurations_whatever_order_trials_end_in() -> None:
    space = {"x": tune.uniform(0.0, 1.0), "pause": tune.uniform(0.0, 0.3)}
    options = {"n_startup_trials": 3, "reproducible": True}
    # Trials of unequal length (from their pause), then the same trials with the lengths
    # reversed: they end in another order, and the default mode suggests other configurations.
    slow_first: Callable[[Mapping[str, Any], int], float] = lambda config, step: 0.05 + config["pause"]
    fast_first: Callable[[Mapping[str, Any], int], float] = lambda config, step: 0.35 - config["pause"]
    runs = [
        [t.params for t in _run(space, trials=10, at_once=2, options=options, cost=cost)]
        for cost in (slow_first, slow_first, fast_first)
    ]
    assert len(runs[0]) == 10 and runs[0] == runs[1] == runs[2]
    default = [
        [t.params for t in _run(space, trials=10, at_once=2, options={"n_startup_trials": 3}, cost=cost)]
        for cost in (slow_first, fast_first)
    ]
    assert default[0] != default[1]  # the timing matters without the reproducible mode
