"""The Ray Tune callback: turns Tune's trial events into TrialRecords, hands them to the
sweep's log (:class:`tunetrain.tracking.SweepLog`, which writes them in MLflow's vocabulary)
and updates the live view. It records; the decisions are the policy's."""

from __future__ import annotations

import os
import re
import time
from collections import Counter
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ray import tune
from ray.train.constants import CHECKPOINT_DIR_NAME

from tunetrain import space as spaces
from tunetrain._internals import note_tune_stop_signal
from tunetrain.console import LiveView
from tunetrain.records import ENDED, TrialRecord, error_headline
from tunetrain.seeding import derive_seed
from tunetrain.sweeps.cost.budget import BudgetGate
from tunetrain.sweeps.plan import SweepPlan, train_storage
from tunetrain.sweeps.policy import SweepStopper, end_status
from tunetrain.tracking import SweepLog
from tunetrain.trial import (
    DIVERGED_KEY,
    NODES_KEY,
    OOM_KEY,
    RESTARTS_KEY,
    oom_in_error,
    remove_train_copies,
    trial_index,
    trial_seed,
)


class SweepCallback(tune.Callback):
    """Turns Ray Tune's trial events into TrialRecords, the sweep's log and the live view."""

    def __init__(
        self,
        *,
        plan: SweepPlan,
        log: SweepLog,
        view: LiveView,
        stopper: SweepStopper,
        scheduler: Any,
        budget_gate: BudgetGate | None = None,
        records: Mapping[str, TrialRecord] | None = None,
    ) -> None:
        self.plan = plan
        self.train_storage = train_storage(plan)
        self.budget_gate = budget_gate
        self.log = log  # the recorder, spoken to in records (tracking turns them into MLflow's)
        self.view = view
        self.stopper = stopper
        self.early_stopped: Mapping[str, int] = scheduler.early_stopped
        self.exploits: list[dict[str, Any]] = scheduler.exploits  # PBT/PB2, appended by the scheduler
        self.is_baseline = scheduler.exempt or (lambda trial: False)  # the trial the scheduler leaves alone
        self._exploits_seen = 0
        self._exploits_of: dict[str, list[dict[str, Any]]] = {}
        self.population_based = plan.experiment.scheduler in ("pbt", "pb2")
        self._results: Counter[str] = Counter()
        self._checkpointed: set[str] = set()
        # Trials by Tune trial id; a resumed sweep starts with what its journal recorded.
        self.records: dict[str, TrialRecord] = dict(records or {})
        self._oom: dict[str, dict[str, Any]] = {}  # trials that ran out of memory: error, peak memory
        exp = plan.experiment
        self.score_attribute = exp.checkpoint.score_attribute or exp.primary_metric
        self.score_order = exp.checkpoint.score_order or exp.primary_mode

        self.stop_signalled = False  # Ctrl+C reached Tune's graceful stop (see setup)

    def setup(self, *args: Any, **info: Any) -> None:
        # Tune's own Ctrl+C handler ends the run as if it had finished: note that it came.
        note_tune_stop_signal(lambda: setattr(self, "stop_signalled", True))

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the experiment state; the recorder (a thread) and
        # the console belong to this driver process only.
        return {k: v for k, v in self.__dict__.items() if k not in ("log", "view")}

    def on_trial_start(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._record_exploits()
        record = self.records.get(trial.trial_id)
        named = next((r for r in self.records.values() if r.name == str(trial)), None)
        if record is None and named is not None:
            # A resumed sweep whose Tune state was saved before this trial was first created:
            # the searcher created it again, under a new id; it goes on in the trial's run.
            del self.records[named.trial_id]
            named.trial_id = trial.trial_id
            self.records[trial.trial_id] = record = named
        if record is not None:  # resumed (HyperBand, a resumed sweep) or restarted from a donor (PBT): same run
            if record.status == "interrupted":  # Ctrl+C or a crash ended it; the resumed sweep goes on with it
                record.reopened(time.time())
                self.log.reopen_trial(record)
                if self.budget_gate is not None:
                    self.budget_gate.started(trial.trial_id)
            if record.status not in ENDED:
                record.config = dict(trial.config)
            return
        name = str(trial)
        index = trial_index(name)
        record = TrialRecord(
            name=name,
            index=index,
            trial_id=trial.trial_id,
            config=dict(trial.config),
            seed=trial_seed(self.plan.root_seed, index, self.plan.trial_seeds),
            baseline=self.is_baseline(trial),
            start_time=(now := time.time()),
            running_since=now,
        )
        self.records[trial.trial_id] = record
        if self.budget_gate is not None:
            self.budget_gate.started(trial.trial_id)
        self.log.start_trial(
            record,
            sweep_id=self.plan.sweep_id,
            # Each worker's seed (rank order): derived from the trial's seed and its rank.
            worker_seeds=[derive_seed(record.seed, rank) for rank in range(self.plan.experiment.max_workers)],
        )
        if self.population_based:  # the values PBT may change, as metrics from step 0 on
            self.log.mutable_values(record, step=0, values=self._mutable_values(record.config))
        self.view.update(self._trials(), force=True)

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        self._record_exploits()
        record = self.records.get(trial.trial_id)
        if record is None:
            return
        step = int(result.get("training_iteration", record.iterations + 1))
        oom = result.get(OOM_KEY)
        if oom:  # the worst value went to the scheduler and searcher; the record gets what happened
            self._oom[trial.trial_id] = dict(oom)
            return
        restarts = result.get(RESTARTS_KEY)
        if restarts:  # Train restarted the workers from the latest checkpoint before this report
            self._restarted(record, list(restarts))
        nodes = result.get(NODES_KEY)
        if nodes:  # where the trial's workers run (rank order): node and device
            self.log.placed(record, nodes)
        if step <= record.iterations and not self.population_based:
            # A trial restored from a checkpoint older than its last report (a retry, a resumed
            # sweep, a HyperBand resume) reruns those steps: each step is recorded once, the
            # first time. (A PBT exploit continues from the donor's step, see docs/schedulers.md.)
            return
        metrics = self.stopper.recordable(result, record.name)  # without names the store refuses
        # A diverged objective reached the scheduler and searcher as its worst value; the
        # record keeps what the train loop reported.
        metrics.update(result.get(DIVERGED_KEY) or {})
        record.reported(
            step, metrics, metric=self.plan.experiment.primary_metric, mode=self.plan.experiment.primary_mode
        )
        self.log.report(record, step=step, metrics=metrics)
        # Tune marks a result that came with a checkpoint (whether or not it keeps it).
        self._results[trial.trial_id] += 1
        if result.get(CHECKPOINT_DIR_NAME):
            self._checkpointed.add(trial.trial_id)
        if self.population_based and self._results[trial.trial_id] >= 2 and trial.trial_id not in self._checkpointed:
            self.stopper.refuse(
                f"Scheduler {self.plan.experiment.scheduler!r} clones trials from their checkpoints, but "
                f"{record.name} reported {self._results[trial.trial_id]} times without a checkpoint.",
                fix="Report checkpoints (ray.train.report(metrics, checkpoint=...)) and start from "
                "ray.train.get_checkpoint() when there is one; see docs/schedulers.md.",
            )
        self.view.update(self._trials())

    def on_trial_recover(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        # An in-process trial failed and Tune restarts it from its latest checkpoint (same run).
        record = self.records.get(trial.trial_id)
        if record is not None:
            self._restarted(record, [error_headline(_last_failure(_trial_error(trial)))])

    def _restarted(self, record: TrialRecord, reasons: list[str]) -> None:
        """Record restarts of a trial from its checkpoint: count, last reason, all of them."""
        record.restarts.extend(reasons)
        self.log.restarted(record)

    def _mutable_values(self, config: Mapping[str, Any]) -> dict[str, float]:
        free = set(spaces.free_dimensions(self.plan.experiment.space))
        return {
            key: float(value)
            for key, value in spaces.flatten(config).items()
            if key in free and isinstance(value, int | float) and not isinstance(value, bool)
        }

    def _record_exploits(self) -> None:
        """Record each PBT exploit on the recipient's run: step, donor, old and new values."""
        while self._exploits_seen < len(self.exploits):
            exploit = self.exploits[self._exploits_seen]
            self._exploits_seen += 1
            record, donor = self.records.get(exploit["trial_id"]), self.records.get(exploit["donor_id"])
            if record is None or donor is None:
                continue
            record.config = dict(exploit["config"])
            entry = {
                "step": exploit["step"],
                "donor": donor.name,
                "donor_run_id": self.log.run_id(donor.name),
                "donor_step": exploit["donor_step"],
                "at": exploit["at"],
                "old": exploit["old"],
                "new": exploit["new"],
            }
            history = self._exploits_of.setdefault(record.name, [])
            history.append(entry)
            self.log.mutable_values(record, step=exploit["step"], values=self._mutable_values(record.config))
            self.log.exploited(record, history=history, donor=donor)

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        # Persisted by Tune (for both trial runners) after the result it came with.
        record = self.records.get(trial.trial_id)
        if record is None:
            return
        path = str(checkpoint.path)
        record.checkpointed(path, score=self.score_attribute)
        self.log.checkpointed(record, path)

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        if self.budget_gate is not None:
            self.budget_gate.ended(trial.trial_id)
        record = self.records.get(trial.trial_id)
        if record is None:
            return
        status, error = end_status(
            record,
            stopper=self.stopper,
            early_stopped=self.early_stopped,
            oom=trial.trial_id in self._oom,
            max_iterations=self.plan.experiment.stop.max_iterations,
            metric=self.plan.experiment.primary_metric,
            timed_out=self.stopper.timed_out(trial.trial_id),
        )
        if status == "oom":
            self._end_oom(record, self._oom[trial.trial_id])
        else:
            self._end(record, status, error=error)

    def _end_oom(self, record: TrialRecord, oom: Mapping[str, Any]) -> None:
        """End a trial that ran out of memory: its peak memory and batch settings go on its run."""
        settings = {k: v for k, v in spaces.flatten(record.config).items() if _BATCH_SETTING.search(k)}
        self.log.out_of_memory(record, batch_settings=settings, peak_gib=oom.get("peak_memory_gib"))
        self._end(record, "oom", error=str(oom.get("error") or "out of memory"))

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        if self.budget_gate is not None:
            self.budget_gate.ended(trial.trial_id)
        if trial.trial_id not in self.records:
            # It failed before it started (e.g. its actor could not be created): it still gets
            # a run, with the error, so the failure is visible.
            self.on_trial_start(iteration, trials, trial)
        error = _trial_error(trial)
        record = self.records[trial.trial_id]
        oom = oom_in_error(error)
        if oom is not None or "OutOfMemoryError" in error:
            self._end_oom(record, oom or {"error": error})
        else:
            self._end(record, "failed", error=error)

    def on_step_end(self, iteration: int, trials: list[Any], **info: Any) -> None:
        self._record_exploits()
        self.view.update(self._trials())

    def _trials(self) -> list[TrialRecord]:
        return list(self.records.values())

    def _end(self, record: TrialRecord, status: Any, error: str | None = None) -> None:
        if record.status in ENDED:
            return
        record.ended(status, time.time(), error)
        assert record.end_time is not None
        # Ray Train's own copies of its checkpoints (multi-worker trials) are of no use now:
        # Tune holds the kept ones. A trial Tune stopped can end before its driver deletes them.
        remove_train_copies(self.train_storage, f"{record.name}-*")
        best = record.best_checkpoint(self.score_attribute, self.score_order)
        self.log.end_trial(record, status=status, best=best)
        self.view.update(self._trials(), force=True)

    def end_unfinished(self) -> bool:
        """Mark trials that were still running as interrupted; True if there were any."""
        unfinished = [r for r in self.records.values() if r.status not in ENDED]
        for record in unfinished:
            self._end(record, "interrupted")
        return bool(unfinished)


# Config keys that set how much memory a step takes (recorded when a trial runs out of it).
_BATCH_SETTING = re.compile(r"batch|accum|precision|checkpointing|parallel|context|seq|block", re.IGNORECASE)


def _last_failure(text: str) -> str:
    """The last of the "Failure # N" sections Tune appends to a trial's error file."""
    marker = text.rfind("Failure # ")
    return text[marker:] if marker >= 0 else text


def _trial_error(trial: Any) -> str:
    """The trial's error text from the file Tune writes (its last traceback)."""
    path = getattr(trial, "error_file", None)
    if path and os.path.exists(path):
        text = Path(path).read_text(errors="replace").strip()
        if text:
            return text
    return "the trial failed without an error message (see the Ray logs)"
