"""The train-loop helpers on a real (tiny) GPT-2 from transformers, in this process."""

from __future__ import annotations

import math

import pytest
import torch

from tunetrain.training import StepRunner, slow_data


def tiny_gpt2(seed: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=64, n_positions=16, n_embd=32, n_layer=2, n_head=2, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0
    )
    return GPT2LMHeadModel(config)


def gpt2_loss(model: torch.nn.Module) -> object:
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
