"""The one seam to Ray's and MLflow's private and internal APIs.

Every use of a private name (``_private``, ``_internal``, an underscored attribute or
method) of Ray or MLflow lives here, in a named function or class, with the version it was
written against and what breaks without it; tests/test_internals.py exercises each against
the pinned versions, so that an upgrade fails there first, naming the function. Nothing
else in tunetrain reaches into Ray or MLflow internals (a grep for ``._internal``,
``._private``, ``_loads_with_cloudpickle`` or ``SqlMetric`` outside this file finds
nothing), and where a public API does the job it is used instead.

Written against Ray 2.60.0 and MLflow 3.17.2. Ray is imported inside the functions (the
CLI's quick commands need none of it); MLflow only in :func:`sql_metric_points` and
:func:`sql_log_metrics`, which the tracking package calls (the one other place that imports
mlflow).
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

# -- Ray core ----------------------------------------------------------------------------


def ray_logs_dir() -> str:
    """The connected Ray session's log folder (printed so users find the workers' output).

    Ray 2.60: ``ray._private.worker._global_node.get_logs_dir_path()``; there is no public
    getter. Without it the console names Ray's default folder, which is right for an
    embedded Ray started with default settings only.
    """
    import ray

    try:
        node = ray._private.worker._global_node
        return str(node.get_logs_dir_path()) if node is not None else "/tmp/ray/session_latest/logs"
    except AttributeError:
        return "/tmp/ray/session_latest/logs"


def enable_ray_token_auth() -> bool:
    """Turn Ray's token authentication on in this running process; False when this Ray has
    no such function (the caller then sets ``RAY_AUTH_MODE=token`` for child processes).

    Ray 2.60: ``ray._private.authentication.authentication_token_setup._enable_token_auth``
    sets ``RAY_AUTH_MODE`` and refreshes Ray's cached config (the variable alone is read
    only at start-up). Without it, connecting to a ``ray start`` cluster fails after a
    minute with "Authentication token is missing".
    """
    try:
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
    except ImportError:
        return False
    _enable_token_auth()
    return True


def route_raylet_messages(logger: logging.Logger) -> None:
    """Send the raylet's messages to the driver ("N PYTHON worker processes have been
    started", ...) to ``logger`` instead of stdout; other workers' output is untouched.

    Ray 2.60 prints them from a thread of its own through
    ``ray._private.worker.print_to_stdstream``, even with ``log_to_driver=False``, and has
    no setting for it; the printer is wrapped (once). Without it they flood the console.
    """
    from ray._private import worker

    original = worker.print_to_stdstream
    if getattr(original, "_tunetrain", False):
        return

    def print_to_stdstream(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            for line in data.get("lines", []):
                logger.warning(line)
        else:
            original(data, ignore_prefix)

    print_to_stdstream._tunetrain = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_to_stdstream


# -- Ray Tune ----------------------------------------------------------------------------


def restore_tuner(path: str, trainable: Any, *, param_space: Any, tune_config: Any, run_config: Any) -> Any:
    """``Tuner.restore`` of a sweep folder, with this run's TuneConfig and RunConfig.

    Tune restores the trials, the searcher's state and its counters from the folder, but the
    scheduler, stopper and callbacks as it pickled them when the sweep started; Ray 2.60's
    ``Tuner.restore`` takes no new ones, so they are set on its private ``_local_tuner``
    (``_tune_config``, ``_run_config``). Without it a resumed sweep records nothing (its
    callback would be the pickled one, without the recorder).
    """
    from ray import tune

    tuner = tune.Tuner.restore(
        path, trainable, param_space=param_space, resume_unfinished=True, resume_errored=False, restart_errored=False
    )
    local = tuner._local_tuner
    if local is None:
        raise RuntimeError("Tuner.restore gave a tuner without _local_tuner (Ray Client?): cannot resume here")
    local._tune_config, local._run_config = tune_config, run_config
    return tuner


def resumed_search(searcher: Any, num_samples: int) -> Any:
    """Tune's wrapper of a searcher (as ``Tuner`` builds it), whose restored count of trials
    to run becomes ``num_samples`` (a resumed sweep may be told to run more).

    Ray 2.60: ``SearchGenerator.set_state`` restores ``_total_samples`` and ``_finished``;
    they are raised after it. Without it ``tunetrain resume --num-samples N`` runs no more
    trials than the sweep started with.
    """
    from ray.tune.search import SearchGenerator

    class ResumedSearch(SearchGenerator):
        def set_state(self, state: dict[str, Any]) -> None:
            super().set_state(state)
            if self._total_samples < num_samples:
                self._total_samples, self._finished = num_samples, False

    return ResumedSearch(searcher)


def stop_before_start(controller: Any, trial: Any) -> None:
    """Stop a trial that never started (a budget refused it), from a scheduler's
    ``choose_trial_to_run``.

    Ray 2.60: the controller's ``stop_trial`` and the trial's ``init_local_path`` (Tune's
    result table at the end needs every trial's folder; without it the sweep ends with
    FileNotFoundError once a trial was refused).
    """
    trial.init_local_path()
    controller.stop_trial(trial)


class RecordsExploits:
    """Mixin for Ray's PBT/PB2: calls ``self.exploited(trial, donor, old_config)`` after each
    exploit (the subclass records it).

    Ray 2.60: PBT clones a donor in its private ``_exploit(tune_controller, trial,
    trial_to_clone)``, the only place where recipient, donor and the new config meet; the
    mutated keys are its ``_hyperparam_mutations`` (PB2: ``_hyperparam_bounds``). Without it
    a PBT sweep's runs say nothing of their lineage (docs/schedulers.md).
    """

    def _exploit(self, tune_controller: Any, trial: Any, trial_to_clone: Any) -> None:
        old = dict(trial.config)
        before = self.before_exploit(trial, trial_to_clone)
        super()._exploit(tune_controller, trial, trial_to_clone)  # type: ignore[misc]
        self.exploited(trial, trial_to_clone, old, before)

    def mutated_space(self) -> Mapping[str, Any]:
        """The dimensions PBT/PB2 may change."""
        return getattr(self, "_hyperparam_mutations", None) or getattr(self, "_hyperparam_bounds", {})

    def before_exploit(self, trial: Any, donor: Any) -> Any:
        return None

    def exploited(self, trial: Any, donor: Any, old_config: dict[str, Any], before: Any) -> None:
        raise NotImplementedError


def read_tune_checkpoints(sweep_dir: str) -> dict[str, str | None]:
    """Trial id -> the latest checkpoint that Tune's newest saved experiment state of the
    sweep names (what Tune restores the trial from); {} when there is no saved state."""
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    state_path = _find_newest_experiment_checkpoint(sweep_dir)
    if state_path is None:
        return {}
    found: dict[str, str | None] = {}
    for trial_json, metadata_json in json.loads(Path(state_path).read_text())["trial_data"]:
        manager: Any = _TrainingRunMetadata.from_json_state(metadata_json).checkpoint_manager
        latest = manager.latest_checkpoint_result
        found[str(json.loads(trial_json)["trial_id"])] = latest.checkpoint.path if latest is not None else None
    return found


def retarget_tune_checkpoints(
    sweep_dir: str, choose: Callable[[str, str], tuple[str, int] | None]
) -> list[tuple[str, str, tuple[str, int] | None]]:
    """Rewrite Tune's newest saved experiment state so that no trial goes on from a
    checkpoint that is gone: for each trial whose latest checkpoint is missing on disk,
    ``choose(trial_id, missing_path)`` gives (path, step) of the checkpoint to go on from, or
    None to start again (or raises LookupError to leave the trial alone). Returns (trial id,
    missing path, choice) per trial changed.

    Ray 2.60's Tune saves its state at most once a second while deleting old checkpoints as
    new ones arrive; a sweep killed in between leaves a state naming a deleted checkpoint,
    and Tune then fails that trial ("Could not recover from checkpoint as it does not exist
    on storage anymore"; ray-project/ray#29099's fallback went with the old persistence
    code). The state is Tune's own JSON, read and written with Tune's private codecs
    (``_loads_with_cloudpickle``, ``TuneFunctionEncoder``), its ``_TrainingRunMetadata``
    and its checkpoint manager's ``_checkpoint_results`` / ``_latest_checkpoint_result``.
    """
    from ray import tune
    from ray.train._internal.session import _TrainingResult
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
    from ray.tune.trainable.metadata import _TrainingRunMetadata
    from ray.tune.utils.serialization import TuneFunctionEncoder, _loads_with_cloudpickle

    state_path = _find_newest_experiment_checkpoint(sweep_dir)
    if state_path is None:
        return []
    state = json.loads(Path(state_path).read_text())
    changed: list[tuple[str, str, tuple[str, int] | None]] = []
    for entry in state["trial_data"]:
        trial_json, metadata_json = entry
        trial_state = _loads_with_cloudpickle(trial_json)
        metadata = _TrainingRunMetadata.from_json_state(metadata_json)
        manager: Any = metadata.checkpoint_manager
        latest: Any = manager.latest_checkpoint_result
        if latest is None or os.path.isdir(latest.checkpoint.path):
            continue
        trial_id = str(trial_state["trial_id"])
        try:
            choice = choose(trial_id, latest.checkpoint.path)
        except LookupError:
            continue
        manager._checkpoint_results = [r for r in manager._checkpoint_results if os.path.isdir(r.checkpoint.path)]
        if choice is not None:
            path, step = choice
            # Tune resumes the trial's iteration count from these metrics, and names its next
            # checkpoint after this one.
            result = _TrainingResult(
                checkpoint=tune.Checkpoint(path), metrics={**latest.metrics, "training_iteration": step}
            )
            manager._latest_checkpoint_result = result
            if all(r.checkpoint.path != path for r in manager._checkpoint_results):
                manager._checkpoint_results.append(result)
            trial_state["storage"].current_checkpoint_index = int(os.path.basename(path).rsplit("_", 1)[1])
        else:
            manager._latest_checkpoint_result = None
        changed.append((trial_id, latest.checkpoint.path, choice))
        entry[0] = json.dumps(trial_state, indent=2, cls=TuneFunctionEncoder)
        entry[1] = metadata.get_json_state()
    if changed:
        temporary = state_path + ".tunetrain"
        Path(temporary).write_text(json.dumps(state, indent=2, cls=TuneFunctionEncoder))
        os.replace(temporary, state_path)
    return changed


# -- Ray Train (V2) --------------------------------------------------------------------------


def tune_session() -> Any:
    """The Ray Tune function session of the trial running in this process.

    Ray 2.60: ``ray.train._internal.session.get_session`` (``ray.tune.get_context`` has no
    ``report`` that takes Train's arguments, nor ``loaded_checkpoint``). Without it
    single-worker trials cannot run in process.
    """
    from ray.train._internal.session import get_session

    session = get_session()
    if session is None:
        raise RuntimeError("no Ray Tune session: this runs inside a Ray Tune trial only")
    return session


@contextlib.contextmanager
def train_api_in_tune_function(session: Any) -> Iterator[None]:
    """While inside, ``ray.train.report/get_context/get_checkpoint`` work in a Tune function.

    Ray 2.60 refuses them there (it checks that the session's ``world_rank`` is None) to
    steer users to ``ray.tune.*``; the train loop is written for Ray Train, so the session
    has rank 0 meanwhile, as on a one-worker TorchTrainer. Without it an in-process trial
    fails at its first ``ray.train.report``.
    """
    session.world_rank = 0
    try:
        yield
    finally:
        session.world_rank = None


def train_fn_utils_base() -> type:
    """Train V2's local-mode utilities class (``ray.train.report`` and friends outside a
    TorchTrainer), for tunetrain's bridge to Tune to subclass.

    Ray 2.60: ``ray.train.v2._internal.execution.train_fn_utils.LocalTrainFnUtils``.
    """
    from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils

    return LocalTrainFnUtils


def get_train_fn_utils() -> Any:
    """The utilities behind ``ray.train.*`` in this process (Ray 2.60, Train V2 internal)."""
    from ray.train.v2._internal.execution import train_fn_utils

    return train_fn_utils.get_train_fn_utils()


def set_train_fn_utils(utils: Any) -> None:
    """Replace the utilities behind ``ray.train.*`` in this process (None: unset).

    Ray 2.60, Train V2 internal: how an in-process trial's reports reach Tune, and how a new
    Train run starts from the checkpoint Tune restored its trial from (Train V2 dropped
    ``resume_from_checkpoint``). Without it: no in-process trials, and PBT exploits and
    resumed multi-worker trials would start from scratch.
    """
    from ray.train.v2._internal.execution import train_fn_utils

    train_fn_utils.set_train_fn_utils(utils)


def abort_train_run(controller: Any, *, timeout_s: float = 30.0) -> None:
    """Abort a Train V2 run through its controller actor (best effort).

    Ray 2.60: the controller actor's ``abort`` method (not a public API). Used when Tune
    stopped the trial: left to die with the trial's process, Ray 2.60's placement-group
    cleaner sometimes keeps the group, and its CPUs stay taken for the rest of the sweep.
    """
    import ray

    with contextlib.suppress(Exception):  # the trial's process is going away anyway
        ray.get(controller.abort.remote(), timeout=timeout_s)


# -- MLflow ------------------------------------------------------------------------------------


def sql_metric_points(
    client: Any, run_ids: Sequence[str], keys: Sequence[str]
) -> list[tuple[str, str, int, float, float]] | None:
    """Every point of ``keys`` of ``run_ids`` from a SQL tracking store (sqlite, PostgreSQL,
    MySQL) as (run_id, metric, step, value, timestamp in s), one SELECT per 500 runs; None
    when the client's store is not a SQL store (the caller then uses the public API).

    MLflow 3.17: the client's ``_tracking_client.store``, its ``ManagedSessionMaker`` and
    the ``SqlMetric`` table model. ``get_metric_history_bulk`` builds a Metric object per
    point and took 8.6 s for 300,000 points where the SELECT takes 0.9 s
    (benchmarks/analysis_load.py). Without it analysis and resumes are that much slower.
    """
    import math

    store = client._tracking_client.store
    if not hasattr(store, "ManagedSessionMaker"):
        return None
    import sqlalchemy as sa
    from mlflow.store.tracking.dbmodels.models import SqlMetric

    rows: list[tuple[str, str, int, float, float]] = []
    for start in range(0, len(run_ids), 500):
        query: Any = sa.select(
            SqlMetric.run_uuid, SqlMetric.key, SqlMetric.step, SqlMetric.value, SqlMetric.timestamp, SqlMetric.is_nan
        ).where(SqlMetric.key.in_(list(keys)), SqlMetric.run_uuid.in_(list(run_ids[start : start + 500])))
        with store.ManagedSessionMaker() as session:
            # MLflow stores NaN as 0 with is_nan set (its Metric entity reads it back the same way).
            rows.extend(
                (run, key, step, math.nan if is_nan else value, ts / 1000)
                for run, key, step, value, ts, is_nan in session.execute(query)
            )
    return rows


def sql_log_metrics(client: Any, run_id: str, metrics: Sequence[Any]) -> bool:
    """Write ``metrics`` (MLflow ``Metric`` entities, at most 1,000) to the run the way the
    SQL store's ``log_batch`` does, in one transaction of two executemany INSERTs and an
    UPDATE per changed latest value; False, having written nothing, when the client's store
    is not a SQL store, the run is not active or does not exist, or a point is already in
    the run: the caller then calls ``log_batch``, which raises MLflow's own error or sorts
    the duplicates out.

    Why not ``log_batch``: it builds an ORM object per point and flushes them one by one
    through SQLAlchemy's unit of work, about 0.2 ms of CPU per point in the sweep's driver,
    beside the trials on the same CPUs (2 trials x 100 reports/s x 3 metrics: about 2 s of
    a 20 s sweep, most of the 1.08x tracking on/off of benchmarks/tracking.py). The rows are
    MLflow's own: the same validation (``_validate_metric``) and NaN/inf sanitising
    (``sanitize_metric_value``), the ``metrics`` table's rows deduplicated on its primary
    key, and each key's ``latest_metrics`` row kept at the highest (step, timestamp, value)
    as ``_update_latest_metrics_if_necessary`` does; metrics with a ``model_id`` (logged
    models' metrics, which MLflow also writes elsewhere) go through ``log_batch``.

    MLflow 3.17: the client's ``_tracking_client.store``, its ``ManagedSessionMaker``, the
    ``SqlRun``, ``SqlMetric`` and ``SqlLatestMetric`` table models and
    ``mlflow.utils.validation._validate_metric``. tests/test_internals.py checks that the
    rows equal what ``log_batch`` writes for the same points.
    """
    store = client._tracking_client.store
    if not metrics or not hasattr(store, "ManagedSessionMaker") or any(getattr(m, "model_id", None) for m in metrics):
        return False
    import sqlalchemy as sa
    from mlflow.entities import LifecycleStage
    from mlflow.exceptions import MlflowException
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlMetric, SqlRun
    from mlflow.utils.validation import _validate_metric

    rows: dict[tuple[Any, ...], dict[str, Any]] = {}
    for m in metrics:
        _validate_metric(m.key, m.value, m.timestamp, m.step)
        is_nan, value = store.sanitize_metric_value(m.value)
        row = {"run_uuid": run_id, "key": m.key, "value": value, "timestamp": m.timestamp, "step": m.step}
        rows.setdefault((m.key, m.timestamp, m.step, value, is_nan), {**row, "is_nan": is_nan})
    latest: dict[str, dict[str, Any]] = {}

    def order(row: Mapping[str, Any]) -> tuple[Any, ...]:  # MLflow's "more recent" in latest_metrics
        return row["step"], row["timestamp"], row["value"]

    for row in rows.values():
        if row["key"] not in latest or order(row) > order(latest[row["key"]]):
            latest[row["key"]] = row
    try:
        with store.ManagedSessionMaker(read_only=False) as session:
            run = session.execute(sa.select(SqlRun.lifecycle_stage).where(SqlRun.run_uuid == run_id)).first()
            if run is None or run[0] != LifecycleStage.ACTIVE:
                return False
            session.execute(sa.insert(SqlMetric), list(rows.values()))
            table = SqlLatestMetric.__table__
            held_rows = session.execute(
                sa.select(table.c.key, table.c.step, table.c.timestamp, table.c.value)
                .where(table.c.run_uuid == run_id, table.c.key.in_(sorted(latest)))
                .order_by(table.c.key)
                .with_for_update()
            ).all()
            held = {key: (step, timestamp, value) for key, step, timestamp, value in held_rows}
            new = [row for key, row in latest.items() if key not in held]
            if new:
                session.execute(sa.insert(table), new)
            for key, row in latest.items():
                if key in held and order(row) > held[key]:
                    session.execute(
                        sa.update(table)
                        .where(table.c.run_uuid == run_id, table.c.key == key)
                        .values(value=row["value"], step=row["step"], timestamp=row["timestamp"], is_nan=row["is_nan"])
                    )
    except MlflowException as exc:
        if isinstance(exc.__cause__, sa.exc.IntegrityError):
            return False  # rolled back: log_batch writes the points not yet in the run
        raise
    return True


def mlflow_metric_key_problem(key: str) -> str | None:
    """Why MLflow would refuse ``key`` as a metric name (its own message), or None when it
    takes it. MLflow checks a name only inside ``log_batch``, where one bad key fails the
    whole batch; the sweep checks each key once, at the report that first brings it.

    MLflow 3.17: ``mlflow.utils.validation._validate_metric_name`` (the characters and the
    path rule) and ``MAX_ENTITY_KEY_LENGTH`` (250, the store's column). tests/test_internals.py
    checks a refused and an accepted key.
    """
    from mlflow.exceptions import MlflowException
    from mlflow.utils.validation import MAX_ENTITY_KEY_LENGTH, _validate_metric_name

    if len(key) > MAX_ENTITY_KEY_LENGTH:
        return f"Names may be at most {MAX_ENTITY_KEY_LENGTH} characters long (this one has {len(key)})."
    try:
        _validate_metric_name(key, "metrics")
    except MlflowException as exc:
        return str(exc.message).split(" supplied: ", 1)[-1]
    return None


def sqlite_experiment_stage(path: str | Path, name: str) -> str | None:
    """The lifecycle stage (``active``, ``deleted``) of the experiment ``name`` in the MLflow
    sqlite store at ``path``, None when it has none (or is no MLflow store yet), read with
    the stdlib in read-only mode: before Ray starts, in milliseconds, where opening the store
    through MLflow costs about 0.7 s (SQLAlchemy's engine, the schema check) and would
    create a missing file.

    MLflow 3.17: the ``experiments`` table's ``name`` and ``lifecycle_stage`` columns (its
    SQLAlchemy model ``SqlExperiment``). tests/test_internals.py checks it against an
    experiment MLflow created and deleted.
    """
    import sqlite3

    try:
        connection = sqlite3.connect(f"file:{Path(path).resolve()}?mode=ro", uri=True, timeout=5)
    except sqlite3.Error:
        return None
    try:
        row = connection.execute("SELECT lifecycle_stage FROM experiments WHERE name = ?", (name,)).fetchone()
    except sqlite3.Error:  # not an MLflow store (yet)
        return None
    finally:
        connection.close()
    return str(row[0]) if row else None


def picklable_sampler(sampler: Any) -> Any:
    """``sampler``, picklable if it is one of Optuna 5.1's genetic samplers (NSGA-II/III):
    their base class (optuna/samplers/_ga/_base.py, 5.1.0) holds a ``threading.Lock`` in the
    private ``_thread_lock``, and Ray Tune's Tuner pickles the search algorithm into tuner.pkl
    ("cannot pickle '_thread.lock' object"). The lock guards a cache against other threads;
    Tune calls its searcher from its one controller thread, so a no-op context stands in."""
    if type(sampler).__module__.startswith("optuna.") and hasattr(sampler, "_thread_lock"):
        sampler._thread_lock = contextlib.nullcontext()
    return sampler
