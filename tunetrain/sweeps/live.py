"""The live view's two interactive faces: a progress bar on a terminal's status line (tqdm) and
an in-place display in a Jupyter notebook (IPython's ``display`` with a display id, updated
as results arrive; the saved notebook keeps its last state, in HTML and in plain text).
Logs and CI get :class:`tunetrain.sweeps.console.LiveView`'s throttled lines instead."""

from __future__ import annotations

import html
import json
import sys
import time
from typing import Any, TextIO

from tunetrain.records import ENDED, TrialRecord, rank_trials


def in_kernel() -> bool:
    """This process is a Jupyter kernel (ipykernel's IPython shell)."""
    if "ipykernel" not in sys.modules or "IPython" not in sys.modules:
        return False
    shell = sys.modules["IPython"].get_ipython()
    return shell is not None and getattr(shell, "kernel", None) is not None


def in_notebook(stream: TextIO) -> bool:
    """The stream is a Jupyter kernel's stdout (ipykernel's, which a notebook cell shows)."""
    return stream is sys.stdout and in_kernel()


def _clock(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    return (
        f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"
        if seconds >= 3600
        else (f"{seconds // 60:02d}:{seconds % 60:02d}")
    )


def eta_s(ended: int, total: int, elapsed_s: float) -> float | None:
    """Seconds left at the rate trials have ended so far (None before the first ends)."""
    if ended <= 0 or ended >= total:
        return None if ended <= 0 else 0.0
    return elapsed_s / ended * (total - ended)


def _columns(stream: TextIO) -> int:
    import os

    try:
        return os.get_terminal_size(stream.fileno()).columns
    except (OSError, ValueError, AttributeError):
        return 0


class TerminalBar:
    """tqdm's bar: trials ended of the total, elapsed and ETA (tqdm's own rate), then the
    states and the best so far. (Both faces: ``show(trials, states)``, ``close()``.)"""

    def __init__(self, *, total: int, stream: TextIO) -> None:
        from tqdm import tqdm

        self._bar = tqdm(
            total=total,
            file=stream,
            unit="trial",
            # The terminal's width as it changes; a terminal that reports no size (a pseudo-
            # terminal nobody sized) gets 100 x 24: tqdm hides a bar below a screen of 0 rows.
            **({"dynamic_ncols": True} if _columns(stream) > 0 else {"ncols": 100, "nrows": 24}),
            mininterval=0.0,  # the live view throttles
            # tqdm puts ", " before a postfix it is given.
            bar_format="{n_fmt}/{total_fmt} trials ended |{bar:20}| [{elapsed}<{remaining}]{postfix}",
        )

    def show(self, trials: list[TrialRecord], states: str) -> None:
        ended = sum(t.status in ENDED for t in trials)
        self._bar.set_postfix_str(states, refresh=False)
        if ended > self._bar.n:
            self._bar.update(ended - self._bar.n)  # refreshes (tqdm's rate follows the updates)
        else:
            self._bar.refresh()

    def close(self) -> None:
        self._bar.close()  # its last state stays on the screen


class NotebookDisplay:
    """One output in the cell, updated in place: a progress bar, elapsed and ETA, the states
    and the top trials so far."""

    def __init__(self, *, metric: str, mode: str, total: int, top_k: int = 5) -> None:
        from IPython.display import display

        self.metric, self.mode, self.total, self.top_k = metric, mode, total, top_k
        self._start = time.monotonic()
        self._handle: Any = display(self._bundle([], "starting"), raw=True, display_id=True)

    def show(self, trials: list[TrialRecord], states: str) -> None:
        self._handle.update(self._bundle(trials, states), raw=True)

    def close(self) -> None:
        """Nothing to do: the display's last update stays in the cell."""

    def _bundle(self, trials: list[TrialRecord], states: str) -> dict[str, str]:
        ended = sum(t.status in ENDED for t in trials)
        elapsed = time.monotonic() - self._start
        left = eta_s(ended, self.total, elapsed)
        head = (
            f"{ended}/{self.total} trials ended · elapsed {_clock(elapsed)}"
            + (f" · ETA {_clock(left)}" if left is not None else "")
            + f" · {states}"
        )
        top = rank_trials(trials, self.mode)[: self.top_k]
        rows = [[t.name + (" (baseline)" if t.baseline else ""), t.status.replace("_", " "), str(t.iterations),
                 f"{t.best_value:.4g}" if t.best_value is not None else "-",
                 json.dumps(t.config, sort_keys=True, default=str)] for t in top]  # fmt: skip
        header = ["trial", "status", "iters", f"best {self.metric}", "config"]
        text = "\n".join([head, *("  ".join(row) for row in ([header, *rows] if rows else []))])
        cells = "".join(
            "<tr>" + "".join(f"<td style='text-align:left'>{html.escape(c)}</td>" for c in row) + "</tr>"
            for row in rows
        )
        table = (
            "<table><tr>" + "".join(f"<th style='text-align:left'>{html.escape(h)}</th>" for h in header) + "</tr>"
            + cells + "</table>"
        ) if rows else ""  # fmt: skip
        page = (
            f"<div><progress value='{ended}' max='{max(self.total, 1)}' style='width:30em'></progress> "
            f"{html.escape(head)}</div>{table}"
        )
        return {"text/plain": text, "text/html": page}
