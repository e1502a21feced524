"""``tunetrain serve``: a sweep's registered model on Ray Serve, answering a real HTTP request
with what MLflow's own loader predicts, refusing a bad request with 400, and stopping cleanly
on SIGTERM; bad input refused before Ray starts."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.conftest import run_cli
from tests.test_register import EXPERIMENTS, _digits_validation, _free_port


def _post(url: str, body: object) -> tuple[int, dict[str, object]]:
    request = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


@pytest.mark.slow
@pytest.mark.own_ray  # the sweep and the server run in subprocesses, each with its own Ray
def test_a_sweeps_model_served_on_ray_serve_answers_http_and_stops_on_sigterm(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow

    sweep = subprocess.run(
        [sys.executable, "-m", "tunetrain", "sweep", str(EXPERIMENTS / "mlp_digits.py"), "--num-samples", "1",
         "--set", "epochs=2", "--no-report", "--no-baseline", "--name", "served"],
        cwd=workdir, capture_output=True, text=True,
    )  # fmt: skip
    assert sweep.returncode == 0 and "models:/mlp_digits@champion -> version 1" in sweep.stdout, sweep.stdout
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "tunetrain", "serve", "served", "--port", str(port), "--num-cpus", "0.5"],
        cwd=workdir, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        said = []
        for line in iter(server.stdout.readline, ""):  # until it says it serves (or exits: EOF)
            said.append(line)
            if "stops it" in line:
                break
        out = "".join(said)
        assert f"Serving models:/mlp_digits/1 on Ray Serve at http://127.0.0.1:{port}/invocations" in out, out
        assert "Downloading artifacts" not in out and "INFO" not in out, out  # one line of ours, no one else's
        x, _ = _digits_validation()
        status, answer = _post(f"http://127.0.0.1:{port}/invocations", {"inputs": x[:3].tolist()})
        assert status == 200, answer
        monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{workdir / 'mlflow.db'}")
        expected = np.asarray(mlflow.pyfunc.load_model("models:/mlp_digits/1").predict(x[:3]))
        assert np.allclose(np.asarray(answer["predictions"]), expected, atol=1e-5)
        status, answer = _post(f"http://127.0.0.1:{port}/", {"data": [1, 2]})
        assert status == 400 and 'must be JSON with "inputs"' in str(answer["error"]), answer
        status, answer = _post(f"http://127.0.0.1:{port}/invocations", {"inputs": x[:2, :10].tolist()})
        assert status == 400 and "rows of 64 numbers" in str(answer["error"]), answer  # before: a bare 500
    finally:
        server.send_signal(signal.SIGTERM)
        rest, _ = server.communicate(timeout=120)
    assert server.returncode == 0, rest
    assert rest.rstrip().endswith("Stopped serving."), rest


def test_serve_refuses_bad_input_before_ray_starts(workdir: Path) -> None:
    status, out = run_cli("serve", "models:/nope@champion")
    assert status == 2 and "models:/nope@champion names no registered model version in this store" in out, out
    status, out = run_cli("serve", "models:/nope/1", "--replicas", "0")
    assert status == 2 and "--replicas must be an integer >= 1, but got 0." in out, out
    status, out = run_cli("serve", "models:/nope/1", "--num-cpus", "0")
    assert status == 2 and "--num-cpus is each replica's CPUs, more than 0, but got 0.0." in out, out


def test_a_request_that_does_not_fit_the_model_is_refused_naming_the_shape_it_takes(tmp_path: Path) -> None:
    # Before: a wrong shape, "inputs": null or a 3-D array got a bare 500 from the model.
    import mlflow.pyfunc
    import mlflow.pytorch
    import torch

    from tunetrain.tracking.model_files import predict

    x = np.zeros((2, 64), dtype=np.float32)
    # As the registry saves a sweep's model (tracking/registry.py): its input example sets the signature.
    mlflow.pytorch.save_model(torch.nn.Linear(64, 10), str(tmp_path / "model"), input_example=x, pip_requirements=[])
    model = mlflow.pyfunc.load_model(str(tmp_path / "model"))
    assert np.asarray(predict(model, {"inputs": x.tolist()})["predictions"]).shape == (2, 10)
    contract = "a list of rows of 64 numbers (shape [-1, 64], float32)"
    cases: list[tuple[Any, str]] = [
        ({"inputs": np.zeros((2, 10)).tolist()}, "but got shape [2, 10]"),
        ({"inputs": np.zeros((2, 65)).tolist()}, "but got shape [2, 65]"),
        ({"inputs": np.zeros((1, 2, 64)).tolist()}, "but got shape [1, 2, 64]"),
        ({"inputs": [["a"] * 64]}, "but it is not (could not convert string to float"),
        ({"inputs": None}, '{"inputs": ' + contract + "}"),
        ({"data": [1]}, 'must be JSON with "inputs"'),
    ]
    for body, said in cases:
        with pytest.raises(ValueError) as caught:
            predict(model, body)
        assert said in str(caught.value) and contract in str(caught.value), str(caught.value)
