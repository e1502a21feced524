"""Target 14, the fixed cost of one ``tunetrain sweep`` (issue 19): from the process's start
to its first trial running, against a bare ``ray.init()`` process measured in the same run,
and from the last trial's end to the process's exit.

Each arm is a new Python process, as a user types it: ``python -c "import ray; ray.init()"``
(start to ``ray.init()`` returned) and ``python -m tunetrain sweep`` of 4 trials of 3 reports
with no work, ``--no-report``, in a new folder (a new sqlite store, as a first sweep has).
The trial times come from the sweep's journal (each trial's recorded start and end).
A third arm runs the same sweep with the machine's Ray already up (``tunetrain up`` before
it, ``tunetrain down`` after): the sweep joins that Ray instead of starting its own.

    python benchmarks/fixed_cost.py
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c

TRIVIAL = """
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(3):
        ray.train.report({"loss": config["x"] / (step + 1)})


experiment = Experiment(
    name="fixed_cost", train_loop=loop, metric="loss", mode="min", space={"x": tune.uniform(0, 1)},
    scheduler="fifo", searcher="random", num_samples=4, stop=StopRule(max_iterations=3), seed=1, baseline=False,
)
"""

BARE = "import time, ray; ray.init(); print('READY', time.time(), flush=True); ray.shutdown()"


def bare_ray(folder: Path) -> float:
    """Seconds from starting ``python`` to ``ray.init()`` returned."""
    start = time.time()
    done = subprocess.run([sys.executable, "-c", BARE], cwd=folder, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"bare ray.init() exited {done.returncode}:\n{done.stderr[-2000:]}")
    ready = next(float(line.split()[1]) for line in done.stdout.splitlines() if line.startswith("READY"))
    return ready - start


def tunetrain_sweep(folder: Path) -> dict[str, float]:
    """Seconds from starting ``tunetrain sweep`` to its first trial's start, and from its
    last trial's end to its exit."""
    folder.mkdir(parents=True)
    (folder / "trivial.py").write_text(TRIVIAL)
    argv = [sys.executable, "-m", "tunetrain", "sweep", "trivial.py", "--no-report", "--name", "fixed"]
    start = time.time()
    done = subprocess.run(argv, cwd=folder, capture_output=True, text=True)
    exited = time.time()
    if done.returncode != 0:
        raise RuntimeError(f"tunetrain sweep exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}")
    journal = folder / "tunetrain_results" / "fixed" / "tracking_journal.jsonl"
    entries: list[dict[str, Any]] = [json.loads(line) for line in journal.read_text().splitlines()]
    starts = [e["start_time"] for e in entries if e.get("op") == "start_trial"]
    ends = [e["end_time"] for e in entries if e.get("op") == "end_trial"]
    return {"to_first_trial": min(starts) - start, "last_end_to_exit": exited - max(ends)}


def tunetrain_ray(command: str) -> None:
    """``tunetrain up`` or ``tunetrain down``."""
    done = subprocess.run([sys.executable, "-m", "tunetrain", command], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"tunetrain {command} exited {done.returncode}:\n{done.stdout}\n{done.stderr}")


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    root = c.work_root("fixed_cost")
    repeats = 1 if args.smoke else args.repeats
    bare, first, last, joined = [], [], [], []
    for i in range(repeats):  # alternate, so that drift hits both alike
        bare.append(bare_ray(root))
        measured = tunetrain_sweep(root / f"sweep-{i}")
        first.append(measured["to_first_trial"])
        last.append(measured["last_end_to_exit"])
    tunetrain_ray("up")  # after the arms above: a bare ray.init() would join it too
    try:
        for i in range(repeats):
            joined.append(tunetrain_sweep(root / f"joined-{i}")["to_first_trial"])
    finally:
        tunetrain_ray("down")
    bare_s, first_s, last_s, joined_s = c.median(bare), c.median(first), c.median(last), c.median(joined)
    met = first_s <= bare_s + 3 and last_s <= 2 and joined_s <= 3
    rows = [
        ["bare `ray.init()`: process start to ray.init() returned", bare_s, "-"],
        ["tunetrain sweep: process start to the first trial's start", first_s, f"<= {bare_s + 3:.3g}"],
        ["tunetrain sweep, Ray already up (`tunetrain up`): start to the first trial", joined_s, "<= 3"],
        ["tunetrain sweep --no-report: last trial's end to exit", last_s, "<= 2"],
    ]
    print(
        c.section(
            title="14. Fixed cost of one sweep",
            command="python benchmarks/fixed_cost.py",
            target="process start to the first trial <= bare ray.init() + 3 s, <= 3 s with a Ray already up; "
            "last trial's end to exit <= 2 s",
            headers=["measure", f"median of {repeats}, s", "target s"],
            rows=rows,
            verdict=c.verdict(
                met,
                f"first trial {first_s:.1f} s after start (bare ray.init() {bare_s:.1f} s + "
                f"{first_s - bare_s:.1f} s); {joined_s:.1f} s with the Ray already up; exit {last_s:.1f} s after "
                "the last trial's end",
            ),
            notes="4 in-process trials of 3 reports with no work, each repeat in a new folder (a new sqlite "
            "store). Each process is new: Python's start and imports are in both arms.",
        )
    )


if __name__ == "__main__":
    main()
