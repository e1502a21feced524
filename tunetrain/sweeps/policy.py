"""Every decision about a trial that tunetrain (not the scheduler) takes, in one place: the
stop rule, a metric never reported (bad input: the sweep stops), a diverged objective, the
budget that refuses new trials, a trial that stopped reporting, and the status a trial ends
with."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from typing import Any

from ray import tune
from ray.train.constants import CHECKPOINT_DIR_NAME
from ray.tune.result import AUTO_RESULT_KEYS

from tunetrain import _internals, tracking
from tunetrain import space as spaces
from tunetrain.experiment import Experiment
from tunetrain.records import TrialRecord, TrialStatus, as_number, type_name
from tunetrain.sweeps.cost.budget import Budget, BudgetGate

# Keys Tune adds to every result; everything else in a result is the user's metric.
_BOOKKEEPING = set(AUTO_RESULT_KEYS) | {
    "done",
    "trial_id",
    "experiment_tag",
    "should_checkpoint",
    "experiment_id",
    CHECKPOINT_DIR_NAME,
}


# tunetrain's own keys in a result (a trial's nodes, restarts, out-of-memory record).
_OWN_PREFIX = "tunetrain."


def reported_values(result: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Every value a train loop reported, without Tune's bookkeeping keys and tunetrain's
    own; a nested dict's values under ``outer/inner``, as Tune names them."""
    values: dict[str, Any] = {}
    for key, value in result.items():
        if not prefix and (key in _BOOKKEEPING or str(key).startswith(_OWN_PREFIX)):
            continue
        if isinstance(value, Mapping) and value:
            values.update(reported_values(value, f"{prefix}{key}/"))
        else:
            values[f"{prefix}{key}"] = value
    return values


def budget_gate(experiment: Experiment, budget: Budget | None) -> BudgetGate | None:
    """The gate that stops launching trials at ``budget`` (None without one); raises
    ExperimentError when the budget cannot apply (GPU-hours for trials without a GPU)."""
    if budget is None:
        return None
    worker = experiment.worker_resources
    return BudgetGate(
        budget,
        cpus_per_trial=experiment.max_workers * worker.get("CPU", 0.0),
        gpus_per_trial=experiment.max_workers * worker.get("GPU", 0.0),
    )


class SweepStopper(tune.Stopper):
    """The experiment's stop rule, plus the checks tunetrain adds to every result: every
    objective metric must be reported (else the whole sweep stops: bad input), and a
    non-finite value of one ends the trial as diverged."""

    def __init__(self, experiment: Experiment) -> None:
        self.metrics = [metric for metric, _ in experiment.objectives]
        self.max_iterations = experiment.stop.max_iterations
        self.max_seconds = experiment.stop.max_trial_seconds
        # The same limit for a trial that stops reporting (asked by the scheduler's hook).
        self.overdue = OverdueTrials(self.max_seconds) if self.max_seconds is not None else None
        self.diverged: set[str] = set()
        self.bad_input: str | None = None  # why the sweep was stopped as bad input
        self.bad_input_fix = ""
        self._keys_checked: set[str] = set()
        self.refused_keys: set[str] = set()  # metric names the store refuses: never sent

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        missing = [metric for metric in self.metrics if metric not in result]
        if missing:
            if self.bad_input is None:
                reported = sorted(reported_values(result)) or ["(none)"]
                self.refuse(
                    f"The experiment's metric {missing[0]!r} was never reported; the train loop "
                    f"reported: {', '.join(reported)}.",
                    fix=f"Report the metric named by the experiment (ray.train.report({{{missing[0]!r}: ...}})) "
                    "or change Experiment.metric.",
                )
            return True
        values = reported_values(result)
        self._check_new(values, "")
        if not self.refused_keys.isdisjoint(values):
            return True
        objectives = [as_number(result[metric]) for metric in self.metrics]
        if any(value is not None and not math.isfinite(value) for value in objectives):
            self.diverged.add(trial_id)
            return True
        if self.max_iterations is not None and result.get("training_iteration", 0) >= self.max_iterations:
            return True
        return self.max_seconds is not None and result.get("time_total_s", 0.0) >= self.max_seconds

    def recordable(self, result: Mapping[str, Any], trial: str = "") -> dict[str, float]:
        """The result's metrics the store takes. A name it refuses (MLflow's rule: ``acc@1``)
        stops the whole sweep as bad input at the first report that brings it: every later
        report and trial would bring it too, and the record would silently lack it. The
        other metrics of that report are still recorded."""
        values = reported_values(result)
        self._check_new(values, trial)
        return {
            key: number
            for key, value in values.items()
            if key not in self.refused_keys and (number := as_number(value)) is not None
        }

    def _check_new(self, values: Mapping[str, Any], trial: str) -> None:
        """Check each reported key not seen before (names and values: see :meth:`_check`)."""
        for key in values.keys() - self._keys_checked:
            self._keys_checked.add(key)
            self._check(key, values[key], trial)

    def _check(self, key: str, value: Any, trial: str) -> None:
        """Refuse (stop the sweep as bad input) a metric whose name the store refuses, or
        whose value is not a number: never recorded, so never dropped without a word."""
        loop = f"The train loop{' of ' + trial if trial else ''}"
        if as_number(value) is None:
            self.refused_keys.add(key)
            shown = repr(value) if len(repr(value)) <= 60 else repr(value)[:57] + "..."
            self.refuse(
                f"{loop} reported the metric {key!r} as {shown} of type {type_name(value)}, which is not a "
                "number: metrics are numbers (MLflow records floats).",
                fix=f"Report a number for {key!r} (e.g. float(value); a tensor: value.item()), or leave text "
                "out of ray.train.report (put it in the checkpoint's folder).",
            )
            return
        problem = tracking.metric_key_problem(key)
        if problem is not None:
            self.refused_keys.add(key)
            self.refuse(
                f"{loop} reported the metric {key!r}, whose name the MLflow store refuses: {problem}",
                fix=f"Rename it in ray.train.report (for example {tracking.suggested_metric_key(key)!r}).",
            )

    def refuse(self, message: str, *, fix: str) -> None:
        """Stop the whole sweep as bad input (exit 2): ``message`` says why, ``fix`` how to fix it."""
        if self.bad_input is None:
            self.bad_input, self.bad_input_fix = message, fix

    def stop_all(self) -> bool:
        return self.bad_input is not None

    def timed_out(self, trial_id: str) -> str | None:
        """Why the trial was stopped for not reporting (None: it was not)."""
        return self.overdue.timed_out.get(trial_id) if self.overdue is not None else None


class BaselineTrial:
    """Which trial is the sweep's baseline: the first whose config holds the baseline's
    values (the searcher suggests it first), or the one a resumed sweep's journal names. The
    scheduler exempts it (it never stops it early) and the callback tags its run."""

    def __init__(self, point: Mapping[str, Any], trial_id: str | None = None) -> None:
        self.point = dict(point)
        self.trial_id = trial_id

    def __call__(self, trial: Any) -> bool:
        if self.trial_id is None and spaces.holds(spaces.flatten(dict(trial.config)), self.point):
            self.trial_id = trial.trial_id
        return trial.trial_id == self.trial_id


def refuse_over_budget(gate: BudgetGate) -> Callable[[Any], None]:
    """The launch policy under ``--budget`` (the scheduler asks it with Tune's controller
    before pending trials start): when the next trial would overrun the budget, the trials
    that never ran are stopped before they start and the searcher suggests no more (trials
    resumed after a pause started before and go on)."""

    def before_launch(controller: Any) -> None:
        fresh = [t for t in controller.get_trials() if t.status == "PENDING" and not gate.has_started(t.trial_id)]
        if fresh and not gate.allows_launch():
            controller.search_alg.set_finished()  # no more suggestions
            for trial in fresh:
                _internals.stop_before_start(controller, trial)
                gate.refused += 1

    return before_launch


class OverdueTrials:
    """``max_trial_seconds`` against a train loop that stops reporting (a hung data loader,
    a deadlocked collective): the stop rule is checked at each report, so a loop that never
    reports again would hold its CPUs for ever. Asked at every step of Tune's loop (from the
    scheduler's hook, with Tune's controller), it stops a running trial whose training time,
    counted on from its last report, passes the limit plus a grace, and kills its process
    (its workers go with it); the trial ends ``timed_out``, the sweep goes on.

    The grace (a quarter of the limit, at least 10 s) lets a trial whose last step ends a
    little after the limit be stopped at that report by the stop rule, as before. The time
    before a trial's first report (its workers starting) counts, as it does in the training
    time the stop rule reads.
    """

    def __init__(self, max_seconds: float, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.max_seconds = max_seconds
        self.grace = max(10.0, 0.25 * max_seconds)
        self.timed_out: dict[str, str] = {}  # trial id -> why it was stopped
        self._clock = clock
        self._since: dict[str, tuple[int, float, float]] = {}  # id -> (iteration, seen at, its training time)

    def __call__(self, controller: Any) -> None:
        now = self._clock()
        for trial in controller.get_trials():
            if trial.status != "RUNNING" or trial.trial_id in self.timed_out:
                self._since.pop(trial.trial_id, None)  # paused or ended: counted again when it runs
                continue
            last = trial.last_result or {}
            iteration = int(last.get("training_iteration") or 0)
            since = self._since.get(trial.trial_id)
            if since is None or since[0] != iteration:
                since = self._since[trial.trial_id] = (iteration, now, float(last.get("time_total_s") or 0.0))
            silent = now - since[1]
            if since[2] + silent > self.max_seconds + self.grace:
                self.timed_out[trial.trial_id] = (
                    f"timed out: no report for {silent:.0f} s after {iteration} iteration(s), past max_trial_seconds="
                    f"{self.max_seconds:g} (plus {self.grace:.0f} s of grace); the trial was stopped and its process "
                    "killed (a train loop that hangs: a data loader, a collective, a lock)"
                )
                _internals.stop_and_kill_trial(controller, trial)


def every_step(*policies: Callable[[Any], None] | None) -> Callable[[Any], None] | None:
    """One hook for the scheduler that asks each policy in turn (None: no policy)."""
    chosen = [policy for policy in policies if policy is not None]
    if not chosen:
        return None

    def ask(controller: Any) -> None:
        for policy in chosen:
            policy(controller)

    return ask


def end_status(
    record: TrialRecord,
    *,
    stopper: SweepStopper,
    early_stopped: Mapping[str, int],
    oom: bool,
    max_iterations: int | None,
    metric: str,
    timed_out: str | None = None,
) -> tuple[TrialStatus, str | None]:
    """The status (and error) of a trial Tune reports complete: out of memory, timed out
    (``timed_out``: why, from :class:`OverdueTrials`), diverged, failed or interrupted when
    the sweep stopped as bad input (failed: it never reported the metric), stopped early by
    the scheduler (unless it ran its whole budget: HyperBand stops the survivors of a
    finished bracket at the last iteration), else completed."""
    if oom:
        return "oom", None
    if timed_out is not None:
        return "timed_out", timed_out
    if record.trial_id in stopper.diverged:
        return "diverged", None
    if stopper.bad_input is not None:
        failed = metric not in record.last
        return ("failed", stopper.bad_input) if failed else ("interrupted", None)
    ran_full_budget = max_iterations is not None and record.iterations >= max_iterations
    if record.trial_id in early_stopped and not ran_full_budget:
        return "stopped_early", None
    return "completed", None
