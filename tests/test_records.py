from __future__ import annotations

import pytest

from tunetrain.records import TrialRecord


@pytest.mark.parametrize(
    ("order", "scores", "best_step"), [("max", [0.5, 0.9, 0.9, 0.7, 0.9], 5), ("min", [3, 1, 2, 1], 4)]
)
def test_the_best_checkpoint_of_equal_scores_is_the_latest_the_one_ray_keeps(
    order: str, scores: list[float], best_step: int
) -> None:
    # Ray's checkpoint manager ranks the later of two equally scored checkpoints higher and
    # deletes from the lowest (num_to_keep): the recorded best must be one it kept.
    record = TrialRecord(name="trial_0000", index=0, trial_id="t", config={}, seed=0)
    for step, score in enumerate(scores, start=1):
        record.reported(step, {"acc": float(score)}, metric="acc", mode=order)
        record.checkpointed(f"checkpoint_{step:06d}", score="acc")
    best = record.best_checkpoint("acc", order)
    assert best is not None and best["step"] == best_step, best
