"""What the searcher is told and what it suggests, on real sweeps: trials ASHA stopped reach
Optuna as pruned at their rung; auto is GP on a small numeric space, and its suggestions at
8 at once all differ. And searcher="auto"'s choice, without Ray. The searcher's policy at
several trials at once (different configurations, the start-up count, the reproducible
mode) is tested on the simulated backend: tests/test_search_policy.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from optuna.trial import TrialState

from tests.conftest import make_experiment, run_cli, write_experiment
from tests.test_sweep import by_status, sweep_runs
from tunetrain.algorithms import FidelityTPESearch, resolve_searcher
from tunetrain.errors import ExperimentError

pytestmark = pytest.mark.usefixtures("ray_cluster")

BODY = """
import time

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(ITERATIONS):
        time.sleep(config.get("pause", 0.0))  # work: trials overlap
        ray.train.report({"loss": (config["x"] - 0.3) ** 2 + 1.0 / (step + 1) + config.get("k", 0) / 10})


experiment = Experiment(
    name="search", train_loop=loop, space=SPACE, defaults={"pause": PAUSE}, metric="loss", mode="min",
    num_samples=SAMPLES, stop=StopRule(max_iterations=ITERATIONS), seed=11, baseline=False,
    scheduler=SCHEDULER, searcher=SEARCHER, searcher_options=OPTIONS, max_concurrent=CONCURRENT,
    resources_per_worker={"CPU": 0.25},  # 8 trials fit on 2 CPUs
)
"""


def _experiment(folder: Path, **values: Any) -> Path:
    fields = {
        "SPACE": '{"x": tune.uniform(0.0, 1.0)}',
        "PAUSE": 0.0,
        "SAMPLES": 8,
        "ITERATIONS": 4,
        "SCHEDULER": '"fifo"',
        "SEARCHER": '"optuna"',
        "OPTIONS": "{}",
        "CONCURRENT": 1,
    }
    fields.update({key.upper(): value for key, value in values.items()})
    body = BODY
    for key, value in fields.items():
        body = body.replace(key, str(value))
    return write_experiment(folder, body)


@pytest.fixture()
def searchers(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """Every searcher the sweeps of a test built (the engine's build_searcher, wrapped)."""
    import tunetrain.sweeps.run as run

    built: list[Any] = []
    original = run.build_searcher

    def build(*args: Any, **kwargs: Any) -> Any:
        searcher, first = original(*args, **kwargs)
        built.append(searcher)
        return searcher, first

    monkeypatch.setattr(run, "build_searcher", build)
    return built


@pytest.mark.slow
def test_trials_asha_stopped_are_pruned_at_their_rung_in_the_study(workdir: Path, searchers: list[Any]) -> None:
    path = _experiment(workdir, samples=12, iterations=8, scheduler='"asha"', options='{"n_startup_trials": 4}')
    status, out = run_cli("sweep", str(path), "--no-report")
    assert status == 0, out
    _, _, children = sweep_runs(workdir, "search")
    runs = by_status(children)
    (searcher,) = searchers
    assert isinstance(searcher, FidelityTPESearch)
    trials = searcher.study.trials
    pruned = [t for t in trials if t.state == TrialState.PRUNED]
    complete = [t for t in trials if t.state == TrialState.COMPLETE]
    # Each trial ASHA stopped is PRUNED, holding every value it reported up to its rung
    # (grace 1, reduction factor 2, max_t 8: rungs 1, 2, 4); the others COMPLETE at 8.
    assert len(pruned) == len(runs["stopped_early"]) > 0, [t.state for t in trials]
    assert len(complete) == len(runs["completed"])
    for trial in pruned:
        steps = sorted(trial.intermediate_values)
        assert steps == list(range(1, steps[-1] + 1)) and steps[-1] in (1, 2, 4)
        assert trial.value == trial.intermediate_values[steps[-1]]
    assert all(max(t.intermediate_values) == 8 for t in complete)


@pytest.mark.slow
def test_auto_is_gaussian_process_bo_on_a_small_numeric_space_and_its_suggestions_at_once_all_differ(
    workdir: Path,
) -> None:
    # 24 trials, 8 at once: after its 10 random start-up trials GPSampler suggests each new
    # trial with up to 7 others running. Without those as pending points its acquisition
    # maximum, computed from the same results, is the same point again.
    path = _experiment(workdir, samples=24, concurrent=8, pause=0.2, searcher='"auto"')
    status, out = run_cli("sweep", str(path), "--dry-run")
    assert status == 0 and "Optuna's GPSampler" in out, out  # the plan says it
    status, out = run_cli("sweep", str(path), "--no-report")
    assert status == 0, out
    _, parent, children = sweep_runs(workdir, "search")
    assert parent.data.tags["tunetrain.searcher"] == "optuna"
    assert "GPSampler" in parent.data.tags["tunetrain.searcher_note"]
    xs = [float(r.data.params["x"]) for r in children]
    assert len(children) == 24 and len(set(xs)) == 24, sorted(xs)
    best = min(children, key=lambda r: r.data.metrics["loss"])
    assert abs(float(best.data.params["x"]) - 0.3) < 0.05  # the model found the minimum at 0.3


def test_auto_picks_by_scheduler_objectives_and_space() -> None:
    from ray import tune

    def picked(**changes: Any) -> str:
        return resolve_searcher(make_experiment(searcher="auto", **changes))[0]

    assert picked(scheduler="asha") == "async_bohb"
    assert picked(scheduler="fifo") == "optuna"
    assert picked(scheduler="pbt") == "random"
    assert picked(metric=["loss", "acc"], mode=["min", "max"]) == "optuna"
    assert picked(space={"opt": tune.choice([{"lr": tune.uniform(0, 1)}, {"m": 1}])}) == "optuna"
    assert picked(space={"lr": tune.grid_search([0.1, 0.2])}) == "grid"
    assert picked(scheduler="asha", searcher_options={"sampler": "cmaes"}) == "optuna"
    assert resolve_searcher(make_experiment(searcher="random")) == ("random", "as configured")


def test_auto_is_gaussian_process_bo_only_for_a_small_numeric_space_under_fifo(monkeypatch: pytest.MonkeyPatch) -> None:
    import optuna
    from ray import tune
    from ray.tune.search.optuna import OptunaSearch

    from tunetrain.algorithms import build_searcher

    def why(**changes: Any) -> str:
        return resolve_searcher(make_experiment(searcher="auto", scheduler="fifo", **changes))[1]

    numeric = {"lr": tune.loguniform(1e-4, 1e-1), "width": tune.randint(8, 64), "fixed": 3}
    assert "GPSampler" in why(space=numeric, num_samples=100)
    assert "GPSampler" not in why(space=numeric, num_samples=101)  # its time per suggestion grows
    assert "GPSampler" not in why(space={**numeric, "opt": tune.choice(["adam", "sgd"])})
    assert "GPSampler" not in why(space=numeric, searcher_options={"n_startup_trials": 3})
    assert "GPSampler" not in why(space=numeric, metric=["loss", "acc"], mode=["min", "max"])
    assert "GPSampler" not in resolve_searcher(make_experiment(searcher="auto", scheduler="asha", space=numeric))[1]
    made: list[dict[str, Any]] = []
    gp = optuna.samplers.GPSampler

    def counted(**options: Any) -> Any:
        made.append(options)
        return gp(**options)

    monkeypatch.setattr(optuna.samplers, "GPSampler", counted)
    experiment = make_experiment(searcher="auto", scheduler="fifo", space=numeric)
    built, _ = build_searcher(experiment, seed=0, max_concurrent=4)
    assert isinstance(built, OptunaSearch) and made == [{"seed": 0}]


def test_tpe_options_are_checked_before_anything_runs() -> None:
    from tunetrain.algorithms import build_searcher

    with pytest.raises(ExperimentError, match=r"n_startup_trials.*but got -1"):
        build_searcher(
            make_experiment(searcher="optuna", searcher_options={"n_startup_trials": -1}), seed=0, max_concurrent=1
        )
    with pytest.raises(ExperimentError, match=r"reproducible.*TPE searchers"):
        build_searcher(
            make_experiment(searcher="optuna", searcher_options={"sampler": "cmaes", "reproducible": True}),
            seed=0,
            max_concurrent=1,
        )
    with pytest.raises(ExperimentError, match="async_bohb"):
        build_searcher(
            make_experiment(searcher="async_bohb", metric=["a", "b"], mode=["min", "min"]), seed=0, max_concurrent=1
        )
