"""tunetrain: hyperparameter-tuning-first experimentation for PyTorch.

Declare an :class:`Experiment` in one file, then ``python -m tunetrain sweep FILE``.
"""

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
    "StepRunner",
    "StepStats",
    "StopRule",
    "TrialContext",
    "data_loader_seeding",
    "get_context",
    "load_experiment",
    "load_state_dicts",
    "state_dicts",
]
