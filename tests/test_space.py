from __future__ import annotations

import pytest
from ray import tune

from tunetrain import ExperimentError
from tunetrain._space import apply_overrides, flatten, free_dimensions, merge, parse_assignment


def test_flatten_joins_nested_keys_with_dots() -> None:
    # Nested config keys become the dotted names used by --set and MLflow params.
    assert flatten({"a": 1, "train": {"steps": 2, "opt": {"lr": 3}}}) == {"a": 1, "train.steps": 2, "train.opt.lr": 3}


def test_parse_assignment_reads_python_literals_and_falls_back_to_strings() -> None:
    assert parse_assignment("train.max_steps=200") == ("train.max_steps", 200)
    assert parse_assignment("lr=1e-3") == ("lr", 1e-3)
    assert parse_assignment("sizes=[1, 2]") == ("sizes", [1, 2])
    # A bare word is not a literal: it stays a string.
    assert parse_assignment("model=gpt2") == ("model", "gpt2")


def test_parse_assignment_without_equals_sign_is_rejected() -> None:
    with pytest.raises(ExperimentError, match="key=value"):
        parse_assignment("train.max_steps")


def test_apply_overrides_pins_space_dimensions_and_changes_defaults() -> None:
    space = {"lr": tune.loguniform(1e-4, 1e-1), "opt": {"beta": tune.uniform(0, 1)}}
    defaults = {"train": {"max_steps": 100}}
    new_space, new_defaults = apply_overrides(space, defaults, {"lr": 0.01, "train.max_steps": 5})
    # The pinned dimension is now a constant; the other one is still searched.
    assert new_space["lr"] == 0.01
    assert free_dimensions(new_space) == ["opt.beta"]
    assert new_defaults == {"train": {"max_steps": 5}}
    # The inputs are left as they were.
    assert defaults == {"train": {"max_steps": 100}}


def test_apply_overrides_rejects_unknown_keys_listing_the_valid_ones() -> None:
    with pytest.raises(ExperimentError) as info:
        apply_overrides({"lr": tune.uniform(0, 1)}, {"train": {"steps": 1}}, {"train.step": 2})
    # The message names the bad key and every valid key.
    assert "'train.step'" in str(info.value)
    assert "lr, train.steps" in str(info.value)


def test_merge_lets_the_second_dict_win_at_every_depth() -> None:
    assert merge({"a": {"b": 1, "c": 2}}, {"a": {"c": 3}}) == {"a": {"b": 1, "c": 3}}
