"""One sweep from its request to its result, as a :class:`Session` (in the manner of optuna's
``Study``): where it runs, its plan (checked before Ray starts where it can be), the dry run
or the consent and the run, then the finish (summary, report, hand-off). Every API function
that runs trials (sweep, resume, smoke, replay) comes through :func:`execute`."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tunetrain import space as spaces
from tunetrain.errors import ExperimentError, InterruptedBeforeStart
from tunetrain.experiment import Experiment
from tunetrain.records import SweepOutcome, sweep_command
from tunetrain.redaction import redact
from tunetrain.storage import DEFAULT_STORAGE
from tunetrain.sweeps.cost.budget import parse_budget
from tunetrain.sweeps.request import SweepRequest
from tunetrain.sweeps.result import Status, SweepResult
from tunetrain.sweeps.where import Where, locate

if TYPE_CHECKING:
    from tunetrain.sweeps.plan import SweepPlan
    from tunetrain.sweeps.resumable import Resumable
    from tunetrain.tracking import Recorder


@dataclasses.dataclass(frozen=True, kw_only=True)
class Launch:
    """How a session runs what its request asks; none of it is the sweep's own (nothing here
    is saved for a resume)."""

    stream: TextIO = dataclasses.field(default_factory=lambda: sys.stdout)
    dry_run: bool = False  # the plan (and the estimate) printed; nothing starts
    require_estimate: bool = False  # --estimate: a dry run that must have a smoke run's timings
    resume: Resumable | None = None  # the stopped sweep this session continues
    saved_request: dict[str, Any] | None = None  # the request as the journal keeps it (None: not rebuildable)
    trial_seeds: tuple[int, ...] = ()  # a replay: the recorded seeds of trials 0, 1, ...
    initial_checkpoint: str | None = None  # a smoke run's round trip: trials start from it
    ask_flag: str = "--ask-above"  # the flag the consent question names (or --confirm-above)
    recorder: Callable[..., Recorder] | None = None  # None: MLflow's (tracking.SweepRecorder)
    view: Callable[..., Any] | None = None  # the console view (None: the live status line)


def execute(
    request: SweepRequest, *, experiment: Experiment | None = None, launch: Launch | None = None
) -> SweepResult:
    """Plan, run and summarise the sweep ``request`` asks for (``experiment``: the one it
    resolves to, or one derived from it, as smoke's tiny trial; default ``request.resolve()``)."""
    return Session(request, experiment=experiment, launch=launch or Launch()).execute()


def run_request(
    request: SweepRequest,
    *,
    ask_flag: str = "--ask-above",
    resume: bool = False,
    dry_run: bool = False,
    require_estimate: bool = False,
    recorder: Callable[..., Any] | None = None,
    stream: TextIO | None = None,
) -> SweepResult:
    """Run the sweep ``request`` asks for (what :func:`sweep` and ``tunetrain sweep`` do once
    they have built it; :func:`resume` once it has rebuilt it from the journal, with every
    choice the sweep started with); the keywords are :func:`sweep`'s."""
    from tunetrain.sweeps import resumable as resuming
    from tunetrain.sweeps.warm import config_of
    from tunetrain.tracking import resolve_tracking_uri

    out = stream or sys.stdout
    if (config_from := request.config_from) is not None:  # its config pinned once, the overrides winning
        # The store resolved once here, and handed down: the session does not resolve it again.
        request = dataclasses.replace(request, tracking_uri=resolve_tracking_uri(request.tracking_uri))
        pinned = config_of(config_from, tracking_uri=request.tracking_uri)
        request = dataclasses.replace(request, overrides={**pinned, **request.overrides}, config_from=None)
    exp = request.resolve()
    if request.ask_above is not None:  # refused now, a dry run too
        parse_budget(request.ask_above, flag=ask_flag)
    saved = request.saved(exp)
    resumable = None
    name = request.name
    if resume:
        storage_root = request.storage or DEFAULT_STORAGE
        name = name or resuming.latest_sweep(storage_root, exp.name)
        if name is None:
            raise ExperimentError(
                f"--resume: no sweep of experiment {exp.name!r} under {storage_root!r}.",
                fix="Pass the sweep's name with --name and the --storage it ran with (tunetrain list shows sweeps).",
            )
        resumable = resuming.load(storage_root, name)
        if resumable.ended_as:
            print(f"Sweep {name} already finished; nothing to resume (tunetrain show {name}).", file=out)
            return SweepResult(
                name=name,
                status="ok",
                metric=exp.primary_metric,
                mode=exp.primary_mode,
                tracking_uri=request.tracking_text or "",
                storage_path=str(Path(storage_root, name)),
            )
        if exp.seed is None:  # the seed drawn when the sweep started
            exp = exp.replace(seed=resumable.root_seed)
    command = list(request.command) if request.command is not None else _python_call("sweep", exp, saved)
    return execute(
        dataclasses.replace(request, name=name, command=tuple(command)),
        experiment=exp,
        launch=Launch(
            stream=out,
            dry_run=dry_run or require_estimate,
            require_estimate=require_estimate,
            resume=resumable,
            saved_request=saved,
            ask_flag=ask_flag,
            recorder=recorder,
        ),
    )


def _python_call(function: str, experiment: Experiment, request: Mapping[str, Any] | None) -> list[str]:
    """The ``tunetrain.command`` of a sweep started from Python: the call, as one word."""
    target = request["experiment"] if request else getattr(experiment, "name", "?")
    arguments = [repr(target)]
    if request:
        arguments += [f"{k}={v}" for k, v in request["fields"].items()]
        if request["overrides"]:
            arguments.append("overrides={" + ", ".join(f"{k!r}: {v}" for k, v in request["overrides"].items()) + "}")
    return [f"tunetrain.{function}({', '.join(arguments)})"]


class Session:
    """One sweep: its request, where it runs, its plan, its outcome and its result, each made
    by the method of that stage, in this order (:meth:`execute` runs them)."""

    def __init__(self, request: SweepRequest, *, experiment: Experiment | None = None, launch: Launch) -> None:
        self.request = request
        self.launch = launch
        self.experiment = experiment if experiment is not None else request.resolve()
        # Refused now, before the store or a cluster is asked anything.
        self.budget = parse_budget(request.budget) if request.budget else None
        self._where: Where | None = None
        self._plan: SweepPlan | None = None
        self._outcome: SweepOutcome | None = None

    @property
    def where(self) -> Where:
        if self._where is None:
            raise RuntimeError("Session.locate() comes first")
        return self._where

    @property
    def plan(self) -> SweepPlan:
        if self._plan is None:
            raise RuntimeError("Session.make_plan() comes first")
        return self._plan

    @property
    def outcome(self) -> SweepOutcome:
        if self._outcome is None:
            raise RuntimeError("Session.run() comes first")
        return self._outcome

    def execute(self) -> SweepResult:
        """Every stage: where, the plan, then the dry run, or the consent, the run and the finish."""
        self.locate()
        self.make_plan()
        if self.launch.dry_run:
            return self.dry_run()
        self.ask_consent()
        self.run()
        return self.finish()

    def locate(self) -> Where:
        """Where it runs: the store, the Ray and the storage, resolved and checked."""
        launch = self.launch
        self._where = locate(
            self.experiment, self.request, dry_run=launch.dry_run, recorder=launch.recorder, stream=launch.stream
        )
        return self._where

    def make_plan(self) -> SweepPlan:
        """The plan: the experiment checked against the cluster, the warm start read, a
        resume's changes refused; the budget warning and the experiment's preflight."""
        from tunetrain.sweeps.plan import plan_sweep

        experiment, where, launch, stream = self.experiment, self.where, self.launch, self.launch.stream
        warm = None
        if experiment.warm_start:  # the earlier sweeps' trials, read before anything starts
            from tunetrain.sweeps.warm import read_warm_start

            warm = read_warm_start(experiment.warm_start, experiment, tracking_uri=where.store)
            for line in warm.lines:
                print(f"tunetrain: {line}", file=stream, flush=True)
        plan = plan_sweep(
            experiment,
            nodes=where.nodes,
            tracking_uri=where.tracking_uri,
            storage_path=where.storage,
            address=where.address,
            name=self.request.name,
            argv=list(self.request.command) if self.request.command is not None else None,
            trial_seeds=launch.trial_seeds,
            initial_checkpoint=launch.initial_checkpoint,
            budget=self.budget,
            request=launch.saved_request,
            warm_points=warm.points if warm else (),
            warm_sources=warm.sources if warm else (),
        )
        if launch.resume is not None:
            plan = _resumed_plan(plan, launch.resume)
        if plan.scheduler_warning is not None:
            print(f"tunetrain: warning: {plan.scheduler_warning}", file=stream, flush=True)
        if experiment.preflight is not None:  # a dry run too: it says whether the sweep would start
            experiment.preflight(spaces.merge({}, experiment.defaults))  # a copy: preflight cannot change it
        self._plan = plan
        return plan

    def dry_run(self) -> SweepResult:
        """The plan and its cost printed; nothing runs."""
        plan = self.plan
        _dry_run(plan, require_estimate=self.launch.require_estimate, stream=self.launch.stream)
        return SweepResult(
            name=plan.name,
            status="dry_run",
            metric=self.experiment.primary_metric,
            mode=self.experiment.primary_mode,
            tracking_uri=self.where.tracking_uri,
            storage_path=plan.sweep_dir,
            plan=plan,
        )

    def ask_consent(self) -> None:
        """``--ask-above``: asked (or refused) now, and how it was given recorded in the plan;
        a resumed sweep was consented to when it started."""
        plan, stream = self.plan, self.launch.stream
        if plan.baseline_note:
            print(f"tunetrain: {plan.baseline_note}.", file=stream, flush=True)
        if self.launch.resume is None:
            request = self.request
            given = _consent(
                plan, ask_above=request.ask_above, ask_flag=self.launch.ask_flag, yes=request.yes, stream=stream
            )
            self._plan = dataclasses.replace(plan, consent=given)

    def run(self) -> SweepOutcome:
        """Ray connected (the store opened meanwhile) and the plan run through Ray Tune."""
        plan, experiment = self.plan, self.experiment
        print(
            f"Sweep {plan.name}: {experiment.total_trials} trials"
            + (" and a baseline" if plan.baseline is not None else "")
            + f", at most {plan.max_concurrent} at once, "
            f"metric {experiment.primary_metric} ({experiment.primary_mode}); {self.where.store.line()}",
            file=self.launch.stream,
            flush=True,
        )
        self._outcome = _run(plan, self.where, self.launch)
        return self._outcome

    def finish(self) -> SweepResult:
        """The summary, the report, the sweep's status, the best trial registered: the result."""
        request = self.request
        return _result(
            self.plan,
            self.outcome,
            report=request.report,
            register=request.register,
            alias=request.alias,
            stream=self.launch.stream,
        )


def _run(plan: SweepPlan, where: Where, launch: Launch) -> SweepOutcome:
    """Ray connected (the store opened meanwhile) and the plan run: its SweepOutcome."""
    from tunetrain import cluster, tracking
    from tunetrain.sweeps import run

    log_dir = plan.local_dir / "logs"
    # While Ray starts; not for a recorder of the caller's (recording off opens no store).
    opening = tracking.open_in_background(where.tracking_uri) if launch.recorder is None else None
    try:
        ray_logs = cluster.connect(where.address, log_dir=log_dir)
        if opening is not None:
            opening.join()  # one open at a time: a new sqlite store's migrations must not run twice
    except KeyboardInterrupt:
        if launch.resume is None:  # nothing journaled yet: no resume to promise
            raise InterruptedBeforeStart from None
        raise
    print(
        f"Ray: {where.address or 'embedded'} ({where.address_source}); logs: {ray_logs} "
        f"(driver log: {log_dir / 'ray_driver.log'})",
        file=launch.stream,
        flush=True,
    )
    resume = launch.resume
    return run.run_sweep(
        plan,
        journal=resume.journal if resume is not None else None,  # read once, when the resume was checked
        stream=launch.stream,
        log_dir=Path(ray_logs),
        recorder=launch.recorder or tracking.SweepRecorder,
        **({"view": launch.view} if launch.view is not None else {}),
    )


def _result(
    plan: SweepPlan, outcome: SweepOutcome, *, report: bool, register: bool, alias: str | None, stream: TextIO
) -> SweepResult:
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
        name=plan.name,
        status=status,
        metric=outcome.metric,
        mode=outcome.mode,
        tracking_uri=tracking_uri,
        storage_path=plan.sweep_dir,
        outcome=outcome,
        plan=plan,
        registered=registered,
    )


def _status(plan: SweepPlan, outcome: SweepOutcome, stream: TextIO) -> Status:
    """The sweep's status; bad input, a refused record or an unwritten journal said here."""
    if outcome.bad_input:
        print(f"\ntunetrain: error: {outcome.bad_input}\n  Fix: {outcome.bad_input_fix}", file=stream)
        return "bad_input"
    if outcome.record_errors:
        print(
            f"\ntunetrain: error: the MLflow store at {redact(outcome.tracking_uri)} refused {outcome.record_errors} "
            f"record(s); the first: {outcome.record_error}\n  The sweep's record is incomplete; what was refused "
            f"is kept in {plan.journal_path}: fix the cause, then write it with "
            f"`{sweep_command('sync', plan.name, plan.storage_path)}`.",
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


def _dry_run(plan: SweepPlan, *, require_estimate: bool, stream: TextIO) -> None:
    """The plan, and its cost from the newest smoke run of the same trial shape."""
    from tunetrain import tracking
    from tunetrain.sweeps.cost import estimate
    from tunetrain.sweeps.plan import describe_plan

    experiment = plan.experiment
    print(describe_plan(plan), file=stream)
    found = tracking.smoke_timings(plan.tracking_uri, experiment.name, workers=plan.workers, runner=experiment.runner)
    smoke, unfit = found.timings, ""
    if (other := found.other) is not None:
        unfit = (
            f"The newest smoke run, {other.sweep}, ran {other.shape_text()}, and this sweep runs "
            f"{found.shape_text}: its start-up and step times do not apply."
        )
    text = estimate.describe(
        experiment, max_concurrent=plan.max_concurrent, smoke=smoke, unfit=unfit, trials=plan.total_trials
    )
    print(text, file=stream)
    if require_estimate and smoke is None:
        raise ExperimentError(
            f"--estimate needs the timings of a smoke run of {experiment.name!r} with "
            f"{found.shape_text}, and the store {redact(plan.tracking_uri)} has none. {unfit}".rstrip(),
            fix="Run `tunetrain sweep FILE --smoke` first with the sweep's --workers-per-trial and "
            "--trial-runner (same --tracking-uri).",
        )


def _consent(plan: SweepPlan, *, ask_above: str | None, ask_flag: str, yes: bool, stream: TextIO) -> str:
    """``--ask-above``: ask (or refuse) when the sweep's estimate or budget exceeds the
    threshold (:mod:`tunetrain.sweeps.cost.consent`); what is recorded on the parent run."""
    from tunetrain import tracking
    from tunetrain.sweeps.cost import consent, estimate

    experiment = plan.experiment
    gpus = experiment.max_workers * experiment.worker_resources.get("GPU", 0.0)
    limit = consent.threshold(ask_above, gpus_per_trial=gpus, flag=ask_flag)
    if limit is None:
        return ""
    found = tracking.smoke_timings(plan.tracking_uri, experiment.name, workers=plan.workers, runner=experiment.runner)
    smoke = found.timings
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


def _resumed_plan(plan: SweepPlan, resume: Resumable) -> SweepPlan:
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


def end_of_sweep_report(outcome: SweepOutcome, tracking_uri: str, folder: Path, stream: TextIO) -> None:
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
