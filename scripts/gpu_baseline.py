"""Plain PyTorch DDP training of the GPU check's GPT-2: the tokens/s tunetrain is held to.

The same model (experiments/gpt2_lr.py's ``build_model``), corpus, batch, context, bf16
autocast and AdamW as the GPU check's large trial, trained by a bare loop in DDP (one
process per GPU under torchrun, or one process on its own) with no Ray, no MLflow and no
tunetrain, timed after a warm-up. scripts/gpu_check.sh runs it and sets tunetrain's
tokens/s against it.

    python scripts/gpu_baseline.py --out baseline.json --set model_config.n_layer=12 ...
    torchrun --nproc-per-node 2 scripts/gpu_baseline.py --out baseline.json ...
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

ROOT = Path(__file__).resolve().parents[1]


def gpt2_module() -> Any:
    spec = importlib.util.spec_from_file_location("gpt2_lr", ROOT / "experiments" / "gpt2_lr.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def with_overrides(defaults: dict[str, Any], overrides: list[str]) -> dict[str, Any]:
    """The experiment's defaults with ``a.b=value`` overrides (numbers only: what the check sets)."""
    config = copy.deepcopy(defaults)
    for item in overrides:
        key, _, raw = item.partition("=")
        *outer, last = key.split(".")
        node = config
        for part in outer:
            node = node[part]
        node[last] = type(node[last])(float(raw)) if isinstance(node[last], int | float) else raw
    return config


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True, help="where the figures go (JSON)")
    parser.add_argument("--steps", type=int, default=60, help="optimizer steps timed (after --warmup)")
    parser.add_argument("--warmup", type=int, default=10, help="steps run before the clock starts")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="as the sweep's --set")
    args = parser.parse_args()

    gpt2 = gpt2_module()
    config = with_overrides(gpt2.experiment.defaults, args.set)
    cuda = torch.cuda.is_available()
    distributed = "LOCAL_RANK" in os.environ  # under torchrun
    rank = int(os.environ.get("LOCAL_RANK", 0))
    if distributed:
        dist.init_process_group("nccl" if cuda else "gloo")
    device = torch.device("cuda", rank) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(device)
    else:
        torch.set_num_threads(1)  # as the trial's loop: one CPU per worker
    torch.manual_seed(0)

    ids, vocab = gpt2.tokenize(config)
    train = config["train"]
    context, batch_size = config["model_config"]["context"], train["batch_size"]
    model: Any = gpt2.build_model(config, vocab).to(device)
    if distributed:
        model = torch.nn.parallel.DistributedDataParallel(model, device_ids=[rank] if cuda else None)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4, weight_decay=0.01)
    dtype = torch.bfloat16 if train["precision"] == "bf16" else torch.float32
    generator = torch.Generator().manual_seed(rank)

    def step() -> None:
        starts = torch.randint(0, len(ids) - context - 1, (batch_size,), generator=generator)
        x = torch.stack([ids[s : s + context] for s in starts.tolist()]).to(device)
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast(device_type=device.type, dtype=dtype, enabled=dtype != torch.float32):
            loss = model(input_ids=x, labels=x).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), train["grad_clip"])
        optimizer.step()

    for _ in range(args.warmup):
        step()
    if cuda:
        torch.cuda.synchronize()
    start = time.perf_counter()
    for _ in range(args.steps):
        step()
    if cuda:
        torch.cuda.synchronize()
    seconds = time.perf_counter() - start
    if rank == 0:
        figures = {
            "tokens_per_s": args.steps * batch_size * context / seconds,  # per process, as tunetrain reports
            "processes": dist.get_world_size() if distributed else 1,
            "device": torch.cuda.get_device_name(device) if cuda else "cpu",
            "peak_memory_gib": torch.cuda.max_memory_allocated(device) / 2**30 if cuda else None,
            "steps": args.steps,
        }
        args.out.write_text(json.dumps(figures) + "\n")
        kind = f"DDP over {figures['processes']} processes" if distributed else "one process"
        print(f"Plain PyTorch ({kind}): {figures['tokens_per_s']:.0f} tokens/s per process on {figures['device']}")
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
