"""The seam's uses of CPython's and Optuna's private names (see :mod:`tunetrain._internals`)."""

from __future__ import annotations

import atexit
import contextlib
import os
import sys
from typing import Any, NoReturn

# -- CPython -------------------------------------------------------------------------------


def exit_after_exit_handlers(status: int) -> NoReturn:
    """Leave the process with ``status`` once the ``atexit`` handlers have run (logging's
    flush among them), skipping Python's finalisation of modules, which takes about a
    second for torch, Ray and MLflow and writes nothing of tunetrain's.
    ``atexit._run_exitfuncs`` is CPython's, not in the documented API (3.0 to 3.13 alike,
    written for 3.11); ``os._exit`` is documented. Without the first the exit handlers
    would not run; without the second the finalisation would."""
    sys.stdout.flush()
    sys.stderr.flush()
    atexit._run_exitfuncs()
    os._exit(status)


def picklable_sampler(sampler: Any) -> Any:
    """``sampler``, picklable if it is one of Optuna 5.1's genetic samplers (NSGA-II/III):
    their base class (optuna/samplers/_ga/_base.py, 5.1.0) holds a ``threading.Lock`` in the
    private ``_thread_lock``, and Ray Tune's Tuner pickles the search algorithm into tuner.pkl
    ("cannot pickle '_thread.lock' object"). The lock guards a cache against other threads;
    Tune calls its searcher from its one controller thread, so a no-op context stands in."""
    if type(sampler).__module__.startswith("optuna.") and hasattr(sampler, "_thread_lock"):
        sampler._thread_lock = contextlib.nullcontext()
    return sampler
