"""GPU trials on Ray's fake GPUs: placement, visibility and packing, on a real Ray.

Ray schedules GPUs as a resource whether or not CUDA is there (``ray.init(num_gpus=2)``)
and sets ``CUDA_VISIBLE_DEVICES`` from its assignment, so what each rank is given is
tested here on CPU. The sweeps run in this process, on the Ray it started, as a notebook's
``ray.init(num_gpus=2)`` then ``tunetrain.sweep(...)`` would. The trials use gloo
(``dist_backend="gloo"``): this machine's torch has no NCCL.

Each rank tells a meeting actor what it was given, and waits there until as many trials
as should run at once have arrived (60 s at most), so "N at once" is observed, not timed.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import small_experiment, write_experiment

pytestmark = pytest.mark.slow

NAMESPACE = "tunetrain-fake-gpus"
GPUS = 2

LOOP = """
import os

import ray
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule, get_context


def loop(config):
    context = get_context()
    ids = [str(i) for i in ray.get_gpu_ids()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    seen = {
        "trial": context.trial_name, "rank": context.rank, "pid": os.getpid(), "gpu_ids": ids,
        "visible": visible, "local_rank": ray.train.get_context().get_local_rank(),
        "env_local_rank": os.environ.get("LOCAL_RANK"),
        # The device the rank uses: its own GPU's place among those it sees (Ray Train's rule).
        "device": visible.split(",").index(ids[0]) if ids and ids[0] in visible.split(",") else None,
    }
    meeting = ray.get_actor("@MEETING@")
    ray.get(meeting.enter.remote(seen, @WANT@))
    try:
        for step in range(2):
            ray.train.report({"loss": config["x"] + step})  # the last one may end the loop here
    finally:
        ray.get(meeting.leave.remote(seen))


experiment = Experiment(
    name="gpus", train_loop=loop, metric="loss", mode="min", space={"x": tune.uniform(0, 1)},
    scheduler="fifo", searcher="random", num_samples=@SAMPLES@, stop=StopRule(max_iterations=2), seed=0,
    use_gpu=True, dist_backend="gloo", resources_per_worker=@RESOURCES@, baseline=False,
)
"""


def _body(*, meeting: str, want: int, resources: str, samples: int = 4) -> str:
    body = LOOP.replace("@MEETING@", meeting).replace("@WANT@", str(want)).replace("@RESOURCES@", resources)
    return body.replace("@SAMPLES@", str(samples))


class _Meeting:
    """Where the ranks say what they were given; ``enter`` returns once ``want`` trials
    have been inside at once (or after 60 s)."""

    def __init__(self) -> None:
        self.inside: dict[tuple[str, int], dict[str, Any]] = {}
        self.snapshots: list[list[dict[str, Any]]] = []  # what was inside, at each arrival
        self.most = 0  # the most trials inside at once
        self.changed = asyncio.Condition()

    async def enter(self, seen: dict[str, Any], want: int) -> None:
        async with self.changed:
            self.inside[(seen["trial"], seen["rank"])] = seen
            self.snapshots.append(list(self.inside.values()))
            self.most = max(self.most, len({trial for trial, _ in self.inside}))
            self.changed.notify_all()
            with contextlib.suppress(TimeoutError):  # the test then finds fewer at once
                await asyncio.wait_for(self.changed.wait_for(lambda: self.most >= want), timeout=60)

    async def leave(self, seen: dict[str, Any]) -> None:
        async with self.changed:
            self.inside.pop((seen["trial"], seen["rank"]), None)

    async def report(self) -> tuple[list[list[dict[str, Any]]], int]:
        return self.snapshots, self.most


@pytest.fixture(scope="module")
def fake_gpu_ray() -> Iterator[None]:
    """This process's own Ray with 2 fake GPUs (the suite's embedded Ray stopped first; the
    next sweep of another module starts it again)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, num_gpus=GPUS, namespace=NAMESPACE, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _sweep(
    workdir: Path, *, runner: Any, workers: int, resources: str, want: int, samples: int = 4
) -> tuple[Any, list[Any], int]:
    """Run the experiment; returns the sweep's result, the meeting's snapshots and the most
    trials that were inside at once."""
    import ray

    import tunetrain

    meeting_name = f"meeting-{runner}-{workers}-{workdir.name}"
    meeting: Any = ray.remote(_Meeting).options(name=meeting_name).remote()
    try:
        body = _body(meeting=meeting_name, want=want, resources=resources, samples=samples)
        path = write_experiment(workdir, body)
        stream = io.StringIO()
        result = tunetrain.sweep(
            path, trial_runner=runner, workers_per_trial=workers, report=False, register=False, stream=stream
        )
        assert result.status == "ok", stream.getvalue()
        assert all(t.status == "completed" for t in result.trials), stream.getvalue()
        snapshots, most = ray.get(meeting.report.remote())
    finally:
        ray.kill(meeting)
    return result, snapshots, most


def _trials(snapshot: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_trial: dict[str, list[dict[str, Any]]] = {}
    for seen in snapshot:
        by_trial.setdefault(seen["trial"], []).append(seen)
    return by_trial


GPU_BUDGETED = small_experiment("gpu_budgeted", steps=5, samples=8, step_s=0.4, seed=4, use_gpu=True)


@pytest.mark.usefixtures("fake_gpu_ray")
@pytest.mark.parametrize(
    ("runner", "workers"),
    [("in_process", 1), ("worker_group", 1), ("worker_group", 2), ("torch_trainer", 1), ("torch_trainer", 2)],
)
def test_each_rank_sees_its_trials_gpus_uses_its_own_and_no_gpu_is_held_twice(
    workdir: Path, runner: Any, workers: int
) -> None:
    at_once = GPUS // workers  # whole GPUs: two 1-worker trials, or one 2-worker trial
    # 4 trials, so that later ones run on GPUs (and, reused, on processes) earlier ones held;
    # a TorchTrainer trial starts fresh every time (about 15 s each on 2 CPUs), so 2 show it.
    samples = 2 if runner == "torch_trainer" else 4
    result, snapshots, most = _sweep(
        workdir, runner=runner, workers=workers, resources='{"CPU": 1}', want=at_once, samples=samples
    )
    assert result.plan is not None and result.plan.max_concurrent == at_once
    assert len(result.trials) == samples
    assert most == at_once  # the plan's "N at once" ran at once
    for snapshot in snapshots:
        held: list[str] = []
        for ranks in _trials(snapshot).values():
            trial_ids = [gpu for seen in ranks for gpu in seen["gpu_ids"]]
            assert len(trial_ids) == len(ranks) == len(set(trial_ids))  # one GPU per rank, never shared
            held += trial_ids
        assert len(held) == len(set(held)), snapshot  # no two running trials hold one GPU
    everyone = [seen for snapshot in snapshots for seen in snapshot]
    for trial, ranks in _trials(everyone).items():
        ranks = list({seen["rank"]: seen for seen in ranks}.values())
        assert len(ranks) == workers, trial
        union = ",".join(sorted({seen["gpu_ids"][0] for seen in ranks}, key=int))
        for seen in ranks:
            # Ray Train's rule: the ranks of a trial on a node see all its GPUs, each using its
            # own at its place in that list, which is its local rank.
            assert seen["visible"] == union, seen
            assert seen["device"] == seen["local_rank"], seen
            if workers > 1:
                assert seen["env_local_rank"] == str(seen["local_rank"]), seen
    if runner == "worker_group":  # a reused group keeps each process on the same GPU
        gpu_of_pid: dict[int, set[str]] = {}
        for seen in everyone:
            gpu_of_pid.setdefault(seen["pid"], set()).update(seen["gpu_ids"])
        assert all(len(gpus) == 1 for gpus in gpu_of_pid.values()), gpu_of_pid
        assert len(gpu_of_pid) < samples * workers  # some trials ran on a group that ran one before


@pytest.mark.usefixtures("fake_gpu_ray")
def test_four_one_worker_trials_at_half_a_gpu_run_four_at_once_two_per_gpu(workdir: Path) -> None:
    result, snapshots, most = _sweep(
        workdir, runner="in_process", workers=1, resources='{"CPU": 1, "GPU": 0.5}', want=4
    )
    assert result.plan is not None and result.plan.max_concurrent == 4
    assert most == 4
    (full,) = [s for s in snapshots if len(_trials(s)) == 4][:1]
    per_gpu: dict[str, int] = {}
    for seen in full:
        (gpu,) = seen["gpu_ids"]
        per_gpu[gpu] = per_gpu.get(gpu, 0) + 1
    assert per_gpu == {"0": 2, "1": 2}


@pytest.mark.usefixtures("fake_gpu_ray")
def test_the_plan_is_checked_against_this_processes_ray_and_a_gpu_it_can_never_place_is_refused(
    workdir: Path,
) -> None:
    import tunetrain
    from tunetrain import ExperimentError

    body = _body(meeting="unused", want=1, resources='{"CPU": 1}')
    path = write_experiment(workdir, body)
    # The machine has no GPU, but this process's Ray has two: the plan is made on them.
    stream = io.StringIO()
    result = tunetrain.sweep(path, dry_run=True, stream=stream)
    assert result.plan is not None and result.plan.max_concurrent == 2, stream.getvalue()
    assert "at most 2 at once" in stream.getvalue()
    # Three whole GPUs per worker on nodes of two: refused before any trial starts.
    body = _body(meeting="unused", want=1, resources='{"CPU": 1, "GPU": 3}')
    path = write_experiment(workdir, body, name="three.py")
    with pytest.raises(ExperimentError, match=r"can never provide.*GPU=2"):
        tunetrain.sweep(path, dry_run=True, stream=io.StringIO())


@pytest.mark.usefixtures("fake_gpu_ray")
def test_a_gpu_hour_budget_is_charged_for_the_gpus_trials_hold(workdir: Path) -> None:
    from tests.conftest import run_cli
    from tunetrain.results.analysis import load_sweep

    # 8 trials of about 2 s on one GPU each, 2 at once: about 16 GPU-seconds, against 7.2.
    path = write_experiment(workdir, GPU_BUDGETED)
    status, out = run_cli("sweep", str(path), "--budget", "0.002gpu-h", "--no-report")
    assert status == 0, out
    sweep = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    launched = len(sweep.runs)
    assert 1 <= launched < 8 and set(sweep.trials()["status"]) == {"completed"}
    reason = sweep.tags["tunetrain.stop_reason"]
    assert reason.startswith("budget 0.002gpu-h: ") and f"stopped launching after {launched} trial(s)" in reason


# Two-worker GPU trials, one per fault: none, CUDA out of memory (every rank), and an NCCL
# timeout as torch reports it: raised from the collective (DistBackendError), or, as NCCL's
# watchdog does by default (TORCH_NCCL_ASYNC_ERROR_HANDLING), the rank's process aborted.
FAULTY = """
import os
import sys

import ray.train
import torch
import torch.distributed
from ray import tune
from tunetrain import Experiment, StopRule, get_context

NCCL_TIMEOUT = (
    "[PG ID 0 PG GUID 0(default_pg) Rank 1] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, "
    "OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)=600000) ran for 600010 milliseconds before timing out."
)


def loop(config):
    rank = get_context().rank
    for step in range(3):
        if step == 1 and config["fault"] == "cuda_oom":
            raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 20.00 GiB")
        if step == 1 and config["fault"] == "nccl_raise":
            raise torch.distributed.DistBackendError(NCCL_TIMEOUT)
        if step == 1 and config["fault"] == "nccl_abort" and rank == 1:
            print("terminate called after throwing an instance of 'c10::DistBackendError'", file=sys.stderr)
            print("  what():  " + NCCL_TIMEOUT, file=sys.stderr, flush=True)
            os.abort()
        ray.train.report({"loss": float(step)})
        torch.distributed.barrier()  # as a DDP step's all-reduce: no rank runs ahead


experiment = Experiment(
    name="gpu_faults", train_loop=loop, metric="loss", mode="min",
    space={"fault": tune.grid_search(["none", "cuda_oom", "nccl_raise", "nccl_abort"])},
    scheduler="fifo", searcher="grid", num_samples=1, stop=StopRule(max_iterations=3), seed=5, baseline=False,
    use_gpu=True, dist_backend="gloo", workers_per_trial=2,
)
"""


@pytest.mark.usefixtures("fake_gpu_ray")
@pytest.mark.parametrize("runner", ["worker_group", "torch_trainer"])
def test_cuda_out_of_memory_is_oom_and_an_nccl_timeout_fails_its_trial_not_the_sweep(
    workdir: Path, runner: Any
) -> None:
    import tunetrain

    stream = io.StringIO()
    result = tunetrain.sweep(
        write_experiment(workdir, FAULTY), trial_runner=runner, report=False, register=False, stream=stream
    )
    out = stream.getvalue()
    assert result.status == "ok", out  # the sweep ran every trial and finished
    by_fault = {t.config["fault"]: t for t in result.trials}
    assert by_fault["none"].status == "completed", out
    assert by_fault["cuda_oom"].status == "oom" and "CUDA out of memory" in (by_fault["cuda_oom"].error or ""), out
    for fault in ("nccl_raise", "nccl_abort"):
        assert by_fault[fault].status == "failed", (fault, out)
    assert "Watchdog caught collective operation timeout" in (by_fault["nccl_raise"].error or ""), out
    assert "A collective timed out: " in out and "NCCL_DEBUG=INFO" in out  # the summary says what it was
    # Nothing stays RUNNING in MLflow.
    from tunetrain.results.analysis import load_sweep

    sweep = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    assert {r.status for r in sweep.runs} <= {"FINISHED", "FAILED"}, [r.status for r in sweep.runs]


@pytest.mark.usefixtures("fake_gpu_ray")
def test_the_consent_gate_fires_on_a_gpu_sweep_at_its_gpu_default(workdir: Path) -> None:
    from tests.conftest import run_cli

    # No --confirm-above: a GPU sweep asks above 10gpu-h, and without a terminal it is refused.
    status, out = run_cli("sweep", str(write_experiment(workdir, GPU_BUDGETED)), "--budget", "20gpu-h", "--name", "big")
    assert status == 2, out
    assert "--budget 20gpu-h allows" in out and "10gpu-h" in out and "--yes" in out, out
    assert not (workdir / "tunetrain_results" / "big").exists()  # refused before anything started
