from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
from ray import tune
from ray.tune.schedulers import TrialScheduler
from ray.tune.search import BasicVariantGenerator

from tests.conftest import make_experiment
from tunetrain import ExperimentError, StopRule
from tunetrain.algorithms import (
    RecordingASHA,
    build_scheduler,
    build_searcher,
    check_pairing,
    searcher_live_limit,
    searcher_owns_space,
)


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


def test_hyperband_lets_the_searcher_fill_its_largest_bracket() -> None:
    hyperband = build_scheduler(make_experiment(scheduler="hyperband", stop=StopRule(max_iterations=9)))
    # max_t 9, reduction factor 3: brackets of 3, 5 and 9 trials. Paused trials count as live
    # for Tune's concurrency limit, so the limit must let a 9-trial bracket fill.
    assert searcher_live_limit(hyperband, 2) == 9
    # A larger limit is kept; other schedulers keep the limit as it is.
    assert searcher_live_limit(hyperband, 12) == 12
    assert searcher_live_limit(build_scheduler(make_experiment(scheduler="asha")), 2) == 2


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


@pytest.mark.parametrize(
    ("name", "cls"),
    [("hyperband", "HyperBandScheduler"), ("median", "MedianStoppingRule"), ("pbt", "PopulationBasedTraining")],
)
def test_every_scheduler_is_ray_tunes_own_class(name: str, cls: str) -> None:
    scheduler = build_scheduler(make_experiment(scheduler=name, searcher="random", stop=StopRule(max_iterations=8)))
    # The Ray Tune class itself, only subclassed for bookkeeping.
    assert cls in [base.__name__ for base in type(scheduler).__mro__]


def test_pbt_mutates_the_space_within_its_ranges() -> None:
    space = {
        "lr": tune.loguniform(1e-3, 1e-1),
        "opt": {"momentum": tune.uniform(0, 0.9)},
        "act": tune.choice(["a", "b"]),
    }
    scheduler: Any = build_scheduler(make_experiment(scheduler="pbt", searcher="random", space=space))
    mutations = scheduler._hyperparam_mutations
    # Numbers keep their Tune domain, choices become lists PBT can shift along, nesting stays.
    assert mutations["lr"] is space["lr"] and mutations["opt"]["momentum"] is space["opt"]["momentum"]
    assert mutations["act"] == ["a", "b"]
    # A perturbation that left the range is clipped back into it.
    clipped = scheduler._custom_explore_fn({"lr": 0.5, "opt": {"momentum": -0.2}, "act": "a"})
    assert clipped == {"lr": 0.1, "opt": {"momentum": 0.0}, "act": "a"}


def test_pb2_gets_its_bounds_from_the_space() -> None:
    scheduler: Any = build_scheduler(
        make_experiment(
            scheduler="pb2", searcher="random", space={"lr": tune.uniform(0.01, 0.1), "n": tune.choice([1])}
        )
    )
    assert scheduler._hyperparam_bounds == {"lr": [0.01, 0.1]}


@pytest.mark.parametrize("searcher", ["optuna", "hyperopt"])
def test_pbt_with_a_model_based_searcher_is_refused_naming_what_works(searcher: str) -> None:
    with pytest.raises(ExperimentError, match="works with searcher 'random' or 'grid'"):
        check_pairing(make_experiment(scheduler="pbt", searcher=searcher))


def test_grid_searcher_needs_grid_dimensions_and_model_based_ones_refuse_them() -> None:
    with pytest.raises(ExperimentError, match="the space has none"):
        check_pairing(make_experiment(searcher="grid"))
    with pytest.raises(ExperimentError, match="needs searcher 'grid' or 'random'"):
        check_pairing(make_experiment(searcher="optuna", space={"lr": tune.grid_search([0.1, 0.2])}))


@pytest.mark.parametrize("sampler", ["tpe", "cmaes", "nsga2", "gp", "random"])
def test_optuna_samplers_by_name_are_seeded(sampler: str) -> None:
    space = {"x": tune.uniform(0, 1), "y": tune.uniform(0, 1)}

    def suggestions() -> list[Any]:
        searcher: Any
        searcher, _ = build_searcher(
            make_experiment(space=space, searcher_options={"sampler": sampler}), seed=5, max_concurrent=1
        )
        searcher.set_search_properties(None, None, space)
        out = []
        for i in range(4):
            config = searcher.suggest(str(i))
            searcher.on_trial_complete(str(i), {"loss": config["x"] + config["y"]})
            out.append(config)
        return out

    assert suggestions() == suggestions()


def test_unknown_optuna_sampler_lists_the_valid_ones() -> None:
    with pytest.raises(ExperimentError, match="valid samplers are tpe, cmaes, nsga2, gp, random"):
        build_searcher(make_experiment(searcher_options={"sampler": "smac"}), seed=0, max_concurrent=1)


CONDITIONAL = {
    "opt": tune.choice(
        [
            {"name": "sgd", "lr": tune.loguniform(1e-3, 1e-1), "momentum": tune.uniform(0, 0.9)},
            {"name": "adam", "lr": tune.loguniform(1e-4, 1e-2)},
        ]
    ),
    "width": tune.randint(1, 4),
}


@pytest.mark.parametrize("searcher", ["optuna", "hyperopt"])
def test_conditional_spaces_suggest_only_the_chosen_branch(searcher: str) -> None:
    experiment = make_experiment(space=CONDITIONAL, searcher=searcher)
    built: Any
    built, _ = build_searcher(experiment, seed=1, max_concurrent=1)
    # The searcher holds the space itself (Optuna define-by-run, HyperOpt nested hp.choice);
    # Tune then passes it only the constants.
    assert searcher_owns_space(experiment)
    built.set_search_properties(None, None, {})
    names = set()
    for i in range(12):
        config = built.suggest(str(i))
        built.on_trial_complete(str(i), {"loss": config["opt"]["lr"]})
        # A branch's own parameters appear with it and only with it; nothing else leaks in.
        assert set(config) == {"opt", "width"}
        expected = {"name", "lr", "momentum"} if config["opt"]["name"] == "sgd" else {"name", "lr"}
        assert set(config["opt"]) == expected
        assert 1 <= config["width"] <= 3
        names.add(config["opt"]["name"])
    assert names == {"sgd", "adam"}  # both branches were explored


def test_the_scheduler_leaves_the_exempt_baseline_alone_and_starts_it_first() -> None:
    scheduler: Any = build_scheduler(
        make_experiment(scheduler="asha", scheduler_options={"max_t": 4, "grace_period": 1})
    )
    scheduler.set_search_properties("loss", "min")
    good, base, bad = (SimpleNamespace(trial_id=name, status="PENDING") for name in ("good", "base", "bad"))
    scheduler.exempt = lambda trial: trial.trial_id == "base"
    for trial in (good, base, bad):
        scheduler.on_trial_add(None, trial)
    assert "base" not in scheduler._trial_info  # never in ASHA's brackets (Ray's private bookkeeping)
    controller = SimpleNamespace(get_trials=lambda: [good, base, bad])
    assert scheduler.choose_trial_to_run(controller) is base  # pending: it goes first
    scheduler.on_trial_result(None, good, {"training_iteration": 1, "loss": 0.1})
    # As bad as the trial ASHA cuts, and never cut.
    assert scheduler.on_trial_result(None, base, {"training_iteration": 1, "loss": 9.0}) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(None, bad, {"training_iteration": 1, "loss": 9.0}) == TrialScheduler.STOP
    assert scheduler.early_stopped == {"bad": 1}
    scheduler.on_trial_complete(None, base, {"training_iteration": 4, "loss": 9.0})  # unknown to ASHA: no KeyError


@pytest.mark.parametrize("name", ["optuna", "hyperopt", "random"])
def test_every_searcher_suggests_the_baseline_point_first(name: str) -> None:
    space = {"lr": tune.loguniform(1e-4, 1e-1), "net": {"width": tune.randint(8, 64)}}
    point = {"lr": 1e-3, "net": {"width": 32}}
    searcher: Any
    searcher, _ = build_searcher(make_experiment(searcher=name, space=space), seed=0, max_concurrent=2, points=[point])
    if name == "random":
        from ray.tune.experiment import Experiment as TuneExperiment

        searcher.add_configurations([TuneExperiment("e", lambda config: None, config=space, num_samples=3)])
        first, second = searcher.next_trial().config, searcher.next_trial().config
    else:
        searcher.set_search_properties("loss", "min", space)
        first, second = searcher.suggest("t1"), searcher.suggest("t2")
    assert first == point
    assert second != point
