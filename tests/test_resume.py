"""Which sweeps may resume, and what a resumed sweep goes on from (no Ray here)."""

from __future__ import annotations

import math

from tests.conftest import make_experiment
from tunetrain.sweeps.resumable import Resumable, changes
from tunetrain.sweeps.run import journaled_trials
from tunetrain.tracking import JournalState

TAGS = {
    "tunetrain.metric": "loss",
    "tunetrain.mode": "min",
    "tunetrain.scheduler": "asha",
    "tunetrain.searcher": "optuna",
    "tunetrain.root_seed": 7,
    "tunetrain.num_samples": 8,
    "tunetrain.experiment_sha256": "a" * 64,
}
PARAMS = {"space.lr": "loguniform(1e-05, 0.1)", "default.batch": 32, "default.sizes": [1, 2]}


def sweep(entries: list[dict[str, object]] | None = None) -> Resumable:
    return Resumable(name="s", journal=JournalState(entries=entries or []), params=PARAMS, tags=TAGS)


def test_the_same_experiment_may_resume_and_grow() -> None:
    # Identical settings (a tuple where the journal has a list is the same value): no change.
    assert changes(sweep(), {**PARAMS, "default.sizes": (1, 2)}, TAGS) == []
    # More trials is not a change.
    assert changes(sweep(), PARAMS, {**TAGS, "tunetrain.num_samples": 12}) == []


def test_what_changed_is_named() -> None:
    found = changes(
        sweep(),
        {**PARAMS, "space.lr": "loguniform(1e-05, 1.0)"},
        {**TAGS, "tunetrain.scheduler": "fifo", "tunetrain.num_samples": 4, "tunetrain.experiment_sha256": "b" * 64},
    )
    # One line per change: the search space, the scheduler, fewer trials, the file's content.
    assert "param space.lr: 'loguniform(1e-05, 0.1)' -> 'loguniform(1e-05, 1.0)'" in found
    assert "scheduler: 'asha' -> 'fifo'" in found
    assert "num_samples: 8 -> 4 (it may only grow)" in found
    assert any(line.startswith("the experiment file's content (sha256 aaaaaaaaaaaa -> bbbbbbbbbbbb)") for line in found)


def test_a_finished_sweep_is_known_as_finished_until_resumed() -> None:
    assert sweep([{"seq": 1, "op": "end_sweep", "status": "FINISHED"}]).ended_as == "FINISHED"
    # Interrupted (KILLED) sweeps may resume; so may one resumed after it finished.
    assert sweep([{"seq": 1, "op": "end_sweep", "status": "KILLED"}]).ended_as is None
    ended = {"seq": 1, "op": "end_sweep", "status": "FINISHED"}
    assert sweep([ended, {"seq": 2, "op": "resume_sweep", "tags": {}}]).ended_as is None


def test_trials_are_rebuilt_from_the_journal_as_the_sweep_had_them() -> None:
    tags = {"tunetrain.trial_id": "abc_00000", "tunetrain.trial_index": 0, "tunetrain.seed": 5}
    entries = [
        {"seq": 1, "op": "start_sweep", "params": {}, "tags": {}},
        {
            "seq": 2,
            "op": "start_trial",
            "trial": "trial_0000",
            "params": {"opt.lr": 0.1, "opt.name": "adam", "tunetrain.seed": 5},
            "tags": tags,
            "start_time": 10.0,
        },
        {"seq": 3, "op": "metrics", "trial": "trial_0000", "step": 1, "metrics": {"loss": 2.0}, "timestamp": 11.0},
        {"seq": 4, "op": "tags", "trial": "trial_0000", "tags": {"tunetrain.checkpoint.latest": "/c/1"}},
        {"seq": 5, "op": "metrics", "trial": "trial_0000", "step": 2, "metrics": {"loss": math.nan}, "timestamp": 12.0},
        {"seq": 6, "op": "end_trial", "trial": "trial_0000", "status": "interrupted", "end_time": 13.0, "tags": {}},
    ]
    (record,) = journaled_trials(entries, make_experiment()).values()
    # The config comes back nested and typed, without tunetrain's own params.
    assert record.config == {"opt": {"lr": 0.1, "name": "adam"}}
    assert (record.trial_id, record.index, record.seed) == ("abc_00000", 0, 5)
    # Steps, last values and the best finite value; the checkpoint with its step and score.
    assert record.iterations == 2 and math.isnan(record.last["loss"]) and record.best_value == 2.0
    assert record.checkpoints == [{"step": 1, "path": "/c/1", "score": 2.0}]
    assert record.status == "interrupted" and record.end_time == 13.0
