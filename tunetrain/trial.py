"""The trial driver: how one Ray Tune trial runs the experiment's train loop.

Two runners, one train loop:

* :func:`run_trial` is the Train V2 pattern for tuning distributed training: a small Tune
  function builds a ``TorchTrainer`` whose reports (with their checkpoints) reach Tune
  through a Train callback and calls ``fit()`` (passing a TorchTrainer into ``Tuner`` is
  deprecated in Train V2). The
  driver holds no CPU (see :data:`DRIVER_RESOURCES`), seeds every worker from the trial's
  seed and its rank, and gives each launch a unique Train run name (reusing a name makes
  Train resume that run's old state).
* :func:`run_trial_in_process` runs a single-worker trial's train loop inside the Tune
  trial's own process, which Tune reuses from trial to trial. It installs Ray Train's
  local-mode utilities (what ``TorchTrainer`` itself uses for ``num_workers=0``) with the
  report path bridged to Tune, so ``ray.train.report``, ``get_checkpoint``, ``get_context``
  and ``ray.train.torch.prepare_*`` behave as on a one-worker TorchTrainer, without its
  controller and worker actors (~20 s per trial on 2 CPUs).
"""

from __future__ import annotations

import asyncio
import dataclasses
import math
import os
import re
import shutil
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import ray.train
from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig
from ray.train.torch import TorchTrainer
from ray.train.v2.api.callback import UserCallback
from ray.train.v2.api.config import ScalingConfig  # Train V2's: num_workers may be an elastic range

from tunetrain import _internals
from tunetrain.context import TrialContext, _set_context
from tunetrain.seeding import derive_seed, seed_everything

# A trial driver that takes Tune's default 1 CPU starves its own Train workers on a small
# machine (two trials on 2 CPUs deadlock), and Ray rejects {"CPU": 0}; a token memory
# request gives the driver a resource bundle that costs nothing schedulable.
DRIVER_RESOURCES: dict[str, float] = {"memory": 1}

# Result keys the trial driver adds for the sweep's callback (lists and dicts, so never
# taken for metrics): worker failures the trial restarted from since its last report, and
# the original values of objectives that were not finite (the scheduler and the searcher
# see the worst value instead, see :func:`worst_for_diverged`).
RESTARTS_KEY = "tunetrain.restarts"
DIVERGED_KEY = "tunetrain.diverged"
# Where the trial's workers run: per rank, the node (IP, id) and the device (see
# :func:`this_node`), sent with the first report and again when it changes (a restart, an
# elastic resize).
NODES_KEY = "tunetrain.nodes"
# A single-worker trial that ran out of memory reports this (its error and peak memory) with
# the worst value of each objective, and ends; the sweep records it as "oom".
OOM_KEY = "tunetrain.oom"
# The line a multi-worker trial's error carries when a worker ran out of memory.
OOM_MARK = "tunetrain: out of memory"


def this_node() -> dict[str, Any]:
    """This worker's Ray node (IP address, node id) and device: type, name and memory (GiB)."""
    import torch

    from tunetrain import provenance

    context = ray.get_runtime_context()
    node = {"ip": ray.util.get_node_ip_address(), "node_id": context.get_node_id()}
    gpus = context.get_accelerator_ids().get("GPU") or []
    if gpus and torch.cuda.is_available():
        index = torch.cuda.current_device()
        properties = torch.cuda.get_device_properties(index)
        return {
            **node,
            "device": f"cuda:{index}",
            "device_name": properties.name,
            "device_memory_gib": round(properties.total_memory / 2**30, 1),
        }
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return {**node, "device": "cpu", "device_name": provenance.cpu_model(), "device_memory_gib": round(memory, 1)}


_NAME = "trial_{:04d}"
_NAME_PATTERN = re.compile(r"^trial_(\d+)$")


def trial_name(index: int) -> str:
    return _NAME.format(index)


def trial_index(name: str) -> int:
    """The index in a name made by :func:`trial_name`."""
    match = _NAME_PATTERN.match(name)
    if match is None:
        raise ValueError(f"Not a tunetrain trial name: {name!r}.")
    return int(match.group(1))


@dataclasses.dataclass(frozen=True)
class TrialNamer:
    """Ray Tune ``trial_name_creator``: ``trial_0000``, ``trial_0001``, ... in creation order.

    Tune's experiment tag starts with the searcher's trial counter, which counts from 0 or 1
    depending on the search algorithm class; ``first`` says which.
    """

    first: int

    def __call__(self, trial: Any) -> str:
        return trial_name(int(str(trial.experiment_tag).split("_", 1)[0]) - self.first)


def trial_dirname(trial: Any) -> str:
    """Ray Tune ``trial_dirname_creator``: short and unique."""
    return f"{trial.custom_trial_name}_{trial.trial_id}"


@dataclasses.dataclass(frozen=True)
class TrialSpec:
    """Everything a trial driver needs besides the config (shipped once via the object store)."""

    train_loop: Callable[[dict[str, Any]], Any]
    num_workers: int | tuple[int, int]  # a (min, max) range: an elastic trial
    use_gpu: bool
    resources_per_worker: dict[str, float]
    placement_strategy: str
    root_seed: int
    storage_path: str
    max_failures: int = 0
    # Replay: the seeds of trials 0, 1, ... as recorded, instead of derived from root_seed.
    trial_seeds: tuple[int, ...] = ()
    deterministic: bool = False
    # A smoke run's round trip: trials start from this checkpoint folder (unless Tune
    # restored them from one of their own).
    initial_checkpoint: str | None = None
    # (metric, mode) of each objective: a non-finite value is reported as the worst one.
    objectives: tuple[tuple[str, str], ...] = ()
    # Resuming: trials the sweep recorded as ended, which Tune's last saved state (written
    # a moment before) still had running; they end at once instead of running again.
    finished: frozenset[str] = frozenset()

    def start_checkpoint(self) -> Any:
        restored = tune.get_checkpoint()
        if restored is None and self.initial_checkpoint is not None:
            return ray.train.Checkpoint.from_directory(self.initial_checkpoint)
        return restored

    def trial_seed(self, index: int) -> int:
        return trial_seed(self.root_seed, index, self.trial_seeds)


def trial_seed(root_seed: int, index: int, fixed: tuple[int, ...] = ()) -> int:
    """Trial ``index``'s seed: derived from the root seed, or given (a replay)."""
    return fixed[index] if index < len(fixed) else derive_seed(root_seed, index)


def worst_for_diverged(metrics: dict[str, Any], objectives: tuple[tuple[str, str], ...]) -> dict[str, Any]:
    """``metrics`` with each non-finite objective replaced by its worst value (+inf to
    minimise, -inf to maximise) and the original under :data:`DIVERGED_KEY`.

    Ray Tune's searchers take NaN for a failed trial (Optuna marks it FAIL and learns
    nothing from it) and ASHA's percentiles skip it; a diverged trial is a bad result, so
    both see the worst value. The sweep records the value the loop reported.
    """
    diverged = {
        metric: float(metrics[metric])
        for metric, _ in objectives
        if isinstance(metrics.get(metric), int | float) and not math.isfinite(metrics[metric])
    }
    if not diverged:
        return metrics
    worst = {metric: value for metric, value in worst_values(objectives).items() if metric in diverged}
    return {**metrics, **worst, DIVERGED_KEY: diverged}


def worst_values(objectives: tuple[tuple[str, str], ...]) -> dict[str, float]:
    """The worst value of each objective: +inf to minimise, -inf to maximise."""
    return {metric: math.inf if mode == "min" else -math.inf for metric, mode in objectives}


def make_deterministic() -> None:
    """torch's deterministic algorithms and the settings they need (``--deterministic``)."""
    import torch

    # cuBLAS needs a fixed workspace for deterministic matrix products (read when CUDA starts).
    os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
    torch.use_deterministic_algorithms(True)
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.deterministic = True


class _StartFrom:
    """A Train worker's utilities, except that ``get_checkpoint()`` gives ``checkpoint`` until
    the run has a checkpoint of its own: how a new Train run starts from the Tune checkpoint
    a trial was restored from (Train V2 dropped ``resume_from_checkpoint``)."""

    def __init__(self, inner: Any, checkpoint: Any) -> None:
        self._inner = inner
        self._checkpoint = checkpoint

    def get_checkpoint(self) -> Any:
        return self._inner.get_checkpoint() or self._checkpoint

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def _worker_main(
    train_loop: Callable[[dict[str, Any]], Any],
    name: str,
    index: int,
    trial_seed: int,
    start_checkpoint: Any = None,
    deterministic: bool = False,
    mailbox: Any = None,
    objectives: tuple[tuple[str, str], ...] = (),
) -> Callable[[dict[str, Any]], Any]:
    """Wrap the user's train loop: seed this worker and set its context, then run it unchanged."""

    def train_loop_per_worker(config: dict[str, Any]) -> Any:
        if deterministic:
            make_deterministic()
        if start_checkpoint is not None:
            _internals.set_train_fn_utils(_StartFrom(_internals.get_train_fn_utils(), start_checkpoint))
        context = ray.train.get_context()
        rank = context.get_world_rank()
        if mailbox is not None:  # where this rank runs, for the trial's record
            mailbox.note_node.remote(rank, context.get_world_size(), this_node())
        worker_seed = derive_seed(trial_seed, rank)
        seed_everything(worker_seed)
        _set_context(
            TrialContext(
                trial_name=name,
                trial_index=index,
                trial_seed=trial_seed,
                worker_seed=worker_seed,
                rank=rank,
                world_size=context.get_world_size(),
            )
        )
        try:
            return train_loop(config)
        except Exception as exc:
            if not _out_of_memory(exc):
                raise
            peak = _peak_memory_gib()
            if context.get_world_size() == 1 and objectives:
                # The scheduler and searcher see the worst value; the trial ends as "oom".
                ray.train.report({**worst_values(objectives), OOM_KEY: _oom_record(exc, peak)})
                return None
            # With several workers the others wait in collectives for this one: the Train
            # run fails, and the trial driver reports the worst value (see run_trial).
            raise RuntimeError(f"{OOM_MARK} (peak allocated {peak} GiB): {_headline(exc)}") from exc
        finally:
            _set_context(None)

    return train_loop_per_worker


@ray.remote(num_cpus=0)
class _Mailbox:
    """Hands Train's reports from its controller to the trial driver, one at a time."""

    def __init__(self) -> None:
        self._items: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)
        self._acks: asyncio.Queue[None] = asyncio.Queue()
        self._nodes: list[dict[str, Any]] = []  # per rank of the current worker group
        self._nodes_new = False  # noted since the driver last got them

    async def put(self, item: Any) -> None:
        """Deliver ``item`` and return once the driver has acknowledged it."""
        await self._items.put(item)
        await self._acks.get()

    async def get(self) -> tuple[Any, list[dict[str, Any]] | None]:
        """The next item, and the workers' nodes once every rank of a new group has noted its
        own (else None): one call per report, not two."""
        item = await self._items.get()
        if self._nodes_new and all(self._nodes):
            self._nodes_new = False
            return item, list(self._nodes)
        return item, None

    async def ack(self) -> None:
        await self._acks.put(None)

    def note_node(self, rank: int, world_size: int, node: dict[str, Any]) -> None:
        if world_size != len(self._nodes):  # a new worker group (restart or resize)
            self._nodes = [{} for _ in range(world_size)]
        if self._nodes[rank] != node:
            self._nodes[rank], self._nodes_new = node, True


_FIT_ENDED = "tunetrain:fit-ended"
_WORKER_FAILED = "tunetrain:worker-failed"


class _ReportToTrial(UserCallback):
    """Train V2 callback (runs in Train's controller): passes rank 0's metrics and the
    checkpoint of each report to the trial driver, which reports both to Tune.

    Ray's ``TuneReportCallback`` passes only the checkpoint's path as a metric, so Tune holds
    no checkpoint of the trial and cannot pause and resume it (HyperBand) or clone it (PBT).
    The controller waits until the driver has reported (Tune has copied the checkpoint into
    the trial's storage) before it goes on, so Train's retention never deletes a checkpoint
    that Tune has not taken yet.
    """

    def __init__(self, mailbox: Any) -> None:
        self._mailbox = mailbox

    def after_report(self, run_context: Any, metrics: list[dict[str, Any]], checkpoint: Any) -> None:
        # This runs in Train's controller actor: its handle lets the driver abort the run.
        controller = ray.get_runtime_context().current_actor
        ray.get(self._mailbox.put.remote((dict(metrics[0]), checkpoint, controller)))

    def after_exception(self, run_context: Any, worker_exceptions: dict[int, Exception]) -> None:
        # A worker raised or died: Train restarts the group from its latest checkpoint (up to
        # max_failures times) or ends the run; the driver records why with its next report.
        reasons = [f"rank {rank}: {_headline(exc)}" for rank, exc in sorted(worker_exceptions.items())]
        ray.get(self._mailbox.put.remote((_WORKER_FAILED, "; ".join(reasons))))


def _out_of_memory(exc: BaseException) -> bool:
    """Whether an exception is torch's out-of-memory error (CUDA, or any other device)."""
    import torch

    return isinstance(exc, torch.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _peak_memory_gib() -> float | None:
    """The most GPU memory this process allocated (None without CUDA)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 3)


def _oom_record(exc: BaseException, peak: float | None) -> dict[str, Any]:
    """What the sweep records of an out-of-memory error (under :data:`OOM_KEY`)."""
    return {"error": _headline(exc), "peak_memory_gib": peak}


def oom_in_error(text: str) -> dict[str, Any] | None:
    """The out-of-memory record in the error of a Train run that failed because a worker ran
    out of memory (the line :func:`_worker_main` raised), else None."""
    if OOM_MARK not in text:
        return None
    peak = re.search(r"peak allocated ([0-9.]+) GiB", text)
    return {"error": _headline(RuntimeError(text)), "peak_memory_gib": float(peak.group(1)) if peak else None}


def _headline(exc: BaseException) -> str:
    """An exception's last line (for a worker's error: the user's exception, not Ray's wrapping)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    line = lines[-1] if lines else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def remove_train_copies(train_storage: str, run_glob: str) -> None:
    """Delete the folders of Ray Train's own runs matching ``run_glob`` (``trial_0003-*``: every
    Train run of a trial; or one run's name) under ``train_storage`` (local disk only)."""
    if "://" in train_storage:
        return
    for folder in Path(train_storage).glob(run_glob):
        shutil.rmtree(folder, ignore_errors=True)


def run_trial(config: dict[str, Any], spec: TrialSpec) -> None:
    """The Tune function of a multi-worker trial: run a TorchTrainer, report what it reports.

    A trial that Tune restored (a PBT exploit, a HyperBand resume, a retry) starts a new Train
    run whose workers get the restored checkpoint from ``ray.train.get_checkpoint()``.
    """
    name = tune.get_context().get_trial_name()
    if name in spec.finished:
        return
    index = trial_index(name)
    seed = spec.trial_seed(index)
    mailbox = _Mailbox.remote()  # type: ignore[attr-defined]
    run_name = f"{name}-{uuid.uuid4().hex[:8]}"
    trainer = TorchTrainer(
        _worker_main(
            spec.train_loop,
            name,
            index,
            seed,
            start_checkpoint=spec.start_checkpoint(),
            deterministic=spec.deterministic,
            mailbox=mailbox,
            objectives=spec.objectives,
        ),
        train_loop_config=config,
        scaling_config=ScalingConfig(
            num_workers=spec.num_workers,
            # An elastic trial looks for more free workers this often (Ray's default: 60 s).
            elastic_resize_monitor_interval_s=float(os.environ.get("TUNETRAIN_ELASTIC_RESIZE_S", "10")),
            use_gpu=spec.use_gpu,
            resources_per_worker=spec.resources_per_worker,
            placement_strategy=spec.placement_strategy,
        ),
        run_config=RunConfig(
            name=run_name,
            storage_path=spec.storage_path,
            callbacks=[_ReportToTrial(mailbox)],  # type: ignore[list-item]  # a Train V2 UserCallback
            # Tune keeps the trial's checkpoints by the experiment's policy; Train keeps its
            # latest only, to restart failed workers from it.
            checkpoint_config=CheckpointConfig(num_to_keep=1),
            failure_config=FailureConfig(max_failures=spec.max_failures),
        ),
    )
    failure: list[BaseException] = []

    def fit() -> None:
        try:
            trainer.fit()
        except BaseException as exc:
            failure.append(exc)
        finally:
            ray.get(mailbox.put.remote(_FIT_ENDED))

    thread = threading.Thread(target=fit, name="tunetrain-fit", daemon=True)
    thread.start()
    controller = None
    ended = False
    restarts: list[str] = []  # worker failures since the last report
    nodes: list[dict[str, Any]] | None = None  # where the workers run, when new: sent with the next report
    try:
        while True:
            item, new_nodes = ray.get(mailbox.get.remote())
            nodes = new_nodes or nodes
            if isinstance(item, str) and item == _FIT_ENDED:
                ended = True
                mailbox.ack.remote()
                break
            if item[0] == _WORKER_FAILED:
                restarts.append(item[1])
                mailbox.ack.remote()
                continue
            metrics, checkpoint, controller = item
            if checkpoint is not None:  # Tune copies it into the trial's storage before report returns
                checkpoint = tune.Checkpoint(checkpoint.path, filesystem=checkpoint.filesystem)
            metrics = worst_for_diverged(metrics, spec.objectives)
            if restarts:
                metrics[RESTARTS_KEY], restarts = restarts, []
            if nodes is not None:
                metrics[NODES_KEY], nodes = nodes, None
            tune.report(metrics, checkpoint=checkpoint)  # raises SystemExit when Tune stops the trial
            mailbox.ack.remote()
    finally:
        if not ended and controller is not None:
            # Tune stopped the trial (scheduler stop, PBT or HyperBand pause, Ctrl+C): abort the
            # Train run so that its workers and placement group go now. Left to die with this
            # process, Ray 2.60's placement-group cleaner sometimes keeps the group, and its
            # CPUs stay taken for the rest of the sweep.
            mailbox.ack.remote()
            _internals.abort_train_run(controller, timeout_s=30)
    thread.join()
    # Tune holds copies of every checkpoint it kept; Train's own (its latest, for restarting
    # workers) is not needed once its run has ended. (A trial that Tune stops may not get
    # here: its process can end first; the sweep removes those when the trial ends.)
    remove_train_copies(spec.storage_path, run_name)
    oom = oom_in_error(str(failure[0])) if failure and spec.objectives else None
    if oom is not None:
        # As for a single worker: the scheduler and searcher see the worst value (a failed
        # trial teaches Optuna nothing), and the sweep records the trial as "oom".
        tune.report({**worst_values(spec.objectives), OOM_KEY: oom})
        return
    if failure:
        # Train tells of every failure, the last (which ended the run) too; the earlier ones
        # used up the trial's restarts and go with the error.
        if restarts[:-1]:
            raise RuntimeError(f"worker failures before the last one: {' | '.join(restarts[:-1])}") from failure[0]
        raise failure[0]


_LocalTrainFnUtils: Any = _internals.train_fn_utils_base()


class _TuneBridge(_LocalTrainFnUtils):
    """Ray Train's local-mode utilities with every ``ray.train.report`` forwarded to Tune.

    Ray's own local mode (``ScalingConfig(num_workers=0)``) only keeps the last report; a
    Tune trial needs each one (the scheduler decides on it, the checkpoint is persisted).
    """

    def __init__(
        self,
        *,
        session: Any,
        experiment_name: str,
        initial_checkpoint: Any = None,
        objectives: tuple[tuple[str, str], ...] = (),
    ) -> None:
        super().__init__(experiment_name=experiment_name)
        self._session = session
        self._initial_checkpoint = initial_checkpoint
        self._objectives = objectives
        self._first = True

    def report(self, metrics: dict[str, Any], checkpoint: Any = None, *args: Any, **kwargs: Any) -> None:
        # The Tune session persists the checkpoint into the trial's storage before it returns,
        # so the train loop may delete its temporary folder right after, as with Train.
        metrics = worst_for_diverged(dict(metrics), self._objectives)
        if self._first:
            metrics[NODES_KEY], self._first = [this_node()], False
        self._session.report(metrics, checkpoint=checkpoint)
        self._last_metrics = metrics

    def get_checkpoint(self) -> Any:
        # The checkpoint Tune restored this trial from (failure retry, PBT exploit, resume),
        # then the latest one reported: what Train's get_checkpoint gives a worker.
        return self._session.loaded_checkpoint or self._initial_checkpoint


def run_trial_in_process(config: dict[str, Any], spec: TrialSpec) -> None:
    """The Tune function of a single-worker trial: run the train loop right here."""
    name = tune.get_context().get_trial_name()
    if name in spec.finished:
        return
    index = trial_index(name)
    session = _internals.tune_session()
    initial = None
    if session.loaded_checkpoint is None and spec.initial_checkpoint is not None:
        initial = ray.train.Checkpoint.from_directory(spec.initial_checkpoint)
    _internals.set_train_fn_utils(
        _TuneBridge(session=session, experiment_name=name, initial_checkpoint=initial, objectives=spec.objectives)
    )
    # The train loop is written for Ray Train: ray.train.* work while it runs.
    try:
        with _internals.train_api_in_tune_function(session):
            _worker_main(
                spec.train_loop,
                name,
                index,
                spec.trial_seed(index),
                deterministic=spec.deterministic,
                objectives=spec.objectives,
            )(config)
    finally:
        _internals.set_train_fn_utils(None)
