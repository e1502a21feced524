"""tunetrain: hyperparameter-tuning-first experimentation for PyTorch.

Declare an :class:`Experiment` in one file, then ``python -m tunetrain sweep FILE``, or from
Python: ``result = tunetrain.sweep("experiments/mlp_digits.py", num_samples=4)``.

The names below are imported when first used (PEP 562), so that ``tunetrain --help`` and
the commands that only read the record do not pay for Ray's and torch's imports.
"""

from __future__ import annotations

import importlib
import logging
import warnings
from typing import TYPE_CHECKING, Any

from tunetrain.errors import ExperimentError

if TYPE_CHECKING:
    from tunetrain.api import (
        ConfirmResult,
        Registered,
        ReplayResult,
        SmokeResult,
        SweepResult,
        SyncResult,
        confirm,
        register,
        replay,
        resume,
        serve,
        smoke,
        sweep,
        sync,
    )
    from tunetrain.context import TrialContext, get_context
    from tunetrain.experiment import CheckpointPolicy, Experiment, StopRule, load_experiment
    from tunetrain.seeding import data_loader_seeding
    from tunetrain.training import StepRunner, StepStats, load_state_dicts, state_dicts

__version__ = "0.1.0"

# In a notebook, importing Ray Tune logs "Missing packages: ['ipywidgets']" (three times) and
# an import of tqdm.auto warns "IProgress not found": advice for widgets tunetrain does not
# use (its live display is plain HTML, tunetrain/console/live.py), printed into the cell.
logging.getLogger("ray.widgets.util").setLevel(logging.WARNING)
warnings.filterwarnings("ignore", message="IProgress not found")

# Public name -> the module that defines it.
_WHERE = {
    "ConfirmResult": "tunetrain.api",
    "confirm": "tunetrain.api",
    "Registered": "tunetrain.api",
    "ReplayResult": "tunetrain.api",
    "SmokeResult": "tunetrain.api",
    "SweepResult": "tunetrain.api",
    "register": "tunetrain.api",
    "replay": "tunetrain.api",
    "resume": "tunetrain.api",
    "serve": "tunetrain.api",
    "smoke": "tunetrain.api",
    "sweep": "tunetrain.api",
    "SyncResult": "tunetrain.api",
    "sync": "tunetrain.api",
    "TrialContext": "tunetrain.context",
    "get_context": "tunetrain.context",
    "CheckpointPolicy": "tunetrain.experiment",
    "Experiment": "tunetrain.experiment",
    "StopRule": "tunetrain.experiment",
    "load_experiment": "tunetrain.experiment",
    "data_loader_seeding": "tunetrain.seeding",
    "StepRunner": "tunetrain.training",
    "StepStats": "tunetrain.training",
    "load_state_dicts": "tunetrain.training",
    "state_dicts": "tunetrain.training",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # once: later lookups are plain attribute reads
        return value
    raise AttributeError(f"module 'tunetrain' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = [
    "CheckpointPolicy",
    "ConfirmResult",
    "Experiment",
    "ExperimentError",
    "Registered",
    "ReplayResult",
    "SmokeResult",
    "StepRunner",
    "StepStats",
    "StopRule",
    "SweepResult",
    "SyncResult",
    "TrialContext",
    "confirm",
    "data_loader_seeding",
    "get_context",
    "load_experiment",
    "load_state_dicts",
    "register",
    "replay",
    "resume",
    "serve",
    "smoke",
    "state_dicts",
    "sweep",
    "sync",
]
