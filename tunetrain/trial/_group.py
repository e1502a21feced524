"""The worker-group runner: a fixed multi-worker trial's train loop on N Ray actors that the
trial's own (reused) process keeps from trial to trial, with the torch process group made once.

A TorchTrainer per trial starts a controller, N worker processes and a process group every
time (8-17 s on 2 CPUs). Here the Tune trial process holds, besides its own bundle, the
trial's N worker bundles (one placement group, the experiment's strategy, so the cluster's
accounting is what a TorchTrainer trial's is); it starts N worker actors in them once, makes
the process group once (gloo on CPU, NCCL on GPU), and runs each new trial's train loop on
them. Ray Train's API works unchanged in the loop: ``ray.train.report/get_checkpoint/
get_context`` through Train V2's utilities (as in process, see :mod:`._in_process`), and
``ray.train.torch.prepare_model/prepare_data_loader/get_device`` because the world size,
ranks and the torch process group are what Train would have made.

Every rank calls ``ray.train.report`` at each step (Train's contract); the reports meet in a
mailbox actor, rank 0's metrics and checkpoint go to Tune, and Tune's answer (go on, or stop:
ASHA, PBT, Ctrl+C) goes back to every rank at the same step, so no rank is left waiting in a
collective. Between trials each worker drops what the loop made (garbage collected, CUDA
cache emptied) and the next trial reseeds every RNG; the group answers a barrier before each
trial or is rebuilt. A worker that dies (or raises) takes the group down and the trial fails:
Tune restarts it from its latest checkpoint under ``max_failures`` on a new group, as it does
for in-process trials.

What a reused worker process keeps, as with Ray Tune's ``reuse_actors``: imported modules and
their globals (a cache a loop fills at module level stays filled), and torch's process group.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import os
import uuid
from typing import Any

import ray
import ray.train
from ray import tune
from ray.util.placement_group import get_current_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from tunetrain import _internals
from tunetrain.storage import Storage
from tunetrain.trial._worker import (
    NODES_KEY,
    OOM_KEY,
    TrialSpec,
    headline,
    oom_in_error,
    this_node,
    trial_index,
    worst_for_diverged,
    worst_values,
)

_LocalTrainFnUtils: Any = _internals.train_fn_utils_base()

# How long a collective may wait on a peer before the group is declared broken.
_COLLECTIVE_TIMEOUT_S = float(os.environ.get("TUNETRAIN_GROUP_TIMEOUT_S", "120"))
# How long the stopped workers get to leave their train loop before the group is torn down.
_STOP_TIMEOUT_S = 60.0


class _Stopped(BaseException):
    """Raised in every rank's ``ray.train.report`` when Tune stopped the trial (not an
    ``Exception``, so a loop's ``except Exception`` does not swallow it)."""


@ray.remote(num_cpus=0)
class _RankMeeting:
    """Where the ranks' reports of one step meet: once every rank has reported, rank 0's goes
    to the trial driver; every rank then waits for the driver's answer (go on or stop). (A
    TorchTrainer trial's reports reach its driver through ``_ReportRelay`` instead: Train's
    controller, not the ranks, hands them over, one at a time.)"""

    def __init__(self, world_size: int) -> None:
        import asyncio

        self._world_size = world_size
        self._to_driver: asyncio.Queue[Any] = asyncio.Queue()
        self._round = self._new_round()
        self._stopping = False  # the driver said stop: every later report is answered so at once
        self._getters = 0  # the driver's calls of next() still waiting

    @staticmethod
    def _new_round() -> dict[str, Any]:
        import asyncio

        return {"arrived": 0, "item": None, "answer": None, "event": asyncio.Event()}

    async def report(self, rank: int, item: Any) -> bool:
        if self._stopping:
            return False
        current = self._round
        current["arrived"] += 1
        if rank == 0:
            current["item"] = item
        if current["arrived"] == self._world_size:
            await self._to_driver.put(current["item"])
        await current["event"].wait()
        return bool(current["answer"])

    async def next(self) -> Any:
        self._getters += 1
        try:
            return await self._to_driver.get()
        finally:
            self._getters -= 1

    def answer(self, go_on: bool) -> None:
        current, self._round = self._round, self._new_round()
        self._stopping = not go_on
        current["answer"] = go_on
        current["event"].set()

    def reset(self) -> None:
        """A new trial: nothing of the last one's rounds is left, and a call of next() the
        last trial left waiting gets a stale item (first: the queue serves in order)."""
        self._round["answer"] = False
        self._round["event"].set()
        self._round = self._new_round()
        self._stopping = False
        while not self._to_driver.empty():
            self._to_driver.get_nowait()
        for _ in range(self._getters):
            self._to_driver.put_nowait(None)


class _GroupTrainFnUtils(_LocalTrainFnUtils):
    """Train V2's utilities for one rank of the group: its context (ranks and sizes as Train
    would give them), reports through the mailbox, collectives on torch's process group."""

    def __init__(
        self,
        *,
        experiment_name: str,
        ranks: dict[str, int],
        mailbox: Any,
        start: Any,
        hand_over_to: str | None,
        dataset_shards: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(experiment_name=experiment_name, dataset_shards=dataset_shards, **ranks)
        self._rank = ranks["world_rank"]
        self._mailbox = mailbox
        self._start = start
        self._hand_over_to = hand_over_to

    def report(self, metrics: dict[str, Any], checkpoint: Any = None, *args: Any, **kwargs: Any) -> None:
        item = None
        if self._rank == 0:
            handed_over = checkpoint is not None and self._hand_over_to is not None
            if checkpoint is not None and self._hand_over_to is not None:
                checkpoint = _hand_over(checkpoint, self._hand_over_to)
            item = (dict(metrics), checkpoint, handed_over)
        if not ray.get(self._mailbox.report.remote(self._rank, item)):
            raise _Stopped()

    def get_checkpoint(self) -> Any:
        return self._start  # as on a Train worker: the checkpoint the run started from

    def is_distributed(self) -> bool:
        return True

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier()

    def broadcast_from_rank_zero(self, data: Any) -> Any:
        import torch.distributed as dist

        box = [data]
        dist.broadcast_object_list(box, src=0)
        return box[0]


def _storage_fs(storage_path: str) -> tuple[Any, str]:
    import pyarrow.fs

    if Storage(storage_path).is_uri:
        return pyarrow.fs.FileSystem.from_uri(storage_path)
    return pyarrow.fs.LocalFileSystem(), storage_path


def _hand_over(checkpoint: Any, folder: str) -> Any:
    """A copy of rank 0's checkpoint under ``folder`` in the sweep's storage, which the trial's
    process can read when it runs on another node (the loop's folder is on rank 0's disk);
    the trial's process deletes it once Tune has copied it (as Train uploads a worker's
    checkpoint to storage before its controller hands it on)."""
    import pyarrow.fs

    fs, root = _storage_fs(folder)
    target = f"{root}/{uuid.uuid4().hex}"
    fs.create_dir(target, recursive=True)
    pyarrow.fs.copy_files(checkpoint.path, target, source_filesystem=checkpoint.filesystem, destination_filesystem=fs)
    return ray.train.Checkpoint(target, filesystem=fs)


@ray.remote
class _Worker:
    """One rank of the group: a process that keeps torch's process group between trials."""

    def address(self, world_size: int) -> tuple[str, int]:
        """Rank 0: start the process group's rendezvous store on this node and return its
        IP and port. The store binds port 0 itself and holds it: a port found free by a
        probe and handed on later could be taken by another process in between."""
        import torch.distributed as dist

        host = ray.util.get_node_ip_address()
        self._store = dist.TCPStore(
            host,
            0,
            world_size,
            True,
            timeout=datetime.timedelta(seconds=_COLLECTIVE_TIMEOUT_S),
            wait_for_workers=False,
        )
        return host, int(self._store.port)

    def node(self) -> dict[str, Any]:
        return this_node()

    def where(self) -> tuple[str, list[str]]:
        """This worker's node id and the GPU ids Ray assigned it (no CUDA call: the devices a
        process sees are fixed when CUDA starts, and setup() widens them first)."""
        context = ray.get_runtime_context()
        return context.get_node_id(), [str(i) for i in context.get_accelerator_ids().get("GPU") or []]

    def setup(self, ranks: dict[str, int], master: tuple[str, int], backend: str, visible: str | None) -> None:
        import torch.distributed as dist

        # The variables Ray Train's torch backend sets (libraries such as transformers read them).
        os.environ.update(
            MASTER_ADDR=master[0],
            MASTER_PORT=str(master[1]),
            RANK=str(ranks["world_rank"]),
            WORLD_SIZE=str(ranks["world_size"]),
            LOCAL_RANK=str(ranks["local_rank"]),
            LOCAL_WORLD_SIZE=str(ranks["local_world_size"]),
            NODE_RANK=str(ranks["node_rank"]),
        )
        self._device = None
        if visible is not None:
            # As Ray Train's TorchTrainer does: every rank of the trial on this node sees the
            # GPUs of all of them (so NCCL can go peer to peer), and uses its own Ray-assigned
            # one, at its place in that list (LOCAL_RANK, ranks being ordered by GPU id).
            os.environ["CUDA_VISIBLE_DEVICES"] = visible
            own = ray.get_runtime_context().get_accelerator_ids()["GPU"][0]
            self._device = visible.split(",").index(str(own))
            import torch

            if torch.cuda.is_available():  # not with Ray's fake GPUs on a CPU machine
                torch.cuda.set_device(self._device)
        timeout = datetime.timedelta(seconds=_COLLECTIVE_TIMEOUT_S)
        if ranks["world_rank"] != 0:  # rank 0 made the store in address()
            self._store = dist.TCPStore(master[0], master[1], ranks["world_size"], False, timeout=timeout)
        dist.init_process_group(
            backend, store=self._store, rank=ranks["world_rank"], world_size=ranks["world_size"], timeout=timeout
        )
        self._ranks = ranks

    def check(self) -> bool:
        """A collective every rank must join: the group still works."""
        import torch
        import torch.distributed as dist

        device = torch.device("cuda", self._device or 0) if dist.get_backend() == "nccl" else torch.device("cpu")
        one = torch.ones(1, device=device)
        dist.all_reduce(one)
        return int(one.item()) == self._ranks["world_size"]

    def run(
        self,
        spec: TrialSpec,
        config: dict[str, Any],
        name: str,
        start: Any,
        mailbox: Any,
        driver_node: str,
        shards: dict[str, Any] | None = None,
    ) -> str:
        index = trial_index(name)
        # Rank 0 on another node than the trial's process hands its checkpoints over through
        # the sweep's storage; on the same node the loop's own folder is read directly.
        here = ray.get_runtime_context().get_node_id()
        hand_over_to = f"{spec.storage_path}/{name}-handover" if here != driver_node else None
        _internals.set_train_fn_utils(
            _GroupTrainFnUtils(
                experiment_name=name,
                ranks=self._ranks,
                mailbox=mailbox,
                start=start,
                hand_over_to=hand_over_to,
                dataset_shards=shards,
            )
        )
        loop = spec.worker_loop(name, index)
        try:
            loop(config)
            return "completed"
        except _Stopped:
            return "stopped"
        finally:
            _internals.set_train_fn_utils(None)
            # Nothing of this trial's model, optimizer or data outlives it (the next trial
            # reseeds every RNG itself).
            gc.collect()
            with contextlib.suppress(Exception):
                import torch

                if torch.cuda.is_available():
                    torch.cuda.empty_cache()


class _Group:
    """The workers and mailbox a trial process keeps, in the trial's placement group."""

    def __init__(self, spec: TrialSpec, placement_group: Any) -> None:
        assert isinstance(spec.num_workers, int)  # a fixed number (elastic trials use the TorchTrainer)
        num_workers = spec.num_workers
        resources = dict(spec.resources_per_worker)
        options = {
            "num_cpus": resources.pop("CPU", 0.0),
            "num_gpus": resources.pop("GPU", 0.0),
            "memory": resources.pop("memory", None),
            "resources": resources or None,
        }
        self.placement_group = placement_group
        self.mailbox = _RankMeeting.remote(num_workers)  # type: ignore[attr-defined]
        self.workers = [
            _Worker.options(  # type: ignore[attr-defined]
                **{k: v for k, v in options.items() if v is not None},
                # Bundle 0 is the trial process's own; bundle i + 1 is worker i's.
                scheduling_strategy=PlacementGroupSchedulingStrategy(placement_group, i + 1),
            ).remote()
            for i in range(num_workers)
        ]
        where = ray.get([w.where.remote() for w in self.workers])
        order = list(dict.fromkeys(node_id for node_id, _ in where))
        # Ranks in Ray Train's order: grouped by node, then by lowest GPU id.
        ranked = sorted(
            range(num_workers),
            key=lambda i: (order.index(where[i][0]), min((int(g) for g in where[i][1]), default=-1)),
        )
        self.workers = [self.workers[i] for i in ranked]
        where = [where[i] for i in ranked]
        master = ray.get(self.workers[0].address.remote(num_workers))
        setups = []
        for rank, worker in enumerate(self.workers):
            node_id = where[rank][0]
            same_node = [r for r, (n, _) in enumerate(where) if n == node_id]
            ranks = {
                "world_size": num_workers,
                "world_rank": rank,
                "local_rank": same_node.index(rank),
                "local_world_size": len(same_node),
                "node_rank": order.index(node_id),
            }
            gpus = sorted({g for r in same_node for g in where[r][1]}, key=int)
            visible = ",".join(gpus) if where[rank][1] else None
            setups.append(worker.setup.remote(ranks, master, spec.dist_backend, visible))
        ray.get(setups, timeout=_COLLECTIVE_TIMEOUT_S)
        # After setup: a GPU rank's device is known once its visible GPUs are set.
        self.nodes: list[dict[str, Any]] = ray.get([w.node.remote() for w in self.workers])

    def healthy(self) -> bool:
        try:
            return all(ray.get([w.check.remote() for w in self.workers], timeout=_COLLECTIVE_TIMEOUT_S))
        except Exception:
            return False

    def destroy(self, *, wait_s: float = 0.0) -> None:
        """Kill the group's actors; with ``wait_s``, wait (that long at most) until their
        processes are gone. ``ray.kill`` returns at once and a process goes a moment later:
        after a rank failed (the host out of memory), a rank still holding its memory while
        the next trial starts made Ray's memory monitor kill that trial too."""
        for actor in [*self.workers, self.mailbox]:
            with contextlib.suppress(Exception):
                ray.kill(actor)
        if wait_s > 0:
            # A call to a killed actor fails once the actor is dead, that is once its process
            # has exited (Ray marks it dead when its worker disconnects).
            calls = [worker.node.remote() for worker in self.workers]
            with contextlib.suppress(Exception):
                ray.wait(calls, num_returns=len(calls), timeout=wait_s)


_group: _Group | None = None  # this trial process's group, kept for its next trial


def _group_for(spec: TrialSpec) -> _Group:
    """This process's group when it still works and sits in this trial's placement group,
    else a new one."""
    global _group
    placement_group = get_current_placement_group()
    if placement_group is None:
        raise RuntimeError("a worker-group trial runs in its Tune trial's placement group, and there is none")
    if _group is not None and (_group.placement_group.id != placement_group.id or not _group.healthy()):
        _group.destroy()
        _group = None
    if _group is None:
        _group = _Group(spec, placement_group)
    return _group


def _drop_group(*, wait_s: float = 0.0) -> None:
    global _group
    if _group is not None:
        _group.destroy(wait_s=wait_s)
        _group = None


def run_trial_on_group(config: dict[str, Any], spec: TrialSpec) -> None:
    """The Tune function of a fixed multi-worker trial: run the train loop on this process's
    worker group and report rank 0's reports to Tune."""
    name = tune.get_context().get_trial_name()
    if name in spec.finished:
        return
    group = _group_for(spec)
    ray.get(group.mailbox.reset.remote())
    start = spec.start_checkpoint()
    here = ray.get_runtime_context().get_node_id()
    # Each rank's dataset shards, split across the group's workers as a TorchTrainer's are.
    shards = spec.shards(len(group.workers), group.workers, [n["node_id"] for n in group.nodes])
    runs = {
        w.run.remote(spec, config, name, start, group.mailbox, here, shards[rank]): rank
        for rank, w in enumerate(group.workers)
    }
    waiting = group.mailbox.next.remote()
    nodes: list[dict[str, Any]] | None = group.nodes  # sent with the trial's first report
    stopped = True  # until every rank's loop has returned
    try:
        while runs:
            ready, _ = ray.wait([waiting, *runs], num_returns=1)
            if ready[0] is waiting:
                metrics, checkpoint, handed_over = ray.get(waiting)
                if checkpoint is not None:  # Tune copies it into the trial's storage before report returns
                    checkpoint = tune.Checkpoint(checkpoint.path, filesystem=checkpoint.filesystem)
                metrics = worst_for_diverged(metrics, spec.objectives)
                if nodes is not None:
                    metrics[NODES_KEY], nodes = nodes, None
                try:
                    tune.report(metrics, checkpoint=checkpoint)  # raises SystemExit when Tune stops the trial
                finally:
                    if handed_over:  # Tune has its own copy now
                        with contextlib.suppress(OSError):
                            checkpoint.filesystem.delete_dir(checkpoint.path)
                group.mailbox.answer.remote(True)
                waiting = group.mailbox.next.remote()
                continue
            rank = runs.pop(ready[0])
            try:
                ray.get(ready[0])
            except Exception as exc:
                # A rank raised or its process died: the others may wait in a collective for
                # it; the group goes, and Tune restarts the trial (max_failures) on a new one.
                stopped = False
                _drop_group(wait_s=_STOP_TIMEOUT_S)  # gone before the next trial starts
                oom = oom_in_error(str(exc)) if spec.objectives else None
                if oom is not None:
                    # As with a TorchTrainer: the scheduler and searcher see the worst value,
                    # and the sweep records the trial as "oom".
                    tune.report({**worst_values(spec.objectives), OOM_KEY: oom})
                    return
                raise RuntimeError(f"rank {rank}: {headline(exc)}") from exc
        stopped = False
    finally:
        if stopped and _group is group:
            # Tune stopped the trial (scheduler, PBT, Ctrl+C): every rank leaves its loop at
            # the same report; a group whose loops do not end in time is torn down.
            group.mailbox.answer.remote(False)
            try:
                ray.get(list(runs), timeout=_STOP_TIMEOUT_S)
            except Exception:
                _drop_group()
