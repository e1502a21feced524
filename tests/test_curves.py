"""The recorded learning curves (benchmarks/data, benchmarks/record_curves.py) as problems of
the simulated backend (benchmarks/_curves.py): what is shipped, and how it is replayed."""

from __future__ import annotations

import gzip
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from ray.tune.search.sample import Categorical, Float, Integer

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _curves


def _write(folder: Path) -> None:
    rows: list[dict[str, Any]] = []
    for lr in (1e-3, 1e-2, 1e-1):
        for width in (8, 16, 32):
            for opt in ("adam", "sgd"):
                loss = [lr * width / step for step in (1, 2, 3)] if opt == "adam" else [9.0, 8.0, 7.0]
                rows.append({"config": {"lr": lr, "width": width, "opt": opt}, "seed": 1, "sweep": "curves_toy",
                             "val_loss": loss, "val_acc": [0.5] * 3, "epoch_s": [0.25, 0.5, 0.75]})  # fmt: skip
    repeat = {**rows[0], "sweep": "curves_toy_seed1", "val_loss": [0.0, 0.0, rows[0]["val_loss"][-1] + 0.125]}
    with gzip.open(folder / "curves_toy.json.gz", "wt") as f:
        json.dump({"problem": "toy", "rows": [*rows, repeat]}, f)


def test_a_recorded_table_is_a_problem_whose_suggestions_snap_to_the_grid(tmp_path: Path) -> None:
    _write(tmp_path)
    table = _curves.Table(_curves.load("toy", tmp_path))
    space = table.space()
    assert (
        isinstance(space["lr"], Float) and isinstance(space["width"], Integer) and isinstance(space["opt"], Categorical)
    )
    problem = table.problem("toy")
    assert problem.max_t == 3 and problem.kind == "multi-fidelity"
    assert problem.optimum == pytest.approx(1e-3 * 8 / 3)
    # 0.002 is nearer 1e-3 than 1e-2 on a log scale (0.004 would not be); width 20 snaps to 16.
    assert problem.value({"lr": 0.002, "width": 20, "opt": "adam"}, 2) == pytest.approx(1e-3 * 16 / 2)
    assert problem.value({"lr": 0.004, "width": 20, "opt": "adam"}, 2) == pytest.approx(1e-2 * 16 / 2)
    assert problem.cost({"lr": 0.002, "width": 20, "opt": "sgd"}, 3) == 0.75
    assert table.noise_floor() == pytest.approx(0.125)
    # sgd's curves (9, 8, 7) rank last at every epoch, adam's in the same order: a perfect rung.
    assert table.rung_correlation(1) == pytest.approx(1.0) and table.regret_choosing_at(1) == 0.0
    with pytest.raises(KeyError):
        problem.value({"lr": 0.01, "width": 8, "opt": "rmsprop"}, 1)


@pytest.mark.parametrize("name", _curves.PROBLEMS)
def test_the_shipped_curves_are_real_training_of_300_configs_with_a_second_seed(name: str) -> None:
    data = _curves.load(name)
    table = _curves.Table(data)
    assert len(table.rows) >= 300 and len(table.keys) >= 4 and table.max_t >= 20
    assert len(table.repeats) >= 50
    assert all(len(r["epoch_s"]) == len(r["val_loss"]) >= 20 and min(r["epoch_s"]) > 0 for r in table.rows)
    kinds = {type(space).__name__ for space in table.space().values()}
    assert {"Float", "Categorical"} <= kinds and ("Integer" in kinds or len(kinds) >= 2)
    assert 0 <= table.noise_floor() < 1
