"""Target 6, training-loop overhead: steady-state iteration time of a 2-worker tunetrain trial
(a TorchTrainer, DDP over gloo, reporting every 20 iterations) against native torch DDP
(two processes, gloo, the same model, batch and steps, no reporting).

Steady state: the median of the per-report mean iteration times, without the first 3 reports.

    python benchmarks/ddp.py
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c

WARMUP = 3


def tunetrain_arm(params: dict[str, Any]) -> dict[str, Any]:
    c.tunetrain_sweep(
        str(c.EXPERIMENTS / "ddp_mlp.py"),
        overrides={"blocks": params["blocks"], "block": params["block"], "lr": 0.01},
    )
    (run,) = c.child_runs("bench_ddp")
    times = [m.value for m in c.metric_history(run.info.run_id, "iter_s")]
    return {"iter_s": c.median(times[WARMUP:] or times)}


def _native_worker(rank: int, port: int, params: dict[str, Any], out: Any) -> None:
    import torch
    import torch.distributed as dist

    from tunetrain import load_experiment

    load_experiment(c.EXPERIMENTS / "ddp_mlp.py")
    module = sys.modules["tunetrain_experiment_ddp_mlp"]
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    model = torch.nn.parallel.DistributedDataParallel(module.make_model())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    times = [module.train_block(model, optimizer, params["block"])[1] for _ in range(params["blocks"])]
    dist.destroy_process_group()
    if rank == 0:
        out.put(times)


def native_arm(params: dict[str, Any]) -> dict[str, Any]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    context = multiprocessing.get_context("fork")
    out = context.Queue()
    workers = [context.Process(target=_native_worker, args=(rank, port, params, out)) for rank in range(2)]
    for worker in workers:
        worker.start()
    times = out.get()
    for worker in workers:
        worker.join()
    return {"iter_s": c.median(times[WARMUP:] or times)}


ARMS = {"tunetrain": tunetrain_arm, "native": native_arm}


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    if c.arm_main(ARMS, args):
        return
    root = c.work_root("ddp")
    params, repeats = ({"blocks": 4, "block": 2}, 1) if args.smoke else ({"blocks": 15, "block": 20}, args.repeats)
    found: dict[str, list[float]] = {"native": [], "tunetrain": []}
    for i in range(repeats):
        for arm in found:
            found[arm].append(c.run_arm("ddp.py", arm, params, workdir=root / f"{arm}-{i}")["iter_s"])
    ratio = c.median(found["tunetrain"]) / c.median(found["native"])
    rows = [[arm, repeats, c.median(values) * 1000] for arm, values in found.items()]
    print(
        c.section(
            title="6. Training-loop overhead",
            command="python benchmarks/ddp.py",
            target="steady-state iteration time of a 2-worker trial <= 1.15x native torch DDP",
            headers=["arm", "repeats", "median ms per iteration"],
            rows=rows,
            verdict=c.verdict(ratio <= 1.15, f"{ratio:.3f}x native DDP"),
            notes=f"2 processes x 1 thread, gloo, MLP 256-1024-1024-10, batch 64; {params['blocks']} reports of "
            f"{params['block']} iterations; os.cpu_count()={os.cpu_count()}.",
        )
    )


if __name__ == "__main__":
    main()
