"""Reading sweeps back from any tracking URI (``tunetrain.results.analysis``, ``list``, ``show``,
``best``, ``report``, the smoke timings of ``--dry-run``) and checking a store (``doctor``)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import threading
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pandas as pd
from mlflow.tracking import MlflowClient

from tunetrain import _internals
from tunetrain.errors import ExperimentError
from tunetrain.redaction import redact
from tunetrain.tracking._rules import _quiet_mlflow_logging, _trim, sqlite_path
from tunetrain.tracking.schema import (
    PARENT_TAG,
    REPORT_TAG,
    RUN_NOTE_TAG,
    SMOKE_ITERATION_TAG,
    SMOKE_SHAPE_TAGS,
    SMOKE_STARTUP_TAG,
    SMOKE_TAG,
    SWEEP_NAME_TAG,
    TRIAL_INDEX_TAG,
    TRIAL_RUNNER_TAG,
    WORKERS_PER_TRIAL_TAG,
)


def default_tracking_uri(directory: str | Path | None = None) -> str:
    """The embedded store: ``sqlite:///<dir>/mlflow.db`` (the working directory by default)."""
    base = Path(directory or os.getcwd()).resolve()
    return f"sqlite:///{base / 'mlflow.db'}"


def open_in_background(tracking_uri: str) -> threading.Thread | None:
    """Open a sqlite store in a thread of its own, for a sweep to join before its recorder
    opens it: the first open of a store in a process costs about 0.7 s on 2 CPUs
    (SQLAlchemy's engine, MLflow's schema check, the imports they make on first use) and a
    new file more (every schema migration), which a sweep otherwise pays after Ray has
    started instead of while it starts. None for any other store: a server's HTTP client
    opens nothing, and a database server that does not answer must not hold the sweep up
    (the recorder trains on without it, docs/fault_tolerance.md). What goes wrong here is
    left to the recorder, which says it."""
    if not tracking_uri.startswith("sqlite:"):
        return None

    def open_store() -> None:
        _quiet_mlflow_logging()
        try:
            MlflowClient(tracking_uri=tracking_uri).search_experiments(max_results=1)
        except Exception:  # the recorder opens it again, and reports what fails
            return

    thread = threading.Thread(target=open_store, name="tunetrain-open-store", daemon=True)
    thread.start()
    return thread


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
        return _trim(redact(f"{tracking_uri} does not take runs: {type(exc).__name__}: {exc}"), 600)
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
    workers = shape.get(WORKERS_PER_TRIAL_TAG, "?")
    return f"{workers} worker(s) per trial ({shape.get(TRIAL_RUNNER_TAG, '?')})"


def trial_shape(*, workers: str, runner: str) -> dict[str, str]:
    """The tags that say how a trial runs (workers, runner): a smoke run's timings price only
    sweeps of the same shape."""
    return {WORKERS_PER_TRIAL_TAG: workers, TRIAL_RUNNER_TAG: runner}


@dataclasses.dataclass(frozen=True)
class SmokeLookup:
    """What a sweep's estimate can use of the experiment's smoke runs."""

    timings: SmokeTimings | None  # the newest smoke run's of this trial shape; None: none
    other: SmokeTimings | None  # when none matched: the newest of another shape (said, not used)
    shape_text: str  # this trial shape, described


def smoke_timings(tracking_uri: str, experiment: str, *, workers: str, runner: str) -> SmokeLookup:
    """The timings of the experiment's newest smoke run of the trial shape ``workers`` x
    ``runner``, and when there is none the newest of any shape (see :func:`latest_smoke_timings`)."""
    shape = trial_shape(workers=workers, runner=runner)
    timings = latest_smoke_timings(tracking_uri, experiment, shape=shape)
    other = latest_smoke_timings(tracking_uri, experiment) if timings is None else None
    return SmokeLookup(timings, other, describe_shape(shape))


def latest_smoke_timings(
    tracking_uri: str, experiment: str, *, shape: Mapping[str, str] | None = None
) -> SmokeTimings | None:
    """The timings of the experiment's latest ``--smoke`` run (of this trial ``shape`` when
    given: the start-up of a 2-worker trial is not a 1-worker one's); None when there is none.
    Reads nothing (and creates no sqlite file) when the store is a sqlite file that does not
    exist yet."""
    db = sqlite_path(tracking_uri)
    if db is not None and not db.exists():
        return None
    store = SweepStore(tracking_uri)
    if store._client.get_experiment_by_name(experiment) is None:
        return None
    for run in store.sweeps(experiment):
        tags = run.tags
        if tags.get(SMOKE_TAG) != "true" or SMOKE_ITERATION_TAG not in tags:
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
                f"No experiment {experiment!r} in the tracking store {redact(self.tracking_uri)}; "
                f"it has: {', '.join(map(repr, names)) or '(none)'}.",
                fix="Use one of those names, or point --tracking-uri at the store the sweep used.",
            )
        return [found.experiment_id]

    def sweeps(self, experiment: str | None = None, *, smoke: bool = True) -> list[RunRecord]:
        """Every sweep's parent run (of one experiment, or of all), newest first; without the
        ``--smoke`` runs' sweeps when ``smoke`` is False."""
        ids = self._experiment_ids(experiment)
        if not ids:
            return []
        runs = self._search(ids, f"tags.`{SWEEP_NAME_TAG}` LIKE '%'")
        parents = [r for r in runs if PARENT_TAG not in r.tags and (smoke or r.tags.get(SMOKE_TAG) != "true")]
        return sorted(parents, key=lambda r: r.start_time or 0.0, reverse=True)

    def experiment_name(self, experiment_id: str) -> str:
        return str(self._client.get_experiment(experiment_id).name)

    def sweep(self, ref: str | None = None, *, experiment: str | None = None) -> RunRecord:
        """A sweep's parent run by sweep name or run id; None means the newest sweep that is
        not a ``--smoke`` run's (those are found by name)."""
        sweeps = self.sweeps(experiment)
        if ref is None:
            real = [run for run in sweeps if run.tags.get(SMOKE_TAG) != "true"]
            if not real:
                smoke = f" (only smoke runs: {sweeps[0].tags.get(SWEEP_NAME_TAG)}, ...; name one)" if sweeps else ""
                raise ExperimentError(
                    f"No sweep recorded in the tracking store {redact(self.tracking_uri)}{smoke}.",
                    fix="Run `python -m tunetrain sweep FILE` first, or pass --tracking-uri of the store it used.",
                )
            return real[0]
        for run in sweeps:
            if ref in (run.run_id, run.tags.get(SWEEP_NAME_TAG), run.name):
                return run
        known = ", ".join(r.tags.get(SWEEP_NAME_TAG, r.run_id) for r in sweeps[:10])
        raise ExperimentError(
            f"No sweep named {ref!r} (nor a sweep's parent run id) in the tracking store {redact(self.tracking_uri)}; "
            f"newest sweeps: {known or '(none)'}.",
            fix="Use `tunetrain list` to see the sweeps, and pass one of their names or run ids.",
        )

    def trials(self, parent: RunRecord) -> list[RunRecord]:
        """The sweep's child runs, one per trial, in trial order."""
        runs = self._search([parent.experiment_id], f"tags.`{PARENT_TAG}` = '{parent.run_id}'")
        return sorted(runs, key=lambda r: (int(r.tags.get(TRIAL_INDEX_TAG, 0)), r.name))

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
                f"No run {run_id!r} in the tracking store {redact(self.tracking_uri)} ({type(exc).__name__}).",
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

    def link_report(self, run_id: str, artifact: str) -> None:
        """The sweep's HTML report one click from its parent run: the run's description (what
        its page shows first) starts with a link to the artifact shown in place, and
        :data:`REPORT_TAG` names it (what ``tunetrain ui`` links). A newer report's line
        replaces the older one's."""
        from tunetrain.tracking.ui import report_page

        run = self.run(run_id)  # read now: the description may have changed since the sweep was loaded
        note = run.tags.get(RUN_NOTE_TAG, "")
        if note.startswith(_REPORT_LINE):
            note = note.partition("\n\n")[2]
        page = report_page(run.experiment_id, run_id, artifact).lstrip("/")
        line = f"{_REPORT_LINE} [{artifact.rpartition('/')[2]}]({page})"
        self.set_tags(run_id, {REPORT_TAG: artifact, RUN_NOTE_TAG: line + ("\n\n" + note if note else "")})


_REPORT_LINE = "**Report:**"


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
    rows: list[tuple[str, str, int, float, float]] = []
    if not keys or not run_ids:
        return rows
    found = _internals.sql_metric_points(client, run_ids, keys)
    if found is not None:
        return found

    def one(pair: tuple[str, str]) -> list[tuple[str, str, int, float, float]]:
        run_id, key = pair
        return [(run_id, key, m.step, m.value, m.timestamp / 1000) for m in client.get_metric_history(run_id, key)]

    with ThreadPoolExecutor(max_workers=8) as pool:
        for points in pool.map(one, [(r, k) for r in run_ids for k in keys]):
            rows.extend(points)
    return rows
