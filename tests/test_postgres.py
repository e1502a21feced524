"""A team tracking server on PostgreSQL: ``mlflow server`` over a real PostgreSQL (Debian's
package, started here on loopback, see tests/postgres.py), a sweep through it killed with
SIGKILL and resumed, ``tunetrain show`` reading it back; and tunetrain's bulk metric path
(the seam's ``sql_log_metrics``) writing on PostgreSQL exactly the rows ``log_batch`` writes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.postgres import Postgres
from tests.test_fault_tolerance import check_complete_record, journal_entries, start_sweep_and_wait
from tests.test_internals import check_sql_log_metrics
from tunetrain.tracking import Journal, start_ui_server, stop_ui_server

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def postgres() -> Iterator[Postgres]:
    server = Postgres()
    try:
        server.start()
        yield server
    finally:
        server.stop()


def test_the_bulk_metric_path_writes_what_log_batch_writes_on_postgresql(postgres: Postgres) -> None:
    stores = {how: postgres.create_database(f"seam_{how}") for how in ("log_batch", "sql")}
    check_sql_log_metrics(stores)


@pytest.mark.own_ray  # the sweep runs in a subprocess with its own Ray
def test_a_sweep_killed_and_resumed_through_an_mlflow_server_on_postgresql(
    postgres: Postgres, workdir: Path, tmp_path: Path
) -> None:
    from tests.test_cluster import free_port

    backend = postgres.create_database("mlflow")
    server, uri = start_ui_server(backend, port=free_port(), artifacts_destination=str(tmp_path / "artifacts"))
    try:
        process, journal = start_sweep_and_wait(workdir, ended=1, args=("--tracking-uri", uri))
        process.kill()  # SIGKILL mid-sweep: no clean-up of any kind
        process.communicate(timeout=60)
        finished = {e["trial"] for e in journal_entries(journal) if e["op"] == "end_trial"}
        assert 1 <= len(finished) < 6
        parent_run_id = Journal.read(journal).parent_run_id
        assert parent_run_id is not None

        resumed = subprocess.run(
            [sys.executable, "-m", "tunetrain", "resume", "s1"], cwd=workdir, capture_output=True, text=True
        )
        assert resumed.returncode == 0, resumed.stdout + resumed.stderr
        assert uri in resumed.stdout  # the journal's store, the server
        check_complete_record(workdir, parent_run_id, tracking_uri=uri)  # six trials, every step once

        shown = subprocess.run(
            [sys.executable, "-m", "tunetrain", "show", "s1", "--tracking-uri", uri],
            cwd=workdir,
            capture_output=True,
            text=True,
        )
        assert shown.returncode == 0, shown.stdout + shown.stderr
        assert shown.stdout.count("completed") == 6, shown.stdout
        # The runs are in PostgreSQL, not in a local store: the server's database holds them.
        import sqlalchemy as sa

        engine = sa.create_engine(backend)
        with engine.connect() as conn:
            assert conn.execute(sa.text("SELECT count(*) FROM runs")).scalar() == 7  # the parent and six trials
        engine.dispose()
    finally:
        stop_ui_server(server)
