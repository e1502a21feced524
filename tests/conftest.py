"""Shared fixtures: one real local Ray for the whole session, a real sqlite MLflow store per test."""

from __future__ import annotations

import io
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tunetrain import Experiment

REPO = Path(__file__).resolve().parents[1]
EXPERIMENTS = REPO / "experiments"


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[None]:
    """A real embedded Ray, started by the first sweep and shut down at the end."""
    import ray

    yield
    if ray.is_initialized():
        ray.shutdown()


@pytest.fixture()
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


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
