"""Small helpers every tracking module shares."""

from __future__ import annotations

import logging
import os

# Metric points wait at most this long to go out together in one log_batch call (a
# trial's end, flush() and close() write them at once).
METRIC_FLUSH_INTERVAL_S = 1.0

# MLflow's own limits for one log_batch call.
_MAX_METRICS_PER_BATCH = 1000
_MAX_PARAMS_PER_BATCH = 100
_MAX_TAGS_PER_BATCH = 100
_MAX_PARAM_LENGTH = 6000
_MAX_TAG_LENGTH = 8000


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
