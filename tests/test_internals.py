"""Each wrapper of tunetrain/_internals.py against the pinned Ray and MLflow: an upgrade that
moves or changes one of their private APIs fails here first, in the test named after it."""

from __future__ import annotations

import io
import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from tunetrain import _internals


@pytest.fixture()
def ray_up(ray_cluster: None, tmp_path: Path) -> None:
    """The session's embedded Ray, started as a sweep starts it."""
    from tunetrain.cluster import connect

    connect(None, log_dir=tmp_path / "logs")


def _checkpointing(config: dict[str, Any]) -> None:
    """A Tune function that reports 3 steps, each with a checkpoint."""
    import ray.train
    from ray import tune

    for step in range(3):
        with tempfile.TemporaryDirectory() as folder:
            Path(folder, "step.txt").write_text(str(step))
            tune.report({"loss": 1.0 / (step + 1)}, checkpoint=ray.train.Checkpoint.from_directory(folder))


def _tune_run(storage: Path, name: str = "seam", num_to_keep: int | None = None) -> Any:
    from ray import tune

    tuner = tune.Tuner(
        _checkpointing,
        run_config=tune.RunConfig(
            name=name,
            storage_path=str(storage),
            verbose=0,
            checkpoint_config=tune.CheckpointConfig(num_to_keep=num_to_keep),
        ),
    )
    return tuner.fit()


def test_ray_logs_dir_names_the_connected_sessions_log_folder(ray_up: None) -> None:
    path = Path(_internals.ray_logs_dir())
    assert path.name == "logs" and path.is_dir()
    assert any(path.glob("raylet*")), sorted(p.name for p in path.iterdir())[:10]


def test_enable_ray_token_auth_turns_token_mode_on_in_a_fresh_process(tmp_path: Path) -> None:
    code = (
        "import os; from tunetrain import _internals; "
        "os.environ.pop('RAY_AUTH_MODE', None); "
        "assert _internals.enable_ray_token_auth() is True; "
        "print(os.environ.get('RAY_AUTH_MODE'))"
    )
    env = {k: v for k, v in os.environ.items() if k != "RAY_AUTH_MODE"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "token"


def test_route_raylet_messages_sends_the_raylets_lines_to_the_logger_and_the_rest_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import inspect

    from ray._private import worker

    assert list(inspect.signature(worker.print_to_stdstream).parameters)[:2] == ["data", "ignore_prefix"]
    passed_on: list[dict[str, Any]] = []
    monkeypatch.setattr(worker, "print_to_stdstream", lambda data, ignore_prefix: passed_on.append(data))
    stream = io.StringIO()
    logger = logging.getLogger("tunetrain.test.raylet")
    logger.addHandler(logging.StreamHandler(stream))
    logger.propagate = False
    _internals.route_raylet_messages(logger)
    wrapped = worker.print_to_stdstream
    _internals.route_raylet_messages(logger)
    assert worker.print_to_stdstream is wrapped  # wrapped once only
    worker.print_to_stdstream({"pid": "raylet", "lines": ["2 PYTHON worker processes have been started"]}, False)
    assert "2 PYTHON worker processes have been started" in stream.getvalue() and passed_on == []
    worker.print_to_stdstream({"pid": 1234, "lines": ["a worker's own line"]}, True)
    assert passed_on == [{"pid": 1234, "lines": ["a worker's own line"]}]


def test_resumed_search_raises_the_restored_sample_count(ray_up: None) -> None:
    from ray.tune.search import BasicVariantGenerator, ConcurrencyLimiter
    from ray.tune.search.optuna import OptunaSearch

    searcher = ConcurrencyLimiter(OptunaSearch(metric="loss", mode="min"), max_concurrent=1)
    search = _internals.resumed_search(searcher, 10)
    state = {"counter": 4, "total_samples": 4, "finished": True, "experiment": None}
    search.set_state(state)
    assert search._total_samples == 10 and search._finished is False
    search.set_state({**state, "total_samples": 12})
    assert search._total_samples == 12  # never lowered
    assert not isinstance(search, BasicVariantGenerator)


def test_stop_before_start_uses_tunes_trial_and_controller_methods() -> None:
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment import Trial

    assert callable(Trial.init_local_path) and callable(TuneController.stop_trial)
    calls: list[str] = []

    class FakeTrial:
        def init_local_path(self) -> None:
            calls.append("init_local_path")

    class FakeController:
        def stop_trial(self, trial: Any) -> None:
            calls.append("stop_trial")

    _internals.stop_before_start(FakeController(), FakeTrial())
    assert calls == ["init_local_path", "stop_trial"]


def test_host_oom_fails_the_trial_passes_rays_memory_kill_on_as_an_actor_death() -> None:
    from types import SimpleNamespace

    from ray.air.execution._internal.actor_manager import RayActorManager
    from ray.exceptions import OutOfMemoryError, RayActorError

    _internals.host_oom_fails_the_trial()
    _internals.host_oom_fails_the_trial()  # idempotent: wrapped once
    seen: list[BaseException] = []
    actor = SimpleNamespace(actor_id="a1", _on_error=lambda actor, exc: seen.append(exc))
    task = SimpleNamespace(_tracked_actor=actor, _on_error=None)
    manager: Any = SimpleNamespace(_failed_actor_ids=set(), _cleanup_actor=lambda tracked_actor: None)
    failed: Any = RayActorManager._actor_task_failed
    failed(manager, task, OutOfMemoryError("1 worker(s) were killed due to ..."))
    assert len(seen) == 1 and isinstance(seen[0], RayActorError)
    assert str(seen[0]).startswith("OutOfMemoryError: 1 worker(s) were killed") and manager._failed_actor_ids == {"a1"}
    with pytest.raises(RuntimeError, match="Caught unexpected exception"):  # anything else: as Ray does
        failed(manager, task, ValueError("x"))


def test_records_exploits_hooks_pbts_private_exploit_and_reads_its_mutations() -> None:
    import inspect

    from ray import tune
    from ray.tune.schedulers import PopulationBasedTraining

    assert list(inspect.signature(PopulationBasedTraining._exploit).parameters) == [
        "self",
        "tune_controller",
        "trial",
        "trial_to_clone",
    ]
    seen: list[Any] = []

    class Hooked(_internals.ExploitHooks, PopulationBasedTraining):
        def exploited(self, trial: Any, donor: Any, old_config: dict[str, Any], before: Any) -> None:
            seen.append((trial, donor, old_config))

    pbt = Hooked(metric="loss", mode="min", hyperparam_mutations={"lr": tune.uniform(0, 1)})
    assert set(pbt.mutated_space()) == {"lr"}


def test_read_and_retarget_tune_checkpoints_in_tunes_saved_state(ray_up: None, tmp_path: Path) -> None:
    _tune_run(tmp_path, num_to_keep=1)
    sweep_dir = str(tmp_path / "seam")
    found = _internals.read_tune_checkpoints(sweep_dir)
    ((trial_id, latest),) = found.items()
    assert latest is not None and os.path.isdir(latest) and latest.endswith("checkpoint_000002")
    # Nothing missing: nothing changed.
    assert _internals.retarget_tune_checkpoints(sweep_dir, lambda tid, path: None) == []
    # The latest gone, the trial goes on from another folder (a copy here) at its step.
    kept = tmp_path / "kept" / "checkpoint_000001"
    kept.mkdir(parents=True)
    Path(latest, "step.txt").rename(kept / "step.txt")
    os.rmdir(latest)
    changed = _internals.retarget_tune_checkpoints(sweep_dir, lambda tid, path: (str(kept), 2))
    assert changed == [(trial_id, latest, (str(kept), 2))]
    assert _internals.read_tune_checkpoints(sweep_dir) == {trial_id: str(kept)}
    # Gone too: it starts again; a trial left alone (LookupError) is not changed.
    os.rename(kept, tmp_path / "elsewhere")
    assert _internals.retarget_tune_checkpoints(sweep_dir, lambda tid, path: (_ for _ in ()).throw(LookupError)) == []
    assert _internals.retarget_tune_checkpoints(sweep_dir, lambda tid, path: None) == [(trial_id, str(kept), None)]
    assert _internals.read_tune_checkpoints(sweep_dir) == {trial_id: None}


def test_restore_tuner_takes_this_runs_tune_and_run_config(ray_up: None, tmp_path: Path) -> None:
    from ray import tune

    _tune_run(tmp_path, name="restorable")
    tune_config = tune.TuneConfig(num_samples=1)
    run_config = tune.RunConfig(name="restorable", storage_path=str(tmp_path), verbose=0)
    tuner = _internals.restore_tuner(
        str(tmp_path / "restorable"), _checkpointing, param_space={}, tune_config=tune_config, run_config=run_config
    )
    local = tuner._local_tuner
    assert local._tune_config is tune_config and local._run_config is run_config


def _in_process_probe(config: dict[str, Any]) -> None:
    """A Tune function using the in-process runner's wrappers as run_trial_in_process does."""
    import ray.train
    from ray import tune

    session = _internals.tune_session()
    base = _internals.train_fn_utils_base()

    class Bridge(base):  # type: ignore[misc,valid-type]
        def report(self, metrics: dict[str, Any], checkpoint: Any = None, *args: Any, **kwargs: Any) -> None:
            session.report(metrics, checkpoint=checkpoint)

    _internals.set_train_fn_utils(Bridge(experiment_name="probe"))
    try:
        assert isinstance(_internals.get_train_fn_utils(), Bridge)
        with _internals.train_api_in_tune_function(session):
            rank = ray.train.get_context().get_world_rank()
            ray.train.report({"rank": rank, "loss": 0.5})
        assert session.world_rank is None
    finally:
        _internals.set_train_fn_utils(None)
    tune.report({"rank": -1, "loss": 0.4})


def test_train_fn_utils_and_the_tune_session_run_ray_train_calls_in_a_tune_function(
    ray_up: None, tmp_path: Path
) -> None:
    from ray import tune

    ranks: list[int] = []

    class Results(tune.Callback):  # every result Tune got, in order (its own result files may be off)
        def on_trial_result(self, iteration: int, trials: list[Any], trial: Any, result: dict, **info: Any) -> None:
            ranks.append(result["rank"])

    results = tune.Tuner(
        _in_process_probe,
        run_config=tune.RunConfig(name="probe", storage_path=str(tmp_path), verbose=0, callbacks=[Results()]),
    ).fit()
    result = results[0]
    assert result.error is None, result.error
    assert ranks == [0, -1]


def test_abort_train_run_calls_train_v2s_controller_abort_and_never_raises() -> None:
    from ray.train.v2._internal.execution.controller import TrainController

    assert callable(TrainController.abort)

    class Broken:
        class abort:
            @staticmethod
            def remote() -> Any:
                raise RuntimeError("the controller is gone")

    _internals.abort_train_run(Broken(), timeout_s=1)  # no exception


def test_sql_metric_points_reads_what_mlflow_logged_and_steps_aside_for_other_stores(tmp_path: Path) -> None:
    import math

    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    run_id = client.create_run(client.create_experiment("seam")).info.run_id
    for step, value in enumerate([0.5, math.nan, 0.25]):
        client.log_metric(run_id, "loss", value, step=step, timestamp=1000 * (step + 1))
    rows = _internals.sql_metric_points(client, [run_id], ["loss"])
    assert rows is not None
    got = sorted((step, value, ts) for _, key, step, value, ts in rows if key == "loss")
    expected = sorted((m.step, m.value, m.timestamp / 1000) for m in client.get_metric_history(run_id, "loss"))
    assert [(s, ts) for s, _, ts in got] == [(s, ts) for s, _, ts in expected]
    assert got[0][1] == 0.5 and math.isnan(got[1][1]) and got[2][1] == 0.25

    class NotSql:
        class _tracking_client:
            store = object()

    assert _internals.sql_metric_points(NotSql(), [run_id], ["loss"]) is None


def test_sql_log_metrics_writes_the_rows_log_batch_writes_and_steps_aside_where_it_cannot(tmp_path: Path) -> None:
    check_sql_log_metrics({how: f"sqlite:///{tmp_path / how}.db" for how in ("log_batch", "sql")})


def check_sql_log_metrics(stores: dict[str, str]) -> None:
    """sql_log_metrics against log_batch, each on its own empty store (``stores``: the URI
    for "log_batch" and for "sql"); tests/test_postgres.py runs it on PostgreSQL."""
    import math

    import sqlalchemy as sa
    from mlflow.entities import Metric
    from mlflow.tracking import MlflowClient

    def tables(client: MlflowClient, run_id: str) -> tuple[Any, Any]:
        engine = sa.create_engine(client.tracking_uri)
        with engine.connect() as conn:
            metrics = conn.execute(
                sa.text(
                    "SELECT key, value, timestamp, step, is_nan FROM metrics WHERE run_uuid = :r ORDER BY 1, 4, 3, 2"
                ),
                {"r": run_id},
            ).all()
            latest = conn.execute(
                sa.text(
                    "SELECT key, value, timestamp, step, is_nan FROM latest_metrics WHERE run_uuid = :r ORDER BY 1"
                ),
                {"r": run_id},
            ).all()
        engine.dispose()
        return metrics, latest

    # Two batches: NaN, +-inf, a point twice in one batch, a key whose later batch has a
    # lower step (its latest value stays), one whose later batch has a higher step.
    batches = [
        [
            Metric("loss", 0.5, 1000, 0),
            Metric("loss", math.nan, 2000, 1),
            Metric("loss", 0.25, 3000, 2),
            Metric("loss", 0.25, 3000, 2),
            Metric("grad", math.inf, 1000, 5),
            Metric("acc", -math.inf, 1000, 0),
        ],
        [Metric("loss", 0.1, 4000, 3), Metric("grad", 2.0, 5000, 4), Metric("acc", 0.9, 900, 0)],
    ]
    written = {}
    for how in ("log_batch", "sql"):
        client = MlflowClient(stores[how])
        run_id = client.create_run(client.create_experiment("seam")).info.run_id
        for batch in batches:
            if how == "sql":
                assert _internals.sql_log_metrics(client, run_id, batch) is True
            else:
                client.log_batch(run_id, metrics=batch)
        written[how] = tables(client, run_id)
        assert {m.key: m.step for m in client.get_run(run_id).data._metric_objs} == {"loss": 3, "grad": 5, "acc": 0}
    assert written["sql"] == written["log_batch"]
    assert len(written["sql"][0]) == 8

    # A point already in the run: nothing written, log_batch's turn (it skips the duplicate).
    client = MlflowClient(stores["sql"])
    experiment_id = client.search_experiments(filter_string="name = 'seam'")[0].experiment_id
    run_id = client.search_runs([experiment_id])[0].info.run_id
    before = tables(client, run_id)
    assert _internals.sql_log_metrics(client, run_id, [Metric("new", 1.0, 1, 0), batches[1][0]]) is False
    assert tables(client, run_id) == before
    # A deleted run, a bad metric name: MLflow's own call raises its own error.
    client.delete_run(run_id)
    assert _internals.sql_log_metrics(client, run_id, [Metric("new", 1.0, 1, 0)]) is False
    other = client.create_run(experiment_id).info.run_id
    with pytest.raises(Exception, match="Names may only contain"):
        _internals.sql_log_metrics(client, other, [Metric("bad\nname", 1.0, 1, 0)])

    class NotSql:
        class _tracking_client:
            store = object()

    assert _internals.sql_log_metrics(NotSql(), run_id, batches[0]) is False


def test_mlflow_metric_key_problem_is_mlflows_own_rule() -> None:
    assert _internals.mlflow_metric_key_problem("val/loss") is None
    assert "Names may only contain" in (_internals.mlflow_metric_key_problem("acc@1") or "")
    assert "resolve" in (_internals.mlflow_metric_key_problem("a/../b") or "")
    assert "250" in (_internals.mlflow_metric_key_problem("k" * 251) or "")


def test_sqlite_experiment_stage_reads_mlflows_experiments_table(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    store = tmp_path / "mlflow.db"
    client = MlflowClient(f"sqlite:///{store}")
    kept, gone = client.create_experiment("kept"), client.create_experiment("gone")
    client.delete_experiment(gone)
    assert kept
    assert _internals.sqlite_experiment_stage(store, "kept") == "active"
    assert _internals.sqlite_experiment_stage(store, "gone") == "deleted"
    assert _internals.sqlite_experiment_stage(store, "never") is None
    assert _internals.sqlite_experiment_stage(tmp_path / "none.db", "kept") is None
    assert not (tmp_path / "none.db").exists()  # read-only: nothing created


def test_picklable_sampler_lets_optunas_nsga2_be_pickled_and_still_sample() -> None:
    import pickle

    import optuna

    from tunetrain import _internals

    sampler = _internals.picklable_sampler(optuna.samplers.NSGAIISampler(seed=0))
    copy = pickle.loads(pickle.dumps(sampler))
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=copy)
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), 1 - t.suggest_float("y", 0, 1)), n_trials=3)
    assert len(study.trials) == 3


def test_hyperband_bracket_sizes_are_hyperbands_own_formula() -> None:
    from ray.tune.schedulers import HyperBandScheduler

    scheduler = HyperBandScheduler(metric="loss", mode="min", max_t=27, reduction_factor=3)
    # s_max = 3 brackets of r0 = 27 * 3**-s >= 1 (s = 0..3): n0 = ceil(4 / (s + 1) * 3**s).
    assert _internals.hyperband_bracket_sizes(scheduler) == [4, 6, 12, 27]


def test_exit_after_exit_handlers_runs_them_and_skips_finalisation(tmp_path: Path) -> None:
    script = (
        "import atexit, sys\n"
        "from tunetrain import _internals\n"
        "class Loud:\n"
        "    def __del__(self): print('finalised', flush=True)\n"
        "kept = Loud()\n"
        "atexit.register(lambda: print('exit handler', flush=True))\n"
        "print('buffered', end='')\n"
        "_internals.exit_after_exit_handlers(7)\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 7
    assert done.stdout == "bufferedexit handler\n"  # flushed, the handler ran, no finalisation


def test_local_ray_address_reads_the_address_ray_start_leaves_in_rays_temporary_folder(tmp_path: Path) -> None:
    code = "from tunetrain import _internals; print(_internals.local_ray_address())"
    env = {**os.environ, "RAY_TMPDIR": str(tmp_path)}
    before = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert before.stdout.strip() == "None"
    (tmp_path / "ray").mkdir()
    (tmp_path / "ray" / "ray_current_cluster").write_text("127.0.0.1:6390\n")  # what `ray start --head` writes
    after = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert after.stdout.strip() == "127.0.0.1:6390"


def test_the_address_file_of_a_ray_started_with_its_own_temp_dir_is_in_that_folder(tmp_path: Path) -> None:
    # `ray start --head --temp-dir=X` (tunetrain up) writes X/ray_current_cluster.
    assert _internals.ray_address_file(str(tmp_path)) == str(tmp_path / "ray_current_cluster")
    assert _internals.local_ray_address(str(tmp_path)) is None
    (tmp_path / "ray_current_cluster").write_text("127.0.0.1:6391\n")
    assert _internals.local_ray_address(str(tmp_path)) == "127.0.0.1:6391"


def test_running_ray_instances_finds_the_gcs_of_the_ray_this_process_started(ray_up: None) -> None:
    import ray

    address = ray.get_runtime_context().gcs_address
    assert address in _internals.running_ray_instances()


def test_repair_torn_tune_state_takes_the_drivers_whole_copy_else_sets_the_cut_one_aside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint

    monkeypatch.setenv("RAY_TMPDIR", str(tmp_path / "tmp"))
    sweep = tmp_path / "results" / "s1"
    sweep.mkdir(parents=True)
    (sweep / "experiment_state-2026-12-03_10-00-00.json").write_text('{"trial_data": []}')  # a session before
    cut = sweep / "experiment_state-2026-12-03_11-00-00.json"
    cut.write_text("")  # what a kill during Tune's copy leaves (pyarrow truncates first)
    assert _internals.repair_torn_tune_state(str(sweep)) is not None  # no copy: set aside
    assert not cut.exists() and (sweep / f"{cut.name}.torn").exists()
    assert str(_find_newest_experiment_checkpoint(str(sweep))).endswith("10-00-00.json")
    cut.write_text('{"trial_data": [')  # cut mid-write, with the driver's staging copy whole
    staging = tmp_path / "tmp" / "ray" / "session_x" / "artifacts" / "2026" / "s1" / "driver_artifacts"
    staging.mkdir(parents=True)
    (staging / cut.name).write_text('{"trial_data": [], "runner_data": {}}')
    said = _internals.repair_torn_tune_state(str(sweep))
    assert said is not None and "complete copy" in said
    assert json.loads(cut.read_text()) == {"trial_data": [], "runner_data": {}}
    assert _internals.repair_torn_tune_state(str(sweep)) is None  # whole: left alone


def test_a_torn_pickled_error_reads_as_absent_and_a_whole_one_loads(tmp_path: Path) -> None:
    from types import SimpleNamespace

    import cloudpickle
    import pyarrow.fs
    from ray.tune.experiment.trial import Trial

    _internals.torn_error_file_reads_as_absent()
    _internals.torn_error_file_reads_as_absent()  # idempotent: wrapped once
    whole = cloudpickle.dumps(ValueError("the trial's error"))
    trial: Any = SimpleNamespace(
        run_metadata=SimpleNamespace(pickled_error_filename="error.pkl"),
        storage=SimpleNamespace(storage_filesystem=pyarrow.fs.LocalFileSystem(), trial_fs_path=str(tmp_path)),
    )
    (tmp_path / "error.pkl").write_bytes(whole)
    loaded = Trial.get_pickled_error(trial)
    assert isinstance(loaded, ValueError) and str(loaded) == "the trial's error"
    (tmp_path / "error.pkl").write_bytes(whole[: len(whole) // 2])  # a full disk cut the write short
    assert Trial.get_pickled_error(trial) is None


def test_note_tune_stop_signal_wraps_tunes_ctrl_c_handler_and_tune_still_stops() -> None:
    import signal

    from ray.tune import tune as tune_module

    from tunetrain._internals import note_tune_stop_signal

    before = signal.getsignal(signal.SIGINT)
    try:
        # What Tuner.fit does first: Ray 2.60's own handler, which sets a private event.
        event = tune_module._setup_signal_catching()
        noted: list[bool] = []
        note_tune_stop_signal(lambda: noted.append(True))
        handler = signal.getsignal(signal.SIGINT)
        assert callable(handler)
        handler(signal.SIGINT, None)  # Ctrl+C
        assert noted == [True] and event.is_set()  # the sweep knows, and Tune stops gracefully
        assert signal.getsignal(signal.SIGINT) is before  # Tune put the earlier handler back
    finally:
        signal.signal(signal.SIGINT, before)


def test_signal_handlers_kept_puts_back_what_tune_left_installed() -> None:
    import signal

    from ray.tune import tune as tune_module

    from tunetrain._internals import signal_handlers_kept

    before = signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1)
    try:
        with signal_handlers_kept():
            tune_module._setup_signal_catching()  # what Tuner.fit installs, and leaves when no Ctrl+C came
            assert signal.getsignal(signal.SIGINT) is not before[0]
        # The next Ctrl+C raises KeyboardInterrupt again (a notebook's next cell).
        assert (signal.getsignal(signal.SIGINT), signal.getsignal(signal.SIGUSR1)) == before
    finally:
        signal.signal(signal.SIGINT, before[0])
        signal.signal(signal.SIGUSR1, before[1])
