"""``--confirm-above``: a sweep over the threshold asks, refuses without a terminal, starts with --yes."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from tests.conftest import EXPERIMENTS, run_cli
from tunetrain import ExperimentError
from tunetrain.sweeps.cost import consent
from tunetrain.sweeps.cost.budget import parse_budget
from tunetrain.sweeps.cost.estimate import Estimate


def _estimate(*, wall_s: float = 60.0, cpu_hours: float = 0.1, gpu_hours: float = 0.0) -> Estimate:
    return Estimate(
        iterations_per_trial=3, basis="test", trial_s=10, wall_s=wall_s, cpu_hours=cpu_hours, gpu_hours=gpu_hours
    )


def test_the_threshold_comes_from_the_flag_then_the_environment_then_the_gpu_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(consent.ENV_VAR, raising=False)
    assert consent.threshold(None, gpus_per_trial=0) is None  # CPU sweeps ask only when told
    gpu = consent.threshold(None, gpus_per_trial=2)
    assert gpu is not None and gpu.budget == parse_budget("10gpu-h")
    monkeypatch.setenv(consent.ENV_VAR, "2cpu-h")
    from_env = consent.threshold(None, gpus_per_trial=2)
    assert from_env is not None and from_env.budget.kind == "cpu" and from_env.source == consent.ENV_VAR
    flag = consent.threshold("1h", gpus_per_trial=0)
    assert flag is not None and flag.budget.kind == "wall" and flag.budget.seconds == 3600
    monkeypatch.setenv(consent.ENV_VAR, "lots")
    with pytest.raises(ExperimentError, match=f"{consent.ENV_VAR} must be .* but got 'lots'"):
        consent.threshold(None, gpus_per_trial=0)


def test_an_estimate_or_a_budget_over_the_threshold_in_its_unit_is_named() -> None:
    limit = consent.Threshold(parse_budget("2cpu-h"), "--confirm-above")
    assert consent.exceeded(limit, estimate=_estimate(cpu_hours=1.5), budget=None) == []
    assert consent.exceeded(limit, estimate=_estimate(cpu_hours=3), budget=parse_budget("30m")) == [
        "the estimate is 3 CPU-h, above 2cpu-h (--confirm-above)"
    ]
    assert consent.exceeded(limit, estimate=None, budget=parse_budget("5cpu-h")) == [
        "--budget 5cpu-h allows 5 CPU-h, above 2cpu-h (--confirm-above)"
    ]
    wall = consent.Threshold(parse_budget("1h"), "--confirm-above")
    assert consent.exceeded(wall, estimate=_estimate(wall_s=7200, cpu_hours=100), budget=None) == [
        "the estimate is 2 h, above 1h (--confirm-above)"
    ]


def test_consent_is_asked_on_a_terminal_and_refused_without_one() -> None:
    out = io.StringIO()
    reasons = ["the estimate is 3 CPU-h, above 2cpu-h (--confirm-above)"]
    asked: list[str] = []

    def ask(question: str) -> str:
        asked.append(question)
        return "y"

    answer = consent.obtain(reasons, details="Estimate: ...", yes=False, stream=out, interactive=True, ask=ask)
    assert answer == "asked" and asked == ["Start it? [y/N] "] and "3 CPU-h" in out.getvalue()
    with pytest.raises(ExperimentError, match="answer was 'n'"):
        consent.obtain(reasons, details="", yes=False, stream=out, interactive=True, ask=lambda q: "n")
    with pytest.raises(ExperimentError, match="no terminal") as refused:
        consent.obtain(reasons, details="", yes=False, stream=out, interactive=False)
    assert "--yes" in (refused.value.fix or "")
    assert consent.obtain(reasons, details="", yes=True, stream=out, interactive=False) == "--yes"


def test_a_sweep_over_the_threshold_without_a_terminal_exits_2_before_anything_starts(workdir: Path) -> None:
    status, out = run_cli(
        "sweep", str(EXPERIMENTS / "mlp_digits.py"), "--budget", "2h", "--confirm-above", "1h", "--name", "costly"
    )
    assert status == 2, out
    assert "--budget 2h allows 2 h, above 1h (--confirm-above)" in out and "--yes" in out
    assert not (workdir / "tunetrain_results" / "costly").exists()
    from mlflow.tracking import MlflowClient

    assert (
        MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}").search_runs(
            [e.experiment_id for e in MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}").search_experiments()]
        )
        == []
    )
    status, out = run_cli("sweep", str(EXPERIMENTS / "mlp_digits.py"), "--confirm-above", "soon", "--dry-run")
    assert status == 2 and "--confirm-above must be a positive number with a unit" in out and "'soon'" in out


def test_the_old_name_and_the_new_one_are_one_setting_named_as_typed(workdir: Path) -> None:
    import tunetrain
    from tunetrain.sweeps.request import ask_above_setting

    # The same rule for the CLI's flags and the Python keywords, each named as the user typed it.
    status, out = run_cli(
        "sweep", str(EXPERIMENTS / "mlp_digits.py"), "--ask-above", "1h", "--confirm-above", "2h", "--dry-run"
    )
    assert status == 2 and "--ask-above and --confirm-above are one setting" in out and "'2h'" in out, out
    with pytest.raises(tunetrain.ExperimentError, match="ask_above and confirm_above are one setting"):
        tunetrain.sweep(str(EXPERIMENTS / "mlp_digits.py"), ask_above="1h", confirm_above="2h", dry_run=True)
    assert ask_above_setting("1h", "1h") == ("1h", "--confirm-above")
    assert ask_above_setting(None, "2h") == ("2h", "--confirm-above")
    assert ask_above_setting("3h", None) == ("3h", "--ask-above")
