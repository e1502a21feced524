"""Shared fixtures: one real local Ray for the whole session, a real sqlite MLflow store per test."""

from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunetrain import Experiment

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that start a Ray of their own (``own_ray``: subprocess sweeps, the cluster, the
    benchmarks) run last, together: the session's embedded Ray, which each shuts down, is not
    started again for the tests between them."""
    items.sort(key=lambda item: item.get_closest_marker("own_ray") is not None)  # a stable sort


@pytest.fixture(autouse=True)
def _only_one_ray(request: pytest.FixtureRequest) -> None:
    """An ``own_ray`` test starts its Ray with this process's embedded one shut down: Ray
    Train V2 needs to be the only Ray on the machine (docs/cluster.md)."""
    if request.node.get_closest_marker("own_ray") is not None:
        import ray

        ray.shutdown()


@pytest.fixture(autouse=True)
def _no_tracking_uri_left_behind() -> Iterator[None]:
    """A test that leaves MLFLOW_TRACKING_URI changed fails (and the variable is put back):
    MLflow's fluent API sets it for the whole process, and every later sweep, store lookup and
    subprocess of the session would then write to that test's store (seen: 19 tests failing
    after one). Tests set it with monkeypatch.setenv, which puts it back."""
    before = os.environ.get("MLFLOW_TRACKING_URI")
    yield
    after = os.environ.get("MLFLOW_TRACKING_URI")
    if after != before:
        if before is None:
            os.environ.pop("MLFLOW_TRACKING_URI", None)
        else:
            os.environ["MLFLOW_TRACKING_URI"] = before
        pytest.fail(f"the test left MLFLOW_TRACKING_URI={after!r} (it was {before!r}): use monkeypatch.setenv")


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """A real embedded Ray, started by the first sweep and shut down at the end."""
    import ray

    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture(scope="session")
def store_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty MLflow sqlite store, made once: creating one runs every schema migration
    (about a second), which only a few tests are about."""
    from mlflow.tracking import MlflowClient

    path = tmp_path_factory.mktemp("store_template") / "mlflow.db"
    MlflowClient(f"sqlite:///{path}").search_experiments()
    return path


@pytest.fixture()
def bare_workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The test's own empty working folder (the default store and storage go there)."""
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture()
def workdir(bare_workdir: Path, store_template: Path) -> Path:
    """The test's working folder, with an empty MLflow store already in it (a copy of
    ``store_template``) where the sweep's default tracking URI points. Tests of stores
    being created, or of nothing being written, use ``bare_workdir``."""
    shutil.copyfile(store_template, bare_workdir / "mlflow.db")
    return bare_workdir


def run_cli(*argv: str) -> tuple[int, str]:
    """Run ``tunetrain ARGV`` in-process; returns (exit status, everything it printed)."""
    from tunetrain.cli import main

    out = io.StringIO()
    status = main(list(argv), stream=out)
    return status, out.getvalue()


def make_experiment(**changes: Any) -> Experiment:
    """A valid minimal Experiment, with ``changes`` applied (and validated)."""
    from ray import tune

    fields: dict[str, Any] = {
        "name": "e",
        "train_loop": lambda config: None,
        "space": {"lr": tune.uniform(0, 1)},
        "metric": "loss",
        "mode": "min",
    }
    fields.update(changes)
    return Experiment(**fields)


def write_experiment(folder: Path, body: str, name: str = "exp.py") -> Path:
    path = folder / name
    path.write_text(body)
    return path


os.environ.setdefault("RAY_DEDUP_LOGS", "0")


def small_experiment(
    name: str, *, steps: int, samples: int, step_s: float = 0.0, seed: int = 1, baseline: bool = False, **fields: Any
) -> str:
    """The source of the suite's smallest real experiment, which the tests that need only
    some trials to run share: ``samples`` trials (FIFO, random search) of ``steps`` reports
    of ``loss = x / (step + 1)``, x uniform in [0, 1], each step sleeping ``step_s`` s (it
    stands for training); ``fields`` are further Experiment keywords (written as their repr)."""
    extra = "".join(f"\n    {key}={value!r}," for key, value in fields.items())
    sleep = f"        time.sleep({step_s})  # stands for a training step\n" if step_s else ""
    return f"""
import time

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range({steps}):
{sleep}        ray.train.report({{"loss": config["x"] / (step + 1)}})


experiment = Experiment(
    name={name!r}, train_loop=loop, metric="loss", mode="min", space={{"x": tune.uniform(0, 1)}},
    scheduler="fifo", searcher="random", num_samples={samples}, stop=StopRule(max_iterations={steps}), seed={seed},
    baseline={baseline},{extra}
)
"""


# A small real sweep that the analysis, plots, report, CLI and notebook tests read back:
# a log-uniform, a categorical and an integer parameter; ASHA stops some trials; every second
# step is checkpointed, and a trial that runs all 6 steps is best at step 5 (not checkpointed).
ANALYSED = """
import json
import math
import os
import tempfile

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    penalty = {"adam": 0.0, "sgd": 0.5}[config["optimizer"]]
    for step in range(6):
        loss = (math.log10(config["lr"]) + 3) ** 2 + penalty + config["width"] / 100 + 1 / (step + 1)
        loss -= 0.3 if step == 4 else 0.0  # the best step, 5, is one the loop does not checkpoint
        checkpoint = None
        with tempfile.TemporaryDirectory() as folder:
            if step % 2 == 1:
                with open(os.path.join(folder, "state.json"), "w") as f:
                    json.dump({"step": step + 1}, f)
                checkpoint = ray.train.Checkpoint.from_directory(folder)
            ray.train.report({"loss": loss, "accuracy": 1 / (1 + loss)}, checkpoint=checkpoint)


experiment = Experiment(
    name="analysed", train_loop=loop, metric="loss", mode="min",
    space={"lr": tune.loguniform(1e-5, 1e-1), "optimizer": tune.choice(["adam", "sgd"]), "width": tune.randint(8, 64)},
    num_samples=8, scheduler="asha", searcher="random", stop=StopRule(max_iterations=6), seed=5,
)
"""


class AnalysedSweep:
    def __init__(self, folder: Path, output: str) -> None:
        self.folder = folder
        self.tracking_uri = f"sqlite:///{folder / 'mlflow.db'}"
        self.storage = folder / "tunetrain_results"
        self.output = output


@pytest.fixture(scope="session")
def analysed_sweep(tmp_path_factory: pytest.TempPathFactory, ray_cluster: None) -> AnalysedSweep:
    """The ANALYSED experiment's sweep, run once per test session through the CLI."""
    folder = tmp_path_factory.mktemp("analysed")
    path = write_experiment(folder, ANALYSED)
    sweep = AnalysedSweep(folder, "")
    status, out = run_cli(
        "sweep",
        str(path),
        "--tracking-uri",
        sweep.tracking_uri,
        "--storage",
        str(sweep.storage),
        "--name",
        "analysed-1",
    )
    assert status == 0, out
    sweep.output = out
    return sweep
