from __future__ import annotations

import math

from tests.conftest import make_experiment
from tunetrain import StopRule
from tunetrain.sweeps.cost.estimate import describe, estimate, iterations_per_trial


def test_asha_keeps_one_in_reduction_factor_at_each_rung() -> None:
    experiment = make_experiment(scheduler="asha", stop=StopRule(max_iterations=5))
    # Rungs 1, 2, 4 of max_t 5: all run 1, half run to 2, a quarter to 4, an eighth to 5.
    iterations, basis = iterations_per_trial(experiment) or (0.0, "")
    assert math.isclose(iterations, 1 + 0.5 * 1 + 0.25 * 2 + 0.125 * 1)
    assert basis == "ASHA: grace 1, reduction factor 2, max_t 5"


def test_fifo_runs_every_trial_to_the_end_and_no_limit_gives_no_estimate() -> None:
    fifo = make_experiment(scheduler="fifo", stop=StopRule(max_iterations=10), num_samples=4, max_concurrent=2)
    found = estimate(fifo, max_concurrent=2, startup_s=1.0, iteration_s=0.5)
    assert found is not None
    # 1 s start-up + 10 x 0.5 s = 6 s for a slot's first trial; the in-process trials after it
    # reuse their slot's process: 2 start-ups + 4 x 5 s = 22 s over 2 slots: 11 s; 22 CPU-seconds.
    assert (found.trial_s, found.wall_s) == (6.0, 11.0) and math.isclose(found.cpu_hours, 22 / 3600)
    assert estimate(make_experiment(scheduler="fifo"), max_concurrent=2, startup_s=1, iteration_s=1) is None


def test_without_a_smoke_run_the_estimate_says_how_to_get_one() -> None:
    text = describe(make_experiment(), max_concurrent=2, smoke=None)
    assert "no smoke run of this experiment recorded; run `tunetrain sweep FILE --smoke` first" in text


def test_start_up_is_paid_per_trial_only_without_a_reused_process_and_the_baseline_counts() -> None:
    shape = {"scheduler": "fifo", "stop": StopRule(max_iterations=3), "num_samples": 4, "workers_per_trial": 2}
    group = make_experiment(**shape, trial_runner="worker_group")
    trainer = make_experiment(**shape, trial_runner="torch_trainer")
    # 5 trials (4 and the baseline), one at a time, 5 s start-up, 3 iterations of 1 s.
    reused = estimate(group, max_concurrent=1, startup_s=5.0, iteration_s=1.0, trials=5)
    fresh = estimate(trainer, max_concurrent=1, startup_s=5.0, iteration_s=1.0, trials=5)
    assert reused is not None and fresh is not None
    assert reused.wall_s == 5 + 5 * 3  # the group starts once
    assert fresh.wall_s == 5 * (5 + 3)  # a TorchTrainer per trial


def test_asha_gives_the_cost_if_it_stops_no_trial() -> None:
    asha = make_experiment(scheduler="asha", stop=StopRule(max_iterations=5), num_samples=4)
    found = estimate(asha, max_concurrent=1, startup_s=0.0, iteration_s=1.0)
    assert found is not None and found.wall_s_at_most == 4 * 5  # every trial to max_t
    assert found.wall_s < found.wall_s_at_most
