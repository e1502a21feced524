"""The MLflow UI (or a tracking server) on a store, started and stopped by tunetrain."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
from typing import Any, Literal

from tunetrain.errors import ExperimentError
from tunetrain.redaction import redact


def ui_command(tracking_uri: str) -> str:
    """The command that opens the MLflow UI on this store."""
    if tracking_uri.startswith(("http://", "https://")):
        return f"open {tracking_uri}"
    return f"mlflow ui --backend-store-uri {redact(tracking_uri)}"


def sweep_page(experiment_id: str, parent_run_id: str, *, metric: str, mode: str) -> str:
    """The MLflow UI's path (after the server's address) to one sweep's trials: its
    experiment's runs page filtered to the sweep's child runs (``mlflow.parentRunId``), sorted
    by the objective, best first, in the Model training view. MLflow 3's runs page keeps its
    search, sort and order in these URL parameters (``searchFilter``, ``orderByKey``,
    ``orderByAsc``); which columns it shows it keeps in the browser only (see
    :func:`sweep_view`, which adds them)."""
    import urllib.parse

    query = urllib.parse.urlencode({**_facets(parent_run_id, metric, mode), **_TRAINING}, quote_via=urllib.parse.quote)
    return f"/#/experiments/{experiment_id}/runs?{query}"


# MLflow 3.17's UI opens an experiment in its GenAI view (traces) or its Model training view
# (runs) by a switch whose value is the URL's `workflowType` parameter, else the browser's
# stored choice (localStorage `mlflow.workflowType`, GenAI until the user flips it); the
# experiment's `mlflow.experimentKind` tag is read only with the switch hidden. Read from
# the UI's bundle (mlflow/server/js/build, the WorkflowType context); tests/test_ui_browser.py
# checks the page a real Chromium renders.
_TRAINING = {"workflowType": "machine_learning"}
# MLflow's limit on an experiment tag's value (SQL stores).
_MAX_EXPERIMENT_TAG = 5000


def _facets(parent_run_id: str, metric: str, mode: str) -> dict[str, str]:
    return {
        "searchFilter": f"tags.mlflow.parentRunId = '{parent_run_id}'",
        "orderByKey": f"metrics.`{metric}`",
        "orderByAsc": "true" if mode == "min" else "false",
    }


def sweep_view(
    tracking_uri: str, *, experiment_id: str, parent_run_id: str, metric: str, mode: str, params: list[str]
) -> str:
    """The UI's path to the sweep's trials as :func:`sweep_page`, with the objective and the
    tuned parameters as the table's columns (MLflow shows none of them until the user picks
    them, and a URL cannot carry columns). The view is an experiment tag that MLflow 3's UI
    opens by ``viewStateShareKey`` (what its own "Share" button writes: filter, sort and
    columns in JSON; the key is the view's hash, so writing it again changes nothing). A
    store that refuses the tag (read-only) gets :func:`sweep_page`'s link, without columns."""
    import hashlib
    import json
    import urllib.parse

    from mlflow.exceptions import MlflowException
    from mlflow.tracking import MlflowClient

    from tunetrain.tracking.schema import SHARED_VIEW_TAG_PREFIX

    facets = _facets(parent_run_id, metric, mode)
    columns = [f"metrics.`{metric}`"]
    for param in params:  # as many tuned parameters as the tag takes, in the space's order
        if len(json.dumps({**facets, "selectedColumns": [*columns, f"params.`{param}`"]})) > _MAX_EXPERIMENT_TAG:
            break
        columns.append(f"params.`{param}`")
    state = json.dumps({**facets, "orderByAsc": mode == "min", "selectedColumns": columns}, sort_keys=True)
    key = "tunetrain-" + hashlib.sha256(state.encode()).hexdigest()[:16]
    try:
        MlflowClient(tracking_uri).set_experiment_tag(experiment_id, SHARED_VIEW_TAG_PREFIX + key, state)
    except MlflowException:
        return sweep_page(experiment_id, parent_run_id, metric=metric, mode=mode)
    query = urllib.parse.urlencode({"viewStateShareKey": key, **_TRAINING})
    return f"/#/experiments/{experiment_id}/runs?{query}"


def report_page(experiment_id: str, run_id: str, artifact: str) -> str:
    """The UI's path to an artifact of a run, shown in place (an HTML file rendered), in the
    Model training view."""
    return f"/#/experiments/{experiment_id}/runs/{run_id}/artifactPath/{artifact}?workflowType=machine_learning"


def port_holder(tracking_uri: str, *, port: int, host: str = "127.0.0.1") -> Literal["free", "same_store", "other"]:
    """What holds ``host:port``: nothing; an MLflow UI or server on this store (the same
    experiments, ids, names and creation times, as its REST API lists them); or anything else
    (another store's UI, another program). ``mlflow ui`` on a taken port fails to bind while
    the old server goes on answering, so its link would open the old one."""
    import json
    import socket

    from mlflow.tracking import MlflowClient

    with socket.socket() as probe:
        probe.settimeout(2)
        if probe.connect_ex((host, port)) != 0:
            return "free"
    try:
        url = f"http://{host}:{port}/api/2.0/mlflow/experiments/search?max_results=1000"
        with urllib.request.urlopen(url, timeout=5) as response:
            theirs = {_experiment_key(e) for e in json.loads(response.read()).get("experiments", [])}
    except (urllib.error.URLError, ConnectionError, TimeoutError, ValueError):
        return "other"
    ours = {
        _experiment_key({"experiment_id": e.experiment_id, "name": e.name, "creation_time": e.creation_time})
        for e in MlflowClient(tracking_uri).search_experiments(max_results=1000)
    }
    return "same_store" if ours and theirs == ours else "other"


def _experiment_key(experiment: dict[str, Any]) -> tuple[str, str, str]:
    return (str(experiment.get("experiment_id")), str(experiment.get("name")), str(experiment.get("creation_time")))


def free_port(*, near: int, host: str = "127.0.0.1") -> int:
    """The first port after ``near`` (up to 20 on) that nothing listens on, else one the
    system picks."""
    import socket

    for port in range(near + 1, min(near + 21, 65536)):
        with socket.socket() as probe:
            if probe.connect_ex((host, port)) != 0:
                return port
    with socket.socket() as probe:
        probe.bind((host, 0))
        return int(probe.getsockname()[1])


def start_ui_server(
    tracking_uri: str,
    *,
    host: str = "127.0.0.1",
    port: int = 5000,
    timeout_s: float = 180.0,
    artifacts_destination: str | None = None,
) -> tuple[subprocess.Popen[bytes], str]:
    """Start ``mlflow ui`` on the store and return it once it answers ``/health``, with its URL.
    With ``artifacts_destination``: ``mlflow server`` serving artifacts from there, as a
    shared tracking server does.

    The caller stops it with :func:`stop_ui_server`. A server that exits or stays silent for
    ``timeout_s`` is an error that includes its output.
    """
    url = f"http://{host}:{port}"
    command = [sys.executable, "-m", "mlflow", "ui" if artifacts_destination is None else "server"]
    # The store's URI reaches the server in its environment (MLflow's MLFLOW_BACKEND_STORE_URI),
    # not its arguments: a database password in them would show in every `ps`.
    command += ["--host", host, "--port", str(port), "--workers", "1"]
    if artifacts_destination is not None:
        command += ["--artifacts-destination", artifacts_destination]
    # Its own process group: mlflow ui runs the web server as a child process, and stopping
    # the group stops both.
    server = subprocess.Popen(
        command,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        env={**os.environ, "MLFLOW_BACKEND_STORE_URI": tracking_uri},
    )
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if server.poll() is not None:
                output = server.stdout.read().decode(errors="replace") if server.stdout else ""
                raise ExperimentError(
                    f"The MLflow UI server exited with status {server.returncode} before answering on {url}:\n"
                    f"{output[-2000:]}",
                    fix=f"Is port {port} free? Pass another with --port.",
                )
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                    if response.status == 200:
                        return server, url
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.25)  # polling a server's start-up: the wait ends on its answer, not on time
    except BaseException:  # Ctrl+C or a signal while it starts: it does not outlive the caller
        stop_ui_server(server)
        raise
    stop_ui_server(server)
    raise ExperimentError(
        f"The MLflow UI server did not answer on {url} within {timeout_s:.0f} s.",
        fix="Start it by hand to see why: " + " ".join(command[1:]) + f" --backend-store-uri {redact(tracking_uri)}",
    )


def stop_ui_server(server: subprocess.Popen[bytes]) -> None:
    """Stop a server from :func:`start_ui_server` and its child processes."""
    import signal

    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(server.pid, sig)
        except ProcessLookupError:
            return
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            continue
        return
