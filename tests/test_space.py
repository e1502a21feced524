from __future__ import annotations

from typing import Any

import pytest
from ray import tune

from tunetrain import ExperimentError
from tunetrain import space as spaces
from tunetrain.overrides import apply_overrides, parse_assignment, set_flags
from tunetrain.space import flatten, free_dimensions, merge


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


def _conditional_space() -> dict:
    return {
        "optimizer": tune.choice(
            [
                {"name": "sgd", "lr": tune.loguniform(1e-3, 3e-1), "momentum": tune.uniform(0.0, 0.95)},
                {"name": "adam", "lr": tune.loguniform(1e-4, 3e-2), "beta1": tune.uniform(0.8, 0.99)},
            ]
        ),
        "hidden": tune.choice([16, 64]),
    }


def test_a_conditional_spaces_keys_are_set_by_their_dotted_path() -> None:
    space = _conditional_space()
    # A branch's parameter is pinned in every branch that searches it; the choice stays.
    both, _ = apply_overrides(space, {}, {"optimizer.lr": 0.01})
    assert [b["lr"] for b in both["optimizer"].categories] == [0.01, 0.01]
    assert free_dimensions(both) == ["optimizer", "hidden"]
    # The key that names a branch picks it (whatever order the flags came in); the branch is
    # then a plain nested dict, whose other keys are pinned as usual.
    sgd, _ = apply_overrides(space, {}, {"optimizer.momentum": 0.5, "optimizer.lr": 0.2, "optimizer.name": "sgd"})
    assert sgd["optimizer"] == {"name": "sgd", "lr": 0.2, "momentum": 0.5}
    assert free_dimensions(sgd) == ["hidden"]
    # A trial's config as `best --format set` and --config-from give it pins the whole space.
    trial = {"optimizer.name": "adam", "optimizer.lr": 0.001, "optimizer.beta1": 0.9, "hidden": 64}
    pinned, _ = apply_overrides(space, {}, trial)
    assert pinned == {"optimizer": {"name": "adam", "lr": 0.001, "beta1": 0.9}, "hidden": 64}
    # The space given is left as it was.
    assert len(space["optimizer"].categories) == 2


@pytest.mark.parametrize(
    ("overrides", "words"),
    [
        (
            {"optimizer.name": "rmsprop"},
            ["--set optimizer.name=rmsprop", "['sgd', 'adam']", "--set optimizer.name=sgd"],
        ),
        ({"optimizer.lr": 0.2}, ["--set optimizer.lr=0.2", "[0.0001, 0.03]", "'adam'", "--set optimizer.name="]),
        (
            {"optimizer.beta": 1},
            ["'optimizer.beta'", "optimizer.beta1, optimizer.lr, optimizer.momentum, optimizer.name"],
        ),
    ],
)
def test_a_conditional_spaces_keys_are_checked_against_their_branches(overrides: dict, words: list[str]) -> None:
    with pytest.raises(ExperimentError) as info:
        apply_overrides(_conditional_space(), {}, overrides)
    for word in words:
        assert word in str(info.value)


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
    config = spaces.flatten(experiment.defaults)
    config.update(spaces.flatten(concrete(dict(experiment.space))))
    config["a.phrase"] = "two words, 'quoted'"  # a string no shipped default has
    words = set_flags(config).split()  # what the shell makes of $(...): no unquoting
    assert words[0::2] == ["--set"] * len(config)
    assert dict(parse_assignment(word) for word in words[1::2]) == config


def test_the_baseline_is_the_centre_of_each_dimension_unless_named() -> None:
    space = {
        "lr": tune.loguniform(1e-4, 1e-2),
        "dropout": tune.quniform(0.0, 0.5, 0.1),
        "width": tune.randint(8, 65),  # 8..64: Tune's randint excludes its upper bound
        "optimizer": tune.choice(["adam", "sgd", "rmsprop"]),
        "train": {"batch": tune.grid_search([16, 32, 64, 128]), "epochs": 3},
    }
    point = spaces.baseline_point(space, {})
    assert point["lr"] == pytest.approx(1e-3)  # geometric midpoint on a log scale
    assert point["dropout"] == pytest.approx(0.2)  # 0.25, to the nearest of its 0.1 steps (0.2 or 0.3)
    assert point == {**point, "width": 36, "optimizer": "sgd", "train.batch": 32}
    assert "train.epochs" not in point  # fixed values are the experiment's
    named = spaces.baseline_point(space, {"train": {"batch": 128}, "lr": 1e-4})
    assert named["train.batch"] == 128 and named["lr"] == 1e-4 and named["width"] == 36
    pinned = {**space, "lr": 0.005}  # --set lr=0.005: the baseline's lr is dropped, not refused
    assert "lr" not in spaces.baseline_point(pinned, {"lr": 1e-4})
    with pytest.raises(ExperimentError, match=r"Experiment.baseline\['width'\]=100: width is searched in \[8, 65\]"):
        spaces.baseline_point(space, {"width": 100})
    with pytest.raises(ExperimentError, match="names 'momentum', which is not a searched dimension"):
        spaces.baseline_point(space, {"momentum": 0.9})


def test_the_centre_is_the_number_a_user_reads_not_floating_point_noise() -> None:
    # Before: exp(mean of the logs) of (3e-4, 3e-2) printed and recorded as 0.002999999999999999.
    from tunetrain.space import centre

    assert centre(tune.loguniform(3e-4, 3e-2)) == 0.003
    assert centre(tune.quniform(0.0, 0.6, 0.1)) == 0.3  # not 0.30000000000000004
    assert centre(tune.qloguniform(1e-4, 1e-1, 1e-4)) == 0.0032
    assert centre(tune.randint(1, 10)) == 5 and isinstance(centre(tune.randint(1, 10)), int)
