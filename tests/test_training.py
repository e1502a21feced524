"""The train-loop helpers on a real (tiny) GPT-2 from transformers, in this process."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tunetrain.records import slow_data
from tunetrain.training import StepRunner


def tiny_gpt2(seed: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    return GPT2LMHeadModel(config)


def gpt2_loss(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    return lambda x: model(input_ids=x, labels=x).loss


def test_accumulating_4_batches_of_b_trains_as_one_batch_of_4b() -> None:
    # 5 steps on the same 8 sequences.
    data = torch.randint(0, 64, (8, 16), generator=torch.Generator().manual_seed(0)).expand(5, 8, 16)
    trajectories = {}
    for accumulation in (1, 4):
        model = tiny_gpt2(seed=1)
        runner = StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.5), accumulation_steps=accumulation)
        # The same 8 sequences per step: one batch of 8, or 4 micro-batches of 2.
        batches = iter([micro for step in data for micro in step.split(8 // accumulation)])
        stats = [runner.run(batches, gpt2_loss(model)) for _ in range(5)]
        trajectories[accumulation] = [s.loss for s in stats]
        # The effective batch size is recorded: 8 samples per step either way.
        assert {s.samples for s in stats} == {8}
    # The same loss trajectory, within float tolerance (the steps change the weights alike).
    assert trajectories[4] == pytest.approx(trajectories[1], rel=1e-4)
    assert trajectories[1][-1] < trajectories[1][0]  # and it trained


def test_clipping_reports_the_norm_before_clipping() -> None:
    model = tiny_gpt2(seed=2)
    runner = StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.0), clip_norm=1e-3)
    batch = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(3))
    stats = runner.run(iter([batch]), gpt2_loss(model))
    after = math.sqrt(sum(float(p.grad.pow(2).sum()) for p in model.parameters() if p.grad is not None))
    # The reported norm is the one before clipping; the gradients were clipped to 1e-3.
    assert stats.grad_norm > 1e-3 and after == pytest.approx(1e-3, rel=1e-3)
    assert stats.metrics(tokens_per_sample=16)["tokens_per_s"] == pytest.approx(stats.metrics()["samples_per_s"] * 16)


def test_bf16_autocast_runs_on_cpu_and_fp16_is_refused_there() -> None:
    model = tiny_gpt2(seed=4)
    runner = StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.1), precision="bf16")
    stats = runner.run(iter([torch.randint(0, 64, (2, 16))]), gpt2_loss(model))
    assert math.isfinite(stats.loss) and stats.peak_memory_gib is None  # no CUDA here
    with pytest.raises(ValueError, match="precision='fp16' needs a CUDA device"):
        StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.1), precision="fp16")
    with pytest.raises(ValueError, match="accumulation_steps must be an integer >= 1, but got accumulation_steps=0"):
        StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.1), accumulation_steps=0)


def test_data_loading_is_flagged_above_a_third_of_the_step() -> None:
    assert slow_data({"data_time_s": 0.5, "step_time_s": 1.0})
    assert not slow_data({"data_time_s": 0.2, "step_time_s": 1.0})
    assert not slow_data({"loss": 1.0})  # a loop that reports no timings is never flagged


# A trial whose batch is "too large" hits a test hook raising torch's out-of-memory error;
# the other trains with StepRunner and reports its timings.
OOM = """
import ray.train
import torch
from ray import tune
from tunetrain import Experiment, StepRunner, StopRule


def loop(config):
    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    runner = StepRunner(model, torch.optim.SGD(model.parameters(), lr=0.1),
                        accumulation_steps=config["train"]["accumulation_steps"])
    batches = iter(lambda: torch.randn(config["train"]["batch_size"], 4), None)  # endless
    for step in range(3):
        if config["train"]["batch_size"] > 64 and step == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")  # the test hook
        stats = runner.run(batches, lambda x: model(x).pow(2).mean())
        # No collective between reports: a rank fails right after reporting, and the step
        # every rank reported is still recorded (see docs/training.md, out of memory).
        ray.train.report({"loss": stats.loss, **stats.metrics()})


experiment = Experiment(
    name="oom", train_loop=loop, metric="loss", mode="min",
    space={"train": {"batch_size": tune.grid_search([8, 128])}}, defaults={"train": {"accumulation_steps": 1}},
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=3), seed=1,
)
"""


@pytest.mark.usefixtures("ray_cluster")
def test_an_out_of_memory_trial_ends_as_oom_and_the_sweep_goes_on(workdir: Path) -> None:
    from mlflow.tracking import MlflowClient

    from tests.conftest import run_cli, write_experiment

    status, out = run_cli("sweep", str(write_experiment(workdir, OOM)), "--no-report")
    assert status == 0, out  # the other trial completed
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("oom")
    assert experiment is not None
    runs = {
        r.data.params["train.batch_size"]: r
        for r in client.search_runs([experiment.experiment_id])
        if "mlflow.parentRunId" in r.data.tags
    }
    oom, ok = runs["128"], runs["8"]
    # Its own status (not a generic failure), the error, and the batch settings it ran with.
    assert oom.data.tags["tunetrain.status"] == "oom" and oom.info.status == "FAILED"
    assert "out of memory" in oom.data.tags["tunetrain.error"]
    assert json.loads(oom.data.tags["tunetrain.oom.batch_settings"]) == {
        "train.batch_size": 128,
        "train.accumulation_steps": 1,
    }
    # The worst value went to the scheduler and searcher, not into the record.
    assert [m.step for m in client.get_metric_history(oom.info.run_id, "loss")] == [1]
    # The summary names it and the remedies this experiment exposes.
    assert "Out of memory: 1 trial(s)" in out
    assert "train.batch_size: a smaller batch" in out and "train.accumulation_steps: more gradient" in out
    # The device it ran on is recorded (type, name, memory).
    assert ok.data.tags["tunetrain.device"] == "cpu" and ok.data.tags["tunetrain.device_name"]
    assert float(ok.data.tags["tunetrain.device_memory_gib"]) > 0
    # The trained trial's timings are in MLflow at every step.
    for key in ("data_time_s", "compute_time_s", "step_time_s", "samples_per_s", "grad_norm", "effective_batch_size"):
        assert [m.step for m in client.get_metric_history(ok.info.run_id, key)] == [1, 2, 3], key


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("runner", ["worker_group", "torch_trainer"])
def test_a_two_worker_trial_out_of_memory_is_oom_and_the_worst_value_for_the_searcher(
    workdir: Path, runner: str
) -> None:
    from mlflow.tracking import MlflowClient
    from ray import tune

    from tests.conftest import run_cli, write_experiment

    # Only the trial that runs out of memory, on two workers (over gloo).
    body = OOM.replace("tune.grid_search([8, 128])", "tune.grid_search([128])")
    path = str(write_experiment(workdir, body))
    status, out = run_cli("sweep", path, "--workers-per-trial", "2", "--trial-runner", runner, "--no-report")
    assert status == 1, out  # exit 1: no trial completed (the only one ran out of memory)
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("oom")
    assert experiment is not None
    (run,) = [r for r in client.search_runs([experiment.experiment_id]) if "mlflow.parentRunId" in r.data.tags]
    # Its own status with the error and the settings, as for one worker ...
    assert run.data.tags["tunetrain.status"] == "oom" and run.info.status == "FAILED", run.data.tags
    assert "out of memory" in run.data.tags["tunetrain.error"]
    assert json.loads(run.data.tags["tunetrain.oom.batch_settings"])["train.batch_size"] == 128
    # ... the record keeps the step before, not the worst value ...
    assert [m.step for m in client.get_metric_history(run.info.run_id, "loss")] == [1]
    # ... and Tune (its scheduler and searcher) got the worst value, not a failed trial.
    (state,) = (workdir / "tunetrain_results").glob("*/experiment_state-*.json")
    (trial,) = tune.ExperimentAnalysis(str(state.parent)).trials
    assert trial.status == "TERMINATED" and trial.last_result["loss"] == math.inf


@pytest.mark.slow
@pytest.mark.usefixtures("ray_cluster")
def test_a_two_worker_fsdp_gpt2_trial_trains_checkpoints_and_resumes_on_cpu(workdir: Path) -> None:
    from tests.conftest import EXPERIMENTS, run_cli

    # --smoke: a tiny trial, then a second trial started from the first one's checkpoint.
    status, out = run_cli(
        "sweep",
        str(EXPERIMENTS / "gpt2_lr.py"),
        "--smoke",
        "--smoke-steps",
        "3",
        "--workers-per-trial",
        "2",
        "--set",
        "train.parallel_strategy=fsdp",  # sharded over the two workers (gloo)
        "--set",
        "train.accumulation_steps=2",
        "--set",
        "train.precision=bf16",
    )
    assert status == 0, out
    # Both workers trained the sharded model and reported the validation loss ...
    assert "PASS  metric: val_loss reported" in out, out
    # ... and the full state they saved loaded back into a new sharded trial, which trained on.
    assert "PASS  checkpoint: saved at step" in out and "loaded back" in out, out
