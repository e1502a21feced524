"""Searchers by name: which one a sweep uses (``auto``'s choice), and the registry that builds
it from its family's module (_optuna_search, _hyperopt_search, _basic_search; _tpe for the
TPE that is told of early stops)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from ray.tune.schedulers import HyperBandScheduler
from ray.tune.search import SearchAlgorithm, Searcher
from ray.tune.search.sample import Domain, Float, Integer

from tunetrain import _internals
from tunetrain import space as spaces
from tunetrain.algorithms._basic_search import build_basic
from tunetrain.algorithms._hyperopt_search import build_hyperopt
from tunetrain.algorithms._optuna_search import build_optuna
from tunetrain.algorithms._tpe import TPE_ONLY_OPTIONS, build_fidelity_tpe
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment


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
        return build_fidelity_tpe(
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
    for key in TPE_ONLY_OPTIONS:
        if key in options:
            raise ExperimentError(
                f"searcher_options[{key!r}] is an option of the TPE searchers ('optuna' with sampler 'tpe' on one "
                "objective and a flat space, 'async_bohb'), but this sweep's searcher is "
                f"{name!r} {dict(experiment.searcher_options)!r} with {len(experiment.objectives)} objective(s).",
                fix=f"Drop {key!r} from searcher_options, or use one of those searchers.",
            )
    build = _BUILDERS[name]
    return build(
        experiment, name, options, seed=seed, max_concurrent=max_concurrent, points=points, evaluated=evaluated
    )


# The searchers FidelityTPESearch serves (on one objective, a flat space, TPE), and its options.
TPE_SEARCHERS = ("optuna", "async_bohb")
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


# One module per searcher family (as optuna keeps one per sampler); each builder takes the
# experiment, the searcher's name, its options (the baseline's points not yet among them)
# and returns the searcher with the number its first trial is counted as.
_BUILDERS: dict[str, Callable[..., tuple[SearchAlgorithm | Searcher, int]]] = {
    "random": build_basic,
    "grid": build_basic,
    "hyperopt": build_hyperopt,
    "optuna": build_optuna,
}
