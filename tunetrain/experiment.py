"""The experiment a user declares in one Python file, and `load_experiment` that imports it.

An experiment file defines exactly one :class:`Experiment` at module level::

    experiment = Experiment(name="mlp_digits", train_loop=train_loop, space={...}, ...)

Nothing here talks to Ray Tune or MLflow: this module only describes and validates.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib.util
import re
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from ray import cloudpickle  # Ray pickles with its own vendored copy

from tunetrain.errors import ExperimentError
from tunetrain.experiment_checks import (
    check_datasets,
    check_objective,
    check_resources,
    check_space,
)
from tunetrain.space import is_grid, iter_leaves, merge

Mode = Literal["min", "max"]
PlacementStrategy = Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"]
TrialRunner = Literal["auto", "in_process", "worker_group", "torch_trainer"]
DistBackend = Literal["auto", "nccl", "gloo"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class StopRule:
    """When a trial (or the whole sweep) stops, whatever the scheduler decides.

    Args:
        max_iterations: a trial stops after this many reports (``training_iteration``).
            Also the default ``max_t`` of ASHA and HyperBand (and the base of PBT's default
            perturbation interval).
        max_trial_seconds: a trial stops once its training time passes this.
        time_budget_s: the whole sweep stops launching and running trials after this.
        iterations_from: ``max_iterations`` worked out from the experiment's fixed values
            (its ``defaults``, after ``--set``), for a loop whose number of reports is a
            setting, e.g. ``lambda c: c["train"]["max_steps"] // c["train"]["eval_every"]``;
            it replaces ``max_iterations`` whenever the experiment's defaults change.
    """

    max_iterations: int | None = None
    max_trial_seconds: float | None = None
    time_budget_s: float | None = None
    iterations_from: Callable[[dict[str, Any]], int] | None = None

    def __post_init__(self) -> None:
        for field in ("max_iterations", "max_trial_seconds", "time_budget_s"):
            value = getattr(self, field)
            if value is not None and not (isinstance(value, int | float) and value > 0):
                raise ExperimentError(
                    f"StopRule.{field} must be a positive number or None, but got {value!r}.",
                    fix=f"Set StopRule({field}=...) to a value above 0, or leave it out.",
                )


@dataclasses.dataclass(frozen=True, kw_only=True)
class CheckpointPolicy:
    """Which checkpoints Ray Train keeps for each trial.

    Args:
        num_to_keep: how many checkpoints to keep per trial (None keeps all).
        score_attribute: the metric that ranks checkpoints; defaults to the experiment's metric.
        score_order: "min" or "max"; defaults to the experiment's mode.
    """

    num_to_keep: int | None = 2
    score_attribute: str | None = None
    score_order: Mode | None = None

    def __post_init__(self) -> None:
        if self.num_to_keep is not None and (not isinstance(self.num_to_keep, int) or self.num_to_keep < 1):
            raise ExperimentError(
                f"CheckpointPolicy.num_to_keep must be an integer >= 1 or None, but got {self.num_to_keep!r}.",
                fix="Use num_to_keep=None to keep every checkpoint.",
            )
        if self.score_order is not None and self.score_order not in ("min", "max"):
            raise ExperimentError(
                f"CheckpointPolicy.score_order must be 'min' or 'max', but got {self.score_order!r}.",
                fix="Use score_order='min' or score_order='max'.",
            )


@dataclasses.dataclass(frozen=True, kw_only=True)
class Experiment:
    """One tuning experiment: what to train, over which space, judged how.

    Args:
        name: the MLflow experiment that holds every sweep of this experiment.
        train_loop: a function of ``config`` that runs on every Ray Train worker. It
            reports with ``ray.train.report(metrics, checkpoint=...)`` and may resume
            from ``ray.train.get_checkpoint()``.
        space: the search space, a (possibly nested) dict of Ray Tune distributions
            (``tune.loguniform``, ``tune.choice``, ...) or constants.
        defaults: fixed config values the searcher does not touch (nested dicts allowed).
        metric: the reported metric that decides which trial is best; or a list of metrics
            for a multi-objective search (Optuna searches on all of them, the scheduler and
            the "best trial" use the first, the sweep records the Pareto-optimal trials).
        mode: "min" or "max" for ``metric`` (a list of them for a list of metrics).
        scheduler: "fifo", "asha", "hyperband", "median", "pbt" or "pb2";
            ``scheduler_options`` are passed to Ray Tune's class (see docs/schedulers.md).
        searcher: "auto" (the best measured for the scheduler: docs/schedulers.md), "optuna"
            (TPE told of early stops; other samplers with ``searcher_options={"sampler": ...}``),
            "async_bohb" (TPE on one budget's results), "hyperopt", "random" or "grid".
        num_samples: how many trials the sweep runs.
        workers_per_trial: Ray Train workers (DDP processes) in each trial; or a range
            ``(min, max)`` for elastic trials, which start with what is free (at least
            ``min``) and grow towards ``max`` when nodes join (Ray Train's elastic scaling,
            see docs/cluster.md).
        use_gpu: give each worker a GPU (or the share ``resources_per_worker["GPU"]`` says;
            see docs/training.md for how GPUs are placed, shared and refused).
        dist_backend: torch.distributed's backend for multi-worker trials: "auto" is Ray
            Train's rule (NCCL with ``use_gpu``, gloo otherwise); "gloo" on GPU trials runs
            them without NCCL (Ray's fake GPUs on a CPU machine, or to rule NCCL out).
        resources_per_worker: Ray resources of one worker, e.g. ``{"CPU": 1}``.
        placement_strategy: how a trial's workers are placed on nodes.
        stop: the stop rule (iterations and/or time).
        seed: the sweep's root seed; every trial's seed derives from it.
        checkpoint: how many checkpoints to keep, ranked by which score.
        max_concurrent: trials run at once; None means as many as the cluster fits.
        trial_runner: how a trial runs its train loop. "torch_trainer": a Ray Train
            ``TorchTrainer`` per trial (controller and worker actors, DDP). "in_process": the
            train loop runs inside the Tune trial's own (reused) process behind Ray Train's
            local-mode API, so ``ray.train.report``/``get_checkpoint``/``prepare_model`` work
            unchanged, without a TorchTrainer's start-up; one worker only. "worker_group": a
            fixed number of workers as Ray actors that the trial's (reused) process keeps from
            trial to trial, with the torch process group made once (docs/design.md).
            "auto" (default): "in_process" for one worker, "worker_group" for a fixed number,
            "torch_trainer" for an elastic range.
        deterministic: run every worker with torch's deterministic algorithms
            (``torch.use_deterministic_algorithms(True)``, cuDNN benchmark off,
            ``CUBLAS_WORKSPACE_CONFIG``); recorded on the sweep. See docs/reproducibility.md.
        smoke: the values ``sweep --smoke`` sets (dotted keys, as ``--set``): the smallest
            sizes of size-like parameters, e.g. ``{"train.max_steps": 20, "width": 16}``.
        preflight: called on the driver with the resolved fixed config before anything
            starts; it raises :class:`ExperimentError` when the experiment cannot run here.
        max_failures: how often a trial restarts from its latest checkpoint after a worker
            dies or raises, before it is marked failed (0: never). Multi-worker trials
            restart through Ray Train's failure handling, in-process trials through Ray
            Tune's; each restart is recorded on the trial's run. See docs/fault_tolerance.md.
        baseline: the reference trial every sweep runs first and judges its best against
            (tagged ``tunetrain.baseline``, not counted in ``num_samples``, never stopped
            early by the scheduler): True (default) runs the experiment's defaults with the
            centre of each searched dimension (the midpoint of a range, geometric on a log
            scale; the middle choice); a dict (dotted or nested keys) names the values of
            some dimensions, the centre for the others; False runs none. See
            docs/carry_forward.md.
        warm_start: earlier sweeps (names or parent run ids, ``URI#NAME`` in another store) or
            trials (run ids) whose completed trials the searcher gets as evaluated points
            before it suggests anything (Optuna only). See docs/carry_forward.md.
        export_model: ``f(checkpoint_dir, config) -> torch.nn.Module`` (in eval mode): how a
            trial's checkpoint becomes the model that ``register`` (and a sweep's end) logs
            to MLflow as an ``mlflow.pytorch`` model; without it the checkpoint folder is
            registered as it is. ``export_example``: ``f(config)`` -> a small input batch (a
            NumPy array) logged as the model's input example (its signature).
        datasets: Ray Data datasets for the train loop, by name: ``{"train": ds}`` with a
            ``ray.data.Dataset`` or, better, a function that builds one (an experiment file is
            imported before Ray starts). Built once per sweep and materialized in Ray's object
            store, then split for each trial's workers as a TorchTrainer splits them, so
            ``ray.train.get_dataset_shard("train")`` works on every runner. See
            docs/experiments.md. ``data_config``: the ``ray.train.DataConfig`` that splits
            them (which to split, execution options; default: Ray Train's).
    """

    name: str
    train_loop: Callable[[dict[str, Any]], Any]
    space: Mapping[str, Any]
    metric: str | Sequence[str]
    mode: Mode | Sequence[Mode]
    defaults: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    scheduler: str = "asha"
    scheduler_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    searcher: str = "auto"
    searcher_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    num_samples: int = 8
    workers_per_trial: int | tuple[int, int] = 1
    use_gpu: bool = False
    dist_backend: DistBackend = "auto"
    resources_per_worker: Mapping[str, float] | None = None
    placement_strategy: PlacementStrategy = "PACK"
    stop: StopRule = dataclasses.field(default_factory=StopRule)
    seed: int | None = None
    checkpoint: CheckpointPolicy = dataclasses.field(default_factory=CheckpointPolicy)
    max_concurrent: int | None = None
    trial_runner: TrialRunner = "auto"
    deterministic: bool = False
    smoke: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    preflight: Callable[[dict[str, Any]], None] | None = None
    max_failures: int = 0
    baseline: Mapping[str, Any] | bool = True
    warm_start: Sequence[str] = ()
    export_model: Callable[[str, dict[str, Any]], Any] | None = None
    export_example: Callable[[dict[str, Any]], Any] | None = None
    datasets: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    data_config: Any = None
    # Set by load_experiment: where the experiment came from.
    source_path: str | None = None

    def __post_init__(self) -> None:
        if self.stop.iterations_from is not None:
            object.__setattr__(self, "stop", self._stop_from_defaults())
        self.validate()

    def _stop_from_defaults(self) -> StopRule:
        """The stop rule with ``max_iterations`` from ``stop.iterations_from(defaults)``."""
        assert self.stop.iterations_from is not None
        try:
            iterations = self.stop.iterations_from(merge({}, self.defaults))  # a copy: it cannot change them
        except Exception as exc:
            raise ExperimentError(
                f"StopRule.iterations_from failed on the experiment's fixed values: {type(exc).__name__}: {exc}.",
                fix="It reads Experiment.defaults only (a searched value differs by trial); "
                "set StopRule(max_iterations=...) instead if the count is searched.",
            ) from exc
        if not isinstance(iterations, int) or isinstance(iterations, bool) or iterations < 1:
            raise ExperimentError(
                f"StopRule.iterations_from must give a whole number of reports >= 1, but got {iterations!r}.",
                fix="Check the settings it divides, e.g. max_steps must be at least eval_every.",
            )
        return dataclasses.replace(self.stop, max_iterations=iterations)

    def replace(self, **changes: Any) -> Experiment:
        """A copy with ``changes`` applied and validated again."""
        return dataclasses.replace(self, **changes)

    def one_trial(self, *, stop: StopRule, **changes: Any) -> Experiment:
        """This experiment as a single trial run alone, stopped by ``stop``: FIFO, the random
        searcher (over ``changes``' space, where the caller pins what it runs), no baseline.
        What ``--smoke`` and ``tunetrain replay`` run."""
        return self.replace(
            num_samples=1,
            baseline=False,
            scheduler="fifo",
            scheduler_options={},
            searcher="random",
            searcher_options={},
            max_concurrent=1,
            stop=stop,
            **changes,
        )

    @property
    def worker_resources(self) -> dict[str, float]:
        """Ray resources of one worker, with the GPU added when ``use_gpu`` is set."""
        resources = dict(self.resources_per_worker or {"CPU": 1.0})
        if self.use_gpu:
            resources.setdefault("GPU", 1.0)
        return {key: float(value) for key, value in resources.items()}

    @property
    def backend(self) -> str:
        """torch.distributed's backend with "auto" resolved (Ray Train's rule)."""
        if self.dist_backend != "auto":
            return self.dist_backend
        return "nccl" if self.worker_resources.get("GPU", 0.0) > 0 else "gloo"

    @property
    def objectives(self) -> list[tuple[str, Mode]]:
        """(metric, mode) of each objective; the first decides the best trial and the scheduler."""
        metrics = [self.metric] if isinstance(self.metric, str) else list(self.metric)
        modes = [self.mode] if isinstance(self.mode, str) else list(self.mode)
        return list(zip(metrics, modes, strict=True))

    @property
    def primary_metric(self) -> str:
        return self.objectives[0][0]

    @property
    def primary_mode(self) -> Mode:
        return self.objectives[0][1]

    @property
    def multi_objective(self) -> bool:
        return len(self.objectives) > 1

    @property
    def min_workers(self) -> int:
        """The workers a trial needs to start (all of them unless it is elastic)."""
        return self.workers_per_trial[0] if isinstance(self.workers_per_trial, tuple) else self.workers_per_trial

    @property
    def max_workers(self) -> int:
        """The most workers a trial uses."""
        return self.workers_per_trial[1] if isinstance(self.workers_per_trial, tuple) else self.workers_per_trial

    @property
    def elastic(self) -> bool:
        return isinstance(self.workers_per_trial, tuple)

    @property
    def total_trials(self) -> int:
        """How many trials the sweep runs: ``num_samples`` times the grid's points, since Ray
        Tune runs the whole ``tune.grid_search`` grid once per sample."""
        points = 1
        for _, value in iter_leaves(self.space):
            if is_grid(value):
                points *= len(value["grid_search"])
        return self.num_samples * points

    @property
    def runner(self) -> Literal["in_process", "worker_group", "torch_trainer"]:
        """How trials run their train loop (``trial_runner`` with "auto" resolved)."""
        if self.trial_runner != "auto":
            return self.trial_runner
        if self.workers_per_trial == 1:
            return "in_process"
        return "worker_group" if isinstance(self.workers_per_trial, int) else "torch_trainer"

    @property
    def in_process(self) -> bool:
        """Whether trials run their train loop in the Tune trial's process (see ``trial_runner``)."""
        return self.runner == "in_process"

    @property
    def reuses_trial_process(self) -> bool:
        """Whether Tune reuses a trial's process for the next trial (in process, worker group):
        Tune, not Ray Train, then restarts a failed trial from its checkpoint."""
        return self.runner in ("in_process", "worker_group")

    def validate(self) -> None:
        """Each field checked (:mod:`tunetrain.experiment_checks`); refused with the rule, the value and the fix."""
        check_objective(self)
        check_resources(self)
        check_space(self)
        check_datasets(self)


def file_sha256(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def load_experiment(path: str | Path) -> Experiment:
    """Import an experiment file by path and return the one :class:`Experiment` it defines.

    The module is registered so that cloudpickle ships its functions and classes by value:
    Ray's copy (to Ray workers) and the standalone one MLflow saves models with (a model
    class defined in the file, see ``export_model``); no other process need import the file.
    """
    file = Path(path)
    if not file.is_file():
        raise ExperimentError(
            f"Experiment file {str(path)!r} does not exist.",
            fix="Pass the path of a Python file that defines an Experiment, e.g. experiments/mlp_digits.py.",
        )
    if file.suffix != ".py":
        raise ExperimentError(
            f"Experiment file {str(path)!r} is not a Python file (.py).",
            fix="Pass the .py file that defines the Experiment.",
        )
    module_name = "tunetrain_experiment_" + re.sub(r"\W", "_", file.stem)
    spec = importlib.util.spec_from_file_location(module_name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except ExperimentError:
        raise
    except Exception as exc:
        del sys.modules[module_name]
        raise ExperimentError(
            f"Importing experiment file {str(path)!r} raised {type(exc).__name__}: {exc}",
            fix="Fix the error in the file; `python FILE` shows the full traceback.",
        ) from exc
    cloudpickle.register_pickle_by_value(module)
    import cloudpickle as standalone_cloudpickle  # MLflow's (mlflow.pytorch.save_model)

    standalone_cloudpickle.register_pickle_by_value(module)
    found = [(name, value) for name, value in vars(module).items() if isinstance(value, Experiment)]
    if not found:
        raise ExperimentError(
            f"Experiment file {str(path)!r} defines no Experiment.",
            fix="Define one at module level: experiment = tunetrain.Experiment(...).",
        )
    if len(found) > 1:
        names = ", ".join(name for name, _ in found)
        raise ExperimentError(
            f"Experiment file {str(path)!r} defines {len(found)} Experiments ({names}); it must define exactly one.",
            fix="Keep one Experiment per file; put the others in files of their own.",
        )
    return found[0][1].replace(source_path=str(file.resolve()))
