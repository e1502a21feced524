"""Target 9, loading a sweep for analysis:

a sweep of 200 trials x 500 steps x 3 metrics (300,000 points in a sqlite store) loads into
tunetrain's trial table and long metric history in seconds, not minutes; the baseline is
what a user writes with MLflow's client alone (``search_runs`` for the trials, then
``get_metric_history`` for every run and metric), timed in the same script run on the same
store.

    python benchmarks/analysis_load.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c

TARGET_S = 10.0  # "seconds, not minutes"


def populate(uri: str, *, trials: int, steps: int) -> None:
    """A sweep written by tunetrain's own recorder (as a real sweep writes it)."""
    from tunetrain.tracking import SweepRecorder

    recorder = SweepRecorder(tracking_uri=uri, experiment_name="load")
    recorder.start_sweep(
        run_name="load-1",
        params={"space.lr": "float loguniform (1e-05, 0.1)"},
        tags={"tunetrain.sweep_name": "load-1", "tunetrain.metric": "loss", "tunetrain.mode": "min"},
    )
    now = time.time()
    for index in range(trials):
        name = f"trial_{index:04d}"
        lr = 10 ** (-5 + 4 * index / trials)
        recorder.start_trial(
            name, params={"lr": lr, "tunetrain.seed": index}, tags={"tunetrain.trial_index": index}, start_time=now
        )
        for step in range(1, steps + 1):
            loss = 1 / step + lr
            recorder.log_metrics(
                name, step=step, metrics={"loss": loss, "accuracy": 1 - loss / 2, "lr": lr}, timestamp=now + step
            )
        recorder.end_trial(name, status="completed", end_time=now + steps, tags={"tunetrain.iterations": steps})
    recorder.end_sweep(status="FINISHED", best_metrics={}, tags={}, best_trial=None, best_config=None)
    recorder.close()


def tunetrain_load(uri: str) -> tuple[float, int]:
    from tunetrain.results.analysis import load_sweep

    start = time.perf_counter()
    sweep = load_sweep("load-1", tracking_uri=uri)
    sweep.trials()
    history = sweep.history()
    return time.perf_counter() - start, len(history)


def client_load(uri: str) -> tuple[float, int]:
    """The baseline: MLflow's client, one history call per run and metric."""
    from mlflow.tracking import MlflowClient

    start = time.perf_counter()
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("load")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id], max_results=1000)
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    points = 0
    for run in children:
        for key in run.data.metrics:
            points += len(client.get_metric_history(run.info.run_id, key))
    return time.perf_counter() - start, points


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    trials, steps = (10, 20) if args.smoke else (200, 500)
    repeats = 1 if args.smoke else args.repeats
    root = c.work_root("analysis_load")
    uri = f"sqlite:///{root / 'mlflow.db'}"
    start = time.perf_counter()
    populate(uri, trials=trials, steps=steps)
    written = time.perf_counter() - start
    ours, theirs = [], []
    for _ in range(repeats):  # alternate, so that caches help both alike
        seconds, ours_points = tunetrain_load(uri)
        ours.append(seconds)
        seconds, their_points = client_load(uri)
        theirs.append(seconds)
    assert ours_points == their_points == trials * steps * 3, (ours_points, their_points)
    mine, base = c.median(ours), c.median(theirs)
    print(
        c.section(
            title="9. Loading a sweep for analysis",
            command="python benchmarks/analysis_load.py",
            target=f"{trials} trials x {steps} steps x 3 metrics load (trial table + full history) "
            f"in <= {TARGET_S:g} s",
            headers=["arm", "median s", "points", "ratio to MLflow client loop"],
            rows=[
                ["tunetrain `load_sweep().trials()` + `.history()`", mine, ours_points, mine / base],
                ["MLflow client: `search_runs` + `get_metric_history` per run and metric", base, their_points, 1.0],
            ],
            verdict=c.verdict(
                mine <= TARGET_S, f"{mine:.2f} s for {ours_points:,} points ({mine / base:.2f}x the MLflow loop's time)"
            ),
            notes=f"Store written by tunetrain's recorder in {written:.0f} s; {repeats} repeats, medians. "
            "A SQL store is read with one SELECT over MLflow's metrics table per 500 runs; a tracking "
            "server gets one request per run and metric, 8 in flight.",
        )
    )


if __name__ == "__main__":
    main()
