"""Reproducibility: seeds on every worker, `tunetrain replay`, the same root seed twice."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_cli, write_experiment
from tunetrain.results.analysis import load_sweep
from tunetrain.seeding import derive_seed

pytestmark = pytest.mark.usefixtures("ray_cluster")

# Every reported value depends on the seeded generators (Python, NumPy, torch); with
# several workers, on every rank's draws (summed across ranks), and each rank reports the
# seed it was given. `jitter` adds noise no seed controls; `step_time_s` is wall-clock time.
STOCHASTIC = """
import random
import time

import numpy as np
import ray.train
import torch
import torch.distributed as dist
from ray import tune
from tunetrain import Experiment, StopRule, get_context


def loop(config):
    context = get_context()
    weights = torch.randn(8)
    for step in range(4):
        draw = torch.tensor([random.random() + float(np.random.rand()) + float(torch.rand(1)) + float(weights.sum())])
        seeds = torch.tensor([float(context.worker_seed)] * context.world_size, dtype=torch.float64)
        if context.world_size > 1:
            dist.all_reduce(draw)  # every rank's draws count
            gathered = [torch.zeros(1, dtype=torch.float64) for _ in range(context.world_size)]
            dist.all_gather(gathered, torch.tensor([float(context.worker_seed)], dtype=torch.float64))
            seeds = torch.cat(gathered)
        loss = config["scale"] * float(draw) / (step + 1)
        if config["jitter"]:
            loss += random.SystemRandom().random()
        metrics = {"loss": loss, "deterministic": float(torch.are_deterministic_algorithms_enabled()),
                   "step_time_s": time.perf_counter()}
        metrics.update({f"seed_rank{rank}": float(seed) for rank, seed in enumerate(seeds.tolist())})
        ray.train.report(metrics)


experiment = Experiment(
    name="stochastic", train_loop=loop, space={"scale": tune.uniform(0.5, 2.0)}, defaults={"jitter": False},
    metric="loss", mode="min", scheduler="fifo", searcher="random", num_samples=NUM_SAMPLES,
    workers_per_trial=WORKERS, resources_per_worker={"CPU": CPUS}, stop=StopRule(max_iterations=4), seed=21,
    baseline=False,
)
"""


def stochastic(folder: Path, *, workers: int = 1, samples: int = 2) -> Path:
    body = STOCHASTIC.replace("NUM_SAMPLES", str(samples)).replace("WORKERS", str(workers))
    return write_experiment(folder, body.replace("CPUS", "1" if workers == 1 else "0.5"))


def _trial_runs(workdir: Path) -> dict[str, Any]:
    sweep = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    return {run.name: run for run in sweep.runs}


def _history(workdir: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


@pytest.mark.slow
def test_a_replayed_trial_has_the_same_metric_history(workdir: Path) -> None:
    status, out = run_cli("sweep", str(stochastic(workdir)), "--no-report")
    assert status == 0, out
    original = _trial_runs(workdir)["trial_0001"]  # not trial 0: its seed is the recorded one, not index 0's
    status, out = run_cli("replay", original.run_id)
    # Same config, same seed, same file: the same values at every step (exit 0).
    assert status == 0, out
    assert "Metric histories: identical over 4 step(s)." in out
    # A time differs on every run: shown as such, not part of the verdict.
    assert re.search(r"step_time_s +4  timing", out), out
    replayed = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}").runs[0]
    # The replay is a new run linked to the original, with the original's seed and config.
    assert replayed.tags["tunetrain.replay_of"] == original.run_id
    assert replayed.params["tunetrain.seed"] == original.params["tunetrain.seed"]
    assert replayed.params["scale"] == original.params["scale"]
    assert _history(workdir, replayed.run_id, "loss") == _history(workdir, original.run_id, "loss")
    # --steps replays fewer steps; the comparison is over those.
    status, out = run_cli("replay", original.run_id, "--steps", "2")
    assert status == 0 and "identical over 2 step(s)" in out


@pytest.mark.slow
def test_replay_names_the_first_step_that_differs(workdir: Path) -> None:
    status, out = run_cli("sweep", str(stochastic(workdir, samples=1)), "--set", "jitter=True", "--no-report")
    assert status == 0, out
    original = _trial_runs(workdir)["trial_0000"]
    status, out = run_cli("replay", original.run_id)
    # Noise no seed controls: the replay differs from step 1 and says so (exit 1).
    assert status == 1, out
    assert "Metric histories: DIFFERENT over 4 step(s)." in out
    loss_line = next(line for line in out.splitlines() if line.strip().startswith("loss "))
    assert " no " in loss_line and "step 1:" in loss_line
    replayed = next(r for r in load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}").runs)
    comparison = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}").download_artifacts(
        replayed.run_id, "replay_comparison.json"
    )
    loss = next(m for m in json.loads(Path(comparison).read_text())["metrics"] if m["metric"] == "loss")
    assert loss["identical"] is False and loss["first_step"] == 1


@pytest.mark.slow
def test_two_workers_get_different_recorded_rank_seeds_and_replay_the_same(workdir: Path) -> None:
    status, out = run_cli("sweep", str(stochastic(workdir, workers=2, samples=1)), "--no-report")
    assert status == 0, out
    original = _trial_runs(workdir)["trial_0000"]
    trial_seed = int(original.params["tunetrain.seed"])
    recorded = [int(s) for s in original.tags["tunetrain.worker_seeds"].split(",")]
    # Each rank's seed is derived from the trial's seed and its rank, recorded on the run ...
    assert recorded == [derive_seed(trial_seed, 0), derive_seed(trial_seed, 1)] and recorded[0] != recorded[1]
    # ... and is the seed that worker was given (each rank reported its own).
    assert [original.metrics["seed_rank0"], original.metrics["seed_rank1"]] == [float(s) for s in recorded]
    status, out = run_cli("replay", original.run_id)
    assert status == 0, out
    assert "Replaying trial_0000" in out and "2 worker(s)" in out and "identical over 4 step(s)" in out


@pytest.mark.slow
def test_the_same_root_seed_gives_the_same_configs_and_histories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = []
    for attempt in ("first", "second"):
        folder = tmp_path / attempt
        folder.mkdir()
        monkeypatch.chdir(folder)
        status, out = run_cli("sweep", str(stochastic(folder, samples=3)), "--searcher", "optuna", "--no-report")
        assert status == 0, out
        runs = _trial_runs(folder)
        results.append(
            {name: (run.params["scale"], _history(folder, run.run_id, "loss")) for name, run in sorted(runs.items())}
        )
    # Trial by trial: the same suggested config and the same loss at every step.
    assert results[0] == results[1]


def test_deterministic_mode_reaches_the_workers_and_is_recorded(workdir: Path) -> None:
    status, out = run_cli("sweep", str(stochastic(workdir, samples=1)), "--deterministic", "--no-report")
    assert status == 0, out
    sweep = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    assert sweep.tags["tunetrain.deterministic"] == "true"
    run = sweep.runs[0]
    # The worker ran with torch's deterministic algorithms, and its run records the mode and
    # the sweep's provenance (versions, hardware, file hash).
    assert run.metrics["deterministic"] == 1.0
    assert run.tags["tunetrain.deterministic"] == "true"
    assert run.tags["version.torch"] and run.tags["hardware.cpu_model"] and run.tags["tunetrain.experiment_sha256"]


def test_replaying_a_run_that_is_not_a_trial_is_bad_input(workdir: Path) -> None:
    status, out = run_cli("sweep", str(stochastic(workdir, samples=1)), "--no-report")
    assert status == 0, out
    sweep = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    status, out = run_cli("replay", sweep.run_id)
    assert status == 2 and "is not a tunetrain trial" in out
    status, out = run_cli("replay", "0" * 32)
    assert status == 2 and "No run '00000000000000000000000000000000'" in out
