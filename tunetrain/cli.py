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
DEFAULT_STORAGE = "tunetrain_results"


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
    parser.add_argument(
        "--workers-per-trial",
        type=_workers,
        help="Ray Train workers (DDP processes) per trial: N, or MIN-MAX for elastic trials",
    )
    parser.add_argument("--use-gpu", action="store_true", default=None, help="give each worker a GPU")
    parser.add_argument(
        "--trial-runner",
        choices=("auto", "in_process", "torch_trainer"),
        help="in_process: single-worker trials run in a reused process (fast start); "
        "torch_trainer: a TorchTrainer per trial; auto (default): in_process for 1 worker",
    )
    parser.add_argument("--max-concurrent", type=int, help="trials run at once (default: what the cluster fits)")
    parser.add_argument(
        "--max-failures", type=int, help="restarts of a trial from its checkpoint after a worker failure (default 0)"
    )
    parser.add_argument("--address", help="Ray cluster to use (auto, HOST:PORT, ray://HOST:10001); default: embedded")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument(
        "--storage",
        help="where trial checkpoints and sweep state go: a path or URI (s3://...) every node sees; "
        f"default ./{DEFAULT_STORAGE} (one machine only)",
    )
    parser.add_argument(
        "--placement-strategy",
        choices=("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
        help="how a trial's workers are placed on nodes (default: the experiment's, PACK)",
    )
    parser.add_argument("--name", help="sweep name (default: EXPERIMENT-DATE-TIME)")
    parser.add_argument("--seed", type=int, help="the sweep's root seed (default: the experiment's, else drawn)")
    parser.add_argument(
        "--deterministic",
        action="store_true",
        default=None,
        help="torch's deterministic algorithms on every worker (recorded; see docs/reproducibility.md)",
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a default or pin a space dimension (Python literal; nested keys with dots)",
    )
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved plan (with a cost estimate after a --smoke run) and start nothing",
    )
    parser.add_argument(
        "--estimate", action="store_true", help="as --dry-run, and fail when no smoke run gives the timings"
    )
    parser.add_argument(
        "--budget",
        help="stop launching trials once the next would overrun it: wall time (90s, 30m, 2h) or 5cpu-h, 1.5gpu-h",
    )
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="run one tiny trial first and check metric, loss, checkpoint round trip, resources and timing",
    )
    parser.add_argument("--smoke-steps", type=int, default=5, help="iterations of the smoke trial (default 5)")
    parser.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep --name (default: this experiment's newest under --storage) after a crash or "
        "Ctrl+C: ended trials stay ended, the others go on from their checkpoints, in the same MLflow runs",
    )
    parser.add_argument(
        "--no-report",
        action="store_true",
        help="no HTML sweep report (nor its MLflow artifacts) at the end",
    )
    parser.set_defaults(command=sweep_command)


def _workers(text: str) -> int | tuple[int, int]:
    """``--workers-per-trial``: ``2`` or an elastic range ``1-4``."""
    from tunetrain.replay import parse_workers

    try:
        return parse_workers(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or MIN-MAX (e.g. 2 or 1-4), but got {text!r}") from None


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
        ("deterministic", "deterministic"),
        ("max_failures", "max_failures"),
        ("placement_strategy", "placement_strategy"),
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
    experiment = resolve_experiment(args)
    if args.smoke:
        return smoke_command(experiment, args, stream=stream)
    from tunetrain.budget import parse_budget

    name, resumable = args.name, None
    if args.resume:
        from tunetrain import resume

        storage = args.storage or DEFAULT_STORAGE
        name = name or resume.latest_sweep(storage, experiment.name)
        if name is None:
            raise ExperimentError(
                f"--resume: no sweep of experiment {experiment.name!r} under {storage!r}.",
                fix="Pass the sweep's name with --name and the --storage it ran with (tunetrain list shows sweeps).",
            )
        resumable = resume.load(storage, name)
        if resumable.ended_as:
            print(f"Sweep {name} already finished; nothing to resume (tunetrain show {name}).", file=stream)
            return EXIT_OK
        if experiment.seed is None:  # the seed drawn when the sweep started
            experiment = experiment.replace(seed=resumable.root_seed)
    status, _ = execute_sweep(
        experiment,
        budget=parse_budget(args.budget) if args.budget else None,
        tracking_uri=args.tracking_uri,
        storage=args.storage,
        address=args.address,
        name=name,
        resume=resumable,
        argv=args.argv,
        dry_run=args.dry_run or args.estimate,
        require_estimate=args.estimate,
        report=not args.no_report,
        stream=stream,
    )
    return status


def smoke_command(experiment: Any, args: argparse.Namespace, *, stream: TextIO) -> int:
    """``sweep --smoke``: a tiny trial (and a second one from its checkpoint), then verdicts;
    exit 0 when every check passed (or was skipped), 1 otherwise."""
    from datetime import datetime

    from tunetrain import smoke, tracking
    from tunetrain.tracking import schema

    if args.smoke_steps < 2:
        raise ExperimentError(
            f"--smoke-steps must be at least 2 (to see the metric improve), but got {args.smoke_steps}.",
            fix="Pass --smoke-steps 5, or leave it out.",
        )
    tiny = smoke.smoke_experiment(experiment, steps=args.smoke_steps)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    common: dict[str, Any] = {
        "tracking_uri": args.tracking_uri,
        "storage": args.storage,
        "address": args.address,
        "argv": args.argv,
        "report": False,
        "stream": stream,
    }
    try:
        _, outcome = execute_sweep(tiny, name=args.name or f"{experiment.name}-smoke-{stamp}", **common)
    except ExperimentError as exc:
        print(f"\nSmoke test of {experiment.name}:\n  FAIL  resources or set-up: {exc}", file=stream, flush=True)
        raise
    store = tracking.SweepStore(args.tracking_uri or tracking.default_tracking_uri())
    if outcome.parent_run_id:
        store.set_tags(outcome.parent_run_id, {schema.SMOKE_TAG: "true"})
    run_ids = list(outcome.run_ids.values())
    reported = sorted({key for t in outcome.trials for key in t.last})
    history = store.histories(run_ids, reported)
    checks = [smoke.resources_check(tiny)]
    trial_checks, trial = smoke.trial_checks(tiny, outcome, history)
    checks += trial_checks
    if trial is not None and trial.status != "failed" and not outcome.bad_input:
        verdict = smoke.checkpoint_check(experiment, trial)
        if verdict is None:
            # The latest, as a resumed or restarted trial would (Tune keeps it whatever the policy).
            latest = trial.checkpoints[-1]
            print(f"\nSmoke round trip: a new trial starts from {latest['path']}", file=stream, flush=True)
            _, restored = execute_sweep(
                smoke.restore_experiment(tiny),
                name=f"{experiment.name}-smoke-restore-{stamp}",
                initial_checkpoint=latest["path"],
                **common,
            )
            if restored.parent_run_id:
                store.set_tags(restored.parent_run_id, {schema.SMOKE_TAG: "true"})
            verdict = smoke.round_trip_check(latest, restored)
        checks.append(verdict)
        measured = smoke.timings(trial, history)
        checks.append(smoke.timing_check(measured))
        if measured is not None and outcome.parent_run_id:  # for the cost estimate of --dry-run
            store.set_tags(
                outcome.parent_run_id,
                {schema.SMOKE_STARTUP_TAG: f"{measured[0]:.6g}", schema.SMOKE_ITERATION_TAG: f"{measured[1]:.6g}"},
            )
    failed = [c for c in checks if c.verdict == "FAIL"]
    print(f"\nSmoke test of {experiment.name} ({args.smoke_steps} steps):", file=stream)
    for check in checks:
        print(check.line(), file=stream)
    print(
        f"Smoke: {'FAILED, ' + str(len(failed)) + ' check(s)' if failed else 'all checks passed'}.",
        file=stream,
        flush=True,
    )
    return EXIT_ALL_FAILED if failed else EXIT_OK


def execute_sweep(
    experiment: Any,
    *,
    tracking_uri: str | None,
    storage: str | None,
    address: str | None,
    name: str | None,
    argv: list[str] | None,
    stream: TextIO,
    dry_run: bool = False,
    report: bool = True,
    trial_seeds: tuple[int, ...] = (),
    initial_checkpoint: str | None = None,
    budget: Any = None,
    require_estimate: bool = False,
    resume: Any = None,
) -> tuple[int, Any]:
    """Plan, run and summarise a sweep (or resume ``resume``, a :class:`tunetrain.resume.Resumable`);
    returns (exit status, outcome or None)."""
    from tunetrain import _space, tracking, tuner

    tracking_uri = tracking_uri or tracking.default_tracking_uri()
    storage_given, storage = storage is not None, storage or DEFAULT_STORAGE
    # An embedded Ray gets this machine's resources, so the plan is checked before Ray starts;
    # a cluster is asked (connecting starts nothing).
    log_dir = Path(storage).resolve() / "logs" if "://" not in storage else Path(DEFAULT_STORAGE, "logs").resolve()
    if address is None:
        nodes = tuner.local_nodes()
    else:
        tuner.connect(address, log_dir=log_dir)
        nodes = tuner.cluster_nodes()
        if len(nodes) > 1 and not storage_given:
            raise ExperimentError(
                f"The cluster at {address} has {len(nodes)} nodes, and no --storage was given: trial "
                f"checkpoints and sweep state would go to ./{DEFAULT_STORAGE} on this machine only, which the "
                "other nodes cannot see.",
                fix="Pass --storage: a path on a filesystem every node shares, or a URI (s3://bucket/path); "
                "see docs/cluster.md.",
            )
    plan = tuner.plan_sweep(
        experiment,
        nodes=nodes,
        tracking_uri=tracking_uri,
        storage_path=storage,
        address=address,
        sweep_name=name,
        argv=["python", "-m", "tunetrain", *(argv or [])],
        trial_seeds=trial_seeds,
        initial_checkpoint=initial_checkpoint,
        budget=budget,
    )
    if resume is not None:
        plan = _resumed_plan(plan, resume)
    from tunetrain.algorithms import budget_warning

    if (warning := budget_warning(plan.experiment)) is not None:
        print(f"tunetrain: warning: {warning}", file=stream, flush=True)
    if dry_run:
        from tunetrain import estimate

        print(tuner.describe_plan(plan), file=stream)
        shape = tuner.trial_shape(plan.experiment)
        smoke = tracking.latest_smoke_timings(tracking_uri, experiment.name, shape=shape)
        unfit = ""
        if smoke is None and (other := tracking.latest_smoke_timings(tracking_uri, experiment.name)) is not None:
            unfit = (
                f"The newest smoke run, {other.sweep}, ran {other.shape_text()}, and this sweep runs "
                f"{tracking.describe_shape(shape)}: its start-up and step times do not apply."
            )
        print(
            estimate.describe(plan.experiment, max_concurrent=plan.max_concurrent, smoke=smoke, unfit=unfit),
            file=stream,
        )
        if require_estimate and smoke is None:
            raise ExperimentError(
                f"--estimate needs the timings of a smoke run of {experiment.name!r} with "
                f"{tracking.describe_shape(shape)}, and the store {tracking_uri} has none. {unfit}".rstrip(),
                fix="Run `tunetrain sweep FILE --smoke` first with the sweep's --workers-per-trial and "
                "--trial-runner (same --tracking-uri).",
            )
        return EXIT_OK, None
    if experiment.preflight is not None:
        experiment.preflight(_space.merge({}, experiment.defaults))  # a copy: preflight cannot change it
    print(
        f"Sweep {plan.sweep_name}: {experiment.total_trials} trials, at most {plan.max_concurrent} at once, "
        f"metric {experiment.primary_metric} ({experiment.primary_mode}); tracking {tracking_uri}",
        file=stream,
        flush=True,
    )
    log_dir = Path(plan.storage_path) / plan.sweep_name / "logs"
    ray_logs = tuner.connect(address, log_dir=log_dir)
    print(f"Ray logs: {ray_logs} (driver log: {log_dir / 'ray_driver.log'})", file=stream, flush=True)
    outcome = tuner.run_sweep(plan, stream=stream, log_dir=Path(ray_logs))
    from tunetrain.console import summary

    print("", file=stream)
    print(summary(outcome, ui_command=tracking.ui_command(tracking_uri)), file=stream, flush=True)
    if report and outcome.parent_run_id and not outcome.bad_input:
        _end_of_sweep_report(outcome, tracking_uri, Path(plan.storage_path) / plan.sweep_name, stream)
    if outcome.bad_input:
        print(f"\ntunetrain: error: {outcome.bad_input}\n  Fix: {outcome.bad_input_fix}", file=stream)
        return EXIT_BAD_INPUT, outcome
    if any(t.status in ("completed", "stopped_early") for t in outcome.trials):
        return EXIT_OK, outcome
    return EXIT_ALL_FAILED, outcome


def _resumed_plan(plan: Any, resume: Any) -> Any:
    """The plan of a resumed sweep: its own id, and refused when the experiment changed."""
    import dataclasses

    from tunetrain import resume as resuming
    from tunetrain import tuner

    plan = dataclasses.replace(plan, sweep_id=resume.sweep_id, resume=True)
    params, tags = tuner.sweep_tags(plan)
    changed = resuming.changes(resume, params, tags)
    if changed:
        raise ExperimentError(
            f"Sweep {resume.name} cannot resume: the experiment changed since it started:\n  - "
            + "\n  - ".join(changed),
            fix="Resume with the experiment as it was (the sweep's MLflow run holds the file it started with, "
            "and its command line is its tunetrain.command tag), or start a new sweep with another --name. "
            "To run more trials, pass a larger --num-samples.",
        )
    grows = plan.experiment.num_samples > resume.num_samples
    if grows and plan.experiment.searcher in ("random", "grid"):
        raise ExperimentError(
            f"Sweep {resume.name} used searcher {plan.experiment.searcher!r}, whose trials Ray Tune fixes when the "
            f"sweep starts; it cannot grow from {resume.num_samples} to {plan.experiment.num_samples} trials.",
            fix=f"Resume with --num-samples {resume.num_samples} (or leave it out), and start a new sweep for more.",
        )
    return plan


def _end_of_sweep_report(outcome: Any, tracking_uri: str, folder: Path, stream: TextIO) -> None:
    """The sweep report, written after the summary; a failure here never changes the sweep's
    exit status (everything is recorded already), it is only said."""
    from tunetrain.analysis import load_sweep
    from tunetrain.report import write_report

    try:
        sweep = load_sweep(outcome.parent_run_id, tracking_uri=tracking_uri)
        path = write_report(sweep, folder / "report.html")
    except Exception as exc:  # the report is a convenience: say why it is missing and go on
        print(f"Sweep report not written ({type(exc).__name__}: {exc}); retry: tunetrain report", file=stream)
        return
    print(f"Report: {path} (also on the sweep's MLflow run, artifacts/report/)", file=stream, flush=True)


# -- looking around: list, show, best, report, ui ------------------------------------------


def _store_arguments(parser: argparse.ArgumentParser, *, sweep: bool = True) -> None:
    if sweep:
        parser.add_argument("sweep", nargs="?", help="sweep name or parent run id (default: the newest)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--experiment", help="only sweeps of this MLflow experiment")


def _tracking_uri(args: argparse.Namespace) -> str:
    from tunetrain import tracking

    return str(args.tracking_uri or tracking.default_tracking_uri())


def _load(args: argparse.Namespace) -> Any:
    from tunetrain.analysis import load_sweep

    return load_sweep(args.sweep, experiment=args.experiment, tracking_uri=_tracking_uri(args))


def _print_frame(frame: Any, stream: TextIO) -> None:
    import pandas as pd

    with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 200):
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.6g}", na_rep="-"), file=stream)


def list_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("list", help="list recorded sweeps", description="Recorded sweeps, newest first.")
    _store_arguments(parser, sweep=False)
    parser.set_defaults(command=list_command)


def list_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain.analysis import list_sweeps

    sweeps = list_sweeps(experiment=args.experiment, tracking_uri=_tracking_uri(args))
    if sweeps.empty:
        print(f"No sweep recorded in {_tracking_uri(args)}.", file=stream)
        return EXIT_OK
    sweeps["start_time"] = sweeps["start_time"].dt.strftime("%Y-%m-%d %H:%M")
    _print_frame(
        sweeps[["sweep", "experiment", "start_time", "status", "trials", "metric", "mode", "best_value"]], stream
    )
    return EXIT_OK


SHOW_COLUMNS = ("trial", "status", "iterations", "duration_s", "seed")


def show_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "show", help="print a sweep's trial table", description="One row per trial of the sweep."
    )
    _store_arguments(parser)
    parser.add_argument(
        "--all-columns", action="store_true", help="every column (fixed config values, run ids, checkpoints, errors)"
    )
    parser.add_argument("--sort", action="store_true", help="best trial first (default: trial order)")
    parser.set_defaults(command=show_command)


def show_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    sweep = _load(args)
    trials = sweep.best(len(sweep.runs)) if args.sort and sweep.metric in sweep.metrics else sweep.trials()
    if not args.all_columns and not trials.empty:
        # The searched parameters only (fixed values are the same in every row).
        wanted = [*SHOW_COLUMNS, *[f"config/{p}" for p in sweep.params], *[c for c in trials if c.startswith("best_")]]
        wanted += ["checkpoint_step"]  # beside best_step: a checkpoint of another step says so
        wanted += [m for m in sweep.metrics if f"best_{m}" not in wanted]
        trials = trials[[c for c in wanted if c in trials.columns]]
    print(f"{sweep!r}", file=stream)
    _print_frame(trials, stream)
    return EXIT_OK


def best_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "best", help="print a sweep's best config", description="The best trial's config, by the sweep's metric."
    )
    _store_arguments(parser)
    parser.add_argument(
        "--format",
        choices=("json", "set", "checkpoint"),
        default="json",
        help="json: the config; set: a `--set KEY=VALUE ...` line for `tunetrain sweep`; checkpoint: its path",
    )
    parser.set_defaults(command=best_command)


def best_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    import json
    import shlex

    from tunetrain import _space

    sweep = _load(args)
    config = sweep.best_config()
    checkpoint = sweep.best_checkpoint()
    if checkpoint is not None:  # on stderr: stdout stays the config or path alone, for $(...)
        print(checkpoint.describe(), file=sys.stderr)
    if args.format == "json":
        print(json.dumps(config, indent=2, default=str), file=stream)
    elif args.format == "set":
        print(" ".join(f"--set {shlex.quote(f'{k}={v!r}')}" for k, v in _space.flatten(config).items()), file=stream)
    else:
        if checkpoint is None:
            raise ExperimentError(
                f"The best trial of sweep {sweep.name!r} kept no checkpoint.",
                fix="Report checkpoints with ray.train.report(..., checkpoint=...) in the train loop.",
            )
        print(checkpoint, file=stream)
    return EXIT_OK


def report_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "report",
        help="write a sweep's HTML report",
        description="Write one self-contained HTML report of the sweep and log it (with its PNGs) on the "
        "sweep's MLflow parent run.",
    )
    _store_arguments(parser)
    parser.add_argument("--output", help="the HTML file (default: SWEEP_report.html in the working directory)")
    parser.add_argument("--top-k", type=int, default=10, help="trials in the top table")
    parser.add_argument("--no-log", action="store_true", help="do not log the report to MLflow")
    parser.set_defaults(command=report_command)


def report_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain.report import write_report

    sweep = _load(args)
    path = write_report(
        sweep, args.output or f"{sweep.name}_report.html", top_k=args.top_k, log_to_mlflow=not args.no_log
    )
    print(f"Report: {path.resolve()}", file=stream)
    if not args.no_log:
        print(f"Logged on MLflow run {sweep.run_id} under artifacts/report/", file=stream)
    return EXIT_OK


def ui_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "ui",
        help="start the MLflow UI on the store",
        description="Start the MLflow UI on 127.0.0.1 for the configured tracking store; Ctrl+C stops it.",
    )
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--port", type=int, default=5000, help="port on 127.0.0.1 (default 5000)")
    parser.set_defaults(command=ui_command)


def ui_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain import tracking

    uri = _tracking_uri(args)
    if uri.startswith(("http://", "https://")):
        print(f"The store is a tracking server already: open {uri}", file=stream)
        return EXIT_OK
    import os
    import signal

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # the server runs in its own process group: take it down too

    # Ctrl+C, `kill PID` (SIGTERM) and a closed terminal (SIGHUP) all stop the server with this
    # process; the handlers are put back afterwards (the API may call this in a longer program).
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        server, url = tracking.start_ui_server(uri, port=args.port)
        try:
            print(f"MLflow UI for {uri}: {url}  (Ctrl+C or kill {os.getpid()} stops it)", file=stream, flush=True)
            server.wait()
        except KeyboardInterrupt:
            pass
        finally:
            tracking.stop_ui_server(server)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK


def replay_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="run one recorded trial again and compare",
        description="Run one recorded trial again from its MLflow record alone (config, seed, workers, "
        "experiment file), record it as a new run linked to the original, and compare the metric "
        "histories step by step. Exit 0 when they are identical, 1 when they differ.",
    )
    parser.add_argument("run_id", help="the trial's MLflow run id (`tunetrain show SWEEP --all-columns`)")
    parser.add_argument("--steps", type=int, help="steps to run (default: as many as the trial recorded)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help="where the replay's checkpoints go")
    parser.add_argument("--address", help="Ray cluster to use (default: embedded)")
    parser.set_defaults(command=replay_command)


def replay_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    import tempfile
    from datetime import datetime

    from tunetrain import replay
    from tunetrain.tracking import SweepStore, schema

    uri = _tracking_uri(args)
    store = SweepStore(uri)
    with tempfile.TemporaryDirectory(prefix="tunetrain-replay-") as folder:
        spec = replay.prepare_replay(store, args.run_id, steps=args.steps, folder=Path(folder))
        print(replay.describe(spec), file=stream, flush=True)
        name = f"replay-{spec.run.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        status, outcome = execute_sweep(
            spec.experiment,
            tracking_uri=uri,
            storage=args.storage,
            address=args.address,
            name=name,
            argv=args.argv,
            stream=stream,
            report=False,
            trial_seeds=(spec.seed,),
        )
    if outcome is None or not outcome.run_ids or status != EXIT_OK:
        print(f"\nThe replay did not run to the end (exit {status}); nothing to compare.", file=stream)
        return status if status != EXIT_OK else EXIT_ALL_FAILED
    new_run = next(iter(outcome.run_ids.values()))
    store.set_tags(new_run, {replay.REPLAY_OF_TAG: spec.run.run_id, schema.REPLAY_OF_TRIAL_TAG: spec.run.name})
    if outcome.parent_run_id:
        store.set_tags(outcome.parent_run_id, {replay.REPLAY_OF_TAG: spec.run.run_id})
    metrics = sorted(spec.run.metrics)
    comparisons = replay.compare_histories(
        store.histories([spec.run.run_id], metrics), store.histories([new_run], metrics), steps=spec.steps
    )
    store.log_dict(new_run, replay.to_record(comparisons), schema.REPLAY_COMPARISON_ARTIFACT)
    differences = replay.provenance_differences(spec.parent.tags, store.run(outcome.parent_run_id).tags)
    identical = all(c.identical for c in comparisons)
    print(f"\nReplay of {spec.run.name} (run {spec.run.run_id}) as run {new_run}:", file=stream)
    print(replay.comparison_table(comparisons), file=stream)
    if differences:
        print("Recorded provenance that differs (original -> replay):", file=stream)
        for key, old, new in differences:
            print(f"  {key}: {old} -> {new}", file=stream)
    else:
        print("Recorded provenance: the same (package versions, hardware, deterministic mode, file hash).", file=stream)
    verdict = "identical" if identical else "DIFFERENT"
    print(f"Metric histories: {verdict} over {spec.steps} step(s).", file=stream, flush=True)
    return EXIT_OK if identical else EXIT_ALL_FAILED


def resume_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "resume",
        help="continue a sweep that crashed or was interrupted, with the command it started with",
        description="Continue sweep SWEEP (a folder under --storage) with the command line it started with: "
        "ended trials stay ended, the others go on from their checkpoints, the searcher from its state, every "
        "trial in its own MLflow run. Exit 0 when the sweep already finished.",
    )
    parser.add_argument("sweep", help="the sweep's name (its folder under --storage)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help="where the sweep ran (its --storage)")
    parser.add_argument("--num-samples", type=int, help="run more trials than the sweep started with")
    parser.set_defaults(command=resume_command)


def resume_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    import os
    import shlex

    from tunetrain import resume

    sweep = resume.load(args.storage, args.sweep)
    header = sweep.journal.header
    argv = shlex.split(str(header.get("command", "")))[3:]  # after "python -m tunetrain"
    if not argv or argv[0] != "sweep":
        raise ExperimentError(
            f"Sweep {args.sweep!r} did not record the command it started with (its journal's header: {header}).",
            fix="Resume it with the same command line plus --resume --name " + args.sweep,
        )
    # The recorded command's own --name/--storage/--resume give way to these (said once each).
    replaced = {"--name": 1, "--storage": 1, "--resume": 0}
    if args.num_samples is not None:
        replaced["--num-samples"] = 1
    argv = [*_without_flags(argv, replaced), "--resume", "--name", args.sweep, "--storage", args.storage]
    if args.num_samples is not None:
        argv += ["--num-samples", str(args.num_samples)]
    resumed = build_parser().parse_args(argv)
    resumed.argv = argv
    cwd = str(header.get("cwd") or "")
    if cwd and not Path(resumed.file).is_absolute() and not Path(resumed.file).exists():
        resumed.file = os.path.join(cwd, resumed.file)  # started from another folder
    if header.get("tracking_uri") and resumed.tracking_uri is None:
        resumed.tracking_uri = header["tracking_uri"]
    status: int = sweep_command(resumed, stream=stream)
    return status


def _without_flags(argv: list[str], flags: dict[str, int]) -> list[str]:
    """``argv`` without each of ``flags`` (flag -> how many values follow it), in either the
    ``--flag value`` or the ``--flag=value`` form."""
    out: list[str] = []
    skip = 0
    for word in argv:
        if skip:
            skip -= 1
        elif word in flags:
            skip = flags[word]
        elif not any(word.startswith(flag + "=") for flag in flags):
            out.append(word)
    return out


def sync_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sync",
        help="write a sweep's records that its tracking store did not take (it was away) to the store",
        description="Send what sweep SWEEP's journal holds and its MLflow store does not (after an outage that "
        "outlasted the sweep), without doubling what is there. Exit 0 when everything is in the store.",
    )
    parser.add_argument("sweep", help="the sweep's name (its folder under --storage)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help="where the sweep ran (its --storage)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the store (default 120)")
    parser.set_defaults(command=sync_command)


def sync_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain import resume, tracking

    path = resume.journal_path(args.storage, args.sweep)
    if not path.exists():
        raise ExperimentError(
            f"No tracking journal for sweep {args.sweep!r} at {str(path)!r}.",
            fix="Pass the sweep's name and the --storage it ran with.",
        )
    header = tracking.Journal.read(path).header
    recorder = tracking.SweepRecorder(
        tracking_uri=header["tracking_uri"],
        experiment_name=header["experiment_name"],
        artifact_location=header.get("artifact_location"),
        error_stream=stream,
        journal=path,
        drain_timeout_s=args.timeout,
    )
    count = recorder.send_unsent()
    recorder.flush()
    recorder.close()
    left = recorder.unsent
    print(
        f"Sweep {args.sweep}: {count - left} of {count} unsent record(s) written to {header['tracking_uri']}"
        + (f"; {left} still unsent (is the store up?)" if left else "."),
        file=stream,
    )
    return EXIT_OK if left == 0 else EXIT_ALL_FAILED


def doctor_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check a Ray cluster, tracking store and storage before a sweep",
        description="Check what a sweep needs: the cluster's nodes and resources, the same package versions on "
        "every node, the State API, GPUs and CUDA, the tracking store (reachable, takes runs) and the storage "
        "(writable from every node, seen by the driver). Exit 0 when there is no problem, 1 otherwise.",
    )
    parser.add_argument("--address", help="Ray cluster (auto, HOST:PORT, ray://HOST:10001); default: embedded")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--storage", help="the --storage sweeps will use")
    parser.set_defaults(command=doctor_command)


def doctor_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain import doctor, tracking

    return doctor.run(
        address=args.address,
        tracking_uri=args.tracking_uri or tracking.default_tracking_uri(),
        storage=args.storage,
        storage_given=args.storage is not None,
        stream=stream,
    )


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tunetrain",
        description="Hyperparameter sweeps of PyTorch training on Ray Tune + Ray Train, recorded in MLflow.",
    )
    subparsers = parser.add_subparsers(title="commands", required=True, metavar="COMMAND")
    sweep_parser(subparsers)
    for add in (
        resume_parser,
        sync_parser,
        doctor_parser,
        list_parser,
        show_parser,
        best_parser,
        report_parser,
        ui_parser,
        replay_parser,
    ):
        add(subparsers)
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
    except KeyboardInterrupt:
        # A second Ctrl+C while the first one's clean-up runs: stop now. Every record is in
        # the sweep's journal; `tunetrain resume` or `tunetrain sync` writes what is missing.
        print("\ntunetrain: interrupted again; exiting now (tunetrain resume / sync finish the record).", file=out)
        return 130
    return status
