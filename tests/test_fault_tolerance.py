"""Fault injection on real sweeps: workers killed mid-trial, diverging trials, a driver killed
and resumed, Ctrl+C, a tracking server that goes away. A real local Ray and a real MLflow
store (and a real ``mlflow server`` for the outage)."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_cli, write_experiment
from tunetrain.trial import DIVERGED_KEY, worst_for_diverged

# Each trial's worker `victim` (a rank) kills its own process with SIGKILL before its
# fourth report, once per trial (a marker file remembers it); every report comes with a
# checkpoint of the step reached, which the loop resumes from.
KILLED = """
import json
import os
import pathlib
import signal
import tempfile

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule

MARKS = pathlib.Path(__file__).parent / "marks"


def loop(config):
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            with open(os.path.join(folder, "state.json")) as f:
                start = json.load(f)["step"]
    rank = ray.train.get_context().get_world_rank()
    for step in range(start, 6):
        mark = MARKS / f"killed-{config['x']}"
        if step == 3 and rank == config["victim"] and not mark.exists():
            MARKS.mkdir(exist_ok=True)
            mark.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step + 1}, f)
            metrics = {"loss": 1.0 / (step + 1), "step": step + 1, "resumed_from": start}
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


experiment = Experiment(
    name="killed", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.grid_search([1, 2])}, defaults={"victim": 0},
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=6),
    max_failures=2, seed=3,
)
"""


def child_runs(tracking_uri: str, experiment: str) -> tuple[MlflowClient, list]:
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return client, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize(
    ("workers", "victim"),
    [(1, 0), (2, 1)],
    ids=["in_process-trial-killed", "torch_trainer-rank1-killed"],
)
def test_a_worker_killed_mid_trial_restarts_from_its_checkpoint(workdir: Path, workers: int, victim: int) -> None:
    path = write_experiment(workdir, KILLED)
    status, out = run_cli(
        "sweep", str(path), "--workers-per-trial", str(workers), "--set", f"victim={victim}", "--no-report"
    )
    assert status == 0, out
    # Both trials' workers were killed once (the markers exist).
    assert sorted(p.name for p in (workdir / "marks").iterdir()) == ["killed-1", "killed-2"]
    client, runs = child_runs(f"sqlite:///{workdir / 'mlflow.db'}", "killed")
    assert len(runs) == 2  # one run per trial: the restart went on in the same run
    for run in runs:
        tags = run.data.tags
        assert tags["tunetrain.status"] == "completed", tags
        # The restart is recorded with its count and reason.
        assert tags["tunetrain.restarts"] == "1"
        assert tags["tunetrain.restart_reason"]
        # The history is continuous: steps 1..6 once each, and the loop's own step counter
        # equals the recorded step (the restart went on from the step-3 checkpoint).
        history = client.get_metric_history(run.info.run_id, "step")
        assert [m.step for m in history] == [1, 2, 3, 4, 5, 6]
        assert [m.value for m in history] == [1, 2, 3, 4, 5, 6]
        # It went on from a checkpoint, not from scratch: the step-3 one, or the step-2 one
        # when Train dropped the step-3 report that was in flight as the worker died.
        assert [m.value for m in client.get_metric_history(run.info.run_id, "resumed_from")][-1] in (2, 3)


def test_a_diverged_objective_reaches_scheduler_and_searcher_as_its_worst_value() -> None:
    metrics = {"loss": math.nan, "acc": -math.inf, "other": math.nan}
    reported = worst_for_diverged(metrics, (("loss", "min"), ("acc", "max")))
    # Each non-finite objective is the worst value for its mode; other metrics stay.
    assert reported["loss"] == math.inf and reported["acc"] == -math.inf and math.isnan(reported["other"])
    # The originals travel along for the record.
    assert math.isnan(reported[DIVERGED_KEY]["loss"]) and reported[DIVERGED_KEY]["acc"] == -math.inf
    # Finite objectives: the metrics unchanged.
    assert worst_for_diverged({"loss": 1.0}, (("loss", "min"),)) == {"loss": 1.0}
