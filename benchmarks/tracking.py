"""Target 4, tracking cost:

a. a sweep of 2 trials x 100 results/s with MLflow recording on takes <= 1.05x the wall
   time of the same sweep with recording off (tunetrain's recorder replaced by one that
   drops every call);
b. tunetrain makes >= 10x fewer tracking-store calls than Ray's ``MLflowLoggerCallback``
   for the same sweep (calls to the sqlite store's public methods, counted in the driver);
c. tunetrain's recorder sustains >= 5,000 metric points/s into a sqlite store (against
   MLflow's ``log_metric``, one point per call).

    python benchmarks/tracking.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c


def _count_store_calls() -> dict[str, int]:
    """Count calls to the sqlite tracking store's public methods made in this process (from
    now on: a smoke run's arms share one process, and each counts its own)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    for name, method in list(vars(SqlAlchemyStore).items()):  # an earlier arm's counters go
        if hasattr(method, "_counted"):
            setattr(SqlAlchemyStore, name, method._counted)
    counts: dict[str, int] = {}

    def wrap(name: str, method: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            counts[name] = counts.get(name, 0) + 1
            return method(*args, **kwargs)

        counted._counted = method  # type: ignore[attr-defined]
        return counted

    helpers = {"sanitize_metric_value", "shut_down_async_logging"}  # no database access
    for name in dir(SqlAlchemyStore):
        attribute = getattr(SqlAlchemyStore, name)
        if not name.startswith("_") and name not in helpers and callable(attribute) and not isinstance(attribute, type):
            setattr(SqlAlchemyStore, name, wrap(name, attribute))
    # tunetrain writes a batch of metric points to a SQL store in one transaction of its own
    # (tunetrain._internals.sql_log_metrics): each such write counts as a call too.
    from tunetrain import _internals

    direct = getattr(_internals.sql_log_metrics, "_counted", _internals.sql_log_metrics)
    _internals.sql_log_metrics = wrap("sql_log_metrics", direct)
    return counts


def _sweep_args(params: dict[str, Any]) -> dict[str, Any]:
    return {
        "experiment": str(c.EXPERIMENTS / "busy.py"),
        "num_samples": 2,
        "overrides": {"iterations": params["results"], "compute_s": 0.01},
    }


def on_off_arm(params: dict[str, Any]) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    from tunetrain.tracking import NullRecorder

    # The store exists before the sweep, as when a user runs sweep after sweep: creating a
    # sqlite store (its schema migrations) is a one-off cost of a few seconds.
    MlflowClient(f"sqlite:///{Path.cwd() / 'mlflow.db'}").search_experiments()
    # Recording off: the sweep's recorder is the one that drops every call.
    off: dict[str, Any] = {} if params["tracking"] else {"recorder": NullRecorder}
    seconds, _ = c.tunetrain_sweep(**_sweep_args(params), **off)
    return {"wall": seconds}


def calls_tunetrain_arm(params: dict[str, Any]) -> dict[str, Any]:
    counts = _count_store_calls()
    c.tunetrain_sweep(**_sweep_args(params))
    return {"calls": sum(counts.values()), "by_method": counts}


def calls_ray_arm(params: dict[str, Any]) -> dict[str, Any]:
    from ray import tune
    from ray.air.integrations.mlflow import MLflowLoggerCallback

    counts = _count_store_calls()
    burn = c.busy_module().burn
    c.init_ray(log_to_driver=False, include_dashboard=False)
    results = params["results"]

    def trial(config: dict[str, Any]) -> None:
        for step in range(results):
            used = burn(0.01)
            tune.report(
                {"loss": (config["x"] - 0.3) ** 2 + 1.0 / (step + 1), "compute_s": used, "t_report": time.time()}
            )

    tune.Tuner(
        tune.with_resources(trial, {"CPU": 1}),
        param_space={"x": tune.uniform(0.0, 1.0)},
        tune_config=tune.TuneConfig(num_samples=2),
        run_config=tune.RunConfig(
            storage_path=str(Path.cwd() / "tune"),
            callbacks=[
                MLflowLoggerCallback(tracking_uri=f"sqlite:///{Path.cwd() / 'ray_mlflow.db'}", experiment_name="bench")
            ],
            verbose=0,
        ),
    ).fit()
    return {"calls": sum(counts.values()), "by_method": counts}


def throughput_arm(params: dict[str, Any]) -> dict[str, Any]:
    from mlflow.tracking import MlflowClient

    from tunetrain.tracking import SweepRecorder

    points, keys = params["points"], 10
    recorder = SweepRecorder(tracking_uri=f"sqlite:///{Path.cwd() / 'rec.db'}", experiment_name="bench")
    recorder.start_sweep(run_name="sweep", params={}, tags={})
    recorder.start_trial("t", params={"x": 1}, tags={}, start_time=time.time())
    recorder.flush()
    start = time.perf_counter()
    for step in range(points // keys):
        recorder.log_metrics(
            "t", step=step, metrics={f"m{k}": step * 0.1 + k for k in range(keys)}, timestamp=time.time()
        )
    recorder.flush()
    ours = points / (time.perf_counter() - start)
    recorder.close()

    client = MlflowClient(f"sqlite:///{Path.cwd() / 'plain.db'}")
    run = client.create_run(client.create_experiment("bench"))
    single = params["single_points"]
    start = time.perf_counter()
    for i in range(single):
        client.log_metric(run.info.run_id, f"m{i % keys}", i * 0.1, step=i // keys)
    theirs = single / (time.perf_counter() - start)
    return {"ours": ours, "log_metric": theirs}


ARMS = {
    "on_off": on_off_arm,
    "calls_tunetrain": calls_tunetrain_arm,
    "calls_ray": calls_ray_arm,
    "throughput": throughput_arm,
}


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    if c.arm_main(ARMS, args):
        return
    root = c.work_root("tracking")
    repeats = 1 if args.smoke else args.repeats
    results = 20 if args.smoke else 1000  # results per trial: 10 s at 100 results/s
    walls: dict[bool, list[float]] = {True: [], False: []}
    for i in range(repeats):
        for tracking in (False, True):  # alternate, so that drift hits both alike
            result = c.run_arm(
                "tracking.py",
                "on_off",
                {"tracking": tracking, "results": results},
                workdir=root / f"onoff-{tracking}-{i}",
            )
            walls[tracking].append(result["wall"])
    on, off = c.median(walls[True]), c.median(walls[False])
    calls_params = {"results": 20 if args.smoke else 100}
    ours = c.run_arm("tracking.py", "calls_tunetrain", calls_params, workdir=root / "calls-tunetrain")
    ray_calls = c.run_arm("tracking.py", "calls_ray", calls_params, workdir=root / "calls-ray")
    speeds = [
        c.run_arm(
            "tracking.py",
            "throughput",
            {"points": 2_000 if args.smoke else 50_000, "single_points": 100 if args.smoke else 1_000},
            workdir=root / f"throughput-{i}",
        )
        for i in range(repeats)
    ]
    rate, plain = c.median([s["ours"] for s in speeds]), c.median([s["log_metric"] for s in speeds])
    call_ratio = ray_calls["calls"] / max(1, ours["calls"])
    rows = [
        ["a. sweep wall time, recording off (s)", off],
        ["a. sweep wall time, recording on (s)", on],
        ["a. ratio on / off", on / off],
        [
            f"b. store calls, Ray's MLflowLoggerCallback (2 trials x {calls_params['results']} results)",
            ray_calls["calls"],
        ],
        ["b. store calls, tunetrain (same sweep)", ours["calls"]],
        ["b. ratio Ray / tunetrain", call_ratio],
        ["c. tunetrain recorder, metric points/s into sqlite", rate],
        ["c. MLflow log_metric (one point per call), points/s", plain],
    ]
    met = on / off <= 1.05 and call_ratio >= 10 and rate >= 5000
    print(
        c.section(
            title="4. Tracking cost",
            command="python benchmarks/tracking.py",
            target="on/off <= 1.05 at 2 trials x 100 results/s; >= 10x fewer store calls than Ray's "
            "MLflowLoggerCallback; >= 5,000 points/s into sqlite",
            headers=["measure", f"median of {repeats}"],
            rows=rows,
            verdict=c.verdict(
                met, f"on/off {on / off:.3f}x, {call_ratio:.1f}x fewer store calls, {rate:,.0f} points/s"
            ),
            notes="Store calls by method, tunetrain: "
            + ", ".join(f"{k} {v}" for k, v in sorted(ours["by_method"].items()))
            + "; Ray's callback: "
            + ", ".join(f"{k} {v}" for k, v in sorted(ray_calls["by_method"].items()))
            + ".",
        )
    )


if __name__ == "__main__":
    main()
