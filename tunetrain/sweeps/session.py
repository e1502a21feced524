"""One sweep from a resolved experiment: plan it (checked before Ray starts where it can be),
print the dry run or run it, then the summary and the report. Every API function that runs
trials (sweep, resume, smoke, replay) comes through :func:`execute`."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tunetrain import space as spaces
from tunetrain.errors import ExperimentError, InterruptedBeforeStart
from tunetrain.experiment import Experiment
from tunetrain.records import sweep_command
from tunetrain.redaction import redact
from tunetrain.storage import DEFAULT_STORAGE, Storage, check_storage
from tunetrain.sweeps.result import Status, SweepResult
from tunetrain.tracking.registry import CHAMPION_ALIAS

if TYPE_CHECKING:
    from tunetrain.tracking import TrackingURI


def execute(
    experiment: Experiment,
    *,
    tracking_uri: str | TrackingURI | None,
    storage: str | None,
    address: str | None,
    name: str | None,
    command: list[str],
    stream: TextIO,
    request: dict[str, Any] | None = None,
    dry_run: bool = False,
    report: bool = True,
    trial_seeds: tuple[int, ...] = (),
    initial_checkpoint: str | None = None,
    budget: Any = None,
    require_estimate: bool = False,
    resume: Any = None,
    ask_above: str | None = None,
    ask_flag: str = "--ask-above",
    yes: bool = False,
    register: bool = False,
    alias: str | None = CHAMPION_ALIAS,
    recorder: Callable[..., Any] | None = None,
    view: Callable[..., Any] | None = None,
) -> SweepResult:
    """Plan, run and summarise a sweep (or resume ``resume``, a :class:`tunetrain.sweeps.resumable.Resumable`)."""

    where = _where(
        experiment, tracking_uri=tracking_uri, storage=storage, address=address, dry_run=dry_run, recorder=recorder
    )
    _warn_beside_other_rays(where, stream)
    warm = None
    if experiment.warm_start:  # the earlier sweeps' trials, read before anything starts
        from tunetrain.sweeps.warm import read_warm_start

        warm = read_warm_start(experiment.warm_start, experiment, tracking_uri=where.tracking_uri)
        for line in warm.lines:
            print(f"tunetrain: {line}", file=stream, flush=True)
    from tunetrain.sweeps.plan import plan_sweep

    plan = plan_sweep(
        experiment,
        nodes=where.nodes,
        tracking_uri=where.tracking_uri,
        storage_path=where.storage,
        address=where.address,
        sweep_name=name,
        argv=command,
        trial_seeds=trial_seeds,
        initial_checkpoint=initial_checkpoint,
        budget=budget,
        request=request,
        warm_points=warm.points if warm else (),
        warm_sources=warm.sources if warm else (),
    )
    if resume is not None:
        plan = _resumed_plan(plan, resume)
    from tunetrain.algorithms import budget_warning

    if (warning := budget_warning(plan.experiment)) is not None:
        print(f"tunetrain: warning: {warning}", file=stream, flush=True)
    if experiment.preflight is not None:  # a dry run too: it says whether the sweep would start
        experiment.preflight(spaces.merge({}, experiment.defaults))  # a copy: preflight cannot change it
    if dry_run:
        _dry_run(plan, require_estimate=require_estimate, stream=stream)
        return SweepResult(
            name=plan.sweep_name,
            status="dry_run",
            metric=experiment.primary_metric,
            mode=experiment.primary_mode,
            tracking_uri=where.tracking_uri,
            storage_path=plan.sweep_dir,
            plan=plan,
        )
    if plan.baseline_note:
        print(f"tunetrain: {plan.baseline_note}.", file=stream, flush=True)
    if resume is None:  # a resumed sweep was consented to when it started
        plan = dataclasses.replace(
            plan, consent=_consent(plan, ask_above=ask_above, ask_flag=ask_flag, yes=yes, stream=stream)
        )
    print(
        f"Sweep {plan.sweep_name}: {experiment.total_trials} trials"
        + (" and a baseline" if plan.baseline is not None else "")
        + f", at most {plan.max_concurrent} at once, "
        f"metric {experiment.primary_metric} ({experiment.primary_mode}); {where.store.line()}",
        file=stream,
        flush=True,
    )
    outcome = _run(plan, where, resume=resume, recorder=recorder, view=view, stream=stream)
    return _result(plan, outcome, report=report, register=register, alias=alias, stream=stream)


def _warn_beside_other_rays(where: _Where, stream: TextIO) -> None:
    """An embedded Ray about to start beside another one (another sweep's): said, with the fix."""
    from tunetrain import cluster

    if where.address is None and (others := cluster.other_rays()):
        print(
            f"tunetrain: warning: another Ray runs on this machine ({', '.join(others)}; another sweep's embedded "
            "Ray?), and this sweep starts one of its own beside it: each counts the machine's CPUs as its own. "
            "To share one, start it with `tunetrain up` before the sweeps (docs/cluster.md).",
            file=stream,
            flush=True,
        )


def _run(
    plan: Any,
    where: _Where,
    *,
    resume: Any,
    recorder: Callable[..., Any] | None,
    view: Callable[..., Any] | None,
    stream: TextIO,
) -> Any:
    """Ray connected (the store opened meanwhile) and the plan run: its SweepOutcome."""
    from tunetrain import cluster, tracking
    from tunetrain.sweeps import run

    log_dir = plan.local_dir / "logs"
    # While Ray starts; not for a recorder of the caller's (recording off opens no store).
    opening = tracking.open_in_background(where.tracking_uri) if recorder is None else None
    try:
        ray_logs = cluster.connect(where.address, log_dir=log_dir)
        if opening is not None:
            opening.join()  # one open at a time: a new sqlite store's migrations must not run twice
    except KeyboardInterrupt:
        if resume is None:  # nothing journaled yet: no resume to promise
            raise InterruptedBeforeStart from None
        raise
    print(
        f"Ray: {where.address or 'embedded'} ({where.address_source}); logs: {ray_logs} "
        f"(driver log: {log_dir / 'ray_driver.log'})",
        file=stream,
        flush=True,
    )
    return run.run_sweep(
        plan,
        journal=resume.journal if resume is not None else None,  # read once, when the resume was checked
        stream=stream,
        log_dir=Path(ray_logs),
        recorder=recorder or tracking.SweepRecorder,
        **({"view": view} if view is not None else {}),
    )


@dataclasses.dataclass(frozen=True)
class _Where:
    """Where a sweep runs, resolved and checked before Ray starts."""

    store: TrackingURI  # the tracking store, with where it came from
    address: str | None  # the Ray cluster (None: an embedded Ray)
    address_source: str  # where the address came from, for the line that names it
    storage: str
    nodes: list[Any]  # the cluster's nodes (this machine's, for an embedded Ray)

    @property
    def tracking_uri(self) -> str:
        return self.store.uri


def _where(
    experiment: Experiment,
    *,
    tracking_uri: str | TrackingURI | None,
    storage: str | None,
    address: str | None,
    dry_run: bool,
    recorder: Callable[..., Any] | None,
) -> _Where:
    """The store and the cluster, as MLflow's and Ray's tools find them (flag, then
    MLFLOW_TRACKING_URI / RAY_ADDRESS, then the embedded default), and the storage: a
    server that does not answer, a store that would refuse the sweep's runs, a storage
    that cannot be written, a cluster of several nodes without a shared storage are errors
    now, before anything starts."""
    from tunetrain import cluster, tracking

    store = (
        tracking_uri if isinstance(tracking_uri, tracking.TrackingURI) else tracking.resolve_tracking_uri(tracking_uri)
    )
    tracking.check_reachable(store)
    if recorder is None:  # the store must take the sweep's runs: refused now, not after Ray started
        tracking.check_writable(store, experiment.name)
    address, address_source = cluster.resolve_address(address)
    storage_given, storage = storage is not None, storage or DEFAULT_STORAGE
    check_storage(storage)  # writable, with room: refused now, not when the disk fills mid-sweep
    # The process's own Ray is asked; an embedded Ray gets this machine's resources, so the
    # plan is checked before Ray starts; a cluster is asked (connecting starts nothing).
    if address is None:
        return _Where(store, address, address_source, storage, cluster.local_nodes())
    if dry_run:  # read, not connected to: a dry run starts no driver and writes no log
        nodes = cluster.read_nodes(address)
    else:
        log_dir = Path(DEFAULT_STORAGE if Storage(storage).is_uri else storage).resolve() / "logs"
        cluster.connect(address, log_dir=log_dir)
        nodes = cluster.cluster_nodes()
    if len(nodes) > 1 and not storage_given:
        raise ExperimentError(
            f"The cluster at {address} has {len(nodes)} nodes, and no --storage was given: trial "
            f"checkpoints and sweep state would go to ./{DEFAULT_STORAGE} on this machine only, which the "
            "other nodes cannot see.",
            fix="Pass --storage: a path on a filesystem every node shares, or a URI (s3://bucket/path); "
            "see docs/cluster.md.",
        )
    return _Where(store, address, address_source, storage, nodes)


def _result(plan: Any, outcome: Any, *, report: bool, register: bool, alias: str | None, stream: TextIO) -> SweepResult:
    """After the run: the summary, the report, the sweep's status (what the record lacks
    said, with the fix), the best trial registered, and the result."""
    from tunetrain import tracking
    from tunetrain.console import summary

    tracking_uri = plan.tracking_uri
    print("", file=stream)
    print(summary(outcome, ui_command=tracking.ui_command(tracking_uri)), file=stream, flush=True)
    if report and outcome.parent_run_id and not outcome.bad_input:
        end_of_sweep_report(outcome, tracking_uri, plan.local_dir, stream)
    status = _status(plan, outcome, stream)
    registered = None
    if register and status == "ok" and outcome.parent_run_id and not outcome.interrupted:
        from tunetrain.sweeps.handoff import register_at_end

        registered = register_at_end(outcome, plan.experiment, tracking_uri=tracking_uri, stream=stream, alias=alias)
    return SweepResult(
        name=plan.sweep_name,
        status=status,
        metric=outcome.metric,
        mode=outcome.mode,
        tracking_uri=tracking_uri,
        storage_path=plan.sweep_dir,
        trials=outcome.trials,
        experiment_id=outcome.experiment_id,
        parent_run_id=outcome.parent_run_id,
        run_ids=dict(outcome.run_ids),
        interrupted=outcome.interrupted,
        error=outcome.bad_input,
        outcome=outcome,
        plan=plan,
        registered=registered,
    )


def _status(plan: Any, outcome: Any, stream: TextIO) -> Status:
    """The sweep's status; bad input, a refused record or an unwritten journal said here."""
    if outcome.bad_input:
        print(f"\ntunetrain: error: {outcome.bad_input}\n  Fix: {outcome.bad_input_fix}", file=stream)
        return "bad_input"
    if outcome.record_errors:
        print(
            f"\ntunetrain: error: the MLflow store at {redact(outcome.tracking_uri)} refused {outcome.record_errors} "
            f"record(s); the first: {outcome.record_error}\n  The sweep's record is incomplete; what was refused "
            f"is kept in {plan.journal_path}: fix the cause, then write it with "
            f"`{sweep_command('sync', plan.sweep_name, plan.storage_path)}`.",
            file=stream,
        )
        return "not_recorded"
    if outcome.journal_error:
        print(
            f"\ntunetrain: error: the sweep's tracking journal could not be written: {outcome.journal_error}.\n"
            f"  Every record went on to the MLflow store at {redact(outcome.tracking_uri)}, but the sweep has no "
            "complete local copy to resume from or to send again; free space on its disk.",
            file=stream,
        )
        return "not_recorded"
    return "ok" if any(t.status in ("completed", "stopped_early") for t in outcome.trials) else "all_failed"


def _dry_run(plan: Any, *, require_estimate: bool, stream: TextIO) -> None:
    """The plan, and its cost from the newest smoke run of the same trial shape."""
    from tunetrain import tracking
    from tunetrain.sweeps.cost import estimate
    from tunetrain.sweeps.plan import describe_plan, experiment_shape

    experiment = plan.experiment
    print(describe_plan(plan), file=stream)
    shape = experiment_shape(experiment)
    smoke = tracking.latest_smoke_timings(plan.tracking_uri, experiment.name, shape=shape)
    unfit = ""
    if smoke is None and (other := tracking.latest_smoke_timings(plan.tracking_uri, experiment.name)) is not None:
        unfit = (
            f"The newest smoke run, {other.sweep}, ran {other.shape_text()}, and this sweep runs "
            f"{tracking.describe_shape(shape)}: its start-up and step times do not apply."
        )
    text = estimate.describe(
        experiment, max_concurrent=plan.max_concurrent, smoke=smoke, unfit=unfit, trials=plan.total_trials
    )
    print(text, file=stream)
    if require_estimate and smoke is None:
        raise ExperimentError(
            f"--estimate needs the timings of a smoke run of {experiment.name!r} with "
            f"{tracking.describe_shape(shape)}, and the store {redact(plan.tracking_uri)} has none. {unfit}".rstrip(),
            fix="Run `tunetrain sweep FILE --smoke` first with the sweep's --workers-per-trial and "
            "--trial-runner (same --tracking-uri).",
        )


def _consent(plan: Any, *, ask_above: str | None, ask_flag: str, yes: bool, stream: TextIO) -> str:
    """``--ask-above``: ask (or refuse) when the sweep's estimate or budget exceeds the
    threshold (:mod:`tunetrain.sweeps.cost.consent`); what is recorded on the parent run."""
    from tunetrain import tracking
    from tunetrain.sweeps.cost import consent, estimate
    from tunetrain.sweeps.plan import experiment_shape

    experiment = plan.experiment
    gpus = experiment.max_workers * experiment.worker_resources.get("GPU", 0.0)
    limit = consent.threshold(ask_above, gpus_per_trial=gpus, flag=ask_flag)
    if limit is None:
        return ""
    smoke = tracking.latest_smoke_timings(plan.tracking_uri, experiment.name, shape=experiment_shape(experiment))
    expected = None
    if smoke is not None:
        expected = estimate.estimate(
            experiment,
            max_concurrent=plan.max_concurrent,
            startup_s=smoke.startup_s,
            iteration_s=smoke.iteration_s,
            trials=plan.total_trials,
        )
    reasons = consent.exceeded(limit, estimate=expected, budget=plan.budget)
    if not reasons:
        known = "no estimate (no smoke run of this trial shape)" if expected is None else "the estimate"
        return f"not asked: {known} and the budget are within {limit.budget.text}"
    details = estimate.describe(experiment, max_concurrent=plan.max_concurrent, smoke=smoke, trials=plan.total_trials)
    return consent.obtain(reasons, details=details, yes=yes, stream=stream) + ": " + "; ".join(reasons)


def _resumed_plan(plan: Any, resume: Any) -> Any:
    """The plan of a resumed sweep: its own id, and refused when the experiment changed."""
    from tunetrain.sweeps.plan import sweep_facts

    plan = dataclasses.replace(plan, sweep_id=resume.sweep_id, resume=True)
    changed = resume.started.changes(sweep_facts(plan))
    if changed:
        raise ExperimentError(
            f"Sweep {resume.name} cannot resume: the experiment changed since it started:\n  - "
            + "\n  - ".join(changed),
            fix="Resume with the experiment as it was (the sweep's MLflow run holds the file it started with, "
            "and its command line is its tunetrain.command tag), or start a new sweep with another --name. "
            "To run more trials, pass a larger --num-samples.",
        )
    grows = plan.experiment.num_samples > resume.num_samples
    if grows and plan.experiment.searcher in ("random", "grid"):
        raise ExperimentError(
            f"Sweep {resume.name} used searcher {plan.experiment.searcher!r}, whose trials Ray Tune fixes when the "
            f"sweep starts; it cannot grow from {resume.num_samples} to {plan.experiment.num_samples} trials.",
            fix=f"Resume with --num-samples {resume.num_samples} (or leave it out), and start a new sweep for more.",
        )
    return plan


def end_of_sweep_report(outcome: Any, tracking_uri: str, folder: Path, stream: TextIO) -> None:
    """The sweep report, written after the summary; a failure here never changes the sweep's
    result (everything is recorded already), it is only said."""
    from tunetrain.results.analysis import load_sweep
    from tunetrain.results.report import write_report

    try:
        sweep = load_sweep(outcome.parent_run_id, tracking_uri=tracking_uri)
        path = write_report(sweep, folder / "report.html")
    except Exception as exc:  # the report is a convenience: say why it is missing and go on
        print(f"Sweep report not written ({type(exc).__name__}: {exc}); retry: tunetrain report", file=stream)
        return
    print(f"Report: {path} (also on the sweep's MLflow run, artifacts/report/)", file=stream, flush=True)
