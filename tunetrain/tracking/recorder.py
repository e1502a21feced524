"""The background recorder: one sweep's records, journaled, then written to MLflow."""

from __future__ import annotations

import functools
import os
import queue
import sys
import threading
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TextIO

from mlflow.entities import Metric
from mlflow.tracking import MlflowClient

from tunetrain.redaction import redact, strip_credentials
from tunetrain.tracking._rules import METRIC_FLUSH_INTERVAL_S, _quiet_mlflow_logging, _transient, _trim
from tunetrain.tracking._writes import _StoreWrites
from tunetrain.tracking.journal import Journal, JournalProgress, JournalState
from tunetrain.tracking.recording import Recorder


class SweepRecorder(_StoreWrites, Recorder):
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
        journal_state: JournalState | None = None,
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
        self._progress = JournalProgress()  # where the entries stand: journaled, in the store, acknowledged
        self._journal: Journal | None = None
        self._state: JournalState | None = None  # a resume's journal, read by the caller
        self._journal_said = False
        self.journal_error: str | None = None  # why the journal's disk refused a record
        if journal is not None:
            path = Path(journal)
            self._journal = Journal(path)  # refused while another process writes it
            # What the caller read already (a resume) is not read again: the journal is read
            # once per session, whatever its length.
            state = journal_state if journal_state is not None else Journal.read(path)
            self._state = journal_state
            if state.skipped:
                self._say(
                    f"tunetrain: {len(state.skipped)} line(s) of {path} are not records (torn by a crash or a full "
                    f"disk, or written by something else): line(s) {', '.join(map(str, state.skipped[:10]))}; skipped."
                )
            if not state.header:
                self._journal.write(
                    {
                        "journal": 1,
                        "tracking_uri": strip_credentials(tracking_uri),
                        "experiment_name": experiment_name,
                        "artifact_location": artifact_location,
                        **(header or {}),
                    },
                    sync=True,
                )
            self._progress.resumed(state)
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
                self._progress.written(None, done=self._guarded(self._flush_metrics))
                self._ack()
                continue
            try:
                if entry is None:
                    self._progress.written(None, done=self._guarded(self._flush_metrics))
                    self._ack()
                    return
                if entry["op"] == "flush":
                    done = self._guarded(self._flush_metrics)
                else:
                    done = self._guarded(functools.partial(self._apply, entry))
                    if self._flush_timeout() == 0.0:
                        done = self._guarded(self._flush_metrics) and done
                self._progress.written(entry.get("seq"), done=done)
                self._ack()
            finally:
                self._queue.task_done()

    def _ack(self) -> None:
        """Note in the journal that every entry so far is in the store (none pending)."""
        if self._journal is None or self._pending_metrics:
            return
        acked = self._progress.to_ack()
        if acked is not None and not self._journal.write({"ack": acked}):
            self._journal_refused()

    def _flush_timeout(self) -> float | None:
        """Seconds until pending metric points must go out (None: nothing pending)."""
        if self._pending_since is None:
            return None
        return max(0.0, self._pending_since + METRIC_FLUSH_INTERVAL_S - time.monotonic())

    def _guarded(self, task: Callable[[], None]) -> bool:
        """Run ``task``; while the store is away, again with back-off, in order (the queue
        waits), until it answers or :meth:`close` gives up. False when it was given up or
        refused (the journal keeps it, unacknowledged, for ``tunetrain sync`` once the cause is
        fixed; the sweep reports the error and does not end as a success); True when written."""
        delay = 0.5
        while True:
            try:
                task()
            except Exception as exc:
                if not _transient(exc):
                    self._report_error(exc)
                    return False
                if self._give_up.is_set():
                    self._report_error(exc)
                    return False
                if self._outage_since is None:
                    self._outage_since = time.monotonic()
                    self.outages += 1
                    self._say(
                        f"tunetrain: the MLflow store at {redact(self.tracking_uri)} is unreachable "
                        f"({_trim(redact(f'{type(exc).__name__}: {exc}'), 300)}).\n"
                        "  Training goes on; records are kept"
                        + (f" in {self.journal_path}" if self.journal_path else "")
                        + " and written when it is back."
                    )
                # Back-off while the store is away: this thread only writes records, and
                # Ray Tune's event loop never waits on it.
                self._give_up.wait(delay)
                delay = min(delay * 2, 5.0)
                self._progress.doubtful = True  # what may have gone through is not written twice
                continue
            self._progress.doubtful = False
            if self._outage_since is not None:
                # "Back" is the store's state only: a journal whose disk is full is said too, as
                # the disk that filled may be the store's (a sqlite file beside the journal).
                journal = (
                    f" The tracking journal's disk still refuses its copy ({self.journal_error})."
                    if self._journal_said
                    else ""
                )
                self._say(
                    f"tunetrain: the MLflow store takes records again after "
                    f"{time.monotonic() - self._outage_since:.0f} s; the records kept meanwhile are being written."
                    + journal
                )
                self._outage_since = None
            return True

    def _say(self, text: str) -> None:
        print(text, file=self._errors, flush=True)

    def _journal_refused(self) -> None:
        """The journal's disk refused a record: said once, counted once (the sweep does not
        end as a success: what an outage or a crash would leave unsent has no copy)."""
        if self._journal is None or self._journal_said:
            return
        self._journal_said = True
        self.journal_error = self._journal.error
        self._say(
            f"tunetrain: the tracking journal could not be written: {self._journal.error}.\n"
            "  Training goes on and records still go to the MLflow store, but without their journal copy; "
            "the sweep ends with an error. Free space on the storage's disk."
        )

    def _report_error(self, exc: BaseException) -> None:
        self.error_count += 1
        if self.first_error is None:
            self.first_error = redact(f"{type(exc).__name__}: {exc}")
            self._say(
                f"tunetrain: MLflow tracking error at {redact(self.tracking_uri)}: {_trim(self.first_error, 500)}\n"
                "  Training goes on; the record is kept in the journal, further tracking errors are "
                "counted, and the sweep ends with an error."
            )

    def _emit(self, op: str, **args: Any) -> None:
        """Journal one record (in order) and queue it for the store."""
        entry = {"seq": self._progress.emitted(), "op": op, **args}
        if self._journal is not None and not self._journal.write(entry, sync=op in ("end_trial", "end_sweep")):
            self._journal_refused()
        self._queue.put(entry)  # to the store all the same: a full disk loses no MLflow record

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
        state = self._state if self._state is not None else Journal.read(self._journal.path)
        self._state = None  # once: what is written from here on is not in it
        self._progress.replaying(state.last_seq)
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
        return self._progress.unsent

    def close(self, timeout: float | None = None) -> None:
        """Write what is queued (waiting at most ``timeout`` s, default ``drain_timeout_s``,
        while the store is away, plus up to 30 s for a request in flight), then stop; what is
        still unsent stays in the journal for ``tunetrain sync``."""
        self._closing.set()
        drained = self._wait(self.drain_timeout_s if timeout is None else timeout)
        if not drained:
            self._give_up.set()
        self._queue.put(None)
        self._thread.join(timeout=None if drained else 30)
        if self._journal is not None:
            self._journal.close()
            if self._journal.error is not None:
                self._journal_refused()
