"""Target 12, scale: 1,000 trials of 3 reports each with trivial compute and random search,
tracking on, against plain Ray Tune with reuse_actors running the same trials in the same
script: sweep wall-time ratio, the driver's resident memory sampled through the sweep (peak,
and MB per 100 trials ended), and the time ``load_sweep(...).trials()`` takes on the result.

    python benchmarks/scale.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c
from memory import RssSampler, run_plain_tune, slope_per_100

ITERATIONS, COMPUTE_S = 3, 0.001


def tunetrain_arm(params: dict[str, Any]) -> dict[str, Any]:
    sampler = RssSampler()
    seconds, _ = c.tunetrain_sweep(
        str(c.EXPERIMENTS / "busy.py"),
        name="scale",
        num_samples=params["trials"],
        scheduler="fifo",
        searcher="random",
        overrides={"iterations": ITERATIONS, "compute_s": COMPUTE_S},
        report=False,
    )
    samples = sampler.stop()
    ends = [run.info.end_time / 1000 for run in c.child_runs("bench_busy")]
    slope, peak = slope_per_100(samples, ends)
    from tunetrain.results.analysis import load_sweep

    start = time.perf_counter()
    trials = load_sweep("scale", tracking_uri=f"sqlite:///{Path.cwd() / 'mlflow.db'}").trials()
    load_s = time.perf_counter() - start
    assert len(trials) == params["trials"], len(trials)
    return {"wall": seconds, "slope": slope, "peak": peak, "first": samples[0][1] if samples else 0.0, "load": load_s}


def tune_arm(params: dict[str, Any]) -> dict[str, Any]:
    from ray import tune

    burn = c.busy_module().burn

    def trial(config: dict[str, Any]) -> None:
        for step in range(ITERATIONS):
            tune.report({"loss": config["x"] + 1.0 / (step + 1), "compute_s": burn(COMPUTE_S)})

    seconds, samples, ends = run_plain_tune(trial, params["trials"])
    slope, peak = slope_per_100(samples, ends)
    return {"wall": seconds, "slope": slope, "peak": peak, "first": samples[0][1] if samples else 0.0}


ARMS = {"tunetrain": tunetrain_arm, "tune": tune_arm}


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    if c.arm_main(ARMS, args):
        return
    root = c.work_root("scale")
    trials = 10 if args.smoke else 1000
    results = {arm: c.run_arm("scale.py", arm, {"trials": trials}, workdir=root / arm) for arm in ("tune", "tunetrain")}
    ours, theirs = results["tunetrain"], results["tune"]
    ratio = ours["wall"] / theirs["wall"]
    rows = [
        [
            "plain Ray Tune (reuse_actors, no tracking)",
            trials,
            theirs["wall"],
            theirs["first"],
            theirs["peak"],
            theirs["slope"],
            "-",
        ],
        ["tunetrain (MLflow on)", trials, ours["wall"], ours["first"], ours["peak"], ours["slope"], ours["load"]],
    ]
    met = ratio <= 1.3 and ours["slope"] <= 2.0 and ours["load"] <= 1.5
    print(
        c.section(
            title="12. A 1,000-trial sweep",
            command="python benchmarks/scale.py",
            target="sweep wall time <= 1.3x plain Ray Tune's (reuse_actors), driver memory <= 2 MB per 100 trials, "
            "load_sweep().trials() <= 1.5 s",
            headers=[
                "arm",
                "trials",
                "sweep s",
                "RSS at start MB",
                "peak RSS MB",
                "MB per 100 trials",
                "load_sweep().trials() s",
            ],
            rows=rows,
            verdict=c.verdict(
                met,
                f"{ratio:.2f}x plain Ray Tune's wall time; {ours['slope']:.1f} MB per 100 trials "
                f"(Ray Tune {theirs['slope']:.1f}); load {ours['load']:.2f} s",
            ),
            notes=f"Random search, FIFO, {ITERATIONS} reports of {COMPUTE_S} s CPU per trial, 1 CPU per trial "
            "(2 at once on 2 CPUs). The sweep's seconds leave Ray's start out for both arms (tunetrain: its "
            "`sweep_s`, from the parent run's creation to the last record; Ray Tune: `Tuner.fit`). RSS is the "
            "driver process's, sampled every 0.25 s.",
        )
    )


if __name__ == "__main__":
    main()
