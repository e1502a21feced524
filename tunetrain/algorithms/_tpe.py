"""TPE for sweeps with early stopping and trials side by side (searchers "optuna" and
"async_bohb" on a flat, single-objective space).

Ray Tune's ``OptunaSearch`` (Ray 2.60) tells Optuna that a trial ASHA stopped at its first
rung is COMPLETE with that rung's value, draws more random start-up trials than
``n_startup_trials`` when trials run at once (Ray issue #52535: TPE counts only finished
trials, so every suggestion made while the first ones run is random too), and may suggest a
configuration twice. This searcher is a Ray Tune ``Searcher`` over an Optuna study that:

- tells Optuna a trial the scheduler stopped as PRUNED, with every value it reported as
  intermediate values (TPE then ranks it below the trials that went further);
- gives TPE the trials still running as RUNNING (its constant liar), so that suggestions
  made at once spread out;
- draws exactly ``n_startup_trials`` at random (the baseline and warm-start trials count),
  at any concurrency: a suggestion after them waits until a trial has a result (against
  Optuna's rule, random until that many trials have a result, it is level or ahead at 4 and
  8 trials at once on 40 paired seeds: benchmarks/startup_rule_ab.py);
- never suggests a configuration the sweep already has;
- optionally (``reproducible=True``) suggests trial *i* from the results of trials
  ``0 .. i-k`` only (k trials at once), the others counted as running, with a seed of its
  own: the same seed and concurrency give the same configurations, whatever the timing.

``fidelity="rung"`` ("async_bohb") fits TPE on the trials' values at one budget, BOHB's
rule (Falkner, Klein and Hutter, "BOHB: Robust and Efficient Hyperparameter Optimization at
Scale", ICML 2018): the largest budget (training iteration) at which enough trials have a
value, here at least 2 (d + 1) for d searched dimensions, the size BOHB needs for its two
densities. It is asynchronous, as Syne Tune's ASHA + KDE searcher is (Klein et al., "Model-
based Asynchronous Hyperparameter and Neural Architecture Search", 2020): each suggestion
uses every result so far. Trials stopped below that budget are PRUNED at their last
report (worse than any that reached it), running ones are liars. Where that budget's values
rank the trials unlike the largest later budget that enough of them reached (the rung
measure of tunetrain.rungs, Hyper-Tune's idea), the model fits on that later budget instead
(``_trusted``).

Written here rather than by subclassing Ray's OptunaSearch because every decision above is
in the suggestion and completion paths, which would all have to be replaced, through that
class's private attributes; this uses Ray's public Searcher interface and Optuna's public
study API only (``create_trial``, ``add_trials``, ``enqueue_trial``, ``ask``/``tell``).
"""

from __future__ import annotations

import logging
import math
import pickle
from collections.abc import Mapping, Sequence
from typing import Any, Literal

import optuna
from optuna.distributions import BaseDistribution, CategoricalDistribution, FloatDistribution, IntDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial
from ray.tune.search import Searcher
from ray.tune.search.optuna import OptunaSearch

from tunetrain import rungs
from tunetrain import space as spaces
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.seeding import derive_seed

logger = logging.getLogger(__name__)

Fidelity = Literal["last", "rung"]
_DUPLICATE_TRIES = 50  # draws of the model before falling back to random draws
_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)
DRAWN_BY = "tunetrain.drawn_by"  # the user attribute of each study trial: "random" or "model" (baseline: none)


class FidelityTPESearch(Searcher):
    """Optuna's TPE, told what the scheduler did (see the module's docstring)."""

    def __init__(
        self,
        *,
        metric: str,
        mode: str,
        seed: int,
        fidelity: Fidelity = "last",
        n_startup_trials: int = 10,
        reproducible: bool = False,
        max_concurrent: int = 1,
        points_to_evaluate: Sequence[Mapping[str, Any]] | None = None,
        evaluated: Sequence[tuple[Mapping[str, Any], float]] = (),
        stopped: Mapping[str, int] | None = None,
    ) -> None:
        super().__init__(metric=metric, mode=mode)
        if n_startup_trials < 0:
            raise ValueError(f"n_startup_trials must be >= 0, but got {n_startup_trials=}.")
        self._seed = seed
        self._fidelity: Fidelity = fidelity
        self._n_startup = n_startup_trials
        self._reproducible = reproducible
        self._max_concurrent = max(1, max_concurrent)
        self._points = [dict(p) for p in points_to_evaluate or ()]
        self._evaluated = [(dict(p), v) for p, v in evaluated]
        # The scheduler's record of the trials it stopped (trial id -> iteration), shared, not
        # copied: RecordingASHA and the others fill it before Tune reports the completion.
        self.stopped: Mapping[str, int] = stopped if stopped is not None else {}
        self._space: dict[str, BaseDistribution] = {}
        self._study: optuna.Study | None = None
        self._trials: dict[str, optuna.Trial] = {}
        self._done: set[str] = set()
        self._steps: dict[str, set[int]] = {}  # the iterations each trial has reported
        self._random = optuna.samplers.RandomSampler(seed=seed)
        self._tpe = _tpe(seed)

    # -- Tune's side -------------------------------------------------------------------------

    def set_search_properties(self, metric: str | None, mode: str | None, config: dict[str, Any], **spec: Any) -> bool:
        if self._study is not None:
            return False
        self._metric = metric or self._metric
        self._mode = mode or self._mode
        self._space = OptunaSearch.convert_search_space(config)
        self._study = self._new_study(self._random)
        self._study.add_trials([create_trial(params=p, distributions=self._space, value=v) for p, v in self._evaluated])
        for point in self._points:  # the baseline: asked first, as given
            self._study.enqueue_trial(_flat(point))
        return True

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        study = self._require_study()
        if trial_id not in self._trials:
            waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
            if not waiting:
                proposed = self._propose(study)
                if proposed is None:
                    return None
                if isinstance(proposed, str):  # Searcher.FINISHED: Tune's end-of-search marker
                    return proposed  # type: ignore[return-value]  # Ray's own annotation omits it
                params, drawn_by = proposed
                study.enqueue_trial(params, user_attrs={DRAWN_BY: drawn_by})
            self._trials[trial_id] = study.ask(fixed_distributions=self._space)
        return _nested(self._trials[trial_id].params)

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        trial = self._trials.get(trial_id)
        value, step = result.get(str(self._metric)), result.get("training_iteration")
        if trial is None or trial_id in self._done or not _is_number(value) or step is None:
            return
        steps = self._steps.setdefault(trial_id, set())
        if int(step) not in steps:  # Optuna keeps a step's first value and warns on a second
            steps.add(int(step))
            trial.report(float(value), int(step))  # type: ignore[arg-type]  # a number: _is_number

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        trial = self._trials.get(trial_id)
        if trial is None or trial_id in self._done:
            return
        if result and not error:
            # Tune gives the result that a trial stops on to on_trial_complete only (Ray 2.60's
            # TuneController._process_trial_result): it is the value at the trial's rung.
            self.on_trial_result(trial_id, result)
        self._done.add(trial_id)
        study = self._require_study()
        value = (result or {}).get(str(self._metric))
        if error:
            study.tell(trial, state=TrialState.FAIL)
        elif trial_id in self.stopped or not _is_number(value):
            # Stopped at a rung: its value is its last intermediate value (Optuna's rule).
            reported = bool(self._steps.get(trial_id))
            study.tell(trial, state=TrialState.PRUNED if reported else TrialState.FAIL)
        else:
            study.tell(trial, float(value))  # type: ignore[arg-type]  # a number: _is_number

    def save(self, checkpoint_path: str) -> None:
        state = dict(self.__dict__)
        state.pop("stopped")  # the scheduler's, linked again by whoever builds this searcher
        with open(checkpoint_path, "wb") as f:
            pickle.dump(state, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))

    @property
    def study(self) -> optuna.Study:
        """The Optuna study of the sweep's trials, as this searcher told it."""
        return self._require_study()

    # -- proposing ---------------------------------------------------------------------------

    def _propose(self, study: optuna.Study) -> tuple[dict[str, Any], str] | str | None:
        """The next configuration (flat, Optuna's names) and what drew it ("random" or
        "model"); None: wait for a result; FINISHED: every configuration of a finite space
        has been suggested."""
        trials = study.get_trials(deepcopy=False)
        number = len(trials)
        if self._reproducible:
            # Trial `number` sees the results of trials 0 .. number-k, all of them ended.
            known = trials[: max(0, number - self._max_concurrent + 1)]
            if any(not t.state.is_finished() for t in known):
                return None
            running = trials[len(known) :]
            random, model = (
                optuna.samplers.RandomSampler(seed=derive_seed(self._seed, number)),
                _tpe(derive_seed(self._seed, number, 1)),
            )
        else:
            known = [t for t in trials if t.state.is_finished() or t.intermediate_values]
            running = [t for t in trials if not t.state.is_finished() and not t.intermediate_values]
            random, model = self._random, self._tpe
        seen = {_key(t.params) for t in trials}
        if _space_size(self._space) <= len(seen):
            logger.warning("Every configuration of the search space has been suggested; the search ends here.")
            return Searcher.FINISHED
        if self._starting(number, known):
            return self._draw(self._view(random, [], []), seen), "random"
        if not any(t.state in _FINISHED or t.intermediate_values for t in known):
            return None  # the model needs a result
        params = self._draw(self._view(model, known, running), seen, tries=_DUPLICATE_TRIES)
        if params is not None:
            return params, "model"
        return self._draw(self._view(random, [], []), seen), "random"  # the model only repeats itself

    def _starting(self, number: int, known: list[FrozenTrial]) -> bool:
        """Whether suggestion ``number`` is a random start-up draw."""
        return number < self._n_startup

    def _draw(self, view: optuna.Study, seen: set[tuple[Any, ...]], tries: int = 1000) -> Any:
        """A configuration not in ``seen`` drawn from ``view``'s sampler (None after ``tries``
        draws); each draw that is one stays in the view as running (a liar for the next)."""
        params: dict[str, Any] = {}
        for _ in range(tries):
            params = view.ask(fixed_distributions=self._space).params
            if _key(params) not in seen:
                return params
        return None if tries == _DUPLICATE_TRIES else params  # random draws: a repeat rather than none

    def _view(self, sampler: optuna.samplers.BaseSampler, known: list[FrozenTrial], running: list[FrozenTrial]) -> Any:
        """A scratch study holding what the sampler is to learn from: the sweep's trials as
        this searcher's rules present them (values at one budget, or their last values)."""
        view = self._new_study(sampler)
        budget = self._budget(known) if self._fidelity == "rung" else None
        trials = [self._as_seen(t, budget) for t in known if t.state != TrialState.FAIL]
        trials += [create_trial(state=TrialState.RUNNING, params=t.params, distributions=self._space) for t in running]
        view.add_trials([t for t in trials if t is not None])
        return view

    def _budget(self, known: list[FrozenTrial]) -> int | None:
        """BOHB's budget: the largest iteration at which at least 2 (d + 1) trials have a
        value, else the one at which most have, moved up where it misleads (``_trusted``);
        None: no trial has reported."""
        counts: dict[int, int] = {}
        for trial in known:
            for step in trial.intermediate_values:
                counts[step] = counts.get(step, 0) + 1
        if not counts:
            return None
        enough = [step for step, n in counts.items() if n >= 2 * (len(self._space) + 1)]
        return _trusted(known, max(enough) if enough else max(counts, key=lambda step: (counts[step], -step)))

    def _as_seen(self, trial: FrozenTrial, budget: int | None) -> FrozenTrial | None:
        values = trial.intermediate_values
        if budget is None or (trial.state == TrialState.COMPLETE and budget not in values):
            if not trial.state.is_finished():  # running, with results so far (fidelity "last")
                return create_trial(state=TrialState.RUNNING, params=trial.params, distributions=self._space)
            return create_trial(
                state=trial.state,
                value=trial.value if trial.state == TrialState.COMPLETE else None,
                params=trial.params,
                distributions=self._space,
                intermediate_values=dict(values),
            )
        if budget in values and _is_number(values[budget]):
            return create_trial(value=values[budget], params=trial.params, distributions=self._space)
        if trial.state.is_finished():  # stopped below the budget: worse than any that reached it
            below = {s: v for s, v in values.items() if s < budget}
            return create_trial(
                state=TrialState.PRUNED, params=trial.params, distributions=self._space, intermediate_values=below
            )
        return create_trial(state=TrialState.RUNNING, params=trial.params, distributions=self._space)

    # -- helpers -----------------------------------------------------------------------------

    def _new_study(self, sampler: optuna.samplers.BaseSampler) -> optuna.Study:
        return optuna.create_study(
            storage=optuna.storages.InMemoryStorage(),
            sampler=sampler,
            direction="minimize" if self._mode == "min" else "maximize",
        )

    def _require_study(self) -> optuna.Study:
        if self._study is None:
            raise RuntimeError("FidelityTPESearch: Tune has not given the search space yet (set_search_properties).")
        return self._study


def _trusted(known: list[FrozenTrial], budget: int, minimum: int = rungs.MIN_TRIALS) -> int:
    """``budget``, unless its values rank the trials unlike the largest later budget that at
    least rungs.MIN_TRIALS of them reached (Spearman's rho below rungs.MISLEADS_BELOW, the rung
    measure the summary prints: tunetrain.rungs); then that later budget.

    Hyper-Tune (Li et al., VLDB 2022) weighs each budget's results by how well they rank
    configurations as the highest budget does; here the weight is all or nothing. A budget
    that ranks well is BOHB's, and the model learns from the many trials that reached it; one
    that misleads gets no weight, and the model learns from the fewer trials that reached the
    later budget. Under ASHA those are the trials promoted from the lower one, so rho is
    measured among the leaders, where TPE draws its split."""
    later: dict[int, list[tuple[float, float]]] = {}
    for trial in known:
        values = trial.intermediate_values
        if budget not in values or not _is_number(values[budget]):
            continue
        for step, value in values.items():
            if step > budget and _is_number(value):
                later.setdefault(step, []).append((values[budget], value))
    enough = [step for step, pairs in later.items() if len(pairs) >= minimum]
    if not enough:
        return budget
    rho = rungs.rank_correlation(later[max(enough)])
    return max(enough) if rho is not None and rho < rungs.MISLEADS_BELOW else budget


def _tpe(seed: int) -> optuna.samplers.TPESampler:
    # Start-up draws are this searcher's (exact at any concurrency), so TPE's own count is 0;
    # the constant liar is Optuna 5's default, set here for Optuna 4. Everything else is
    # Optuna's default (in 5.x multivariate TPE).
    return optuna.samplers.TPESampler(seed=seed, n_startup_trials=0, constant_liar=True)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def _key(params: Mapping[str, Any]) -> tuple[Any, ...]:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


def _space_size(space: Mapping[str, BaseDistribution]) -> float:
    """How many configurations the space holds (inf with a continuous dimension)."""
    size = 1.0
    for dist in space.values():
        if isinstance(dist, CategoricalDistribution):
            size *= len(dist.choices)
        elif isinstance(dist, IntDistribution):
            size *= (dist.high - dist.low) // dist.step + 1  # a log scale has step 1
        elif isinstance(dist, FloatDistribution) and dist.step is not None:
            size *= math.floor((dist.high - dist.low) / dist.step + 1e-9) + 1
        else:
            return math.inf
    return size


def _flat(point: Mapping[str, Any]) -> dict[str, Any]:
    """A nested config with Optuna's names (Ray's: the path joined with "/")."""
    return {key.replace(".", "/"): value for key, value in spaces.flatten(point).items()}


def _nested(params: Mapping[str, Any]) -> dict[str, Any]:
    """The nested config of Optuna's "/"-joined names (the inverse of :func:`_flat`)."""
    return spaces.unflatten({name.replace("/", "."): value for name, value in params.items()})


# Options of the searchers FidelityTPESearch serves; the first two are TPE's alone.
TPE_ONLY_OPTIONS = ("n_startup_trials", "reproducible")
TPE_OPTIONS = ("sampler", "points_to_evaluate", *TPE_ONLY_OPTIONS)


def build_fidelity_tpe(
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
    unknown = sorted(set(options) - set(TPE_OPTIONS))
    if unknown:
        raise ExperimentError(
            f"Unknown searcher option(s) {', '.join(map(repr, unknown))} for searcher {name!r} (TPE told of early "
            f"stops); valid options are: {', '.join(TPE_OPTIONS)}.",
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
        # Warm-started, the sampler draws from a seed of its own (see build_optuna).
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
