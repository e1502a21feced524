"""Which tracking store a command uses, as MLflow's own tools decide it: the flag, then
``MLFLOW_TRACKING_URI``, then the embedded default (``./mlflow.db``); checked before anything
else happens, so that a store that is not there is an error at once, not a hang or a new file."""

from __future__ import annotations

import dataclasses
import os
import urllib.error
import urllib.request
from pathlib import Path

from tunetrain import _internals
from tunetrain.errors import ExperimentError
from tunetrain.redaction import redact, split_credentials
from tunetrain.storage import folder_unwritable, nearest_folder
from tunetrain.tracking._rules import sqlite_path
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
        return f"tracking {redact(self.uri)} (from {self.source})"

    @property
    def sqlite_path(self) -> Path | None:
        return sqlite_path(self.uri)


def resolve_tracking_uri(given: str | TrackingURI | None, *, flag: str = "--tracking-uri") -> TrackingURI:
    """``given`` (what ``flag`` said), else ``MLFLOW_TRACKING_URI``, else ``./mlflow.db``; an
    unknown scheme is bad input. A :class:`TrackingURI` is one resolved already (a sweep
    resolves its store once and hands it down): returned as it is."""
    if isinstance(given, TrackingURI):
        return given
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
    clean, user, password = split_credentials(found.uri)
    if clean != found.uri:
        # A server's user and password go to MLflow's client as its own variables, so that
        # no tag, journal, log line or printed command holds them (docs/tracking.md).
        if user is not None:
            os.environ["MLFLOW_TRACKING_USERNAME"] = user
        if password is not None:
            os.environ["MLFLOW_TRACKING_PASSWORD"] = password
        found = TrackingURI(clean, found.source)
    return found


def store_for_sweep(given: str | TrackingURI | None, *, experiment_name: str | None) -> TrackingURI:
    """The store a sweep records to, as :func:`resolve_tracking_uri` finds it, checked before
    Ray starts: a server that does not answer, and (``experiment_name`` given: the sweep
    records) a store that would refuse the sweep's runs, are errors now."""
    store = resolve_tracking_uri(given)
    check_reachable(store)
    if experiment_name is not None:
        check_writable(store, experiment_name)
    return store


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


def check_writable(tracking: TrackingURI, experiment_name: str) -> None:
    """Before anything starts: the sweep's store must be able to take its runs. Refuses
    (ExperimentError) a sqlite file or folder it cannot write, and an experiment of that name
    that was deleted (MLflow keeps a deleted experiment's name: a sweep could record nothing
    into it). A server's experiment is asked for; other databases are left to the recorder."""
    path = tracking.sqlite_path
    if path is not None:
        problem = _sqlite_unwritable(path)
        if problem:
            raise ExperimentError(
                f"The tracking store {redact(tracking.uri)} (from {tracking.source}) cannot be written: {problem}.",
                fix="Point --tracking-uri (or MLFLOW_TRACKING_URI) at a sqlite file in a folder you can write, "
                "e.g. sqlite:///mlflow.db, or fix the permissions.",
            )
        stage = _internals.sqlite_experiment_stage(path, experiment_name) if path.exists() else None
    elif tracking.uri.startswith(("http://", "https://")):
        stage = _server_experiment_stage(tracking.uri, experiment_name)
    else:
        return
    if stage == "deleted":
        raise ExperimentError(
            f"The MLflow experiment {experiment_name!r} in {redact(tracking.uri)} was deleted (in the UI or with "
            "`mlflow experiments delete`); MLflow keeps its name, so the sweep could record nothing into it.",
            fix="Restore it (`mlflow experiments restore --experiment-id ID`, or the UI), or remove it for "
            f"good (`mlflow gc --backend-store-uri {redact(tracking.uri)}`), or give the experiment another name.",
        )


def _sqlite_unwritable(path: Path) -> str | None:
    """Why a sqlite store at ``path`` cannot be written, or None: the file itself, if there,
    and its folder (sqlite writes its journal beside the file; a new store is created there)."""
    if path.exists():
        try:
            with path.open("r+b"):
                pass
        except OSError as exc:
            return f"{path} is not writable ({exc.strerror or exc})"
    return folder_unwritable(nearest_folder(path.parent))


def _server_experiment_stage(uri: str, name: str) -> str | None:
    from mlflow.tracking import MlflowClient

    try:
        experiment = MlflowClient(tracking_uri=uri).get_experiment_by_name(name)
    except Exception:  # the server's answer is left to the recorder, which says it
        return None
    return experiment.lifecycle_stage if experiment is not None else None


def artifact_location(tracking_uri: str) -> str | None:
    """For the embedded sqlite store, the artifacts beside the database file; else the store's own."""
    db = TrackingURI(tracking_uri, "").sqlite_path
    return (db.parent / "mlartifacts").resolve().as_uri() if db is not None else None
