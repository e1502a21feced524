"""The commands that look at recorded sweeps: list, show, best, report, ui."""

from __future__ import annotations

import json
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import AnalysedSweep, run_cli
from tunetrain.results.analysis import load_sweep


def test_list_shows_each_sweep_with_its_trial_count_and_best_value(analysed_sweep: AnalysedSweep) -> None:
    status, out = run_cli("list", "--tracking-uri", analysed_sweep.tracking_uri)
    assert status == 0, out
    best = load_sweep(tracking_uri=analysed_sweep.tracking_uri).best(1).iloc[0]["best_loss"]
    line = next(line for line in out.splitlines() if "analysed-1" in line)
    # name, experiment, date, status, trials (8 and the baseline), metric, mode, best value
    assert line.split()[1] == "analysed" and line.split()[5:9] == ["9", "loss", "min", f"{best:.6g}"]


def test_show_prints_one_row_per_trial_best_first_with_sort(analysed_sweep: AnalysedSweep) -> None:
    status, out = run_cli("show", "analysed-1", "--sort", "--tracking-uri", analysed_sweep.tracking_uri)
    assert status == 0, out
    rows = [line for line in out.splitlines() if line.startswith("trial_")]
    assert len(rows) == 9  # 8 and the baseline
    sweep = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
    best = sweep.best(1).iloc[0]["trial"]
    assert rows[0].split()[0] == best
    versus = sweep.versus_baseline()
    assert versus is not None and out.splitlines()[-1] == versus  # the best trial against the baseline
    assert "config/lr" in out and "best_loss" in out
    # Beside the best step, the step the kept-best checkpoint holds.
    assert "best_step" in out and "checkpoint_step" in out


def test_best_prints_json_a_set_line_and_the_checkpoint(
    analysed_sweep: AnalysedSweep, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    uri = analysed_sweep.tracking_uri
    sweep = load_sweep(tracking_uri=uri)
    status, out = run_cli("best", "--tracking-uri", uri)
    assert status == 0 and json.loads(out) == sweep.best_config()
    status, out = run_cli("best", "--format", "checkpoint", "--tracking-uri", uri)
    assert status == 0 and out.strip() == sweep.best_checkpoint() and Path(out.strip()).is_dir()
    # stdout is the path alone (for $(...)); stderr says which step it holds beside the best step.
    checkpoint = sweep.best_checkpoint()
    assert checkpoint is not None and checkpoint.describe() in capsys.readouterr().err
    assert "checkpoint of step 6" in checkpoint.describe() and "at step 5" in checkpoint.describe()
    status, out = run_cli("best", "--format", "set", "--tracking-uri", uri)
    assert status == 0
    # The --set line pins every searched value when given back to `sweep` (a dry run shows it).
    experiment = analysed_sweep.folder / "exp.py"
    status, plan = run_cli("sweep", str(experiment), "--dry-run", *shlex.split(out))
    assert status == 0, plan
    for key, value in sweep.best_config().items():
        assert f"  {key} = {value!r}\n" in plan
    # As `sweep FILE $(tunetrain best --format set)` passes it: split on whitespace, no unquoting.
    status, plan = run_cli("sweep", str(experiment), "--dry-run", *out.split())
    assert status == 0, plan
    for key, value in sweep.best_config().items():
        assert f"  {key} = {value!r}\n" in plan
    # --config-from does the same from the sweep's name (or a trial's run id); --set wins.
    status, plan = run_cli(
        "sweep", str(experiment), "--dry-run", "--tracking-uri", uri, "--config-from", sweep.name, "--set", "width=9"
    )
    assert status == 0, plan
    for key, value in {**sweep.best_config(), "width": 9}.items():
        assert f"  {key} = {value!r}\n" in plan


def test_report_command_writes_the_html_and_logs_it(analysed_sweep: AnalysedSweep, tmp_path: Path) -> None:
    output = tmp_path / "again.html"
    status, out = run_cli(
        "report", "analysed-1", "--output", str(output), "--tracking-uri", analysed_sweep.tracking_uri
    )
    assert status == 0, out
    assert output.exists() and "Logged on MLflow run" in out


def test_unknown_sweep_is_bad_input_naming_the_known_ones(analysed_sweep: AnalysedSweep) -> None:
    status, out = run_cli("show", "nope", "--tracking-uri", analysed_sweep.tracking_uri)
    assert status == 2
    assert "No sweep named 'nope'" in out and "analysed-1" in out and "tunetrain list" in out


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.mark.slow
def test_ui_serves_the_store_over_mlflows_rest_api_and_stops_on_ctrl_c(analysed_sweep: AnalysedSweep) -> None:
    port = _free_port()
    ui = subprocess.Popen(
        [sys.executable, "-m", "tunetrain", "ui", "--tracking-uri", analysed_sweep.tracking_uri, "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert ui.stdout is not None
        line = ui.stdout.readline()  # printed once the server answers
        url = f"http://127.0.0.1:{port}"
        assert url in line, line
        local = load_sweep("analysed-1", tracking_uri=analysed_sweep.tracking_uri)
        newest = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
        # The link opens the newest sweep's trials (its child runs), best loss first, with loss
        # and the tuned parameters as columns, in the Model training view: a view MLflow's UI
        # reads from an experiment tag (tests/test_ui_browser.py renders it in Chromium).
        link = re.search(
            rf"{url}/#/experiments/(\d+)/runs\?viewStateShareKey=(\S+)&workflowType=machine_learning", line
        )
        assert link is not None and f"(sweep {newest.name}'s trials, lowest loss first)" in line, line
        assert link.group(1) == newest.parent.experiment_id
        tags = MlflowClient(url).get_experiment(link.group(1)).tags
        view = json.loads(tags[f"mlflow.sharedViewState.{link.group(2)}"])
        assert view["searchFilter"] == f"tags.mlflow.parentRunId = '{newest.run_id}'"
        assert view["orderByKey"] == "metrics.`loss`" and view["orderByAsc"] is True
        assert view["selectedColumns"] == ["metrics.`loss`", *(f"params.`{p}`" for p in newest.params)]
        # What the filter says is what MLflow's search returns: the sweep's trials.
        filtered = MlflowClient(url).search_runs(
            [newest.parent.experiment_id], f"tags.mlflow.parentRunId = '{newest.run_id}'"
        )
        assert sorted(r.info.run_id for r in filtered) == sorted(r.run_id for r in newest.runs)
        with urllib.request.urlopen(f"{url}/api/2.0/mlflow/runs/get?run_id={local.run_id}") as response:
            run = json.load(response)["run"]
        # The server reads the same store: the sweep's parent run, by its id.
        assert run["info"]["run_name"] == "analysed-1"
        # The analysis API works against a tracking server too (one query per run and metric).
        remote = load_sweep("analysed-1", tracking_uri=url)
        columns = ["run_id", "trial", "status", "config/lr", "best_loss", "loss", "accuracy"]
        pd.testing.assert_frame_equal(
            remote.trials()[columns].sort_values("run_id").reset_index(drop=True),
            local.trials()[columns].sort_values("run_id").reset_index(drop=True),
        )
        assert len(remote.history()) == len(local.history())
    finally:
        ui.send_signal(signal.SIGINT)
        status = ui.wait(timeout=120)
    assert status == 0
    # Shut down: nothing listens on the port any more.
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))


@pytest.mark.slow
def test_ui_takes_its_server_down_when_it_is_sent_sigterm(tmp_path: Path, store_template: Path) -> None:
    port = _free_port()
    shutil.copyfile(store_template, tmp_path / "mlflow.db")  # ui reads a store; it creates none
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    ui = subprocess.Popen(
        [sys.executable, "-m", "tunetrain", "ui", "--tracking-uri", store, "--port", str(port)],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert ui.stdout is not None
        line = ui.stdout.readline()  # printed once the server answers
        assert f"http://127.0.0.1:{port}" in line and f"kill {ui.pid}" in line, line
    finally:
        ui.send_signal(signal.SIGTERM)  # `kill PID`, as a process manager stops it
        status = ui.wait(timeout=120)
    assert status == 0
    # The MLflow server and its workers went with it: nothing listens on the port.
    with socket.socket() as s, pytest.raises(ConnectionRefusedError):
        s.connect(("127.0.0.1", port))


@pytest.mark.slow
def test_ui_never_links_a_server_it_did_not_start_on_a_port_another_holds(analysed_sweep: AnalysedSweep) -> None:
    # Before: with another server on the port, mlflow ui could not listen, and the printed link
    # opened the other one; nothing said so.
    import http.server
    import threading

    from tunetrain import tracking

    other = http.server.HTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=other.serve_forever, daemon=True).start()
    try:
        port = other.server_address[1]
        status, out = run_cli("ui", "--tracking-uri", analysed_sweep.tracking_uri, "--port", str(port))
        assert status == 2 and f"--port {port} is taken by another server, not an MLflow UI on" in out, out
    finally:
        other.shutdown()
        other.server_close()
    # An MLflow UI on this very store is used as it is: the link, at once, and nothing started.
    server, url = tracking.start_ui_server(analysed_sweep.tracking_uri, port=_free_port())
    try:
        port = int(url.rpartition(":")[2])
        status, out = run_cli("ui", "--tracking-uri", analysed_sweep.tracking_uri, "--port", str(port))
        assert status == 0 and f"An MLflow UI already serves {analysed_sweep.tracking_uri} on port {port}" in out, out
        assert f"{url}/#/experiments/" in out, out
        assert tracking.port_holder(analysed_sweep.tracking_uri, port=port) == "same_store"
        assert tracking.free_port(near=port) != port
    finally:
        tracking.stop_ui_server(server)
