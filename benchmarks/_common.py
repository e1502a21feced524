"""What every benchmark script shares: arms in subprocesses, tunetrain run in process,
MLflow reading, medians and the markdown section each script prints.

A benchmark compares tunetrain with a baseline measured in the same script run. Arms that
need a Ray of their own (a different ``ray.init``) run as subprocesses of the script:
``python SCRIPT --arm NAME --params JSON`` prints one JSON line, the arm's measurements.
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
BENCH = REPO / "benchmarks"
EXPERIMENTS = BENCH / "experiments"
_RESULT_PREFIX = "BENCHMARK-RESULT "


def parser(description: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=description)
    p.add_argument("--smoke", action="store_true", help="tiny sizes: checks that the script runs, measures nothing")
    p.add_argument("--repeats", type=int, default=3, help="repeats of each arm (medians are reported)")
    p.add_argument("--arm", help=argparse.SUPPRESS)
    p.add_argument("--params", default="{}", help=argparse.SUPPRESS)
    return p


# A smoke run's arms, run in the script's own process (see run_arm); None when measuring.
_IN_PROCESS: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]] | None = None

# Set by `run_all --smoke`, which runs every script in its own process on one Ray it started
# (see init_ray): a smoke run measures nothing, and each Ray start costs seconds.
shared_ray = False


def init_ray(**options: Any) -> None:
    """``ray.init(**options)`` for a baseline arm; in a shared-Ray smoke run, nothing (the
    Ray that ``run_all`` started is used as it is)."""
    import ray

    if shared_ray and ray.is_initialized():
        return
    ray.init(**options)


def arm_main(arms: Mapping[str, Callable[[dict[str, Any]], dict[str, Any]]], args: argparse.Namespace) -> bool:
    """In an arm subprocess: run the arm and print its result; returns False in the parent."""
    global _IN_PROCESS
    if not args.arm:
        _IN_PROCESS = arms if args.smoke else None
        return False
    result = arms[args.arm](json.loads(args.params))
    print(_RESULT_PREFIX + json.dumps(result), flush=True)
    return True


def run_arm(script: str, arm: str, params: dict[str, Any], *, workdir: Path) -> dict[str, Any]:
    """Run one arm in a fresh Python (and so a fresh Ray) and return its measurements.

    A smoke run measures nothing, so there each arm runs in this process instead, after
    ``ray.shutdown()`` (its own Ray all the same; under ``run_all --smoke``, the one shared
    Ray): it checks that the arm works without the seconds of a Python start and of imports
    that each arm's process would cost."""
    workdir.mkdir(parents=True, exist_ok=True)
    if _IN_PROCESS is not None:
        return _run_in_process(_IN_PROCESS[arm], params, workdir=workdir)
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    proc = subprocess.run(
        [sys.executable, str(BENCH / script), "--arm", arm, "--params", json.dumps(params)],
        cwd=workdir,
        env=env,
        capture_output=True,
        text=True,
    )
    for line in proc.stdout.splitlines():
        if line.startswith(_RESULT_PREFIX):
            return dict(json.loads(line[len(_RESULT_PREFIX) :]))
    raise RuntimeError(
        f"benchmark arm {script} --arm {arm} failed (exit {proc.returncode}):\n"
        f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )


def _run_in_process(
    run: Callable[[dict[str, Any]], dict[str, Any]], params: dict[str, Any], *, workdir: Path
) -> dict[str, Any]:
    import ray

    if not shared_ray:
        ray.shutdown()
    here = Path.cwd()
    os.chdir(workdir)
    try:
        return dict(json.loads(json.dumps(run(params))))  # what a subprocess would have sent
    finally:
        os.chdir(here)
        if not shared_ray:
            ray.shutdown()


def tunetrain_sweep(experiment: str, **options: Any) -> tuple[float, str]:
    """Run ``tunetrain.sweep(experiment, **options)`` in this process (the public API);
    returns (seconds the sweep ran, not Ray's start-up; its console output)."""
    import tunetrain

    out = io.StringIO()
    # The same trials as the baseline arm's (plain Ray Tune, raw Optuna), which run no
    # baseline trial.
    options.setdefault("baseline", False)
    result = tunetrain.sweep(experiment, stream=out, **options)
    if result.status != "ok":
        raise RuntimeError(
            f"tunetrain.sweep({experiment!r}, {options}) ended {result.status}:\n{out.getvalue()[-3000:]}"
        )
    return result.ran.sweep_s, out.getvalue()


def child_runs(experiment: str, tracking_uri: str | None = None) -> list[Any]:
    """The child (trial) runs of every sweep of ``experiment`` in the store."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri or f"sqlite:///{Path.cwd() / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None, f"no MLflow experiment {experiment!r}"
    runs = client.search_runs([exp.experiment_id], max_results=10_000)
    return [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def metric_history(run_id: str, key: str, tracking_uri: str | None = None) -> list[Any]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri or f"sqlite:///{Path.cwd() / 'mlflow.db'}")
    return sorted(client.get_metric_history(run_id, key), key=lambda m: m.step)


def busy_module() -> Any:
    """benchmarks/experiments/busy.py, loaded as tunetrain loads it (shipped to Ray workers by
    value), for baselines that need its ``burn`` function."""
    from tunetrain import load_experiment

    load_experiment(EXPERIMENTS / "busy.py")
    return sys.modules["tunetrain_experiment_busy"]


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


def section(
    *,
    title: str,
    command: str,
    target: str,
    headers: Sequence[str],
    rows: Sequence[Sequence[Any]],
    verdict: str,
    notes: str = "",
) -> str:
    """The markdown section a script prints (run_all collects them into docs/benchmarks.md)."""
    lines = [f"## {title}", "", f"`{command}`", "", f"Target: {target}", ""]
    lines.append("| " + " | ".join(headers) + " |")
    lines.append("| " + " | ".join("---" for _ in headers) + " |")
    for row in rows:
        lines.append("| " + " | ".join(_cell(v) for v in row) + " |")
    lines += ["", f"**{verdict}**"]
    if notes:
        lines += ["", notes]
    return "\n".join(lines) + "\n"


def _cell(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.3g}" if abs(value) < 1000 else f"{value:,.0f}"
    return str(value)


def verdict(met: bool, measured: str) -> str:
    return f"{'Met' if met else 'Not met'}: {measured}."


def work_root(name: str) -> Path:
    """A fresh scratch folder for one script run (MLflow stores, Tune results)."""
    root = Path(os.environ.get("TUNETRAIN_BENCH_DIR", "/tmp/tunetrain_bench")) / f"{name}-{os.getpid()}"
    root.mkdir(parents=True, exist_ok=True)
    return root
