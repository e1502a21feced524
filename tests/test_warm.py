"""``sweep --warm-start``: earlier trials given to the searcher, the misfits skipped with the reason."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from ray import tune

from tests.conftest import EXPERIMENTS, make_experiment, run_cli
from tunetrain import ExperimentError
from tunetrain.algorithms import build_searcher
from tunetrain.results.analysis import load_sweep
from tunetrain.sweeps.warm import check_searcher, misfit

SPACE = {"lr": tune.loguniform(1e-4, 1e-1), "net": {"width": tune.randint(8, 65)}}


@pytest.mark.parametrize(
    ("config", "reason"),
    [
        ({"lr": 0.01, "net.width": 16, "depth": 2}, ""),
        ({"lr": 0.01, "depth": 2}, "it has no value of net.width, which this sweep searches (a dimension added since)"),
        ({"lr": 0.5, "net.width": 16, "depth": 2}, "lr=0.5: lr is searched in [0.0001, 0.1], but got 0.5"),
        ({"lr": 0.01, "net.width": 16, "depth": 2, "momentum": 0.9}, "momentum=0.9, which this experiment no longer"),
        ({"lr": 0.01, "net.width": 16, "depth": 3}, "its fixed value depth=3 differs from this sweep's 2"),
    ],
    ids=["fits", "added", "out-of-range", "removed", "fixed-differs"],
)
def test_an_earlier_trial_that_does_not_fit_the_space_is_skipped_with_the_reason(
    config: dict[str, Any], reason: str
) -> None:
    found = misfit(config, make_experiment(space=SPACE, defaults={"depth": 2}))
    assert (found == "") if not reason else (reason in found), found


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({"searcher": "random"}, "draws its trials without looking at any result"),
        ({"searcher": "grid", "space": {"x": tune.grid_search([1, 2])}}, "searcher 'grid'"),
        ({"searcher": "hyperopt"}, "no evaluated_rewards"),
        ({"space": {"opt": tune.choice([{"lr": tune.uniform(0, 1)}, {"m": tune.uniform(0, 1)}])}}, "conditional"),
    ],
    ids=["random", "grid", "hyperopt", "conditional"],
)
def test_a_searcher_that_cannot_learn_from_earlier_trials_refuses_them(changes: dict[str, Any], words: str) -> None:
    with pytest.raises(ExperimentError, match="--warm-start") as refused:
        check_searcher(make_experiment(**changes))
    assert words in str(refused.value)


def test_earlier_trials_are_completed_trials_of_the_optuna_study_before_it_suggests() -> None:
    experiment = make_experiment(space=SPACE, searcher="optuna", seed=1)
    earlier = [({"lr": 10 ** -(1 + i / 4), "net.width": 8 + 4 * i}, [float(i)]) for i in range(12)]

    def suggestions(evaluated: Any) -> tuple[list[Any], Any]:
        searcher: Any
        searcher, _ = build_searcher(experiment, seed=1, max_concurrent=1, evaluated=evaluated)
        searcher.set_search_properties("loss", "min", SPACE)
        return [
            searcher.suggest(f"t{i}") for i in range(4)
        ], searcher.study  # FidelityTPESearch: one objective, a flat space

    cold, _ = suggestions(None)
    warm, study = suggestions(earlier)
    assert len(study.trials) == 12 + 4 and study.trials[0].params == {"lr": 0.1, "net/width": 8}
    assert [t.value for t in study.trials[:12]] == [float(i) for i in range(12)]
    assert warm != cold  # past TPE's 10 random start-up trials from the first suggestion on
    earlier_configs = [{"lr": p["lr"], "net": {"width": p["net.width"]}} for p, _ in earlier]
    assert not any(config in earlier_configs for config in warm)


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_a_warm_started_sweep_starts_from_the_earlier_trials_and_runs_none_of_them_again(workdir: Path) -> None:
    digits = str(EXPERIMENTS / "mlp_digits.py")
    common = ["--no-report", "--no-baseline", "--scheduler", "fifo", "--seed", "4"]
    status, out = run_cli("sweep", digits, *common, "--set", "epochs=2", "--num-samples", "8", "--name", "earlier")
    assert status == 0, out
    # A trial with another fixed value: not comparable, so skipped.
    status, out = run_cli("sweep", digits, *common, "--set", "epochs=1", "--num-samples", "1", "--name", "other")
    assert status == 0, out
    new = [*common, "--set", "epochs=2", "--num-samples", "3"]
    status, out = run_cli("sweep", digits, *new, "--warm-start", "earlier", "--warm-start", "other", "--name", "warm")
    assert status == 0, out
    assert "warm start: 8 trial(s) of earlier given to the searcher (0 not completed)" in out
    assert "warm start: skipped other/trial_0000: its fixed value epochs=1 differs from this sweep's 2" in out
    status, out = run_cli("sweep", digits, *new, "--name", "cold")  # the same seed, nothing earlier
    assert status == 0, out

    def configs(name: str) -> list[dict[str, Any]]:
        trials = load_sweep(name).trials().sort_values("trial_index")
        return [{k: row[f"config/{k}"] for k in ("lr", "hidden", "dropout")} for _, row in trials.iterrows()]

    earlier, warm, cold = configs("earlier"), configs("warm"), configs("cold")
    assert len(warm) == 3 and warm != cold  # the searcher started from what it was given
    assert not any(config in earlier for config in warm)  # and ran none of it again
    tags = load_sweep("warm").tags
    assert tags["tunetrain.warm_start"] == "earlier (8 of 8 completed trials); other (0 of 1 completed trials)"
    assert tags["tunetrain.warm_start_trials"] == "8"
    # A searcher that learns nothing from results refuses it before anything starts.
    status, out = run_cli("sweep", digits, *new, "--searcher", "random", "--warm-start", "earlier")
    assert status == 2 and "draws its trials without looking at any result" in out
