"""ASHA that stops no trial at a rung which misleads: the rung measure (tunetrain.rungs),
taken on the sweep's own trials while it runs, decides the first rung that stops trials.

ASHA (Li et al., MLSys 2020) stops a trial at rung r when its value there is outside the top
1/reduction_factor; that is right only if the order at r is the order at the next rung.
Hyper-Tune (Li et al., VLDB 2022) measures that order per budget and moves its brackets by it.
Here, when a result would stop a trial at rung r, the trials that reported at both r and the
next rung (or max_t) are ranked at each: Spearman's rho below rungs.MISLEADS_BELOW over at
least rungs.MIN_TRIALS of them, and the trial goes on instead (its value at r is recorded as
ASHA records it). A rung that misleads thus stops nothing, and the first rung that stops
trials is the lowest one that ranks as the next does; the measure is taken again at every
decision, so a rung that ranks well once more trials reach the next one stops trials again.

Written as a mixin over Ray's public scheduler interface (``on_trial_result`` and its result
dicts) rather than by changing ASHA's private brackets: ASHA decides, this only overrules a
STOP at a misleading rung. The rungs are computed as Ray lays them out for one bracket
(tunetrain.rungs.asha_milestones); with ``brackets`` > 1, or
``scheduler_options={"skip_misleading_rungs": False}``, ASHA is Ray's unchanged.
"""

from __future__ import annotations

import math
from typing import Any

from ray.tune.schedulers import TrialScheduler

from tunetrain import rungs


class SkipsMisleadingRungs:
    """Mixin for Ray's AsyncHyperBandScheduler (one bracket): see the module's docstring."""

    def __init__(self, *, skip_misleading_rungs: bool = True, **options: Any) -> None:
        super().__init__(**options)
        self._rung_time_attr: str = options.get("time_attr", "training_iteration")
        self._rung_metric: str | None = options.get("metric")
        grace, rf = int(options.get("grace_period", 1)), float(options.get("reduction_factor", 4))
        max_t = int(options.get("max_t", 100))
        milestones = rungs.asha_milestones(grace, rf, max_t)
        # Each rung and the budget it is measured against: the next rung, or max_t. None
        # when off, with several brackets (whose rungs are laid out otherwise), or with no
        # rung below max_t (grace_period = max_t).
        self._next_budget = (
            dict(zip(milestones, [*milestones[1:], max_t], strict=True))
            if milestones and skip_misleading_rungs and int(options.get("brackets", 1)) == 1
            else {}
        )
        self._values: dict[str, dict[int, float]] = {}  # trial id -> iteration -> value
        self.skipped: dict[int, float] = {}  # rungs found misleading -> rho when last found so
        self.overruled: dict[int, int] = {}  # rung -> how many of ASHA's stops there it overruled

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        done: bool = super().set_search_properties(metric, mode, **spec)  # type: ignore[misc]
        self._rung_metric = self._rung_metric or metric
        return done

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        decision: str = super().on_trial_result(tune_controller, trial, result)  # type: ignore[misc]
        step, value = result.get(self._rung_time_attr), result.get(str(self._rung_metric))
        if not isinstance(step, int | float) or not isinstance(value, int | float) or not math.isfinite(value):
            return decision
        if int(step) in self._next_budget or int(step) in self._next_budget.values():  # only what is ranked
            self._values.setdefault(trial.trial_id, {})[int(step)] = float(value)
        if decision == TrialScheduler.STOP and not result.get("done") and self._misleads(int(step)):
            self.overruled[int(step)] = self.overruled.get(int(step), 0) + 1
            return TrialScheduler.CONTINUE
        return decision

    def _misleads(self, rung: int) -> bool:
        later = self._next_budget.get(rung)
        if later is None:
            return False
        pairs = [(v[rung], v[later]) for v in self._values.values() if rung in v and later in v]
        rho = rungs.rank_correlation(pairs)
        if rho is not None and rho < rungs.MISLEADS_BELOW:
            self.skipped[rung] = rho
            return True
        self.skipped.pop(rung, None)
        return False
