"""Helpers for train loops: one optimizer step with mixed precision, gradient accumulation and
clipping, timed so that a sweep shows whether data loading or compute bounds a trial.

    step = tunetrain.StepRunner(model, optimizer, precision="bf16", accumulation_steps=4, clip_norm=1.0)
    for _ in range(max_steps):
        stats = step.run(batches, lambda x: model(input_ids=x, labels=x).loss)
        ray.train.report({"loss": stats.loss, **stats.metrics(tokens_per_sample=context)})

Each setting is a plain value of the experiment's config, so it can be swept like any
hyperparameter (see docs/training.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal

import torch

from tunetrain.records import DATA_TIME, STEP_TIME

Precision = Literal["fp32", "bf16", "fp16"]
PRECISIONS = ("fp32", "bf16", "fp16")


@dataclasses.dataclass(frozen=True)
class StepStats:
    """What one optimizer step took and did."""

    loss: float  # the mean loss over the step's micro-batches
    grad_norm: float  # the gradients' total norm before clipping
    data_s: float  # time spent waiting for batches
    compute_s: float  # time spent in forward, backward and the optimizer
    samples: int  # samples in the step (micro-batches x their size): the effective batch size
    peak_memory_gib: float | None  # on CUDA: the most memory allocated so far

    def metrics(self, *, tokens_per_sample: int | None = None) -> dict[str, float]:
        """The step's figures as metrics: losses aside, what a sweep compares trials by."""
        step_s = self.data_s + self.compute_s
        out = {
            "grad_norm": self.grad_norm,
            DATA_TIME: self.data_s,
            "compute_time_s": self.compute_s,
            STEP_TIME: step_s,
            "effective_batch_size": float(self.samples),
            "samples_per_s": self.samples / step_s if step_s > 0 else 0.0,
        }
        if tokens_per_sample is not None:
            out["tokens_per_s"] = out["samples_per_s"] * tokens_per_sample
        if self.peak_memory_gib is not None:
            out["peak_memory_gib"] = self.peak_memory_gib
        return out


class StepRunner:
    """One optimizer step from ``accumulation_steps`` micro-batches.

    Args:
        model: the (prepared) model; a DDP or FSDP model skips the gradient all-reduce on
            all but the last micro-batch (``no_sync``).
        optimizer: its optimizer.
        precision: "fp32"; "bf16" (autocast to bfloat16, on CPU or GPU); "fp16" (autocast
            to float16 with a gradient scaler; GPU only).
        accumulation_steps: micro-batches per optimizer step; each micro-batch's loss is
            divided by it, so ``k`` micro-batches of ``b`` give the gradient of one batch
            of ``k * b``.
        clip_norm: clip the gradients' total norm to this (None: no clipping; the norm is
            still measured and reported).
        scheduler: a learning-rate scheduler stepped after each optimizer step.
    """

    def __init__(
        self,
        model: torch.nn.Module,
        optimizer: torch.optim.Optimizer,
        *,
        precision: Precision = "fp32",
        accumulation_steps: int = 1,
        clip_norm: float | None = None,
        scheduler: Any = None,
    ) -> None:
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be one of {', '.join(PRECISIONS)}, but got {precision=}.")
        if not isinstance(accumulation_steps, int) or accumulation_steps < 1:
            raise ValueError(f"accumulation_steps must be an integer >= 1, but got {accumulation_steps=}.")
        if clip_norm is not None and not clip_norm > 0:
            raise ValueError(f"clip_norm must be > 0 or None, but got {clip_norm=}.")
        self.device = next(model.parameters()).device
        if precision == "fp16" and self.device.type != "cuda":
            raise ValueError(
                f"precision='fp16' needs a CUDA device (a gradient scaler on float16), but the model is on "
                f"{self.device}; use precision='bf16' on CPU, or 'fp32'."
            )
        self.model = model
        self.optimizer = optimizer
        self.precision = precision
        self.accumulation_steps = accumulation_steps
        self.clip_norm = clip_norm
        self.scheduler = scheduler
        self.scaler = torch.amp.GradScaler("cuda") if precision == "fp16" else None

    def autocast(self) -> contextlib.AbstractContextManager[Any]:
        """The forward pass's precision (also for evaluation)."""
        if self.precision == "fp32":
            return contextlib.nullcontext()
        dtype = torch.bfloat16 if self.precision == "bf16" else torch.float16
        return torch.autocast(device_type=self.device.type, dtype=dtype)

    def run(self, batches: Iterator[Any], loss_fn: Callable[[Any], torch.Tensor]) -> StepStats:
        """Take ``accumulation_steps`` batches from ``batches``, compute ``loss_fn(batch)`` on
        each, and make one optimizer step."""
        cuda = self.device.type == "cuda"
        data_s = compute_s = 0.0
        losses: list[float] = []
        samples = 0
        self.optimizer.zero_grad(set_to_none=True)
        for index in range(self.accumulation_steps):
            start = time.perf_counter()
            batch = next(batches)
            data_s += time.perf_counter() - start
            start = time.perf_counter()
            last = index == self.accumulation_steps - 1
            # DDP/FSDP all-reduce the gradients once, on the last micro-batch.
            model: Any = self.model
            sync = contextlib.nullcontext() if last or not hasattr(model, "no_sync") else model.no_sync()
            with sync:
                with self.autocast():
                    loss = loss_fn(batch)
                scaled = loss / self.accumulation_steps
                (self.scaler.scale(scaled) if self.scaler is not None else scaled).backward()
            losses.append(float(loss.detach()))
            samples += _batch_size(batch)
            if cuda:
                torch.cuda.synchronize(self.device)
            compute_s += time.perf_counter() - start
        start = time.perf_counter()
        if self.scaler is not None:
            self.scaler.unscale_(self.optimizer)  # clip and measure the true gradients
        norm = torch.nn.utils.clip_grad_norm_(
            self.model.parameters(), self.clip_norm if self.clip_norm is not None else math.inf
        )
        if self.scaler is not None:
            self.scaler.step(self.optimizer)
            self.scaler.update()
        else:
            self.optimizer.step()
        if self.scheduler is not None:
            self.scheduler.step()
        if cuda:
            torch.cuda.synchronize(self.device)
        compute_s += time.perf_counter() - start
        peak = torch.cuda.max_memory_allocated(self.device) / 2**30 if cuda else None
        return StepStats(
            loss=sum(losses) / len(losses),
            grad_norm=float(norm),
            data_s=data_s,
            compute_s=compute_s,
            samples=samples,
            peak_memory_gib=peak,
        )


def prepare_model(model: torch.nn.Module, *, parallel_strategy: Literal["ddp", "fsdp"] = "ddp") -> torch.nn.Module:
    """``ray.train.torch.prepare_model`` (device placement, DDP or FSDP across the trial's
    workers), with FSDP on CPU too.

    Ray Train refuses FSDP without GPUs ("FSDP is only available with GPU-enabled
    training"), but torch's FSDP shards and trains on CPU over gloo; on CPU the model is
    wrapped in torch's ``FullyShardedDataParallel`` directly, as Ray would on GPU. One worker:
    nothing to wrap.
    """
    import ray.train
    import ray.train.torch

    if parallel_strategy not in ("ddp", "fsdp"):
        raise ValueError(f"parallel_strategy must be 'ddp' or 'fsdp', but got {parallel_strategy=}.")
    if parallel_strategy == "fsdp" and ray.train.get_context().get_world_size() > 1:
        device = ray.train.torch.get_device()
        if device.type == "cpu":
            from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

            return FSDP(model.to(device), device_id=device)
    return ray.train.torch.prepare_model(model, parallel_strategy=parallel_strategy)


def combine(stats: list[StepStats]) -> StepStats:
    """Several steps as one average step (for a report every few steps): mean loss, norm,
    times and samples, so that throughput and the data-time share stay what they were."""
    n = len(stats)
    peaks = [s.peak_memory_gib for s in stats if s.peak_memory_gib is not None]
    return StepStats(
        loss=sum(s.loss for s in stats) / n,
        grad_norm=sum(s.grad_norm for s in stats) / n,
        data_s=sum(s.data_s for s in stats) / n,
        compute_s=sum(s.compute_s for s in stats) / n,
        samples=round(sum(s.samples for s in stats) / n),
        peak_memory_gib=max(peaks) if peaks else None,
    )


def state_dicts(model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict[str, Any], dict[str, Any]]:
    """The full model and optimizer state to checkpoint, for a plain, DDP or FSDP model.

    Under FSDP every rank must call this (it gathers the shards); the result is the whole
    state, as a single-process model would have it, so a checkpoint loads under any strategy.
    """
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(model, FSDP):
        return model.state_dict(), FSDP.optim_state_dict(model, optimizer)
    return getattr(model, "module", model).state_dict(), optimizer.state_dict()


def load_state_dicts(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    model_state: dict[str, Any],
    optimizer_state: dict[str, Any],
) -> None:
    """Load what :func:`state_dicts` saved (every rank, under FSDP)."""
    from torch.distributed.fsdp import FullyShardedDataParallel as FSDP

    if isinstance(model, FSDP):
        model.load_state_dict(model_state)
        optimizer.load_state_dict(FSDP.optim_state_dict_to_load(model, optimizer, optimizer_state))
        return
    getattr(model, "module", model).load_state_dict(model_state)
    optimizer.load_state_dict(optimizer_state)


def _batch_size(batch: Any) -> int:
    """The number of samples in a batch: a tensor's first dimension, or the first tensor's
    of a tuple, list or dict."""
    if isinstance(batch, torch.Tensor):
        return int(batch.shape[0])
    items = batch.values() if isinstance(batch, dict) else batch if isinstance(batch, list | tuple) else []
    for item in items:
        if isinstance(item, torch.Tensor):
            return int(item.shape[0])
    return 1
