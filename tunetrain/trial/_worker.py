"""What both trial runners share: result keys, trial names and seeds, diverged and
out-of-memory values, the worker's wrapper of the train loop."""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import re
import shutil
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import ray.train
from ray import tune

from tunetrain import _internals
from tunetrain.context import TrialContext, set_context
from tunetrain.records import HOST_OOM, as_number
from tunetrain.seeding import derive_seed, seed_everything
from tunetrain.storage import Storage

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
# A TorchTrainer trial's Train placement groups (ids), reported when they change: the sweep
# removes them when the trial ends (see trial._torch_trainer.TrainGroupCleanup).
TRAIN_GROUPS_KEY = "tunetrain.train_groups"
# A single-worker trial that ran out of memory reports this (its error and peak memory) with
# the worst value of each objective, and ends; the sweep records it as "oom".
OOM_KEY = "tunetrain.oom"
# The line a multi-worker trial's error carries when a worker ran out of memory.
OOM_MARK = "tunetrain: out of memory"


def this_node() -> dict[str, Any]:
    """This worker's Ray node (IP address, node id) and device: type, name and memory (GiB)."""
    from tunetrain import provenance

    context = ray.get_runtime_context()
    node = {"ip": ray.util.get_node_ip_address(), "node_id": context.get_node_id()}
    gpus = context.get_accelerator_ids().get("GPU") or []
    if gpus:
        import torch  # only here: a CPU trial's process imports it only if its loop does

        if torch.cuda.is_available():
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
    # The experiment's Ray Datasets, materialized once by the driver, and its DataConfig.
    datasets: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    data_config: Any = None
    # torch.distributed's backend for multi-worker trials ("nccl" or "gloo").
    dist_backend: str = "gloo"

    def shards(
        self, world_size: int, worker_handles: list[Any] | None = None, node_ids: list[str] | None = None
    ) -> list[dict[str, Any]]:
        """Each rank's dataset shards, split as a TorchTrainer splits them."""
        from tunetrain.trial._data import dataset_shards

        return dataset_shards(
            self.datasets,
            self.data_config,
            world_size=world_size,
            worker_handles=worker_handles,
            worker_node_ids=node_ids,
        )

    def start_checkpoint(self) -> Any:
        restored = tune.get_checkpoint()
        if restored is None and self.initial_checkpoint is not None:
            return ray.train.Checkpoint.from_directory(self.initial_checkpoint)
        return restored

    def trial_seed(self, index: int) -> int:
        return trial_seed(self.root_seed, index, self.trial_seeds)

    def worker_loop(
        self, name: str, index: int, *, start_checkpoint: Any = None, mailbox: Any = None
    ) -> Callable[[dict[str, Any]], Any]:
        """The train loop as each runner's workers run it (:func:`worker_main`), with this
        spec's seeds, determinism and objectives: one call for the three runners."""
        return worker_main(
            self.train_loop,
            name,
            index,
            self.trial_seed(index),
            start_checkpoint=start_checkpoint,
            deterministic=self.deterministic,
            mailbox=mailbox,
            objectives=self.objectives,
        )


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
        metric: value
        for metric, _ in objectives
        if (value := as_number(metrics.get(metric))) is not None and not math.isfinite(value)
    }
    if not diverged:
        return metrics
    worst = {metric: value for metric, value in worst_values(objectives).items() if metric in diverged}
    return {**metrics, **worst, DIVERGED_KEY: diverged}


def numbers_as_floats(metrics: Mapping[str, Any]) -> dict[str, Any]:
    """A report with every number of another numeric type (NumPy's, a 0-d tensor) as a
    Python float, nested dicts too; other values stay as they are (the sweep refuses them,
    naming the key). Applied before Ray sees the report: Ray Train refuses a tensor, and the
    scheduler, the searcher and the record all get the same float."""
    plain: dict[str, Any] = {}
    for key, value in metrics.items():
        if isinstance(value, Mapping):
            plain[key] = numbers_as_floats(value)
        elif isinstance(value, int | float) or (number := as_number(value)) is None:
            plain[key] = value  # Python's numbers as they are (an int stays an int for Tune)
        else:
            plain[key] = number
    return plain


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


class _WorkerUtils:
    """A Train worker's utilities, except that ``report`` passes numbers of any numeric type
    on as floats (:func:`numbers_as_floats`), and ``get_checkpoint()`` gives ``checkpoint``
    until the run has a checkpoint of its own: how a new Train run starts from the Tune
    checkpoint a trial was restored from (Train V2 dropped ``resume_from_checkpoint``)."""

    def __init__(self, inner: Any, checkpoint: Any) -> None:
        self._inner = inner
        self._checkpoint = checkpoint
        self.reports = 0  # reports this rank made (each one queued for Train's controller)

    def report(self, metrics: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
        out = self._inner.report(numbers_as_floats(metrics), *args, **kwargs)
        self.reports += 1
        return out

    def get_checkpoint(self) -> Any:
        return self._inner.get_checkpoint() or self._checkpoint

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def worker_main(
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
        utils = _WorkerUtils(_internals.get_train_fn_utils(), start_checkpoint)
        _internals.set_train_fn_utils(utils)
        context = ray.train.get_context()
        rank = context.get_world_rank()
        if mailbox is not None:  # where this rank runs, for the trial's record
            # Rank 0 also names the Train run's placement group, which the sweep removes
            # when the trial ends (see TrainGroupCleanup).
            group = ray.util.get_current_placement_group() if rank == 0 else None
            mailbox.note_node.remote(rank, context.get_world_size(), this_node(), group)
        worker_seed = derive_seed(trial_seed, rank)
        seed_everything(worker_seed)
        set_context(
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
            if mailbox is not None and context.get_world_size() > 1:
                _let_the_controller_take_our_reports(mailbox, utils.reports)
            if not _out_of_memory(exc):
                raise
            peak = _peak_memory_gib()
            if context.get_world_size() == 1 and objectives:
                # The scheduler and searcher see the worst value; the trial ends as "oom".
                ray.train.report({**worst_values(objectives), OOM_KEY: _oom_record(exc, peak)})
                return None
            # With several workers the others wait in collectives for this one: the Train
            # run fails, and the trial driver reports the worst value (see run_trial).
            raise RuntimeError(f"{OOM_MARK} (peak allocated {peak} GiB): {headline(exc)}") from exc
        finally:
            set_context(None)

    return train_loop_per_worker


# How long a failing rank of a TorchTrainer trial waits for Train's controller to take the
# rounds every rank reported (it polls each worker every 2 s, Ray 2.60's default).
REPORT_TAKEN_TIMEOUT_S = 20.0


def _let_the_controller_take_our_reports(mailbox: Any, reports: int) -> None:
    """Wait (bounded) until Train's controller has passed on this rank's ``reports`` rounds.

    Ray Train 2.60's controller polls each worker for one queued report and its error; a
    worker whose poll is still pending from an earlier round answers late, and as soon as any
    rank's error is seen the run fails and reports still queued on the other ranks are
    dropped: the last round that every rank reported never reaches the trial (CI:
    test_a_two_worker_trial_out_of_memory_..., loss history []). Every rank has queued the
    round once its report returned (Train's report waits for all ranks), so the round is
    taken as soon as the slow poll answers, provided no error is seen first: the failing rank
    raises after that. Bounded, for a rank that died before queueing its report.
    """
    if not reports:
        return
    # The trial's driver (and its relay) may have ended already: then raise as it was.
    with contextlib.suppress(ray.exceptions.RayError):
        ray.get(mailbox.wait_rounds.remote(reports, REPORT_TAKEN_TIMEOUT_S))


def _out_of_memory(exc: BaseException) -> bool:
    """Whether an exception is torch's out-of-memory error (CUDA, or any other device)."""
    torch = sys.modules.get("torch")  # not imported: not torch's error (and no import for it)
    return (torch is not None and isinstance(exc, torch.OutOfMemoryError)) or "out of memory" in str(exc).lower()


def _peak_memory_gib() -> float | None:
    """The most GPU memory this process allocated (None without CUDA)."""
    torch = sys.modules.get("torch")  # not imported: it allocated nothing
    if torch is None or not torch.cuda.is_available():
        return None
    return round(torch.cuda.max_memory_allocated() / 2**30, 3)


def _oom_record(exc: BaseException, peak: float | None) -> dict[str, Any]:
    """What the sweep records of an out-of-memory error (under :data:`OOM_KEY`)."""
    return {"error": headline(exc), "peak_memory_gib": peak}


# Ray's memory monitor's message when it kills a worker of a host low on memory (Ray 2.60's
# raylet; it reaches the driver as ray.exceptions.OutOfMemoryError): the reason, and per
# worker considered, its memory.
_RAY_OOM = "worker(s) were killed due to the node running low on memory"
_RAY_OOM_REASON = re.compile(r"OOM kill reason: Memory usage (\d+)B exceeded threshold of (\d+)B \(([0-9.]+)% of")
_RAY_OOM_VICTIM = re.compile(r"Selected to kill: .*?actual memory used=([0-9.]+)GB", re.DOTALL)


def oom_in_error(text: str) -> dict[str, Any] | None:
    """The out-of-memory record in the error of a trial that ran out of memory, else None: a
    Train run that failed because a worker ran out of device memory (the line
    :func:`worker_main` raised), or a trial process that Ray's memory monitor killed because
    the host ran low on memory."""
    if _RAY_OOM in text:
        return _host_oom_record(text)
    if OOM_MARK not in text:
        return None
    peak = re.search(r"peak allocated ([0-9.]+) GiB", text)
    return {"error": headline(RuntimeError(text)), "peak_memory_gib": float(peak.group(1)) if peak else None}


def _host_oom_record(text: str) -> dict[str, Any]:
    """What the sweep records of Ray's memory monitor killing a trial's process: the rule it
    broke, in figures, and the process's memory when killed (its "peak")."""
    reason, victim = _RAY_OOM_REASON.search(text), _RAY_OOM_VICTIM.search(text)
    error = f"{HOST_OOM}: the host ran low on memory"
    if reason:
        used, limit, percent = int(reason.group(1)), int(reason.group(2)), reason.group(3)
        error += f" ({used / 2**30:.2f} GiB in use, over its {limit / 2**30:.2f} GiB threshold, {percent}% of memory)"
    error += "; the threshold is RAY_memory_usage_threshold, set where Ray starts"
    return {"error": error, "peak_memory_gib": float(victim.group(1)) if victim else None}


def headline(exc: BaseException) -> str:
    """An exception's last line (for a worker's error: the user's exception, not Ray's wrapping)."""
    lines = [line.strip() for line in str(exc).strip().splitlines() if line.strip()]
    line = lines[-1] if lines else type(exc).__name__
    return line if len(line) <= 300 else line[:297] + "..."


def remove_train_copies(train_storage: str, run_glob: str) -> None:
    """Delete the folders of Ray Train's own runs matching ``run_glob`` (``trial_0003-*``: every
    Train run of a trial; or one run's name) under ``train_storage`` (local disk only)."""
    if Storage(train_storage).is_uri:
        return
    for folder in Path(train_storage).glob(run_glob):
        shutil.rmtree(folder, ignore_errors=True)
