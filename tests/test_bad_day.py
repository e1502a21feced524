"""A bad day loses nothing and says the truth (issue 39): every reported value recorded or
refused, never dropped. Real sweeps on the session's real local Ray and a real sqlite store."""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_cli, write_experiment

NUMERIC_TYPES = """
import numpy as np
import torch
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(2):
        ray.train.report({
            "loss": np.float32(config["x"] + step),      # NumPy's float32 (not a Python float)
            "n": np.int64(step),                         # NumPy's integer
            "t": torch.tensor(0.25 * (step + 1)),        # a 0-d tensor (Ray Train refuses tensors)
            "a": np.array(1.5),                          # a 0-d array
            "ok": np.bool_(True),                        # NumPy's bool: 1.0
            "val": {"acc": np.float64(0.5)},             # nested: val/acc, as Tune names it
        })


experiment = Experiment(
    name="numeric", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.grid_search([0.25, 0.5])}, workers_per_trial=WORKERS,
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=2), seed=1, baseline=False,
)
"""


def _trial_runs(tracking_uri: str, experiment: str) -> list:
    client = MlflowClient(tracking_uri)
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=100)
    assert runs and all(r.info.status != "RUNNING" for r in runs), [r.info.status for r in runs]
    return [r for r in runs if r.data.tags.get("tunetrain.role") != "sweep"]


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize("workers", [1, 2], ids=["in_process", "worker_group"])
def test_numbers_of_every_numeric_type_are_recorded_as_floats_at_every_step(workdir: Path, workers: int) -> None:
    path = write_experiment(workdir, NUMERIC_TYPES.replace("WORKERS", str(workers)))
    status, out = run_cli("sweep", str(path), "--no-report", "--no-register", "--max-concurrent", "1")
    assert status == 0, out
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    trials = _trial_runs(uri, "numeric")
    assert len(trials) == 2
    client = MlflowClient(uri)
    for run in trials:
        x = float(run.data.params["x"])
        assert run.data.metrics == {"loss": x + 1, "n": 1.0, "t": 0.5, "a": 1.5, "ok": 1.0, "val/acc": 0.5}
        assert [m.value for m in client.get_metric_history(run.info.run_id, "loss")] == [x, x + 1]
        assert [m.value for m in client.get_metric_history(run.info.run_id, "t")] == [0.25, 0.5]


NOT_A_NUMBER = """
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(3):
        ray.train.report({"loss": config["x"] / (step + 1), "phase": VALUE})


experiment = Experiment(
    name="notanumber", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.grid_search([1.0, 2.0])},
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=3), seed=1, baseline=False,
)
"""


@pytest.mark.usefixtures("ray_cluster")
@pytest.mark.parametrize(("value", "shown"), [('"warmup"', "'warmup' of type str"), ("None", "None of type NoneType")])
def test_a_value_that_is_not_a_number_is_refused_at_its_first_report_naming_key_and_type(
    workdir: Path, value: str, shown: str
) -> None:
    path = write_experiment(workdir, NOT_A_NUMBER.replace("VALUE", value))
    status, out = run_cli("sweep", str(path), "--no-report", "--max-concurrent", "1")
    assert status == 2, out  # bad input, not success
    assert f"'phase' as {shown}, which is not a number" in out and "float(value)" in out, out
    trials = _trial_runs(f"sqlite:///{workdir / 'mlflow.db'}", "notanumber")
    # The number reported beside it is in the record; the refused value is nowhere.
    assert trials and all("loss" in r.data.metrics and "phase" not in r.data.metrics for r in trials)
    assert "Model not registered" not in out and "Registered" not in out


@pytest.mark.usefixtures("ray_cluster")
def test_smoke_names_a_value_that_is_not_a_number(workdir: Path) -> None:
    path = write_experiment(workdir, NOT_A_NUMBER.replace("VALUE", '"warmup"'))
    status, out = run_cli("sweep", str(path), "--smoke", "--smoke-steps", "2")
    assert status == 1, out
    assert "FAIL" in out and "'phase' as 'warmup' of type str" in out, out


def test_every_choice_of_a_sweep_is_saved_for_a_resume_and_rebuilt_from_it(tmp_path: Path) -> None:
    from tests.conftest import make_experiment
    from tunetrain.sweeps.request import SweepRequest

    path = write_experiment(tmp_path, "from tests.conftest import make_experiment\nexperiment = make_experiment()\n")
    asked = SweepRequest(
        experiment=str(path),
        fields={"num_samples": 3},
        address="127.0.0.1:6379",
        budget="30m",
        report=False,
        register=False,
        alias="best",
        ask_above="2cpu-h",
        yes=True,
        tracking_uri="sqlite:///x.db",
    )
    saved = asked.saved(make_experiment())
    assert saved is not None
    rebuilt = SweepRequest.from_saved(saved, cwd=str(tmp_path), storage="s", name="n", tracking_uri=None)
    for field in ("fields", "address", "budget", "report", "register", "alias", "ask_above", "yes"):
        assert getattr(rebuilt, field) == getattr(asked, field), field
    # A journal of an older tunetrain (none of the new fields): what it did then.
    old = {k: v for k, v in saved.items() if k not in ("register", "alias", "ask_above", "yes")}
    rebuilt = SweepRequest.from_saved(old, cwd=str(tmp_path), storage="s", name="n", tracking_uri=None)
    assert (rebuilt.register, rebuilt.alias, rebuilt.ask_above, rebuilt.yes) == (True, "champion", None, False)


@pytest.mark.slow
@pytest.mark.own_ray  # the sweep runs in a subprocess with its own Ray
def test_resume_after_sigkill_keeps_the_registry_flags_the_sweep_started_with(workdir: Path) -> None:
    flags = ("--no-register",)
    from tests.test_fault_tolerance import start_sweep_and_wait

    process, _ = start_sweep_and_wait(workdir, ended=1, args=flags)  # with --no-report
    process.kill()  # SIGKILL: no clean-up of any kind
    process.communicate(timeout=60)
    status, out = run_cli("resume", "s1")
    assert status == 0, out
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    assert "Registered" not in out and client.search_registered_models() == [], out
    assert not list((workdir / "tunetrain_results" / "s1").glob("*.html"))  # --no-report kept too


QUICK = """
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    ray.train.report({"loss": 1.0})


experiment = Experiment(
    name="quick", train_loop=loop, metric="loss", mode="min",
    space=SPACE, defaults=DEFAULTS,
    scheduler="fifo", searcher="random", num_samples=2, stop=StopRule(max_iterations=1), seed=1,
)
"""


def _no_ray_started(monkeypatch: pytest.MonkeyPatch) -> None:
    from tunetrain import cluster

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("Ray was started")

    monkeypatch.setattr(cluster, "connect", refuse)


@pytest.mark.parametrize(
    ("space", "defaults", "said"),
    [
        ('{"lr@1": tune.uniform(0, 1)}', "{}", ["'lr@1'", "MLflow refuses 'lr@1' as a param name"]),
        ('{"x": tune.uniform(0, 1)}', '{"opt": {"b@": 1}}', ["'opt.b@'", "MLflow refuses"]),
        ('{"x": tune.choice([])}', "{}", ["'x' has nothing to choose from", "at least one value"]),
        ('{"x": tune.grid_search([])}', "{}", ["'x' has nothing to choose from"]),
        ('{"a.b": tune.uniform(0, 1)}', "{}", ["key 'a.b' must be a name", "dots join nested keys"]),
        ('{"x": tune.uniform(0.5, 0.5)}', "{}", ["lower bound 0.5 is not below", "fix 'x' at 0.5 in defaults"]),
        ('{"x": tune.loguniform(1e-1, 1e-4)}', "{}", ["Give the lower bound first: (0.0001, 0.1)"]),
        ('{"s": tune.choice(["a", "b" * 10_000])}', "{}", ["'s'", "10,000 characters", "at most 6,000"]),
        ('{"x": tune.uniform(0, 1)}', '{"prompt": "p" * 7000}', ["'prompt'", "7,000 characters"]),
    ],
    ids=[
        "metric-rule",
        "nested-default",
        "empty-choice",
        "empty-grid",
        "dotted",
        "equal",
        "swapped",
        "long",
        "long-default",
    ],
)
def test_space_and_defaults_mlflow_would_refuse_or_cut_are_refused_by_a_dry_run(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, space: str, defaults: str, said: list[str]
) -> None:
    path = write_experiment(workdir, QUICK.replace("SPACE", space).replace("DEFAULTS", defaults))
    _no_ray_started(monkeypatch)
    status, out = run_cli("sweep", str(path), "--dry-run")
    assert status == 2, out
    for text in said:
        assert text in out, out
    if "equal" in said[0]:
        assert "lower bound first" not in out


def test_set_flags_write_a_key_with_a_space_as_one_word_that_set_reads_back() -> None:
    from tunetrain.overrides import parse_assignment, set_flags

    flags = set_flags({"e f": 1.5, "opt": {"name": "x y"}})
    assert flags == "--set e\\x20f=1.5 --set opt.name='x\\x20y'"
    words = flags.split()  # what the shell does with $(tunetrain best --format set)
    assert dict(parse_assignment(word) for word in words[1::2]) == {"e f": 1.5, "opt.name": "x y"}


def test_a_best_config_over_the_tag_limit_is_whole_in_the_artifact_and_the_tag_stays_json(
    tmp_path: Path, store_template: Path
) -> None:
    import json
    import shutil

    from tunetrain.tracking import SweepRecorder, schema

    store = tmp_path / "mlflow.db"
    shutil.copyfile(store_template, store)
    recorder = SweepRecorder(tracking_uri=f"sqlite:///{store}", experiment_name="e", journal=tmp_path / "journal.jsonl")
    config = {f"k{i}": "v" * 50 for i in range(200)}  # each param fits; the JSON of all does not
    parent = recorder.start_sweep(run_name="s", params={}, tags={})
    assert parent is not None
    recorder.end_sweep(status="FINISHED", tags={}, best_trial=None, best_metrics={}, best_config=config)
    recorder.close()
    client = MlflowClient(f"sqlite:///{store}")
    tag = json.loads(client.get_run(parent).data.tags[schema.BEST_CONFIG_TAG])
    assert tag["artifact"] == schema.BEST_CONFIG_ARTIFACT and "over MLflow's tag limit" in tag["cut"]
    path = client.download_artifacts(parent, schema.BEST_CONFIG_ARTIFACT, str(tmp_path))
    assert json.loads(Path(path).read_text()) == config


@pytest.mark.own_ray  # needs this process without a Ray, to start the embedded one
def test_a_stale_ray_address_file_is_reported_and_an_embedded_ray_started_not_waited_on(workdir: Path) -> None:
    import socket

    from ray._private.utils import get_ray_address_file

    with socket.socket() as probe:  # a port where nothing listens once closed
        probe.bind(("127.0.0.1", 0))
        dead = probe.getsockname()[1]
    address_file = Path(get_ray_address_file(None))
    before = address_file.read_text() if address_file.exists() else None
    address_file.parent.mkdir(parents=True, exist_ok=True)
    address_file.write_text(f"127.0.0.1:{dead}")  # what a Ray stopped without `ray stop` leaves
    try:
        path = write_experiment(workdir, QUICK.replace("SPACE", '{"x": tune.uniform(0, 1)}').replace("DEFAULTS", "{}"))
        status, out = run_cli("sweep", str(path), "--no-report", "--no-register")
    finally:
        if before is None:
            address_file.unlink(missing_ok=True)
        else:
            address_file.write_text(before)
    assert status == 0, out
    assert f"names 127.0.0.1:{dead}, where no Ray answers" in out and "not joined" in out, out


def test_a_sweep_whose_trials_all_diverged_is_listed_as_diverged_not_failed() -> None:
    from types import SimpleNamespace

    from tunetrain.results.analysis import _sweep_status
    from tunetrain.tracking import schema

    def run(**counts: int) -> SimpleNamespace:
        tags = {schema.TRIALS_TAG: str(sum(counts.values()))}
        for status in ("completed", "stopped_early", "diverged", "failed", "oom"):
            tags[schema.TRIALS_STATUS_PREFIX + status] = str(counts.get(status, 0))
        return SimpleNamespace(status="FINISHED", tags=tags)

    assert _sweep_status(run(diverged=3)) == "all diverged"
    assert _sweep_status(run(diverged=2, failed=1)) == "all failed or diverged"
    assert _sweep_status(run(failed=3)) == "all failed"
    assert _sweep_status(run(completed=1, diverged=2)) == "finished"


ALL_NAN = """
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(3):
        ray.train.report({"loss": float("nan"), "acc": 0.5})


experiment = Experiment(
    name="allnan", train_loop=loop, metric="loss", mode="min", space={"x": tune.uniform(0, 1)},
    scheduler="fifo", searcher="random", num_samples=3, stop=StopRule(max_iterations=3), seed=1, baseline=False,
)
"""


@pytest.mark.usefixtures("ray_cluster")
def test_a_sweep_whose_trials_all_diverged_has_its_report_and_says_diverged_everywhere(workdir: Path) -> None:
    # Before: "Sweep report not written (ValueError: zero-size array ...)", and `report` crashed.
    path = write_experiment(workdir, ALL_NAN)
    status, out = run_cli("sweep", str(path), "--no-register", "--name", "nan1", "--max-concurrent", "1")
    assert status == 1, out  # no trial completed
    assert "No trial reported a finite loss: 3 trial(s) diverged (NaN or infinite)." in out, out
    assert "not written" not in out, out
    reports = list((workdir / "tunetrain_results" / "nan1").glob("*.html"))
    assert len(reports) == 1 and "3 trial(s) diverged" in reports[0].read_text()
    status, out = run_cli("report", "nan1", "--output", str(workdir / "again.html"))
    assert status == 0 and "3 trial(s) diverged" in (workdir / "again.html").read_text(), out
    status, out = run_cli("list")
    assert status == 0 and "all diverged" in out, out


def test_confirm_says_a_tie_for_first_is_a_tie_not_a_win_or_a_loss() -> None:
    import pandas as pd

    from tunetrain.api._confirm import describe

    def table(means: list[float]) -> pd.DataFrame:
        rows = [{"trial": f"trial_000{i}", "original": 1.0, "mean": m, "std": 0.0, "min": m, "max": m, "seeds": 2}
                for i, m in enumerate(means)]  # fmt: skip
        return pd.DataFrame(rows)

    said = describe(table([0.5, 0.5, 0.7]), original="s", metric="loss", mode="min", winner="trial_0001")
    assert "The original winner, trial_0001, ties with trial_0000 (mean 0.5 each): it is kept" in said, said
    assert "still wins" not in said and "does not hold" not in said
    said = describe(table([0.5, 0.6]), original="s", metric="loss", mode="min", winner="trial_0000")
    assert "trial_0000, still wins (mean 0.5)." in said
    said = describe(table([0.5, 0.6]), original="s", metric="loss", mode="min", winner="trial_0001")
    assert "does not hold: trial_0000 wins on the mean (0.5); trial_0001 is #2." in said


def test_confirm_on_the_version_that_holds_the_alias_says_it_stays(tmp_path: Path, store_template: Path) -> None:
    # Before: "-> version 1 (the confirmed winner; it was on version 1)": MLflow's version
    # number (an int) was compared with tunetrain's (a str).
    import shutil

    from tunetrain.tracking.registry import RegisteredVersion, move_to_confirmed

    shutil.copyfile(store_template, tmp_path / "mlflow.db")
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.create_registered_model("toy")
    created = client.create_model_version("toy", source=str(tmp_path))
    client.set_registered_model_alias("toy", "champion", created.version)
    version = RegisteredVersion("toy", str(created.version), "models:/toy/1", "checkpoint")
    said = move_to_confirmed(uri, version, "champion", confirmed_by="toy-confirm")
    assert said == "models:/toy@champion stays on version 1, the confirmed winner's", said


def test_ctrl_c_while_ray_starts_promises_no_resume(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: "interrupted; exiting now (tunetrain resume / sync finish the record)", with nothing to resume.
    from tunetrain import cluster

    def ctrl_c(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(cluster, "connect", ctrl_c)  # Ctrl+C during ray.init
    path = write_experiment(workdir, QUICK.replace("SPACE", '{"x": tune.uniform(0, 1)}').replace("DEFAULTS", "{}"))
    status, out = run_cli("sweep", str(path), "--no-report", "--no-register")
    assert status == 130, out
    assert "interrupted while Ray started: nothing was trained or recorded; nothing to resume." in out, out
    assert "resume" not in out.replace("nothing to resume", ""), out


def test_ray_datas_messages_go_to_the_sweeps_log_not_the_console(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Before: "The Ray cluster currently does not have any available CPUs. The Dataset job
    # will hang ..." on a sweep's console (Ray Data's own console handler, not propagated).
    import logging

    import ray.data  # noqa: F401  # imported first, as an experiment file that builds datasets does

    from tunetrain.cluster import quiet_ray_data

    monkeypatch.delenv("RAY_DATA_LOGGING_CONFIG", raising=False)
    quiet_ray_data(tmp_path)
    quiet_ray_data(tmp_path)  # a second sweep in the process: one handler, not two
    logging.getLogger("ray.data").warning("The Dataset job will hang")
    for handler in logging.getLogger("ray.data").handlers:
        handler.flush()
    assert "will hang" not in capsys.readouterr().err
    assert (tmp_path / "ray_data.log").read_text().count("The Dataset job will hang") == 1
    import json
    import os

    config = json.loads(Path(os.environ["RAY_DATA_LOGGING_CONFIG"]).read_text())  # for a later import
    assert config["loggers"]["ray.data"]["handlers"] == ["file"]
