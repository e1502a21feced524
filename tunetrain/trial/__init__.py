"""The trial driver: how one Ray Tune trial runs the experiment's train loop.

Two runners, one train loop:

* :func:`run_trial` is the Train V2 pattern for tuning distributed training: a small Tune
  function builds a ``TorchTrainer`` whose reports (with their checkpoints) reach Tune
  through a Train callback and calls ``fit()`` (passing a TorchTrainer into ``Tuner`` is
  deprecated in Train V2). The
  driver holds no CPU (see :data:`DRIVER_RESOURCES`), seeds every worker from the trial's
  seed and its rank, and gives each launch a unique Train run name (reusing a name makes
  Train resume that run's old state).
* :func:`run_trial_in_process` runs a single-worker trial's train loop inside the Tune
  trial's own process, which Tune reuses from trial to trial. It installs Ray Train's
  local-mode utilities (what ``TorchTrainer`` itself uses for ``num_workers=0``) with the
  report path bridged to Tune, so ``ray.train.report``, ``get_checkpoint``, ``get_context``
  and ``ray.train.torch.prepare_*`` behave as on a one-worker TorchTrainer, without its
  controller and worker actors.
* :func:`run_trial_on_group` runs a fixed multi-worker trial on worker actors (and a torch
  process group) that the reused trial process keeps from trial to trial.
"""

from tunetrain.trial._data import build_datasets
from tunetrain.trial._group import run_trial_on_group
from tunetrain.trial._in_process import run_trial_in_process
from tunetrain.trial._torch_trainer import TrainGroupCleanup, run_trial
from tunetrain.trial._worker import (
    DIVERGED_KEY,
    DRIVER_RESOURCES,
    NODES_KEY,
    OOM_KEY,
    RESTARTS_KEY,
    TrialNamer,
    TrialSpec,
    oom_in_error,
    remove_train_copies,
    trial_dirname,
    trial_index,
    trial_name,
    trial_seed,
    worst_for_diverged,
)

__all__ = [
    "DIVERGED_KEY",
    "DRIVER_RESOURCES",
    "NODES_KEY",
    "OOM_KEY",
    "RESTARTS_KEY",
    "TrainGroupCleanup",
    "TrialNamer",
    "TrialSpec",
    "build_datasets",
    "oom_in_error",
    "remove_train_copies",
    "run_trial",
    "run_trial_in_process",
    "run_trial_on_group",
    "trial_dirname",
    "trial_index",
    "trial_name",
    "trial_seed",
    "worst_for_diverged",
]
