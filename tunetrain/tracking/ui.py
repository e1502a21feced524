"""The MLflow UI (or a tracking server) on a store, started and stopped by tunetrain."""

from __future__ import annotations

import os
import subprocess
import sys
import time
import urllib.error
import urllib.request

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
    by the objective, best first. MLflow 3's runs page keeps its search, sort and order in
    these URL parameters (``searchFilter``, ``orderByKey``, ``orderByAsc``)."""
    import urllib.parse

    query = urllib.parse.urlencode(
        {
            "searchFilter": f"tags.mlflow.parentRunId = '{parent_run_id}'",
            "orderByKey": f"metrics.`{metric}`",
            "orderByAsc": "true" if mode == "min" else "false",
        },
        quote_via=urllib.parse.quote,
    )
    return f"/#/experiments/{experiment_id}/runs?{query}"


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
