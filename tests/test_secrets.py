"""Nothing a sweep writes leaks a credential: a real `mlflow server` behind a basic-auth proxy
on loopback, a real sweep through the CLI with the password in its tracking URI, then every
file of the store, the journal and the logs searched for it. And the redaction rule itself."""

from __future__ import annotations

import base64
import http.client
import http.server
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import run_cli, small_experiment, write_experiment
from tunetrain.redaction import redact, split_credentials, strip_credentials

SECRET = "s3cr3t-pw"
EXPERIMENT = small_experiment("secret", steps=2, samples=2, baseline=True)


def test_redact_masks_user_info_and_secret_query_values() -> None:
    assert redact("--tracking-uri https://me:pw@host:5000/x") == "--tracking-uri https://***@host:5000/x"
    assert redact("postgresql://u:pw@db/mlflow and s3://b/k?X-Amz-Signature=abc&x=1") == (
        "postgresql://***@db/mlflow and s3://b/k?X-Amz-Signature=***&x=1"
    )
    assert redact("https://host/?token=abc") == "https://host/?token=***"
    assert redact("sqlite:////tmp/mlflow.db") == "sqlite:////tmp/mlflow.db"
    assert split_credentials("https://me:p%40w@host:5000/x") == ("https://host:5000/x", "me", "p@w")
    assert strip_credentials("postgresql://u:pw@db:5432/mlflow") == "postgresql://u@db:5432/mlflow"
    assert strip_credentials("http://u:pw@h:1") == "http://h:1"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _auth_proxy(backend_port: int, user: str, password: str) -> tuple[http.server.ThreadingHTTPServer, int]:
    """A basic-auth gate in front of the MLflow server, as a reverse proxy would be: a request
    without the right Authorization header gets 401, the others are forwarded as they are."""
    expected = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()

    class Gate(http.server.BaseHTTPRequestHandler):
        def _forward(self) -> None:
            if self.headers.get("Authorization") != expected:
                self.send_response(401)
                self.send_header("WWW-Authenticate", 'Basic realm="mlflow"')
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            connection = http.client.HTTPConnection("127.0.0.1", backend_port, timeout=60)
            headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "authorization")}
            connection.request(self.command, self.path, body=body, headers=headers)
            answer = connection.getresponse()
            data = answer.read()
            self.send_response(answer.status)
            for key, value in answer.getheaders():
                if key.lower() not in ("transfer-encoding", "content-length", "connection"):
                    self.send_header(key, value)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            connection.close()

        do_GET = do_POST = do_PUT = do_DELETE = do_PATCH = _forward

        def log_message(self, format: str, *args: object) -> None:  # quiet
            return

    port = _free_port()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", port), Gate)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, port


@pytest.fixture()
def guarded_server(workdir: Path) -> Iterator[tuple[str, Path, list[str]]]:
    from tunetrain.tracking import start_ui_server, stop_ui_server

    backend = workdir / "server"
    backend.mkdir()
    server, _ = start_ui_server(
        f"sqlite:///{backend / 'server.db'}", port=_free_port(), artifacts_destination=str(backend / "artifacts")
    )
    proxy, port = _auth_proxy(int(_server_port(server)), "alice", SECRET)
    try:
        yield f"http://alice:{SECRET}@127.0.0.1:{port}", backend, [str(arg) for arg in server.args]  # type: ignore[union-attr]
    finally:
        proxy.shutdown()
        stop_ui_server(server)


def _server_port(server: object) -> str:
    args = server.args  # type: ignore[attr-defined]
    return str(args[args.index("--port") + 1])


@pytest.mark.slow  # a real mlflow server
@pytest.mark.usefixtures("ray_cluster")
def test_a_password_in_the_tracking_uri_is_in_no_record_journal_or_log(
    workdir: Path, guarded_server: tuple[str, Path, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    uri, backend, server_argv = guarded_server
    # The server tunetrain started has its store in its environment, not in its argv (`ps`).
    assert "--backend-store-uri" not in server_argv and not any("server.db" in arg for arg in server_argv)
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD"):
        monkeypatch.delenv(name, raising=False)  # put back (unset) after the test
    path = write_experiment(workdir, EXPERIMENT)
    status, out = run_cli("sweep", str(path), "--tracking-uri", uri, "--name", "s", "--no-register")
    assert status == 0, out
    # Recorded through the gate: the server holds the sweep.
    client = MlflowClient(uri.replace(f"alice:{SECRET}@", ""))
    experiment = client.get_experiment_by_name("secret")
    # The parent and 3 trials (2 samples and the baseline).
    assert experiment is not None and len(client.search_runs([experiment.experiment_id])) == 4
    assert SECRET not in out
    leaks = [
        str(file)
        for root in (backend, workdir / "tunetrain_results")
        for file in root.rglob("*")
        if file.is_file() and SECRET.encode() in file.read_bytes()
    ]
    assert leaks == []
