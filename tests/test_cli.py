"""Bad input through the CLI: a clear message, exit 2, nothing started (no Ray, no MLflow store)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import EXPERIMENTS, run_cli, write_experiment

DEMO = str(EXPERIMENTS / "mlp_digits.py")


@pytest.fixture(autouse=True)
def _nothing_started(workdir: Path) -> object:
    import ray

    started_before = ray.is_initialized()
    yield
    # A refused or dry-run sweep starts no Ray and creates no MLflow store.
    if not started_before:
        assert not ray.is_initialized()
    assert not (workdir / "mlflow.db").exists()


def test_dry_run_prints_the_resolved_plan(workdir: Path) -> None:
    status, out = run_cli("sweep", DEMO, "--dry-run", "--set", "batch_size=32", "--num-samples", "3")
    assert status == 0
    # Space, fixed values (with the override), algorithms, concurrency and destinations.
    assert "lr = float loguniform (0.0001, 0.3)" in out
    assert "batch_size = 32" in out
    assert "Scheduler: asha" in out and "Searcher: optuna" in out
    assert "Trials: 3, at most 2 at once" in out
    assert f"sqlite:///{workdir.resolve() / 'mlflow.db'}" in out


def test_pinning_every_dimension_falls_back_to_the_random_searcher() -> None:
    status, out = run_cli("sweep", DEMO, "--dry-run", "--set", "lr=0.01", "--set", "hidden=64", "--set", "dropout=0.1")
    assert status == 0
    assert "Searcher: random" in out


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["missing.py"], "does not exist"),
        (
            [DEMO, "--set", "hiden=3"],
            "Unknown --set key 'hiden'; valid keys are: batch_size, dropout, epochs, hidden, lr",
        ),
        ([DEMO, "--set", "hidden"], "--set takes key=value"),
        (
            [DEMO, "--scheduler", "bohb"],
            "Unknown scheduler 'bohb'; valid schedulers are fifo, asha, hyperband, median, pbt, pb2",
        ),
        ([DEMO, "--searcher", "smac"], "Unknown searcher 'smac'; valid searchers are optuna, hyperopt, random"),
        ([DEMO, "--workers-per-trial", "3"], "A trial needs 3 worker(s) x (CPU=1)"),
        ([DEMO, "--use-gpu"], "use_gpu=True, but the cluster has no GPU"),
        ([DEMO, "--num-samples", "0"], "num_samples must be an integer >= 1"),
    ],
)
def test_bad_input_exits_2_with_the_rule_the_value_and_a_fix(argv: list[str], expected: str) -> None:
    status, out = run_cli("sweep", *argv)
    assert status == 2
    assert expected in out
    assert "Fix:" in out
    # No traceback wall.
    assert "Traceback" not in out


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        (
            "space={'x': tune.uniform(0, 1)}, mode='lowest'",
            "mode must be 'min' or 'max' for each metric, but got mode='lowest'",
        ),
        ("space={'x': range(3)}, mode='min'", "Search-space value 'x' must be a Ray Tune distribution"),
        (
            "space={'x': tune.uniform(0, 1)}, mode='min', scheduler_options={'grace': 2}",
            # The valid options are listed after the unknown one.
            "Unknown scheduler option(s) 'grace' for scheduler 'asha' (AsyncHyperBandScheduler); "
            "valid options are: time_attr, max_t, grace_period",
        ),
    ],
)
def test_bad_experiment_file_exits_2(workdir: Path, fields: str, expected: str) -> None:
    path = write_experiment(
        workdir,
        "from ray import tune\nfrom tunetrain import Experiment\n"
        f"experiment = Experiment(name='e', train_loop=lambda c: None, metric='loss', {fields})\n",
    )
    status, out = run_cli("sweep", str(path))
    assert status == 2
    assert expected in out


def test_pretrained_gpt2_without_a_hub_is_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # this machine has no hub; make that certain and fast
    status, out = run_cli("sweep", str(EXPERIMENTS / "gpt2_lr.py"), "--set", "model=gpt2")
    assert status == 2
    assert "needs the pretrained GPT-2 weights from the Hugging Face hub" in out


def test_hugging_face_trainer_experiment_refuses_a_last_step_it_would_not_evaluate() -> None:
    status, out = run_cli("sweep", str(EXPERIMENTS / "gpt2_hf_trainer.py"), "--set", "train.eval_every=7")
    # Refused before Ray starts, with the rule, both values and the fix.
    assert status == 2
    assert "train.max_steps must be a multiple of train.eval_every" in out and "max_steps=300, eval_every=7" in out


@pytest.mark.parametrize("command", [["tunetrain"], [sys.executable, "-m", "tunetrain"]], ids=["script", "module"])
def test_console_script_and_module_both_run_the_cli(command: list[str]) -> None:
    result = subprocess.run([*command, "sweep", "--help"], capture_output=True, text=True, timeout=120, check=False)
    assert result.returncode == 0
    assert "--num-samples" in result.stdout and "--dry-run" in result.stdout
