"""Running a planned sweep through Ray Tune to the end (or Ctrl+C), and closing its record
whatever happens; resuming one from its journal and Tune's saved state."""

from __future__ import annotations

import dataclasses
import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from ray import tune
from ray.tune.search import ConcurrencyLimiter

from tunetrain import _internals, tracking
from tunetrain import space as spaces
from tunetrain.algorithms import (
    asha_rungs,
    build_scheduler,
    build_searcher,
)
from tunetrain.console import LiveView
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.records import ENDED, SweepOutcome, TrialRecord, checkpoint_usage, pareto_front, sweep_command
from tunetrain.redaction import redact
from tunetrain.rungs import rung_rankings
from tunetrain.storage import Storage
from tunetrain.sweeps.callback import SweepCallback
from tunetrain.sweeps.plan import SweepPlan, sweep_facts, train_storage
from tunetrain.sweeps.policy import BaselineTrial, SweepStopper, budget_gate, every_step, refuse_over_budget
from tunetrain.tracking import Journal, JournalState, Recorder, SweepLog, SweepRecorder
from tunetrain.trial import (
    DRIVER_RESOURCES,
    TrainGroupCleanup,
    TrialNamer,
    TrialSpec,
    build_datasets,
    remove_train_copies,
    run_trial,
    run_trial_in_process,
    run_trial_on_group,
    trial_dirname,
)


def journaled_trials(entries: list[dict[str, Any]], experiment: Experiment) -> dict[str, TrialRecord]:
    """The trials a sweep's journal recorded, as the sweep's callback had them (by Tune trial
    id), their metrics and checkpoints judged as ``experiment`` judges them."""
    return tracking.records_from_journal(
        entries,
        metric=experiment.primary_metric,
        mode=experiment.primary_mode,
        score=experiment.checkpoint.score_attribute or experiment.primary_metric,
    )


def point_at_kept_checkpoints(sweep_dir: str, journaled: Mapping[str, TrialRecord]) -> list[str]:
    """Before Tune restores a sweep: each unfinished trial whose latest checkpoint, as Tune's
    saved state names it, is gone goes on from the newest checkpoint the journal recorded
    that still exists (else from the start); a saved state cut by the kill is repaired first.
    Returns a line per change.

    Tune deletes a trial's older checkpoints as newer ones arrive, but saves its state at
    most once a second: a sweep killed in between leaves a state naming a deleted checkpoint
    (see :func:`tunetrain._internals.retarget_tune_checkpoints`, which rewrites it).
    """
    if Storage(sweep_dir).is_uri:  # a cloud store: left to Tune
        return []
    repaired = _internals.repair_torn_tune_state(sweep_dir)  # a kill during Tune's copy of its state

    def choose(trial_id: str, missing: str) -> tuple[str, int] | None:
        record = journaled.get(trial_id)
        if record is None or (record.status in ENDED and record.status != "interrupted"):
            raise LookupError(trial_id)  # finished: Tune will not run it again
        kept = [c for c in record.checkpoints if os.path.isdir(c["path"])]
        if not kept:
            return None
        newest = max(kept, key=lambda c: int(c["step"]))
        return str(newest["path"]), int(newest["step"])

    lines = [repaired] if repaired else []
    for trial_id, missing, choice in _internals.retarget_tune_checkpoints(sweep_dir, choose):
        name, gone = journaled[trial_id].name, os.path.basename(missing)
        if choice is None:
            lines.append(f"{name}: Tune's saved state names {gone}, which is gone; it starts again.")
        else:
            lines.append(
                f"{name}: Tune's saved state names {gone}, which its retention had deleted; "
                f"it goes on from {os.path.basename(choice[0])} (step {choice[1]})."
            )
    return lines


def run_sweep(
    plan: SweepPlan,
    *,
    journal: JournalState | None = None,
    stream: TextIO,
    log_dir: Path,
    recorder: Callable[..., Recorder] = SweepRecorder,
    view: Callable[..., LiveView] = LiveView,
) -> SweepOutcome:
    """Run the planned sweep to the end (or to Ctrl+C) and record it; Ray must be connected.

    ``recorder`` makes the sweep's recorder from :class:`SweepRecorder`'s keywords
    (:class:`tunetrain.tracking.NullRecorder`: recording off); ``view`` makes its console
    view from :class:`LiveView`'s.
    """
    started = time.perf_counter()
    exp = plan.experiment
    opened = _open_record(plan, journal=journal, recorder=recorder, stream=stream)
    interrupted = False
    crashed = False
    stopper = SweepStopper(exp)
    gate = None
    live = view(metric=exp.primary_metric, mode=exp.primary_mode, total=plan.total_trials, stream=stream)
    callback: SweepCallback | None = None
    scheduler: Any = None
    # From here on the parent run exists: whatever is raised, the finally closes it.
    try:
        gate = budget_gate(exp, plan.budget)
        scheduler = _scheduler(plan, gate, stopper, journaled=opened.journaled)
        callback = SweepCallback(
            plan=plan,
            log=opened.log,
            view=live,
            stopper=stopper,
            scheduler=scheduler,
            budget_gate=gate,
            records=opened.journaled,
        )
        with _internals.signal_handlers_kept():  # Tune leaves its Ctrl+C handler installed
            _tuner(plan, scheduler, callback, stopper, journaled=opened.journaled, stream=stream).fit()
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:
        crashed = True
        raise
    finally:
        # Whatever happened, nothing stays RUNNING: close every trial and the sweep.
        if callback is not None:
            interrupted = callback.end_unfinished() or callback.stop_signalled or interrupted
        records = sorted(callback.records.values(), key=lambda r: r.index) if callback else []
        live.update(records, force=True)
        live.close()
        outcome = SweepOutcome(
            name=plan.name,
            sweep_id=plan.sweep_id,
            metric=exp.primary_metric,
            mode=exp.primary_mode,
            trials=records,
            experiment_id=opened.log.recorder.experiment_id,
            parent_run_id=opened.parent_run_id,
            tracking_uri=plan.tracking_uri,
            run_ids={},
            bad_input=stopper.bad_input,
            bad_input_fix=stopper.bad_input_fix,
            interrupted=interrupted and stopper.bad_input is None,
            log_path=str(log_dir),
            storage_path=f"{plan.storage_path}/{plan.name}",
            stop_reason=gate.reason if gate is not None and gate.refused else "",
            searched=spaces.free_dimensions(exp.space),
            **_early_stopping(exp, records),
            overruled_stops=dict(getattr(scheduler, "overruled", {})),
        )
        _close_record(plan, outcome, opened, crashed=crashed, stream=stream)
        outcome.sweep_s = time.perf_counter() - started
    return outcome


def _early_stopping(exp: Experiment, records: list[TrialRecord]) -> dict[str, Any]:
    """Under ASHA, how well each of its rungs ranked the sweep's trials (tunetrain.rungs)."""
    asha = asha_rungs(exp)
    if asha is None:
        return {}
    rungs, max_t = asha
    return {
        "rung_rankings": rung_rankings([r.values for r in records], rungs, max_t),
        "grace_period": rungs[0] if rungs else 1,
    }


@dataclasses.dataclass
class _Opened:
    """The sweep's record as opened: its recorder, parent run, and (resumed) journaled trials."""

    log: SweepLog  # the recorder, spoken to in records
    parent_run_id: str | None
    journaled: dict[str, TrialRecord]
    resumes: int  # 0 for a new sweep, else which resume this is


def _open_record(
    plan: SweepPlan, *, journal: JournalState | None, recorder: Callable[..., Recorder], stream: TextIO
) -> _Opened:
    """The recorder made and the parent run started (or reopened, for a resume), with the
    experiment file and its uncommitted diff; refused when the store refuses the parent."""
    exp = plan.experiment
    journaled: dict[str, TrialRecord] = {}
    resumes = 0
    state = None
    if plan.resume:  # the trials as the sweep recorded them before it stopped
        state = journal if journal is not None else Journal.read(plan.journal_path)
        journaled = journaled_trials(state.entries, exp)
        resumes = sum(1 for entry in state.entries if entry["op"] == "resume_sweep") + 1
    sweep_recorder = recorder(
        journal_state=state,  # the recorder reads no second copy of it
        tracking_uri=plan.tracking_uri,
        experiment_name=exp.name,
        artifact_location=tracking.artifact_location(plan.tracking_uri),
        error_stream=stream,
        journal=plan.journal_path,
        header={
            "sweep_name": plan.name,
            "sweep_id": plan.sweep_id,
            "command": plan.command,
            "cwd": os.getcwd(),
            "request": plan.request,
        },
    )
    log = SweepLog(sweep_recorder)
    if plan.resume:
        parent_run_id = log.resume_sweep(sweep_facts(plan), resumes=resumes)
        return _Opened(log, parent_run_id, journaled, resumes)
    parent_run_id = log.start_sweep(sweep_facts(plan))
    if parent_run_id is None and sweep_recorder.error_count:  # refused, not away: nothing would be recorded
        sweep_recorder.close()
        raise ExperimentError(
            f"The MLflow store at {redact(plan.tracking_uri)} refused the sweep's parent run: "
            f"{sweep_recorder.first_error}",
            fix="Fix what the store says; nothing was trained.",
        )
    return _Opened(log, parent_run_id, journaled, resumes)


def _scheduler(plan: SweepPlan, gate: Any, stopper: SweepStopper, *, journaled: Mapping[str, TrialRecord]) -> Any:
    """The experiment's scheduler, with the policies asked at each step of Tune's loop (the
    budget: no launch over it; max_trial_seconds: a trial that stops reporting is stopped)
    and the baseline trial exempt from early stopping (the one a resumed sweep journaled)."""
    scheduler = build_scheduler(plan.experiment)
    scheduler.before_launch = every_step(refuse_over_budget(gate) if gate is not None else None, stopper.overdue)
    if plan.baseline is not None:
        claimed = next((r.trial_id for r in journaled.values() if r.baseline), None)
        scheduler.exempt = BaselineTrial(plan.baseline, trial_id=claimed)
    return scheduler


def _tuner(
    plan: SweepPlan,
    scheduler: Any,
    callback: SweepCallback,
    stopper: SweepStopper,
    *,
    journaled: Mapping[str, TrialRecord],
    stream: TextIO,
) -> Any:
    """Ray Tune's Tuner for the plan (restored from Tune's saved state for a resume): the
    searcher behind its concurrency limit, the trainable, the stopper and the callback."""
    exp = plan.experiment
    live_limit = plan.searcher_live_limit
    searcher, first = build_searcher(
        exp,
        seed=plan.root_seed,
        max_concurrent=live_limit,
        points=plan.searcher_points,
        evaluated=list(plan.warm_points),
        stopped=scheduler.early_stopped if hasattr(scheduler, "early_stopped") else None,
    )
    trainable = _trainable(plan, journaled, stream=stream)
    limited = exp.searcher not in ("random", "grid")
    search_alg: Any = searcher
    if plan.resume and limited:
        search_alg = _internals.resumed_search(
            ConcurrencyLimiter(searcher, max_concurrent=live_limit),  # type: ignore[arg-type]  # a Searcher here
            plan.tune_samples,
        )
    tune_config = tune.TuneConfig(
        # metric and mode are the scheduler's and the searcher's own (the searcher may
        # search on several metrics, the scheduler decides on the first).
        scheduler=scheduler,
        search_alg=search_alg,
        num_samples=plan.tune_samples,
        max_concurrent_trials=live_limit if limited and not plan.resume else None,
        time_budget_s=exp.stop.time_budget_s,
        trial_name_creator=TrialNamer(first),
        trial_dirname_creator=trial_dirname,
        reuse_actors=exp.reuses_trial_process,
    )
    run_config = tune.RunConfig(
        name=plan.name,
        storage_path=plan.storage_path,
        stop=stopper,
        callbacks=[callback, TrainGroupCleanup()],
        failure_config=tune.FailureConfig(max_failures=exp.max_failures if exp.reuses_trial_process else 0),
        # Every trial's checkpoints are Tune's (see tunetrain/trial/), kept by the policy;
        # under PBT all of them: a recipient may restore any donor's at any time.
        checkpoint_config=tune.CheckpointConfig(
            num_to_keep=None if callback.population_based else exp.checkpoint.num_to_keep,
            checkpoint_score_attribute=callback.score_attribute,
            checkpoint_score_order=callback.score_order,
        ),
        verbose=0,
        progress_reporter=_NoTuneOutput(),
    )
    if not plan.resume:
        return tune.Tuner(trainable, param_space=plan.param_space, tune_config=tune_config, run_config=run_config)
    for line in point_at_kept_checkpoints(plan.sweep_dir, journaled):
        print(line, file=stream, flush=True)
    # This run's scheduler, stopper and callbacks (the recorder, the live view, the
    # journaled trials) take the place of those Tune pickled when the sweep started.
    return _internals.restore_tuner(
        plan.sweep_dir, trainable, param_space=plan.param_space, tune_config=tune_config, run_config=run_config
    )


class _NoTuneOutput(tune.ProgressReporter):
    """Tune's own progress output off (tunetrain's live view shows the sweep). ``verbose=0``
    is not enough in a notebook: there Tune makes its ``JupyterNotebookReporter`` anyway,
    which clears the cell's output when it starts (Ray 2.60), wiping the lines tunetrain
    printed before (the store, the plan)."""

    def should_report(self, trials: list[Any], done: bool = False) -> bool:
        return False

    def report(self, trials: list[Any], done: bool, *sys_info: str) -> None:
        return None


def _trainable(plan: SweepPlan, journaled: Mapping[str, TrialRecord], *, stream: TextIO) -> Any:
    """The Tune trainable of the experiment's trial runner, with its resources."""
    exp = plan.experiment
    spec = TrialSpec(
        train_loop=exp.train_loop,
        num_workers=exp.workers_per_trial,
        use_gpu=exp.use_gpu,
        dist_backend=exp.backend,
        resources_per_worker=exp.worker_resources,
        placement_strategy=exp.placement_strategy,
        root_seed=plan.root_seed,
        storage_path=train_storage(plan),
        trial_seeds=plan.trial_seeds,
        deterministic=exp.deterministic,
        initial_checkpoint=plan.initial_checkpoint,
        objectives=tuple((metric, str(mode)) for metric, mode in exp.objectives),
        # A TorchTrainer trial restarts its workers through Ray Train (same Train run);
        # an in-process or worker-group trial is restarted by Tune (below).
        max_failures=0 if exp.reuses_trial_process else exp.max_failures,
        # Trials that ended before a crash, which Tune's last saved state still had running.
        finished=frozenset(r.name for r in journaled.values() if r.status in ENDED and r.status != "interrupted"),
        datasets=build_datasets(exp.datasets, stream=stream),  # once, before the first trial
        data_config=exp.data_config,
    )
    if exp.in_process:
        # The trial itself trains: it holds the worker's resources, and Tune reuses its
        # process for the next trial (no start-up per trial).
        return tune.with_resources(tune.with_parameters(run_trial_in_process, spec=spec), exp.worker_resources)
    if exp.runner == "worker_group":
        # The trial's placement group: its own token bundle, then one per worker, placed
        # by the experiment's strategy; Tune reuses the process (and its workers) for
        # the next trial of the same shape.
        assert isinstance(exp.workers_per_trial, int)  # a fixed number: Experiment.runner
        bundles = [DRIVER_RESOURCES] + [exp.worker_resources] * exp.workers_per_trial
        return tune.with_resources(
            tune.with_parameters(run_trial_on_group, spec=spec),
            tune.PlacementGroupFactory(bundles, strategy=exp.placement_strategy),
        )
    return tune.with_resources(tune.with_parameters(run_trial, spec=spec), DRIVER_RESOURCES)


def _close_record(plan: SweepPlan, outcome: SweepOutcome, opened: _Opened, *, crashed: bool, stream: TextIO) -> None:
    """The end of the sweep's record, whatever happened: the Pareto front, the checkpoints'
    disk use, the best trial and the counts on the parent run, which ends FINISHED, KILLED
    or FAILED; the store waited for once (at most the recorder's drain_timeout_s in all,
    2 minutes by default, while it is away); what did not reach it said, with the sync
    command. ``outcome`` gets the run ids and the record's errors."""
    exp, log, records = plan.experiment, opened.log, outcome.trials
    recorder = log.recorder
    # Every Train run has ended: none of Train's own checkpoint copies is needed.
    remove_train_copies(plan.sweep_dir, "train")
    disk_measured = not Storage(plan.storage_path).is_uri
    if disk_measured:  # what the kept checkpoints cost on disk
        outcome.checkpoints_kept, outcome.checkpoint_bytes = checkpoint_usage(plan.sweep_dir)
    end_by = time.monotonic() + recorder.drain_timeout_s

    def left() -> float:
        return max(0.0, end_by - time.monotonic())

    if exp.multi_objective:
        outcome.objectives = [(metric, str(mode)) for metric, mode in exp.objectives]
        outcome.pareto = pareto_front(records, outcome.objectives)
        log.pareto_front(outcome.pareto)
        log.flush(timeout=left())  # the Pareto trials' run ids, for the parent's tags
    status = "FAILED" if crashed or outcome.bad_input else ("KILLED" if outcome.interrupted else "FINISHED")
    log.end_sweep(outcome, status=status, resumes=opened.resumes, disk_measured=disk_measured)
    recorder.flush(timeout=left())
    outcome.run_ids = {r.name: rid for r in records if (rid := recorder.run_id(r.name))}
    recorder.close(timeout=left())
    if recorder.unsent:
        print(
            f"tunetrain: {recorder.unsent} record(s) did not reach the MLflow store at "
            f"{redact(plan.tracking_uri)}; "
            f"they are kept in {plan.journal_path}.\n  Write them when it is back: "
            f"{sweep_command('sync', plan.name, plan.storage_path)}",
            file=stream,
        )
    outcome.record_errors, outcome.record_error = recorder.error_count, recorder.first_error
    outcome.journal_error = recorder.journal_error
