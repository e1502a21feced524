"""The tuner layer: plans a sweep against a Ray cluster and runs it through Ray Tune.

Roles stay apart: the searcher proposes configs, the scheduler decides which trials go on,
Ray Tune runs them (each trial a :func:`tunetrain.trial.run_trial` driving a TorchTrainer),
and a Tune callback hands every event to the MLflow recorder and the console view.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import re
import shlex
import sys
import time
import uuid
from collections import Counter
from collections.abc import Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

import ray
from ray import tune
from ray.train.constants import CHECKPOINT_DIR_NAME
from ray.tune.result import AUTO_RESULT_KEYS
from ray.tune.search import ConcurrencyLimiter, SearchGenerator

from tunetrain import _space, provenance
from tunetrain.algorithms import (
    asha_rungs,
    build_scheduler,
    build_searcher,
    check_pairing,
    searcher_live_limit,
    searcher_owns_space,
)
from tunetrain.budget import Budget, BudgetGate
from tunetrain.console import LiveView
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment, file_sha256
from tunetrain.records import ENDED, SweepOutcome, TrialRecord, checkpoint_usage, error_headline, pareto_front
from tunetrain.resources import check_fit, describe_resources, max_concurrent_trials
from tunetrain.seeding import derive_seed, draw_root_seed
from tunetrain.tracking import JOURNAL_NAME, Journal, SweepRecorder, schema
from tunetrain.trial import (
    DIVERGED_KEY,
    DRIVER_RESOURCES,
    NODES_KEY,
    OOM_KEY,
    RESTARTS_KEY,
    TrialNamer,
    TrialSpec,
    oom_in_error,
    remove_train_copies,
    run_trial,
    run_trial_in_process,
    trial_dirname,
    trial_index,
    trial_seed,
)

# Keys Tune adds to every result; everything else in a result is the user's metric.
_BOOKKEEPING = set(AUTO_RESULT_KEYS) | {
    "done",
    "trial_id",
    "experiment_tag",
    "should_checkpoint",
    "experiment_id",
    CHECKPOINT_DIR_NAME,
}

# Train V2 reports reach Tune at each controller poll, every 2 s by default: too slow for
# short trials (measured on 2 CPUs: 0.5 s -> ~9.5 s from trial start to first report of a
# 2-worker trial, 0.2 s -> ~8.5 s, 0.1 s -> ~8 s with more polling load). Users can still
# set their own value in the environment.
_RAY_ENV_DEFAULTS = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


@dataclasses.dataclass(frozen=True)
class SweepPlan:
    """A sweep resolved and checked against the cluster, before anything runs."""

    experiment: Experiment
    sweep_name: str
    sweep_id: str
    root_seed: int
    tracking_uri: str
    storage_path: str
    address: str | None
    max_concurrent: int
    nodes: list[dict[str, float]]
    command: str
    # A replay: the recorded seeds of trials 0, 1, ... (else derived from root_seed).
    trial_seeds: tuple[int, ...] = ()
    # A smoke run's round trip: every trial starts from this checkpoint folder.
    initial_checkpoint: str | None = None
    budget: Budget | None = None  # --budget: stop launching trials that would overrun it
    resume: bool = False  # continue the sweep of this name from its Tune state and journal

    @property
    def sweep_dir(self) -> str:
        """Where Tune keeps the sweep's state and trials (and tunetrain its journal)."""
        return f"{self.storage_path}/{self.sweep_name}"

    @property
    def journal_path(self) -> Path:
        """The sweep's tracking journal: in the sweep folder on local storage, else under
        ./tunetrain_journals (the driver writes it, so it needs a local disk)."""
        if "://" in self.storage_path:
            return Path("tunetrain_journals") / self.sweep_name / JOURNAL_NAME
        return Path(self.sweep_dir) / JOURNAL_NAME

    @property
    def param_space(self) -> dict[str, Any]:
        """Tune's param_space: defaults and space; only their constants when the searcher
        holds the space itself (Optuna with a conditional space)."""
        space = self.experiment.space
        if searcher_owns_space(self.experiment):
            space = _space.constants(space)
        return _space.merge(self.experiment.defaults, space)


def user_metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The numeric metrics a train loop reported, without Tune's bookkeeping keys."""
    return {
        key: float(value)
        for key, value in result.items()
        if key not in _BOOKKEEPING and isinstance(value, int | float) and not isinstance(value, bool)
    }


# -- the cluster -------------------------------------------------------------------------


def local_nodes() -> list[dict[str, float]]:
    """The one node an embedded Ray would have on this machine."""
    import torch

    node = {"CPU": float(os.cpu_count() or 1)}
    if torch.cuda.is_available():
        node["GPU"] = float(torch.cuda.device_count())
    return [node]


def connect(address: str | None, *, log_dir: Path) -> str:
    """Start an embedded Ray (address None) or connect to a cluster; returns Ray's log folder.

    Ray's own worker output goes to its log files, not to the console.
    """
    env = {key: os.environ.get(key, value) for key, value in _RAY_ENV_DEFAULTS.items()}
    os.environ.update(env)
    # tunetrain checks that the metric is reported itself (once, with a clear message).
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    # Tune's newer console output prints a banner even at verbose=0; the classic one is silent.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Tune saves the sweep's state (trials, searcher) every 10 s or more by default; a driver
    # killed in between resumes from an older state and redoes that much work (the journal
    # keeps the record right either way, see docs/fault_tolerance.md). Once a second bounds
    # both the redone work and the cost of saving (a few ms for a hundred trials).
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    _route_ray_logging(log_dir / "ray_driver.log")  # for what ray.init itself logs
    if address is not None:
        use_cluster_token()
    if not ray.is_initialized():
        ray.init(
            address=address,
            log_to_driver=False,
            logging_level=logging.WARNING,
            runtime_env={"env_vars": env},
        )
    _route_ray_logging(log_dir / "ray_driver.log")  # ray.init puts its console handler back
    _route_raylet_messages()
    try:
        node = ray._private.worker._global_node
        return str(node.get_logs_dir_path()) if node is not None else "/tmp/ray/session_latest/logs"
    except AttributeError:
        return "/tmp/ray/session_latest/logs"


def use_cluster_token() -> None:
    """Send the cluster's authentication token when connecting to a running cluster.

    ``ray start`` (Ray 2.60) turns token authentication on and keeps the token in
    ``~/.ray/auth_token``; ``ray.init(address=...)`` sends it only when ``RAY_AUTH_MODE=token``
    is set, and otherwise fails after a minute with "Authentication token is missing".
    So with a token at hand (that file or ``RAY_AUTH_TOKEN``) and no mode chosen, token
    mode is chosen, as ``ray start`` itself does.
    """
    has_token = "RAY_AUTH_TOKEN" in os.environ or (Path.home() / ".ray" / "auth_token").exists()
    if "RAY_AUTH_MODE" not in os.environ and has_token:
        # Ray's own way to turn it on in a running process: set RAY_AUTH_MODE and refresh
        # its cached config (the variable alone is read only at start-up). Private to Ray,
        # hence the fallback for a Ray that moved it: the variable, for child processes.
        try:
            from ray._private.authentication.authentication_token_setup import _enable_token_auth

            _enable_token_auth()
        except ImportError:
            os.environ["RAY_AUTH_MODE"] = "token"


def _route_ray_logging(path: Path) -> None:
    """Send Ray's Python loggers (and warnings) to a file instead of the console."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.captureWarnings(True)
    for name in ("ray", "py.warnings"):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
            if isinstance(old, logging.FileHandler):
                old.close()
        logger.addHandler(handler)
        logger.propagate = False


def _route_raylet_messages() -> None:
    """Send the raylet's messages to the driver (e.g. "N PYTHON worker processes have been
    started") to Ray's log file. Ray prints them straight to stdout from a thread of its own,
    even with ``log_to_driver=False``, and has no setting for it, so its printer is wrapped."""
    from ray._private import worker

    original = worker.print_to_stdstream
    if getattr(original, "_tunetrain", False):
        return
    raylet_logger = logging.getLogger("ray.raylet_messages")

    def print_to_stdstream(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            for line in data.get("lines", []):
                raylet_logger.warning(line)
        else:
            original(data, ignore_prefix)

    print_to_stdstream._tunetrain = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_to_stdstream


def cluster_nodes() -> list[dict[str, float]]:
    return [
        {key: float(value) for key, value in node["Resources"].items()} for node in ray.nodes() if node.get("Alive")
    ]


# -- planning ----------------------------------------------------------------------------


def plan_sweep(
    experiment: Experiment,
    *,
    nodes: list[dict[str, float]],
    tracking_uri: str,
    storage_path: str,
    address: str | None,
    sweep_name: str | None = None,
    argv: list[str] | None = None,
    trial_seeds: tuple[int, ...] = (),
    initial_checkpoint: str | None = None,
    budget: Budget | None = None,
) -> SweepPlan:
    """Resolve defaults and check the experiment against the cluster; raises ExperimentError."""
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
    max_concurrent = min(experiment.max_concurrent or fits, experiment.total_trials)  # grid points included
    free = _space.free_dimensions(experiment.space)
    searcher = experiment.searcher
    if not free and searcher in ("optuna", "hyperopt"):
        # Every dimension is pinned: there is nothing for a model-based searcher to learn.
        searcher = "random"
    check_pairing(experiment.replace(searcher=searcher))
    root_seed = experiment.seed if experiment.seed is not None else draw_root_seed()
    # Build the scheduler, searcher and budget gate once now, so that bad options fail before
    # anything starts.
    build_scheduler(experiment)
    budget_gate(experiment, budget)
    build_searcher(experiment.replace(searcher=searcher), seed=root_seed, max_concurrent=max_concurrent)
    name = sweep_name or f"{experiment.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
    return SweepPlan(
        experiment=experiment.replace(searcher=searcher, seed=root_seed),
        sweep_name=name,
        sweep_id=uuid.uuid4().hex[:12],
        root_seed=root_seed,
        tracking_uri=tracking_uri,
        storage_path=str(Path(storage_path).resolve()) if "://" not in storage_path else storage_path,
        address=address,
        max_concurrent=max_concurrent,
        nodes=nodes,
        command=shlex.join(argv if argv is not None else sys.argv),
        trial_seeds=tuple(trial_seeds),
        initial_checkpoint=initial_checkpoint,
        budget=budget,
    )


def train_storage(plan: SweepPlan) -> str:
    """Where Ray Train keeps its own runs of a sweep's multi-worker trials."""
    return f"{plan.sweep_dir}/train"


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


def describe_plan(plan: SweepPlan) -> str:
    """The --dry-run text: everything the sweep would do, nothing started."""
    exp = plan.experiment
    lines = [f"Sweep {plan.sweep_name} of experiment {exp.name!r} ({exp.source_path})"]
    lines.append("Search space:")
    for key, value in _space.iter_leaves(exp.space):
        lines.append(f"  {key} = {_space.describe(value)}")
    lines.append("Fixed values:")
    for key, value in _space.iter_leaves(exp.defaults):
        lines.append(f"  {key} = {value!r}")
    stop = exp.stop
    lines += [
        "Metric: "
        + ", ".join(f"{metric} ({mode})" for metric, mode in exp.objectives)
        + (" (the scheduler and the best trial use the first)" if exp.multi_objective else ""),
        f"Scheduler: {exp.scheduler} {dict(exp.scheduler_options) or ''}".rstrip(),
        f"Searcher: {exp.searcher} {dict(exp.searcher_options) or ''}".rstrip(),
        f"Trials: {_trials_text(exp)}, at most {plan.max_concurrent} at once",
        f"Stop rule: max_iterations={stop.max_iterations}, max_trial_seconds={stop.max_trial_seconds}, "
        f"time_budget_s={stop.time_budget_s}",
        f"Per trial: {_workers_text(exp)} worker(s) x ({describe_resources(exp.worker_resources)}), "
        f"placement {exp.placement_strategy}, " + ("in process (reused)" if exp.in_process else "a TorchTrainer each"),
        f"Cluster: {plan.address or 'embedded local Ray'}; "
        + "; ".join(describe_resources(node) for node in plan.nodes),
        f"Root seed: {plan.root_seed}",
        "Budget: " + (f"{plan.budget.text} (no new trial once the next would overrun it)" if plan.budget else "none"),
        f"Checkpoints: keep {exp.checkpoint.num_to_keep}, ranked by "
        f"{exp.checkpoint.score_attribute or exp.primary_metric} ({exp.checkpoint.score_order or exp.primary_mode})",
        f"MLflow: {plan.tracking_uri} (experiment {exp.name!r})",
        f"Trial storage: {plan.storage_path}/{plan.sweep_name}",
    ]
    return "\n".join(lines)


# -- running -----------------------------------------------------------------------------


class SweepStopper(tune.Stopper):
    """The experiment's stop rule, plus the checks tunetrain adds to every result: every
    objective metric must be reported (else the whole sweep stops: bad input), and a
    non-finite value of one ends the trial as diverged."""

    def __init__(self, experiment: Experiment) -> None:
        self.metrics = [metric for metric, _ in experiment.objectives]
        self.max_iterations = experiment.stop.max_iterations
        self.max_seconds = experiment.stop.max_trial_seconds
        self.diverged: set[str] = set()
        self.bad_input: str | None = None  # why the sweep was stopped as bad input
        self.bad_input_fix = ""

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        missing = [metric for metric in self.metrics if metric not in result]
        if missing:
            if self.bad_input is None:
                reported = sorted(user_metrics(result)) or ["(none)"]
                self.refuse(
                    f"The experiment's metric {missing[0]!r} was never reported; the train loop "
                    f"reported: {', '.join(reported)}.",
                    fix=f"Report the metric named by the experiment (ray.train.report({{{missing[0]!r}: ...}})) "
                    "or change Experiment.metric.",
                )
            return True
        values = [result[metric] for metric in self.metrics]
        if any(isinstance(value, int | float) and not math.isfinite(value) for value in values):
            self.diverged.add(trial_id)
            return True
        if self.max_iterations is not None and result.get("training_iteration", 0) >= self.max_iterations:
            return True
        return self.max_seconds is not None and result.get("time_total_s", 0.0) >= self.max_seconds

    def refuse(self, message: str, *, fix: str) -> None:
        """Stop the whole sweep as bad input (exit 2): ``message`` says why, ``fix`` how to fix it."""
        if self.bad_input is None:
            self.bad_input, self.bad_input_fix = message, fix

    def stop_all(self) -> bool:
        return self.bad_input is not None


class SweepCallback(tune.Callback):
    """Turns Ray Tune's trial events into TrialRecords, MLflow records and the live view."""

    def __init__(
        self,
        *,
        plan: SweepPlan,
        recorder: SweepRecorder,
        view: LiveView,
        stopper: SweepStopper,
        scheduler: Any,
        provenance: Mapping[str, Any] | None = None,
        budget_gate: BudgetGate | None = None,
        records: Mapping[str, TrialRecord] | None = None,
    ) -> None:
        self.plan = plan
        self.train_storage = train_storage(plan)
        self.budget_gate = budget_gate
        # The sweep's code, version and hardware facts, copied onto every trial's run.
        self.provenance = dict(provenance or {})
        self.recorder = recorder
        self.view = view
        self.stopper = stopper
        self.early_stopped: Mapping[str, int] = scheduler.early_stopped
        self.exploits: list[dict[str, Any]] = scheduler.exploits  # PBT/PB2, appended by the scheduler
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

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the experiment state; the recorder (a thread) and
        # the console belong to this driver process only.
        return {k: v for k, v in self.__dict__.items() if k not in ("recorder", "view")}

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
                self.recorder.reopen_trial(record.name)
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
            start_time=(now := time.time()),
            running_since=now,
        )
        self.records[trial.trial_id] = record
        if self.budget_gate is not None:
            self.budget_gate.started(trial.trial_id)
        self.recorder.start_trial(
            name,
            params={**_space.flatten(record.config), schema.SEED_TAG: record.seed},
            tags={
                schema.TRIAL_ID_TAG: trial.trial_id,
                schema.TRIAL_INDEX_TAG: index,
                schema.SWEEP_ID_TAG: self.plan.sweep_id,
                schema.SEED_TAG: record.seed,
                # Each worker's seed (rank order): derived from the trial's seed and its rank.
                schema.WORKER_SEEDS_TAG: ",".join(
                    str(derive_seed(record.seed, rank)) for rank in range(self.plan.experiment.max_workers)
                ),
                **self.provenance,
            },
            start_time=record.start_time,
        )
        if self.population_based:  # the values PBT may change, as metrics from step 0 on
            self.recorder.log_metrics(name, step=0, metrics=self._mutable_values(record.config), timestamp=time.time())
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
            self.recorder.set_tags(
                record.name,
                {
                    schema.NODES_TAG: ",".join(n["ip"] for n in nodes),
                    schema.NODE_IDS_TAG: ",".join(n["node_id"] for n in nodes),
                    schema.WORLD_SIZE_TAG: len(nodes),
                    schema.DEVICE_TAG: ",".join(n["device"] for n in nodes),
                    schema.DEVICE_NAME_TAG: nodes[0]["device_name"],
                    schema.DEVICE_MEMORY_TAG: nodes[0]["device_memory_gib"],
                },
            )
        if step <= record.iterations and not self.population_based:
            # A trial restored from a checkpoint older than its last report (a retry, a resumed
            # sweep, a HyperBand resume) reruns those steps: each step is recorded once, the
            # first time. (A PBT exploit continues from the donor's step, see docs/schedulers.md.)
            return
        metrics = user_metrics(result)
        # A diverged objective reached the scheduler and searcher as its worst value; the
        # record keeps what the train loop reported.
        metrics.update(result.get(DIVERGED_KEY) or {})
        record.reported(
            step, metrics, metric=self.plan.experiment.primary_metric, mode=self.plan.experiment.primary_mode
        )
        self.recorder.log_metrics(record.name, step=step, metrics=metrics, timestamp=time.time())
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
        self.recorder.set_tags(
            record.name,
            {schema.RESTARTS_TAG: len(record.restarts), schema.RESTART_REASON_TAG: record.restarts[-1]},
        )
        self.recorder.log_dict(
            record.name,
            schema.RESTARTS_ARTIFACT,
            {"restarts": [{"after_step": record.iterations, "reason": r} for r in record.restarts]},
        )

    def _mutable_values(self, config: Mapping[str, Any]) -> dict[str, float]:
        free = set(_space.free_dimensions(self.plan.experiment.space))
        return {
            schema.PBT_METRIC_PREFIX + key: float(value)
            for key, value in _space.flatten(config).items()
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
                "donor_run_id": self.recorder.run_id(donor.name),
                "donor_step": exploit["donor_step"],
                "old": exploit["old"],
                "new": exploit["new"],
            }
            history = self._exploits_of.setdefault(record.name, [])
            history.append(entry)
            self.recorder.log_metrics(
                record.name, step=exploit["step"], metrics=self._mutable_values(record.config), timestamp=time.time()
            )
            self.recorder.set_tags(
                record.name,
                {
                    schema.PBT_EXPLOITS_TAG: len(history),
                    schema.PBT_LAST_DONOR_TAG: donor.name,
                    schema.PBT_LAST_DONOR_RUN_ID_TAG: entry["donor_run_id"] or "",
                },
            )
            self.recorder.log_dict(record.name, schema.PBT_EXPLOITS_ARTIFACT, {"exploits": history})

    def on_checkpoint(self, iteration: int, trials: list[Any], trial: Any, checkpoint: Any, **info: Any) -> None:
        # Persisted by Tune (for both trial runners) after the result it came with.
        record = self.records.get(trial.trial_id)
        if record is None:
            return
        path = str(checkpoint.path)
        record.checkpointed(path, score=self.score_attribute)
        self.recorder.set_tags(record.name, {schema.CHECKPOINT_LATEST_TAG: path})

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        if self.budget_gate is not None:
            self.budget_gate.ended(trial.trial_id)
        record = self.records.get(trial.trial_id)
        if record is None:
            return
        if trial.trial_id in self._oom:
            self._end_oom(record, self._oom[trial.trial_id])
        elif trial.trial_id in self.stopper.diverged:
            self._end(record, "diverged")
        elif self.stopper.bad_input is not None:
            failed = self.plan.experiment.primary_metric not in record.last
            self._end(record, "failed" if failed else "interrupted", error=self.stopper.bad_input if failed else None)
        elif trial.trial_id in self.early_stopped and not self._ran_full_budget(record):
            self._end(record, "stopped_early")
        else:
            self._end(record, "completed")

    def _end_oom(self, record: TrialRecord, oom: Mapping[str, Any]) -> None:
        """End a trial that ran out of memory: its peak memory and batch settings go on its run."""
        settings = {k: v for k, v in _space.flatten(record.config).items() if _BATCH_SETTING.search(k)}
        tags: dict[str, Any] = {schema.OOM_BATCH_SETTINGS_TAG: json.dumps(settings, default=str)}
        if oom.get("peak_memory_gib") is not None:
            tags[schema.OOM_PEAK_MEMORY_TAG] = oom["peak_memory_gib"]
        self.recorder.set_tags(record.name, tags)
        self._end(record, "oom", error=str(oom.get("error") or "out of memory"))

    def _ran_full_budget(self, record: TrialRecord) -> bool:
        """A trial the scheduler stopped at the stop rule's last iteration ran its whole budget
        (HyperBand stops the survivors of a finished bracket)."""
        limit = self.plan.experiment.stop.max_iterations
        return limit is not None and record.iterations >= limit

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
            self._end_oom(record, {**(oom or {}), "error": error})
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
        # The time it ran, without the time a Ctrl+C or crash kept the sweep stopped.
        tags: dict[str, Any] = {schema.ITERATIONS_TAG: record.iterations, schema.DURATION_TAG: round(record.ran_s, 3)}
        if best is not None:
            tags[schema.CHECKPOINT_BEST_TAG] = best["path"]
            tags[schema.CHECKPOINT_STEP_TAG] = best["step"]
        artifacts = (
            {schema.CHECKPOINTS_ARTIFACT: {"checkpoints": record.checkpoints, "best": best}}
            if record.checkpoints
            else {}
        )
        self.recorder.end_trial(
            record.name,
            status=status,
            end_time=record.end_time,
            tags=tags,
            error=error,
            error_headline=error_headline(error) if error else "",
            artifacts=artifacts,
        )
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


def records_from_journal(entries: list[dict[str, Any]], experiment: Experiment) -> dict[str, TrialRecord]:
    """The trials a sweep's journal recorded, as the sweep's callback had them (by Tune trial
    id): config, seed, steps, best value, checkpoints, restarts, status. What the journal
    holds is what the callback saw, so a resumed sweep goes on from exactly there."""
    from tunetrain.analysis import nested_config

    records: dict[str, TrialRecord] = {}
    by_name: dict[str, TrialRecord] = {}
    score = experiment.checkpoint.score_attribute or experiment.primary_metric
    for entry in entries:
        op, name = entry["op"], str(entry.get("trial"))
        if op == "start_trial":
            tags = entry["tags"]
            record = TrialRecord(
                name=name,
                index=int(tags[schema.TRIAL_INDEX_TAG]),
                trial_id=str(tags[schema.TRIAL_ID_TAG]),
                # The journal keeps the values themselves; nested_config reads them as literals.
                config=nested_config({k: repr(v) for k, v in entry["params"].items()}),
                seed=int(tags[schema.SEED_TAG]),
                start_time=float(entry["start_time"]),
                running_since=float(entry["start_time"]),
            )
            records[record.trial_id] = by_name[name] = record
            continue
        found = by_name.get(name)
        if found is None:  # a record of the sweep's parent run
            continue
        record = found
        # The same TrialRecord methods as the callback's, on what the callback journaled.
        if op == "metrics" and entry["step"] > 0:  # step 0: PBT's mutable values
            metrics = {k: float(v) for k, v in entry["metrics"].items()}
            record.reported(int(entry["step"]), metrics, metric=experiment.primary_metric, mode=experiment.primary_mode)
        elif op == "tags":
            tags = entry["tags"]
            if schema.CHECKPOINT_LATEST_TAG in tags:
                record.checkpointed(tags[schema.CHECKPOINT_LATEST_TAG], score=score)
            if schema.RESTART_REASON_TAG in tags:
                record.restarts.append(str(tags[schema.RESTART_REASON_TAG]))
        elif op == "reopen_trial":
            record.reopened(float(entry.get("time", record.start_time)))
        elif op == "end_trial":
            record.ended(entry["status"], float(entry["end_time"]), entry.get("error"))
    return records


def sweep_tags(plan: SweepPlan) -> tuple[dict[str, Any], dict[str, Any]]:
    """Params and tags of the sweep's parent run: settings, code, versions, hardware."""
    exp = plan.experiment
    params: dict[str, Any] = {
        schema.SPACE_PARAM_PREFIX + k: _space.describe(v) for k, v in _space.iter_leaves(exp.space)
    }
    params.update({schema.DEFAULT_PARAM_PREFIX + k: v for k, v in _space.iter_leaves(exp.defaults)})
    cpus = sum(node.get("CPU", 0.0) for node in plan.nodes)
    gpus = sum(node.get("GPU", 0.0) for node in plan.nodes)
    tags: dict[str, Any] = {
        schema.SWEEP_ID_TAG: plan.sweep_id,
        schema.SWEEP_NAME_TAG: plan.sweep_name,
        schema.EXPERIMENT_FILE_TAG: exp.source_path or "",
        schema.EXPERIMENT_SHA256_TAG: file_sha256(exp.source_path) if exp.source_path else "",
        schema.SCHEDULER_TAG: exp.scheduler,
        schema.SEARCHER_TAG: exp.searcher,
        schema.METRIC_TAG: exp.primary_metric,
        schema.MODE_TAG: exp.primary_mode,
        # Every objective, so that readers (tunetrain.analysis) know them even if the sweep dies.
        schema.OBJECTIVES_TAG: ", ".join(f"{m} ({mode})" for m, mode in exp.objectives),
        schema.NUM_SAMPLES_TAG: exp.num_samples,
        schema.ROOT_SEED_TAG: plan.root_seed,
        schema.DETERMINISTIC_TAG: str(exp.deterministic).lower(),
        schema.BUDGET_TAG: plan.budget.text if plan.budget else "none",
        **trial_shape(exp),
        schema.MAX_CONCURRENT_TAG: plan.max_concurrent,
        schema.STORAGE_PATH_TAG: f"{plan.storage_path}/{plan.sweep_name}",
        schema.COMMAND_TAG: plan.command,
        schema.ADDRESS_TAG: plan.address or "embedded",
        schema.HARDWARE_PREFIX + "nodes": len(plan.nodes),
        schema.HARDWARE_PREFIX + "cpus": f"{cpus:g}",
        schema.HARDWARE_PREFIX + "gpus": f"{gpus:g}",
        schema.HARDWARE_PREFIX + "cpu_model": provenance.cpu_model(),
        schema.HARDWARE_PREFIX + "driver_cpu_count": os.cpu_count() or 0,
        schema.HARDWARE_PREFIX + "gpu_names": ", ".join(provenance.gpu_names()) or "none",
        schema.HARDWARE_PREFIX + "gpu_memory_gib": ", ".join(f"{m:.1f}" for m in provenance.gpu_memory_gib()) or "none",
        schema.HARDWARE_PREFIX + "cuda": provenance.cuda_version() or "none",
    }
    if (asha := asha_rungs(exp)) is not None:  # the report's rung chart draws these
        tags[schema.ASHA_RUNGS_TAG], tags[schema.ASHA_MAX_T_TAG] = ",".join(map(str, asha[0])), asha[1]
    tags.update({schema.VERSION_PREFIX + name: version for name, version in provenance.package_versions().items()})
    if exp.source_path:
        tags.update({schema.GIT_TAG_PREFIX + k: v for k, v in provenance.git_state(exp.source_path).items()})
    return params, tags


def trial_provenance(sweep_tags: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep's provenance tags that every trial's run carries too (file hash, git state,
    command, deterministic mode, package versions, hardware)."""
    return {
        k: v for k, v in sweep_tags.items() if k in schema.PROVENANCE_TAGS or k.startswith(schema.ENVIRONMENT_PREFIXES)
    }


def saved_latest_checkpoints(sweep_dir: str) -> dict[str, str | None]:
    """Trial id -> the latest checkpoint that Tune's newest saved experiment state names
    (what Tune restores the trial from)."""
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    state_path = _find_newest_experiment_checkpoint(sweep_dir)
    if state_path is None:
        return {}
    found: dict[str, str | None] = {}
    for trial_json, metadata_json in json.loads(Path(state_path).read_text())["trial_data"]:
        manager: Any = _TrainingRunMetadata.from_json_state(metadata_json).checkpoint_manager
        latest = manager.latest_checkpoint_result
        found[str(json.loads(trial_json)["trial_id"])] = latest.checkpoint.path if latest is not None else None
    return found


def point_at_kept_checkpoints(sweep_dir: str, journaled: Mapping[str, TrialRecord]) -> list[str]:
    """Before Tune restores a sweep: each unfinished trial whose latest checkpoint, as Tune's
    saved state names it, is gone goes on from the newest checkpoint the journal recorded
    that still exists (else from the start). Returns a line per trial changed.

    Tune deletes a trial's older checkpoints as newer ones arrive (its retention policy), but
    saves its experiment state at most once a second and uploads it in the background: a
    sweep killed in between leaves a state naming a deleted checkpoint, and Tune 2.60 then
    fails that trial ("Could not recover from checkpoint as it does not exist on storage
    anymore"; the fallback of ray-project/ray#29099 went with the old persistence code). The
    state is Tune's own JSON; it is read and written back with Tune's own (private) codecs.
    """
    from ray.train._internal.session import _TrainingResult
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
    from ray.tune.trainable.metadata import _TrainingRunMetadata
    from ray.tune.utils.serialization import TuneFunctionEncoder, _loads_with_cloudpickle

    if "://" in sweep_dir:  # a cloud store: left to Tune
        return []
    state_path = _find_newest_experiment_checkpoint(sweep_dir)
    if state_path is None:
        return []
    state = json.loads(Path(state_path).read_text())
    lines = []
    for entry in state["trial_data"]:
        trial_json, metadata_json = entry
        trial_state = _loads_with_cloudpickle(trial_json)
        record = journaled.get(str(trial_state["trial_id"]))
        metadata = _TrainingRunMetadata.from_json_state(metadata_json)
        manager: Any = metadata.checkpoint_manager  # Tune's private _CheckpointManager
        latest: Any = manager.latest_checkpoint_result
        finished = record is None or (record.status in ENDED and record.status != "interrupted")
        if finished or latest is None or os.path.isdir(latest.checkpoint.path):
            continue
        assert record is not None
        kept = [c for c in record.checkpoints if os.path.isdir(c["path"])]
        manager._checkpoint_results = [r for r in manager._checkpoint_results if os.path.isdir(r.checkpoint.path)]
        gone = os.path.basename(latest.checkpoint.path)
        if kept:
            newest = max(kept, key=lambda c: int(c["step"]))
            # Tune resumes the trial's iteration count from these metrics, and names its next
            # checkpoint after this one.
            metrics = {**latest.metrics, "training_iteration": int(newest["step"])}
            result = _TrainingResult(checkpoint=tune.Checkpoint(newest["path"]), metrics=metrics)
            manager._latest_checkpoint_result = result
            if all(r.checkpoint.path != newest["path"] for r in manager._checkpoint_results):
                manager._checkpoint_results.append(result)
            trial_state["storage"].current_checkpoint_index = int(os.path.basename(newest["path"]).rsplit("_", 1)[1])
            lines.append(
                f"{record.name}: Tune's saved state names {gone}, which its retention had deleted; "
                f"it goes on from {os.path.basename(newest['path'])} (step {newest['step']})."
            )
        else:
            manager._latest_checkpoint_result = None
            lines.append(f"{record.name}: Tune's saved state names {gone}, which is gone; it starts again.")
        entry[0] = json.dumps(trial_state, indent=2, cls=TuneFunctionEncoder)
        entry[1] = metadata.get_json_state()
    if lines:
        temporary = state_path + ".tunetrain"
        Path(temporary).write_text(json.dumps(state, indent=2, cls=TuneFunctionEncoder))
        os.replace(temporary, state_path)
    return lines


def run_sweep(plan: SweepPlan, *, stream: TextIO, log_dir: Path) -> SweepOutcome:
    """Run the planned sweep to the end (or to Ctrl+C) and record it; Ray must be connected."""
    exp = plan.experiment
    journaled: dict[str, TrialRecord] = {}
    resumes = 0
    if plan.resume:  # the trials as the sweep recorded them before it stopped
        state = Journal.read(plan.journal_path)
        journaled = records_from_journal(state.entries, exp)
        resumes = sum(1 for entry in state.entries if entry["op"] == "resume_sweep") + 1
    recorder = SweepRecorder(
        tracking_uri=plan.tracking_uri,
        experiment_name=exp.name,
        artifact_location=_artifact_location(plan.tracking_uri),
        error_stream=stream,
        journal=plan.journal_path,
        header={"sweep_name": plan.sweep_name, "sweep_id": plan.sweep_id, "command": plan.command, "cwd": os.getcwd()},
    )
    params, tags = sweep_tags(plan)
    if plan.resume:
        parent_run_id = recorder.resume_sweep(
            tags={
                schema.RESUMES_TAG: resumes,
                f"{schema.RESUME_COMMAND_PREFIX}{resumes}": plan.command,
                schema.NUM_SAMPLES_TAG: exp.num_samples,
            }
        )
    else:
        parent_run_id = recorder.start_sweep(run_name=plan.sweep_name, params=params, tags=tags, sweep_id=plan.sweep_id)
        if exp.source_path:
            recorder.log_sweep_artifact(exp.source_path)
            diff = provenance.git_diff(exp.source_path) if tags.get(schema.GIT_DIRTY_TAG) == "true" else ""
            if diff:  # the uncommitted changes the sweep ran with
                recorder.log_sweep_text(diff, schema.GIT_DIFF_ARTIFACT)

    interrupted = False
    crashed = False
    gate = None
    stopper = SweepStopper(exp)
    view = LiveView(metric=exp.primary_metric, mode=exp.primary_mode, total=exp.total_trials, stream=stream)
    callback: SweepCallback | None = None
    # From here on the parent run exists: whatever is raised, the finally closes it.
    try:
        scheduler = build_scheduler(exp)
        gate = budget_gate(exp, plan.budget)
        if gate is not None:
            scheduler.budget_gate = gate
        live_limit = searcher_live_limit(scheduler, plan.max_concurrent)
        searcher, first = build_searcher(exp, seed=plan.root_seed, max_concurrent=live_limit)
        callback = SweepCallback(
            plan=plan,
            recorder=recorder,
            view=view,
            stopper=stopper,
            scheduler=scheduler,
            provenance=trial_provenance(tags),
            budget_gate=gate,
            records=journaled,
        )
        spec = TrialSpec(
            train_loop=exp.train_loop,
            num_workers=exp.workers_per_trial,
            use_gpu=exp.use_gpu,
            resources_per_worker=exp.worker_resources,
            placement_strategy=exp.placement_strategy,
            root_seed=plan.root_seed,
            storage_path=train_storage(plan),
            trial_seeds=plan.trial_seeds,
            deterministic=exp.deterministic,
            initial_checkpoint=plan.initial_checkpoint,
            objectives=tuple((metric, str(mode)) for metric, mode in exp.objectives),
            # A multi-worker trial restarts its workers through Ray Train (same Train run);
            # an in-process trial is restarted by Tune (below).
            max_failures=0 if exp.in_process else exp.max_failures,
            # Trials that ended before a crash, which Tune's last saved state still had running.
            finished=frozenset(r.name for r in journaled.values() if r.status in ENDED and r.status != "interrupted"),
        )
        if exp.in_process:
            # The trial itself trains: it holds the worker's resources, and Tune reuses its
            # process for the next trial (no start-up per trial).
            trainable = tune.with_resources(tune.with_parameters(run_trial_in_process, spec=spec), exp.worker_resources)
        else:
            trainable = tune.with_resources(tune.with_parameters(run_trial, spec=spec), DRIVER_RESOURCES)
        limited = exp.searcher not in ("random", "grid")
        search_alg: Any = searcher
        if plan.resume and limited:
            search_alg = _ResumedSearch(
                ConcurrencyLimiter(searcher, max_concurrent=live_limit),  # type: ignore[arg-type]  # a Searcher here
                exp.num_samples,
            )
        tune_config = tune.TuneConfig(
            # metric and mode are the scheduler's and the searcher's own (the searcher may
            # search on several metrics, the scheduler decides on the first).
            scheduler=scheduler,
            search_alg=search_alg,
            num_samples=exp.num_samples,
            max_concurrent_trials=live_limit if limited and not plan.resume else None,
            time_budget_s=exp.stop.time_budget_s,
            trial_name_creator=TrialNamer(first),
            trial_dirname_creator=trial_dirname,
            reuse_actors=exp.in_process,
        )
        run_config = tune.RunConfig(
            name=plan.sweep_name,
            storage_path=plan.storage_path,
            stop=stopper,
            callbacks=[callback],
            failure_config=tune.FailureConfig(max_failures=exp.max_failures if exp.in_process else 0),
            # Every trial's checkpoints are Tune's (see trial.py), kept by the policy;
            # under PBT all of them: a recipient may restore any donor's at any time.
            checkpoint_config=tune.CheckpointConfig(
                num_to_keep=None if callback.population_based else exp.checkpoint.num_to_keep,
                checkpoint_score_attribute=callback.score_attribute,
                checkpoint_score_order=callback.score_order,
            ),
            verbose=0,
        )
        if plan.resume:
            for line in point_at_kept_checkpoints(plan.sweep_dir, journaled):
                print(line, file=stream, flush=True)
            # Tune restores the trials, the searcher's state and its counters from the sweep
            # folder, but the scheduler, stopper and callbacks as it pickled them when the
            # sweep started; Tuner.restore takes no new ones, so this run's (which hold the
            # recorder, the live view and the journaled trials) take their place.
            tuner = tune.Tuner.restore(
                plan.sweep_dir,
                trainable,
                param_space=plan.param_space,
                resume_unfinished=True,
                resume_errored=False,
                restart_errored=False,
            )
            restored = tuner._local_tuner
            assert restored is not None
            restored._tune_config, restored._run_config = tune_config, run_config
        else:
            tuner = tune.Tuner(trainable, param_space=plan.param_space, tune_config=tune_config, run_config=run_config)
        tuner.fit()
    except KeyboardInterrupt:
        interrupted = True
    except BaseException:
        crashed = True
        raise
    finally:
        # Whatever happened, nothing stays RUNNING: close every trial and the sweep.
        if callback is not None:
            interrupted = callback.end_unfinished() or interrupted
        records = sorted(callback.records.values(), key=lambda r: r.index) if callback else []
        view.update(records, force=True)
        view.close()
        outcome = SweepOutcome(
            sweep_name=plan.sweep_name,
            sweep_id=plan.sweep_id,
            metric=exp.primary_metric,
            mode=exp.primary_mode,
            trials=records,
            experiment_id=recorder.experiment_id,
            parent_run_id=parent_run_id,
            tracking_uri=plan.tracking_uri,
            run_ids={},
            bad_input=stopper.bad_input,
            bad_input_fix=stopper.bad_input_fix,
            interrupted=interrupted and stopper.bad_input is None,
            log_path=str(log_dir),
            storage_path=f"{plan.storage_path}/{plan.sweep_name}",
            stop_reason=gate.reason if gate is not None and gate.refused else "",
        )
        pareto_tags: dict[str, Any] = {}
        if outcome.stop_reason:
            pareto_tags[schema.STOP_REASON_TAG] = outcome.stop_reason
        # Every Train run has ended: none of Train's own checkpoint copies is needed.
        remove_train_copies(plan.sweep_dir, "train")
        if "://" not in plan.storage_path:  # what the kept checkpoints cost on disk
            outcome.checkpoints_kept, outcome.checkpoint_bytes = checkpoint_usage(plan.sweep_dir)
            pareto_tags[schema.CHECKPOINTS_KEPT_TAG] = outcome.checkpoints_kept
            pareto_tags[schema.CHECKPOINT_BYTES_TAG] = outcome.checkpoint_bytes
        if exp.multi_objective:
            outcome.objectives = [(metric, str(mode)) for metric, mode in exp.objectives]
            outcome.pareto = pareto_front(records, outcome.objectives)
            for record in outcome.pareto:
                recorder.set_tags(record.name, {schema.PARETO_TAG: "true"})
            recorder.flush()
            pareto_tags = {
                schema.OBJECTIVES_TAG: ", ".join(f"{m} ({mode})" for m, mode in outcome.objectives),
                schema.PARETO_TRIALS_TAG: ",".join(r.name for r in outcome.pareto),
                schema.PARETO_RUN_IDS_TAG: ",".join(recorder.run_id(r.name) or "" for r in outcome.pareto),
            }
        best = outcome.best
        recorder.end_sweep(
            status="FAILED" if crashed or outcome.bad_input else ("KILLED" if outcome.interrupted else "FINISHED"),
            best_metrics={schema.BEST_METRIC_PREFIX + exp.primary_metric: best.best_value}
            if best and best.best_value is not None
            else {},
            tags={
                **pareto_tags,
                schema.TRIALS_TAG: len(records),
                # Every status, 0 included: a resumed sweep's counts replace the last session's.
                **{schema.TRIALS_STATUS_PREFIX + s: outcome.count(s) for s in ENDED},
            },
            best_trial=best.name if best else None,
            best_config=best.config if best else None,
            step=resumes,
        )
        recorder.flush()
        outcome.run_ids = {r.name: rid for r in records if (rid := recorder.run_id(r.name))}
        recorder.close()
        if recorder.unsent:
            print(
                f"tunetrain: {recorder.unsent} record(s) did not reach the MLflow store at {plan.tracking_uri}; "
                f"they are kept in {plan.journal_path}.\n  Write them when it is back: tunetrain sync "
                f"{plan.sweep_name} --storage {plan.storage_path}",
                file=stream,
            )
        if recorder.error_count:
            print(
                f"tunetrain: {recorder.error_count} MLflow tracking error(s); the first: {recorder.first_error}",
                file=stream,
            )
    return outcome


class _ResumedSearch(SearchGenerator):
    """Tune's wrapper of a searcher (as ``Tuner`` builds it), whose restored count of trials
    to run becomes the resumed sweep's ``num_samples``: Tune restores the old one, and a
    resumed sweep may be told to run more trials."""

    def __init__(self, searcher: Any, num_samples: int) -> None:
        super().__init__(searcher)
        self._wanted = num_samples

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        if self._total_samples < self._wanted:
            self._total_samples, self._finished = self._wanted, False


def trial_shape(experiment: Experiment) -> dict[str, str]:
    """The tags that say how a trial runs (workers, runner): a smoke run's timings price only
    sweeps of the same shape."""
    return {
        schema.WORKERS_PER_TRIAL_TAG: _workers_text(experiment),
        schema.TRIAL_RUNNER_TAG: "in_process" if experiment.in_process else "torch_trainer",
    }


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


def _artifact_location(tracking_uri: str) -> str | None:
    """For the embedded sqlite store, keep artifacts beside the database file."""
    if tracking_uri.startswith("sqlite:///"):
        db = Path(tracking_uri[len("sqlite:///") :])
        return (db.parent / "mlartifacts").resolve().as_uri()
    return None
