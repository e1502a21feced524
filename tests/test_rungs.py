"""The early-stopping measure (tunetrain.rungs): each ASHA rung's rank correlation with the next."""

from __future__ import annotations

from typing import Any

import pytest

from tunetrain.rungs import RungRanking, asha_milestones, rung_rankings, summary_lines


def test_each_rung_is_ranked_against_the_next_over_the_trials_at_both() -> None:
    # Rung 1 orders the 6 trials the reverse of rung 3; rung 3 as the end (max_t 9) does,
    # over the 5 that got there (one also has a NaN at 9: left out).
    values = [{1: float(i), 3: float(-i), 9: float(-i)} for i in range(6)]
    values[5][9] = float("nan")
    values.append({1: 0.5})  # stopped at the first rung: in no pair
    rankings = rung_rankings(values, [1, 3], 9)
    assert [(r.rung, r.next, r.trials) for r in rankings] == [(1, 3, 6), (3, 9, 5)]
    assert [r.rho for r in rankings] == [pytest.approx(-1.0), pytest.approx(1.0)]
    assert rankings[0].misleads and not rankings[1].misleads


def test_too_few_trials_or_one_value_give_no_rho() -> None:
    few = rung_rankings([{1: float(i), 2: float(i)} for i in range(4)], [1], 2)
    flat = rung_rankings([{1: 1.0, 2: float(i)} for i in range(8)], [1], 2)
    assert few == [RungRanking(1, 2, 4, None)] and flat == [RungRanking(1, 2, 8, None)]
    assert "1 -> 2: n/a (4 trials)" in summary_lines(few, grace_period=1)[1]


def test_the_summary_names_a_misleading_rung_and_the_later_first_rung_that_trusts_it_less() -> None:
    lines = summary_lines([RungRanking(1, 3, 12, 0.21), RungRanking(3, 9, 4, None)], grace_period=1)
    assert lines[1] == "  iteration 1 -> 3: 0.21 (12 trials); 3 -> 9: n/a (4 trials)"
    assert "Rung 1 misleads (rho 0.21)" in lines[2] and "scheduler_options={'grace_period': 3}" in lines[2]
    assert len(summary_lines([RungRanking(1, 3, 12, 0.9)], grace_period=1)) == 2


def test_the_summary_says_how_many_trials_went_on_past_a_misleading_rung() -> None:
    lines = summary_lines([RungRanking(1, 3, 12, 0.21)], grace_period=1, overruled={1: 7})
    assert lines[2] == (
        "  Rung 1 misled when 7 trials reached it: they went on instead of stopping there "
        "(scheduler_options={'skip_misleading_rungs': False} stops them as Ray's ASHA does)."
    )


def _trials(curves: list[dict[int, float]]) -> list:
    import optuna

    return [
        optuna.trial.create_trial(value=c[max(c)], params={}, distributions={}, intermediate_values=c) for c in curves
    ]


def test_the_model_moves_its_budget_up_only_when_the_budget_misleads() -> None:
    from tunetrain.algorithms._tpe import _trusted

    # Six trials at budget 1 and 3: step 1 orders them the reverse of step 3 -> fit on 3.
    reversed_ = _trials([{1: float(i), 3: float(-i)} for i in range(6)] + [{1: 9.0}])
    assert _trusted(reversed_, 1) == 3
    # The same order at both -> keep BOHB's budget (more trials reached it).
    agreeing = _trials([{1: float(i), 3: float(i) + 0.5} for i in range(6)])
    assert _trusted(agreeing, 1) == 1
    # Reversed, but only 4 trials reached step 3: too few to measure -> keep the budget.
    few = _trials([{1: float(i), 3: float(-i)} for i in range(4)] + [{1: 7.0}, {1: 8.0}])
    assert _trusted(few, 1) == 1
    # The largest later step with enough pairs is the one compared (9, where the order turns,
    # not 3, where it holds); NaNs make no pair, so with two at 9 only step 3 is left.
    deep = _trials([{1: float(i), 3: float(i), 9: float(-i)} for i in range(6)])
    assert _trusted(deep, 1) == 9
    deep[0].intermediate_values[9] = deep[1].intermediate_values[9] = float("nan")
    assert _trusted(deep, 1) == 1


class _Trial:
    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id
        self.last_result: dict = {}


@pytest.mark.parametrize(("misleads", "skip"), [(True, True), (False, True), (True, False)])
def test_asha_stops_no_trial_at_a_rung_that_misleads(misleads: bool, skip: bool) -> None:
    # Six trials, each better than the last at iteration 1 (so ASHA promotes them all); at
    # iteration 3 in the reverse order (rung 1 misleads: rho -1) or the same (rho 1). A
    # seventh, worst at iteration 1, goes on where the rung misleads and is stopped where not,
    # or where the user asked for Ray's ASHA unchanged (skip_misleading_rungs=False).
    from ray.tune.schedulers import TrialScheduler

    from tests.conftest import make_experiment
    from tunetrain.algorithms import build_scheduler

    options = {"max_t": 9, "reduction_factor": 3} | ({} if skip else {"skip_misleading_rungs": False})
    scheduler = build_scheduler(make_experiment(scheduler="asha", scheduler_options=options))

    def report(trial: _Trial, step: int, loss: float) -> str:
        decision: str = scheduler.on_trial_result(None, trial, {"loss": loss, "training_iteration": step})
        trial.last_result = {"loss": loss, "training_iteration": step}
        return decision

    for i in range(6):
        trial = _Trial(f"t{i}")
        scheduler.on_trial_add(None, trial)
        assert report(trial, 1, -float(i)) == TrialScheduler.CONTINUE
        report(trial, 2, 0.0)
        report(trial, 3, float(i) if misleads else -float(i))
    late = _Trial("late")
    scheduler.on_trial_add(None, late)
    decision = report(late, 1, 100.0)
    if misleads and skip:
        assert decision == TrialScheduler.CONTINUE and "late" not in scheduler.early_stopped
        assert scheduler.skipped == {1: pytest.approx(-1.0)} and scheduler.overruled == {1: 1}
    else:
        assert decision == TrialScheduler.STOP and scheduler.early_stopped["late"] == 1
        assert scheduler.skipped == {} and scheduler.overruled == {}


def test_skip_misleading_rungs_must_be_true_or_false() -> None:
    from tests.conftest import make_experiment
    from tunetrain.algorithms import build_scheduler
    from tunetrain.errors import ExperimentError

    with pytest.raises(ExperimentError, match=r"skip_misleading_rungs'\] is true or false, but got 'no'"):
        build_scheduler(make_experiment(scheduler="asha", scheduler_options={"skip_misleading_rungs": "no"}))


@pytest.mark.parametrize(("grace_period", "max_t"), [(2, 2), (1, 1)])
def test_asha_with_no_rung_below_max_t_is_built_and_stops_at_max_t(grace_period: int, max_t: int) -> None:
    # grace_period = max_t (gpt2_lr at 2 evaluations): ASHA has no rung, so nothing to rank.
    from ray.tune.schedulers import TrialScheduler

    from tests.conftest import make_experiment
    from tunetrain.algorithms import build_scheduler

    options = {"grace_period": grace_period, "max_t": max_t, "reduction_factor": 2}
    scheduler = build_scheduler(make_experiment(scheduler="asha", scheduler_options=options))
    trial = _Trial("t")
    scheduler.on_trial_add(None, trial)
    assert scheduler.on_trial_result(None, trial, {"loss": 1.0, "training_iteration": max_t}) == TrialScheduler.STOP
    assert scheduler.overruled == {}


def _rays_decisions(grace: int, rf: float, max_t: int) -> list[int]:
    """The iterations below max_t at which Ray's own ASHA decides a trial, found through its
    public interface: a second trial, better than the first everywhere but at iteration j,
    is stopped exactly when j is one (a fresh scheduler per j)."""
    from ray.tune.schedulers import AsyncHyperBandScheduler, TrialScheduler

    found = []
    for j in range(1, max_t):
        asha: Any = AsyncHyperBandScheduler(
            metric="loss", mode="min", grace_period=grace, reduction_factor=rf, max_t=max_t
        )
        first, second = _Trial("a"), _Trial("b")
        for trial in (first, second):
            asha.on_trial_add(None, trial)
        for it in range(1, max_t + 1):
            asha.on_trial_result(None, first, {"training_iteration": it, "loss": 1.0})
        for it in range(1, j + 1):
            decision = asha.on_trial_result(None, second, {"training_iteration": it, "loss": 0.5 if it < j else 2.0})
        if decision == TrialScheduler.STOP:
            found.append(j)
    return found


@pytest.mark.parametrize(("grace", "rf", "max_t"), [(1, 2, 8), (3, 3, 30), (1, 1.5, 10), (2, 1.5, 12), (1, 1.2, 6)])
def test_the_rungs_are_the_iterations_where_rays_asha_decides(grace: int, rf: float, max_t: int) -> None:
    # Before: a rung's integer part (1, 1, 2, 3, 5, 7 for 1.5 from 1), where Ray decides at
    # none of 1.5, 2.25, ...: the rung check never saw a decision, and the rung tags were off.
    assert asha_milestones(grace, rf, max_t) == _rays_decisions(grace, rf, max_t)
