"""The record is never lost and never silently wrong: what MLflow refuses, stores that cannot
take a sweep, names and bounds that would write in the wrong place. Real sweeps through the
CLI on the session's real local Ray and a real sqlite store; the recorder driven alone on a
real sqlite store."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_cli, write_experiment
from tunetrain import tracking
from tunetrain.tracking import Journal, SweepRecorder

BAD_KEY = """
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(3):
        ray.train.report({"loss": config["x"] / (step + 1), "acc@1": 0.5})


experiment = Experiment(
    name="badkey", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.grid_search([1.0, 2.0, 3.0])},
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=3), seed=1,
)
"""


def _runs(tracking_uri: str, experiment: str) -> list:
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    return client.search_runs([exp.experiment_id], max_results=100)


@pytest.mark.usefixtures("ray_cluster")
def test_a_metric_name_mlflow_refuses_stops_the_sweep_naming_it_and_keeps_the_rest(workdir: Path) -> None:
    path = write_experiment(workdir, BAD_KEY)
    status, out = run_cli("sweep", str(path), "--no-report", "--max-concurrent", "1")
    assert status == 2, out
    assert "'acc@1'" in out and "Names may only contain" in out and "'acc_1'" in out, out
    runs = _runs(f"sqlite:///{workdir / 'mlflow.db'}", "badkey")
    assert runs and all(r.info.status != "RUNNING" for r in runs), [r.info.status for r in runs]
    trials = [r for r in runs if r.data.tags.get("tunetrain.role") != "sweep"]
    assert trials
    # The valid metric of the report that brought the bad name is in the record.
    assert all("loss" in r.data.metrics and "acc@1" not in r.data.metrics for r in trials)
    assert "Model not registered" not in out


def _recorder(tmp_path: Path, store: Path, **options: object) -> tuple[SweepRecorder, io.StringIO]:
    errors = io.StringIO()
    recorder = SweepRecorder(
        tracking_uri=f"sqlite:///{store}",
        experiment_name="e",
        error_stream=errors,
        journal=tmp_path / "journal.jsonl",
        **options,  # type: ignore[arg-type]
    )
    return recorder, errors


def test_the_recorder_writes_valid_points_beside_a_refused_name_and_does_not_spin(
    tmp_path: Path, store_template: Path
) -> None:
    store = tmp_path / "mlflow.db"
    store.write_bytes(store_template.read_bytes())
    recorder, errors = _recorder(tmp_path, store)
    recorder.start_sweep(run_name="s", params={}, tags={})
    recorder.start_trial("t0", params={"x": 1}, tags={}, start_time=time.time())
    recorder.log_metrics("t0", step=1, metrics={"loss": 1.0, "acc@1": 0.5}, timestamp=time.time())
    assert recorder.flush(timeout=30)
    recorder.log_metrics("t0", step=2, metrics={"loss": 0.5}, timestamp=time.time())
    recorder.end_trial("t0", status="completed", end_time=time.time(), tags={})
    assert recorder.flush(timeout=30)
    recorder.close()
    # Refused once, not retried in a loop; counted, so the sweep cannot end as a success.
    assert recorder.error_count == 1, errors.getvalue()
    assert "acc@1" in (recorder.first_error or "")
    client = MlflowClient(f"sqlite:///{store}")
    run_id = recorder.run_id("t0")
    assert run_id is not None
    history = client.get_metric_history(run_id, "loss")
    assert sorted(m.step for m in history) == [1, 2]
    assert client.get_run(run_id).info.status == "FINISHED"
    # The refused record stays unacknowledged in the journal (for `tunetrain sync`).
    assert Journal.read(tmp_path / "journal.jsonl").unsent


def test_metric_key_problem_follows_mlflow_and_suggests_a_name_it_takes() -> None:
    assert tracking.metric_key_problem("val/loss: top-1 acc.5") is None
    for key in ("acc@1", "a/../b", "/x", "x" * 251):
        problem = tracking.metric_key_problem(key)
        assert problem, key
        assert tracking.metric_key_problem(tracking.suggested_metric_key(key)) is None, key
    assert tracking.suggested_metric_key("acc@1") == "acc_1"


QUICK = """
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    ray.train.report({"loss": config["x"]})


experiment = Experiment(
    name="quick", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.uniform(0.0, 1.0)},
    scheduler="fifo", searcher="random", num_samples=2, stop=StopRule(max_iterations=1), seed=1,
)
"""


def _no_ray_started(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunetrain import cluster

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("Ray was started")

    monkeypatch.setattr(cluster, "connect", refuse)


def test_a_sweep_into_a_deleted_experiment_is_refused_before_ray_starts(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.delete_experiment(client.create_experiment("quick"))
    path = write_experiment(workdir, QUICK)
    _no_ray_started(monkeypatch)
    for extra in ((), ("--dry-run",)):
        status, out = run_cli("sweep", str(path), *extra)
        assert status == 2, out
        assert "'quick'" in out and "was deleted" in out and "mlflow experiments restore" in out and "mlflow gc" in out
    assert client.search_runs([e.experiment_id for e in client.search_experiments(view_type=3)]) == []


@pytest.mark.parametrize(
    "where", ["/proc/tunetrain-x/mlflow.db", "/etc/hostname/mlflow.db"], ids=["proc", "under-a-file"]
)
def test_a_store_that_cannot_be_written_is_refused_before_ray_starts(
    bare_workdir: Path, monkeypatch: pytest.MonkeyPatch, where: str
) -> None:
    path = write_experiment(bare_workdir, QUICK)
    _no_ray_started(monkeypatch)
    status, out = run_cli("sweep", str(path), "--tracking-uri", f"sqlite:///{where}")
    assert status == 2, out
    assert "cannot be written" in out and "--tracking-uri" in out, out


# -- the journal ----------------------------------------------------------------------


def _journal_with(tmp_path: Path, tail: bytes) -> Path:
    path = tmp_path / "tracking_journal.jsonl"
    journal = Journal(path)
    journal.write({"journal": 1, "experiment_name": "e"})
    journal.write({"seq": 1, "op": "tags", "trial": None, "tags": {}})
    journal.close()
    with path.open("ab") as f:
        f.write(tail)
    return path


@pytest.mark.parametrize(
    "tail",
    [b'{"seq": 2, "op": "ta', '{"seq": 2, "op": "tags", "note": "caf\u00e9'.encode()[:-1], b"[1, 2]\n", b"null\n"],
    ids=["torn-json", "torn-utf8", "foreign-array", "foreign-null"],
)
def test_a_torn_or_foreign_journal_line_is_skipped_and_never_swallows_the_next_record(
    tmp_path: Path, tail: bytes
) -> None:
    path = _journal_with(tmp_path, tail)
    journal = Journal(path)  # the next session appends its first record
    journal.write({"seq": 3, "op": "resume_sweep", "tags": {}})
    journal.close()
    state = Journal.read(path)
    assert [entry["seq"] for entry in state.entries] == [1, 3]  # the resume marker is whole
    assert state.skipped == [3]
    assert state.header["experiment_name"] == "e"


def test_the_recorder_says_which_journal_lines_it_skipped(tmp_path: Path, store_template: Path) -> None:
    store = tmp_path / "mlflow.db"
    store.write_bytes(store_template.read_bytes())
    _journal_with(tmp_path, b"\xff\xfe garbage")
    (tmp_path / "tracking_journal.jsonl").rename(tmp_path / "journal.jsonl")
    recorder, errors = _recorder(tmp_path, store)
    recorder.close()
    assert "line(s) 3; skipped" in errors.getvalue()


def test_a_second_process_writing_a_journal_is_refused_naming_the_holder(tmp_path: Path) -> None:
    import subprocess
    import sys

    from tunetrain.tracking.journal import JournalBusy

    path = tmp_path / "tracking_journal.jsonl"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys; from pathlib import Path; from tunetrain.tracking import Journal; "
            f"j = Journal(Path({str(path)!r})); print('held', flush=True); sys.stdin.read()",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        with pytest.raises(JournalBusy, match=rf"pid {holder.pid}"):
            Journal(path)
        with pytest.raises(JournalBusy, match=rf"pid {holder.pid}"):
            Journal.check_free(path)
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        holder.wait(timeout=60)
    Journal(path).close()  # free once the holder ended
    Journal.check_free(path)


# -- names ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["..", "../../x", "a/b", ".hidden", "trailing ", "x" * 129])
def test_a_sweep_name_that_is_not_one_folder_name_is_refused_before_anything_starts(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    path = write_experiment(workdir, QUICK)
    (workdir / "train").mkdir()  # what `--name ..` removed at the sweep's end
    _no_ray_started(monkeypatch)
    status, out = run_cli("sweep", str(path), "--name", name)
    assert status == 2, out
    assert "--name" in out and "one folder name" in out, out
    assert (workdir / "train").is_dir()
    assert not (workdir / "tunetrain_results").exists() and not (workdir.parent / "x").exists()
    for verb in ("resume", "sync"):
        status, out = run_cli(verb, name)
        assert status == 2 and "one folder name" in out, out


def test_an_experiment_name_that_is_not_one_folder_name_is_refused() -> None:
    from tests.conftest import make_experiment
    from tunetrain.errors import ExperimentError

    with pytest.raises(ExperimentError, match=r"Experiment\.name names its sweeps' folders"):
        make_experiment(name="team/model")
    assert make_experiment(name="my model 2").name == "my model 2"


def test_printed_commands_are_quoted_with_an_absolute_local_storage(tmp_path: Path) -> None:
    import shlex

    from tunetrain.records import sweep_command

    command = sweep_command("resume", "my sweep", "tunetrain_results")
    assert shlex.split(command) == [
        "tunetrain",
        "resume",
        "my sweep",
        "--storage",
        str(Path.cwd() / "tunetrain_results"),
    ]
    assert sweep_command("sync", "s", "s3://bucket/path") == "tunetrain sync s --storage s3://bucket/path"


# -- code from the store ----------------------------------------------------------------

CHECKPOINTED = """
import json
import os
import tempfile

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    with tempfile.TemporaryDirectory() as folder:
        with open(os.path.join(folder, "state.json"), "w") as f:
            json.dump({"x": config["x"]}, f)
        ray.train.report({"loss": config["x"]}, checkpoint=ray.train.Checkpoint.from_directory(folder))


experiment = Experiment(
    name="quick", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.uniform(0.0, 1.0)},
    scheduler="fifo", searcher="random", num_samples=2, stop=StopRule(max_iterations=1), seed=1,
)
"""
TAMPERED = "\nimport pathlib\npathlib.Path(__file__).with_name('ran-{}').touch()\n"


@pytest.mark.usefixtures("ray_cluster")
def test_a_recorded_experiment_file_that_changed_is_not_imported(workdir: Path) -> None:
    path = write_experiment(workdir, CHECKPOINTED)
    status, out = run_cli("sweep", str(path), "--no-report", "--no-register", "--name", "s")
    assert status == 0, out
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    trial = next(r for r in _runs(uri, "quick") if r.data.tags.get("tunetrain.role") != "sweep")
    # The file the tags name, changed on disk; the copy the sweep logged, changed in the store.
    path.write_text(CHECKPOINTED + TAMPERED.format("local"))
    logged = [p for p in workdir.rglob("exp.py") if p != path]
    assert logged, "the sweep logged its experiment file"
    for copy in logged:
        copy.write_text(CHECKPOINTED + TAMPERED.format("store"))
    for argv in (("register", "s"), ("confirm", "s", "--top-k", "1", "--seeds", "1"), ("replay", trial.info.run_id)):
        status, out = run_cli(*argv)
        assert status == 2, (argv, out)
        assert "is not the one the sweep ran" in out and "--trust-changed-file" in out, out
    assert list(workdir.rglob("ran-*")) == []  # none of the changed code ran
    status, out = run_cli("register", "s", "--trust-changed-file")
    assert status == 0, out
    assert (workdir / "ran-local").exists()


def test_swapped_bounds_are_refused_by_a_dry_run(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_experiment(workdir, QUICK.replace("tune.uniform(0.0, 1.0)", "tune.loguniform(1e-1, 1e-4)"))
    _no_ray_started(monkeypatch)
    status, out = run_cli("sweep", str(path), "--dry-run")
    assert status == 2, out
    assert "'x'" in out and "lower bound 0.1 is not below its upper bound 0.0001" in out, out


@pytest.mark.parametrize(
    "flags",
    [["--dry-run"], ["--estimate"], ["--budget", "1h"], ["--resume"], ["--no-register"], ["--yes"]],
    ids=lambda flags: flags[0],
)
def test_smoke_refuses_the_flags_it_cannot_honour(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, flags: list[str]
) -> None:
    path = write_experiment(workdir, QUICK)
    _no_ray_started(monkeypatch)
    status, out = run_cli("sweep", str(path), "--smoke", *flags)
    assert status == 2, out
    assert f"{flags[0]} cannot apply" in out, out


def test_ctrl_c_outside_a_sweep_does_not_say_again(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunetrain.cli import _inspect

    def interrupted(*args: object, **kwargs: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr(_inspect, "list_command", interrupted)
    status, out = run_cli("list")
    assert status == 130
    assert "interrupted; exiting now." in out and "again" not in out


ALL_FAIL = QUICK.replace(
    '    ray.train.report({"loss": config["x"]})', '    raise RuntimeError("broken before the first report")'
)


@pytest.mark.usefixtures("ray_cluster")
def test_a_sweep_whose_trials_all_failed_before_reporting_can_be_shown_reported_and_listed(workdir: Path) -> None:
    path = write_experiment(workdir, ALL_FAIL)
    status, out = run_cli("sweep", str(path), "--name", "f")
    assert status == 1, out
    assert "KeyError" not in out and "Report:" in out, out
    for argv in (("show", "f"), ("report", "f")):
        status, out = run_cli(*argv)
        assert status == 0 and "KeyError" not in out, (argv, out)
    status, out = run_cli("list")
    assert status == 0 and "all failed" in out, out


@pytest.mark.usefixtures("ray_cluster")
def test_a_uri_storage_keeps_journal_logs_and_report_where_resume_and_sync_look(workdir: Path) -> None:
    path = write_experiment(workdir, QUICK)
    storage = f"file://{workdir / 'remote'}"
    status, out = run_cli("sweep", str(path), "--storage", storage, "--name", "s", "--no-register")
    assert status == 0, out
    local = workdir / "tunetrain_journals" / "s"
    assert (local / "tracking_journal.jsonl").is_file() and (local / "report.html").is_file()
    assert (local / "logs").is_dir()
    assert (workdir / "remote" / "s" / "tuner.pkl").is_file()  # Tune's state went to the storage
    assert not (workdir / "file:").exists()
    status, out = run_cli("sync", "s", "--storage", storage)
    assert status == 0 and "0 of 0 unsent" in out, out
    status, out = run_cli("resume", "s", "--storage", storage)
    assert status == 0 and "already finished" in out, out


# -- storage full -----------------------------------------------------------------------


@pytest.fixture()
def small_disk(workdir: Path) -> Iterator[tuple[Path, bool]]:
    """A real filesystem that fills: a tmpfs of 40 MiB mounted under the test's folder, and
    True. Where this machine refuses the mount (not root, no CAP_SYS_ADMIN), a plain folder and
    False: the tests then use the closest honest simulation, the OS's answers patched (the
    journal's file writes raise ENOSPC after its first lines; the free space reported small)."""
    import subprocess

    mount = workdir / "disk"
    mount.mkdir()
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=40m", "tmpfs", str(mount)], check=False).returncode
    try:
        yield mount, mounted == 0
    finally:
        if mounted == 0:
            subprocess.run(["umount", "-l", str(mount)], check=True)


FILLS_THE_DISK = """
import os
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def fill(disk):
    # A new file each time: what Ray's own writes freed since (a file truncated then cut short
    # by the full disk) is taken again, so the disk stays full for every later report.
    with open(os.path.join(disk, f"filler-{os.getpid()}-{os.urandom(4).hex()}"), "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"\\0" * 2**12)
        except OSError:
            pass


def loop(config):
    for step in range(4):
        disk = config["disk"]
        if disk and ((step == 2 and config["x"] == 1) or any(n.startswith("filler") for n in os.listdir(disk))):
            fill(disk)  # the disk fills mid-sweep (a checkpoint, ...) and stays full
        ray.train.report({"loss": config["x"] / (step + 1)})


experiment = Experiment(
    name="full", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.grid_search([1, 2, 3])}, defaults={"disk": "DISK"},
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=4), seed=1,
)
"""


def test_a_storage_without_room_is_refused_before_ray_starts(
    small_disk: tuple[Path, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shutil
    from collections import namedtuple

    disk, real = small_disk
    if real:
        (disk / "filler").write_bytes(b"\0" * (30 * 2**20))  # 10 MiB left
    else:  # simulated: the OS says 10 MiB are free
        usage = namedtuple("usage", "total used free")
        monkeypatch.setattr(shutil, "disk_usage", lambda path: usage(40 * 2**20, 30 * 2**20, 10 * 2**20))
    path = write_experiment(disk.parent, QUICK)
    _no_ray_started(monkeypatch)
    status, out = run_cli("sweep", str(path), "--storage", str(disk / "store"))
    assert status == 2, out
    assert "--storage" in out and "MiB free" in out, out


@pytest.mark.usefixtures("ray_cluster")
def test_a_disk_that_fills_mid_sweep_loses_no_mlflow_record_and_fails_the_sweep(
    small_disk: tuple[Path, bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    disk, real = small_disk
    path = write_experiment(disk.parent, FILLS_THE_DISK.replace("DISK", str(disk) if real else ""))
    if not real:  # simulated: the journal's file writes meet ENOSPC after its first 10 lines
        import errno

        from tunetrain.tracking import journal

        opened = journal.Journal.__init__

        class Filling:
            def __init__(self, file: Any) -> None:
                self.file, self.lines = file, 0

            def write(self, text: str) -> int:
                self.lines += 1
                if self.lines > 10:
                    raise OSError(errno.ENOSPC, "No space left on device")
                return int(self.file.write(text))

            def __getattr__(self, name: str) -> Any:
                return getattr(self.file, name)

        def filling(self: Any, path: Path) -> None:
            opened(self, path)
            self._file = Filling(self._file)

        monkeypatch.setattr(journal.Journal, "__init__", filling)
    status, out = run_cli(
        "sweep", str(path), "--storage", str(disk / "store"), "--name", "s", "--no-register", "--max-concurrent", "1"
    )
    assert status == 3, out
    assert "tracking journal could not be written" in out and "No space left on device" in out, out
    runs = _runs(f"sqlite:///{disk.parent / 'mlflow.db'}", "full")
    assert all(r.info.status != "RUNNING" for r in runs)
    trials = [r for r in runs if r.data.tags.get("tunetrain.role") != "sweep"]
    client = MlflowClient(f"sqlite:///{disk.parent / 'mlflow.db'}")
    # Every trial's every step reached MLflow, the journal's disk full or not.
    assert len(trials) == 3
    for run in trials:
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "loss")) == [1, 2, 3, 4]
        assert run.data.tags["tunetrain.status"] == "completed"


def test_an_error_that_is_not_mlflows_is_counted_and_kept_for_sync(tmp_path: Path, store_template: Path) -> None:
    store = tmp_path / "mlflow.db"
    store.write_bytes(store_template.read_bytes())
    recorder, errors = _recorder(tmp_path, store)
    recorder.start_sweep(run_name="s", params={}, tags={})
    recorder.start_trial("t0", params={}, tags={}, start_time=time.time())
    recorder.log_dict("t0", 5, {"a": 1})  # type: ignore[arg-type]  # a name that is no path: TypeError, not MLflow's
    recorder.end_trial("t0", status="completed", end_time=time.time(), tags={})
    assert recorder.flush(timeout=30)
    recorder.close()
    assert recorder.error_count == 1 and "TypeError" in (recorder.first_error or ""), errors.getvalue()
    unsent = Journal.read(tmp_path / "journal.jsonl").unsent
    assert [entry["op"] for entry in unsent][:1] == ["dict"]  # not acknowledged: `tunetrain sync` sends it again
    # What came after it was written all the same.
    run_id = recorder.run_id("t0")
    assert run_id is not None and MlflowClient(f"sqlite:///{store}").get_run(run_id).info.status == "FINISHED"


@pytest.mark.usefixtures("ray_cluster")
def test_smoke_names_a_metric_mlflow_refuses(workdir: Path) -> None:
    path = write_experiment(workdir, BAD_KEY)
    status, out = run_cli("sweep", str(path), "--smoke", "--smoke-steps", "2")
    assert status == 1, out
    assert "'acc@1'" in out and "FAIL" in out, out
