"""What the commands share: exit statuses, the store arguments, printing a table."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

EXIT_OK, EXIT_ALL_FAILED, EXIT_BAD_INPUT = 0, 1, 2


def _command(args: argparse.Namespace) -> list[str]:
    """The command line as recorded on the sweep's run (``tunetrain.command``)."""
    return ["python", "-m", "tunetrain", *args.argv]


def _store_arguments(parser: argparse.ArgumentParser, *, sweep: bool = True) -> None:
    if sweep:
        parser.add_argument("sweep", nargs="?", help="sweep name or parent run id (default: the newest)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--experiment", help="only sweeps of this MLflow experiment")


def _tracking_uri(args: argparse.Namespace) -> str:
    from tunetrain import tracking

    # Read commands never create a store: a missing one is bad input, said with where the
    # sweeps of this folder go. Which store, and why, goes to stderr (stdout stays the answer).
    found = tracking.resolve_tracking_uri(args.tracking_uri)
    tracking.check_existing(found)
    print(f"tunetrain: {found.line()}", file=sys.stderr)
    return found.uri


def _load(args: argparse.Namespace) -> Any:
    from tunetrain.results.analysis import load_sweep

    return load_sweep(args.sweep, experiment=args.experiment, tracking_uri=_tracking_uri(args))


def _print_frame(frame: Any, stream: TextIO) -> None:
    import pandas as pd

    with pd.option_context("display.max_rows", None, "display.max_columns", None, "display.width", 200):
        print(frame.to_string(index=False, float_format=lambda v: f"{v:.6g}", na_rep="-"), file=stream)


TRUST_CHANGED_HELP = (
    "import the experiment file the sweep recorded even when its content (sha256) is no longer the one it ran"
)
