"""``tunetrain`` / ``python -m tunetrain``: each subcommand is a parser plus a command function.

``main`` only dispatches. Commands return the exit status: 0 when any trial completed,
1 when none did, 2 for bad input (a clear message, no traceback, nothing started).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from tunetrain.errors import ExperimentError

EXIT_OK, EXIT_ALL_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def sweep_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a hyperparameter sweep of an experiment file",
        description="Run the experiment's sweep through Ray Tune and record every trial in MLflow.",
    )
    parser.add_argument("file", help="experiment file, e.g. experiments/mlp_digits.py")
    parser.add_argument("--num-samples", type=int, help="number of trials")
    parser.add_argument("--scheduler", help="asha or fifo")
    parser.add_argument("--searcher", help="optuna, hyperopt or random")
    parser.add_argument("--workers-per-trial", type=int, help="Ray Train workers (DDP processes) per trial")
    parser.add_argument("--use-gpu", action="store_true", default=None, help="give each worker a GPU")
    parser.add_argument(
        "--trial-runner",
        choices=("auto", "in_process", "torch_trainer"),
        help="in_process: single-worker trials run in a reused process (fast start); "
        "torch_trainer: a TorchTrainer per trial; auto (default): in_process for 1 worker",
    )
    parser.add_argument("--max-concurrent", type=int, help="trials run at once (default: what the cluster fits)")
    parser.add_argument("--address", help="Ray cluster to use (auto, HOST:PORT, ray://HOST:10001); default: embedded")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--storage", default="tunetrain_results", help="where trial checkpoints and sweep state go")
    parser.add_argument("--name", help="sweep name (default: EXPERIMENT-DATE-TIME)")
    parser.add_argument("--seed", type=int, help="the sweep's root seed (default: the experiment's, else drawn)")
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a default or pin a space dimension (Python literal; nested keys with dots)",
    )
    parser.add_argument("--dry-run", action="store_true", help="print the resolved plan and start nothing")
    parser.set_defaults(command=sweep_command)


def resolve_experiment(args: argparse.Namespace) -> Any:
    """Load the experiment file and apply the command line's overrides (validated again)."""
    from tunetrain._space import apply_overrides, parse_assignment
    from tunetrain.experiment import load_experiment

    experiment = load_experiment(args.file)
    changes: dict[str, Any] = {}
    for flag, field in (
        ("num_samples", "num_samples"),
        ("scheduler", "scheduler"),
        ("searcher", "searcher"),
        ("workers_per_trial", "workers_per_trial"),
        ("use_gpu", "use_gpu"),
        ("max_concurrent", "max_concurrent"),
        ("trial_runner", "trial_runner"),
        ("seed", "seed"),
    ):
        value = getattr(args, flag)
        if value is not None:
            changes[field] = value
    if args.scheduler is not None and args.scheduler != experiment.scheduler:
        changes["scheduler_options"] = {}  # the file's options belong to its own scheduler
    if args.searcher is not None and args.searcher != experiment.searcher:
        changes["searcher_options"] = {}
    if args.overrides:
        overrides = dict(parse_assignment(text) for text in args.overrides)
        changes["space"], changes["defaults"] = apply_overrides(experiment.space, experiment.defaults, overrides)
    return experiment.replace(**changes) if changes else experiment


def sweep_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain import _space, tracking, tuner

    experiment = resolve_experiment(args)
    tracking_uri = args.tracking_uri or tracking.default_tracking_uri()
    # An embedded Ray gets this machine's resources, so the plan is checked before Ray starts;
    # a cluster is asked (connecting starts nothing).
    log_dir = Path(args.storage).resolve() / "logs"
    if args.address is None:
        nodes = tuner.local_nodes()
    else:
        tuner.connect(args.address, log_dir=log_dir)
        nodes = tuner.cluster_nodes()
    plan = tuner.plan_sweep(
        experiment,
        nodes=nodes,
        tracking_uri=tracking_uri,
        storage_path=args.storage,
        address=args.address,
        sweep_name=args.name,
        argv=["python", "-m", "tunetrain", *(args.argv or [])],
    )
    if args.dry_run:
        print(tuner.describe_plan(plan), file=stream)
        return EXIT_OK
    if experiment.preflight is not None:
        experiment.preflight(_space.merge({}, experiment.defaults))  # a copy: preflight cannot change it
    print(
        f"Sweep {plan.sweep_name}: {experiment.num_samples} trials, at most {plan.max_concurrent} at once, "
        f"metric {experiment.primary_metric} ({experiment.primary_mode}); tracking {tracking_uri}",
        file=stream,
        flush=True,
    )
    log_dir = Path(plan.storage_path) / plan.sweep_name / "logs"
    ray_logs = tuner.connect(args.address, log_dir=log_dir)
    print(f"Ray logs: {ray_logs} (driver log: {log_dir / 'ray_driver.log'})", file=stream, flush=True)
    outcome = tuner.run_sweep(plan, stream=stream, log_dir=Path(ray_logs))
    from tunetrain.console import summary

    print("", file=stream)
    print(summary(outcome, ui_command=tracking.ui_command(tracking_uri)), file=stream, flush=True)
    if outcome.bad_input:
        print(f"\ntunetrain: error: {outcome.bad_input}\n  Fix: {outcome.bad_input_fix}", file=stream)
        return EXIT_BAD_INPUT
    if any(t.status in ("completed", "stopped_early") for t in outcome.trials):
        return EXIT_OK
    return EXIT_ALL_FAILED


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tunetrain",
        description="Hyperparameter sweeps of PyTorch training on Ray Tune + Ray Train, recorded in MLflow.",
    )
    subparsers = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    sweep_parser(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, *, stream: TextIO | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    out = stream or sys.stdout
    try:
        status: int = args.command(args, stream=out)
    except ExperimentError as exc:
        print(f"tunetrain: error: {exc}", file=sys.stderr if stream is None else out, flush=True)
        return EXIT_BAD_INPUT
    return status
