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
from tunetrain.estimate import SMOKE_ITERATION_TAG, SMOKE_STARTUP_TAG

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
ERROR_TAG = "tunetrain.error"
PARENT_TAG = "mlflow.parentRunId"

# tunetrain status -> MLflow run status. A trial stopped early or diverged ran as it
# should (the scheduler or the stop rule ended it); only a crash is a failed run.
_RUN_STATUS = {
    "completed": "FINISHED",
    "stopped_early": "FINISHED",
    "diverged": "FINISHED",
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


def latest_smoke_timings(tracking_uri: str, experiment: str) -> tuple[str, float, float] | None:
    """(sweep name, start-up s, s per iteration) of the experiment's latest ``--smoke`` run;
    None when there is none. Reads nothing (and creates no sqlite file) when the store is a
    sqlite file that does not exist yet."""
    if tracking_uri.startswith("sqlite:///") and not Path(tracking_uri[len("sqlite:///") :]).exists():
        return None
    store = SweepStore(tracking_uri)
    if store._client.get_experiment_by_name(experiment) is None:
        return None
    for run in store.sweeps(experiment):
        tags = run.tags
        if tags.get("tunetrain.smoke") == "true" and SMOKE_ITERATION_TAG in tags:
            startup, iteration = tags[SMOKE_STARTUP_TAG], tags[SMOKE_ITERATION_TAG]
            return tags.get(SWEEP_NAME_TAG, run.name), float(startup), float(iteration)
    return None


def start_ui_server(
    tracking_uri: str, *, host: str = "127.0.0.1", port: int = 5000, timeout_s: float = 180.0
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``mlflow ui`` on the store and return it once it answers ``/health``, with its URL.

    The caller stops it with :func:`stop_ui_server`. A server that exits or stays silent for
    ``timeout_s`` is an error that includes its output.
    """
    url = f"http://{host}:{port}"
    command = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", tracking_uri]
    command += ["--host", host, "--port", str(port), "--workers", "1"]
    # Its own process group: mlflow ui runs the web server as a child process, and stopping
    # the group stops both.
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + timeout_s
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


class SweepRecorder:
    """Records one sweep in MLflow: a parent run and one child run per trial.

    Trials are named by the caller (any unique string, e.g. Ray Tune's trial name); this
    class maps them to MLflow run ids. All methods but :meth:`start_sweep` and
    :meth:`close` only enqueue work and return at once.
    """

    def __init__(
        self,
        *,
        tracking_uri: str,
        experiment_name: str,
        artifact_location: str | None = None,
        error_stream: TextIO | None = None,
    ) -> None:
        _quiet_mlflow_logging()
        self.tracking_uri = tracking_uri
        self.experiment_name = experiment_name
        self._artifact_location = artifact_location
        self._errors = error_stream or sys.stderr
        self._client = MlflowClient(tracking_uri=tracking_uri)
        self.experiment_id: str | None = None
        self.parent_run_id: str | None = None
        self._run_ids: dict[str, str] = {}
        self._pending_metrics: dict[str, list[Metric]] = {}
        self._pending_since: float | None = None  # time.monotonic() of the oldest pending point
        self._queue: queue.Queue[Callable[[], None] | None] = queue.Queue()
        self.error_count = 0
        self.first_error: str | None = None
        self._thread = threading.Thread(target=self._work, name="tunetrain-mlflow", daemon=True)
        self._thread.start()

    # -- the background thread -------------------------------------------------------

    def _work(self) -> None:
        while True:
            try:
                task = self._queue.get(timeout=self._flush_timeout())
            except queue.Empty:  # the oldest pending point has waited long enough
                self._guarded(self._flush_metrics)
                continue
            try:
                if task is None:
                    self._guarded(self._flush_metrics)
                    return
                self._guarded(task)
                if self._flush_timeout() == 0.0:
                    self._guarded(self._flush_metrics)
            finally:
                self._queue.task_done()

    def _flush_timeout(self) -> float | None:
        """Seconds until pending metric points must go out (None: nothing pending)."""
        if self._pending_since is None:
            return None
        return max(0.0, self._pending_since + METRIC_FLUSH_INTERVAL_S - time.monotonic())

    def _guarded(self, task: Callable[[], None]) -> None:
        try:
            task()
        except Exception as exc:
            self._report_error(exc)

    def _report_error(self, exc: BaseException) -> None:
        self.error_count += 1
        if self.first_error is None:
            self.first_error = f"{type(exc).__name__}: {exc}"
            print(
                f"tunetrain: MLflow tracking error at {self.tracking_uri}: {_trim(self.first_error, 500)}\n"
                "  Training goes on; further tracking errors are counted and reported at the end.",
                file=self._errors,
                flush=True,
            )

    def _flush_metrics(self) -> None:
        pending, self._pending_metrics = self._pending_metrics, {}
        self._pending_since = None
        for run_id, metrics in pending.items():
            for start in range(0, len(metrics), _MAX_METRICS_PER_BATCH):
                self._client.log_batch(run_id, metrics=metrics[start : start + _MAX_METRICS_PER_BATCH])

    def _log_params_and_tags(self, run_id: str, params: Mapping[str, Any], tags: Mapping[str, Any]) -> None:
        param_list = [Param(key, _trim(str(value), _MAX_PARAM_LENGTH)) for key, value in params.items()]
        tag_list = [RunTag(key, _trim(str(value), _MAX_TAG_LENGTH)) for key, value in tags.items()]
        for start in range(0, len(param_list), _MAX_PARAMS_PER_BATCH):
            self._client.log_batch(run_id, params=param_list[start : start + _MAX_PARAMS_PER_BATCH])
        for start in range(0, len(tag_list), _MAX_TAGS_PER_BATCH):
            self._client.log_batch(run_id, tags=tag_list[start : start + _MAX_TAGS_PER_BATCH])

    def _submit(self, task: Callable[[], None]) -> None:
        self._queue.put(task)

    def _run_id(self, trial: str) -> str | None:
        return self._run_ids.get(trial)

    # -- the sweep -------------------------------------------------------------------

    def start_sweep(self, *, run_name: str, params: Mapping[str, Any], tags: Mapping[str, Any]) -> str | None:
        """Create the sweep's parent run (synchronously); returns its run id, None on a tracking error."""
        done = threading.Event()

        def task() -> None:
            try:
                experiment = self._client.get_experiment_by_name(self.experiment_name)
                if experiment is None:
                    self.experiment_id = self._client.create_experiment(
                        self.experiment_name, artifact_location=self._artifact_location
                    )
                else:
                    self.experiment_id = experiment.experiment_id
                run = self._client.create_run(self.experiment_id, run_name=run_name, tags={})
                self.parent_run_id = run.info.run_id
                self._log_params_and_tags(self.parent_run_id, params, tags)
            finally:
                done.set()

        self._submit(task)
        done.wait()
        return self.parent_run_id

    def log_sweep_artifact(self, local_path: str) -> None:
        if self.parent_run_id is not None:
            run_id = self.parent_run_id
            self._submit(lambda: self._client.log_artifact(run_id, local_path))

    def log_sweep_text(self, text: str, name: str) -> None:
        """Write ``text`` as the artifact ``name`` of the sweep's parent run."""
        if self.parent_run_id is not None:
            run_id = self.parent_run_id
            self._submit(lambda: self._client.log_text(run_id, text, name))

    def end_sweep(
        self,
        *,
        status: str,
        best_metrics: Mapping[str, float],
        tags: Mapping[str, Any],
        best_trial: str | None,
        best_config: Mapping[str, Any] | None,
    ) -> None:
        """Close the parent run with the best trial's metric, config and run id."""
        parent = self.parent_run_id
        if parent is None:
            return

        def task() -> None:
            all_tags = dict(tags)
            if best_trial is not None and best_trial in self._run_ids:
                all_tags["tunetrain.best_run_id"] = self._run_ids[best_trial]
                all_tags["tunetrain.best_trial"] = best_trial
            if best_config is not None:
                all_tags["tunetrain.best_config"] = json.dumps(best_config, default=str)
                self._client.log_dict(parent, dict(best_config), "best_config.json")
            now = int(time.time() * 1000)
            metrics = [Metric(key, float(value), now, 0) for key, value in best_metrics.items()]
            if metrics:
                self._client.log_batch(parent, metrics=metrics)
            self._log_params_and_tags(parent, {}, all_tags)
            self._client.set_terminated(parent, status=status)

        self._submit(task)

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
        parent = self.parent_run_id
        experiment_id = self.experiment_id
        if parent is None or experiment_id is None:
            return

        def task() -> None:
            run = self._client.create_run(
                experiment_id,
                start_time=int(start_time * 1000),
                run_name=trial,
                tags={PARENT_TAG: parent, STATUS_TAG: "running"},
            )
            self._run_ids[trial] = run.info.run_id
            self._log_params_and_tags(run.info.run_id, params, tags)

        self._submit(task)

    def log_metrics(self, trial: str, *, step: int, metrics: Mapping[str, float], timestamp: float) -> None:
        """Queue one report's metrics; they go out with other queued points in one log_batch."""
        ts = int(timestamp * 1000)
        points = [Metric(key, float(value), ts, step) for key, value in metrics.items()]

        def task() -> None:
            run_id = self._run_id(trial)
            if run_id is not None:
                pending = self._pending_metrics.setdefault(run_id, [])
                pending.extend(points)
                if self._pending_since is None:
                    self._pending_since = time.monotonic()
                if len(pending) >= _MAX_METRICS_PER_BATCH:  # a full batch goes out at once
                    self._flush_metrics()

        self._submit(task)

    def set_tags(self, trial: str, tags: Mapping[str, Any]) -> None:
        def task() -> None:
            run_id = self._run_id(trial)
            if run_id is not None:
                self._log_params_and_tags(run_id, {}, tags)

        self._submit(task)

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

        def task() -> None:
            run_id = self._run_id(trial)
            if run_id is None:
                return
            self._flush_metrics()
            all_tags = {STATUS_TAG: status, **tags}
            if error:
                all_tags[ERROR_TAG] = _trim(error_headline or error, 500)
                self._client.log_text(run_id, error, "error.txt")
            for name, content in (artifacts or {}).items():
                self._client.log_dict(run_id, content, name)
            self._log_params_and_tags(run_id, {}, all_tags)
            self._client.set_terminated(
                run_id, status=_RUN_STATUS.get(status, "FINISHED"), end_time=int(end_time * 1000)
            )

        self._submit(task)

    def log_dict(self, trial: str, name: str, content: Any) -> None:
        """Write ``content`` as the JSON artifact ``name`` of the trial's run (replacing it)."""

        def task() -> None:
            run_id = self._run_id(trial)
            if run_id is not None:
                self._client.log_dict(run_id, content, name)

        self._submit(task)

    def run_id(self, trial: str) -> str | None:
        """The trial's MLflow run id (after :meth:`flush`)."""
        return self._run_ids.get(trial)

    def flush(self) -> None:
        """Wait until everything queued so far is written."""
        self._submit(self._flush_metrics)
        self._queue.join()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join()


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
        with columns run_id, metric, step, value, timestamp (seconds), in no set order.

        A SQL store (sqlite, PostgreSQL, MySQL) is read with one SELECT over MLflow's own
        ``metrics`` table model per 500 runs: MLflow's ``get_metric_history_bulk`` builds a
        Metric object per point and took 8.6 s for 300,000 points where the SELECT takes
        0.9 s (benchmarks/analysis_load.py). A tracking server gets one
        ``get_metric_history`` per run and metric, 8 in flight.
        """
        keys = list(keys)
        columns = ["run_id", "metric", "step", "value", "timestamp"]
        store = self._client._tracking_client.store
        rows: list[tuple[str, str, int, float, float]] = []
        if hasattr(store, "ManagedSessionMaker") and keys:
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
            return pd.DataFrame.from_records(rows, columns=columns)

        def one(pair: tuple[str, str]) -> list[tuple[str, str, int, float, float]]:
            run_id, key = pair
            return [
                (run_id, key, m.step, m.value, m.timestamp / 1000) for m in self._client.get_metric_history(run_id, key)
            ]

        with ThreadPoolExecutor(max_workers=8) as pool:
            for points in pool.map(one, [(r, k) for r in run_ids for k in keys]):
                rows.extend(points)
        return pd.DataFrame.from_records(rows, columns=columns)

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
