"""Fault injection on real sweeps: workers killed mid-trial, diverging trials, a driver killed
and resumed, Ctrl+C, a tracking server that goes away. A real local Ray and a real MLflow
store (and a real ``mlflow server`` for the outage)."""

from __future__ import annotations

import math
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_cli, write_experiment
from tunetrain.trial import DIVERGED_KEY, worst_for_diverged

pytestmark = [pytest.mark.slow]

# Each trial's worker `victim` (a rank) kills its own process with SIGKILL before its
# fourth report, once per trial (a marker file remembers it); every report comes with a
# checkpoint of the step reached, which the loop resumes from.
KILLED = """
import json
import os
import pathlib
import signal
import tempfile

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule

MARKS = pathlib.Path(__file__).parent / "marks"


def loop(config):
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            with open(os.path.join(folder, "state.json")) as f:
                start = json.load(f)["step"]
    rank = ray.train.get_context().get_world_rank()
    for step in range(start, 6):
        mark = MARKS / f"killed-{config['x']}"
        if step == 3 and rank == config["victim"] and not mark.exists():
            MARKS.mkdir(exist_ok=True)
            mark.touch()
            os.kill(os.getpid(), signal.SIGKILL)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step + 1}, f)
            metrics = {"loss": 1.0 / (step + 1), "step": step + 1, "resumed_from": start}
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


experiment = Experiment(
    name="killed", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.grid_search([1, 2])}, defaults={"victim": 0},
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=6),
    max_failures=2, seed=3,
)
"""


def child_runs(tracking_uri: str, experiment: str) -> tuple[MlflowClient, list]:
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    return client, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize(
    ("workers", "victim", "runner"),
    [(1, 0, "in_process"), (2, 1, "worker_group"), (2, 1, "torch_trainer")],
    ids=["in_process-trial-killed", "worker_group-rank1-killed", "torch_trainer-rank1-killed"],
)
def test_a_worker_killed_mid_trial_restarts_from_its_checkpoint(
    workdir: Path, workers: int, victim: int, runner: str
) -> None:
    path = write_experiment(workdir, KILLED)
    # Two trials on a reused process or group: the second runs on what the first one's kill
    # left (rebuilt). A TorchTrainer starts afresh for every trial anyway: one trial (x=1).
    xs = [1] if runner == "torch_trainer" else [1, 2]
    status, out = run_cli(
        "sweep",
        str(path),
        "--workers-per-trial",
        str(workers),
        "--trial-runner",
        runner,
        "--set",
        f"victim={victim}",
        *(["--set", "x=1"] if xs == [1] else []),
        "--no-report",
    )
    assert status == 0, out
    # The second trial ran after the first one's group was broken (and rebuilt), and was
    # killed and restarted in turn.
    # Every trial's worker was killed once (the markers exist).
    assert sorted(p.name for p in (workdir / "marks").iterdir()) == [f"killed-{x}" for x in xs]
    client, runs = child_runs(f"sqlite:///{workdir / 'mlflow.db'}", "killed")
    assert len(runs) == len(xs)  # one run per trial: the restart went on in the same run
    for run in runs:
        tags = run.data.tags
        assert tags["tunetrain.status"] == "completed", tags
        # The restart is recorded with its count and reason.
        assert tags["tunetrain.restarts"] == "1"
        assert tags["tunetrain.restart_reason"]
        # The history is continuous: steps 1..6 once each, and the loop's own step counter
        # equals the recorded step (the restart went on from the step-3 checkpoint).
        history = client.get_metric_history(run.info.run_id, "step")
        assert [m.step for m in history] == [1, 2, 3, 4, 5, 6]
        assert [m.value for m in history] == [1, 2, 3, 4, 5, 6]
        # It went on from a checkpoint, not from scratch: the step-3 one, or an earlier one
        # when Train's controller had not yet collected the reports in flight as the worker
        # died (Train drops those; seen: step 1).
        assert [m.value for m in client.get_metric_history(run.info.run_id, "resumed_from")][-1] in (1, 2, 3)


def test_a_diverged_objective_reaches_scheduler_and_searcher_as_its_worst_value() -> None:
    metrics = {"loss": math.nan, "acc": -math.inf, "other": math.nan}
    reported = worst_for_diverged(metrics, (("loss", "min"), ("acc", "max")))
    # Each non-finite objective is the worst value for its mode; other metrics stay.
    assert reported["loss"] == math.inf and reported["acc"] == -math.inf and math.isnan(reported["other"])
    # The originals travel along for the record.
    assert math.isnan(reported[DIVERGED_KEY]["loss"]) and reported[DIVERGED_KEY]["acc"] == -math.inf
    # Finite objectives: the metrics unchanged.
    assert worst_for_diverged({"loss": 1.0}, (("loss", "min"),)) == {"loss": 1.0}


# Six trials of eight steps, one at a time: each start of a trial's train loop is written
# down (trial name and the step it starts from), every step is checkpointed.
RESUMED = """
import json
import os
import pathlib
import tempfile
import time

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule, get_context

STARTS = pathlib.Path(__file__).parent / "starts"


def loop(config):
    start = 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder:
            with open(os.path.join(folder, "state.json")) as f:
                start = json.load(f)["step"]
    STARTS.mkdir(exist_ok=True)
    with open(STARTS / get_context().trial_name, "a") as f:
        f.write(f"{start}\\n")
    for step in range(start, 8):
        time.sleep(0.2)  # the work of one step
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step + 1}, f)
            metrics = {"loss": config["x"] + 1.0 / (step + 1), "step": step + 1}
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


experiment = Experiment(
    name="resumed", train_loop=loop, metric="loss", mode="min", space={"x": tune.uniform(0, 1)},
    scheduler="fifo", searcher="optuna", num_samples=6, max_concurrent=2, stop=StopRule(max_iterations=8), seed=11,
    baseline=False,
)
"""


def journal_entries(path: Path) -> list[dict[str, Any]]:
    from tunetrain.tracking import Journal

    return Journal.read(path).entries if path.exists() else []


def start_sweep_and_wait(
    workdir: Path, *, ended: int, args: tuple[str, ...] = (), running: bool = False, body: str = RESUMED
) -> tuple[subprocess.Popen[str], Path]:
    """Start the RESUMED sweep (or ``body``) in its own process; return once its journal
    records ``ended`` ended trials (the sweep goes on meanwhile)."""
    path = write_experiment(workdir, body)
    process = subprocess.Popen(
        [sys.executable, "-m", "tunetrain", "sweep", str(path), "--name", "s1", "--no-report", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=workdir,
    )
    journal = workdir / "tunetrain_results" / "s1" / "tracking_journal.jsonl"
    wait_for_ended(process, journal, ended, running=running)
    return process, journal


def wait_for_ended(process: subprocess.Popen[str], journal: Path, ended: int, *, running: bool = False) -> None:
    """Return once the sweep's journal records ``ended`` ended trials (and, with ``running``,
    a trial that has reported its first step and not ended)."""

    def reached() -> bool:
        entries = journal_entries(journal)
        done = {e["trial"] for e in entries if e["op"] == "end_trial"}
        reporting = {e["trial"] for e in entries if e["op"] == "metrics" and e["step"] == 1} - done
        return len(done) >= ended and (bool(reporting) or not running)

    deadline = time.monotonic() + 300
    while not reached():
        assert process.poll() is None, process.communicate()[0]
        assert time.monotonic() < deadline, "the sweep did not get that far in 5 minutes"
        time.sleep(0.1)  # polling the journal the sweep writes


def check_complete_record(workdir: Path, parent_run_id: str, tracking_uri: str | None = None) -> list[Any]:
    """The RESUMED sweep's record, as an undisturbed sweep leaves it: the same parent run, six
    child runs, each finished, with steps 1..8 once per metric."""
    client, runs = child_runs(tracking_uri or f"sqlite:///{workdir / 'mlflow.db'}", "resumed")
    parents = {r.data.tags["mlflow.parentRunId"] for r in runs}
    assert parents == {parent_run_id}  # the same parent run before and after
    assert client.get_run(parent_run_id).info.status == "FINISHED"
    assert len(runs) == 6 and len({r.info.run_name for r in runs}) == 6  # one run per trial
    for run in runs:
        assert run.info.status == "FINISHED" and run.data.tags["tunetrain.status"] == "completed", run.info
        for key in ("loss", "step"):
            steps = [m.step for m in client.get_metric_history(run.info.run_id, key)]
            assert sorted(steps) == list(range(1, 9)), (run.info.run_name, key, steps)  # none twice, none lost
    return runs


@pytest.mark.own_ray  # the sweep runs in a subprocess with its own Ray
def test_a_sweep_killed_with_sigkill_resumes_without_rerunning_or_doubling(workdir: Path) -> None:
    from tunetrain._internals import read_tune_checkpoints as saved_latest_checkpoints

    # Kill it at a random point, after 1 to 3 trials ended; the seed is printed (pytest shows
    # it with a failure) and TUNETRAIN_KILL_SEED=N runs that same point again.
    seed = int(os.environ.get("TUNETRAIN_KILL_SEED") or random.SystemRandom().randrange(2**32))
    ended = random.Random(seed).randint(1, 3)
    print(f"kill point: after {ended} trial(s) ended (TUNETRAIN_KILL_SEED={seed})")
    process, journal = start_sweep_and_wait(workdir, ended=ended)

    def mid_way_in_tunes_state() -> bool:
        """Tune's saved state names a checkpoint of a trial that has 3+ steps to go."""
        entries = journal_entries(journal)
        ids = {e["tags"]["tunetrain.trial_id"]: e["trial"] for e in entries if e["op"] == "start_trial"}
        steps = {e["trial"]: e["step"] for e in entries if e["op"] == "metrics"}
        saved = saved_latest_checkpoints(str(journal.parent))
        return any(path and trial_id in ids and steps.get(ids[trial_id], 0) <= 5 for trial_id, path in saved.items())

    deadline = time.monotonic() + 300
    while not mid_way_in_tunes_state():  # polling the files the sweep writes
        assert process.poll() is None and time.monotonic() < deadline, "no trial mid-way in Tune's saved state"
        time.sleep(0.05)
    process.kill()  # SIGKILL: no clean-up of any kind
    process.communicate(timeout=60)
    before = journal_entries(journal)
    finished = {e["trial"] for e in before if e["op"] == "end_trial"}
    assert len(finished) >= ended
    from tunetrain.tracking import Journal

    parent_run_id = Journal.read(journal).parent_run_id
    assert parent_run_id is not None
    # Tune deletes a trial's older checkpoints as new ones come, and saves its own state at
    # most once a second: a kill in between leaves a state naming a deleted checkpoint. Make
    # that happen to every trial that had not ended (the resume must still complete it).
    started = {e["tags"]["tunetrain.trial_id"]: e["trial"] for e in before if e["op"] == "start_trial"}
    deleted = []
    for trial_id, path in saved_latest_checkpoints(str(journal.parent)).items():
        if path is not None and started.get(trial_id) not in finished:
            shutil.rmtree(path)
            deleted.append(started[trial_id])
    assert deleted  # the trial that was mid-way

    # A changed experiment file is refused, naming what changed; nothing runs.
    changed = workdir / "changed.py"
    changed.write_text(RESUMED.replace("tune.uniform(0, 1)", "tune.uniform(0, 2)"))
    status, out = run_cli("sweep", str(changed), "--resume", "--name", "s1", "--no-report")
    assert status == 2 and "changed since it started" in out and "param space.x" in out, out

    status, out = run_cli("resume", "s1")
    assert status == 0, out
    for name in deleted:  # each said where it goes on from, instead of failing
        assert f"{name}: Tune's saved state names checkpoint_" in out, out
    runs = check_complete_record(workdir, parent_run_id)
    # No trial that had ended was run again; the others went on from a checkpoint.
    starts = {run.info.run_name: (workdir / "starts" / run.info.run_name).read_text().split() for run in runs}
    for name in finished:
        assert starts[name] == ["0"], (name, starts[name])
    assert all(len(s) <= 2 for s in starts.values()), starts
    # The resume is recorded on the parent run.
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    assert client.get_run(parent_run_id).data.tags["tunetrain.resumes"] == "1"
    # Resuming a finished sweep says so and does nothing.
    status, out = run_cli("resume", "s1")
    assert status == 0 and "already finished" in out


@pytest.mark.own_ray  # the sweep runs in a subprocess with its own Ray
def test_ctrl_c_leaves_nothing_running_and_a_resumable_sweep(workdir: Path) -> None:
    process, _ = start_sweep_and_wait(workdir, ended=1, running=True)  # one ended, one mid-way
    process.send_signal(signal.SIGINT)  # Ctrl+C, to the tunetrain process alone
    out, _ = process.communicate(timeout=300)
    # A trial had completed: exit 0; the summary still comes, naming the sweep as interrupted.
    assert process.returncode == 0, out
    assert "interrupted" in out and "Best config:" in out and "mlflow ui" in out, out
    client, runs = child_runs(f"sqlite:///{workdir / 'mlflow.db'}", "resumed")
    # Nothing stays RUNNING in MLflow: the trials that were running are closed as interrupted.
    assert all(r.info.status != "RUNNING" for r in runs)
    interrupted = [r for r in runs if r.data.tags["tunetrain.status"] == "interrupted"]
    assert interrupted and all(r.info.status == "KILLED" for r in interrupted)
    parent_run_id = runs[0].data.tags["mlflow.parentRunId"]
    assert client.get_run(parent_run_id).info.status == "KILLED"
    # The summary says how to go on.
    assert "tunetrain resume s1" in out, out
    status, out = run_cli("resume", "s1")
    assert status == 0, out
    assert "(from the sweep's journal)" in out and "from --tracking-uri" not in out, out  # no such flag was given
    # The recorded command that resumed it works from any folder: its --storage is absolute.
    resumed_with = client.get_run(parent_run_id).data.tags["tunetrain.resume_command.1"]
    assert f"--storage {workdir / 'tunetrain_results'}" in resumed_with, resumed_with
    runs = check_complete_record(workdir, parent_run_id)
    # The parent tells the resumed sweep's truth, not the interrupted one's: the best loss of
    # every trial, the statuses now, and the command that resumed it (one --name).
    parent = client.get_run(parent_run_id).data
    best = min(m.value for r in runs for m in client.get_metric_history(r.info.run_id, "loss"))
    assert parent.metrics["best_loss"] == pytest.approx(best)
    assert parent.tags["tunetrain.trials.completed"] == "6" and parent.tags["tunetrain.trials.interrupted"] == "0"
    assert parent.tags["tunetrain.resume_command.1"].count("--name") == 1, parent.tags["tunetrain.resume_command.1"]
    # A resumed trial's duration leaves out the time the sweep was stopped (from its
    # interruption to the resume): the sum of the times it ran.
    entries = journal_entries(workdir / "tunetrain_results" / "s1" / "tracking_journal.jsonl")
    for run in runs:
        name = run.info.run_name
        mine = [
            e for e in entries if e.get("trial") == name and e["op"] in ("start_trial", "end_trial", "reopen_trial")
        ]
        if not any(e["op"] == "reopen_trial" for e in mine):
            continue
        start, stop, reopen, end = (
            mine[0]["start_time"], mine[1]["end_time"], mine[2]["time"], mine[3]["end_time"]
        )  # fmt: skip
        duration = float(run.data.tags["tunetrain.duration_s"])
        assert duration == pytest.approx((stop - start) + (end - reopen), abs=0.01), (name, mine)
        assert duration < end - start - (reopen - stop) + 0.01


@pytest.mark.own_ray  # the sweep runs in a subprocess with its own Ray
@pytest.mark.parametrize(
    "sent", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=["ctrl_c", "sigterm", "sighup-terminal-closed"]
)
def test_ctrl_c_before_any_trial_ended_exits_1_and_leaves_nothing_running(workdir: Path, sent: int) -> None:
    # Steps of 2 s: once a trial has reported its first step, none can end for 14 s.
    slow = RESUMED.replace("time.sleep(0.2)", "time.sleep(2)")
    process, _ = start_sweep_and_wait(workdir, ended=0, running=True, body=slow)
    process.send_signal(sent)  # Ctrl+C, or `kill PID`: the same clean end
    out, _ = process.communicate(timeout=300)
    # No trial completed: exit 1, and the summary still says what happened and how to go on.
    assert process.returncode == 1, out
    assert "interrupted" in out and "tunetrain resume s1" in out, out
    assert "KeyError" not in out, out  # the report of a sweep with no result says so, it does not crash
    client, runs = child_runs(f"sqlite:///{workdir / 'mlflow.db'}", "resumed")
    assert runs and all(r.data.tags["tunetrain.status"] == "interrupted" for r in runs)
    assert all(r.info.status == "KILLED" for r in runs)
    assert client.get_run(runs[0].data.tags["mlflow.parentRunId"]).info.status == "KILLED"


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@pytest.mark.own_ray  # the sweep runs in a subprocess with its own Ray
def test_a_tracking_server_outage_loses_and_doubles_nothing(workdir: Path) -> None:
    from tunetrain.tracking import Journal, start_ui_server, stop_ui_server

    port = free_port()
    backend = f"sqlite:///{workdir / 'server.db'}"
    artifacts = str(workdir / "server_artifacts")
    server, url = start_ui_server(backend, port=port, artifacts_destination=artifacts)
    try:
        process, journal = start_sweep_and_wait(workdir, ended=1, args=("--tracking-uri", url))
        stop_ui_server(server)  # the MLflow server goes away while trials run ...
        wait_for_ended(process, journal, 3)  # ... and the sweep trains on: two more trials end
        server, _ = start_ui_server(backend, port=port, artifacts_destination=artifacts)  # it is back
        out, _ = process.communicate(timeout=300)
        assert process.returncode == 0, out
        assert "is unreachable" in out and "takes records again after" in out, out
        parent_run_id = Journal.read(journal).parent_run_id
        assert parent_run_id is not None
        # The record equals an undisturbed sweep's: six runs, each step once, all finished.
        runs = check_complete_record(workdir, parent_run_id, tracking_uri=url)
        # Artifacts reached the server's store too (each trial's checkpoints.json).
        client = MlflowClient(url)
        assert all("checkpoints.json" in {a.path for a in client.list_artifacts(r.info.run_id)} for r in runs)
    finally:
        stop_ui_server(server)


def test_records_kept_while_the_store_is_away_are_written_by_sync(tmp_path: Path) -> None:
    import io

    from tunetrain.tracking import JOURNAL_NAME, SweepRecorder

    store = tmp_path / "store"
    store.write_text("")  # a file where the store's folder belongs: the store cannot be opened
    uri = f"sqlite:///{store / 'mlflow.db'}"
    journal = tmp_path / "results" / "s" / JOURNAL_NAME
    recorder = SweepRecorder(
        tracking_uri=uri, experiment_name="e", journal=journal, drain_timeout_s=1, error_stream=io.StringIO()
    )
    recorder.start_sweep(run_name="s", params={"space.lr": "uniform"}, tags={}, sweep_id="abc")
    tags = {"tunetrain.trial_id": "t0", "tunetrain.trial_index": 0, "tunetrain.seed": 1}
    recorder.start_trial("trial_0000", params={"lr": 0.1}, tags=tags, start_time=time.time())
    for step in range(1, 6):
        recorder.log_metrics("trial_0000", step=step, metrics={"loss": 1 / step}, timestamp=time.time())
    recorder.end_trial("trial_0000", status="completed", end_time=time.time(), tags={})
    recorder.end_sweep(status="FINISHED", best_metrics={"best_loss": 0.2}, tags={}, best_trial=None, best_config=None)
    recorder.close()
    assert recorder.unsent == 9  # nothing reached the store; the journal holds it all

    store.unlink()  # the store is back
    status, out = run_cli("sync", "s", "--storage", str(tmp_path / "results"))
    assert status == 0 and "9 of 9 unsent record(s) written" in out, out
    # Everything is there, once.
    client, runs = child_runs(uri, "e")
    assert len(runs) == 1 and runs[0].info.status == "FINISHED"
    assert [m.step for m in client.get_metric_history(runs[0].info.run_id, "loss")] == [1, 2, 3, 4, 5]
    # A second sync finds nothing to write and doubles nothing.
    status, out = run_cli("sync", "s", "--storage", str(tmp_path / "results"))
    assert status == 0 and "0 of 0" in out
    assert len(child_runs(uri, "e")[1]) == 1
