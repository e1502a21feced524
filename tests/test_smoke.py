"""`sweep --smoke`: one tiny trial and a verdict per check, on healthy and broken experiments."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import run_cli, write_experiment
from tunetrain.results.analysis import list_sweeps, load_sweep

pytestmark = pytest.mark.usefixtures("ray_cluster")

# `kind` breaks one thing at a time; `size` is a size-like parameter the smoke run shrinks.
SMOKE = """
import json
import math
import os
import tempfile

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            if config["kind"] == "bad_checkpoint":
                raise RuntimeError("cannot read the checkpoint back")
            with open(os.path.join(folder, "state.json")) as f:
                start = json.load(f)["step"]
    for step in range(start, 3 if config["kind"] == "short" else 50):  # short: its smoke values end it at 3
        loss = 1.0 / (step + 1)
        if config["kind"] == "nan" and step >= 2:
            loss = math.nan
        key = "val_loss" if config["kind"] == "wrong_metric" else "loss"
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step + 1}, f)
            checkpoint = ray.train.Checkpoint.from_directory(folder)
            ray.train.report({key: loss, "size": config["size"]}, checkpoint=checkpoint)


experiment = Experiment(
    name="smoky", train_loop=loop, space={"size": tune.choice([4, 64, 256])}, defaults={"kind": "ok"},
    metric="loss", mode="min", num_samples=8, stop=StopRule(max_iterations=50), seed=1,
    smoke={"size": 4},  # the smallest size
)
"""


def smoke(workdir: Path, kind: str) -> tuple[int, str]:
    path = write_experiment(workdir, SMOKE)
    return run_cli("sweep", str(path), "--smoke", "--set", f"kind={kind!r}")


def test_a_healthy_experiment_passes_every_check(workdir: Path) -> None:
    status, out = smoke(workdir, "ok")
    assert status == 0, out
    for line in (
        "PASS  resources:",
        "PASS  metric: loss reported at 5 step(s)",
        "PASS  finite and improving: loss 1 -> 0.2 over 5 step(s) (min)",
        # The round trip starts from the latest checkpoint, as a resumed trial would.
        "PASS  checkpoint: saved at step 5 and loaded back",
        "PASS  timing: start-up ",
        "Smoke: all checks passed.",
    ):
        assert line in out, line
    sweeps = list_sweeps(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}", smoke=True)
    # Two tiny sweeps (the trial, then one from its checkpoint), both marked as smoke runs,
    # which a plain listing leaves out.
    assert len(sweeps) == 2
    assert list_sweeps(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}").empty
    first = load_sweep(sweeps["sweep"].iloc[-1], tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    assert first.tags["tunetrain.smoke"] == "true"
    # One trial of 5 steps, with the experiment's smoke value for the size-like parameter.
    trials = first.trials()
    assert len(trials) == 1 and trials["iterations"].iloc[0] == 5 and trials["config/size"].iloc[0] == 4
    # The experiment's checkpoint policy (keep 2) holds in the smoke run too.
    kept = sorted(p.name for p in (workdir / "tunetrain_results" / first.name).glob("*/checkpoint_*"))
    assert len(kept) == 2 and kept[-1] == "checkpoint_000004", kept
    # Its timings feed the cost estimate of a dry run: 8 trials of at most 50 iterations (ASHA).
    status, plan = run_cli("sweep", str(workdir / "exp.py"), "--estimate")
    assert status == 0, plan
    assert f"Estimate (smoke run {first.name}: start-up " in plan
    assert "iterations per trial (ASHA: grace 1, reduction factor 2, max_t 50)" in plan and "CPU-hours" in plan
    # A sweep of another shape is not priced from this 1-worker smoke run: it says why ...
    status, plan = run_cli("sweep", str(workdir / "exp.py"), "--dry-run", "--workers-per-trial", "2")
    assert status == 0, plan
    assert "Estimate: none. The newest smoke run, " in plan and "ran 1 worker(s) per trial (in_process)" in plan
    assert "this sweep runs 2 worker(s) per trial (worker_group)" in plan and "CPU-hours" not in plan
    # ... and --estimate refuses it with that reason and the fix.
    status, plan = run_cli("sweep", str(workdir / "exp.py"), "--estimate", "--workers-per-trial", "2")
    assert status == 2 and "with 2 worker(s) per trial (worker_group)" in plan, plan
    assert "--smoke` first with the sweep's --workers-per-trial" in plan, plan


@pytest.mark.slow
def test_a_wrong_metric_name_fails_naming_what_was_reported(workdir: Path) -> None:
    status, out = smoke(workdir, "wrong_metric")
    assert status == 1, out
    assert "FAIL  metric: The experiment's metric 'loss' was never reported" in out
    assert "the train loop reported: size, val_loss" in out and "Smoke: FAILED, 1 check(s)." in out


@pytest.mark.slow
def test_a_nan_loss_fails_the_finite_check(workdir: Path) -> None:
    status, out = smoke(workdir, "nan")
    assert status == 1, out
    assert "FAIL  finite and improving: loss is nan at step 3" in out


@pytest.mark.slow
def test_a_checkpoint_that_does_not_load_back_fails_the_round_trip(workdir: Path) -> None:
    status, out = smoke(workdir, "bad_checkpoint")
    assert status == 1, out
    assert "PASS  finite and improving" in out
    assert (
        "FAIL  checkpoint: saved at step 5 but does not load back: RuntimeError: cannot read the checkpoint back" in out
    )


def test_pbt_needs_a_checkpoint_other_schedulers_skip_the_check() -> None:
    from tests.conftest import make_experiment
    from tunetrain.api.smoke_checks import checkpoint_check
    from tunetrain.records import TrialRecord

    trial = TrialRecord(name="trial_0000", index=0, trial_id="t", config={}, seed=1)  # reported no checkpoint
    pbt = checkpoint_check(make_experiment(scheduler="pbt", searcher="random"), trial)
    assert pbt is not None and pbt.verdict == "FAIL" and "PBT clones trials from their checkpoints" in pbt.detail
    asha = checkpoint_check(make_experiment(), trial)
    assert asha is not None and asha.verdict == "SKIP"


def test_a_round_trip_with_no_step_left_is_a_skip_said_once_not_an_error_block(workdir: Path) -> None:
    # Before: "1 trial(s) failed" and an error block from the round trip's sweep, then "all
    # checks passed" under a header saying "(5 steps)" although 3 ran.
    status, out = smoke(workdir, "short")
    assert status == 0, out
    assert "Smoke test of smoky (3 of 5 steps ran):" in out, out
    assert "SKIP  checkpoint: saved at step 3, but the trial started from it had no step left to run" in out, out
    assert "trial(s) failed" not in out and "Errors:" not in out and "never reported" not in out, out
