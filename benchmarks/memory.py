"""Target 8, memory: the driver's resident memory during a 200-trial sweep stays flat in the
number of trials. The driver's RSS is sampled every 0.25 s while the sweep runs; the slope
of RSS against the number of trials ended (a least-squares line over the samples after the
first 20 trials ended and up to the last one's end) is reported in MB per 100 trials, for
tunetrain (without its end-of-sweep report) and for plain Ray Tune (reused actors, no
tracking) running the same trials.

    python benchmarks/memory.py
"""

from __future__ import annotations

import bisect
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c


class RssSampler:
    """(time, resident MB) of this process every ``interval`` seconds, on a thread."""

    def __init__(self, interval: float = 0.25) -> None:
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._interval = interval
        self._page_mb = os.sysconf("SC_PAGE_SIZE") / 2**20
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            with open("/proc/self/statm") as f:
                self.samples.append((time.time(), int(f.read().split()[1]) * self._page_mb))

    def stop(self) -> list[tuple[float, float]]:
        self._stop.set()
        self._thread.join()
        return self.samples


def slope_per_100(samples: list[tuple[float, float]], ends: list[float], skip: int = 20) -> tuple[float, float]:
    """(MB per 100 trials ended, peak MB) from RSS samples and the trials' end times."""
    ends = sorted(ends)
    # While trials end: what the process does after the last one (a report, the arm's own
    # reads) is a one-off, not growth in the number of trials.
    samples = [(t, mb) for t, mb in samples if not ends or t <= ends[-1]]
    if not samples:
        return 0.0, 0.0
    points = [(bisect.bisect_right(ends, t), mb) for t, mb in samples]
    points = [(n, mb) for n, mb in points if n >= min(skip, len(ends) // 2)] or points
    mean_n = sum(n for n, _ in points) / len(points)
    mean_mb = sum(mb for _, mb in points) / len(points)
    var = sum((n - mean_n) ** 2 for n, _ in points)
    cov = sum((n - mean_n) * (mb - mean_mb) for n, mb in points)
    return (100 * cov / var if var else 0.0), max(mb for _, mb in samples)


def tunetrain_arm(params: dict[str, Any]) -> dict[str, Any]:
    sampler = RssSampler()
    c.tunetrain_sweep(
        str(c.EXPERIMENTS / "busy.py"),
        num_samples=params["trials"],
        overrides={"iterations": 1, "compute_s": 0.02},
        report=False,  # the end-of-sweep report (matplotlib, about 100 MB) is a one-off, as in scale.py
    )
    samples = sampler.stop()
    ends = [run.info.end_time / 1000 for run in c.child_runs("bench_busy")]
    slope, peak = slope_per_100(samples, ends)
    return {"slope": slope, "peak": peak}


def run_plain_tune(trial: Callable[[dict[str, Any]], None], trials: int) -> tuple[float, list[Any], list[float]]:
    """Plain Ray Tune (reused actors, 1 CPU per trial, no tracking, random ``x``) running
    ``trials`` of ``trial`` with the driver's RSS sampled: (Tuner.fit seconds, RSS samples,
    the trials' end times)."""
    from ray import tune

    c.init_ray(log_to_driver=False, include_dashboard=False)
    ends: list[float] = []

    class Ends(tune.Callback):
        def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
            ends.append(time.time())

    sampler = RssSampler()
    start = time.perf_counter()
    tune.Tuner(
        tune.with_resources(trial, {"CPU": 1}),
        param_space={"x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(num_samples=trials, reuse_actors=True),
        run_config=tune.RunConfig(storage_path=str(Path.cwd() / "tune"), callbacks=[Ends()], verbose=0),
    ).fit()
    seconds = time.perf_counter() - start
    return seconds, sampler.stop(), ends


def tune_arm(params: dict[str, Any]) -> dict[str, Any]:
    from ray import tune

    burn = c.busy_module().burn

    def trial(config: dict[str, Any]) -> None:
        tune.report({"loss": config["x"], "compute_s": burn(0.02)})

    _, samples, ends = run_plain_tune(trial, params["trials"])
    slope, peak = slope_per_100(samples, ends)
    return {"slope": slope, "peak": peak}


ARMS = {"tunetrain": tunetrain_arm, "tune": tune_arm}


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    if c.arm_main(ARMS, args):
        return
    root = c.work_root("memory")
    trials, repeats = (8, 1) if args.smoke else (200, args.repeats)
    rows = []
    slopes: dict[str, float] = {}
    for arm in ("tune", "tunetrain"):
        results = [c.run_arm("memory.py", arm, {"trials": trials}, workdir=root / f"{arm}-{i}") for i in range(repeats)]
        slopes[arm] = c.median([r["slope"] for r in results])
        label = "plain Ray Tune (reuse_actors, no tracking)" if arm == "tune" else "tunetrain (MLflow on)"
        rows.append([label, trials, repeats, c.median([r["peak"] for r in results]), slopes[arm]])
    print(
        c.section(
            title="8. Driver memory",
            command="python benchmarks/memory.py",
            target="peak resident memory of the driver flat in the number of trials (reported in MB per 100 trials)",
            headers=["arm", "trials", "repeats", "median peak RSS MB", "median MB per 100 trials"],
            rows=rows,
            verdict=c.verdict(
                slopes["tunetrain"] <= max(5.0, 1.5 * slopes["tune"]),
                f"tunetrain {slopes['tunetrain']:.1f} MB per 100 trials (plain Ray Tune {slopes['tune']:.1f})",
            ),
            notes="'Flat' is read as at most 5 MB per 100 trials, or no more than 1.5x Ray Tune's own growth "
            "(Tune keeps every Trial object and its last result in the driver).",
        )
    )


if __name__ == "__main__":
    main()
