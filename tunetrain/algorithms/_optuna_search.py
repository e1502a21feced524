"""Searcher "optuna": Ray Tune's OptunaSearch with a sampler by name (TPE, GPSampler, CMA-ES,
NSGA-II, random), warm-started from an Optuna study holding earlier trials, and a
define-by-run function for conditional spaces (Ray converts flat spaces only)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Literal

from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch
from ray.tune.search.sample import Categorical, Domain, Float, Integer, LogUniform, Quantized

from tunetrain import _internals
from tunetrain import space as spaces
from tunetrain.algorithms._pairing import OPTUNA_SAMPLERS, check_options, searcher_owns_space
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.seeding import derive_seed


def build_optuna(
    experiment: Experiment,
    name: str,
    options: dict[str, Any],
    *,
    seed: int,
    max_concurrent: int,
    points: list[dict[str, Any]] | None,
    evaluated: list[tuple[dict[str, Any], list[float]]] | None,
) -> tuple[Searcher, int]:
    """OptunaSearch (its first trial counted as 1) for ``experiment``: see build_searcher."""
    if points:
        # Ray's OptunaSearch names nested dimensions by their path joined with "/".
        options["points_to_evaluate"] = [
            {key.replace(".", "/"): value for key, value in spaces.flatten(point).items()} for point in points
        ]
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
    metrics = [m for m, _ in experiment.objectives]
    modes: list[str] = [m for _, m in experiment.objectives]
    if experiment.multi_objective:
        return cls(metric=metrics, mode=list(modes), sampler=sampler, **options), 1
    return cls(metric=metrics[0], mode=modes[0], sampler=sampler, **options), 1


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
