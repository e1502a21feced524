"""``tunetrain`` / ``python -m tunetrain``: each subcommand is a parser plus a command function.

``main`` only dispatches. Commands return the exit status: 0 when any trial completed,
1 when none did, 2 for bad input (a clear message, no traceback, nothing started), 3 when
the tracking store refused records (kept in the sweep's journal), 130 when interrupted.
"""

from __future__ import annotations

import argparse
import signal
import sys
from collections.abc import Sequence
from typing import Any, NoReturn, TextIO

from tunetrain.cli._carry import confirm_parser, register_parser, serve_parser
from tunetrain.cli._inspect import best_parser, list_parser, report_parser, show_parser, ui_parser
from tunetrain.cli._options import EXIT_ALL_FAILED, EXIT_BAD_INPUT, EXIT_OK
from tunetrain.cli._run import doctor_parser, replay_parser, resume_parser, sweep_parser, sync_parser
from tunetrain.cli._up_down import down_parser, up_parser
from tunetrain.errors import ExperimentError, InterruptedBeforeStart


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tunetrain",
        description="Hyperparameter sweeps of PyTorch training on Ray Tune + Ray Train, recorded in MLflow.",
    )
    from tunetrain import __version__

    parser.add_argument("--version", action="version", version=f"tunetrain {__version__}")
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
        register_parser,
        confirm_parser,
        serve_parser,
        up_parser,
        down_parser,
    ):
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None, *, stream: TextIO | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    args.argv = argv
    out = stream or sys.stdout
    # `kill PID` (SIGTERM) and a closed terminal (SIGHUP) end a command as Ctrl+C does, at
    # any stage: a sweep stops its trials and closes its record; the handlers are put back
    # afterwards (main may be called from a longer program).
    previous = {sig: signal.signal(sig, _as_ctrl_c) for sig in _AS_CTRL_C} if _main_thread() else {}
    try:
        status: int = args.command(args, stream=out)
    except ExperimentError as exc:
        print(f"tunetrain: error: {exc}", file=sys.stderr if stream is None else out, flush=True)
        return EXIT_BAD_INPUT
    except InterruptedBeforeStart:
        print(
            "\ntunetrain: interrupted while Ray started: nothing was trained or recorded; nothing to resume.", file=out
        )
        return 130
    except KeyboardInterrupt:
        # Ctrl+C outside a sweep's trials, or a second one while the first one's clean-up
        # runs: stop now. Every record is in the sweep's journal; `tunetrain resume` or
        # `tunetrain sync` writes what is missing.
        after = " (tunetrain resume / sync finish the record)" if getattr(args, "records", False) else ""
        print(f"\ntunetrain: interrupted; exiting now{after}.", file=out)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    return status


def run() -> NoReturn:
    """The ``tunetrain`` command (and ``python -m tunetrain``): :func:`main`, then the Ray this
    process started or joined shut down here instead of by Ray's exit hook, which first sleeps
    0.5 s to let workers' output reach the console (tunetrain sends none there:
    ``log_to_driver=False``). :func:`main` leaves Ray up: a program calling it may go on.
    From the last trial's end to exit on 2 CPUs: 3.9 s before, 1.6 s after (``python
    benchmarks/fixed_cost.py``)."""
    status = main()
    if "ray" in sys.modules:
        import ray

        if ray.is_initialized():
            ray.shutdown()
    # Then the exit handlers (logging's flush among them), and no more: Python's own
    # finalisation of the modules and objects of torch, Ray and MLflow takes about a second on
    # 2 CPUs and writes nothing of ours. Every record is already in the journal, flushed as
    # written (a sweep's record survives kill -9, docs/fault_tolerance.md), and in the store.
    from tunetrain import _internals

    _internals.exit_after_exit_handlers(status)


_AS_CTRL_C = (signal.SIGTERM, signal.SIGHUP)


def _as_ctrl_c(signum: int, frame: Any) -> None:
    """SIGTERM and SIGHUP handled as SIGINT is now: by its current handler (Ray Tune's graceful stop
    while a sweep runs), else as a KeyboardInterrupt."""
    handler = signal.getsignal(signal.SIGINT)
    if callable(handler) and handler is not signal.default_int_handler:
        handler(signal.SIGINT, frame)
        return
    raise KeyboardInterrupt


def _main_thread() -> bool:
    import threading

    return threading.current_thread() is threading.main_thread()


__all__ = ["EXIT_ALL_FAILED", "EXIT_BAD_INPUT", "EXIT_OK", "build_parser", "main"]
