"""The sweep's policy, callback and plan on a fake Tune event stream (tests/fake_tune.py): no
Ray is started, each test runs in milliseconds. What a trial ends as, what the sweep stops
for, what is recorded of each event, and what the plan decides."""

from __future__ import annotations

import math
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from ray import tune

from tests.fake_tune import FakeScheduler, FakeTune, unit_plan
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment, StopRule
from tunetrain.sweeps.cost.budget import BudgetGate, parse_budget
from tunetrain.sweeps.plan import describe_plan
from tunetrain.sweeps.policy import BaselineTrial, refuse_over_budget
from tunetrain.trial import OOM_KEY, RESTARTS_KEY


def _experiment(**changes: Any) -> Experiment:
    fields: dict[str, Any] = {
        "name": "unit",
        "train_loop": lambda config: None,
        "space": {"lr": tune.loguniform(1e-4, 1e-1), "batch_size": tune.choice([16, 32, 64])},
        "metric": "loss",
        "mode": "min",
        "num_samples": 4,
        **changes,
    }
    return Experiment(**fields)


@pytest.fixture()
def tune_(tmp_path: Path) -> FakeTune:
    return FakeTune(unit_plan(_experiment(), tmp_path))


def test_a_trial_that_reports_its_metric_completes_with_every_step_recorded(tune_: FakeTune) -> None:
    trial = tune_.start(0, {"lr": 0.01, "batch_size": 32})
    for loss in (1.0, 0.5, 0.7):
        assert tune_.report(trial, {"loss": loss, "acc": 1 - loss}) is False
    tune_.complete(trial)
    assert tune_.status(trial) == "completed"
    record = tune_.callback.records[trial.trial_id]
    assert record.best_value == 0.5 and record.iterations == 3
    started = tune_.recorder.of("start_trial", "trial_0000")
    assert len(started) == 1 and started[0]["params"]["lr"] == 0.01 and started[0]["params"]["batch_size"] == 32
    assert [(c["step"], c["metrics"]) for c in tune_.recorder.of("log_metrics", "trial_0000")] == [
        (1, {"loss": 1.0, "acc": 0.0}),
        (2, {"loss": 0.5, "acc": 0.5}),
        (3, {"loss": 0.7, "acc": pytest.approx(0.3)}),
    ]
    (ended,) = tune_.recorder.of("end_trial", "trial_0000")
    assert ended["status"] == "completed" and ended["error"] is None and ended["tags"]["tunetrain.iterations"] == 3


def test_a_metric_never_reported_stops_the_sweep_as_bad_input_naming_what_was_reported(tune_: FakeTune) -> None:
    good = tune_.start(0, {"lr": 0.01, "batch_size": 16})
    assert tune_.report(good, {"loss": 0.9}) is False
    bad = tune_.start(1, {"lr": 0.02, "batch_size": 16})
    assert tune_.report(bad, {"val_loss": 0.9, "acc": 0.1}) is True  # the stopper stops the sweep
    assert tune_.stopper.stop_all()
    assert tune_.stopper.bad_input == (
        "The experiment's metric 'loss' was never reported; the train loop reported: acc, val_loss."
    )
    assert "ray.train.report({'loss': ...})" in tune_.stopper.bad_input_fix
    tune_.complete(bad)
    tune_.complete(good)
    # The trial that never reported it failed with the reason; the one that did was interrupted.
    assert tune_.status(bad) == "failed" and tune_.status(good) == "interrupted"
    assert tune_.recorder.of("end_trial", "trial_0001")[0]["error"] == tune_.stopper.bad_input


def test_a_non_finite_objective_ends_the_trial_as_diverged_and_the_sweep_goes_on(tune_: FakeTune) -> None:
    diverged = tune_.start(0, {"lr": 0.1, "batch_size": 16})
    assert tune_.report(diverged, {"loss": 0.8}) is False
    assert tune_.report(diverged, {"loss": math.nan}) is True  # that trial only
    other = tune_.start(1, {"lr": 0.001, "batch_size": 16})
    assert tune_.report(other, {"loss": 0.4}) is False
    tune_.complete(diverged)
    tune_.complete(other)
    assert tune_.status(diverged) == "diverged" and tune_.status(other) == "completed"
    assert tune_.stopper.bad_input is None
    # The record keeps the value the loop reported, not the worst value the scheduler saw.
    assert math.isnan(tune_.recorder.of("log_metrics", "trial_0000")[-1]["metrics"]["loss"])


def test_a_metric_name_the_store_refuses_stops_the_sweep_and_the_rest_is_still_recorded(tune_: FakeTune) -> None:
    trial = tune_.start(0, {"lr": 0.01, "batch_size": 16})
    assert tune_.report(trial, {"loss": 0.5, "acc@1": 0.9}) is True
    assert tune_.stopper.bad_input is not None and "'acc@1'" in tune_.stopper.bad_input
    assert "'acc_1'" in tune_.stopper.bad_input_fix
    assert tune_.recorder.of("log_metrics", "trial_0000")[0]["metrics"] == {"loss": 0.5}


def test_the_scheduler_decides_early_stops_but_a_trial_that_ran_its_whole_budget_completed(tmp_path: Path) -> None:
    exp = _experiment(scheduler="asha", stop=StopRule(max_iterations=4))
    tune_ = FakeTune(unit_plan(exp, tmp_path))
    stopped, survivor = tune_.start(0, {"lr": 0.01, "batch_size": 16}), tune_.start(1, {"lr": 0.02, "batch_size": 16})
    tune_.report(stopped, {"loss": 0.9})
    tune_.early_stop(stopped)
    for _ in range(4):
        tune_.report(survivor, {"loss": 0.5})
    tune_.early_stop(survivor)  # HyperBand stops a finished bracket's survivors at the last step
    assert tune_.status(stopped) == "stopped_early" and tune_.status(survivor) == "completed"


def test_a_failed_trial_is_recorded_with_its_last_error_and_the_sweep_goes_on(tune_: FakeTune, tmp_path: Path) -> None:
    trial = tune_.start(0, {"lr": 0.01, "batch_size": 16})
    tune_.report(trial, {"loss": 0.9})
    error = "Failure # 1\nTraceback ...\nValueError: first\nFailure # 2\nTraceback ...\nRuntimeError: boom"
    tune_.fail(trial, error, tmp_path)
    (ended,) = tune_.recorder.of("end_trial", "trial_0000")
    assert ended["status"] == "failed" and ended["error"] == error
    assert ended["error_headline"] == "RuntimeError: boom"
    assert tune_.stopper.bad_input is None


def test_a_trial_failing_before_it_started_still_gets_a_run(tune_: FakeTune, tmp_path: Path) -> None:
    from tests.fake_tune import FakeTrial

    never = FakeTrial(trial_id="id0003", name="trial_0003", config={"lr": 0.01, "batch_size": 16})
    tune_.fail(never, "RuntimeError: the actor could not be created", tmp_path)
    assert [c["trial"] for c in tune_.recorder.of("start_trial")] == ["trial_0003"]
    assert tune_.recorder.of("end_trial", "trial_0003")[0]["status"] == "failed"


def test_out_of_memory_ends_the_trial_as_oom_with_its_batch_settings(tune_: FakeTune) -> None:
    trial = tune_.start(0, {"lr": 0.01, "batch_size": 64})
    tune_.report(trial, {"loss": math.inf, OOM_KEY: {"error": "CUDA out of memory", "peak_memory_gib": 70.5}})
    tune_.complete(trial)
    assert tune_.status(trial) == "oom"
    tagged = [args[1] for name, args, _ in tune_.recorder.calls if name == "set_tags"]
    assert tagged == [{"tunetrain.oom.batch_settings": '{"batch_size": 64}', "tunetrain.oom.peak_memory_gib": 70.5}]
    assert tune_.recorder.of("end_trial", "trial_0000")[0]["error"] == "CUDA out of memory"


def test_restarts_and_rerun_steps_are_recorded_once(tune_: FakeTune) -> None:
    trial = tune_.start(0, {"lr": 0.01, "batch_size": 16})
    for loss in (0.9, 0.8, 0.7):
        tune_.report(trial, {"loss": loss})
    # Train restarted the workers from the step-2 checkpoint: steps 2 and 3 come again.
    tune_.report(trial, {"loss": 0.75, RESTARTS_KEY: ["worker died"]}, step=2)
    tune_.report(trial, {"loss": 0.65}, step=3)
    tune_.report(trial, {"loss": 0.6}, step=4)
    steps = [c["step"] for c in tune_.recorder.of("log_metrics", "trial_0000")]
    assert steps == [1, 2, 3, 4]
    assert tune_.callback.records[trial.trial_id].restarts == ["worker died"]


def test_trials_still_running_at_the_end_are_interrupted(tune_: FakeTune) -> None:
    running = tune_.start(0, {"lr": 0.01, "batch_size": 16})
    tune_.report(running, {"loss": 0.9})
    done = tune_.start(1, {"lr": 0.02, "batch_size": 16})
    tune_.report(done, {"loss": 0.8})
    tune_.complete(done)
    assert tune_.callback.end_unfinished() is True
    assert tune_.status(running) == "interrupted" and tune_.status(done) == "completed"
    assert tune_.callback.end_unfinished() is False  # nothing left running: ended once


def test_the_baseline_trial_is_the_first_holding_its_values_and_is_tagged(tmp_path: Path) -> None:
    plan = unit_plan(_experiment(), tmp_path)
    assert plan.baseline == {"lr": pytest.approx(math.sqrt(1e-4 * 1e-1)), "batch_size": 32}  # the space's centre
    exempt = BaselineTrial(plan.baseline)
    tune_ = FakeTune(plan, scheduler=FakeScheduler(exempt=exempt))
    other = tune_.start(0, {"lr": 0.01, "batch_size": 16})
    baseline = tune_.start(1, dict(plan.baseline))
    assert exempt.trial_id == baseline.trial_id and not exempt(other)
    tags = {c["trial"]: c["tags"] for c in tune_.recorder.of("start_trial")}
    assert tags["trial_0001"]["tunetrain.baseline"] == "true" and "tunetrain.baseline" not in tags["trial_0000"]


def test_over_budget_the_trials_that_never_ran_are_stopped_before_they_start(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [0.0]
    monkeypatch.setattr("tunetrain.sweeps.cost.budget.time.monotonic", lambda: now[0])
    gate = BudgetGate(parse_budget("15s"), cpus_per_trial=1.0, gpus_per_trial=0.0)
    gate.started("a")
    now[0] = 10.0
    gate.ended("a")  # a trial costs about 10 s: at 10 s spent, the next would overrun 15 s
    stopped: list[str] = []
    finished: list[bool] = []
    monkeypatch.setattr(
        "tunetrain._internals.stop_before_start", lambda controller, trial: stopped.append(trial.trial_id)
    )
    pending = [SimpleNamespace(trial_id=t, status="PENDING") for t in ("a", "b", "c")]  # "a" paused, resumed
    controller = SimpleNamespace(
        get_trials=lambda: pending, search_alg=SimpleNamespace(set_finished=lambda: finished.append(True))
    )
    refuse_over_budget(gate)(controller)
    assert stopped == ["b", "c"] and finished == [True] and gate.refused == 2
    assert gate.reason.startswith("budget 15s: 10 s spent, a trial costs about 10 s")


def test_the_plan_fits_trials_to_the_cpus_and_refuses_what_never_fits(tmp_path: Path) -> None:
    assert unit_plan(_experiment(), tmp_path, cpus=2.0).max_concurrent == 2
    assert unit_plan(_experiment(max_concurrent=1), tmp_path, cpus=2.0).max_concurrent == 1
    two_workers = _experiment(workers_per_trial=2)
    assert unit_plan(two_workers, tmp_path, cpus=4.0).max_concurrent == 2
    with pytest.raises(ExperimentError, match="largest node"):
        unit_plan(two_workers, tmp_path, cpus=1.0)
    plan = unit_plan(_experiment(), tmp_path, cpus=2.0)
    text = describe_plan(plan)
    assert "Trials: 4, at most 2 at once" in text and plan.total_trials == 5  # and the baseline
    assert "Searcher: async_bohb (auto: " in text  # auto's choice and its reason, before anything runs


def test_max_trial_seconds_stops_a_trial_silent_past_the_limit_and_its_grace_and_no_other() -> None:
    from tunetrain.sweeps.policy import OverdueTrials

    now = [0.0]
    stopped: list[str] = []

    def trial(trial_id: str, status: str, iteration: int, total: float) -> SimpleNamespace:
        last = {"training_iteration": iteration, "time_total_s": total} if iteration else {}
        return SimpleNamespace(
            trial_id=trial_id, status=status, last_result=last, temporary_state=SimpleNamespace(ray_actor=None)
        )

    class Controller:
        _reuse_actors = True

        def __init__(self, trials: list[SimpleNamespace]) -> None:
            self.trials = trials

        def get_trials(self) -> list[SimpleNamespace]:
            return self.trials

        def stop_trial(self, t: SimpleNamespace) -> None:
            assert self._reuse_actors is False  # a hung trial's actor is never kept for the next trial
            stopped.append(t.trial_id)

    overdue = OverdueTrials(40.0, clock=lambda: now[0])
    assert overdue.grace == 10.0  # at least 10 s; a quarter of a longer limit
    hung, reporting = trial("a", "RUNNING", 2, 30.0), trial("b", "RUNNING", 1, 5.0)
    controller = Controller([hung, reporting, trial("c", "PAUSED", 3, 45.0)])
    overdue(controller)
    now[0] = 19.0  # a: 30 s of training + 19 s silent, under 40 + 10
    overdue(controller)
    assert stopped == []
    reporting.last_result = {"training_iteration": 2, "time_total_s": 24.0}  # b reported: counted from here
    now[0] = 20.5
    overdue(controller)
    assert stopped == ["a"] and controller._reuse_actors is True
    assert overdue.timed_out["a"].startswith("timed out: no report for 20 s after 2 iteration(s)")
    now[0] = 1000.0  # a is no longer asked about; c is paused; b counts from its last report
    hung.status = "TERMINATED"
    overdue(controller)
    assert stopped == ["a", "b"]
    assert OverdueTrials(200.0).grace == 50.0
