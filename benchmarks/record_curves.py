#!/usr/bin/env python
"""Record real learning curves for the search benchmark (issue 40), once, and ship them.

    python benchmarks/record_curves.py [--problems digits mnist1d chars] [--smoke]

For each problem, its experiment under benchmarks/experiments/curves_<problem>.py is swept
by tunetrain itself (every config of its grid, FIFO, 2 trials side by side on 2 CPUs, as
the epoch times are meant), then a second time with another root seed over a sub-grid (the
noise floor); every epoch's val_loss, val_acc and wall time is read back from the MLflow
store and written to benchmarks/data/curves_<problem>.json.gz, which benchmarks/_curves.py
replays on the simulated backend. Prints the cost of each sweep. `--smoke`: 2 epochs of a
4-config grid into a temporary folder, the second seed for the first problem only (the
suite's check that the recording still runs).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

PROBLEMS = ("digits", "mnist1d", "chars")


def sweep(problem: str, folder: Path, *, repeat: bool, smoke: bool) -> tuple[str, float]:
    """One recording sweep in a subprocess (its own Ray); its name and wall seconds."""
    name = f"curves_{problem}{'_seed1' if repeat else ''}"
    command = [
        sys.executable,
        "-m",
        "tunetrain",
        "sweep",
        str(ROOT / "benchmarks" / "experiments" / f"curves_{problem}.py"),
    ]
    command += ["--name", name, "--no-report", "--no-register", "--tracking-uri", f"sqlite:///{folder / 'curves.db'}"]
    command += ["--storage", str(folder / "results"), "--max-concurrent", "2", "--seed", "1" if repeat else "0"]
    env = {**os.environ, **({"CURVES_REPEAT": "1"} if repeat else {}), **({"CURVES_SMOKE": "1"} if smoke else {})}
    start = time.monotonic()
    done = subprocess.run(command, cwd=folder, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
        )
    return name, time.monotonic() - start


def table(folder: Path, names: list[str]) -> dict[str, Any]:
    """Every trial of the sweeps: its config, seed, and per epoch val_loss, val_acc, seconds."""
    from tunetrain.results.analysis import load_sweep

    rows = []
    for name in names:
        found = load_sweep(name, tracking_uri=f"sqlite:///{folder / 'curves.db'}")
        history = found.history(["val_loss", "val_acc", "epoch_s"])
        for _, trial in found.trials().iterrows():
            points = history[history["trial"] == trial["trial"]]
            curve = {m: points[points["metric"] == m].sort_values("step")["value"].round(6).tolist()
                     for m in ("val_loss", "val_acc", "epoch_s")}  # fmt: skip
            config = {key.removeprefix("config/"): trial[key] for key in trial.index if key.startswith("config/")}
            rows.append({"config": config, "seed": int(trial["seed"]), "sweep": name, **curve})
    return {"rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems", nargs="+", default=list(PROBLEMS), choices=PROBLEMS)
    parser.add_argument("--smoke", action="store_true", help="2 epochs of 4 configs, written to a temporary folder")
    args = parser.parse_args()
    out_dir = Path(tempfile.mkdtemp(prefix="curves-smoke-")) if args.smoke else ROOT / "benchmarks" / "data"
    for number, problem in enumerate(args.problems):
        # A smoke run's second seed sweeps the same 4 configs again, so only the first
        # problem's is run: the others would check the same code (about 19 s each on 2 CPUs).
        repeats = (False,) if args.smoke and number > 0 else (False, True)
        with tempfile.TemporaryDirectory(prefix=f"curves-{problem}-") as tmp:
            folder = Path(tmp)
            timed = [sweep(problem, folder, repeat=repeat, smoke=args.smoke) for repeat in repeats]
            data = {"problem": problem, "recorded": time.strftime("%Y-%m-%d"), **table(folder, [n for n, _ in timed])}
            data["sweep_seconds"] = {name: round(seconds, 1) for name, seconds in timed}
            path = out_dir / f"curves_{problem}.json.gz"
            with gzip.open(path, "wt") as f:
                json.dump(data, f, separators=(",", ":"))
            print(f"{path}: {len(data['rows'])} curves; " + ", ".join(f"{n} {s:.0f} s" for n, s in timed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
