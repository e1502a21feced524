"""Planning a sweep: the experiment checked against the cluster (fit, concurrency, seeds,
scheduler and searcher options) and resolved into a :class:`SweepPlan`, before anything runs;
and what the plan says on the sweep's parent run."""

from __future__ import annotations

import dataclasses
import shlex
import sys
import uuid
from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from tunetrain import space as spaces
from tunetrain.algorithms import asha_rungs, choose_algorithms, searcher_owns_space
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment, file_sha256
from tunetrain.records import name_problem
from tunetrain.redaction import redact
from tunetrain.resources import check_fit, describe_resources, max_concurrent_trials
from tunetrain.seeding import draw_root_seed
from tunetrain.storage import Storage
from tunetrain.sweeps.cost.budget import Budget
from tunetrain.sweeps.policy import budget_gate
from tunetrain.sweeps.resumable import local_dir
from tunetrain.tracking import JOURNAL_NAME, SweepFacts, check_params


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """A sweep resolved and checked against the cluster, before anything runs."""

    experiment: Experiment
    name: str  # the sweep's name: its folder under the storage
    sweep_id: str
    root_seed: int
    tracking_uri: str
    storage_path: str
    address: str | None
    max_concurrent: int  # trials run at once: the one place this is decided (see plan_sweep)
    # Trials the searcher may have started and not ended (paused ones count): max_concurrent,
    # or HyperBand's largest bracket (algorithms.searcher_live_limit).
    searcher_live_limit: int
    nodes: list[dict[str, float]]
    command: str
    # A replay: the recorded seeds of trials 0, 1, ... (else derived from root_seed).
    trial_seeds: tuple[int, ...] = ()
    # A smoke run's round trip: every trial starts from this checkpoint folder.
    initial_checkpoint: str | None = None
    budget: Budget | None = None  # --budget: stop launching trials that would overrun it
    resume: bool = False  # continue the sweep of this name from its Tune state and journal
    # What the sweep was asked (experiment file, changed fields, overrides, where): saved in
    # its journal, from which tunetrain.resume() rebuilds it. None: not rebuildable.
    request: dict[str, Any] | None = None
    # --confirm-above: how the sweep was consented to ("--yes: ...", "asked: ...", "not
    # asked: ..."); empty when no threshold applies (or on a resume).
    consent: str = ""
    # The baseline trial's searched values (dotted keys), run first; None: no baseline, and
    # baseline_note says why when the experiment asked for one.
    baseline: dict[str, Any] | None = None
    baseline_note: str = ""
    # --warm-start: earlier trials (searched values, objective values) the searcher starts
    # with as completed, and where they came from ("SWEEP (N of M completed trials)").
    warm_points: tuple[tuple[dict[str, Any], list[float]], ...] = ()
    warm_sources: tuple[str, ...] = ()
    # Why the sweep uses its searcher ("as configured", or searcher="auto"'s reason).
    searcher_note: str = "as configured"
    # What the scheduler's layout says of the stop rule (algorithms.budget_warning); None: nothing.
    scheduler_warning: str | None = None

    @property
    def workers(self) -> str:
        """Workers per trial as recorded (and as smoke runs are matched): ``2``, or ``1-4``."""
        return _workers_text(self.experiment)

    @property
    def total_trials(self) -> int:
        """Every trial the sweep runs: the experiment's, and the baseline."""
        return self.experiment.total_trials + (1 if self.baseline is not None else 0)

    @property
    def searcher_points(self) -> list[dict[str, Any]] | None:
        """The configs the searcher suggests first (the baseline, nested as the space is)."""
        return searcher_points(self.baseline)

    @property
    def tune_samples(self) -> int:
        """Tune's num_samples: Tune counts the searcher's given points (the baseline) in it."""
        return self.experiment.num_samples + (1 if self.baseline is not None else 0)

    @property
    def sweep_dir(self) -> str:
        """Where Tune keeps the sweep's state and trials (and tunetrain its journal)."""
        return f"{self.storage_path}/{self.name}"

    @property
    def local_dir(self) -> Path:
        """The driver's folder of the sweep: its journal, driver log and report. The sweep
        folder on local storage, else ./tunetrain_journals/NAME (the driver writes them, so
        they need a local disk), where resume and sync look for them."""
        return local_dir(self.storage_path, self.name).absolute()

    @property
    def journal_path(self) -> Path:
        """The sweep's tracking journal (in :attr:`local_dir`)."""
        return self.local_dir / JOURNAL_NAME

    @property
    def param_space(self) -> dict[str, Any]:
        """Tune's param_space: defaults and space; only their constants when the searcher
        holds the space itself (Optuna with a conditional space)."""
        space = self.experiment.space
        if searcher_owns_space(self.experiment):
            space = spaces.constants(space)
        return spaces.merge(self.experiment.defaults, space)


def plan_sweep(
    experiment: Experiment,
    *,
    nodes: list[dict[str, float]],
    tracking_uri: str,
    storage_path: str,
    address: str | None,
    name: str | None = None,
    argv: list[str] | str | None = None,
    request: dict[str, Any] | None = None,
    trial_seeds: tuple[int, ...] = (),
    initial_checkpoint: str | None = None,
    budget: Budget | None = None,
    warm_points: Sequence[tuple[dict[str, Any], list[float]]] = (),
    warm_sources: Sequence[str] = (),
) -> SweepPlan:
    """Resolve defaults and check the experiment against the cluster; raises ExperimentError."""
    check_params(experiment.space, experiment.defaults)  # as MLflow will take them
    worker = experiment.worker_resources
    if experiment.use_gpu and not any(node.get("GPU", 0) > 0 for node in nodes):
        raise ExperimentError(
            f"use_gpu=True, but the cluster has no GPU (nodes: {'; '.join(describe_resources(n) for n in nodes)}).",
            fix="Drop --use-gpu / use_gpu=True, or connect to a cluster with GPUs via --address.",
        )
    check_fit(
        num_workers=experiment.min_workers,  # an elastic trial starts with its minimum
        worker=worker,
        strategy=experiment.placement_strategy,
        nodes=nodes,
    )
    fits = max_concurrent_trials(
        num_workers=experiment.min_workers,
        worker=worker,
        strategy=experiment.placement_strategy,
        nodes=nodes,
    )
    free = spaces.free_dimensions(experiment.space)
    baseline, baseline_note = _baseline(experiment, free)
    if baseline is not None and any(spaces.holds(point, baseline) for point, _ in warm_points):
        baseline, baseline_note = (
            None,
            ("no baseline trial: a warm-start trial ran the same config (its result is in the searcher's study)"),
        )
    total = experiment.total_trials + (1 if baseline is not None else 0)
    max_concurrent = min(experiment.max_concurrent or fits, total)  # grid points included
    root_seed = experiment.seed if experiment.seed is not None else draw_root_seed()
    chosen = choose_algorithms(
        experiment,
        searched=bool(free),
        max_concurrent=max_concurrent,
        seed=root_seed,
        points=searcher_points(baseline),
        evaluated=warm_points,
    )
    budget_gate(experiment, budget)  # built once now too: a bad budget fails before anything starts
    name = name or f"{experiment.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    if (problem := name_problem(name)) is not None:  # the sweep's folder under the storage, in every command
        raise ExperimentError(
            f"The sweep name (--name, or name= in Python) is its folder under the storage: {problem}.",
            fix="Pass such a name, e.g. --name my_sweep_2 (no '/', no '..').",
        )
    return SweepPlan(
        experiment=experiment.replace(searcher=chosen.searcher, seed=root_seed),
        name=name,
        sweep_id=uuid.uuid4().hex[:12],
        root_seed=root_seed,
        tracking_uri=tracking_uri,
        storage_path=Storage(storage_path).resolved(),
        address=address,
        max_concurrent=max_concurrent,
        searcher_live_limit=chosen.live_limit,
        nodes=nodes,
        # As recorded (tunetrain.command, the journal): without credentials.
        command=redact(argv if isinstance(argv, str) else shlex.join(argv if argv is not None else sys.argv)),
        request=request,
        trial_seeds=tuple(trial_seeds),
        initial_checkpoint=initial_checkpoint,
        budget=budget,
        baseline=baseline,
        baseline_note=baseline_note,
        warm_points=tuple(warm_points),
        warm_sources=tuple(warm_sources),
        searcher_note=chosen.searcher_note,
        scheduler_warning=chosen.warning,
    )


def _baseline(experiment: Experiment, free: list[str]) -> tuple[dict[str, Any] | None, str]:
    """The baseline trial's searched values, or None and why (empty: none was asked for)."""
    if experiment.baseline is False:
        return None, ""
    if not free:
        return None, "no baseline trial: every dimension is pinned, so every trial is the baseline"
    searched = dict(spaces.iter_leaves(experiment.space))
    if all(spaces.is_grid(searched[key]) for key in free):
        return None, "no baseline trial: every searched dimension is a grid, and every grid point runs"
    if spaces.has_conditional(experiment.space):
        return None, (
            "no baseline trial: the space is conditional (a choice between sets of parameters), which has "
            "no single centre; set Experiment.baseline=False to silence this, or pin a branch with --set"
        )
    given = experiment.baseline if not isinstance(experiment.baseline, bool) else {}
    return spaces.baseline_point(experiment.space, given), ""


def searcher_points(baseline: dict[str, Any] | None) -> list[dict[str, Any]] | None:
    """The searcher's points to evaluate first: the baseline (nested, as the space is)."""
    return [spaces.unflatten(baseline)] if baseline is not None else None


def train_storage(plan: SweepPlan) -> str:
    """Where Ray Train keeps its own runs of a sweep's multi-worker trials."""
    return f"{plan.sweep_dir}/train"


_RUNNER_TEXT = {
    "in_process": "in process (reused)",
    "worker_group": "a reused worker group",
    "torch_trainer": "a TorchTrainer each",
}


def describe_plan(plan: SweepPlan) -> str:
    """The --dry-run text: everything the sweep would do, nothing started."""
    exp = plan.experiment
    lines = [f"Sweep {plan.name} of experiment {exp.name!r} ({exp.source_path})"]
    lines.append("Search space:")
    for key, value in spaces.iter_leaves(exp.space):
        lines.append(f"  {key} = {spaces.describe(value)}")
    lines.append("Fixed values:")
    for key, value in spaces.iter_leaves(exp.defaults):
        lines.append(f"  {key} = {value!r}")
    stop = exp.stop
    lines += [
        "Metric: "
        + ", ".join(f"{metric} ({mode})" for metric, mode in exp.objectives)
        + (" (the scheduler and the best trial use the first)" if exp.multi_objective else ""),
        f"Scheduler: {exp.scheduler} {dict(exp.scheduler_options) or ''}".rstrip(),
        f"Searcher: {exp.searcher} {dict(exp.searcher_options) or ''}".rstrip()
        + (f" ({plan.searcher_note})" if plan.searcher_note != "as configured" else ""),
        f"Trials: {_trials_text(exp)}, at most {plan.max_concurrent} at once",
        "Baseline: "
        + (
            ", ".join(f"{k}={v!r}" for k, v in plan.baseline.items()) + " (run first, not counted in the trials)"
            if plan.baseline is not None
            else plan.baseline_note or "none (--no-baseline)"
        ),
        f"Stop rule: max_iterations={stop.max_iterations}, max_trial_seconds={stop.max_trial_seconds}, "
        f"time_budget_s={stop.time_budget_s}",
        f"Per trial: {_workers_text(exp)} worker(s) x ({describe_resources(exp.worker_resources)}), "
        f"placement {exp.placement_strategy}, " + _RUNNER_TEXT[exp.runner],
        f"Cluster: {plan.address or 'embedded local Ray'}; "
        + "; ".join(describe_resources(node) for node in plan.nodes),
        f"Root seed: {plan.root_seed}",
        "Warm start: " + ("; ".join(plan.warm_sources) if plan.warm_sources else "none"),
        "Budget: " + (f"{plan.budget.text} (no new trial once the next would overrun it)" if plan.budget else "none"),
        f"Checkpoints: keep {exp.checkpoint.num_to_keep}, ranked by "
        f"{exp.checkpoint.score_attribute or exp.primary_metric} ({exp.checkpoint.score_order or exp.primary_mode})",
        f"MLflow: {redact(plan.tracking_uri)} (experiment {exp.name!r})",
        f"Trial storage: {plan.storage_path}/{plan.name}",
    ]
    return "\n".join(lines)


def sweep_facts(plan: SweepPlan) -> SweepFacts:
    """What the sweep's parent run says of it (tracking turns it into params and tags)."""
    exp = plan.experiment
    asha = asha_rungs(exp)
    return SweepFacts(
        sweep_id=plan.sweep_id,
        name=plan.name,
        experiment_file=exp.source_path or "",
        experiment_sha256=file_sha256(exp.source_path) if exp.source_path else "",
        scheduler=exp.scheduler,
        searcher=exp.searcher,
        searcher_note=plan.searcher_note,
        objectives=tuple((metric, str(mode)) for metric, mode in exp.objectives),
        num_samples=exp.num_samples,
        root_seed=plan.root_seed,
        deterministic=exp.deterministic,
        budget=plan.budget.text if plan.budget else None,
        workers=plan.workers,
        runner=exp.runner,
        max_concurrent=plan.max_concurrent,
        sweep_dir=plan.sweep_dir,
        command=plan.command,
        address=plan.address,
        nodes=plan.nodes,
        space={k: spaces.describe(v) for k, v in spaces.iter_leaves(exp.space)},
        defaults=dict(spaces.iter_leaves(exp.defaults)),
        consent=plan.consent,
        warm_sources=plan.warm_sources,
        warm_trials=len(plan.warm_points),
        baseline=plan.baseline,
        asha_rungs=(tuple(asha[0]), asha[1]) if asha is not None else None,
    )


def _trials_text(experiment: Experiment) -> str:
    """The sweep's trial count as the plan prints it: ``8``, or ``6 (3 samples x 2 grid points)``."""
    total = experiment.total_trials
    if total == experiment.num_samples:
        return str(total)
    return f"{total} ({experiment.num_samples} sample(s) x {total // experiment.num_samples} grid points)"


def _workers_text(experiment: Experiment) -> str:
    """Workers per trial as recorded: ``2``, or ``1-4`` for an elastic range."""
    low, high = experiment.min_workers, experiment.max_workers
    return f"{low}-{high}" if experiment.elastic else str(low)
