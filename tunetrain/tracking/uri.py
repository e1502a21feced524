"""Which tracking store a command uses, as MLflow's own tools decide it: the flag, then
``MLFLOW_TRACKING_URI``, then the embedded default (``./mlflow.db``); checked before anything
else happens, so that a store that is not there is an error at once, not a hang or a new file."""

from __future__ import annotations

import dataclasses
import os
import urllib.error
import urllib.request
from pathlib import Path

from tunetrain.errors import ExperimentError
from tunetrain.tracking.store import default_tracking_uri

ENV = "MLFLOW_TRACKING_URI"
# The stores MLflow's tracking client knows (a database URI may name its driver: postgresql+psycopg2).
SCHEMES = ("sqlite", "postgresql", "mysql", "mssql", "http", "https", "file", "databricks")
CONNECT_TIMEOUT_S = 5.0


@dataclasses.dataclass(frozen=True)
class TrackingURI:
    """A tracking URI and where it came from (the flag, the environment, the default)."""

    uri: str
    source: str

    def __str__(self) -> str:
        return self.uri

    def line(self) -> str:
        """One line that says which store and why: ``tracking sqlite:///... (from ...)``."""
        return f"tracking {self.uri} (from {self.source})"

    @property
    def sqlite_path(self) -> Path | None:
        return Path(self.uri[len("sqlite:///") :]) if self.uri.startswith("sqlite:///") else None


def resolve_tracking_uri(given: str | None, *, flag: str = "--tracking-uri") -> TrackingURI:
    """``given`` (what ``flag`` said), else ``MLFLOW_TRACKING_URI``, else ``./mlflow.db``; an
    unknown scheme is bad input."""
    if given:
        found = TrackingURI(given, flag)
    elif os.environ.get(ENV):
        found = TrackingURI(os.environ[ENV], ENV)
    else:
        return TrackingURI(default_tracking_uri(), "the default, ./mlflow.db")
    scheme = found.uri.split("://", 1)[0].split("+", 1)[0].lower() if "://" in found.uri else "file"
    if scheme not in SCHEMES:
        raise ExperimentError(
            f"{found.source} is {found.uri!r}, whose scheme {scheme!r} is not a tracking store MLflow knows "
            f"({', '.join(SCHEMES)}).",
            fix="Use sqlite:///PATH/mlflow.db, the http(s)://HOST:PORT of an MLflow server, or a database URI "
            "(postgresql://...).",
        )
    return found


def check_reachable(tracking: TrackingURI, *, timeout_s: float = CONNECT_TIMEOUT_S) -> None:
    """An MLflow server must answer within ``timeout_s`` (any HTTP answer will do); raises
    ExperimentError naming the URI otherwise. Other stores are left to MLflow."""
    if not tracking.uri.startswith(("http://", "https://")):
        return
    try:
        with urllib.request.urlopen(f"{tracking.uri.rstrip('/')}/health", timeout=timeout_s):
            return
    except urllib.error.HTTPError:
        return  # it answered
    except (urllib.error.URLError, OSError, ValueError) as exc:
        reason = getattr(exc, "reason", exc)
        raise ExperimentError(
            f"Nothing answers at the tracking URI {tracking.uri} (from {tracking.source}) within "
            f"{timeout_s:g} s: {reason}.",
            fix="Start the MLflow server (mlflow server --host HOST --port PORT), or point --tracking-uri / "
            f"{ENV} at one that runs.",
        ) from None


def check_existing(tracking: TrackingURI) -> None:
    """For commands that only read: the store must be there (reading a sqlite path that does
    not exist would create a database, and its folders). Raises ExperimentError naming the
    path and where this folder's sweeps go."""
    path = tracking.sqlite_path
    if path is None:
        check_reachable(tracking)
        return
    if path.exists():
        return
    env = os.environ.get(ENV)
    default = default_tracking_uri()
    raise ExperimentError(
        f"No MLflow store at {path} (the tracking URI from {tracking.source}). Sweeps run from this folder "
        f"record to {default}" + (f"; {ENV} is {env}" if env else f"; {ENV} is not set") + ".",
        fix="Run this from the folder the sweep ran in, or pass --tracking-uri with the sweep's store "
        f"(sqlite:///PATH/mlflow.db or a server), or set {ENV}.",
    )
