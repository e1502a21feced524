"""The commands that look at recorded sweeps: list, show, best, report, ui."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from tunetrain.cli._options import EXIT_OK, _load, _print_frame, _store_arguments, _tracking_uri
from tunetrain.errors import ExperimentError


def list_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser("list", help="list recorded sweeps", description="Recorded sweeps, newest first.")
    _store_arguments(parser, sweep=False)
    parser.add_argument("--all", action="store_true", help="also the --smoke runs' sweeps")
    parser.set_defaults(command=list_command)


def list_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain.results.analysis import list_sweeps

    uri = _tracking_uri(args)
    sweeps = list_sweeps(experiment=args.experiment, tracking_uri=uri, smoke=args.all)
    if sweeps.empty:
        print(f"No sweep recorded in {uri}.", file=stream)
        return EXIT_OK
    sweeps["start_time"] = sweeps["start_time"].dt.strftime("%Y-%m-%d %H:%M")
    _print_frame(
        sweeps[["sweep", "experiment", "start_time", "status", "trials", "metric", "mode", "best_value"]], stream
    )
    return EXIT_OK


SHOW_COLUMNS = ("trial", "baseline", "status", "iterations", "duration_s", "seed")


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
    if (versus := sweep.versus_baseline()) is not None:
        print(versus, file=stream)
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

    from tunetrain.overrides import set_flags

    sweep = _load(args)
    config = sweep.best_config()
    checkpoint = sweep.best_checkpoint()
    if checkpoint is not None:  # on stderr: stdout stays the config or path alone, for $(...)
        print(checkpoint.describe(), file=sys.stderr)
    if args.format == "json":
        print(json.dumps(config, indent=2, default=str), file=stream)
    elif args.format == "set":
        # One word per value, no shell quotes: `tunetrain sweep FILE $(tunetrain best --format set)`.
        print(set_flags(config), file=stream)
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
    from tunetrain.results.report import write_report

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
        description="Start the MLflow UI on 127.0.0.1 for the configured tracking store and print the link to a "
        "sweep's trials (the newest, or SWEEP), sorted by its objective, best first, with the objective and the "
        "tuned parameters as columns, and the link to its report; Ctrl+C stops it. An MLflow UI already serving "
        "the store on the port is used as it is.",
    )
    parser.add_argument("sweep", nargs="?", help="sweep name or parent run id (default: the newest)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument(
        "--port", type=int, help="port on 127.0.0.1 (default 5000; taken by something else: the next free one)"
    )
    parser.set_defaults(command=ui_command)


def _sweep_links(sweep: str | None, uri: str) -> tuple[str, str, str]:
    """The UI's path to the sweep's trials, what it shows, and the path to its report ("":
    none); the home page ("") for a store with no sweep yet (a named sweep that is not there
    is bad input)."""
    from tunetrain import tracking
    from tunetrain.errors import ExperimentError
    from tunetrain.results.analysis import load_sweep
    from tunetrain.tracking.schema import REPORT_TAG

    try:
        found = load_sweep(sweep, tracking_uri=uri)
    except ExperimentError:
        if sweep is not None:
            raise
        return "", "", ""
    experiment_id = found.parent.experiment_id
    page = tracking.sweep_view(
        uri, experiment_id=experiment_id, parent_run_id=found.run_id, metric=found.metric, mode=found.mode,
        params=found.params,
    )  # fmt: skip
    best = "lowest" if found.mode == "min" else "highest"
    report = found.parent.tags.get(REPORT_TAG)
    return (
        page,
        f" (sweep {found.name}'s trials, {best} {found.metric} first)",
        tracking.report_page(experiment_id, found.run_id, report) if report else "",
    )


def _print_links(url: str, page: str, said: str, report: str, stream: TextIO, *, lead: str) -> None:
    print(f"{lead}: {url}{page}{said}", file=stream, flush=True)
    if report:
        print(f"  Report: {url}{report}", file=stream, flush=True)


def ui_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain import tracking
    from tunetrain.errors import ExperimentError

    uri = _tracking_uri(args)
    page, said, report = _sweep_links(args.sweep, uri)
    if uri.startswith(("http://", "https://")):
        _print_links(uri.rstrip("/"), page, said, report, stream, lead="The store is a tracking server already: open")
        return EXIT_OK
    port = 5000 if args.port is None else args.port
    holder = tracking.port_holder(uri, port=port)
    if holder == "same_store":
        _print_links(
            f"http://127.0.0.1:{port}", page, said, report, stream,
            lead=f"An MLflow UI already serves {uri} on port {port} (none started)",
        )  # fmt: skip
        return EXIT_OK
    if holder == "other":
        if args.port is not None:
            raise ExperimentError(
                f"--port {port} is taken by another server, not an MLflow UI on {uri}: a UI started there could not "
                "listen, and its link would open that other server.",
                fix="Pass another --port, or leave --port out (the next free port is taken).",
            )
        taken, port = port, tracking.free_port(near=port)
        print(f"Port {taken} is taken by another server (not an MLflow UI on this store): using port {port}.",
              file=stream)  # fmt: skip
    return _serve_ui(uri, port, page, said, report, stream)


def _serve_ui(uri: str, port: int, page: str, said: str, report: str, stream: TextIO) -> int:
    """Start the UI on ``port``, print its links, and wait until Ctrl+C or a signal."""
    import os
    import signal

    from tunetrain import tracking

    def stop(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt  # the server runs in its own process group: take it down too

    # Ctrl+C, `kill PID` (SIGTERM) and a closed terminal (SIGHUP) all stop the server with this
    # process; the handlers are put back afterwards (the API may call this in a longer program).
    previous = {sig: signal.signal(sig, stop) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        server, url = tracking.start_ui_server(uri, port=port)
        try:
            _print_links(
                url, page, said, report, stream, lead=f"MLflow UI for {uri} (Ctrl+C or kill {os.getpid()} stops it)"
            )
            server.wait()
        except KeyboardInterrupt:
            pass
        finally:
            tracking.stop_ui_server(server)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return EXIT_OK
