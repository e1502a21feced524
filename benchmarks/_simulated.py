"""A simulated backend for search benchmarks: k workers on a simulated clock.

Each trial is a sequence of iterations; iteration i of a trial costs ``problem.cost(i)``
simulated seconds and reports ``problem.value(config, i)``. The searchers and schedulers are
the real objects (Ray Tune's classes as Tune drives them, raw Optuna's ask/tell with its
pruner as ``study.optimize(n_jobs=k)`` runs it, Syne Tune's schedulers as its Tuner drives
them); only time is simulated, as Syne Tune's own simulator backend does for benchmarks
("Benchmarking with Simulator Backend" in its docs): a run of 60 simulated seconds takes the
searchers' compute only. The searchers' own compute is not added to the clock (benchmark 5,
"Searcher overhead", measures it).

Why it is written here: Syne Tune's simulator replays tabulated blackboxes and drives only
Syne Tune's schedulers; Ray Tune has none (its Tuner runs trials for real, one Ray per
machine). The loop below is ~60 lines and drives all three libraries the same way.
"""

from __future__ import annotations

import dataclasses
import heapq
import math
import random
from collections.abc import Callable, Mapping
from types import SimpleNamespace
from typing import Any, Protocol


@dataclasses.dataclass(frozen=True)
class Problem:
    name: str
    space: dict[str, Any]  # Ray Tune domains
    max_t: int  # iterations of a full-budget trial
    value: Callable[[Mapping[str, Any], int], float]  # the metric (minimised) after iteration i
    cost: Callable[[Mapping[str, Any], int], float]  # simulated seconds of iteration i of a config
    optimum: float
    kind: str  # "multi-fidelity" or "single-fidelity"


@dataclasses.dataclass(frozen=True)
class Event:
    time: float  # simulated seconds since the start
    compute: float  # simulated worker-seconds spent by then
    trial: int
    step: int
    value: float


class Arm(Protocol):
    def ask(self) -> tuple[int, dict[str, Any]] | str | None:
        """A new trial (id, config); None: wait for a result; "FINISHED": no more."""

    def report(self, trial: int, step: int, value: float, *, last: bool) -> bool:
        """The trial's result after ``step``; returns whether it goes on."""


def simulate(problem: Problem, arm: Arm, *, workers: int, wall_s: float | None, trials: int | None) -> list[Event]:
    """Run ``arm`` on ``workers`` simulated workers until ``wall_s`` simulated seconds have
    passed or ``trials`` trials have ended; every report, in time order."""
    clock = compute = 0.0
    queue: list[tuple[float, int, int, dict[str, Any]]] = []  # (ends at, trial, step, config)
    events: list[Event] = []
    started = ended = 0
    finished = False
    while True:
        while not finished and len(queue) < workers and (trials is None or started < trials):
            asked = arm.ask()
            if asked is None:
                break
            if isinstance(asked, str):
                finished = True
                break
            trial, config = asked
            heapq.heappush(queue, (clock + problem.cost(config, 1), trial, 1, config))
            started += 1
        if not queue:
            return events
        at, trial, step, config = heapq.heappop(queue)
        if wall_s is not None and at > wall_s:
            return events
        compute += (at - clock) * (len(queue) + 1)
        clock = at
        value = problem.value(config, step)
        events.append(Event(clock, compute, trial, step, value))
        last = step >= problem.max_t
        if arm.report(trial, step, value, last=last) and not last:
            heapq.heappush(queue, (clock + problem.cost(config, step + 1), trial, step + 1, config))
        else:
            ended += 1
            if trials is not None and ended >= trials:
                return events


def regret_curve(events: list[Event], problem: Problem) -> list[tuple[float, float, float]]:
    """(time, compute, regret) each time the incumbent improves: the best value reported at
    the full budget so far, less the optimum."""
    best, curve = math.inf, []
    for e in events:
        if e.step >= problem.max_t and e.value < best:
            best = e.value
            curve.append((e.time, e.compute, best - problem.optimum))
    return curve


def trials_curve(events: list[Event], problem: Problem) -> list[float]:
    """The regret after each ended trial (single-fidelity problems: one report a trial)."""
    best, out = math.inf, []
    for e in events:
        best = min(best, e.value)
        out.append(best - problem.optimum)
    return out


# -- arms ------------------------------------------------------------------------------------


class RayArm:
    """A Ray Tune searcher and scheduler as Tune's controller drives them: suggest, then the
    scheduler's on_trial_add; each result to the scheduler, and to the searcher when the
    trial goes on; a stop or the last result ends the trial for both. ``searcher=None`` is Ray's random search (what
    BasicVariantGenerator does: each domain's own ``sample``)."""

    def __init__(
        self, searcher: Any, scheduler: Any, *, space: dict[str, Any], seed: int, metric: str = "loss"
    ) -> None:
        self.searcher, self.scheduler, self.space, self.metric = searcher, scheduler, space, metric
        self.rng = random.Random(seed)
        self.trials: dict[int, Any] = {}
        self.n = 0

    def ask(self) -> tuple[int, dict[str, Any]] | str | None:
        trial_id = self.n
        if self.searcher is None:
            config = {k: d.sample(random_state=self.rng.randrange(2**31)) for k, d in self.space.items()}
        else:
            config = self.searcher.suggest(str(trial_id))
            if config is None or isinstance(config, str):
                return config
        self.n += 1
        trial = SimpleNamespace(trial_id=str(trial_id), config=config, last_result={}, status="RUNNING")
        self.trials[trial_id] = trial
        self.scheduler.on_trial_add(None, trial)
        return trial_id, config

    def report(self, trial: int, step: int, value: float, *, last: bool) -> bool:
        t = self.trials[trial]
        result = {self.metric: value, "training_iteration": step, "done": last}
        decision = self.scheduler.on_trial_result(None, t, result)
        if self.searcher is not None and decision != "STOP" and not last:
            # Tune gives the searcher a result only when the trial goes on; the one it stops
            # on reaches it with on_trial_complete (TuneController._process_trial_result).
            self.searcher.on_trial_result(t.trial_id, result)
        t.last_result = result
        if last or decision == "STOP":
            if last:
                self.scheduler.on_trial_complete(None, t, result)
            else:
                self.scheduler.on_trial_remove(None, t)
            if self.searcher is not None:
                self.searcher.on_trial_complete(t.trial_id, result)
            return False
        return True


class OptunaArm:
    """Raw Optuna as ``study.optimize(objective, n_jobs=k)`` runs it: each of k workers asks
    a trial, reports each iteration and stops when the pruner says so."""

    def __init__(self, study: Any, space: dict[str, Any]) -> None:
        from ray.tune.search.optuna import OptunaSearch

        self.study, self.space = study, OptunaSearch.convert_search_space(space)
        self.trials: dict[int, Any] = {}

    def ask(self) -> tuple[int, dict[str, Any]] | str | None:
        trial = self.study.ask(fixed_distributions=self.space)
        self.trials[trial.number] = trial
        return trial.number, dict(trial.params)

    def report(self, trial: int, step: int, value: float, *, last: bool) -> bool:
        from optuna.trial import TrialState

        t = self.trials[trial]
        t.report(value, step)
        if last:
            self.study.tell(t, value)
            return False
        if t.should_prune():
            self.study.tell(t, state=TrialState.PRUNED)
            return False
        return True


class SyneTuneArm:
    """A Syne Tune scheduler as its Tuner drives it: suggest, on_trial_add, on_trial_result
    (STOP ends the trial), on_trial_complete after the last result."""

    def __init__(self, scheduler: Any) -> None:
        self.scheduler = scheduler
        self.trials: dict[int, Any] = {}

    def ask(self) -> tuple[int, dict[str, Any]] | str | None:
        import datetime

        from syne_tune.backend.trial_status import Trial

        suggestion = self.scheduler.suggest()
        if suggestion is None:
            return "FINISHED"
        trial_id = len(self.trials)
        trial = Trial(trial_id=trial_id, config=suggestion.config, creation_time=datetime.datetime.now())
        self.trials[trial_id] = trial
        self.scheduler.on_trial_add(trial)
        return trial_id, dict(suggestion.config)

    def report(self, trial: int, step: int, value: float, *, last: bool) -> bool:
        t = self.trials[trial]
        result = {"loss": value, "step": step}
        decision = self.scheduler.on_trial_result(t, result)
        if last:
            self.scheduler.on_trial_complete(t, result)
            return False
        return decision != "STOP"
