"""Target 10, a CLI that answers fast: each command in a cold process (a new Python, as a
user types it), tunetrain's against the tools its users know, measured in the same run:
``optuna --help``, ``ray --help`` and ``mlflow --help``, and MLflow's own client reading the
same store (the floor for any reader that uses it).

``list``, ``show`` and ``best`` read a local sqlite store holding one recorded sweep (written
with tunetrain's own recorder, no Ray).

    python benchmarks/cli_speed.py
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c


def _record_one_sweep(folder: Path) -> str:
    """A store with one sweep of 3 trials, as a sweep records it; returns its tracking URI."""
    sys.path.insert(0, str(c.REPO))
    from tunetrain.tracking import SweepRecorder

    uri = f"sqlite:///{folder / 'mlflow.db'}"
    recorder = SweepRecorder(tracking_uri=uri, experiment_name="cli_speed")
    tags = {"tunetrain.sweep_name": "speed", "tunetrain.metric": "loss", "tunetrain.mode": "min"}
    recorder.start_sweep(run_name="speed", params={"space.lr": "loguniform(1e-05, 0.1)"}, tags=tags)
    for index in range(3):
        trial = f"trial_{index:04d}"
        recorder.start_trial(
            trial,
            params={"lr": 10.0 ** -(index + 2), "tunetrain.seed": index},
            tags={"tunetrain.trial_index": index, "tunetrain.seed": index},
            start_time=time.time(),
        )
        for step in range(1, 4):
            recorder.log_metrics(trial, step=step, metrics={"loss": 1.0 / step + index}, timestamp=time.time())
        recorder.end_trial(trial, status="completed", end_time=time.time(), tags={"tunetrain.iterations": 3})
    best = {"lr": 0.01}
    recorder.end_sweep(
        status="FINISHED", best_metrics={"best_loss": 1 / 3}, tags={}, best_trial="trial_0000", best_config=best
    )
    recorder.close()
    return uri


def _cold(argv: list[str], *, cwd: Path) -> float:
    """Seconds from starting a new process running ``argv`` to its exit (which must be 0)."""
    env = {**os.environ, "PYTHONPATH": f"{c.REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    start = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    return took


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    repeats = 1 if args.smoke else args.repeats
    folder = c.work_root("cli_speed")
    uri = _record_one_sweep(folder)
    tunetrain = [sys.executable, "-m", "tunetrain"]
    ours = {
        "tunetrain --help": ([*tunetrain, "--help"], 1.0),
        "tunetrain sweep --help": ([*tunetrain, "sweep", "--help"], 1.0),
        "tunetrain list": ([*tunetrain, "list", "--tracking-uri", uri], 2.5),
        "tunetrain show": ([*tunetrain, "show", "speed", "--tracking-uri", uri], 2.5),
        "tunetrain best": ([*tunetrain, "best", "speed", "--tracking-uri", uri], 2.5),
    }
    theirs = {
        f"{name} --help": [path, "--help"] for name in ("optuna", "ray", "mlflow") if (path := shutil.which(name))
    }
    # The floor for any reader that goes through MLflow's client: import it, open the same
    # store, search its experiments and runs (what `list` needs at least).
    client_read = (
        "from mlflow.tracking import MlflowClient\n"
        f"client = MlflowClient({uri!r})\n"
        "client.search_runs([e.experiment_id for e in client.search_experiments()])\n"
    )
    theirs["MlflowClient: search the same store"] = [sys.executable, "-c", client_read]
    rows = []
    met = True
    for label, (argv, target) in ours.items():
        seconds = c.median([_cold(argv, cwd=folder) for _ in range(repeats)])
        met = met and seconds <= target
        rows.append([label, repeats, seconds, f"<= {target:g}"])
    for name, argv in theirs.items():
        rows.append([name, repeats, c.median([_cold(argv, cwd=folder) for _ in range(repeats)]), "-"])
    measured = ", ".join(f"{row[0]} {row[2]:.2f} s" for row in rows)
    print(
        c.section(
            title="10. CLI answer time",
            command="python benchmarks/cli_speed.py",
            target="--help <= 1 s; list, show and best on a local store <= 2.5 s (cold process, median)",
            headers=["command", "repeats", "median s", "target s"],
            rows=rows,
            verdict=c.verdict(met, measured),
            notes="Each command runs in a new Python process from a folder with the store, as typed. "
            "`tunetrain` imports Ray, torch and MLflow only where a command uses them; `list`, `show` and "
            "`best` import MLflow (about 1 s) and its SQL store (about 0.75 s), whatever else they do: "
            "the last row is MLflow's own client doing the least `list` needs on the same store.",
        )
    )


if __name__ == "__main__":
    main()
