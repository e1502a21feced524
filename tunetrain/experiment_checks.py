"""The rules an :class:`~tunetrain.experiment.Experiment`'s fields are checked by when it is
made or changed (each refusal an ExperimentError stating the rule, the value and the fix),
and the names the fields take. Kept apart from the class so that each stays short."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tunetrain.errors import ExperimentError
from tunetrain.records import name_problem
from tunetrain.space import baseline_point, bounds_problem, is_distribution, is_grid, iter_leaves
from tunetrain.space import options as options_of

SCHEDULERS = ("fifo", "asha", "hyperband", "median", "pbt", "pb2")
SEARCHERS = ("auto", "optuna", "async_bohb", "hyperopt", "random", "grid")
PLACEMENT_STRATEGIES = ("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD")
TRIAL_RUNNERS = ("auto", "in_process", "worker_group", "torch_trainer")
DIST_BACKENDS = ("auto", "nccl", "gloo")


def check_objective(exp: Any) -> None:
    """The name, the train loop, the metrics and modes, the scheduler and searcher."""
    if (problem := name_problem(exp.name)) is not None:  # it names the sweeps' folders
        raise ExperimentError(
            f"Experiment.name names its sweeps' folders: {problem}.",
            fix='Give the experiment such a name, e.g. Experiment(name="my_experiment", ...).',
        )
    if not callable(exp.train_loop):
        raise ExperimentError(
            f"Experiment.train_loop must be a function of config, but got {exp.train_loop!r}.",
            fix="Pass the function that trains on each worker, e.g. train_loop=train_loop.",
        )
    metrics = [exp.metric] if isinstance(exp.metric, str) else list(exp.metric)
    modes = [exp.mode] if isinstance(exp.mode, str) else list(exp.mode)
    if not metrics or not all(isinstance(m, str) and m for m in metrics):
        raise ExperimentError(
            f"Experiment.metric must be the name of a reported metric (or a list of them), but got {exp.metric!r}.",
            fix='Name the metric your train loop reports, e.g. metric="val_loss".',
        )
    if len(modes) != len(metrics) or any(m not in ("min", "max") for m in modes):
        raise ExperimentError(
            f"Experiment.mode must be 'min' or 'max' for each metric, but got mode={exp.mode!r} "
            f"for metric={exp.metric!r}.",
            fix="Use mode='min' for losses and mode='max' for accuracies; one mode per metric.",
        )
    if len(set(metrics)) != len(metrics):
        raise ExperimentError(
            f"Experiment.metric names a metric twice: {exp.metric!r}.", fix="Name each objective once."
        )
    _one_of("scheduler", exp.scheduler, SCHEDULERS, kind="schedulers", flag="--scheduler")
    _one_of("searcher", exp.searcher, SEARCHERS, kind="searchers", flag="--searcher")


def _one_of(field: str, value: Any, valid: Sequence[str], *, kind: str, flag: str = "", fix: str = "") -> None:
    """The one refusal of a name that is not among ``valid``: the value, the valid names, the fix."""
    if value not in valid:
        where = f" (in the experiment file or with {flag})" if flag else ""
        raise ExperimentError(
            f"Unknown {field} {value!r}; valid {kind} are {', '.join(valid)}.",
            fix=fix or f"Pick one of those names{where}.",
        )


def check_resources(exp: Any) -> None:
    """The trial counts, workers, failures, placement, runner, resources and seed."""
    _positive_int("num_samples", exp.num_samples)
    if isinstance(exp.workers_per_trial, list):  # (min, max) written as a list
        object.__setattr__(exp, "workers_per_trial", tuple(exp.workers_per_trial))
    if isinstance(exp.workers_per_trial, tuple):
        low, high = (*exp.workers_per_trial, 0, 0)[:2]
        if (
            len(exp.workers_per_trial) != 2
            or not all(isinstance(n, int) and not isinstance(n, bool) for n in (low, high))
            or not 1 <= low <= high
        ):
            raise ExperimentError(
                f"Experiment.workers_per_trial must be a number >= 1 or a range (min, max) with "
                f"1 <= min <= max, but got {exp.workers_per_trial!r}.",
                fix="Use e.g. workers_per_trial=2, or workers_per_trial=(1, 4) for elastic trials.",
            )
    else:
        _positive_int("workers_per_trial", exp.workers_per_trial)
    if exp.max_concurrent is not None:
        _positive_int("max_concurrent", exp.max_concurrent)
    if not isinstance(exp.max_failures, int) or isinstance(exp.max_failures, bool) or exp.max_failures < 0:
        raise ExperimentError(
            f"Experiment.max_failures must be an integer >= 0, but got {exp.max_failures!r}.",
            fix="Use e.g. max_failures=2 (restart a trial up to twice from its checkpoint), or 0.",
        )
    _one_of("placement_strategy", exp.placement_strategy, PLACEMENT_STRATEGIES, kind="strategies")
    _one_of("trial_runner", exp.trial_runner, TRIAL_RUNNERS, kind="trial runners", flag="--trial-runner")
    if exp.trial_runner == "worker_group" and not isinstance(exp.workers_per_trial, int):
        raise ExperimentError(
            f"trial_runner='worker_group' runs a fixed number of workers per trial, but got "
            f"workers_per_trial={exp.workers_per_trial} (elastic).",
            fix="Use trial_runner='auto' or 'torch_trainer' for elastic trials (Ray Train resizes them).",
        )
    if exp.trial_runner == "in_process" and exp.workers_per_trial != 1:  # a range too
        raise ExperimentError(
            f"trial_runner='in_process' runs one worker per trial, but got workers_per_trial={exp.workers_per_trial}.",
            fix="Use trial_runner='auto' or 'torch_trainer' for multi-worker (DDP) trials.",
        )
    for key, value in (exp.resources_per_worker or {}).items():
        if not isinstance(value, int | float) or value < 0 or math.isnan(value):
            raise ExperimentError(
                f"resources_per_worker[{key!r}] must be a number >= 0, but got {value!r}.",
                fix='Use e.g. resources_per_worker={"CPU": 1}.',
            )
    _check_gpu_share(exp)
    _one_of(
        "dist_backend",
        exp.dist_backend,
        DIST_BACKENDS,
        kind="backends",
        fix='Use "auto" (NCCL on GPUs, gloo on CPUs), or "gloo" to run GPU trials without NCCL.',
    )
    if exp.seed is not None and (not isinstance(exp.seed, int) or exp.seed < 0):
        raise ExperimentError(
            f"Experiment.seed must be an integer >= 0 or None, but got {exp.seed!r}.",
            fix="Use e.g. seed=0, or leave it out to draw one (it is recorded).",
        )


def _check_gpu_share(exp: Any) -> None:
    """A worker's GPU: a fraction below 1 (shares of one device) or a whole number of devices,
    and whole devices for the workers of a multi-worker trial."""
    gpu = (exp.resources_per_worker or {}).get("GPU", 0)
    if not isinstance(gpu, int | float) or gpu <= 0:
        return
    if gpu > 1 and gpu != int(gpu):
        raise ExperimentError(
            f'resources_per_worker["GPU"] must be a fraction below 1 (a share of one GPU) or a whole '
            f"number of GPUs, but got {gpu!r}: Ray places a worker on one device or on whole devices.",
            fix=f'Use resources_per_worker={{"GPU": {int(gpu)}}} or {{"GPU": {int(gpu) + 1}}}.',
        )
    if gpu < 1 and exp.max_workers > 1:
        # Ray packs shares onto a device that has room (Ray 2.60 on fake GPUs: two bundles of
        # 0.5 in one placement group both got GPU 0 of 2), so two ranks of one trial land on
        # one GPU: NCCL refuses ("Duplicate GPU detected"), and on gloo each rank gets half
        # the device's memory. Ray has no placement that keeps one trial's shares apart.
        raise ExperimentError(
            f"A trial of {exp.max_workers} workers (workers_per_trial / --workers-per-trial) needs a whole GPU "
            f'per worker, but got resources_per_worker["GPU"]={gpu!r}: Ray would put two of its ranks on one '
            'device, which NCCL refuses ("Duplicate GPU detected").',
            fix='Use resources_per_worker={"GPU": 1} for multi-worker trials, or workers_per_trial=1 to pack '
            "several one-worker trials on a GPU by fraction.",
        )


def check_space(exp: Any) -> None:
    """The space, the baseline, warm start, the export functions and the defaults."""
    if not isinstance(exp.space, Mapping):
        raise ExperimentError(
            f"Experiment.space must be a dict, but got {type(exp.space).__name__}.",
            fix='Use e.g. space={"lr": tune.loguniform(1e-4, 1e-1)}.',
        )
    for key, value in iter_leaves(exp.space):
        if not (is_distribution(value) or _is_constant(value)):
            raise ExperimentError(
                f"Search-space value {key!r} must be a Ray Tune distribution "
                f"(tune.uniform, tune.loguniform, tune.choice, tune.randint, ...) or a constant, "
                f"but got {value!r} of type {type(value).__name__}.",
                fix=f"Wrap it, e.g. {key!r}: tune.choice([...]), or move it to defaults.",
            )
        if (problem := bounds_problem(value)) is not None:
            if value.lower == value.upper:  # one value: a constant, not a range
                fix = (
                    f"Give a range whose lower bound is below its upper one, or fix {key!r} at {value.lower!r} "
                    "in defaults."
                )
            else:
                fix = f"Give the lower bound first: ({value.upper!r}, {value.lower!r})."
            raise ExperimentError(f"Search-space value {key!r}: {problem}.", fix=fix)
        if (options := options_of(value)) is not None and not options:
            raise ExperimentError(
                f"Search-space value {key!r} has nothing to choose from: {value!r}.",
                fix=f"Give {key!r} at least one value (tune.choice([a, b]), tune.grid_search([a, b])), or remove it.",
            )
    _check_keys(exp.space, "space")
    if isinstance(exp.defaults, Mapping):
        _check_keys(exp.defaults, "defaults")
    if not isinstance(exp.baseline, bool | Mapping):
        raise ExperimentError(
            f"Experiment.baseline must be True, False or a dict of searched values, but got {exp.baseline!r}.",
            fix='Use e.g. baseline={"lr": 1e-3} (the other dimensions at their centre), or baseline=False.',
        )
    if isinstance(exp.warm_start, str) or not all(isinstance(ref, str) and ref for ref in exp.warm_start):
        raise ExperimentError(
            f"Experiment.warm_start must be a list of sweep names or run ids, but got {exp.warm_start!r}.",
            fix='Use e.g. warm_start=["mlp_digits-20261130-101500"].',
        )
    object.__setattr__(exp, "warm_start", tuple(exp.warm_start))
    for field in ("export_model", "export_example"):
        if getattr(exp, field) is not None and not callable(getattr(exp, field)):
            raise ExperimentError(
                f"Experiment.{field} must be a function, but got {getattr(exp, field)!r}.",
                fix="See docs/carry_forward.md: export_model(checkpoint_dir, config) -> torch.nn.Module, "
                "export_example(config) -> a NumPy batch.",
            )
    if isinstance(exp.baseline, Mapping):
        baseline_point(exp.space, exp.baseline)  # raises for a key or value the space does not have
    for key, value in iter_leaves(exp.defaults):
        if is_distribution(value):
            raise ExperimentError(
                f"Default {key!r} is a Ray Tune distribution ({value!r}); defaults are fixed values.",
                fix=f"Move {key!r} into space=, or give it a fixed value.",
            )


def _check_keys(mapping: Mapping[str, Any], field: str, prefix: str = "") -> None:
    """Each key of the space or the defaults is one name: dots join nested keys everywhere
    (MLflow's params, ``--set``, the config read back), so ``{"a.b": 1}`` would come back as
    ``{"a": {"b": 1}}``; a key that is not a string, empty or padded with spaces cannot be
    typed back."""
    for key, value in mapping.items():
        path = f"{prefix}{key}"
        if not isinstance(key, str) or "." in key or not key.strip() or key != key.strip():
            nested = " (dots join nested keys: use {'a': {'b': ...}}, set as --set a.b=...)" if "." in str(key) else ""
            raise ExperimentError(
                f"Experiment.{field} key {path!r} must be a name: a non-empty string without dots and without "
                f"spaces around it{nested}.",
                fix="Rename it, e.g. 'lr' or 'optimizer_lr'.",
            )
        if isinstance(value, Mapping) and not is_grid(value):
            _check_keys(value, field, path + ".")


def check_datasets(exp: Any) -> None:
    """``datasets``: names to ``ray.data.Dataset`` objects or functions that build one;
    ``data_config``: a ``ray.train.DataConfig`` (checked by what it must do, ``configure``)."""
    if not isinstance(exp.datasets, Mapping):
        raise ExperimentError(
            f"Experiment.datasets must map names to Ray Datasets, but got {type(exp.datasets).__name__}.",
            fix='Use datasets={"train": lambda: ray.data.from_numpy(x)}.',
        )
    for name, value in exp.datasets.items():
        if not isinstance(name, str) or not name:
            raise ExperimentError(
                f"Experiment.datasets' names are what ray.train.get_dataset_shard(name) takes, non-empty strings, "
                f"but got {name!r}.",
                fix='Name each dataset, e.g. datasets={"train": ..., "val": ...}.',
            )
        is_dataset = type(value).__module__.startswith("ray.data")
        if not is_dataset and not callable(value):
            raise ExperimentError(
                f"Experiment.datasets[{name!r}] must be a ray.data.Dataset or a function that returns one, but got "
                f"{type(value).__name__}.",
                fix=f'Pass datasets={{"{name}": lambda: ray.data.from_numpy(x)}} (or from_pandas, read_parquet, ...).',
            )
    if exp.data_config is not None and not callable(getattr(exp.data_config, "configure", None)):
        raise ExperimentError(
            f"Experiment.data_config must be a ray.train.DataConfig, but got {type(exp.data_config).__name__}.",
            fix="Pass ray.train.DataConfig(...) or leave it out for Ray Train's default.",
        )


def _positive_int(field: str, value: Any) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ExperimentError(
            f"Experiment.{field} must be an integer >= 1, but got {value!r}.",
            fix=f"Set {field} to 1 or more.",
        )


def _is_constant(value: Any) -> bool:
    return value is None or isinstance(value, str | int | float | bool | tuple | list)
