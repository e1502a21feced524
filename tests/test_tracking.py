from __future__ import annotations

import io
import time
from pathlib import Path
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from tunetrain.tracking import SweepRecorder, default_tracking_uri, open_in_background, schema


def recorder(tmp_path: Path, **kwargs: object) -> SweepRecorder:
    return SweepRecorder(tracking_uri=default_tracking_uri(tmp_path), experiment_name="exp", **kwargs)  # type: ignore[arg-type]


def test_default_store_is_an_explicit_sqlite_file_in_the_folder(tmp_path: Path) -> None:
    assert default_tracking_uri(tmp_path) == f"sqlite:///{tmp_path.resolve() / 'mlflow.db'}"


def test_a_store_opened_in_the_background_is_ready_for_the_recorder(tmp_path: Path) -> None:
    uri = default_tracking_uri(tmp_path)
    opening = open_in_background(uri)
    assert opening is not None
    opening.join(timeout=120)
    assert not opening.is_alive()
    # The new sqlite store exists with MLflow's schema (its default experiment), and the
    # recorder writes into it as into any store.
    assert [e.name for e in MlflowClient(uri).search_experiments()] == ["Default"]
    rec = recorder(tmp_path)
    parent = rec.start_sweep(run_name="sweep", params={}, tags={})
    rec.close()
    assert parent is not None and MlflowClient(uri).get_run(parent).info.run_name == "sweep"
    # Nothing but sqlite is opened ahead (a server that does not answer must not hold the
    # sweep up); a store that cannot be opened is left to the recorder, which reports it: the
    # thread ends quietly.
    assert open_in_background("http://127.0.0.1:9") is None
    assert open_in_background("postgresql://user@127.0.0.1:9/mlflow") is None
    (tmp_path / "file").write_text("")
    failing = open_in_background(f"sqlite:///{tmp_path / 'file' / 'mlflow.db'}")
    assert failing is not None
    failing.join(timeout=120)
    assert not failing.is_alive()


def test_sweep_and_trials_become_linked_parent_and_child_runs(tmp_path: Path) -> None:
    rec = recorder(tmp_path)
    parent = rec.start_sweep(run_name="sweep", params={"space.lr": "loguniform"}, tags={"tunetrain.metric": "loss"})
    now = time.time()
    rec.start_trial("trial_0000", params={"lr": 0.1, "opt.beta": 0.9, "tunetrain.seed": 7}, tags={}, start_time=now)
    for step in (1, 2, 3):
        rec.log_metrics("trial_0000", step=step, metrics={"loss": 1.0 / step, "acc": step / 10}, timestamp=now)
    rec.end_trial("trial_0000", status="stopped_early", end_time=now + 1, tags={"tunetrain.iterations": 3})
    rec.end_sweep(
        status="FINISHED", best_metrics={"best_loss": 1 / 3}, tags={}, best_trial="trial_0000", best_config={"lr": 0.1}
    )
    rec.flush()
    child_id = rec.run_id("trial_0000")
    assert child_id is not None and parent is not None
    rec.close()

    client = MlflowClient(default_tracking_uri(tmp_path))
    child = client.get_run(child_id)
    # The child points at the parent and carries every param, the seed and its status.
    assert child.data.tags[schema.PARENT_TAG] == parent
    assert child.data.params == {"lr": "0.1", "opt.beta": "0.9", "tunetrain.seed": "7"}
    assert child.data.tags[schema.STATUS_TAG] == "stopped_early"
    assert child.info.status == "FINISHED"
    # Every step of every metric is kept.
    assert [m.step for m in client.get_metric_history(child_id, "loss")] == [1, 2, 3]
    assert [m.value for m in client.get_metric_history(child_id, "acc")] == [0.1, 0.2, 0.3]
    # The parent ends with the best trial's run id and metric.
    parent_run = client.get_run(parent)
    assert parent_run.data.tags["tunetrain.best_run_id"] == child_id
    assert parent_run.data.metrics == {"best_loss": pytest.approx(1 / 3)}
    assert parent_run.info.status == "FINISHED"


def metric_writes(rec: SweepRecorder, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every batch of metric points the recorder writes, as "sql:N" (the SQL store's direct
    write, _internals.sql_log_metrics) or "log_batch:N" (MLflow's call)."""
    from tunetrain import _internals

    calls: list[str] = []
    direct, log_batch = _internals.sql_log_metrics, rec._client.log_batch

    def sql(client: Any, run_id: str, metrics: Any) -> bool:
        written = direct(client, run_id, metrics)
        if written:
            calls.append(f"sql:{len(metrics)}")
        return written

    def batch(run_id: str, metrics: Any = (), **kwargs: Any) -> None:
        if metrics:
            calls.append(f"log_batch:{len(metrics)}")
        log_batch(run_id, metrics=metrics, **kwargs)

    monkeypatch.setattr(_internals, "sql_log_metrics", sql)
    monkeypatch.setattr(rec._client, "log_batch", batch)
    return calls


def test_metrics_go_out_in_batches_never_one_call_per_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = recorder(tmp_path)
    rec.start_sweep(run_name="sweep", params={}, tags={})
    calls = metric_writes(rec, monkeypatch)
    monkeypatch.setattr(rec._client, "log_metric", lambda *a, **k: calls.append("log_metric"))
    rec.start_trial("t", params={}, tags={}, start_time=time.time())
    rec.log_metrics("t", step=1, metrics={f"m{i}": float(i) for i in range(20)}, timestamp=time.time())
    rec.flush()
    rec.close()
    # Twenty metric keys of one report: one batch (the SQL write), no log_metric call.
    assert calls == ["sql:20"]


def test_an_unreachable_store_is_reported_once_and_never_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
    errors = io.StringIO()
    # Port 9 (discard) on loopback: nothing listens there.
    rec = SweepRecorder(
        tracking_uri="http://127.0.0.1:9", experiment_name="exp", error_stream=errors, drain_timeout_s=1
    )
    # Every call returns normally although nothing reaches MLflow.
    assert rec.start_sweep(run_name="sweep", params={}, tags={}) is None
    rec.start_trial("t", params={}, tags={}, start_time=time.time())
    rec.log_metrics("t", step=1, metrics={"loss": 1.0}, timestamp=time.time())
    rec.flush()
    rec.close()
    # One clear message, however many calls failed: the store is unreachable, records are kept.
    assert errors.getvalue().count("is unreachable") == 1
    assert rec.unsent >= 3


def test_metric_points_of_many_reports_go_out_in_few_batches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = recorder(tmp_path)
    rec.start_sweep(run_name="sweep", params={}, tags={})
    now = time.time()
    rec.start_trial("t", params={"lr": 0.1}, tags={}, start_time=now)
    rec.flush()
    calls = metric_writes(rec, monkeypatch)
    # Queued faster than the flush interval, as a busy trial reports.
    for step in range(1, 301):
        rec.log_metrics("t", step=step, metrics={"loss": 1.0 / step, "acc": step / 300}, timestamp=now)
    rec.flush()
    run_id = rec.run_id("t")
    assert run_id is not None
    rec.close()
    # 600 points went out in a handful of batches (MLflow allows 1,000 per call), not 300.
    batches = [int(call.split(":")[1]) for call in calls]
    assert sum(batches) == 600 and len(batches) <= 5, calls
    # ... and none was lost or doubled.
    client = MlflowClient(default_tracking_uri(tmp_path))
    assert [m.step for m in client.get_metric_history(run_id, "loss")] == list(range(1, 301))


def test_sweep_store_reads_back_every_point_as_mlflows_client_does(tmp_path: Path) -> None:
    from tunetrain.tracking import SweepStore

    uri = default_tracking_uri(tmp_path)
    recorder = SweepRecorder(tracking_uri=uri, experiment_name="e")
    recorder.start_sweep(run_name="s", params={}, tags={"tunetrain.sweep_name": "s"})
    recorder.start_trial("t0", params={"lr": 0.1}, tags={"tunetrain.trial_index": 0}, start_time=time.time())
    for step, value in enumerate([1.0, float("nan"), 0.5], start=1):
        recorder.log_metrics("t0", step=step, metrics={"loss": value}, timestamp=time.time())
    recorder.end_trial("t0", status="diverged", end_time=time.time(), tags={})
    recorder.close()
    store = SweepStore(uri)
    trials = store.trials(store.sweep("s"))
    history = store.histories([t.run_id for t in trials], ["loss"]).sort_values("step")
    expected = MlflowClient(uri).get_metric_history(trials[0].run_id, "loss")
    # The same points as MLflow's own client, NaN included (MLflow stores it as 0 + a flag).
    assert [str(v) for v in history["value"]] == [str(m.value) for m in sorted(expected, key=lambda m: m.step)]
    assert list(history["value"].isna()) == [False, True, False]


def test_journal_progress_acknowledges_in_order_and_nothing_after_a_write_given_up() -> None:
    from tunetrain.tracking.journal import JournalProgress, JournalState

    progress = JournalProgress()
    first, second, third = progress.emitted(), progress.emitted(), progress.emitted()
    progress.written(first, done=True)
    assert progress.to_ack() == 1 and progress.to_ack() is None  # said once
    progress.written(second, done=False)  # refused: kept for sync
    progress.written(third, done=True)  # written, but after one given up: not acknowledged
    assert progress.to_ack() is None and progress.unsent == 2
    resumed = JournalProgress()
    resumed.resumed(JournalState(entries=[{"seq": 1, "op": "x"}, {"seq": 2, "op": "y"}], acked=1))
    assert (resumed.seq, resumed.applied, resumed.unsent) == (2, 1, 1)
    resumed.replaying(2)
    assert resumed.may_exist(2) and not resumed.may_exist(3)
