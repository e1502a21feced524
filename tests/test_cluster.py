"""A real two-node Ray cluster on this machine (``ray start --head`` plus a second ``ray start
--address=...`` over loopback, each node with its own custom resource), a real ``mlflow
server``, sweeps run against both with ``--address`` and ``--tracking-uri``, and ``tunetrain
doctor``. Everything started here is stopped here, by process id (``ray stop`` would also
stop other Ray instances on the machine)."""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import write_experiment
from tunetrain.tracking import Journal, start_ui_server, stop_ui_server

pytestmark = [pytest.mark.slow, pytest.mark.cluster, pytest.mark.own_ray]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Cluster:
    """``ray start --block`` processes (each in its own process group) and an MLflow server."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.dashboard = f"http://127.0.0.1:{free_port()}"  # where `ray job submit` sends jobs
        self.temp_dir = f"/tmp/tt-{os.getpid()}-{self.port}"  # short: Ray's socket paths have a length limit
        self.nodes: list[subprocess.Popen[bytes]] = []
        self.watcher: subprocess.Popen[str] | None = None
        self.server: subprocess.Popen[bytes] | None = None
        self.tracking_uri = ""
        self.storage = str(folder / "shared_storage")  # every node sees it: they share this machine's disk

    def start_node(self, resource: str, *, head: bool = False, cpus: int = 1, gpus: int = 0) -> None:
        command = ["ray", "start", "--block", f"--num-cpus={cpus}", f"--resources={json.dumps({resource: 1})}"]
        command += [f"--num-gpus={gpus}"]  # Ray's fake GPUs where gpus > 0: a resource, no CUDA
        command += ["--object-store-memory=150000000", "--disable-usage-stats", "--node-ip-address=127.0.0.1"]
        if head:
            command += ["--head", f"--port={self.port}", f"--temp-dir={self.temp_dir}"]
            command += [f"--dashboard-port={self.dashboard.rpartition(':')[2]}"]
        else:
            # Its own temporary folder, as a node on another machine has: nodes sharing one
            # would share Ray's runtime_resources, and one node's clean-up would delete a
            # job's working directory that the other still uses (the driver's cwd).
            command += [f"--address={self.address}", f"--temp-dir={self.temp_dir}-{resource}"]
        log = (self.folder / f"ray-{resource}.log").open("wb")
        env = {**os.environ, "RAY_AUTH_MODE": "token"}  # ray start --head turns token authentication on
        self.nodes.append(
            subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=env)
        )
        self.wait_for_nodes(len(self.nodes), resource)

    def wait_for_nodes(self, wanted: int, resource: str) -> None:
        """Return once ``wanted`` nodes are alive, as one watcher process connected to the
        cluster reports them (a line every 0.2 s; a pipe it blocks on while nobody reads)."""
        if self.watcher is None:
            script = (
                "import logging, time, ray\n"
                "while True:\n"
                "    try:\n"
                f"        ray.init(address={self.address!r}, logging_level=logging.ERROR)\n"
                "        break\n"
                "    except Exception:\n"
                "        time.sleep(0.2)  # the head node is still starting\n"
                "while True:\n"
                "    print(sum(1 for n in ray.nodes() if n['Alive']), flush=True)\n"
                "    time.sleep(0.2)  # polling the cluster's node table\n"
            )
            env = {**os.environ, "RAY_AUTH_MODE": "token"}  # ray start turns token authentication on
            self.watcher = subprocess.Popen(
                [sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, env=env, start_new_session=True
            )
        assert self.watcher.stdout is not None
        deadline = time.monotonic() + 120
        while True:
            line = self.watcher.stdout.readline()
            assert line, (
                f"the node watcher exited; node {resource}: " + (self.folder / f"ray-{resource}.log").read_text()
            )
            if int(line) >= wanted:
                return
            assert self.nodes[-1].poll() is None, (self.folder / f"ray-{resource}.log").read_text()
            assert time.monotonic() < deadline, f"node {resource} did not join in 2 minutes"

    def start_server(self) -> None:
        self.server, self.tracking_uri = start_ui_server(
            f"sqlite:///{self.folder / 'server.db'}",
            port=free_port(),
            artifacts_destination=str(self.folder / "server_artifacts"),
        )

    def stop(self) -> None:
        # Every process of every node at once: `ray start --block` and what it started (GCS,
        # raylet, dashboard, workers) share its process group. SIGKILL: a graceful stop of a
        # node takes over 30 s, and nothing of this throwaway cluster needs saving.
        processes: list[subprocess.Popen[Any]] = [*self.nodes, *([self.watcher] if self.watcher else [])]
        for process in processes:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=60)
        if self.server is not None:
            stop_ui_server(self.server)
        for folder in Path(self.temp_dir).parent.glob(Path(self.temp_dir).name + "*"):
            shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture()
def cluster(tmp_path: Path) -> Iterator[Cluster]:
    # Ray Train V2 asks the State API for its actors with no address, which fails with
    # "Found multiple active Ray instances" while another Ray runs on the machine (this test
    # process's own, from earlier tests): its placement groups then outlive their trials.
    # The cluster is the only Ray here (own_ray shuts this process's down first).
    started = Cluster(tmp_path)
    try:
        started.start_server()
        started.start_node("head_node", head=True)
        yield started
    finally:
        started.stop()


def tunetrain(cluster: Cluster, *args: str, **kwargs: Any) -> subprocess.Popen[str]:
    """``python -m tunetrain ARGS`` in its own process (this test process has its own Ray)."""
    env = {**os.environ, "TUNETRAIN_ELASTIC_RESIZE_S": "2"}
    return subprocess.Popen(
        [sys.executable, "-m", "tunetrain", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=cluster.folder,
        env=env,
        **kwargs,
    )


def finish(process: subprocess.Popen[str], timeout: float = 400) -> str:
    out, _ = process.communicate(timeout=timeout)
    assert process.returncode == 0, out
    return out


# One trial that reports its world size every step and checkpoints it; it ends three steps
# after it first ran with two workers (or after 300 steps, which fails the test).
ELASTIC = """
import json
import os
import tempfile
import time

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    state = {"step": 0, "grown_at": None}
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            with open(os.path.join(folder, "state.json")) as f:
                state = json.load(f)
    world = ray.train.get_context().get_world_size()
    while state["step"] < 300:
        time.sleep(0.2)  # the work of one step
        state["step"] += 1
        if world == 2 and state["grown_at"] is None:
            state["grown_at"] = state["step"]
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump(state, f)
            ray.train.report({"loss": 1.0 / state["step"], "world_size": world},
                             checkpoint=ray.train.Checkpoint.from_directory(folder))
        if state["grown_at"] is not None and state["step"] >= state["grown_at"] + 3:
            return


experiment = Experiment(
    name="elastic", train_loop=loop, metric="loss", mode="min", space={"x": tune.choice([1])},
    scheduler="fifo", searcher="random", num_samples=1, workers_per_trial=(1, 2),
    resources_per_worker={"CPU": 1}, seed=1, baseline=False,
)
"""

# Single-worker and two-worker (SPREAD) trials that report the rank count, with a checkpoint
# each step. TorchTrainer trials for one worker: in process, Tune reuses its first trial actor
# for trials this short, and both can run on one node (seen). Two TorchTrainers start at once
# and each asks for a worker with the one CPU a node has: one on each node.
PLACED = """
import os
import tempfile

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(3):
        metrics = {"loss": config["x"] / (step + 1), "world_size": ray.train.get_context().get_world_size()}
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "step.txt"), "w") as f:
                f.write(str(step))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


experiment = Experiment(
    name="placed", train_loop=loop, metric="loss", mode="min", space={"x": tune.uniform(0, 1)},
    scheduler="fifo", searcher="random", num_samples=2, resources_per_worker={"CPU": 1},
    trial_runner="torch_trainer", stop=StopRule(max_iterations=3), seed=2, baseline=False,
)
"""


def child_runs(tracking_uri: str, experiment: str) -> list[Any]:
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1  # the server holds the sweep's parent run ...
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) == len(runs) - 1  # ... and every trial's run under it
    return children


def test_sweeps_on_a_two_node_cluster_with_a_tracking_server(cluster: Cluster) -> None:
    common = ("--address", cluster.address, "--tracking-uri", cluster.tracking_uri, "--storage", cluster.storage)

    # An elastic trial starts with the one worker the head node has room for ...
    elastic = tunetrain(cluster, "sweep", str(write_experiment(cluster.folder, ELASTIC, "elastic.py")), *common)
    journal = Path(cluster.storage).glob("elastic-*/tracking_journal.jsonl")
    deadline = time.monotonic() + 300
    while not any(e["op"] == "metrics" for path in journal for e in Journal.read(path).entries):
        assert elastic.poll() is None, elastic.communicate()[0]
        assert time.monotonic() < deadline, "the elastic trial did not report in 5 minutes"
        time.sleep(0.5)  # polling the sweep's journal for the first report
        journal = Path(cluster.storage).glob("elastic-*/tracking_journal.jsonl")
    # ... and grows to two when a second node joins.
    cluster.start_node("worker_node")
    finish(elastic)
    (run,) = child_runs(cluster.tracking_uri, "elastic")
    client = MlflowClient(cluster.tracking_uri)
    sizes = [int(m.value) for m in client.get_metric_history(run.info.run_id, "world_size")]
    assert sizes[0] == 1 and sizes[-1] == 2, sizes  # the recorded world size changed
    assert len(run.data.tags["tunetrain.node_ids"].split(",")) == 2

    # Single-worker trials land on both nodes.
    out = finish(tunetrain(cluster, "sweep", str(write_experiment(cluster.folder, PLACED, "placed.py")), *common))
    assert "2 completed" in out, out
    assert "View run" not in out and "View experiment" not in out  # MLflow's own lines, two per run
    runs = child_runs(cluster.tracking_uri, "placed")
    assert len(runs) == 2 and all(r.data.tags["tunetrain.status"] == "completed" for r in runs)
    nodes = {r.data.tags["tunetrain.node_ids"] for r in runs}
    assert len(nodes) == 2, nodes  # each trial ran on one node, and both nodes ran some

    # A two-worker trial placed with SPREAD has one worker on each node (on a worker group:
    # rank 0's checkpoints are handed over through the storage when the trial's own process
    # runs on the other node).
    spread = finish(
        tunetrain(
            cluster,
            "sweep",
            str(cluster.folder / "placed.py"),
            *common,
            "--workers-per-trial",
            "2",
            "--trial-runner",
            "worker_group",
            "--placement-strategy",
            "SPREAD",
            "--num-samples",
            "1",
            "--name",
            "spread",
        )
    )
    assert "1 completed" in spread, spread
    client = MlflowClient(cluster.tracking_uri)
    exp = client.get_experiment_by_name("placed")
    assert exp is not None
    (spread_parent,) = client.search_runs([exp.experiment_id], "tags.`tunetrain.sweep_name` = 'spread'")
    (spread_run,) = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{spread_parent.info.run_id}'")
    assert len(set(spread_run.data.tags["tunetrain.node_ids"].split(","))) == 2
    assert spread_run.data.tags["tunetrain.status"] == "completed" and spread_run.data.tags["tunetrain.checkpoint.best"]
    # Checkpoints and sweep state went to the shared storage, not a driver-local default.
    assert not (cluster.folder / "tunetrain_results" / "spread").exists()

    # doctor: both nodes, same versions, State API, the server and the shared storage all fine.
    doctor = finish(tunetrain(cluster, "doctor", *common))
    assert doctor.count("\n  node ") == 2 and "No problems found." in doctor, doctor
    assert "{'head_node': 1.0}" in doctor and "{'worker_node': 1.0}" in doctor  # each node's own resource
    assert "writes " + cluster.storage in doctor

    # A dry run reads the cluster's nodes (both, with their own resources) without connecting
    # as a driver: no driver log, no folder of results.
    dry = finish(tunetrain(cluster, "sweep", str(cluster.folder / "placed.py"), *common, "--dry-run", "--name", "dry"))
    assert "head_node" in dry and "worker_node" in dry, dry
    assert not list(Path(cluster.storage).glob("dry*")) and not (cluster.folder / "tunetrain_results").exists()

    # Ray Jobs, as KubeRay and the cluster launcher run drivers: the job's RAY_ADDRESS is the
    # cluster, and the job's logs hold the live line and the summary.
    job_dir = cluster.folder / "job"
    job_dir.mkdir()
    shutil.copy(cluster.folder / "placed.py", job_dir / "placed.py")
    submit = [sys.executable, "-m", "ray.scripts.scripts", "job", "submit", "--address", cluster.dashboard]
    job = [*submit, "--submission-id", "tt-job", "--working-dir", str(job_dir), "--"]
    job += [sys.executable, "-m", "tunetrain", "sweep", "placed.py", "--num-samples", "2", "--name", "job"]
    job += ["--trial-runner", "in_process"]  # where the trials run is not what this part is about
    job += ["--tracking-uri", cluster.tracking_uri, "--storage", cluster.storage]
    env = {**os.environ, "RAY_AUTH_MODE": "token"}  # the cluster's token authentication (docs/cluster.md)
    env.pop("RAY_ADDRESS", None)
    submitted = subprocess.run(job, capture_output=True, text=True, cwd=cluster.folder, env=env, timeout=400)
    assert submitted.returncode == 0, submitted.stdout + submitted.stderr
    logs = subprocess.run(
        [*submit[:4], "logs", "--address", cluster.dashboard, "tt-job"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    ).stdout
    ray_line = [line for line in logs.splitlines() if line.startswith("Ray: ")]
    assert len(ray_line) == 1 and "(from RAY_ADDRESS)" in ray_line[0], ray_line or logs
    assert ray_line[0].split()[1].endswith(f":{cluster.port}"), ray_line  # the job's cluster
    assert re.search(r"^\[\d\d:\d\d\] 2/2 trials: 2 completed", logs, re.MULTILINE), logs  # the live line
    assert "Sweep job finished: 2 trials (2 completed)" in logs, logs  # the summary
    (job_parent,) = client.search_runs([exp.experiment_id], "tags.`tunetrain.sweep_name` = 'job'")
    job_runs = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{job_parent.info.run_id}'")
    assert len(job_runs) == 2  # the job's trials are on the server

    # Without --storage, a sweep on a multi-node cluster is refused up front.
    refused = tunetrain(cluster, "sweep", str(cluster.folder / "placed.py"), "--address", cluster.address)
    out, _ = refused.communicate(timeout=120)
    assert refused.returncode == 2 and "no --storage was given" in out, out


# GPU trials that say which GPUs Ray gave them; over gloo (no CUDA here).
ON_GPUS = """
import ray
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    gpus = [int(g) for g in ray.get_gpu_ids()]
    for step in range(2):
        ray.train.report({"loss": config["x"] / (step + 1), "gpus_held": len(gpus)})


experiment = Experiment(
    name="on_gpus", train_loop=loop, metric="loss", mode="min", space={"x": tune.uniform(0, 1)},
    scheduler="fifo", searcher="random", num_samples=2, use_gpu=True, dist_backend="gloo",
    stop=StopRule(max_iterations=2), seed=3, baseline=False,
)
"""


def test_gpu_trials_run_on_the_worker_node_that_has_the_gpus_and_the_drivers_node_needs_none(
    cluster: Cluster,
) -> None:
    common = ("--address", cluster.address, "--tracking-uri", cluster.tracking_uri, "--storage", cluster.storage)
    cluster.start_node("gpu_node", cpus=2, gpus=2)  # the head node (the driver's) has no GPU
    script = (
        "import logging, ray\n"
        f"ray.init(address={cluster.address!r}, logging_level=logging.ERROR)\n"
        "print(','.join(n['NodeID'] for n in ray.nodes() if n['Alive'] and n['Resources'].get('GPU')))\n"
    )
    env = {**os.environ, "RAY_AUTH_MODE": "token"}
    found = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    gpu_node = found.stdout.strip()
    assert gpu_node and "," not in gpu_node, found.stdout + found.stderr

    path = str(write_experiment(cluster.folder, ON_GPUS, "on_gpus.py"))
    for runner, workers in (("in_process", "1"), ("worker_group", "2"), ("torch_trainer", "2")):
        name = f"gpus-{runner}-{workers}"
        args = ("--trial-runner", runner, "--workers-per-trial", workers, "--name", name)
        out = finish(tunetrain(cluster, "sweep", path, *common, *args))
        assert "2 completed" in out, out
        if workers == "1":  # planned on the cluster's GPUs, not the driver's none
            assert f"Sweep {name}: 2 trials, at most 2 at once" in out, out
        client = MlflowClient(cluster.tracking_uri)
        exp = client.get_experiment_by_name("on_gpus")
        assert exp is not None
        (parent,) = client.search_runs([exp.experiment_id], f"tags.`tunetrain.sweep_name` = '{name}'")
        runs = client.search_runs([exp.experiment_id], f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
        assert len(runs) == 2
        for run in runs:
            # Every rank ran on the GPU node, holding one GPU.
            assert set(run.data.tags["tunetrain.node_ids"].split(",")) == {gpu_node}, (name, run.data.tags)
            assert run.data.metrics["gpus_held"] == 1.0, name


def test_doctor_without_a_cluster_names_the_problem_and_the_fix(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    done = subprocess.run(
        [sys.executable, "-m", "tunetrain", "doctor", "--address", f"127.0.0.1:{port}"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=300,
    )
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"nothing answers at 127.0.0.1:{port}" in done.stdout and "fix: Start the head node" in done.stdout
    # The tracking store (the default sqlite file here) is still checked, and fine.
    assert "ok       tracking" in done.stdout
