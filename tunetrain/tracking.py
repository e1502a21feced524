"""MLflow recording and reading: the only module that imports mlflow.

One MLflow experiment per tunetrain experiment, one parent run per sweep and one child run
per trial (linked with the ``mlflow.parentRunId`` tag). Every call to MLflow happens on one
background thread, fed by a queue, so Ray Tune's event loop never waits on the tracking
store; metric points gather for up to a second and go out as one ``log_batch`` call per run,
never one call per metric key (on sqlite one point per call costs 4.5-7 ms, a batch 0.2 ms
per point).

A tracking error never kills the sweep: the first one is printed once, clearly, and the
rest are counted.

:class:`SweepStore` reads sweeps back (for ``tunetrain.analysis`` and the ``list``, ``show``,
``best`` and ``report`` commands) from any tracking URI, so sweeps run elsewhere load too.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import logging
import math
import os
import queue
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, TextIO

import pandas as pd
from mlflow.entities import Metric, Param, RunTag
from mlflow.tracking import MlflowClient

from tunetrain.errors import ExperimentError

# Metric points wait at most this long to go out together in one log_batch call (a
# trial's end, flush() and close() write them at once).
METRIC_FLUSH_INTERVAL_S = 1.0

# MLflow's own limits for one log_batch call.
_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_PER_BATCH = 100
_MAX_TAGS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
_MAX_TAG_LENGTH = 8000

STATUS_TAG = "tunetrain.status"
SWEEP_ID_TAG = "tunetrain.sweep_id"
TRIAL_ID_TAG = "tunetrain.trial_id"
ROLE_TAG = "tunetrain.role"  # "sweep" on a sweep's parent run
ERROR_TAG = "tunetrain.error"
# What a --smoke run measured (on its parent run), for the estimate of --dry-run/--estimate,
# and the tags that say what shape of trial it measured (an estimate uses a smoke of its shape).
SMOKE_STARTUP_TAG = "tunetrain.smoke.startup_s"
SMOKE_ITERATION_TAG = "tunetrain.smoke.iteration_s"
SMOKE_SHAPE_TAGS = ("tunetrain.workers_per_trial", "tunetrain.trial_runner")
# ASHA's rungs ("1,2,4") and max_t, as the sweep's scheduler had them (parent run).
ASHA_RUNGS_TAG = "tunetrain.asha.rungs"
ASHA_MAX_T_TAG = "tunetrain.asha.max_t"
# The step of the checkpoint a trial kept as its best (by the checkpoint policy's score).
CHECKPOINT_STEP_TAG = "tunetrain.checkpoint.best_step"
# Seconds a trial ran, summed over the sweep's sessions (a resume leaves out the time between).
DURATION_TAG = "tunetrain.duration_s"
PARENT_TAG = "mlflow.parentRunId"

# tunetrain status -> MLflow run status. A trial stopped early or diverged ran as it
# should (the scheduler or the stop rule ended it); only a crash is a failed run.
_RUN_STATUS = {
    "completed": "FINISHED",
    "stopped_early": "FINISHED",
    "diverged": "FINISHED",
    "oom": "FAILED",
    "failed": "FAILED",
    "interrupted": "KILLED",
}


def default_tracking_uri(directory: str | Path | None = None) -> str:
    """The embedded store: ``sqlite:///<dir>/mlflow.db`` (the working directory by default)."""
    base = Path(directory or os.getcwd()).resolve()
    return f"sqlite:///{base / 'mlflow.db'}"


def ui_command(tracking_uri: str) -> str:
    """The command that opens the MLflow UI on this store."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri}"
    return f"mlflow ui --backend-store-uri {tracking_uri}"


def check_store(tracking_uri: str) -> str | None:
    """Why ``tracking_uri`` cannot take a sweep's runs; None when it can (reachable and
    writable: a run is created in the experiment ``tunetrain-doctor`` and deleted again)."""
    _quiet_mlflow_logging()
    if tracking_uri.startswith(("http://", "https://")):
        os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "1")
    try:
        client = MlflowClient(tracking_uri=tracking_uri)
        experiment = client.get_experiment_by_name("tunetrain-doctor")
        experiment_id = experiment.experiment_id if experiment else client.create_experiment("tunetrain-doctor")
        run = client.create_run(experiment_id, run_name="doctor")
        client.log_text(run.info.run_id, "tunetrain doctor", "doctor.txt")  # the artifact store too
        client.delete_run(run.info.run_id)
    except Exception as exc:
        return _trim(f"{tracking_uri} does not take runs: {type(exc).__name__}: {exc}", 600)
    return None


@dataclasses.dataclass(frozen=True)
class SmokeTimings:
    """What a ``--smoke`` run measured, and the trial shape it measured it with."""

    sweep: str
    startup_s: float
    iteration_s: float
    shape: dict[str, str]  # SMOKE_SHAPE_TAGS -> value

    def shape_text(self) -> str:
        return describe_shape(self.shape)


def describe_shape(shape: Mapping[str, str]) -> str:
    """``2 worker(s) per trial (torch_trainer)``."""
    workers = shape.get("tunetrain.workers_per_trial", "?")
    return f"{workers} worker(s) per trial ({shape.get('tunetrain.trial_runner', '?')})"


def latest_smoke_timings(
    tracking_uri: str, experiment: str, *, shape: Mapping[str, str] | None = None
) -> SmokeTimings | None:
    """The timings of the experiment's latest ``--smoke`` run (of this trial ``shape`` when
    given: the start-up of a 2-worker trial is not a 1-worker one's); None when there is none.
    Reads nothing (and creates no sqlite file) when the store is a sqlite file that does not
    exist yet."""
    if tracking_uri.startswith("sqlite:///") and not Path(tracking_uri[len("sqlite:///") :]).exists():
        return None
    store = SweepStore(tracking_uri)
    if store._client.get_experiment_by_name(experiment) is None:
        return None
    for run in store.sweeps(experiment):
        tags = run.tags
        if tags.get("tunetrain.smoke") != "true" or SMOKE_ITERATION_TAG not in tags:
            continue
        found = {key: str(tags.get(key, "")) for key in SMOKE_SHAPE_TAGS}
        if shape is None or all(found[key] == str(shape.get(key, "")) for key in SMOKE_SHAPE_TAGS):
            return SmokeTimings(
                sweep=tags.get(SWEEP_NAME_TAG, run.name),
                startup_s=float(tags[SMOKE_STARTUP_TAG]),
                iteration_s=float(tags[SMOKE_ITERATION_TAG]),
                shape=found,
            )
    return None


def start_ui_server(
    tracking_uri: str,
    *,
    host: str = "127.0.0.1",
    port: int = 5000,
    timeout_s: float = 180.0,
    artifacts_destination: str | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``mlflow ui`` on the store and return it once it answers ``/health``, with its URL.
    With ``artifacts_destination``: ``mlflow server`` serving artifacts from there, as a
    shared tracking server does.

    The caller stops it with :func:`stop_ui_server`. A server that exits or stays silent for
    ``timeout_s`` is an error that includes its output.
    """
    url = f"http://{host}:{port}"
    command = [sys.executable, "-m", "mlflow", "ui" if artifacts_destination is None else "server"]
    command += ["--backend-store-uri", tracking_uri, "--host", host, "--port", str(port), "--workers", "1"]
    if artifacts_destination is not None:
        command += ["--artifacts-destination", artifacts_destination]
    # Its own process group: mlflow ui runs the web server as a child process, and stopping
    # the group stops both.
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                output = server.stdout.read().decode(errors="replace") if server.stdout else ""
                raise ExperimentError(
                    f"The MLflow UI server exited with status {server.returncode} before answering on {url}:\n"
                    f"{output[-2000:]}",
                    fix=f"Is port {port} free? Pass another with --port.",
                )
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        return server, url
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)  # polling a server's start-up: the wait ends on its answer, not on time
    except BaseException:  # Ctrl+C or a signal while it starts: it does not outlive the caller
        stop_ui_server(server)
        raise
    stop_ui_server(server)
    raise ExperimentError(
        f"The MLflow UI server did not answer on {url} within {timeout_s:.0f} s.",
        fix="Start it by hand to see why: " + " ".join(command[1:]),
    )


def stop_ui_server(server: subprocess.Popen[bytes]) -> None:
    """Stop a server from :func:`start_ui_server` and its child processes."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue
        return


def _quiet_mlflow_logging() -> None:
    # Database migrations and store set-up log at INFO on every new sqlite file.
    for name in ("alembic", "mlflow"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # No progress bar on the console for each artifact read back.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")


def _trim(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


JOURNAL_NAME = "tracking_journal.jsonl"


def _json_default(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else str(value)  # numpy scalars, paths, ...


class Journal:
    """The sweep's tracking records on local disk, one JSON line each, written before they
    are sent to MLflow: what an outage or a crash left unsent is sent later from here
    (``tunetrain sync``, ``--resume``).

    Lines: a header (where the records go), entries (``seq``, ``op`` and its arguments),
    ``{"ack": N}`` once every entry up to N is in the store, and ``{"run": TRIAL, "run_id":
    ...}`` for each run the store created (TRIAL null for the sweep's parent run).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def write(self, line: Mapping[str, Any], *, sync: bool = False) -> None:
        text = json.dumps(line, default=_json_default, allow_nan=True)
        with self._lock:
            self._file.write(text + "\n")
            self._file.flush()  # in the OS once written: a killed driver loses nothing
            if sync:  # a machine that goes down loses nothing either
                os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()

    @staticmethod
    def read(path: Path) -> JournalState:
        """Everything a journal holds (a torn last line, from a crash mid-write, is skipped)."""
        state = JournalState()
        with path.open(encoding="utf-8") as f:
            for text in f:
                try:
                    line = json.loads(text)
                except json.JSONDecodeError:
                    continue
                if "journal" in line:
                    state.header = line
                elif "ack" in line:
                    state.acked = max(state.acked, int(line["ack"]))
                elif "run_id" in line:
                    if line["run"] is None:
                        state.parent_run_id, state.experiment_id = line["run_id"], line.get("experiment_id")
                    else:
                        state.run_ids[line["run"]] = line["run_id"]
                elif "seq" in line:
                    state.entries.append(line)
        return state


@dataclasses.dataclass
class JournalState:
    header: dict[str, Any] = dataclasses.field(default_factory=dict)
    entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    acked: int = 0
    parent_run_id: str | None = None
    experiment_id: str | None = None
    run_ids: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def unsent(self) -> list[dict[str, Any]]:
        return [entry for entry in self.entries if entry["seq"] > self.acked]

    @property
    def last_seq(self) -> int:
        return self.entries[-1]["seq"] if self.entries else 0


# MLflow error codes that say the request itself is wrong: retrying cannot help.
_PERMANENT_CODES = {"INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST", "BAD_REQUEST"}


def _transient(exc: BaseException) -> bool:
    """Whether a tracking error is the store being away (retry later) rather than a bad request."""
    from mlflow.exceptions import MlflowException

    if isinstance(exc, MlflowException):
        return exc.error_code not in _PERMANENT_CODES or "failed with exception" in str(exc)
    if isinstance(exc, OSError | ConnectionError | TimeoutError):
        return True
    return type(exc).__name__ in ("OperationalError", "ConnectionError", "Timeout", "ReadTimeout", "ConnectTimeout")


class SweepRecorder:
    """Records one sweep in MLflow: a parent run and one child run per trial.

    Trials are named by the caller (any unique string, e.g. Ray Tune's trial name); this
    class maps them to MLflow run ids. All methods but :meth:`start_sweep` and
    :meth:`close` only enqueue work and return at once.

    With a ``journal`` every record goes to that file first (see :class:`Journal`). When the
    store is away (a server restarting, a locked database), the background thread keeps the
    records in order and retries with back-off while the sweep trains on; :meth:`close` waits
    up to ``drain_timeout_s`` for them, then leaves the rest to ``tunetrain sync``. Records
    that may have reached the store before a failure are written idempotently when sent
    again: a run is found by its trial id before one is created, and metric points already
    in a run are not logged twice.
    """

    def __init__(
        self,
        *,
        tracking_uri: str,
        experiment_name: str,
        artifact_location: str | None = None,
        error_stream: TextIO | None = None,
        journal: str | Path | None = None,
        drain_timeout_s: float = 120.0,
        header: Mapping[str, Any] | None = None,
    ) -> None:
        _quiet_mlflow_logging()
        if tracking_uri.startswith(("http://", "https://")):
            # The recorder retries itself, with back-off, without holding up the sweep;
            # MLflow's own retries (7, up to minutes) would only delay noticing an outage.
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "30")
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self._artifact_location = artifact_location
        self._errors = error_stream or sys.stderr
        self._mlflow: MlflowClient | None = None
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None
        self._run_ids: dict[str, str] = {}
        self._pending_metrics: dict[str, list[Metric]] = {}
        self._pending_since: float | None = None  # time.monotonic() of the oldest pending point
        self._queue: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self.error_count = 0
        self.first_error: str | None = None
        self.drain_timeout_s = drain_timeout_s
        self._closing = threading.Event()
        self._give_up = threading.Event()
        self._outage_since: float | None = None
        self.outages = 0
        self._seq = 0
        self._applied = 0  # every entry up to this one is in the store
        self._acked = 0
        self._kept = False  # a write was given up: later ones stay unacknowledged too
        self._doubtful = False  # a write is being retried: it may have gone through before
        self._replay_until = 0  # entries up to this one are sent again (resume, sync)
        self._pending_first = 0  # the first entry whose points are pending
        self._journal: Journal | None = None
        if journal is not None:
            path = Path(journal)
            state = Journal.read(path) if path.exists() else JournalState()
            self._journal = Journal(path)
            if not state.header:
                self._journal.write(
                    {
                        "journal": 1,
                        "tracking_uri": tracking_uri,
                        "experiment_name": experiment_name,
                        "artifact_location": artifact_location,
                        **(header or {}),
                    },
                    sync=True,
                )
            self._applied = self._acked = state.acked
            self._seq = max(state.last_seq, state.acked)
            self.parent_run_id, self.experiment_id = state.parent_run_id, state.experiment_id
            self._run_ids.update(state.run_ids)
        self._thread = threading.Thread(target=self._work, name="tunetrain-mlflow", daemon=True)
        self._thread.start()

    @property
    def _client(self) -> MlflowClient:
        # Made on first use, on the recorder's thread: MLflow opens (and may create) a
        # sqlite store right away, and a store that is away must not stop the sweep.
        if self._mlflow is None:
            self._mlflow = MlflowClient(tracking_uri=self.tracking_uri)
        return self._mlflow

    @property
    def journal_path(self) -> Path | None:
        return self._journal.path if self._journal is not None else None

    # -- the background thread -------------------------------------------------------

    def _work(self) -> None:
        while True:
            try:
                entry = self._queue.get(timeout=self._flush_timeout())
            except queue.Empty:  # the oldest pending point has waited long enough
                self._guarded(self._flush_metrics)
                self._ack()
                continue
            try:
                if entry is None:
                    self._guarded(self._flush_metrics)
                    self._ack()
                    return
                if entry["op"] == "flush":
                    done = self._guarded(self._flush_metrics)
                else:
                    done = self._guarded(functools.partial(self._apply, entry))
                    if self._flush_timeout() == 0.0:
                        done = self._guarded(self._flush_metrics) and done
                self._kept = self._kept or not done
                if entry.get("seq") and not self._kept:
                    self._applied = max(self._applied, entry["seq"])
                self._ack()
            finally:
                self._queue.task_done()

    def _ack(self) -> None:
        """Note in the journal that every entry so far is in the store (none pending)."""
        if self._journal is not None and not self._pending_metrics and self._applied > self._acked:
            self._acked = self._applied
            self._journal.write({"ack": self._acked})

    def _flush_timeout(self) -> float | None:
        """Seconds until pending metric points must go out (None: nothing pending)."""
        if self._pending_since is None:
            return None
        return max(0.0, self._pending_since + METRIC_FLUSH_INTERVAL_S - time.monotonic())

    def _guarded(self, task: Callable[[], None]) -> bool:
        """Run ``task``; while the store is away, again with back-off, in order (the queue
        waits), until it answers or :meth:`close` gives up. False when it was given up (the
        journal keeps it); True when it was written or can never be (a bad request)."""
        delay = 0.5
        while True:
            try:
                task()
            except Exception as exc:
                if not _transient(exc):
                    self._report_error(exc)
                    return True
                if self._give_up.is_set():
                    self._report_error(exc)
                    return False
                if self._outage_since is None:
                    self._outage_since = time.monotonic()
                    self.outages += 1
                    self._say(
                        f"tunetrain: the MLflow store at {self.tracking_uri} is unreachable "
                        f"({_trim(f'{type(exc).__name__}: {exc}', 300)}).\n"
                        "  Training goes on; records are kept"
                        + (f" in {self.journal_path}" if self.journal_path else "")
                        + " and written when it is back."
                    )
                # Back-off while the store is away: this thread only writes records, and
                # Ray Tune's event loop never waits on it.
                self._give_up.wait(delay)
                delay = min(delay * 2, 5.0)
                self._doubtful = True  # what may have gone through is not written twice
                continue
            self._doubtful = False
            if self._outage_since is not None:
                self._say(
                    f"tunetrain: the MLflow store is back after {time.monotonic() - self._outage_since:.0f} s; "
                    "the records kept meanwhile are being written."
                )
                self._outage_since = None
            return True

    def _say(self, text: str) -> None:
        print(text, file=self._errors, flush=True)

    def _report_error(self, exc: BaseException) -> None:
        self.error_count += 1
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"
            self._say(
                f"tunetrain: MLflow tracking error at {self.tracking_uri}: {_trim(self.first_error, 500)}\n"
                "  Training goes on; further tracking errors are counted and reported at the end."
            )

    def _flush_metrics(self) -> None:
        if not self._pending_metrics:
            self._pending_since = None
            return
        if self._doubtful or self._pending_first <= self._replay_until:
            # Sent again (after an outage or a crash): leave out points already in the store.
            for run_id in list(self._pending_metrics):
                present = self._points(run_id, {m.key for m in self._pending_metrics[run_id]})
                self._pending_metrics[run_id] = [
                    m for m in self._pending_metrics[run_id] if (m.key, m.step) not in present
                ]
        for run_id in list(self._pending_metrics):
            metrics = self._pending_metrics[run_id]
            for start in range(0, len(metrics), _MAX_METRICS_PER_BATCH):
                self._client.log_batch(run_id, metrics=metrics[start : start + _MAX_METRICS_PER_BATCH])
            del self._pending_metrics[run_id]  # gone out: a failure after this does not resend them
        self._pending_since = None

    def _points(self, run_id: str, keys: set[str]) -> set[tuple[str, int]]:
        """The (metric, step) points of ``keys`` already in the run."""
        return {(key, step) for _, key, step, _, _ in _metric_points(self._client, [run_id], sorted(keys))}

    def _log_params_and_tags(self, run_id: str, params: Mapping[str, Any], tags: Mapping[str, Any]) -> None:
        param_list = [Param(key, _trim(str(value), _MAX_PARAM_LENGTH)) for key, value in params.items()]
        tag_list = [RunTag(key, _trim(str(value), _MAX_TAG_LENGTH)) for key, value in tags.items()]
        for start in range(0, len(param_list), _MAX_PARAMS_PER_BATCH):
            self._client.log_batch(run_id, params=param_list[start : start + _MAX_PARAMS_PER_BATCH])
        for start in range(0, len(tag_list), _MAX_TAGS_PER_BATCH):
            self._client.log_batch(run_id, tags=tag_list[start : start + _MAX_TAGS_PER_BATCH])

    def _emit(self, op: str, **args: Any) -> None:
        """Journal one record (in order) and queue it for the store."""
        self._seq += 1
        entry = {"seq": self._seq, "op": op, **args}
        if self._journal is not None:
            self._journal.write(entry, sync=op in ("end_trial", "end_sweep"))
        self._queue.put(entry)

    def _target(self, trial: str | None) -> str | None:
        """The run id of a trial (None: of the sweep's parent run)."""
        return self.parent_run_id if trial is None else self._run_ids.get(trial)

    def _apply(self, entry: dict[str, Any]) -> None:
        if entry["op"] == "metrics" and not self._pending_metrics:
            self._pending_first = entry["seq"]
        getattr(self, f"_op_{entry['op']}")(entry)

    # -- what each journal entry does in the store -------------------------------------

    def _op_start_sweep(self, entry: dict[str, Any]) -> None:
        if self.parent_run_id is None:
            experiment = self._client.get_experiment_by_name(self.experiment_name)
            if experiment is None:
                self.experiment_id = self._client.create_experiment(
                    self.experiment_name, artifact_location=self._artifact_location
                )
            else:
                self.experiment_id = experiment.experiment_id
            found = self._find_run(f"tags.`{SWEEP_ID_TAG}` = '{entry['sweep_id']}' and tags.`{ROLE_TAG}` = 'sweep'")
            run_id = (
                found
                or self._client.create_run(
                    self.experiment_id,
                    run_name=entry["run_name"],
                    tags={SWEEP_ID_TAG: entry["sweep_id"], ROLE_TAG: "sweep"},
                ).info.run_id
            )
            self.parent_run_id = run_id
            if self._journal is not None:
                self._journal.write({"run": None, "run_id": run_id, "experiment_id": self.experiment_id}, sync=True)
        self._log_params_and_tags(self.parent_run_id, entry["params"], entry["tags"])

    def _op_resume_sweep(self, entry: dict[str, Any]) -> None:
        if self.parent_run_id is not None:
            self._client.update_run(self.parent_run_id, status="RUNNING")
            self._log_params_and_tags(self.parent_run_id, {}, entry["tags"])

    def _find_run(self, filter_string: str) -> str | None:
        if self.experiment_id is None:
            return None
        runs = self._client.search_runs([self.experiment_id], filter_string=filter_string, max_results=1)
        return runs[0].info.run_id if runs else None

    def _op_start_trial(self, entry: dict[str, Any]) -> None:
        trial, parent = entry["trial"], self.parent_run_id
        if parent is None or self.experiment_id is None or trial in self._run_ids:
            return
        trial_key = entry["tags"].get(TRIAL_ID_TAG, trial)
        found = None
        if self._doubtful or entry["seq"] <= self._replay_until:  # it may exist already
            found = self._find_run(f"tags.`{PARENT_TAG}` = '{parent}' and tags.`{TRIAL_ID_TAG}` = '{trial_key}'")
        run_id = (
            found
            or self._client.create_run(
                self.experiment_id,
                start_time=int(entry["start_time"] * 1000),
                run_name=trial,
                tags={PARENT_TAG: parent, STATUS_TAG: "running", TRIAL_ID_TAG: trial_key},
            ).info.run_id
        )
        self._run_ids[trial] = run_id
        if self._journal is not None:
            self._journal.write({"run": trial, "run_id": run_id})
        self._log_params_and_tags(run_id, entry["params"], entry["tags"])

    def _op_reopen_trial(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None:
            self._client.update_run(run_id, status="RUNNING")
            self._log_params_and_tags(run_id, {}, {STATUS_TAG: "running"})

    def _op_metrics(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is None:
            return
        ts = int(entry["timestamp"] * 1000)
        pending = self._pending_metrics.setdefault(run_id, [])
        pending.extend(Metric(key, float(value), ts, entry["step"]) for key, value in entry["metrics"].items())
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        if len(pending) >= _MAX_METRICS_PER_BATCH:  # a full batch goes out at once
            self._flush_metrics()

    def _op_tags(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None:
            self._log_params_and_tags(run_id, {}, entry["tags"])

    def _op_dict(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None:
            self._client.log_dict(run_id, entry["content"], entry["name"])

    def _op_text(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None:
            self._client.log_text(run_id, entry["text"], entry["name"])

    def _op_artifact(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None and Path(entry["path"]).exists():
            self._client.log_artifact(run_id, entry["path"])

    def _op_end_trial(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is None:
            return
        self._flush_metrics()
        all_tags = {STATUS_TAG: entry["status"], **entry["tags"]}
        if entry.get("error"):
            all_tags[ERROR_TAG] = _trim(entry.get("error_headline") or entry["error"], 500)
            self._client.log_text(run_id, entry["error"], "error.txt")
        for name, content in (entry.get("artifacts") or {}).items():
            self._client.log_dict(run_id, content, name)
        self._log_params_and_tags(run_id, {}, all_tags)
        self._client.set_terminated(
            run_id, status=_RUN_STATUS.get(entry["status"], "FINISHED"), end_time=int(entry["end_time"] * 1000)
        )

    def _op_end_sweep(self, entry: dict[str, Any]) -> None:
        parent = self.parent_run_id
        if parent is None:
            return
        all_tags = dict(entry["tags"])
        best_trial, best_config = entry.get("best_trial"), entry.get("best_config")
        if best_trial is not None and best_trial in self._run_ids:
            all_tags["tunetrain.best_run_id"] = self._run_ids[best_trial]
            all_tags["tunetrain.best_trial"] = best_trial
        if best_config is not None:
            all_tags["tunetrain.best_config"] = json.dumps(best_config, default=str)
            self._client.log_dict(parent, dict(best_config), "best_config.json")
        now, step = int(entry["time"] * 1000), int(entry.get("step", 0))
        # The best value is one point per session of the sweep, at step = how often it was
        # resumed: the newest (MLflow's latest value: highest step) is the whole sweep's best,
        # and a session's end sent again writes nothing twice.
        present = self._points(parent, set(entry["best_metrics"]))
        metrics = [Metric(k, float(v), now, step) for k, v in entry["best_metrics"].items() if (k, step) not in present]
        if metrics:
            self._client.log_batch(parent, metrics=metrics)
        self._log_params_and_tags(parent, {}, all_tags)
        self._client.set_terminated(parent, status=entry["status"])

    # -- the sweep -------------------------------------------------------------------

    def start_sweep(
        self, *, run_name: str, params: Mapping[str, Any], tags: Mapping[str, Any], sweep_id: str | None = None
    ) -> str | None:
        """Create the sweep's parent run; returns its run id once created, None if the store
        did not answer within ``drain_timeout_s`` (the run is created when it does)."""
        self._emit(
            "start_sweep", run_name=run_name, params=dict(params), tags=dict(tags), sweep_id=sweep_id or run_name
        )
        self._wait(self.drain_timeout_s)
        return self.parent_run_id

    def resume_sweep(self, *, tags: Mapping[str, Any]) -> str | None:
        """Re-open a journaled sweep: first send what it left unsent (idempotently), then mark
        its parent run running again; returns the parent's run id."""
        self.send_unsent()
        self._emit("resume_sweep", tags=dict(tags))
        self._wait(self.drain_timeout_s)
        return self.parent_run_id

    def send_unsent(self) -> int:
        """Queue what the journal holds but the store may not (``tunetrain sync``, a resumed
        sweep); it is written idempotently. Returns how many records that is."""
        if self._journal is None:
            raise ValueError("sending unsent records needs the sweep's journal")
        state = Journal.read(self._journal.path)
        self._replay_until = state.last_seq
        for entry in state.unsent:
            self._queue.put(entry)
        return len(state.unsent)

    def _wait(self, timeout: float) -> bool:
        """Wait until everything queued is written (True) or ``timeout`` s pass (False)."""
        done = threading.Event()

        def joined() -> None:
            self._queue.join()
            done.set()

        threading.Thread(target=joined, daemon=True).start()
        return done.wait(timeout)

    def log_sweep_artifact(self, local_path: str) -> None:
        self._emit("artifact", trial=None, path=str(local_path))

    def log_sweep_text(self, text: str, name: str) -> None:
        """Write ``text`` as the artifact ``name`` of the sweep's parent run."""
        self._emit("text", trial=None, text=text, name=name)

    def set_sweep_tags(self, tags: Mapping[str, Any]) -> None:
        self._emit("tags", trial=None, tags=dict(tags))

    def end_sweep(
        self,
        *,
        status: str,
        best_metrics: Mapping[str, float],
        tags: Mapping[str, Any],
        best_trial: str | None,
        best_config: Mapping[str, Any] | None,
        step: int = 0,
    ) -> None:
        """Close the parent run with the best trial's metric, config and run id; ``step`` is
        the session (0, then 1 for the first resume, ...)."""
        self._emit(
            "end_sweep",
            status=status,
            step=step,
            best_metrics=dict(best_metrics),
            tags=dict(tags),
            best_trial=best_trial,
            best_config=dict(best_config) if best_config is not None else None,
            time=time.time(),
        )

    # -- trials ----------------------------------------------------------------------

    def start_trial(
        self,
        trial: str,
        *,
        params: Mapping[str, Any],
        tags: Mapping[str, Any],
        start_time: float,
    ) -> None:
        """Open the trial's child run (params: the resolved config, flattened, plus its seed)."""
        self._emit("start_trial", trial=trial, params=dict(params), tags=dict(tags), start_time=start_time)

    def reopen_trial(self, trial: str) -> None:
        """Mark an interrupted trial's run running again (its sweep was resumed)."""
        self._emit("reopen_trial", trial=trial, time=time.time())

    def log_metrics(self, trial: str, *, step: int, metrics: Mapping[str, float], timestamp: float) -> None:
        """Queue one report's metrics; they go out with other queued points in one log_batch."""
        self._emit("metrics", trial=trial, step=step, metrics=dict(metrics), timestamp=timestamp)

    def set_tags(self, trial: str, tags: Mapping[str, Any]) -> None:
        self._emit("tags", trial=trial, tags=dict(tags))

    def end_trial(
        self,
        trial: str,
        *,
        status: str,
        end_time: float,
        tags: Mapping[str, Any],
        error: str | None = None,
        error_headline: str = "",
        artifacts: Mapping[str, Any] | None = None,
    ) -> None:
        """Close the trial's run with its tunetrain status; a failed trial's full error goes to
        ``error.txt`` and its headline (the exception line) to the ``tunetrain.error`` tag."""
        self._emit(
            "end_trial",
            trial=trial,
            status=status,
            end_time=end_time,
            tags=dict(tags),
            error=error,
            error_headline=error_headline,
            artifacts=dict(artifacts or {}),
        )

    def log_dict(self, trial: str, name: str, content: Any) -> None:
        """Write ``content`` as the JSON artifact ``name`` of the trial's run (replacing it)."""
        self._emit("dict", trial=trial, name=name, content=content)

    def run_id(self, trial: str) -> str | None:
        """The trial's MLflow run id (after :meth:`flush`)."""
        return self._run_ids.get(trial)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until everything queued so far is written, at most ``timeout`` s (default
        ``drain_timeout_s``: the store may be away); True if it was."""
        self._queue.put({"op": "flush"})
        return self._wait(self.drain_timeout_s if timeout is None else timeout)

    @property
    def unsent(self) -> int:
        """Records not yet in the store."""
        return self._seq - self._applied

    def close(self) -> None:
        """Write what is queued (waiting at most ``drain_timeout_s`` while the store is away),
        then stop; what is still unsent stays in the journal for ``tunetrain sync``."""
        self._closing.set()
        drained = self._wait(self.drain_timeout_s)
        if not drained:
            self._give_up.set()
        self._queue.put(None)
        self._thread.join(timeout=None if drained else 30)
        if self._journal is not None:
            self._journal.close()


# -- reading sweeps back -------------------------------------------------------------------

SWEEP_NAME_TAG = "tunetrain.sweep_name"


@dataclasses.dataclass
class RunRecord:
    """One MLflow run as tunetrain reads it (times in seconds since the epoch)."""

    run_id: str
    name: str
    experiment_id: str
    status: str
    start_time: float | None
    end_time: float | None
    params: dict[str, str]
    tags: dict[str, str]
    metrics: dict[str, float]  # the latest value of each metric


def _record(run: Any) -> RunRecord:
    info, data = run.info, run.data
    return RunRecord(
        run_id=info.run_id,
        name=info.run_name or data.tags.get("mlflow.runName", ""),
        experiment_id=info.experiment_id,
        status=info.status,
        start_time=info.start_time / 1000 if info.start_time else None,
        end_time=info.end_time / 1000 if info.end_time else None,
        params=dict(data.params),
        tags=dict(data.tags),
        metrics=dict(data.metrics),
    )


class SweepStore:
    """Reads sweeps (parent runs) and their trials (child runs) from a tracking store."""

    def __init__(self, tracking_uri: str) -> None:
        _quiet_mlflow_logging()
        self.tracking_uri = tracking_uri
        self._client = MlflowClient(tracking_uri=tracking_uri)

    def _search(self, experiment_ids: list[str], filter_string: str) -> list[RunRecord]:
        records: list[RunRecord] = []
        token = None
        while True:
            page = self._client.search_runs(
                experiment_ids, filter_string=filter_string, max_results=1000, page_token=token
            )
            records.extend(_record(run) for run in page)
            token = page.token
            if not token:
                return records

    def _experiment_ids(self, experiment: str | None) -> list[str]:
        if experiment is None:
            return [e.experiment_id for e in self._client.search_experiments()]
        found = self._client.get_experiment_by_name(experiment)
        if found is None:
            names = sorted(e.name for e in self._client.search_experiments())
            raise ExperimentError(
                f"No experiment {experiment!r} in the tracking store {self.tracking_uri}; "
                f"it has: {', '.join(map(repr, names)) or '(none)'}.",
                fix="Use one of those names, or point --tracking-uri at the store the sweep used.",
            )
        return [found.experiment_id]

    def sweeps(self, experiment: str | None = None) -> list[RunRecord]:
        """Every sweep's parent run (of one experiment, or of all), newest first."""
        ids = self._experiment_ids(experiment)
        if not ids:
            return []
        runs = self._search(ids, f"tags.`{SWEEP_NAME_TAG}` LIKE '%'")
        parents = [r for r in runs if PARENT_TAG not in r.tags]
        return sorted(parents, key=lambda r: r.start_time or 0.0, reverse=True)

    def experiment_name(self, experiment_id: str) -> str:
        return str(self._client.get_experiment(experiment_id).name)

    def sweep(self, ref: str | None = None, *, experiment: str | None = None) -> RunRecord:
        """A sweep's parent run by sweep name or run id; None means the newest sweep."""
        sweeps = self.sweeps(experiment)
        if ref is None:
            if not sweeps:
                raise ExperimentError(
                    f"No sweep recorded in the tracking store {self.tracking_uri}.",
                    fix="Run `python -m tunetrain sweep FILE` first, or pass --tracking-uri of the store it used.",
                )
            return sweeps[0]
        for run in sweeps:
            if ref in (run.run_id, run.tags.get(SWEEP_NAME_TAG), run.name):
                return run
        known = ", ".join(r.tags.get(SWEEP_NAME_TAG, r.run_id) for r in sweeps[:10])
        raise ExperimentError(
            f"No sweep named {ref!r} (nor a sweep's parent run id) in the tracking store {self.tracking_uri}; "
            f"newest sweeps: {known or '(none)'}.",
            fix="Use `tunetrain list` to see the sweeps, and pass one of their names or run ids.",
        )

    def trials(self, parent: RunRecord) -> list[RunRecord]:
        """The sweep's child runs, one per trial, in trial order."""
        runs = self._search([parent.experiment_id], f"tags.`{PARENT_TAG}` = '{parent.run_id}'")
        return sorted(runs, key=lambda r: (int(r.tags.get("tunetrain.trial_index", 0)), r.name))

    def histories(self, run_ids: Sequence[str], keys: Iterable[str]) -> pd.DataFrame:
        """Every recorded point of the metrics ``keys`` of the runs ``run_ids``: a DataFrame
        with columns run_id, metric, step, value, timestamp (seconds), in no set order."""
        columns = ["run_id", "metric", "step", "value", "timestamp"]
        return pd.DataFrame.from_records(_metric_points(self._client, run_ids, list(keys)), columns=columns)

    def run(self, run_id: str) -> RunRecord:
        """One run by id; an unknown id is bad input."""
        try:
            return _record(self._client.get_run(run_id))
        except Exception as exc:  # MLflow raises its own exception types per store
            raise ExperimentError(
                f"No run {run_id!r} in the tracking store {self.tracking_uri} ({type(exc).__name__}).",
                fix="Pass a trial's run id (`tunetrain show SWEEP --all-columns` lists them) and the store's "
                "--tracking-uri.",
            ) from None

    def log_dict(self, run_id: str, content: Any, name: str) -> None:
        self._client.log_dict(run_id, content, name)

    def set_tags(self, run_id: str, tags: Mapping[str, Any]) -> None:
        for key, value in tags.items():
            self._client.set_tag(run_id, key, str(value))

    def download_artifact(self, run_id: str, path: str, folder: str | Path) -> Path:
        """Copy a run's artifact into ``folder``; a missing one is bad input."""
        try:
            return Path(self._client.download_artifacts(run_id, path, str(folder)))
        except Exception as exc:  # MLflow raises different types per store for a missing file
            raise ExperimentError(
                f"Run {run_id} has no artifact {path!r} ({type(exc).__name__}: {exc}).",
                fix="Replay trials of sweeps whose parent run holds the experiment file (any `tunetrain sweep FILE`).",
            ) from None

    def load_json_artifact(self, run_id: str, path: str) -> Any:
        """A JSON artifact of a run, or None when the run has none by that path."""
        with tempfile.TemporaryDirectory() as folder:
            try:
                local = self.download_artifact(run_id, path, folder)
            except ExperimentError:  # the run has no such artifact
                return None
            return json.loads(local.read_text())

    def log_artifacts(self, run_id: str, files: Iterable[str | Path], *, artifact_path: str) -> None:
        for file in files:
            self._client.log_artifact(run_id, str(file), artifact_path=artifact_path)


def _metric_points(
    client: MlflowClient, run_ids: Sequence[str], keys: list[str]
) -> list[tuple[str, str, int, float, float]]:
    """Every recorded point of the metrics ``keys`` of the runs ``run_ids``, as (run_id,
    metric, step, value, timestamp in seconds): what the analysis reads, and what the
    recorder checks before it sends points again.

    A SQL store (sqlite, PostgreSQL, MySQL) is read with one SELECT over MLflow's own
    ``metrics`` table model per 500 runs: MLflow's ``get_metric_history_bulk`` builds a
    Metric object per point and took 8.6 s for 300,000 points where the SELECT takes
    0.9 s (benchmarks/analysis_load.py). A tracking server gets one
    ``get_metric_history`` per run and metric, 8 in flight.
    """
    store = client._tracking_client.store
    rows: list[tuple[str, str, int, float, float]] = []
    if not keys or not run_ids:
        return rows
    if hasattr(store, "ManagedSessionMaker"):
        import sqlalchemy as sa
        from mlflow.store.tracking.dbmodels.models import SqlMetric

        for start in range(0, len(run_ids), 500):
            query: Any = sa.select(
                SqlMetric.run_uuid,
                SqlMetric.key,
                SqlMetric.step,
                SqlMetric.value,
                SqlMetric.timestamp,
                SqlMetric.is_nan,
            ).where(SqlMetric.key.in_(keys), SqlMetric.run_uuid.in_(list(run_ids[start : start + 500])))
            with store.ManagedSessionMaker() as session:
                # MLflow stores NaN as 0 with is_nan set (its Metric entity reads it back the same way).
                rows.extend(
                    (run, key, step, math.nan if is_nan else value, ts / 1000)
                    for run, key, step, value, ts, is_nan in session.execute(query)
                )
        return rows

    def one(pair: tuple[str, str]) -> list[tuple[str, str, int, float, float]]:
        run_id, key = pair
        return [(run_id, key, m.step, m.value, m.timestamp / 1000) for m in client.get_metric_history(run_id, key)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        for points in pool.map(one, [(r, k) for r in run_ids for k in keys]):
            rows.extend(points)
    return rows
