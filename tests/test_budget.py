from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli, small_experiment, write_experiment
from tunetrain import ExperimentError
from tunetrain.results.analysis import load_sweep
from tunetrain.sweeps.cost.budget import BudgetGate, parse_budget


@pytest.mark.parametrize(
    ("text", "kind", "seconds"),
    [
        ("90s", "wall", 90),
        ("30m", "wall", 1800),
        ("2h", "wall", 7200),
        ("5cpu-h", "cpu", 18000),
        ("1.5gpu-h", "gpu", 5400),
    ],
)
def test_budgets_parse_wall_time_and_resource_hours(text: str, kind: str, seconds: float) -> None:
    budget = parse_budget(text)
    assert (budget.kind, budget.seconds) == (kind, seconds)


@pytest.mark.parametrize("text", ["2", "two hours", "-1h", "0m", "3 days"])
def test_a_malformed_budget_states_the_rule(text: str) -> None:
    with pytest.raises(ExperimentError, match=r"--budget must be a positive number with a unit: s, m, h"):
        parse_budget(text)


def test_the_gate_refuses_a_launch_that_would_overrun(monkeypatch: pytest.MonkeyPatch) -> None:
    now = [100.0]
    monkeypatch.setattr("tunetrain.sweeps.cost.budget.time.monotonic", lambda: now[0])
    gate = BudgetGate(parse_budget("10s"), cpus_per_trial=1, gpus_per_trial=0)
    # Nothing has ended: no estimate yet, launches go on while the budget lasts.
    gate.started("a")
    now[0] += 4
    gate.ended("a")  # a trial costs 4 s
    assert gate.allows_launch()  # 4 s spent + 4 s expected <= 10 s
    gate.started("b")
    now[0] += 3
    assert not gate.allows_launch()  # 7 s spent + 4 s expected > 10 s
    assert gate.reason == "budget 10s: 7 s spent, a trial costs about 4 s; stopped launching after 2 trial(s)"


def test_a_gpu_hour_budget_needs_gpu_trials() -> None:
    with pytest.raises(ExperimentError, match="counts GPU-hours, but the sweep's trials hold no GPU"):
        BudgetGate(parse_budget("1gpu-h"), cpus_per_trial=1, gpus_per_trial=0)


@pytest.mark.usefixtures("ray_cluster")
def test_a_sweep_over_its_budget_stops_launching_trials_and_records_why(workdir: Path) -> None:
    path = write_experiment(workdir, small_experiment("budgeted", steps=5, samples=8, step_s=0.4, seed=4))
    # 8 trials of about 2 s, 2 at once: about 8 s of work, against a 3 s budget.
    status, out = run_cli("sweep", str(path), "--budget", "3s", "--no-report")
    assert status == 0, out
    sweep = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    launched = len(sweep.runs)
    # Some trials ran, not all; those that ran finished (running trials are never cut short).
    assert 1 <= launched < 8
    assert set(sweep.trials()["status"]) == {"completed"}
    # Why is on the parent run and on the console.
    reason = sweep.tags["tunetrain.stop_reason"]
    assert reason.startswith("budget 3s: ") and f"stopped launching after {launched} trial(s)" in reason
    assert f"Stopped launching trials: {reason}." in out
