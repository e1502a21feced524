from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ray import tune
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import BasicVariantGenerator

from tests.conftest import make_experiment
from tunetrain import ExperimentError, StopRule
from tunetrain.algorithms import RecordingASHA, build_scheduler, build_searcher


def test_asha_takes_its_budget_from_the_stop_rule() -> None:
    scheduler = build_scheduler(make_experiment(stop=StopRule(max_iterations=12)))
    assert isinstance(scheduler, RecordingASHA)
    assert scheduler._max_t == 12


def test_user_options_override_the_derived_defaults() -> None:
    scheduler: Any = build_scheduler(make_experiment(stop=StopRule(max_iterations=12), scheduler_options={"max_t": 5}))
    assert scheduler._max_t == 5


def test_invalid_asha_options_are_bad_input_not_an_assertion() -> None:
    with pytest.raises(ExperimentError, match="Invalid ASHA options"):
        build_scheduler(make_experiment(scheduler_options={"max_t": 2, "grace_period": 5}))


def test_options_may_not_override_metric_or_mode() -> None:
    with pytest.raises(ExperimentError, match="it comes from the experiment"):
        build_scheduler(make_experiment(scheduler_options={"metric": "acc"}))


def test_scheduler_remembers_early_stops_but_not_the_final_repeat_of_a_finished_trial() -> None:
    scheduler: Any = build_scheduler(
        make_experiment(scheduler="asha", scheduler_options={"max_t": 4, "grace_period": 1})
    )
    scheduler.set_search_properties("loss", "min")
    good, bad, done = (SimpleNamespace(trial_id=name) for name in ("good", "bad", "done"))
    for trial in (good, bad, done):
        scheduler.on_trial_add(None, trial)
    scheduler.on_trial_result(None, good, {"training_iteration": 1, "loss": 0.1})
    decision = scheduler.on_trial_result(None, bad, {"training_iteration": 1, "loss": 9.0})
    # ASHA cut the worse trial at the first rung, and that is recorded as an early stop.
    assert decision == TrialScheduler.STOP
    assert scheduler.early_stopped == {"bad": 1}
    # Tune repeats a finished trial's last result marked done; a STOP then is not an early stop.
    scheduler.on_trial_result(None, done, {"training_iteration": 1, "loss": 9.0, "done": True})
    assert "done" not in scheduler.early_stopped


def test_random_searcher_is_seeded_and_counts_trials_from_zero() -> None:
    searcher, first = build_searcher(make_experiment(searcher="random"), seed=7, max_concurrent=2)
    assert isinstance(searcher, BasicVariantGenerator)
    assert first == 0


@pytest.mark.parametrize("name", ["optuna", "hyperopt"])
def test_model_based_searchers_are_seeded_and_suggest_the_same_sequence_again(name: str) -> None:
    def suggestions(seed: int = 3) -> list[Any]:
        searcher: Any
        searcher, first = build_searcher(make_experiment(searcher=name), seed=seed, max_concurrent=2)
        assert first == 1  # Tune's SearchGenerator counts trials from 1
        searcher.set_search_properties("loss", "min", {"lr": tune.uniform(0, 1)})
        return [searcher.suggest(f"t{i}") for i in range(3)]

    # Same root seed, same sequence; another seed, another sequence.
    assert suggestions() == suggestions()
    assert suggestions() != suggestions(seed=4)
