"""The early-stopping measure (tunetrain.rungs): each ASHA rung's rank correlation with the next."""

from __future__ import annotations

import pytest

from tunetrain.rungs import RungRanking, rung_rankings, summary_lines


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
