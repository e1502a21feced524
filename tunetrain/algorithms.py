"""Schedulers and searchers by name, built from Ray Tune's own classes (part of the tuner layer).

The searcher proposes configs, the scheduler decides which trials go on: tunetrain only
picks the class, derives defaults from the experiment and passes the user's options on.
The subclasses below add bookkeeping only (which trials a scheduler stopped, which PBT
exploits happened), never a decision of their own.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

from ray.tune.schedulers import (
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)
from ray.tune.search import BasicVariantGenerator, SearchAlgorithm, Searcher
from ray.tune.search.optuna import OptunaSearch
from ray.tune.search.sample import Categorical, Domain, Float, Integer, LogUniform, Quantized

from tunetrain import _internals, _space
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment

OPTUNA_SAMPLERS = ("tpe", "cmaes", "nsga2", "gp", "random")

# Which searchers each scheduler works with. Ray Tune refuses a search algorithm with PBT
# and PB2 (they explore by themselves, from the population).
# PB2 also needs continuous dimensions, which a grid does not have.
_SEARCHERS_FOR = {"pbt": ("random", "grid"), "pb2": ("random",)}


class _RecordsDecisions:
    """Mixin for a Ray Tune scheduler: remembers the trials it stopped before they ended
    (and, for PBT/PB2, every exploit: see :class:`_RecordsExploits`).

    Tune hands the scheduler a trial's last result again, marked ``done``, when the train
    loop returned by itself; a STOP for that result is not an early stop.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.early_stopped: dict[str, int] = {}
        self.exploits: list[dict[str, Any]] = []
        self._deciding: tuple[str, dict[str, Any]] | None = None
        # The sweep's launch policy (tunetrain.engine.policy, e.g. the budget), asked with
        # Tune's controller before pending trials start: the scheduler's hook is the one
        # place Tune offers before a trial starts; the decision is the policy's.
        self.before_launch: Callable[[Any], None] | None = None

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        if self.before_launch is not None:
            self.before_launch(tune_controller)
        return super().choose_trial_to_run(tune_controller)  # type: ignore[misc]

    def _iteration(self, trial: Any) -> int:
        """The trial's latest iteration, counting the result being decided on."""
        if self._deciding is not None and self._deciding[0] == trial.trial_id:
            return int(self._deciding[1].get("training_iteration", 0))
        return int((trial.last_result or {}).get("training_iteration", 0))

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        watched = _StopWatch(tune_controller, self.early_stopped) if tune_controller is not None else None
        # Tune updates trial.last_result only after the scheduler's decision: the result being
        # decided on is kept here, for the step an exploit happens at.
        self._deciding = (trial.trial_id, result)
        try:
            decision: str = super().on_trial_result(watched, trial, result)  # type: ignore[misc]
        finally:
            self._deciding = None
        if decision == TrialScheduler.STOP and not result.get("done"):
            self.early_stopped[trial.trial_id] = int(result.get("training_iteration", 0))
        return decision


class _StopWatch:
    """Tune's controller as a scheduler sees it, noting the trials the scheduler stops
    directly (synchronous HyperBand stops paused trials this way, not by a decision)."""

    def __init__(self, controller: Any, early_stopped: dict[str, int]) -> None:
        self._controller = controller
        self._early_stopped = early_stopped

    def stop_trial(self, trial: Any) -> Any:
        self._early_stopped[trial.trial_id] = int((trial.last_result or {}).get("training_iteration", 0))
        return self._controller.stop_trial(trial)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._controller, name)


class _RecordsExploits(_internals.RecordsExploits, _RecordsDecisions):
    """Mixin for PBT/PB2: each exploit (recipient, donor, steps, old and new values)."""

    def before_exploit(self, trial: Any, donor: Any) -> Any:
        return self._iteration(trial), self._iteration(donor)

    def exploited(self, trial: Any, donor: Any, old_config: dict[str, Any], before: Any) -> None:
        step, donor_step = before
        keys = [key for key, _ in _space.iter_leaves(self.mutated_space())]
        flat_old, flat_new = _space.flatten(old_config), _space.flatten(dict(trial.config))
        self.exploits.append(
            {
                "trial_id": trial.trial_id,
                "donor_id": donor.trial_id,
                "step": step,
                "donor_step": donor_step,
                "old": {key: flat_old.get(key) for key in keys},
                "new": {key: flat_new.get(key) for key in keys},
                "config": dict(trial.config),
            }
        )


class RecordingFIFO(_RecordsDecisions, FIFOScheduler):
    pass


class RecordingASHA(_RecordsDecisions, AsyncHyperBandScheduler):
    pass


class RecordingHyperBand(_RecordsDecisions, HyperBandScheduler):
    pass


class RecordingMedian(_RecordsDecisions, MedianStoppingRule):
    pass


class RecordingPBT(_RecordsExploits, PopulationBasedTraining):
    pass


def _check_options(kind: str, name: str, cls: type, options: Mapping[str, Any]) -> None:
    for key in ("metric", "mode"):
        if key in options:
            raise ExperimentError(
                f"{kind}_options must not set {key!r} (got {options[key]!r}): it comes from the experiment.",
                fix=f"Set Experiment.{key} instead.",
            )
    valid = [p for p in inspect.signature(cls).parameters if p not in ("self", "metric", "mode")]
    unknown = sorted(set(options) - set(valid))
    if unknown:
        raise ExperimentError(
            f"Unknown {kind} option(s) {', '.join(map(repr, unknown))} for {kind} {name!r} "
            f"({cls.__name__}); valid options are: {', '.join(valid) or '(none)'}.",
            fix=f"Use only those keys in {kind}_options.",
        )


def check_pairing(experiment: Experiment) -> None:
    """Refuse scheduler/searcher/objective combinations Ray Tune does not run, saying which work."""
    allowed = _SEARCHERS_FOR.get(experiment.scheduler)
    if allowed and experiment.searcher not in allowed:
        if experiment.searcher == "grid":
            reason = "PB2 tunes continuous dimensions, which a grid has not"
        else:
            reason = "Ray Tune refuses a search algorithm with population-based training, which explores by itself"
        raise ExperimentError(
            f"Scheduler {experiment.scheduler!r} cannot be paired with searcher {experiment.searcher!r}: {reason}. "
            f"{experiment.scheduler!r} works with searcher {' or '.join(map(repr, allowed))}.",
            fix=f"Use --searcher {allowed[0]}, or another scheduler (fifo, asha, hyperband, median) with "
            f"{experiment.searcher!r}.",
        )
    if experiment.multi_objective and experiment.searcher == "hyperopt":
        raise ExperimentError(
            f"Searcher 'hyperopt' searches on one metric, but the experiment has {len(experiment.objectives)} "
            f"({', '.join(m for m, _ in experiment.objectives)}).",
            fix="Use searcher 'optuna' (NSGA-II by default for several metrics), 'random' or 'grid'.",
        )
    grids = [key for key, value in _space.iter_leaves(experiment.space) if _space.is_grid(value)]
    if experiment.searcher == "grid" and not grids:
        raise ExperimentError(
            "Searcher 'grid' runs the tune.grid_search dimensions of the space, but the space has none.",
            fix='Use tune.grid_search([...]) for the dimensions to cover, e.g. {"lr": tune.grid_search([1e-3, 1e-2])}.',
        )
    if grids and experiment.searcher not in ("random", "grid"):
        raise ExperimentError(
            f"tune.grid_search (at {', '.join(grids)}) needs searcher 'grid' or 'random', "
            f"but got searcher={experiment.searcher!r}.",
            fix="Use --searcher grid, or replace grid_search with tune.choice.",
        )


# -- schedulers -------------------------------------------------------------------------


# Ray Tune's own default budget of ASHA and HyperBand, used when nothing gives a better one.
DEFAULT_MAX_T = 100
# Schedulers whose decisions are laid out over a trial's budget of iterations (max_t).
_BUDGETED = {"asha": "max_t", "hyperband": "max_t", "pbt": "perturbation_interval", "pb2": "perturbation_interval"}


def budget_warning(experiment: Experiment) -> str | None:
    """Why the scheduler's budget is a guess (Ray's default max_t of 100 iterations, as no
    StopRule(max_iterations=...) or option gives it), or None when it is not."""
    option = _BUDGETED.get(experiment.scheduler)
    if option is None or option in experiment.scheduler_options or experiment.stop.max_iterations is not None:
        return None
    return (
        f"scheduler {experiment.scheduler!r} lays out its {option} for max_t={DEFAULT_MAX_T} iterations (the "
        "default: the experiment sets no StopRule(max_iterations=...) and no scheduler_options "
        f"{option!r}); if its trials report fewer times, a trial stopped at its last report cannot be told "
        "from one that finished. Set StopRule(max_iterations=N), N = the reports a trial makes "
        "(or StopRule(iterations_from=...) to work it out from the config)."
    )


def asha_rungs(experiment: Experiment) -> tuple[list[int], int] | None:
    """ASHA's rungs (the iteration counts at which it may stop a trial) and its max_t, as
    :func:`build_scheduler` sets them; None for another scheduler."""
    if experiment.scheduler != "asha":
        return None
    options = dict(experiment.scheduler_options)
    max_t = int(options.get("max_t", experiment.stop.max_iterations or DEFAULT_MAX_T))
    grace, rf = int(options.get("grace_period", 1)), float(options.get("reduction_factor", 2))
    # Ray's AsyncHyperBandScheduler: rungs at grace * rf**k below max_t.
    return [int(grace * rf**k) for k in range(64) if grace * rf**k < max_t], max_t


def build_scheduler(experiment: Experiment) -> Any:
    """The experiment's scheduler, with defaults derived from it; it decides on the first metric."""
    name = experiment.scheduler
    options = dict(experiment.scheduler_options)
    max_t = experiment.stop.max_iterations or DEFAULT_MAX_T
    metric = {"metric": experiment.primary_metric, "mode": experiment.primary_mode}
    if name == "fifo":
        _check_options("scheduler", name, FIFOScheduler, options)
        return RecordingFIFO(**options)
    if name == "asha":
        _check_options("scheduler", name, AsyncHyperBandScheduler, options)
        # ASHA's budget is the stop rule's, so that its last rung is the trial's end.
        options.setdefault("max_t", max_t)
        options.setdefault("grace_period", 1)
        options.setdefault("reduction_factor", 2)
        return _construct(
            RecordingASHA, "ASHA", options, metric, "max_t > 0, 0 < grace_period <= max_t, reduction_factor > 1"
        )
    if name == "hyperband":
        _check_options("scheduler", name, HyperBandScheduler, options)
        options.setdefault("max_t", max_t)
        options.setdefault("reduction_factor", 3)
        return _construct(RecordingHyperBand, "HyperBand", options, metric, "max_t > 0, reduction_factor > 1")
    if name == "median":
        _check_options("scheduler", name, MedianStoppingRule, options)
        # Compare trials at equal iteration counts, not equal seconds (Ray's default).
        options.setdefault("time_attr", "training_iteration")
        options.setdefault("grace_period", 1)
        options.setdefault("min_samples_required", 3)
        return _construct(RecordingMedian, "median stopping", options, metric, "grace_period >= 0")
    if name == "pbt":
        _check_options("scheduler", name, PopulationBasedTraining, options)
        options.setdefault("time_attr", "training_iteration")
        options.setdefault("perturbation_interval", max(1, max_t // 4))
        if "hyperparam_mutations" not in options:
            options["hyperparam_mutations"] = pbt_mutations(experiment.space)
            # Perturbed values stay inside the space's ranges (Ray multiplies by 0.8/1.2 unbounded).
            options.setdefault("custom_explore_fn", _ClipToSpace(experiment.space))
        if not options["hyperparam_mutations"]:
            raise ExperimentError(
                "Scheduler 'pbt' mutates the search space's dimensions, but the space has none to mutate.",
                fix='Give a space such as {"lr": tune.loguniform(1e-4, 1e-1)}, or hyperparam_mutations in '
                "scheduler_options.",
            )
        options.setdefault("log_config", False)  # tunetrain records exploits in MLflow itself
        return _construct(RecordingPBT, "PBT", options, metric, "perturbation_interval > 0")
    return _build_pb2(experiment, options, metric, max_t)


def _construct(cls: Any, label: str, options: dict[str, Any], metric: dict[str, Any], rule: str) -> Any:
    try:
        return cls(**options, **metric)
    except (AssertionError, ValueError, TypeError) as exc:  # Ray validates options with asserts
        raise ExperimentError(f"Invalid {label} options {options!r}: {exc}", fix=f"Use {rule}.") from exc


def _build_pb2(experiment: Experiment, options: dict[str, Any], metric: dict[str, Any], max_t: int) -> Any:
    try:
        from ray.tune.schedulers.pb2 import PB2
    except ImportError as exc:  # PB2 needs GPy and scikit-learn
        raise ExperimentError(
            f"Scheduler 'pb2' needs GPy, which is not installed here ({exc}).",
            fix="pip install GPy, or use scheduler 'pbt'.",
        ) from exc
    _check_options("scheduler", "pb2", PB2, options)
    options.setdefault("time_attr", "training_iteration")
    options.setdefault("perturbation_interval", max(1, max_t // 4))
    if "hyperparam_bounds" not in options:
        options["hyperparam_bounds"] = {
            key: [domain.lower, domain.upper]
            for key, domain in _space.iter_leaves(experiment.space)
            if isinstance(domain, Float | Integer)
        }
    if not options["hyperparam_bounds"]:
        raise ExperimentError(
            "Scheduler 'pb2' tunes continuous dimensions (tune.uniform, tune.loguniform, tune.randint), "
            "but the space has none.",
            fix="Add one, or give hyperparam_bounds in scheduler_options, or use scheduler 'pbt'.",
        )
    options.setdefault("log_config", False)

    class RecordingPB2(_RecordsExploits, PB2):  # defined here: PB2 needs GPy
        pass

    return _construct(RecordingPB2, "PB2", options, metric, "perturbation_interval > 0")


def pbt_mutations(space: Mapping[str, Any]) -> dict[str, Any]:
    """PBT's hyperparam_mutations from a search space: every distribution of the space, with
    choices as lists (PBT shifts to a neighbouring value) and numbers as their Tune domain
    (PBT multiplies by 0.8 or 1.2, or resamples). Nested dicts stay nested."""
    out: dict[str, Any] = {}
    for key, value in space.items():
        if _space.is_grid(value):
            out[key] = list(value["grid_search"])
        elif isinstance(value, Mapping):
            inner = pbt_mutations(value)
            if inner:
                out[key] = inner
        elif isinstance(value, Categorical):
            out[key] = list(value.categories)
        elif isinstance(value, Domain):
            out[key] = value
    return out


class _ClipToSpace:
    """PBT's ``custom_explore_fn``: clips perturbed numbers into their dimension's range."""

    def __init__(self, space: Mapping[str, Any]) -> None:
        self.bounds = {
            key: (domain.lower, domain.upper)
            for key, domain in _space.iter_leaves(space)
            if isinstance(domain, Float | Integer)
        }

    def __call__(self, config: dict[str, Any]) -> dict[str, Any]:
        for key, (lower, upper) in self.bounds.items():
            *path, last = key.split(".")
            node = config
            for part in path:
                node = node[part]
            value = node[last]
            node[last] = type(value)(min(max(value, lower), upper))
        return config


# -- searchers --------------------------------------------------------------------------


def searcher_live_limit(scheduler: Any, max_concurrent: int) -> int:
    """How many started-but-unfinished trials the searcher may have out at once.

    Tune's concurrency limit counts paused trials as live. Synchronous HyperBand pauses each
    trial at its bracket's milestone until the whole bracket gets there, and puts new trials
    in a new bracket only once the current one is full: with a limit below the bracket size
    every trial lands in the first bracket (the one that never stops a trial) and HyperBand
    silently becomes FIFO. So its searcher may have its largest bracket out at once; paused
    trials hold no resources, and the cluster still bounds how many run.
    """
    if not isinstance(scheduler, HyperBandScheduler):
        return max_concurrent
    # Ray keeps the bracket sizes in private attributes; the formula is HyperBand's own
    # (n0 = ceil(s_max_1 / (s + 1) * eta ** s) for brackets with r0 = max_t * eta ** -s >= 1).
    sizes = [scheduler._get_n0(s) for s in range(scheduler._s_max_1) if scheduler._get_r0(s) > 0]
    return max([max_concurrent, *sizes])


def build_searcher(experiment: Experiment, *, seed: int, max_concurrent: int) -> tuple[SearchAlgorithm | Searcher, int]:
    """The searcher, and the number its first trial is counted as (0 or 1, Tune differs by class).

    Every searcher is seeded from the sweep's root seed, so the same seed suggests the same
    sequence again.
    """
    options = dict(experiment.searcher_options)
    name = experiment.searcher
    if name in ("random", "grid"):
        _check_options("searcher", name, BasicVariantGenerator, options)
        options.setdefault("random_state", seed)
        return BasicVariantGenerator(max_concurrent=max_concurrent, **options), 0
    metrics = [m for m, _ in experiment.objectives]
    modes: list[str] = [m for _, m in experiment.objectives]
    if name == "hyperopt":
        from ray.tune.search.hyperopt import HyperOptSearch

        _check_options("searcher", name, HyperOptSearch, options)
        options.setdefault("random_state_seed", seed)
        if searcher_owns_space(experiment):
            options["space"] = hyperopt_space(experiment.space)
        return HyperOptSearch(metric=metrics[0], mode=modes[0], **options), 1
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no per-trial INFO lines on the console
    _check_options("searcher", name, OptunaSearch, options)
    sampler = options.pop("sampler", "nsga2" if experiment.multi_objective else "tpe")
    if isinstance(sampler, str):
        sampler = _optuna_sampler(sampler, seed=seed)
    cls: type[OptunaSearch] = OptunaSearch
    if searcher_owns_space(experiment):
        # Ray's OptunaSearch converts flat spaces only; a conditional one becomes Optuna's own
        # define-by-run function.
        options["space"] = optuna_define_by_run(experiment.space)
        cls = DefineByRunOptunaSearch
    if experiment.multi_objective:
        return cls(metric=metrics, mode=list(modes), sampler=sampler, **options), 1
    return cls(metric=metrics[0], mode=modes[0], sampler=sampler, **options), 1


def searcher_owns_space(experiment: Experiment) -> bool:
    """Whether the searcher gets the search space itself (Tune's param_space then holds only
    constants): Optuna or HyperOpt with a conditional space."""
    return experiment.searcher in ("optuna", "hyperopt") and _space.has_conditional(experiment.space)


def hyperopt_space(space: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """A HyperOpt space (nested ``hp.choice``) for a Ray Tune space with conditional choices.

    Ray's own converter labels every branch of a choice with the same prefix, so branches
    sharing a parameter name (``lr`` for both SGD and Adam) collide in HyperOpt
    (DuplicateLabel); here each branch's labels carry its index. Everything else is Ray's
    conversion."""
    from hyperopt import hp
    from ray.tune.search.hyperopt import HyperOptSearch

    out: dict[str, Any] = {}
    for key, value in space.items():
        label = f"{prefix}/{key}" if prefix else key
        if isinstance(value, Mapping):
            out[key] = hyperopt_space(value, label)
        elif isinstance(value, Categorical) and any(isinstance(c, Mapping) for c in value.categories):
            branches = [
                hyperopt_space(option, f"{label}/{i}") if isinstance(option, Mapping) else option
                for i, option in enumerate(value.categories)
            ]
            out[key] = hp.choice(label, branches)
        elif isinstance(value, Domain):
            out[key] = HyperOptSearch.convert_search_space({key: value}, prefix=prefix)[key]
        else:
            out[key] = value
    return out


class DefineByRunOptunaSearch(OptunaSearch):
    """Ray's OptunaSearch returns the define-by-run function's Optuna parameters (dotted
    names here) beside the config it returns; only the config goes to the trial."""

    def suggest(self, trial_id: str) -> Any:
        config = super().suggest(trial_id)
        if isinstance(config, dict):
            return {key: value for key, value in config.items() if "." not in key}
        return config


def _optuna_sampler(name: str, *, seed: int) -> Any:
    import optuna

    samplers: dict[str, Callable[[], Any]] = {
        "tpe": lambda: optuna.samplers.TPESampler(seed=seed),
        "cmaes": lambda: optuna.samplers.CmaEsSampler(seed=seed),
        "nsga2": lambda: optuna.samplers.NSGAIISampler(seed=seed),
        "gp": lambda: optuna.samplers.GPSampler(seed=seed),
        "random": lambda: optuna.samplers.RandomSampler(seed=seed),
    }
    if name not in samplers:
        raise ExperimentError(
            f"Unknown Optuna sampler {name!r}; valid samplers are {', '.join(OPTUNA_SAMPLERS)}.",
            fix='Use e.g. searcher_options={"sampler": "cmaes"}, or pass an optuna.samplers.BaseSampler.',
        )
    return samplers[name]()


class optuna_define_by_run:  # used like a function; a class so that Tune can pickle it
    """An Optuna define-by-run function for a Ray Tune space with conditional choices.

    A ``tune.choice`` whose options are dicts is suggested as an index (Optuna parameter
    ``<key>.choice``); the chosen dict's distributions are suggested only when it is chosen
    (as ``<key>.<index>.<name>``, so that each branch has parameters of its own). Returns the
    whole config, nested like the space.
    """

    def __init__(self, space: Mapping[str, Any]) -> None:
        self.space = space

    def __call__(self, trial: Any) -> dict[str, Any]:
        return self._suggest(trial, self.space, "")

    def _suggest(self, trial: Any, node: Mapping[str, Any], prefix: str) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key, value in node.items():
            name = f"{prefix}{key}"
            if isinstance(value, Mapping):
                out[key] = self._suggest(trial, value, f"{name}.")
            elif isinstance(value, Categorical) and any(isinstance(c, Mapping) for c in value.categories):
                index = trial.suggest_categorical(f"{name}.choice", list(range(len(value.categories))))
                chosen = value.categories[index]
                out[key] = self._suggest(trial, chosen, f"{name}.{index}.") if isinstance(chosen, Mapping) else chosen
            elif isinstance(value, Domain):
                out[key] = _suggest_leaf(trial, name, value)
            else:
                out[key] = value
        return out


def _suggest_leaf(trial: Any, name: str, domain: Domain) -> Any:
    sampler = domain.get_sampler()
    quantum = sampler.q if isinstance(sampler, Quantized) else None
    if isinstance(sampler, Quantized):
        sampler = sampler.get_sampler()
    log = isinstance(sampler, LogUniform)
    if isinstance(domain, Float):
        return trial.suggest_float(name, domain.lower, domain.upper, log=log, step=quantum)
    if isinstance(domain, Integer):
        # Tune's randint excludes its upper bound; Optuna's includes it.
        return trial.suggest_int(name, domain.lower, domain.upper - 1, log=log, step=int(quantum or 1))
    if isinstance(domain, Categorical):
        return trial.suggest_categorical(name, list(domain.categories))
    raise ExperimentError(
        f"Search-space value {name!r} ({domain!r}) has no Optuna equivalent.",
        fix="Use tune.uniform, tune.loguniform, tune.randint, tune.choice or their q-variants.",
    )
