"""The ecosystem's conventions and failing fast (nothing here starts Ray): MLFLOW_TRACKING_URI
and RAY_ADDRESS honoured, read commands that never create a store, a Ray address or MLflow
server that does not answer refused in seconds, an unknown URI scheme refused, a dry run that
runs the experiment's preflight."""

from __future__ import annotations

import os
import shutil
import socket
import time
from pathlib import Path

import pytest

import tunetrain
from tests.conftest import EXPERIMENTS, REPO, run_cli, write_experiment

TOY = """
import ray.train
from ray import tune
from tunetrain import Experiment


def loop(config):
    ray.train.report({"loss": config["x"]})


experiment = Experiment(name="toy", train_loop=loop, metric="loss", mode="min", space={"x": tune.uniform(0, 1)})
"""


def _free_port() -> int:
    """A port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_mlflow_tracking_uri_from_the_environment_is_the_store_read(
    bare_workdir: Path, store_template: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shared = bare_workdir / "shared" / "team.db"
    shared.parent.mkdir()
    shutil.copyfile(store_template, shared)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{shared}")
    status, out = run_cli("list")
    assert status == 0 and f"No sweep recorded in sqlite:///{shared}." in out, out
    assert not (bare_workdir / "mlflow.db").exists()
    # The flag still wins over the environment.
    status, out = run_cli("list", "--tracking-uri", f"sqlite:///{bare_workdir / 'mlflow.db'}")
    assert status == 2 and "No MLflow store at" in out


@pytest.mark.parametrize("command", [["list"], ["show"], ["best"], ["report"], ["ui"]])
def test_read_commands_never_create_a_store(bare_workdir: Path, command: list[str]) -> None:
    status, out = run_cli(*command)
    assert status == 2, out
    assert f"No MLflow store at {bare_workdir / 'mlflow.db'}" in out and "MLFLOW_TRACKING_URI" in out, out
    assert os.listdir(bare_workdir) == []  # nothing written


def test_a_store_path_in_a_missing_folder_is_refused_and_not_created(bare_workdir: Path) -> None:
    missing = bare_workdir / "nonexistent" / "dir" / "mlflow.db"
    status, out = run_cli("list", "--tracking-uri", f"sqlite:///{missing}")
    assert status == 2 and f"No MLflow store at {missing}" in out and "--tracking-uri" in out, out
    assert not (bare_workdir / "nonexistent").exists()
    with pytest.raises(tunetrain.ExperimentError, match="No MLflow store at"):
        from tunetrain.results.analysis import load_sweep

        load_sweep(tracking_uri=f"sqlite:///{missing}")


def test_an_unknown_tracking_uri_scheme_is_bad_input(bare_workdir: Path) -> None:
    status, out = run_cli("list", "--tracking-uri", "garbage://x")
    assert status == 2 and "'garbage' is not a tracking store MLflow knows" in out, out
    status, out = run_cli("sweep", str(write_experiment(bare_workdir, TOY)), "--tracking-uri", "garbage://x")
    assert status == 2 and "Traceback" not in out


@pytest.mark.parametrize("command", [["list"], ["sweep", "FILE", "--dry-run"], ["sweep", "FILE"]])
def test_a_tracking_server_that_does_not_answer_is_refused_in_seconds(bare_workdir: Path, command: list[str]) -> None:
    uri = f"http://127.0.0.1:{_free_port()}"
    argv = [str(write_experiment(bare_workdir, TOY)) if word == "FILE" else word for word in command]
    start = time.monotonic()
    status, out = run_cli(*argv, "--tracking-uri", uri)
    assert status == 2 and f"Nothing answers at the tracking URI {uri} (from --tracking-uri)" in out, out
    assert time.monotonic() - start < 30  # not MLflow's minutes of retries
    assert "Sweep toy" not in out  # refused before the plan


@pytest.mark.own_ray  # run with this process's Ray shut down: a connected Ray is used as it is
@pytest.mark.parametrize("source", ["flag", "RAY_ADDRESS"])
def test_a_ray_address_where_nothing_listens_is_refused_in_seconds(
    bare_workdir: Path, monkeypatch: pytest.MonkeyPatch, source: str
) -> None:
    import ray

    address = f"127.0.0.1:{_free_port()}"
    argv = ["sweep", str(write_experiment(bare_workdir, TOY))]
    if source == "flag":
        argv += ["--address", address]
    else:
        monkeypatch.setenv("RAY_ADDRESS", address)
    start = time.monotonic()
    status, out = run_cli(*argv)
    assert status == 2 and f"Nothing answers at the Ray address {address}" in out, out
    assert time.monotonic() - start < 30 and not ray.is_initialized()


def test_a_dry_run_runs_the_experiments_preflight(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # this machine has no hub; make that certain and fast
    status, out = run_cli("sweep", str(EXPERIMENTS / "gpt2_lr.py"), "--set", "model=gpt2", "--dry-run")
    assert status == 2
    assert "needs the pretrained GPT-2 weights from the Hugging Face hub" in out


@pytest.mark.parametrize(
    ("assignment", "expected"),
    [
        ("epochs=abc", "--set epochs=abc: epochs is an integer (12), but got 'abc'."),
        ("epochs=2e3", "--set epochs=2e3: epochs is an integer (12), but got 2000.0 (float)."),
        ("lr=5.0", "--set lr=5.0: lr is searched in [0.0001, 0.3], but got 5.0."),
        ("hidden=999", "--set hidden=999: hidden is searched over the choices [16, 64, 256], but got 999."),
        ("batch_size=true", "--set batch_size=true: batch_size is an integer (64), but got 'true'."),
    ],
)
def test_set_values_are_checked_against_what_they_replace(bare_workdir: Path, assignment: str, expected: str) -> None:
    status, out = run_cli("sweep", str(EXPERIMENTS / "mlp_digits.py"), "--set", assignment, "--dry-run")
    assert status == 2 and expected in out, out


def test_set_values_are_typed_as_the_experiments(bare_workdir: Path) -> None:
    gpt2 = str(EXPERIMENTS / "gpt2_lr.py")
    status, out = run_cli("sweep", gpt2, "--set", "train.activation_checkpointing=false", "--dry-run")
    assert status == 0 and "train.activation_checkpointing = False" in out, out  # a bool, not a truthy string
    status, out = run_cli("sweep", gpt2, "--set", "train.precision=16", "--dry-run")
    assert status == 0 and "train.precision = '16'" in out, out  # a string where the experiment has one
    status, out = run_cli("sweep", gpt2, "--set", "train.max_steps=2e3", "--dry-run")
    assert status == 2 and "write a whole number, e.g. --set train.max_steps=2000" in out.lower(), out


def test_errors_about_flags_name_the_flag_typed(bare_workdir: Path) -> None:
    status, out = run_cli("sweep", str(EXPERIMENTS / "mlp_digits.py"), "--num-samples", "0", "--dry-run")
    assert status == 2 and "--num-samples must be an integer >= 1, but got 0." in out and "Experiment." not in out
    status, out = run_cli("sweep", str(EXPERIMENTS / "mlp_digits.py"), "--workers-per-trial", "4-2", "--dry-run")
    assert status == 2 and "--workers-per-trial must be" in out and "but got (4, 2)." in out and "self." not in out


def test_sweep_help_lists_every_scheduler_and_searcher() -> None:
    from tunetrain.cli import build_parser
    from tunetrain.experiment_checks import SCHEDULERS, SEARCHERS

    sweep = build_parser()._subparsers._group_actions[0].choices["sweep"]  # type: ignore[union-attr,index]
    helps = {action.dest: action.help or "" for action in sweep._actions}
    listed = {name: helps[name].split(" (")[0].replace(" or ", ", ").split(", ") for name in ("scheduler", "searcher")}
    assert listed == {"scheduler": list(SCHEDULERS), "searcher": list(SEARCHERS)}


def _record_sweep(uri: str, name: str, *, smoke: bool) -> None:
    """A finished sweep of one trial in the store, as a sweep records it (no Ray)."""
    import time as clock

    from tunetrain.tracking import SweepRecorder

    recorder = SweepRecorder(tracking_uri=uri, experiment_name="toy")
    tags = {"tunetrain.sweep_name": name, "tunetrain.metric": "loss", "tunetrain.mode": "min"}
    recorder.start_sweep(run_name=name, params={}, tags={**tags, **({"tunetrain.smoke": "true"} if smoke else {})})
    recorder.start_trial("trial_0000", params={"x": 0.5}, tags={"tunetrain.trial_index": 0}, start_time=clock.time())
    recorder.log_metrics("trial_0000", step=1, metrics={"loss": 0.5}, timestamp=clock.time())
    recorder.end_trial("trial_0000", status="completed", end_time=clock.time(), tags={})
    recorder.end_sweep(
        status="FINISHED", best_metrics={"best_loss": 0.5}, tags={}, best_trial="trial_0000", best_config={"x": 0.5}
    )
    recorder.close()


def test_smoke_sweeps_are_listed_only_when_asked_and_never_taken_as_the_newest(workdir: Path) -> None:
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    _record_sweep(uri, "real", smoke=False)
    _record_sweep(uri, "toy-smoke-restore", smoke=True)  # newer
    status, out = run_cli("list")
    assert status == 0 and "real" in out and "smoke" not in out, out
    status, out = run_cli("list", "--all")
    assert status == 0 and "real" in out and "toy-smoke-restore" in out, out
    status, out = run_cli("show")
    assert (status == 0 and "Sweep('real'" in out) or "real" in out.splitlines()[0], out
    status, out = run_cli("show", "toy-smoke-restore")  # by name, it is found
    assert status == 0 and "toy-smoke-restore" in out.splitlines()[0], out


def test_run_all_replaces_its_sections_and_keeps_the_hand_written_summary() -> None:
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("run_all", str(REPO / "benchmarks" / "run_all"))
    spec = importlib.util.spec_from_loader("run_all", loader)
    assert spec is not None
    run_all = importlib.util.module_from_spec(spec)
    loader.exec_module(run_all)
    document = "# Benchmarks\n\n## Summary\n\nhand-written\n\n## 1. A\n\nold a\n\n## 2. B\n\nold b\n"
    merged = run_all.merge_sections(document, ["## 2. B\n\nnew b\n", "## 3. C\n\nnew c\n"])
    assert (
        merged
        == "# Benchmarks\n\n## Summary\n\nhand-written\n\n## 1. A\n\nold a\n\n## 2. B\n\nnew b\n\n## 3. C\n\nnew c\n"
    )
