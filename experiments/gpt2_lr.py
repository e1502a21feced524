# A learning-rate sweep (plus warmup and weight decay) of a small GPT-2 language model from
# transformers, trained on the source files of Python's standard library (a real text
# corpus that every Python install ships; no download), byte-level tokens.
#
#   python -m tunetrain sweep experiments/gpt2_lr.py --num-samples 8 --set train.max_steps=200
#   python -m tunetrain sweep experiments/gpt2_lr.py --set model=gpt2      # pretrained GPT-2 (needs the hub)
#   python -m tunetrain sweep experiments/gpt2_lr.py --smoke               # one tiny trial first
#   python -m tunetrain sweep experiments/gpt2_lr.py --use-gpu --set train.precision=bf16   # on GPUs
#   python -m tunetrain sweep experiments/gpt2_lr.py --workers-per-trial 2 --set train.parallel_strategy=fsdp
#
# Every evaluation reports train_loss, val_loss and val_ppl, the step's timings and
# throughput (tokens/s) and saves a checkpoint; a trial restarted by Ray Train resumes from
# its latest checkpoint. Precision, gradient accumulation, clipping, activation
# checkpointing and DDP/FSDP are settings under "train" (tunetrain.StepRunner does the step).

from __future__ import annotations

import math
import os
import sysconfig
import tempfile
from pathlib import Path
from typing import Any

import ray.train
import torch
from ray import tune

from tunetrain import CheckpointPolicy, Experiment, ExperimentError, StepRunner, StopRule, get_context
from tunetrain.training import combine, load_state_dicts, prepare_model, state_dicts

PRETRAINED = "gpt2"  # --set model=gpt2 loads these weights and this tokenizer from the hub


def load_corpus(max_bytes: int) -> bytes:
    """The standard library's .py files, in a fixed order, up to max_bytes."""
    root = Path(sysconfig.get_paths()["stdlib"])
    chunks, size = [], 0
    for path in sorted(root.glob("*.py")):
        data = path.read_bytes()
        chunks.append(data)
        size += len(data)
        if size >= max_bytes:
            break
    return b"\n".join(chunks)[:max_bytes]


def tokenize(config: dict[str, Any]) -> tuple[torch.Tensor, int]:
    """Token ids of the corpus and the vocabulary size: raw bytes, or GPT-2's BPE when pretrained."""
    text = load_corpus(config["data"]["max_bytes"])
    if config["model"] == PRETRAINED:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(PRETRAINED)
        ids = tokenizer(text.decode("utf-8", errors="replace"))["input_ids"]
        return torch.tensor(ids, dtype=torch.long), tokenizer.vocab_size
    return torch.frombuffer(bytearray(text), dtype=torch.uint8).long(), 256


def build_model(config: dict[str, Any], vocab_size: int) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2LMHeadModel

    if config["model"] == PRETRAINED:
        return GPT2LMHeadModel.from_pretrained(PRETRAINED)
    shape = config["model_config"]
    return GPT2LMHeadModel(
        GPT2Config(
            vocab_size=vocab_size,
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


def train_loop(config: dict[str, Any]) -> None:
    torch.set_num_threads(1)  # one CPU per worker
    train_cfg = config["train"]
    context = config["model_config"]["context"]
    ids, vocab_size = tokenize(config)
    split = int(len(ids) * 0.9)  # the last 10% of the corpus is held out
    train_ids, val_ids = ids[:split], ids[split:]
    generator = torch.Generator().manual_seed(get_context().worker_seed)  # batches follow the seed

    model: Any = build_model(config, vocab_size)  # transformers' GPT2LMHeadModel
    if train_cfg["activation_checkpointing"]:  # recompute activations in backward: less memory, more compute
        model.gradient_checkpointing_enable()
    model = prepare_model(model, parallel_strategy=train_cfg["parallel_strategy"])  # Ray's, with FSDP on CPU too
    device = next(model.parameters()).device  # where prepare_model put it: the worker's GPU, or the CPU

    def batch(data: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
        starts = torch.randint(0, len(data) - context - 1, (train_cfg["batch_size"],), generator=gen)
        return torch.stack([data[s : s + context] for s in starts.tolist()]).to(device)

    optimizer = torch.optim.AdamW(model.parameters(), lr=config["lr"], weight_decay=config["weight_decay"])
    warmup = max(1, int(config["warmup_frac"] * train_cfg["max_steps"]))
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: min(1.0, (step + 1) / warmup))
    runner = StepRunner(
        model,
        optimizer,
        precision=train_cfg["precision"],
        accumulation_steps=train_cfg["accumulation_steps"],
        clip_norm=train_cfg["grad_clip"],
        scheduler=schedule,
    )
    batches = iter(lambda: batch(train_ids, generator), None)  # endless random training batches

    step = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:  # restarted by Ray Train: go on from the latest checkpoint
        with checkpoint.as_directory() as folder:
            state = torch.load(os.path.join(folder, "state.pt"))
        load_state_dicts(model, optimizer, state["model"], state["optimizer"])  # DDP or FSDP alike
        schedule.load_state_dict(state["schedule"])
        step = state["step"]

    def loss_of(x: torch.Tensor) -> torch.Tensor:
        return model(input_ids=x, labels=x).loss

    while step < train_cfg["max_steps"]:
        model.train()
        stats = []
        for _ in range(train_cfg["eval_every"]):
            stats.append(runner.run(batches, loss_of))  # accumulation_steps batches, one optimizer step
            step += 1
        model.eval()
        val_gen = torch.Generator().manual_seed(0)  # the same validation batches every time
        with torch.no_grad(), runner.autocast():
            val_loss = (
                sum(loss_of(batch(val_ids, val_gen)).item() for _ in range(train_cfg["eval_batches"]))
                / train_cfg["eval_batches"]
            )
        period = combine(stats)  # the evaluation period's mean step: loss, grad norm, timings
        metrics = {
            "step": step,
            "train_loss": period.loss,
            "val_loss": val_loss,
            "val_ppl": math.exp(min(val_loss, 50.0)),
            "lr": schedule.get_last_lr()[0],
            **period.metrics(tokens_per_sample=context),  # data/compute time, samples/s, tokens/s
        }
        model_state, optimizer_state = state_dicts(model, optimizer)  # every rank: FSDP gathers shards
        with tempfile.TemporaryDirectory() as folder:
            if ray.train.get_context().get_world_rank() == 0:
                state = {
                    "model": model_state,
                    "optimizer": optimizer_state,
                    "schedule": schedule.state_dict(),
                    "step": step,
                }
                torch.save(state, os.path.join(folder, "state.pt"))
                ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))
            else:
                ray.train.report(metrics)


class NextTokenLogits(torch.nn.Module):
    """GPT-2 returning its logits tensor (MLflow's pytorch flavour serves tensors, not
    transformers' output objects): token ids (batch x length) in, logits out."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.model(input_ids=input_ids.long()).logits


def export_model(checkpoint_dir: str, config: dict[str, Any]) -> torch.nn.Module:
    """The trained GPT-2 from a checkpoint, for MLflow's Model Registry (`tunetrain register`)."""
    model = build_model(config, vocab_size=256)  # the byte vocabulary (a pretrained model has its own)
    model.load_state_dict(torch.load(os.path.join(checkpoint_dir, "state.pt"))["model"])
    return NextTokenLogits(model).eval()


def export_example(config: dict[str, Any]) -> Any:
    """Two sequences of 16 token ids: the registered model's input example."""
    return torch.zeros(2, 16, dtype=torch.long).numpy()


def preflight(config: dict[str, Any]) -> None:
    """Before anything starts: pretrained GPT-2 needs the Hugging Face hub (or a local cache)."""
    if config["model"] == PRETRAINED:
        try:
            from transformers import AutoConfig

            AutoConfig.from_pretrained(PRETRAINED)
        except Exception as exc:
            raise ExperimentError(
                f"model={PRETRAINED!r} needs the pretrained GPT-2 weights from the Hugging Face hub, "
                f"which is not reachable and not cached here ({type(exc).__name__}).",
                fix="Drop --set model=gpt2 to train the small GPT-2 built from its config, or run where "
                "the hub is reachable (or HF_HOME holds a copy of gpt2).",
            ) from exc
    elif config["model"] != "small":
        raise ExperimentError(
            f"model must be 'small' or {PRETRAINED!r}, but got {config['model']!r}.",
            fix="Use --set model=small (the default) or --set model=gpt2.",
        )


experiment = Experiment(
    name="gpt2_lr",  # the MLflow experiment holding every sweep of this file
    train_loop=train_loop,  # runs on every Ray Train worker
    space={
        "lr": tune.loguniform(1e-5, 1e-2),  # AdamW peak learning rate
        "warmup_frac": tune.uniform(0.0, 0.2),  # share of max_steps spent warming up linearly
        "weight_decay": tune.uniform(0.0, 0.1),  # AdamW decoupled weight decay
    },
    defaults={
        "model": "small",  # "small": GPT-2 built from model_config; "gpt2": pretrained weights
        "model_config": {
            "n_layer": 2,  # transformer blocks
            "n_embd": 128,  # width
            "n_head": 4,  # attention heads
            "context": 128,  # tokens per sequence
        },
        "train": {
            "max_steps": 300,  # optimizer steps per trial
            "eval_every": 50,  # steps between evaluations (one report and checkpoint each)
            "batch_size": 16,  # sequences per micro-batch per worker
            "accumulation_steps": 1,  # micro-batches per optimizer step (effective batch = batch_size x this x workers)
            "precision": "fp32",  # "bf16" (CPU or GPU) or "fp16" (GPU) autocast
            "activation_checkpointing": False,  # recompute activations in backward: less memory
            "parallel_strategy": "ddp",  # "ddp" or "fsdp" (sharded) with several workers
            "eval_batches": 8,  # validation batches per evaluation
            "grad_clip": 1.0,  # max gradient norm (the pre-clip norm is reported as grad_norm)
        },
        "data": {"max_bytes": 2_000_000},  # bytes of standard-library source to train on
    },
    metric="val_loss",  # validation loss decides the best trial
    mode="min",  # lower is better
    scheduler="asha",  # stops poor trials at evaluation rungs 2, 4, 8, ...
    scheduler_options={"grace_period": 2, "reduction_factor": 2},  # rungs in evaluations; max_t from stop
    num_samples=8,  # trials in the sweep
    workers_per_trial=1,  # DDP processes per trial (try --workers-per-trial 2)
    resources_per_worker={"CPU": 1},  # two trials side by side on 2 CPUs
    stop=StopRule(
        iterations_from=lambda c: c["train"]["max_steps"] // c["train"]["eval_every"],  # its evaluations (after --set)
        max_trial_seconds=1800,  # or after 30 minutes
    ),
    seed=0,  # root seed: trial seeds and the searcher derive from it
    checkpoint=CheckpointPolicy(num_to_keep=2),  # keep the 2 best checkpoints by val_loss
    smoke={"train.max_steps": 10, "train.eval_every": 2, "data.max_bytes": 200_000},  # sweep --smoke: 5 tiny evals
    preflight=preflight,  # checks --set model=... before anything starts
    export_model=export_model,  # a checkpoint as a torch model: registered in MLflow at the end
    export_example=export_example,  # its input example
)
