"""A real PostgreSQL server for the tests: Debian's package (``.ci/run`` installs it where it
is missing), a new cluster in a temporary folder (``initdb``), listening on 127.0.0.1 only
at a free port, with trust authentication for its one superuser, ``mlflow``. Started with
``pg_ctl start -w`` (which returns once the server takes connections) and stopped with
``pg_ctl stop -m immediate``. As root, PostgreSQL's programs run as the ``postgres`` user:
initdb refuses to run as root."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path


def _bin(name: str) -> str:
    """A PostgreSQL program: on PATH, else in Debian's /usr/lib/postgresql/VERSION/bin."""
    found = shutil.which(name) or next(iter(sorted(glob.glob(f"/usr/lib/postgresql/*/bin/{name}"), reverse=True)), None)
    assert found, f"PostgreSQL's {name} is not installed (Debian: apt-get install postgresql; .ci/run does)"
    return found


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class Postgres:
    def __init__(self) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix="tt-pg-"))  # /tmp: the postgres user can reach it
        self.data = self.folder / "data"
        self.port = _free_port()
        self.as_postgres = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_postgres:
            shutil.chown(self.folder, "postgres")

    def _run(self, *command: str) -> None:
        done = subprocess.run([*self.as_postgres, *command], capture_output=True, text=True)
        assert done.returncode == 0, f"{command}: {done.stdout}\n{done.stderr}"

    def start(self) -> None:
        self._run(_bin("initdb"), "-D", str(self.data), "-U", "mlflow", "--auth=trust", "--encoding=UTF8")
        options = f"-c listen_addresses=127.0.0.1 -p {self.port} -k {self.folder}"
        log = str(self.folder / "server.log")
        self._run(_bin("pg_ctl"), "start", "-w", "-t", "120", "-D", str(self.data), "-l", log, "-o", options)

    def create_database(self, name: str) -> str:
        """A new database; its SQLAlchemy URI (MLflow's backend store URI)."""
        self._run(_bin("createdb"), "-h", "127.0.0.1", "-p", str(self.port), "-U", "mlflow", name)
        return f"postgresql://mlflow@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        if self.data.exists():
            subprocess.run([*self.as_postgres, _bin("pg_ctl"), "stop", "-m", "immediate", "-D", str(self.data)])
        shutil.rmtree(self.folder, ignore_errors=True)
