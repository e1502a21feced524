"""``--set key=value``: overrides typed at the command line (or passed as
``overrides={"optimizer.lr": 0.1}``) applied to an experiment's space and defaults, each
value checked against what it replaces (:func:`tunetrain.space.checked`); and a config
written back as ``--set`` flags (``tunetrain best --format set``)."""

from __future__ import annotations

import copy
from collections.abc import Iterator, Mapping
from typing import Any

from tunetrain.errors import ExperimentError
from tunetrain.space import (
    checked,
    describe,
    flatten,
    is_distribution,
    is_domain,
    iter_leaves,
    literal_word,
    parse_value,
)


def _set_dotted(mapping: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = mapping
    for part in parents:
        node = node[part]
    node[leaf] = value


# A space inside a key, in --set's words: `--set my\x20key=1` is the key 'my key', so that the
# flags `tunetrain best --format set` prints stay one shell word each (as values do).
_KEY_SPACE = "\\x20"


def set_flags(config: Mapping[str, Any]) -> str:
    """``--set key=value ...`` for every leaf of ``config``, each value one :func:`literal_word`
    and each space in a key written ``\\x20``: one shell word per flag."""
    return " ".join(
        f"--set {key.replace(' ', _KEY_SPACE)}={literal_word(value)}" for key, value in flatten(config).items()
    )


def parse_assignment(text: str) -> tuple[str, Any]:
    """``key=value`` (``--set``): the key with ``\\x20`` read as a space, the value a literal."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise ExperimentError(
            f"--set takes key=value, but got {text!r}.",
            fix="Write e.g. --set train.max_steps=200 (nested keys joined with dots).",
        )
    return key.strip().replace(_KEY_SPACE, " "), parse_value(value.strip())


def apply_overrides(
    space: Mapping[str, Any],
    defaults: Mapping[str, Any],
    overrides: Mapping[str, Any],
    *,
    texts: Mapping[str, str] | None = None,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Pin space dimensions or change defaults by dotted key; unknown keys fail listing the
    valid ones, and each value is checked against what it replaces (see :func:`checked`).
    ``texts``: the values as the user typed them (``--set``), for the messages."""
    new_space = copy.deepcopy(dict(space))
    new_defaults = copy.deepcopy(dict(defaults))
    default_keys = flatten(new_defaults)
    # Keys inside a conditional choice's branches: those that pick a branch (a constant such
    # as optimizer.name=sgd) go first, so that the keys pinned after them are checked
    # against the branches that are left.
    ordered = sorted(overrides.items(), key=lambda item: not _picks_branch(new_space, item[0]))
    for key, value in ordered:
        text = (texts or {}).get(key)
        space_keys = flatten(new_space)  # again: picking a branch changes the space's keys
        branch_keys = _branch_keys(new_space)
        if key in space_keys:
            _set_dotted(new_space, key, checked(key, value, space_keys[key], text=text))
        elif key in default_keys:
            _set_dotted(new_defaults, key, checked(key, value, default_keys[key], text=text))
        elif key in branch_keys:
            _set_in_branches(new_space, key, value, text=text)
        else:
            valid = sorted(set(space_keys) | set(default_keys) | set(branch_keys))
            raise ExperimentError(
                f"Unknown --set key {key!r}; valid keys are: {', '.join(valid)}.",
                fix="Use one of those keys (nested keys are joined with dots, e.g. train.max_steps).",
            )
    return new_space, new_defaults


def _conditional_choices(space: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(dotted key, choice) for each ``tune.choice`` whose options are dicts (branches)."""
    for key, value in iter_leaves(space):
        categories = getattr(value, "categories", None) if is_domain(value) else None
        if categories and all(isinstance(option, Mapping) for option in categories):
            yield key, value


def _branch_keys(space: Mapping[str, Any]) -> dict[str, str]:
    """``{"optimizer.lr": "optimizer", ...}``: each key inside a conditional choice's branches,
    as ``--set`` names it, and the choice it belongs to."""
    return {
        f"{choice_key}.{inner}": choice_key
        for choice_key, choice in _conditional_choices(space)
        for branch in choice.categories
        for inner in flatten(branch)
    }


def _picks_branch(space: Mapping[str, Any], key: str) -> bool:
    """Whether ``key`` is a branch key that is a constant in some branch (it picks branches)."""
    choice_key = _branch_keys(space).get(key)
    if choice_key is None:
        return False
    inner = key.removeprefix(choice_key + ".")
    choice = flatten(space)[choice_key]
    return any(inner in (leaves := flatten(b)) and not is_distribution(leaves[inner]) for b in choice.categories)


def _set_in_branches(space: dict[str, Any], key: str, value: Any, *, text: str | None) -> None:
    """``--set optimizer.name=sgd`` keeps the branches whose name is sgd; ``--set
    optimizer.lr=0.01`` pins lr in every branch that searches it (checked against each). The
    choice stays a choice (of the branches left), so the searchers still see a conditional space."""
    from ray import tune

    choice_key = _branch_keys(space)[key]
    inner = key.removeprefix(choice_key + ".")
    choice = flatten(space)[choice_key]
    branches = [copy.deepcopy(dict(b)) for b in choice.categories]
    having = [b for b in branches if inner in flatten(b)]
    constants_ = [flatten(b)[inner] for b in having if not is_distribution(flatten(b)[inner])]
    if constants_:  # a branch picker: keep the branches with this value
        kept = [b for b in branches if inner in flatten(b) and flatten(b)[inner] == value]
        if not kept:
            said = f"--set {key}={text if text is not None else literal_word(value)}"
            raise ExperimentError(
                f"{said}: {choice_key} is a choice of branches whose {inner} is one of {constants_!r}, "
                f"but got {value!r}.",
                fix=f"Pick one of them, e.g. --set {key}={literal_word(constants_[0])}.",
            )
    else:  # a branch's own parameter: pinned in each branch that has it
        kept = branches
        for branch in having:
            try:
                _set_dotted(branch, inner, checked(key, value, flatten(branch)[inner], text=text))
            except ExperimentError as exc:
                if len(branches) == 1:
                    raise
                pickers = [k for k in _branch_keys(space) if _picks_branch(space, k)]
                raise ExperimentError(
                    f"{exc.message.removesuffix('.')} (in the branch {describe(branch)}).",
                    fix=f"{exc.fix} Or pick a branch first, e.g. --set {pickers[0]}=..." if pickers else exc.fix,
                ) from None
    # One branch left: it is the space's value there (a nested dict like any other), which
    # every searcher handles; several stay a choice, so the searchers still see a conditional.
    _set_dotted(space, choice_key, kept[0] if len(kept) == 1 else tune.choice(kept))
