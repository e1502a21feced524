"""The seam's use of Ray Tune's private Ctrl+C handling (see :mod:`tunetrain._internals`)."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any


def note_tune_stop_signal(noted: Callable[[], None]) -> None:
    """Call ``noted`` when Ctrl+C (SIGINT) reaches Tune's graceful stop, then stop as Tune does.

    Ray 2.60's ``tune.run`` (``ray.tune.tune._setup_signal_catching``) installs its own SIGINT
    handler, which only sets a private event, and ``Tuner.fit`` then returns as if the run had
    ended: a sweep whose trials were all between runs (one finished, the next not started)
    looked finished. Called from a Tune callback's ``setup`` (after Tune installed its
    handler, on the main thread), this wraps that handler. Off the main thread, or where no
    Python handler is installed, it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        return
    tune_handler = signal.getsignal(signal.SIGINT)
    if not callable(tune_handler):
        return

    def noted_then_tunes(signum: int, frame: Any) -> None:
        noted()
        tune_handler(signum, frame)  # Tune's: sets its event and puts the earlier handler back

    signal.signal(signal.SIGINT, noted_then_tunes)


@contextlib.contextmanager
def signal_handlers_kept() -> Iterator[None]:
    """Put back the process's SIGINT and SIGUSR1 handlers when the block ends.

    Ray 2.60's ``tune.run`` installs its handlers for both and puts SIGINT's back only when
    one arrives: after a sweep that ended on its own, the next Ctrl+C in the same process (a
    notebook's next cell) only set Tune's finished event and never raised KeyboardInterrupt.
    Off the main thread (where Tune installs nothing) it does nothing.
    """
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    kept = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, getattr(signal, "SIGUSR1", None)) if sig}
    try:
        yield
    finally:
        for sig, handler in kept.items():
            if handler is not None:  # None: installed outside Python; it cannot be put back
                signal.signal(sig, handler)
