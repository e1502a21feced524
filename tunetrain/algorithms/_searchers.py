"""Searchers by name: Ray Tune's wrappers of Optuna and HyperOpt, random and grid."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from ray.tune.schedulers import (
    HyperBandScheduler,
)
from ray.tune.search import BasicVariantGenerator, SearchAlgorithm, Searcher
from ray.tune.search.optuna import OptunaSearch
from ray.tune.search.sample import Categorical, Domain, Float, Integer, LogUniform, Quantized

from tunetrain import _internals
from tunetrain import space as spaces
from tunetrain.algorithms._pairing import OPTUNA_SAMPLERS, check_options
from tunetrain.algorithms._tpe import FidelityTPESearch
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.seeding import derive_seed


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
    return max([max_concurrent, *_internals.hyperband_bracket_sizes(scheduler)])


def build_searcher(
    experiment: Experiment,
    *,
    seed: int,
    max_concurrent: int,
    points: list[dict[str, Any]] | None = None,
    evaluated: list[tuple[dict[str, Any], list[float]]] | None = None,
    stopped: Mapping[str, int] | None = None,
) -> tuple[SearchAlgorithm | Searcher, int]:
    """The searcher, and the number its first trial is counted as (0 or 1, Tune differs by class).

    Every searcher is seeded from the sweep's root seed, so the same seed suggests the same
    sequence again. ``points`` (configs of the searched dimensions, nested as the space is)
    are suggested first, through each searcher's own ``points_to_evaluate``. ``evaluated``
    (flat configs of the searched dimensions, and their value of each objective: earlier
    trials) become completed trials of the Optuna study before it suggests anything.
    ``stopped`` is the scheduler's record of the trials it stopped early (trial id ->
    iteration), which TPE's searchers tell Optuna as pruned.
    """
    options = dict(experiment.searcher_options)
    name = resolve_searcher(experiment)[0]
    if auto_picks_gp(experiment):
        options["sampler"] = "gp"
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)  # no per-trial INFO lines on the console
    if points and "points_to_evaluate" in options:
        raise ExperimentError(
            "searcher_options['points_to_evaluate'] and the baseline trial both give the searcher's first points.",
            fix="Put those points in the sweep without a baseline (--no-baseline, Experiment.baseline=False).",
        )
    if name in TPE_SEARCHERS and _fidelity_tpe_applies(experiment, options):
        return _build_fidelity_tpe(
            experiment,
            name,
            options,
            seed=seed,
            max_concurrent=max_concurrent,
            points=points,
            evaluated=evaluated,
            stopped=stopped,
        ), 1
    if name == "async_bohb":
        raise ExperimentError(
            "Searcher 'async_bohb' models one objective over a flat space (no choice between sets of "
            f"parameters) with TPE, but got {len(experiment.objectives)} objective(s), "
            f"{'a conditional' if spaces.has_conditional(experiment.space) else 'a flat'} space and "
            f"sampler {options.get('sampler', 'tpe')!r}.",
            fix="Use searcher 'optuna' (NSGA-II for several objectives, define-by-run TPE for a conditional space).",
        )
    for key in _TPE_ONLY:
        if key in options:
            raise ExperimentError(
                f"searcher_options[{key!r}] is an option of the TPE searchers ('optuna' with sampler 'tpe' on one "
                "objective and a flat space, 'async_bohb'), but this sweep's searcher is "
                f"{name!r} {dict(experiment.searcher_options)!r} with {len(experiment.objectives)} objective(s).",
                fix=f"Drop {key!r} from searcher_options, or use one of those searchers.",
            )
    if points:
        options["points_to_evaluate"] = [
            # Ray's OptunaSearch names nested dimensions by their path joined with "/".
            {key.replace(".", "/"): value for key, value in spaces.flatten(point).items()}
            if name == "optuna"
            else point
            for point in points
        ]
    if name in ("random", "grid"):
        check_options("searcher", name, BasicVariantGenerator, options)
        options.setdefault("random_state", seed)
        return BasicVariantGenerator(max_concurrent=max_concurrent, **options), 0
    metrics = [m for m, _ in experiment.objectives]
    modes: list[str] = [m for _, m in experiment.objectives]
    if name == "hyperopt":
        from ray.tune.search.hyperopt import HyperOptSearch

        check_options("searcher", name, HyperOptSearch, options)
        options.setdefault("random_state_seed", seed)
        if searcher_owns_space(experiment):
            options["space"] = hyperopt_space(experiment.space)
        return HyperOptSearch(metric=metrics[0], mode=modes[0], **options), 1
    check_options("searcher", name, OptunaSearch, options)
    sampler = options.pop("sampler", "nsga2" if experiment.multi_objective else "tpe")
    if evaluated:
        # Warm-started, the sampler draws from a seed of its own: TPE's first trials are random
        # draws, and with the earlier sweep's seed they would repeat its configs exactly.
        seed = derive_seed(seed, len(evaluated))
    if isinstance(sampler, str):
        sampler = _optuna_sampler(sampler, seed=seed)
    sampler = _internals.picklable_sampler(sampler)  # Optuna 5.1's NSGA-II holds a lock
    cls: type[OptunaSearch] = OptunaSearch
    if searcher_owns_space(experiment):
        # Ray's OptunaSearch converts flat spaces only; a conditional one becomes Optuna's own
        # define-by-run function.
        options["space"] = optuna_define_by_run(experiment.space)
        cls = DefineByRunOptunaSearch
    if evaluated:
        options["storage"], options["study_name"] = _study_with(experiment, evaluated), "tunetrain"
    if experiment.multi_objective:
        return cls(metric=metrics, mode=list(modes), sampler=sampler, **options), 1
    return cls(metric=metrics[0], mode=modes[0], sampler=sampler, **options), 1


# The searchers FidelityTPESearch serves (on one objective, a flat space, TPE), and its options.
TPE_SEARCHERS = ("optuna", "async_bohb")
_TPE_ONLY = ("n_startup_trials", "reproducible")
_TPE_OPTIONS = ("sampler", "points_to_evaluate", *_TPE_ONLY)
# searcher="auto" on one objective and a flat space, by scheduler: the best arm of the
# search-quality benchmark (docs/benchmarks.md, "Search quality") for that kind of scheduler.
_AUTO_FOR = {"asha": "async_bohb", "hyperband": "async_bohb", "median": "async_bohb", "fifo": "optuna"}


def resolve_searcher(experiment: Experiment) -> tuple[str, str]:
    """The searcher a sweep uses and why: ``experiment.searcher`` itself, or for "auto" the
    best measured one for its scheduler, space and objectives."""
    name = experiment.searcher
    if name != "auto":
        return name, "as configured"
    if experiment.scheduler in ("pbt", "pb2"):
        return "random", f"auto: scheduler {experiment.scheduler!r} explores by itself, from its population"
    if any(spaces.is_grid(value) for _, value in spaces.iter_leaves(experiment.space)):
        return "grid", "auto: the space has tune.grid_search dimensions"
    if experiment.multi_objective:
        return "optuna", f"auto: {len(experiment.objectives)} objectives (Optuna's NSGA-II)"
    if spaces.has_conditional(experiment.space):
        return "optuna", "auto: a conditional space (Optuna's define-by-run TPE)"
    sampler = experiment.searcher_options.get("sampler", "tpe")
    if not (isinstance(sampler, str) and sampler == "tpe"):
        return "optuna", f"auto: searcher_options name Optuna sampler {sampler!r}"
    if auto_picks_gp(experiment):
        dims = len(spaces.free_dimensions(experiment.space))
        return "optuna", (
            f"auto: {dims} numeric dimension(s) and {experiment.num_samples} trials under FIFO (Optuna's GPSampler, "
            f"Gaussian-process BO; TPE with a choice, over {GP_MAX_TRIALS} trials or an early-stopping scheduler)"
        )
    chosen = _AUTO_FOR.get(experiment.scheduler, "optuna")
    return chosen, f"auto: best measured with scheduler {experiment.scheduler!r} on one objective"


# searcher="auto" picks Optuna's GPSampler for a FIFO sweep of at most this many trials over
# numeric dimensions only: on Branin and Hartmann-6 its median regret at 60 trials was 2.3e-5
# and 2.2e-4 against TPE's 0.067 and 0.245 (docs/benchmarks.md, section 15). Its time per
# suggestion grows with the trials (0.15 s at 100, 0.21 s at 200 on this machine), so larger
# sweeps keep TPE (section 5's bound: 0.2 s at 200 trials).
GP_MAX_TRIALS = 100


def auto_picks_gp(experiment: Experiment) -> bool:
    """Whether searcher "auto" is Optuna's GPSampler: FIFO, one objective, no searcher
    options, at most GP_MAX_TRIALS trials, and every searched dimension a number (a float or
    an integer range; no choice, no grid, nothing conditional)."""
    if experiment.searcher != "auto" or experiment.scheduler != "fifo" or experiment.searcher_options:
        return False
    if experiment.multi_objective or experiment.num_samples > GP_MAX_TRIALS:
        return False
    leaves = [value for _, value in spaces.iter_leaves(experiment.space)]
    if any(spaces.is_grid(value) for value in leaves) or spaces.has_conditional(experiment.space):
        return False
    searched = [value for value in leaves if isinstance(value, Domain)]
    return bool(searched) and all(isinstance(value, Float | Integer) for value in searched)


def _fidelity_tpe_applies(experiment: Experiment, options: Mapping[str, Any]) -> bool:
    sampler = options.get("sampler", "tpe")
    return (
        not experiment.multi_objective
        and not spaces.has_conditional(experiment.space)
        and isinstance(sampler, str)
        and sampler == "tpe"
    )


def _build_fidelity_tpe(
    experiment: Experiment,
    name: str,
    options: dict[str, Any],
    *,
    seed: int,
    max_concurrent: int,
    points: list[dict[str, Any]] | None,
    evaluated: list[tuple[dict[str, Any], list[float]]] | None,
    stopped: Mapping[str, int] | None,
) -> FidelityTPESearch:
    unknown = sorted(set(options) - set(_TPE_OPTIONS))
    if unknown:
        raise ExperimentError(
            f"Unknown searcher option(s) {', '.join(map(repr, unknown))} for searcher {name!r} (TPE told of early "
            f"stops); valid options are: {', '.join(_TPE_OPTIONS)}.",
            fix="Use only those keys in searcher_options.",
        )
    n_startup, reproducible = options.get("n_startup_trials", 10), options.get("reproducible", False)
    if not isinstance(n_startup, int) or isinstance(n_startup, bool) or n_startup < 0:
        raise ExperimentError(
            f"searcher_options['n_startup_trials'] is the number of random trials before TPE's model, an integer "
            f">= 0, but got {n_startup!r}.",
            fix='Use e.g. searcher_options={"n_startup_trials": 10} (Optuna\'s default).',
        )
    if not isinstance(reproducible, bool):
        raise ExperimentError(
            f"searcher_options['reproducible'] is true or false, but got {reproducible!r}.",
            fix='Use searcher_options={"reproducible": True}.',
        )
    if evaluated:
        # Warm-started, the sampler draws from a seed of its own (see build_searcher).
        seed = derive_seed(seed, len(evaluated))
    return FidelityTPESearch(
        metric=experiment.primary_metric,
        mode=experiment.primary_mode,
        seed=seed,
        fidelity="rung" if name == "async_bohb" else "last",
        n_startup_trials=n_startup,
        reproducible=reproducible,
        max_concurrent=max_concurrent,
        points_to_evaluate=points or options.get("points_to_evaluate"),
        evaluated=[({k.replace(".", "/"): v for k, v in p.items()}, values[0]) for p, values in evaluated or ()],
        stopped=stopped,
    )


def _study_with(experiment: Experiment, evaluated: list[tuple[dict[str, Any], list[float]]]) -> Any:
    """An in-memory Optuna storage holding a study (named "tunetrain", the experiment's
    directions) with the earlier trials as completed trials: Optuna's own ``study.add_trial``.
    Ray's OptunaSearch opens it (``storage``/``study_name``, ``load_if_exists``) instead of an
    empty one. Distributions are Ray's conversion of the space, names joined with "/"."""
    import optuna

    distributions = OptunaSearch.convert_search_space(spaces.merge(experiment.defaults, experiment.space))
    storage = optuna.storages.InMemoryStorage()
    directions: list[Literal["minimize", "maximize"]] = [
        "minimize" if mode == "min" else "maximize" for _, mode in experiment.objectives
    ]
    study = optuna.create_study(storage=storage, study_name="tunetrain", directions=directions)
    for point, values in evaluated:
        params = {key.replace(".", "/"): value for key, value in point.items()}
        study.add_trial(
            optuna.trial.create_trial(
                params=params,
                distributions={key: distributions[key] for key in params},
                values=values,
            )
        )
    return storage


def searcher_owns_space(experiment: Experiment) -> bool:
    """Whether the searcher gets the search space itself (Tune's param_space then holds only
    constants): Optuna or HyperOpt with a conditional space."""
    return experiment.searcher in ("optuna", "hyperopt") and spaces.has_conditional(experiment.space)


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
