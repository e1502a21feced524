# The gpt2_lr.py sweep with transformers' own Trainer as the train loop: the same small
# GPT-2 and the same corpus (the standard library's source, byte-level tokens; no
# download), tuned exactly like a hand-written loop. Ray's `prepare_trainer` and its
# `RayTrainReportCallback` wire the Trainer to Ray Train: every evaluation is saved and
# reported (eval_loss, loss, grad_norm, learning_rate, tokens/s) with its checkpoint, and
# ASHA stops poor trials at the evaluations.
#
#   python -m tunetrain sweep experiments/gpt2_hf_trainer.py
#   python -m tunetrain sweep experiments/gpt2_hf_trainer.py --smoke        # one tiny trial first
#   python -m tunetrain sweep experiments/gpt2_hf_trainer.py --workers-per-trial 2   # DDP, set up by the Trainer
#   python -m tunetrain sweep experiments/gpt2_hf_trainer.py --use-gpu --set train.precision=bf16

from __future__ import annotations

import os
import sysconfig
import tempfile
import time
from pathlib import Path
from typing import Any

import ray.train
import torch
from ray import tune
from ray.train.huggingface.transformers import RayTrainReportCallback, prepare_trainer
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainerCallback, TrainingArguments

from tunetrain import CheckpointPolicy, Experiment, ExperimentError, StopRule, get_context


def load_corpus(max_bytes: int) -> bytes:
    """The standard library's .py files, in a fixed order, up to max_bytes (as in gpt2_lr.py)."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, size = [], 0
    for path in sorted(root.glob("*.py")):
        chunks.append(path.read_bytes())
        size += len(chunks[-1])
        if size >= max_bytes:
            break
    return b"\n".join(chunks)[:max_bytes]


class Blocks(torch.utils.data.Dataset):
    """Consecutive blocks of `context` byte tokens; the Trainer's collator gets dicts."""

    def __init__(self, ids: torch.Tensor, context: int) -> None:
        self.blocks = ids[: len(ids) // context * context].view(-1, context)

    def __len__(self) -> int:
        return len(self.blocks)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.blocks[index], "labels": self.blocks[index]}  # GPT-2 shifts the labels itself


class Throughput(TrainerCallback):
    """Adds step time, samples/s and tokens/s since the last log to the Trainer's log history,
    which RayTrainReportCallback reports (the Trainer logs them only once, at the end)."""

    def __init__(self, tokens_per_sample: int) -> None:
        self.tokens_per_sample = tokens_per_sample
        self.since: tuple[float, int] | None = None  # (time, global step) at the last log

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.since = (time.perf_counter(), state.global_step)

    def on_log(self, args: Any, state: Any, control: Any, logs: Any = None, **kwargs: Any) -> None:
        if self.since is None or "loss" not in (logs or {}):  # only the training logs
            return
        now, (then, first) = time.perf_counter(), self.since
        steps = state.global_step - first
        if steps > 0:
            samples = steps * args.per_device_train_batch_size * args.gradient_accumulation_steps * args.world_size
            state.log_history[-1].update(
                step_time_s=(now - then) / steps,
                samples_per_s=samples / (now - then),
                tokens_per_s=samples * self.tokens_per_sample / (now - then),
            )
        self.since = (now, state.global_step)


def train_loop(config: dict[str, Any]) -> None:
    torch.set_num_threads(1)  # one CPU per worker
    train_cfg = config["train"]
    shape = config["model_config"]
    ids = torch.frombuffer(bytearray(load_corpus(config["data"]["max_bytes"])), dtype=torch.uint8).long()
    split = int(len(ids) * 0.9)  # the last 10% of the corpus is held out
    train_set = Blocks(ids[:split], shape["context"])
    val_set = torch.utils.data.Subset(  # the same validation blocks at every evaluation
        Blocks(ids[split:], shape["context"]), range(train_cfg["eval_batches"] * train_cfg["batch_size"])
    )
    model = GPT2LMHeadModel(
        GPT2Config(
            vocab_size=256,
            n_positions=shape["context"],
            n_embd=shape["n_embd"],
            n_layer=shape["n_layer"],
            n_head=shape["n_head"],
            # Bytes, no special tokens: GPT-2's own ids (50256) lie outside a 256-byte vocabulary, and
            # transformers warns of that on every load of the model (a registration, a replay).
            bos_token_id=None,
            eos_token_id=None,
        )
    )
    with tempfile.TemporaryDirectory() as output_dir:  # the Trainer's own checkpoints, before Ray takes them
        args = TrainingArguments(
            output_dir=output_dir,
            learning_rate=config["lr"],  # AdamW (the Trainer's default optimizer)
            warmup_steps=config["warmup_frac"],  # a float below 1: a share of max_steps
            weight_decay=config["weight_decay"],
            lr_scheduler_type="constant_with_warmup",  # as gpt2_lr.py: linear warmup, then flat
            max_steps=train_cfg["max_steps"],
            per_device_train_batch_size=train_cfg["batch_size"],
            per_device_eval_batch_size=train_cfg["batch_size"],
            gradient_accumulation_steps=train_cfg["accumulation_steps"],
            max_grad_norm=train_cfg["grad_clip"],  # the pre-clip norm is logged as grad_norm
            bf16=train_cfg["precision"] == "bf16",
            fp16=train_cfg["precision"] == "fp16",
            gradient_checkpointing=train_cfg["activation_checkpointing"],
            eval_strategy="steps",  # evaluate, log and save together: each report has
            eval_steps=train_cfg["eval_every"],  # eval_loss and the checkpoint of the same step
            logging_steps=train_cfg["eval_every"],
            save_strategy="steps",
            save_steps=train_cfg["eval_every"],
            save_total_limit=1,  # Ray keeps the trial's checkpoints; the Trainer only its latest
            seed=get_context().trial_seed,  # the same on every rank: the distributed sampler needs it
            use_cpu=not torch.cuda.is_available(),
            dataloader_num_workers=0,
            report_to="none",  # tunetrain records to MLflow; the Trainer's own integrations stay off
            disable_tqdm=True,  # no progress bars in the sweep's console
            log_level="warning",
        )
        trainer = Trainer(
            model=model,
            args=args,
            train_dataset=train_set,
            eval_dataset=val_set,
            callbacks=[Throughput(shape["context"]), RayTrainReportCallback()],
        )
        trainer = prepare_trainer(trainer)  # Ray Train's data integration
        checkpoint = ray.train.get_checkpoint()
        if checkpoint is None:
            trainer.train()
        else:  # restarted or restored by Tune: go on from the Trainer's own checkpoint
            with checkpoint.as_directory() as folder:
                trainer.train(resume_from_checkpoint=os.path.join(folder, RayTrainReportCallback.CHECKPOINT_NAME))


def preflight(config: dict[str, Any]) -> None:
    """Before anything starts: the Trainer evaluates and saves together, so every report has both."""
    train_cfg = config["train"]
    if train_cfg["max_steps"] % train_cfg["eval_every"] != 0:
        raise ExperimentError(
            f"train.max_steps must be a multiple of train.eval_every (the last step is evaluated and "
            f"reported), but got max_steps={train_cfg['max_steps']}, eval_every={train_cfg['eval_every']}.",
            fix="Set train.max_steps to a multiple of train.eval_every.",
        )
    if train_cfg["precision"] not in ("fp32", "bf16", "fp16"):
        raise ExperimentError(
            f"train.precision must be 'fp32', 'bf16' or 'fp16', but got {train_cfg['precision']!r}.",
            fix="Use --set train.precision=bf16 (CPU or GPU), fp16 (GPU) or fp32.",
        )


experiment = Experiment(
    name="gpt2_hf_trainer",  # the MLflow experiment holding every sweep of this file
    train_loop=train_loop,  # runs on every Ray Train worker
    space={
        "lr": tune.loguniform(1e-5, 1e-2),  # AdamW peak learning rate
        "warmup_frac": tune.uniform(0.0, 0.2),  # share of max_steps spent warming up linearly
        "weight_decay": tune.uniform(0.0, 0.1),  # AdamW decoupled weight decay
    },
    defaults={
        "model_config": {
            "n_layer": 2,  # transformer blocks
            "n_embd": 128,  # width
            "n_head": 4,  # attention heads
            "context": 128,  # tokens per sequence
        },
        "train": {
            "max_steps": 300,  # optimizer steps per trial (a multiple of eval_every)
            "eval_every": 50,  # steps between evaluations (one report and checkpoint each)
            "batch_size": 16,  # sequences per micro-batch per worker
            "accumulation_steps": 1,  # micro-batches per optimizer step
            "precision": "fp32",  # "bf16" (CPU or GPU) or "fp16" (GPU)
            "activation_checkpointing": False,  # recompute activations in backward: less memory
            "eval_batches": 8,  # validation batches per evaluation
            "grad_clip": 1.0,  # max gradient norm
        },
        "data": {"max_bytes": 2_000_000},  # bytes of standard-library source to train on
    },
    metric="eval_loss",  # the Trainer's validation loss decides the best trial
    mode="min",  # lower is better
    scheduler="asha",  # stops poor trials at evaluation rungs 2, 4, 8, ...
    scheduler_options={"grace_period": 2, "reduction_factor": 2},  # rungs in evaluations; max_t from stop
    num_samples=8,  # trials in the sweep
    workers_per_trial=1,  # DDP processes per trial (the Trainer wraps the model)
    resources_per_worker={"CPU": 1},  # two trials side by side on 2 CPUs
    stop=StopRule(
        iterations_from=lambda c: c["train"]["max_steps"] // c["train"]["eval_every"],  # its evaluations (after --set)
        max_trial_seconds=1800,  # or after 30 minutes
    ),
    seed=0,  # root seed: trial seeds and the searcher derive from it
    checkpoint=CheckpointPolicy(num_to_keep=2),  # keep the 2 best checkpoints by eval_loss
    smoke={"train.max_steps": 10, "train.eval_every": 2, "data.max_bytes": 200_000},  # sweep --smoke: 5 tiny evals
    preflight=preflight,  # checks the settings before anything starts
)
