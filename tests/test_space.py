from __future__ import annotations

from typing import Any

import pytest
from ray import tune

from tunetrain import ExperimentError, _space
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


@pytest.mark.parametrize("name", ["mlp_digits", "gpt2_lr", "gpt2_hf_trainer", "conditional_digits", "pbt_digits"])
def test_set_flags_survive_shell_word_splitting_for_every_value_of_the_shipped_experiments(name: str) -> None:
    from ray.tune.search.sample import Domain

    from tests.conftest import EXPERIMENTS
    from tunetrain import load_experiment

    def concrete(value: Any) -> Any:
        """A value a trial could get: a choice's last category, a sample, a branch's values."""
        if isinstance(value, Domain):
            choices = getattr(value, "categories", None)
            return concrete(choices[-1]) if choices is not None else value.sample()
        if isinstance(value, dict):
            return {k: concrete(v) for k, v in value.items()}
        return value

    experiment = load_experiment(str(EXPERIMENTS / f"{name}.py"))
    config = _space.flatten(experiment.defaults)
    config.update(_space.flatten(concrete(dict(experiment.space))))
    config["a.phrase"] = "two words, 'quoted'"  # a string no shipped default has
    words = _space.set_flags(config).split()  # what the shell makes of $(...): no unquoting
    assert words[0::2] == ["--set"] * len(config)
    assert dict(_space.parse_assignment(word) for word in words[1::2]) == config
