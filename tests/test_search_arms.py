"""The benchmark's own arms (benchmarks/_search_arms.py): i-Epoch, which no library ships, and
Ray Tune domains given to Syne Tune. Their figures live in docs/benchmarks.md."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ray import tune

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import _search_arms
import _simulated as sim


def _flat(max_t: int) -> sim.Problem:
    # A config's value is its x at every epoch; every epoch costs 1 s.
    return sim.Problem(
        "flat", {"x": tune.uniform(0, 1)}, max_t, lambda config, i: float(config["x"]), lambda config, i: 1.0, 0.0,
        "multi-fidelity",
    )  # fmt: skip


def test_i_epoch_trains_the_best_first_epochs_fully_within_the_budget() -> None:
    p = _flat(5)
    arm = _search_arms.EpochArm(p, seed=3, budget_compute=27.5, workers=1)
    events = sim.simulate(p, arm, workers=1, wall_s=27.5, trials=None)
    by_trial: dict[int, list[sim.Event]] = {}
    for e in events:
        by_trial.setdefault(e.trial, []).append(e)
    short = [t for t, es in by_trial.items() if len(es) == 1]
    full = [t for t, es in by_trial.items() if [e.step for e in es] == [1, 2, 3, 4, 5]]
    # 3 full trials reserve 1.5 x 15 s (the margin for slower epochs): 5 one-epoch trials fit
    # beside them; the second phase took 15 s of it.
    assert len(short) == 5 and len(full) == 3 and events[-1].compute == 20.0
    firsts = sorted(by_trial[t][0].value for t in short)
    assert sorted(by_trial[t][0].value for t in full) == firsts[:3]
    assert sim.regret_curve(events, p)[-1][2] == firsts[0]


def test_i_epoch_keeps_every_worker_busy_in_its_second_phase() -> None:
    p = _flat(4)
    arm = _search_arms.EpochArm(p, seed=0, budget_compute=56.0, workers=8)
    events = sim.simulate(p, arm, workers=8, wall_s=7.0, trials=None)
    full = {e.trial for e in events if e.step == 4}
    # 8 full trials end within 7 s of wall time only side by side: one round of the second phase.
    assert len(full) == 8


def test_ray_domains_become_syne_tunes_own_with_their_scale() -> None:
    from syne_tune.config_space import Categorical, FiniteRange, Float, Integer

    converted: dict[str, Any] = {
        key: _search_arms._syne_domain(domain)
        for key, domain in {
            "lr": tune.loguniform(1e-4, 1e-1),
            "p": tune.uniform(0.0, 0.5),
            "width": tune.lograndint(16, 65),
            "layers": tune.randint(1, 3),
            "act": tune.choice(["relu", "gelu"]),
        }.items()
    }
    assert isinstance(converted["lr"], Float) and converted["lr"].lower == 1e-4 and "log" in repr(converted["lr"])
    assert isinstance(converted["p"], Float) and "log" not in repr(converted["p"])
    assert isinstance(converted["width"], Integer | FiniteRange) and converted["width"].upper == 64
    assert isinstance(converted["layers"], Integer) and (converted["layers"].lower, converted["layers"].upper) == (1, 2)
    assert isinstance(converted["act"], Categorical) and list(converted["act"].categories) == ["relu", "gelu"]
