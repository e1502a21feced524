"""A bad day's faults end one trial, never the sweep (issue 39): the host running out of
memory, a trial that stops reporting. Real sweeps in a subprocess with their own local Ray
(so that Ray starts with the settings the fault needs) and a real sqlite store."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import psutil
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import write_experiment

pytestmark = [pytest.mark.slow, pytest.mark.own_ray]

HOST_OOM = """
import time
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule

HELD = []


def loop(config):
    for step in range(60):
        if config["x"] > 0.5:  # this trial takes 256 MiB more at every step, until Ray kills it
            block = bytearray(256 * 2**20)
            block[::4096] = b"\\1" * len(block[::4096])  # touched: resident, not just reserved
            HELD.append(block)
        time.sleep(0.05)
        ray.train.report({"loss": config["x"] + 1.0 / (step + 1)})


experiment = Experiment(
    name="hostoom", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.grid_search([0.75, 0.25])}, workers_per_trial=WORKERS,
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=60), seed=1, baseline=False,
)
"""


def _sweep(workdir: Path, path: Path, *args: str, env: dict[str, str], timeout: float) -> tuple[int, str]:
    done = subprocess.run(
        [sys.executable, "-m", "tunetrain", "sweep", str(path), "--no-report", "--no-register", *args],
        cwd=workdir,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    return done.returncode, done.stdout + done.stderr


def _runs(workdir: Path, experiment: str) -> tuple[dict[str, Any], Any]:
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id])
    assert all(r.info.status != "RUNNING" for r in runs), [r.info.status for r in runs]
    trials = {r.info.run_name: r for r in runs if r.data.tags.get("tunetrain.role") != "sweep"}
    (parent,) = [r for r in runs if r.data.tags.get("tunetrain.role") == "sweep"]
    return trials, parent


@pytest.mark.parametrize("workers", [1, 2], ids=["in_process", "worker_group"])
def test_a_trial_that_runs_the_host_out_of_memory_ends_oom_and_the_sweep_goes_on(workdir: Path, workers: int) -> None:
    # Ray's memory monitor kills at a fraction of the host's memory: here 3 GiB above what is
    # in use now, so that the test takes at most that much more of the machine (the trial
    # would take 15 GiB).
    memory = psutil.virtual_memory()
    threshold = min(0.95, (memory.total - memory.available + 3 * 2**30) / memory.total)
    env = {"RAY_memory_usage_threshold": f"{threshold:.3f}", "RAY_memory_monitor_refresh_ms": "100"}
    path = write_experiment(workdir, HOST_OOM.replace("WORKERS", str(workers)))
    # One trial at a time: the one Ray kills is the one that allocates (the monitor picks the
    # newest worker, not the biggest).
    status, out = _sweep(workdir, path, "--max-concurrent", "1", env=env, timeout=600)
    assert status == 0, out
    assert "Caught unexpected exception" not in out and "Traceback" not in out, out
    assert "2 trials (1 completed, 1 oom)" in out and "The host ran out of memory (trial_0000" in out, out
    trials, parent = _runs(workdir, "hostoom")
    oom, fine = trials["trial_0000"], trials["trial_0001"]  # the grid's order: x=0.75 first
    assert oom.data.tags["tunetrain.status"] == "oom" and oom.info.status == "FAILED"
    assert oom.data.tags["tunetrain.error"].startswith("Ray's memory monitor killed the trial: the host ran low")
    assert float(oom.data.tags["tunetrain.oom.peak_memory_gib"]) > 0.5
    assert fine.data.tags["tunetrain.status"] == "completed" and fine.info.status == "FINISHED"
    assert parent.info.status == "FINISHED" and parent.data.tags["tunetrain.trials.oom"] == "1"


HUNG = """
import threading
import time
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(5):
        if config["x"] > 0.5 and step == 1:
            threading.Event().wait()  # hangs for ever: a data loader or a collective that never returns
        time.sleep(0.2)
        ray.train.report({"loss": config["x"] + 1.0 / (step + 1)})


experiment = Experiment(
    name="hung", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.grid_search([0.75, 0.25])}, workers_per_trial=WORKERS,
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=5, max_trial_seconds=8),
    seed=1, baseline=False,
)
"""


@pytest.mark.parametrize("workers", [1, 2], ids=["in_process", "worker_group"])
def test_a_trial_that_stops_reporting_ends_timed_out_and_the_sweep_goes_on(workdir: Path, workers: int) -> None:
    path = write_experiment(workdir, HUNG.replace("WORKERS", str(workers)))
    # One at a time: the second trial can start only once the hung one's process is gone.
    status, out = _sweep(workdir, path, "--max-concurrent", "1", env={}, timeout=300)
    assert status == 0, out
    assert "2 trials (1 completed, 1 timed out)" in out, out
    assert "Timed out: 1 trial(s) (trial_0000): no report for" in out, out
    trials, parent = _runs(workdir, "hung")
    hung, fine = trials["trial_0000"], trials["trial_0001"]
    assert hung.data.tags["tunetrain.status"] == "timed_out" and hung.info.status == "FAILED"
    error = hung.data.tags["tunetrain.error"]
    assert error.startswith("timed out: no report for") and "after 1 iteration(s), past max_trial_seconds=8" in error
    assert fine.data.tags["tunetrain.status"] == "completed" and fine.info.status == "FINISHED"
    assert parent.info.status == "FINISHED" and parent.data.tags["tunetrain.trials.timed_out"] == "1"
