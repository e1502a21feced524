"""Bad input through the CLI: a clear message, exit 2, nothing started (no Ray, no MLflow store)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import EXPERIMENTS, run_cli, write_experiment
from tests.test_contract import AUTO, checkpointing
from tunetrain.experiment_checks import SCHEDULERS

DEMO = str(EXPERIMENTS / "mlp_digits.py")


@pytest.fixture(autouse=True)
def _nothing_started(bare_workdir: Path, monkeypatch: pytest.MonkeyPatch) -> object:
    import ray

    from tunetrain import cluster

    # Every way the CLI starts or joins a Ray goes through cluster.connect, then ray.init; both
    # are watched, so the check holds whether or not an earlier test left a Ray running.
    calls: list[str] = []
    for owner, name in ((cluster, "connect"), (ray, "init")):
        original = getattr(owner, name)

        def watched(*args: Any, _original: Any = original, _name: str = name, **kwargs: Any) -> Any:
            calls.append(_name)
            return _original(*args, **kwargs)

        monkeypatch.setattr(owner, name, watched)
    yield
    # A refused or dry-run sweep starts no Ray and creates no MLflow store.
    assert calls == [], f"a refused or dry-run sweep called {calls}"
    assert not (bare_workdir / "mlflow.db").exists()


def _more_workers_than_this_machine_fits() -> tuple[list[str], str]:
    """--workers-per-trial one more than the embedded Ray's CPUs: refused on any machine."""
    from tunetrain import cluster

    workers = int(sum(node["CPU"] for node in cluster.local_nodes())) + 1
    return [DEMO, "--workers-per-trial", str(workers)], f"A trial needs {workers} worker(s) x (CPU=1)"


def _gpus_this_machine_lacks() -> tuple[list[str], str]:
    """--use-gpu where there is no GPU; where there are GPUs, one worker more than they are."""
    from tunetrain import cluster

    gpus = int(sum(node.get("GPU", 0) for node in cluster.local_nodes()))
    if gpus == 0:
        return [DEMO, "--use-gpu"], "use_gpu=True, but the cluster has no GPU"
    return [DEMO, "--use-gpu", "--workers-per-trial", str(gpus + 1)], f"A trial needs {gpus + 1} worker(s)"


def test_dry_run_prints_the_resolved_plan(bare_workdir: Path) -> None:
    status, out = run_cli("sweep", DEMO, "--dry-run", "--set", "batch_size=32", "--num-samples", "3")
    assert status == 0
    # Space, fixed values (with the override), algorithms, concurrency and destinations.
    assert "lr = float loguniform (0.0001, 0.3)" in out
    assert "batch_size = 32" in out
    assert "Scheduler: asha" in out and "Searcher: async_bohb (auto: best measured with scheduler 'asha'" in out
    assert "Trials: 3, at most 2 at once" in out
    assert f"sqlite:///{bare_workdir.resolve() / 'mlflow.db'}" in out


@pytest.mark.parametrize("scheduler", SCHEDULERS)
def test_auto_is_resolved_in_the_plan_to_a_searcher_each_scheduler_pairs_with(
    bare_workdir: Path, scheduler: str
) -> None:
    # The plan resolves "auto" before anything runs, and the run builds the searcher it chose,
    # so each resolved pairing's real sweep is test_contract's scheduler x that searcher; one
    # real "auto" sweep there checks the choice and its reason reach the MLflow record.
    path = checkpointing(bare_workdir, space="tune.uniform(0.0, 1.0)", samples=2, iterations=3)
    status, out = run_cli("sweep", str(path), "--scheduler", scheduler, "--searcher", "auto", "--dry-run")
    assert status == 0, out
    assert f"Scheduler: {scheduler}" in out
    assert f"Searcher: {AUTO.get(scheduler, 'async_bohb')} (auto: " in out, out


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
        (
            [DEMO, "--searcher", "smac"],
            "Unknown searcher 'smac'; valid searchers are auto, optuna, async_bohb, hyperopt, random",
        ),
        _more_workers_than_this_machine_fits(),
        _gpus_this_machine_lacks(),
        ([DEMO, "--num-samples", "0"], "--num-samples must be an integer >= 1"),
        # A GPU-hour budget for trials that hold no GPU: refused by the plan, a dry run too.
        ([DEMO, "--budget", "1gpu-h"], "--budget 1gpu-h counts GPU-hours, but the sweep's trials hold no GPU"),
        ([DEMO, "--budget", "1gpu-h", "--dry-run"], "--budget 1gpu-h counts GPU-hours"),
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
def test_bad_experiment_file_exits_2(bare_workdir: Path, fields: str, expected: str) -> None:
    path = write_experiment(
        bare_workdir,
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


def test_the_stop_rule_follows_set_and_a_guessed_asha_budget_is_warned(bare_workdir: Path) -> None:
    # gpt2_lr.py derives max_iterations (= its evaluations) from max_steps / eval_every, after --set.
    status, out = run_cli(
        "sweep",
        str(EXPERIMENTS / "gpt2_lr.py"),
        "--dry-run",
        "--set",
        "train.max_steps=60",
        "--set",
        "train.eval_every=20",
    )
    assert status == 0, out
    assert "Stop rule: max_iterations=3," in out and "warning" not in out
    # An ASHA experiment with no iteration limit: its max_t is Ray's default 100, said once.
    path = write_experiment(
        bare_workdir,
        "from ray import tune\nfrom tunetrain import Experiment\n"
        "experiment = Experiment(name='e', train_loop=lambda c: None, metric='loss', mode='min', "
        "space={'x': tune.uniform(0, 1)}, scheduler='asha')\n",
    )
    status, out = run_cli("sweep", str(path), "--dry-run")
    assert status == 0, out
    assert "tunetrain: warning: scheduler 'asha' lays out its max_t for max_t=100 iterations" in out
    assert "Set StopRule(max_iterations=N)" in out
