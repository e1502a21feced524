"""tunetrain: hyperparameter-tuning-first experimentation for PyTorch.

Declare an :class:`Experiment` in one file, then ``python -m tunetrain sweep FILE``, or from
Python: ``result = tunetrain.sweep("experiments/mlp_digits.py", num_samples=4)``.
"""

from tunetrain.api import ReplayResult, SmokeResult, SweepResult, replay, resume, smoke, sweep
from tunetrain.context import TrialContext, get_context
from tunetrain.errors import ExperimentError
from tunetrain.experiment import CheckpointPolicy, Experiment, StopRule, load_experiment
from tunetrain.seeding import data_loader_seeding
from tunetrain.training import StepRunner, StepStats, load_state_dicts, state_dicts

__version__ = "0.1.0"

__all__ = [
    "CheckpointPolicy",
    "Experiment",
    "ExperimentError",
    "ReplayResult",
    "SmokeResult",
    "StepRunner",
    "StepStats",
    "StopRule",
    "SweepResult",
    "TrialContext",
    "data_loader_seeding",
    "get_context",
    "load_experiment",
    "load_state_dicts",
    "replay",
    "resume",
    "smoke",
    "state_dicts",
    "sweep",
]
