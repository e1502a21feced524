"""The seam's uses of MLflow's private names (see :mod:`tunetrain._internals`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

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
