"""Ray Tune's schedulers with bookkeeping added (no decision of their own; ASHA's one change,
a rung that misleads stops no trial, is _rung_trust's): which trials a scheduler stopped
before they ended, which PBT exploits happened; and the two hooks through which the sweep's
policy (tunetrain.sweeps.policy) acts: before a launch (the budget) and the trial the
scheduler must leave alone (the baseline)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ray.tune.schedulers import (
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    PopulationBasedTraining,
    TrialScheduler,
)

from tunetrain import _internals
from tunetrain import space as spaces
from tunetrain.algorithms._rung_trust import SkipsMisleadingRungs


class _RecordsDecisions:
    """Mixin for a Ray Tune scheduler: remembers the trials it stopped before they ended
    (and, for PBT/PB2, every exploit: see :class:`RecordsExploits`).

    Tune hands the scheduler a trial's last result again, marked ``done``, when the train
    loop returned by itself; a STOP for that result is not an early stop.
    """

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.early_stopped: dict[str, int] = {}
        self.exploits: list[dict[str, Any]] = []
        self._deciding: tuple[str, dict[str, Any]] | None = None
        # The sweep's launch policy (tunetrain.sweeps.policy, e.g. the budget), asked with
        # Tune's controller before pending trials start: the scheduler's hook is the one
        # place Tune offers before a trial starts; the decision is the policy's.
        self.before_launch: Callable[[Any], None] | None = None
        # The sweep's policy: a trial this scheduler never sees (the baseline, which must run
        # to its end to be a reference). It is not added to the scheduler's brackets or
        # population, never stopped, paused or exploited, and runs first.
        self.exempt: Callable[[Any], bool] | None = None

    def _exempt(self, trial: Any) -> bool:
        return self.exempt is not None and self.exempt(trial)

    def choose_trial_to_run(self, tune_controller: Any) -> Any:
        if self.before_launch is not None:
            self.before_launch(tune_controller)
        for trial in tune_controller.get_trials():
            # HyperBand and PBT pick only among the trials they were given.
            if trial.status == "PENDING" and self._exempt(trial):
                return trial
        return super().choose_trial_to_run(tune_controller)  # type: ignore[misc]

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        if not self._exempt(trial):
            super().on_trial_add(tune_controller, trial)  # type: ignore[misc]

    def on_trial_error(self, tune_controller: Any, trial: Any) -> None:
        if not self._exempt(trial):
            super().on_trial_error(tune_controller, trial)  # type: ignore[misc]

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        if not self._exempt(trial):
            super().on_trial_complete(tune_controller, trial, result)  # type: ignore[misc]

    def on_trial_remove(self, tune_controller: Any, trial: Any) -> None:
        if not self._exempt(trial):
            super().on_trial_remove(tune_controller, trial)  # type: ignore[misc]

    def _iteration(self, trial: Any) -> int:
        """The trial's latest iteration, counting the result being decided on."""
        if self._deciding is not None and self._deciding[0] == trial.trial_id:
            return int(self._deciding[1].get("training_iteration", 0))
        return int((trial.last_result or {}).get("training_iteration", 0))

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        if self._exempt(trial):
            return TrialScheduler.CONTINUE
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


class RecordsExploits(_internals.ExploitHooks, _RecordsDecisions):
    """Mixin for PBT/PB2: each exploit (recipient, donor, steps, old and new values)."""

    def before_exploit(self, trial: Any, donor: Any) -> Any:
        return self._iteration(trial), self._iteration(donor)

    def exploited(self, trial: Any, donor: Any, old_config: dict[str, Any], before: Any) -> None:
        step, donor_step = before
        keys = [key for key, _ in spaces.iter_leaves(self.mutated_space())]
        flat_old, flat_new = spaces.flatten(old_config), spaces.flatten(dict(trial.config))
        self.exploits.append(
            {
                "trial_id": trial.trial_id,
                "donor_id": donor.trial_id,
                "step": step,
                "donor_step": donor_step,
                "at": time.time(),  # when the exploit was decided (wall clock)
                "old": {key: flat_old.get(key) for key in keys},
                "new": {key: flat_new.get(key) for key in keys},
                "config": dict(trial.config),
            }
        )


class RecordingFIFO(_RecordsDecisions, FIFOScheduler):
    pass


class RecordingASHA(_RecordsDecisions, SkipsMisleadingRungs, AsyncHyperBandScheduler):
    """Ray's ASHA, but a rung that misleads stops no trial (SkipsMisleadingRungs decides that:
    tunetrain.algorithms._rung_trust)."""


class RecordingHyperBand(_RecordsDecisions, HyperBandScheduler):
    pass


class RecordingMedian(_RecordsDecisions, MedianStoppingRule):
    pass


class RecordingPBT(RecordsExploits, PopulationBasedTraining):
    pass
