"""The search space: walk nested dicts, flatten keys with dots, the centre and the baseline
point, a value checked against the dimension it replaces and written as one word (`--set`
itself is :mod:`tunetrain.overrides`).

Ray Tune's own distribution objects are the vocabulary of a space; this module only
inspects them (it starts nothing).
"""

from __future__ import annotations

import ast
import copy
import re
import sys
from collections.abc import Iterator, Mapping
from typing import Any

from tunetrain.errors import ExperimentError


def is_grid(value: Any) -> bool:
    return isinstance(value, Mapping) and set(value) == {"grid_search"}


def is_distribution(value: Any) -> bool:
    """A Ray Tune distribution (tune.uniform, tune.choice, ...) or tune.grid_search."""
    return is_domain(value) or is_grid(value)


def is_domain(value: Any) -> bool:
    """A Ray Tune distribution. Ray's module is imported only once one exists (none can
    before), so that reading sweeps back (analysis, the CLI's read commands) never imports
    Ray Tune."""
    if "ray.tune.search.sample" not in sys.modules:
        return False
    from ray.tune.search.sample import Domain

    return isinstance(value, Domain)


def options(value: Any) -> list[Any] | None:
    """The values a tune.choice or a grid search picks from; None for other values."""
    if is_grid(value):
        return list(value["grid_search"])
    categories = getattr(value, "categories", None) if is_domain(value) else None
    return list(categories) if categories is not None else None


def bounds_problem(value: Any) -> str | None:
    """Why a numeric distribution's bounds are wrong (lower not below upper), or None: Ray Tune
    takes them at once (tune.loguniform(1e-1, 1e-4)) and the searcher fails after Ray started."""
    lower, upper = getattr(value, "lower", None), getattr(value, "upper", None)
    if not is_domain(value) or not isinstance(lower, int | float) or not isinstance(upper, int | float):
        return None
    return f"its lower bound {lower!r} is not below its upper bound {upper!r}" if lower >= upper else None


def iter_leaves(mapping: Mapping[str, Any], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """Yield (dotted key, value) for every leaf; nested dicts are walked, grid searches are leaves."""
    for key, value in mapping.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and not is_grid(value):
            yield from iter_leaves(value, dotted + ".")
        else:
            yield dotted, value


def flatten(mapping: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a": {"b": 1}}`` -> ``{"a.b": 1}``."""
    return dict(iter_leaves(mapping))


def unflatten(flat: Mapping[str, Any]) -> dict[str, Any]:
    """``{"a.b": 1}`` -> ``{"a": {"b": 1}}`` (the inverse of :func:`flatten`)."""
    nested: dict[str, Any] = {}
    for key, value in flat.items():
        node = nested
        *parents, last = key.split(".")
        for part in parents:
            node = node.setdefault(part, {})
        node[last] = value
    return nested


def merge(base: Mapping[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Deep-merge two nested dicts; values in ``top`` win."""
    out: dict[str, Any] = copy.deepcopy(dict(base))
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) and not is_grid(value):
            out[key] = merge(out[key], value)
        else:
            out[key] = copy.deepcopy(value)
    return out


def parse_value(text: str) -> Any:
    """A `--set` value: a Python literal where it parses as one, else the plain string."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return text


_BARE = re.compile(r"[A-Za-z0-9_./:@+-]+")


def literal_word(value: Any, *, bare: bool = True) -> str:
    """``value`` as one shell word that :func:`parse_value` reads back as ``value``: no
    whitespace and no shell quoting, so that ``$(tunetrain best --format set)`` (whose output
    the shell splits on whitespace and does not unquote) passes it whole. Strings are bare
    where that reads back the same (``gpt2``), else a Python literal with spaces written
    ``\\x20``; lists, tuples and dicts are written without spaces (strings in them always
    as literals)."""
    if isinstance(value, str):
        if bare and _BARE.fullmatch(value) and parse_value(value) == value:
            return value
        return repr(value).replace(" ", "\\x20")
    if isinstance(value, list):
        return "[" + ",".join(literal_word(v, bare=False) for v in value) + "]"
    if isinstance(value, tuple):
        return "(" + ",".join(literal_word(v, bare=False) for v in value) + ("," if len(value) == 1 else "") + ")"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(f"{literal_word(k, bare=False)}:{literal_word(v, bare=False)}" for k, v in value.items())
            + "}"
        )
    return repr(value)


def checked(key: str, value: Any, current: Any, *, text: str | None = None, said: str | None = None) -> Any:
    """``value`` for ``key`` where the experiment has ``current`` (a default or a space
    dimension), checked against it: an int stays an int, a bool takes true/false, a string
    takes the text as typed, a pinned choice must be one of its choices, a pinned range
    holds the value; otherwise ExperimentError naming ``--set KEY=TEXT`` (or ``said``)."""
    said = said or f"--set {key}={text if text is not None else literal_word(value)}"

    def refuse(rule: str, fix: str) -> ExperimentError:
        return ExperimentError(f"{said}: {rule}, but got {value!r}.", fix=fix)

    number = isinstance(value, int | float) and not isinstance(value, bool)
    if is_domain(current):
        choices = getattr(current, "categories", None)
        if choices is not None:
            if not any(value == c and type(value) is type(c) for c in choices):
                raise refuse(
                    f"{key} is searched over the choices {list(choices)!r}",
                    fix=f"Pin one of them, e.g. --set {key}={literal_word(choices[0])}.",
                )
            return value
        integer = type(current).__name__ == "Integer"
        if not number or (integer and not isinstance(value, int)):
            raise refuse(
                f"{key} is searched over {'integers' if integer else 'numbers'} ({describe(current)})",
                fix=f"Pin a {'whole ' if integer else ''}number in that range.",
            )
        lower, upper = getattr(current, "lower", None), getattr(current, "upper", None)
        if lower is not None and upper is not None and not lower <= value <= upper:
            raise refuse(
                f"{key} is searched in [{lower}, {upper}]",
                fix="Pin a value inside the range, or widen the space in the experiment file.",
            )
        return value
    if current is None or is_grid(current):
        return value
    if isinstance(current, bool):
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        raise refuse(f"{key} is a bool ({current!r})", fix=f"Write --set {key}=true or --set {key}=false.")
    if isinstance(current, int):
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        whole = isinstance(value, float) and value.is_integer()
        kind = f" ({type(value).__name__})" if not isinstance(value, str) else ""
        raise ExperimentError(
            f"{said}: {key} is an integer ({current!r}), but got {value!r}{kind}.",
            fix=f"Write a whole number, e.g. --set {key}={int(value) if whole else current}.",
        )
    if isinstance(current, float):
        if number:
            return float(value)
        raise refuse(f"{key} is a number ({current!r})", fix=f"Write a number, e.g. --set {key}={current!r}.")
    if isinstance(current, str):
        if isinstance(value, str):
            return value
        if text is not None:  # `--set precision=16` where the experiment has a string: the text
            return text
        raise refuse(f"{key} is a string ({current!r})", fix=f"Pass a string, e.g. {key}={current!r}.")
    if isinstance(current, list | tuple):
        if isinstance(value, list | tuple):
            return type(current)(value)
        raise refuse(
            f"{key} is a sequence ({current!r})", fix=f"Write a list, e.g. --set {key}={literal_word(current)}."
        )
    return value


def same_value(a: Any, b: Any) -> bool:
    """Whether two config values are the same value: numbers within float rounding (a value
    read back from an MLflow param, or from a searcher), sequences item by item whatever their
    type (a tuple default, a list param), anything else by ``==``."""
    import math

    if isinstance(a, int | float) and isinstance(b, int | float) and not isinstance(a, bool):
        return math.isclose(float(a), float(b), rel_tol=1e-9)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return list(a) == list(b)
    return bool(a == b)


def holds(config: Mapping[str, Any], point: Mapping[str, Any]) -> bool:
    """Whether a flat ``config`` has every value of the flat ``point`` (:func:`same_value`)."""
    return all(key in config and same_value(config[key], value) for key, value in point.items())


def centre(value: Any) -> Any:
    """The middle of a space dimension: of a range its midpoint (geometric for a log scale,
    rounded to its step, an integer for an integer range), of a choice or a grid its middle
    value (the first of two)."""
    if is_grid(value):
        values = list(value["grid_search"])
        return values[(len(values) - 1) // 2]
    categories = getattr(value, "categories", None)
    if categories is not None:
        return categories[(len(categories) - 1) // 2]
    import math

    from ray.tune.search.sample import Integer, LogUniform, Quantized

    sampler = value.get_sampler()
    step = sampler.q if isinstance(sampler, Quantized) else None
    inner = sampler.get_sampler() if isinstance(sampler, Quantized) else sampler
    integer = isinstance(value, Integer)
    upper = value.upper - 1 if integer and step is None else value.upper  # Tune's randint excludes it
    if isinstance(inner, LogUniform):
        middle = math.exp((math.log(value.lower) + math.log(upper)) / 2)
    else:
        middle = (value.lower + upper) / 2
    if step is not None:
        middle = round(middle / step) * step
    if integer:
        return round(middle)
    # 12 significant digits: 0.003, not the 0.002999999999999999 that exp(mean of logs) or a
    # multiple of a step gives (printed, recorded and compared as the value the user reads).
    return min(max(float(f"{middle:.12g}"), value.lower), value.upper)


def baseline_point(space: Mapping[str, Any], given: Mapping[str, Any]) -> dict[str, Any]:
    """The baseline trial's value of every searched dimension (dotted keys): ``given``'s
    (dotted or nested keys, each checked against its dimension), the :func:`centre` of the
    others. A key of a pinned dimension (``--set``) is ignored; one the space does not have
    raises ExperimentError."""
    searched = {key: value for key, value in iter_leaves(space) if is_distribution(value)}
    named = flatten(given)
    unknown = sorted(set(named) - set(flatten(space)))
    if unknown:
        raise ExperimentError(
            f"Experiment.baseline names {unknown[0]!r}, which is not a searched dimension; the searched "
            f"dimensions are: {', '.join(searched) or '(none)'}.",
            fix="Give the baseline a value for searched dimensions only (fixed values come from defaults).",
        )
    point = {}
    for key, dimension in searched.items():
        if key in named:
            said = f"Experiment.baseline[{key!r}]={named[key]!r}"
            point[key] = named[key] if is_grid(dimension) else checked(key, named[key], dimension, said=said)
        else:
            point[key] = centre(dimension)
    return point


def describe(value: Any) -> str:
    """A short human text for a space value, e.g. ``loguniform(0.0001, 0.1)``."""
    if is_grid(value):
        return f"grid_search({value['grid_search']!r})"
    if isinstance(value, Mapping):  # a branch of a conditional choice
        return "{" + ", ".join(f"{k!r}: {describe(v)}" for k, v in value.items()) + "}"
    if is_domain(value):
        if hasattr(value, "categories"):
            return f"choice([{', '.join(describe(c) for c in value.categories)}])"
        sampler = value.get_sampler()
        kind = type(sampler).__name__.strip("_").lower() if sampler is not None else ""
        return f"{type(value).__name__.lower()} {kind} {value.domain_str}"
    return repr(value)


def free_dimensions(space: Mapping[str, Any]) -> list[str]:
    """Dotted keys of the space that the searcher still chooses."""
    return [key for key, value in iter_leaves(space) if is_distribution(value)]


def has_conditional(space: Mapping[str, Any]) -> bool:
    """Whether a choice in the space decides which other parameters exist: a ``tune.choice``
    whose options are dicts holding distributions of their own."""
    from ray.tune.search.sample import Categorical

    for _, value in iter_leaves(space):
        if isinstance(value, Categorical) and any(
            isinstance(option, Mapping) and any(is_distribution(v) for _, v in iter_leaves(option))
            for option in value.categories
        ):
            return True
    return False


def constants(space: Mapping[str, Any]) -> dict[str, Any]:
    """The space without its distributions (nested dicts kept)."""
    out: dict[str, Any] = {}
    for key, value in space.items():
        if isinstance(value, Mapping):
            out[key] = constants(value)
        elif not is_distribution(value):
            out[key] = value
    return out
