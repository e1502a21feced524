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

from tunetrain.errors import ExperimentError as ExperimentError

if TYPE_CHECKING:  # the public surface, written once (PEP 484's explicit re-export: X as X)
    from tunetrain.api import ConfirmResult as ConfirmResult
    from tunetrain.api import Registered as Registered
    from tunetrain.api import ReplayResult as ReplayResult
    from tunetrain.api import SmokeResult as SmokeResult
    from tunetrain.api import SweepResult as SweepResult
    from tunetrain.api import SyncResult as SyncResult
    from tunetrain.api import confirm as confirm
    from tunetrain.api import register as register
    from tunetrain.api import replay as replay
    from tunetrain.api import resume as resume
    from tunetrain.api import serve as serve
    from tunetrain.api import smoke as smoke
    from tunetrain.api import sweep as sweep
    from tunetrain.api import sync as sync
    from tunetrain.context import TrialContext as TrialContext
    from tunetrain.context import get_context as get_context
    from tunetrain.experiment import CheckpointPolicy as CheckpointPolicy
    from tunetrain.experiment import Experiment as Experiment
    from tunetrain.experiment import StopRule as StopRule
    from tunetrain.experiment import load_experiment as load_experiment
    from tunetrain.seeding import data_loader_seeding as data_loader_seeding
    from tunetrain.training import StepRunner as StepRunner
    from tunetrain.training import StepStats as StepStats
    from tunetrain.training import load_state_dicts as load_state_dicts
    from tunetrain.training import state_dicts as state_dicts

__version__ = "0.1.0"

# In a notebook, importing Ray Tune logs "Missing packages: ['ipywidgets']" (three times) and
# an import of tqdm.auto warns "IProgress not found": advice for widgets tunetrain does not
# use (its live display is plain HTML, tunetrain/console/live.py), printed into the cell.
logging.getLogger("ray.widgets.util").setLevel(logging.WARNING)
warnings.filterwarnings("ignore", message="IProgress not found")


def _public_names() -> dict[str, str]:
    """Public name -> the module that defines it, read from the ``TYPE_CHECKING`` imports
    above: the surface is written once, there, where type checkers and editors read it (as
    lazy_loader reads a stub; not a dependency for these few lines)."""
    import ast
    from pathlib import Path

    tree = ast.parse(Path(__file__).read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If) and ast.unparse(n.test) == "TYPE_CHECKING")
    return {
        alias.name: node.module
        for node in block.body
        if isinstance(node, ast.ImportFrom) and node.module
        for alias in node.names
    }


_WHERE = _public_names()


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        value = getattr(importlib.import_module(_WHERE[name]), name)
        globals()[name] = value  # once: later lookups are plain attribute reads
        return value
    raise AttributeError(f"module 'tunetrain' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted([*globals(), *_WHERE])


__all__ = sorted(["ExperimentError", *_WHERE])
