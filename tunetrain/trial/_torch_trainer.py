"""The TorchTrainer runner: a multi-worker trial is a Train V2 run driven from its Tune trial."""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import uuid
from typing import Any

import ray.train
from ray import tune
from ray.train import CheckpointConfig, FailureConfig, RunConfig
from ray.train.v2.api.callback import UserCallback
from ray.train.v2.api.config import ScalingConfig  # Train V2's: num_workers may be an elastic range

from tunetrain import _internals
from tunetrain.trial._worker import (
    NODES_KEY,
    OOM_KEY,
    RESTARTS_KEY,
    TRAIN_GROUPS_KEY,
    TrialSpec,
    headline,
    oom_in_error,
    remove_train_copies,
    trial_index,
    worst_for_diverged,
    worst_values,
)


@ray.remote(num_cpus=0)
class _ReportRelay:
    """Hands Train's reports from its controller to the trial driver, one at a time."""

    def __init__(self) -> None:
        self._items: asyncio.Queue[Any] = asyncio.Queue(maxsize=1)
        self._acks: asyncio.Queue[None] = asyncio.Queue()
        self._nodes: list[dict[str, Any]] = []  # per rank of the current worker group
        self._nodes_new = False  # noted since the driver last got them
        self._groups: list[Any] = []  # the Train run's placement groups (one per worker group)
        self._rounds = 0  # reports Train's controller has passed on (each round of every rank)
        self._rounds_changed = asyncio.Condition()

    async def put(self, item: Any) -> None:
        """Deliver ``item`` and return once the driver has acknowledged it."""
        if isinstance(item, tuple) and isinstance(item[0], dict):  # a report (metrics, checkpoint, controller)
            async with self._rounds_changed:
                self._rounds += 1
                self._rounds_changed.notify_all()
        await self._items.put(item)
        await self._acks.get()

    async def wait_rounds(self, rounds: int, timeout_s: float) -> bool:
        """Whether the controller has passed on ``rounds`` reports, waiting up to ``timeout_s``."""
        async with self._rounds_changed:
            try:
                await asyncio.wait_for(self._rounds_changed.wait_for(lambda: self._rounds >= rounds), timeout_s)
            except TimeoutError:
                return False
        return True

    async def get(self) -> tuple[Any, list[dict[str, Any]] | None, list[str]]:
        """The next item, the workers' nodes once every rank of a new group has noted its
        own (else None), and the Train run's placement groups so far (their ids): one call
        per report, not two."""
        item = await self._items.get()
        groups = [group.id.hex() for group in self._groups]
        if self._nodes_new and all(self._nodes):
            self._nodes_new = False
            return item, list(self._nodes), groups
        return item, None, groups

    async def ack(self) -> None:
        await self._acks.put(None)

    def note_node(self, rank: int, world_size: int, node: dict[str, Any], group: Any = None) -> None:
        if world_size != len(self._nodes):  # a new worker group (restart or resize)
            self._nodes = [{} for _ in range(world_size)]
        if self._nodes[rank] != node:
            self._nodes[rank], self._nodes_new = node, True
        if group is not None and group not in self._groups:
            self._groups.append(group)


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
        reasons = [f"rank {rank}: {headline(exc)}" for rank, exc in sorted(worker_exceptions.items())]
        ray.get(self._mailbox.put.remote((_WORKER_FAILED, "; ".join(reasons))))


def _trainer(config: dict[str, Any], spec: TrialSpec, *, name: str, index: int, mailbox: Any, run_name: str) -> Any:
    """The trial's TorchTrainer: its workers run the train loop behind ``worker_main``, and
    rank 0's reports reach the trial through ``mailbox`` (``_ReportToTrial``)."""
    # Imported here: it imports torch (about 2 s of CPU on 2 cores), which the trial processes
    # of the other runners, importing this package, pay only when their loop uses torch.
    from ray.train.torch import TorchConfig, TorchTrainer

    return TorchTrainer(
        spec.worker_loop(name, index, start_checkpoint=spec.start_checkpoint(), mailbox=mailbox),
        train_loop_config=config,
        torch_config=TorchConfig(backend=spec.dist_backend),
        # The sweep's materialized datasets, split by Train itself (spec.data_config or its default).
        datasets=dict(spec.datasets) or None,
        **({"dataset_config": spec.data_config} if spec.data_config is not None else {}),
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


def run_trial(config: dict[str, Any], spec: TrialSpec) -> None:
    """The Tune function of a multi-worker trial: run a TorchTrainer, report what it reports.

    A trial that Tune restored (a PBT exploit, a HyperBand resume, a retry) starts a new Train
    run whose workers get the restored checkpoint from ``ray.train.get_checkpoint()``.
    """
    name = tune.get_context().get_trial_name()
    if name in spec.finished:
        return
    index = trial_index(name)
    mailbox = _ReportRelay.remote()  # type: ignore[attr-defined]
    run_name = f"{name}-{uuid.uuid4().hex[:8]}"
    trainer = _trainer(config, spec, name=name, index=index, mailbox=mailbox, run_name=run_name)
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
    reported_groups: list[str] = []  # the Train run's placement groups, as last reported
    try:
        while True:
            item, new_nodes, groups = ray.get(mailbox.get.remote())
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
            if groups != reported_groups:  # for the sweep, which removes them when the trial ends
                metrics[TRAIN_GROUPS_KEY] = reported_groups = groups
            tune.report(metrics, checkpoint=checkpoint)  # raises SystemExit when Tune stops the trial
            mailbox.ack.remote()
    finally:
        if not ended and controller is not None:
            # Tune stopped the trial (scheduler stop, PBT or HyperBand pause, Ctrl+C): abort the
            # Train run so that its workers and placement group go now. Left to die with this
            # process, Ray 2.60's placement-group cleaner sometimes keeps the group, and its
            # CPUs stay taken for the rest of the sweep.
            mailbox.ack.remote()
            # Tune may end this process within a second of the stop, before the abort has
            # removed the run's placement group: the sweep removes it too when the trial
            # ends (TrainGroupCleanup).
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


class TrainGroupCleanup(tune.Callback):
    """Removes a TorchTrainer trial's Train placement groups when the trial ends.

    When Tune stops a trial (its stop rule, a scheduler's stop, a pause), it ends the trial's
    process within a second or so. The trial aborts its Train run first, but the abort (Train
    waits up to 5 s for its workers) is often cut short, and Ray 2.60 then keeps the run's
    placement group although its owner is gone: its resources stay taken for the rest of the
    sweep. Measured on 2 fake GPUs, 1 GPU per trial: two such groups held both GPUs and the
    next trials waited for ever. The sweep's driver outlives the trial, so it removes them.
    """

    def __init__(self) -> None:
        self._groups: dict[str, list[str]] = {}

    def on_trial_result(
        self, iteration: int, trials: list[Any], trial: Any, result: dict[str, Any], **info: Any
    ) -> None:
        if result.get(TRAIN_GROUPS_KEY):
            self._groups[trial.trial_id] = list(result[TRAIN_GROUPS_KEY])

    def on_trial_complete(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._remove(trial.trial_id)

    def on_trial_error(self, iteration: int, trials: list[Any], trial: Any, **info: Any) -> None:
        self._remove(trial.trial_id)

    def _remove(self, trial_id: str) -> None:
        from ray.util.placement_group import PlacementGroup, remove_placement_group

        for group_id in self._groups.pop(trial_id, []):
            with contextlib.suppress(Exception):  # Train removed it already
                remove_placement_group(PlacementGroup(ray.PlacementGroupID(bytes.fromhex(group_id))))
