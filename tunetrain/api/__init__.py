"""The Python API: :func:`sweep`, :func:`resume`, :func:`smoke`, :func:`replay`,
:func:`confirm`, :func:`register`, :func:`serve` and :func:`sync`, what the
CLI's commands call (``tunetrain sweep FILE`` is ``tunetrain.sweep(FILE)``).

Bad input raises :class:`tunetrain.ExperimentError` (rule, value, fix) before anything
starts. A sweep that ran returns a :class:`SweepResult`, whatever its trials did: a failed
trial never raises, and Ctrl+C (a notebook's interrupt too) ends the sweep cleanly, with
its summary printed, nothing left RUNNING in MLflow, and ``result.interrupted`` set.
"""

from tunetrain.api._confirm import ConfirmResult, confirm
from tunetrain.api._replay import ReplayResult, replay
from tunetrain.api._serve import serve
from tunetrain.api._smoke import SmokeResult, smoke, smoke_request
from tunetrain.api._sweep import resume, run_request, sweep
from tunetrain.api._sync import SyncResult, sync
from tunetrain.sweeps.handoff import Registered, register
from tunetrain.sweeps.request import SweepRequest, resolve_experiment
from tunetrain.sweeps.result import SweepResult

__all__ = [
    "ConfirmResult",
    "Registered",
    "ReplayResult",
    "SmokeResult",
    "SweepRequest",
    "SweepResult",
    "SyncResult",
    "confirm",
    "register",
    "replay",
    "resolve_experiment",
    "resume",
    "run_request",
    "serve",
    "smoke",
    "smoke_request",
    "sweep",
    "sync",
]
