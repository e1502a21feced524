from __future__ import annotations

from types import SimpleNamespace

import pytest

from tunetrain.seeding import derive_seed
from tunetrain.trial import TrialNamer, trial_index, trial_name


def test_trial_names_follow_the_searchers_own_counter() -> None:
    # Tune's experiment tag starts with the searcher's counter: from 1 for Optuna, 0 for random.
    assert TrialNamer(first=1)(SimpleNamespace(experiment_tag="1_lr=0.1")) == "trial_0000"
    assert TrialNamer(first=0)(SimpleNamespace(experiment_tag="3_lr=0.1")) == "trial_0003"
    assert trial_index(trial_name(42)) == 42


def test_foreign_trial_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="Not a tunetrain trial name"):
        trial_index("train_fn_abc12_00001")


def test_derived_seeds_are_stable_and_distinct() -> None:
    # The same root and index give the same seed in every process; neighbours differ.
    assert derive_seed(0, 1) == derive_seed(0, 1)
    assert len({derive_seed(0, i) for i in range(100)}) == 100
    assert derive_seed(0, 1) != derive_seed(1, 1)
