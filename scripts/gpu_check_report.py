"""The GPU check's report (scripts/gpu_check.sh runs it last): the best trial of gpu-sweep
replayed and held to a stated tolerance, then one table of every trial and the checks, and
``gpu_check.json`` with the figures docs/benchmarks.md takes. Exit 1 when a check failed.

    python scripts/gpu_check_report.py OUT --gpus N
"""

from __future__ import annotations

import argparse
import io
import json
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd
import torch

import tunetrain
from tunetrain.results.analysis import load_sweep

# A replay on a GPU runs the same seeds and batches, but cuBLAS and atomics in bf16 need not
# add up in the same order: its validation loss may differ by this share at any step.
REPLAY_TOLERANCE = 0.02
SWEEPS = ("gpu-sweep", "gpu-large", "gpu-pack", "gpu-oom", "gpu-nccl")


def trials(uri: str) -> dict[str, pd.DataFrame]:
    """Each sweep of the check that ran (an absent one was skipped on this machine)."""
    found = {}
    for name in SWEEPS:
        try:
            found[name] = load_sweep(name, tracking_uri=uri).trials()
        except tunetrain.ExperimentError:  # not run on this machine (gpu-nccl on one GPU)
            print(f"{name}: not run here")
    return found


def replay_best(out: Path, uri: str, table: pd.DataFrame) -> dict[str, Any]:
    """The best completed trial of gpu-sweep, run again from its record; its val_loss history's
    largest difference as a share of the original's final val_loss."""
    done = table[table["status"] == "completed"].sort_values("best_val_loss")
    run_id = str(done["run_id"].iloc[0])
    result = tunetrain.replay(run_id, tracking_uri=uri, storage=str(out / "results"), stream=io.StringIO())
    (loss,) = [c for c in result.comparisons if c.metric == "val_loss"]
    final = float(done["val_loss"].iloc[0])
    share = loss.max_abs_diff / abs(final) if final else math.inf
    return {"run_id": run_id, "points": loss.compared, "max_share": share, "identical": result.identical}


def at_once(table: pd.DataFrame) -> bool:
    """Whether every trial was running at one moment (the last start before the first end)."""
    starts = table["start_time"].astype("int64") / 1e9
    ends = starts + table["duration_s"]
    return bool(starts.max() < ends.min())


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("out", type=Path)
    parser.add_argument("--gpus", type=int, required=True, help="GPUs on this machine (0: a rehearsal on CPU)")
    args = parser.parse_args()
    out, uri = args.out, f"sqlite:///{args.out}/mlflow.db"
    found = trials(uri)
    replay = replay_best(out, uri, found["gpu-sweep"])
    baseline = json.loads((out / "baseline.json").read_text())
    baseline_ddp = json.loads((out / "baseline_ddp.json").read_text()) if (out / "baseline_ddp.json").exists() else None

    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        print(
            f"\nGPU: {props.name} ({props.total_memory / 2**30:.0f} GiB) x {args.gpus}, torch {torch.__version__}, "
            f"CUDA {torch.version.cuda}"
        )
    else:
        print(f"\nNo GPU (a rehearsal on CPU), torch {torch.__version__}")
    print(f"{'sweep':<10} {'trial':<11} {'status':<14} {'tokens/s':>10} {'peak GiB':>9} {'val_loss':>9}")
    for name, table in found.items():
        for _, row in table.iterrows():
            print(
                f"{name:<10} {row['trial']:<11} {row['status']:<14} {row.get('tokens_per_s', math.nan):>10.0f} "
                f"{row.get('peak_memory_gib', math.nan):>9.2f} {row.get('val_loss', math.nan):>9.3f}"
            )

    large = float(found["gpu-large"]["tokens_per_s"].iloc[0])
    checks: list[tuple[str, bool, str]] = [
        (
            "bf16 sweep completed",
            bool(found["gpu-sweep"]["status"].isin(["completed", "stopped_early"]).all()),
            ", ".join(found["gpu-sweep"]["status"]),
        ),
        (
            "4 trials packed at once",
            at_once(found["gpu-pack"]) and len(found["gpu-pack"]) == 4,
            f"{len(found['gpu-pack'])} trials",
        ),
        (
            f"replay within {REPLAY_TOLERANCE:.0%}",
            replay["max_share"] <= REPLAY_TOLERANCE,
            f"val_loss differs by at most {replay['max_share']:.2%} over {replay['points']} points"
            + (" (identical)" if replay["identical"] else ""),
        ),
    ]
    figures: dict[str, Any] = {
        "device": baseline["device"],
        "gpus": args.gpus,
        "torch": torch.__version__,
        "large_tokens_per_s": large,
        "plain_tokens_per_s": baseline["tokens_per_s"],
        "large_vs_plain": large / baseline["tokens_per_s"],
        "replay": replay,
    }
    print(
        f"\nLarge GPT-2, one GPU: tunetrain {large:.0f} tokens/s, plain PyTorch {baseline['tokens_per_s']:.0f} "
        f"({large / baseline['tokens_per_s']:.2f}x)"
    )
    if "gpu-oom" in found:
        status = str(found["gpu-oom"]["status"].iloc[0])
        checks.append(("CUDA out of memory recorded as oom", status == "oom", status))
    if "gpu-nccl" in found:
        nccl = found["gpu-nccl"]
        checks.append(
            ("2-worker trial (NCCL on GPUs)", str(nccl["status"].iloc[0]) == "completed", str(nccl["status"].iloc[0]))
        )
        if baseline_ddp is not None:
            ratio = float(nccl["tokens_per_s"].iloc[0]) / baseline_ddp["tokens_per_s"]
            figures["ddp_vs_plain"] = ratio
            print(
                f"2-worker GPT-2: tunetrain {float(nccl['tokens_per_s'].iloc[0]):.0f} tokens/s per worker, "
                f"plain PyTorch DDP {baseline_ddp['tokens_per_s']:.0f} ({ratio:.2f}x)"
            )
    print()
    for name, passed, detail in checks:
        print(f"{'PASS' if passed else 'FAIL'}  {name}: {detail}")
    figures["checks"] = {name: passed for name, passed, _ in checks}
    (out / "gpu_check.json").write_text(json.dumps(figures, indent=1, default=str) + "\n")
    return 0 if all(passed for _, passed, _ in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
