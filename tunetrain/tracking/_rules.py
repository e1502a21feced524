"""Small helpers every tracking module shares."""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunetrain import space as spaces
from tunetrain.errors import ExperimentError

# Metric points wait at most this long to go out together in one log_batch call (a
# trial's end, flush() and close() write them at once).
METRIC_FLUSH_INTERVAL_S = 1.0

# MLflow's own limits for one log_batch call.
_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_PER_BATCH = 100
_MAX_TAGS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
_MAX_TAG_LENGTH = 8000


# MLflow error codes that say the request itself is wrong: retrying cannot help.
_PERMANENT_CODES = {"INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST", "BAD_REQUEST"}


def _transient(exc: BaseException) -> bool:
    """Whether a tracking error is the store being away (retry later) rather than a bad request."""
    from mlflow.exceptions import MlflowException

    if isinstance(exc, MlflowException):
        return exc.error_code not in _PERMANENT_CODES or "failed with exception" in str(exc)
    if isinstance(exc, OSError | ConnectionError | TimeoutError):
        return True
    return type(exc).__name__ in ("OperationalError", "ConnectionError", "Timeout", "ReadTimeout", "ConnectTimeout")


def _quiet_mlflow_logging() -> None:
    # Database migrations and store set-up log at INFO on every new sqlite file.
    for name in ("alembic", "mlflow"):
        logging.getLogger(name).setLevel(logging.WARNING)
    # No progress bar on the console for each artifact read back.
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    # On an http store MLflow 3 writes "View run ... at" and "View experiment at" to stdout
    # whenever a run ends: two lines per trial. The summary names the UI once.
    os.environ.setdefault("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "true")


def _trim(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


@functools.lru_cache(maxsize=4096)  # a sweep reports the same few names at every step
def metric_key_problem(key: str) -> str | None:
    """Why the store would refuse ``key`` as a metric name (MLflow's rule, in its words), or
    None when it takes it."""
    from tunetrain import _internals

    return _internals.mlflow_metric_key_problem(key)


def param_value_problem(value: Any) -> str | None:
    """Why the store would cut ``value`` as a trial's param (longer as text than MLflow keeps:
    ``best`` and ``--config-from`` would read it back wrong), or None. A param's name follows
    the rule for metric names (:func:`metric_key_problem`)."""
    length = len(str(value))
    if length > _MAX_PARAM_LENGTH:
        return (
            f"its value is {length:,} characters long as MLflow records it, and MLflow keeps params of at most "
            f"{_MAX_PARAM_LENGTH:,}"
        )
    return None


def suggested_metric_key(key: str) -> str:
    """A name MLflow takes for a refused ``key``: each other character becomes ``_``, and
    leading slashes and ``..`` path parts go (``acc@1`` -> ``acc_1``)."""
    import re

    name = re.sub(r"[^\w.\- :/]", "_", key)
    name = "/".join(part for part in name.split("/") if part not in ("", ".", ".."))
    return name[:250] or "metric"


def check_params(space: Mapping[str, Any], defaults: Mapping[str, Any]) -> None:
    """Each value a trial can get is a param the store takes whole: its name by MLflow's
    rule (the one for metric names), every value it can take (each choice, each grid point,
    a fixed value) within MLflow's length; refused before Ray starts (ExperimentError),
    rather than cut or refused once trials have run."""
    for field, mapping in (("space", space), ("defaults", defaults)):
        for key, value in spaces.iter_leaves(mapping):
            said = f"Experiment.{field} key {key!r} is recorded as an MLflow param of each trial, but"
            if (problem := metric_key_problem(key)) is not None:
                raise ExperimentError(
                    f"{said} MLflow refuses {key!r} as a param name: {problem}",
                    fix=f"Rename it (for example {suggested_metric_key(key)!r}).",
                )
            options = spaces.options(value)
            for option in options if options is not None else ([] if spaces.is_domain(value) else [value]):
                if (problem := param_value_problem(option)) is not None:
                    raise ExperimentError(
                        f"{said} {problem}.",
                        fix=f"Keep long values out of the config: give {key!r} a short name or a file path and "
                        "read the long value in the train loop.",
                    )


def sqlite_path(uri: str) -> Path | None:
    """The database file of a ``sqlite:///PATH`` tracking URI (None for any other store)."""
    return Path(uri[len("sqlite:///") :]) if uri.startswith("sqlite:///") else None
