"""The live view's two interactive faces: a progress bar on a terminal's status line (tqdm) and
an in-place display in a Jupyter notebook (IPython's ``display`` with a display id, updated
as results arrive; the saved notebook keeps its last state, in HTML and in plain text).
Logs and CI get :class:`tunetrain.console.LiveView`'s throttled lines instead."""

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
    states and the best so far. (Both faces: ``show(trials, states)``, ``close()``.) On a
    narrow terminal (under 100 columns) the bar is shorter and the best so far goes first,
    then what still fits (:func:`fit_states`): tqdm cuts a line at the terminal's edge, which
    cut the best off on an 80-column terminal."""

    def __init__(self, *, total: int, stream: TextIO, columns: int | None = None) -> None:
        from tqdm import tqdm

        self._stream, self._columns = stream, columns
        width = self._width()
        self._bar_width = 20 if width >= 100 else 10
        self._bar = tqdm(
            total=total,
            file=stream,
            unit="trial",
            # The terminal's width as it changes; a terminal that reports no size (a pseudo-
            # terminal nobody sized) gets 100 x 24: tqdm hides a bar below a screen of 0 rows.
            **(
                {"ncols": columns, "nrows": 24}
                if columns
                else {"dynamic_ncols": True}
                if _columns(stream) > 0
                else {"ncols": 100, "nrows": 24}
            ),
            mininterval=0.0,  # the live view throttles
            # tqdm puts ", " before a postfix it is given.
            bar_format="{n_fmt}/{total_fmt} trials ended |{bar:" + str(self._bar_width) + "}| "
            "[{elapsed}<{remaining}]{postfix}",
        )

    def _width(self) -> int:
        return self._columns or _columns(self._stream) or 100

    def show(self, trials: list[TrialRecord], states: str) -> None:
        ended = sum(t.status in ENDED for t in trials)
        # What the bar's own part takes: "9/9 trials ended |", the bar, "| [00:00<00:00]", ", ".
        total = self._bar.total
        taken = len(f"{total}/{total} trials ended |") + self._bar_width + len("| [00:00<00:00], ") + 1
        self._bar.set_postfix_str(fit_states(states, self._width() - taken), refresh=False)
        if ended > self._bar.n:
            self._bar.update(ended - self._bar.n)  # refreshes (tqdm's rate follows the updates)
        else:
            self._bar.refresh()

    def close(self) -> None:
        self._bar.close()  # its last state stays on the screen


def fit_states(states: str, width: int) -> str:
    """``states`` (``2 running, 1 completed | best loss=0.3 (trial_0001)``) in ``width``
    characters: whole if it fits, else the best first and the counts after it, else the best
    alone, else the best without its trial's name, cut at the end as a last resort."""
    counts, _, best = states.partition(" | ")
    if len(states) <= width or not best:
        return states if len(states) <= width else states[: max(width, 0)]
    short = best.rsplit(" (", 1)[0]  # without "(trial_0001)"
    for text in (f"{best} | {counts}", best, short):
        if len(text) <= width:
            return text
    return short[: max(width, 0)]


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
