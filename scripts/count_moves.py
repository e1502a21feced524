"""How often a sweep request moves between tunetrain's packages (issue 41's measure, counted
at run time instead of by reading the code).

    python scripts/count_moves.py experiments/mlp_digits.py [--modules]

Runs ``tunetrain.sweep(FILE, dry_run=True)`` twice in a temporary folder (the first warms the
imports) and traces the second. A *place* is a tunetrain package above the building blocks
(api, cli, sweeps, cluster, console, serving, results, algorithms, trial, tracking), or with
``--modules`` one of their modules. A *move* is a call into a place other than the nearest
place on the call stack; a *move back* is one into a place the request had entered and left
before. The building blocks (space, records, experiment, ...) are not places."""

from __future__ import annotations

import argparse
import io
import os
import sys
import tempfile
from pathlib import Path
from types import FrameType
from typing import Any

LAYERS = ("api", "cli", "sweeps", "cluster", "console", "serving", "results", "algorithms", "trial", "tracking")


def count(file: str, *, modules: bool) -> tuple[list[tuple[str, bool, str]], int]:
    import tunetrain

    moves: list[tuple[str, bool, str]] = []  # (place, a move back, the function entered)
    stack: list[str | None] = []
    left: set[str] = set()

    def place(frame: FrameType) -> str | None:
        parts = str(frame.f_globals.get("__name__", "")).split(".")
        if len(parts) < 2 or parts[0] != "tunetrain" or parts[1] not in LAYERS:
            return None
        return ".".join(parts) if modules else ".".join(parts[:2])

    def trace(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call":
            here = next((p for p in reversed(stack) if p), None)
            entered = place(frame)
            if entered and entered != here:
                moves.append((entered, entered in left and entered not in stack, frame.f_code.co_name))
            stack.append(entered)
        elif event == "return" and stack:
            gone = stack.pop()
            if gone and gone not in stack:
                left.add(gone)

    tunetrain.sweep(file, dry_run=True, stream=io.StringIO())
    sys.setprofile(trace)
    try:
        tunetrain.sweep(file, dry_run=True, stream=io.StringIO())
    finally:
        sys.setprofile(None)
    return moves, len({p for p, _, _ in moves})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("file")
    parser.add_argument("--modules", action="store_true", help="count modules, not packages")
    args = parser.parse_args()
    file = str(Path(args.file).resolve())
    with tempfile.TemporaryDirectory() as folder:
        os.chdir(folder)
        moves, places = count(file, modules=args.modules)
    for entered, back, function in moves:
        print(("back  " if back else "      ") + f"{entered}.{function}")
    print(f"{len(moves)} moves between {places} places, {sum(back for _, back, _ in moves)} of them back")


if __name__ == "__main__":
    main()
