"""``tunetrain register`` and a sweep's end: the best model in MLflow's Model Registry."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import EXPERIMENTS, run_cli
from tunetrain.results.analysis import load_sweep

pytestmark = pytest.mark.usefixtures("ray_cluster")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _digits_validation() -> tuple[np.ndarray, np.ndarray]:
    """The held-out split the mlp_digits trials report val_acc on, as they prepare it."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("mlp_digits_for_test", EXPERIMENTS / "mlp_digits.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x, y = module.make_datasets(seed=0)[1].tensors
    return x.numpy(), y.numpy()


@pytest.mark.slow
def test_a_sweep_registers_its_best_model_which_mlflow_loads_predicts_and_serves(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import mlflow
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    status, out = run_cli(
        "sweep", str(EXPERIMENTS / "mlp_digits.py"), "--num-samples", "2", "--set", "epochs=3", "--no-report",
        "--no-baseline", "--name", "reg",
    )  # fmt: skip
    assert status == 0, out
    sweep = load_sweep("reg")
    best = sweep.best(1).iloc[0]
    assert f"Registered models:/mlp_digits/1 from {best['trial']}'s checkpoint" in out, out
    client = MlflowClient(uri)
    version = client.get_model_version("mlp_digits", "1")
    # The version links back to the sweep, the trial's run, its config and seed.
    assert version.run_id == best["run_id"]
    assert version.tags["tunetrain.sweep"] == "reg" and version.tags["tunetrain.trial_run_id"] == best["run_id"]
    assert json.loads(version.tags["tunetrain.config"])["hidden"] == best["config/hidden"]
    assert version.tags["tunetrain.seed"] == str(best["seed"])
    assert sweep.tags["tunetrain.registered_model"] == "mlp_digits/1"
    assert "models:/mlp_digits@champion -> version 1" in out, out
    assert str(client.get_model_version_by_alias("mlp_digits", "champion").version) == "1"
    # A real model: it loads through pyfunc and scores what the trial recorded on the same split.
    # (The store by the environment, put back after the test: mlflow.set_tracking_uri would
    # point every later test of this process at this store.)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    model = mlflow.pyfunc.load_model("models:/mlp_digits/1")
    x, y = _digits_validation()
    accuracy = float((np.asarray(model.predict(x)).argmax(axis=1) == y).mean())
    assert accuracy == pytest.approx(best["best_val_acc"], abs=1e-9)
    # Its signature (from the experiment's export_example) and its pinned requirements.
    import torch

    info = mlflow.models.get_model_info("models:/mlp_digits/1")
    assert info.signature is not None, "no signature"
    (spec,) = info.signature.inputs.inputs
    assert tuple(spec.shape) == (-1, 64) and str(spec.type) == "float32", spec
    requirements = Path(mlflow.pyfunc.get_model_dependencies("models:/mlp_digits/1")).read_text().split()
    assert f"torch=={torch.__version__.split('+')[0]}" in requirements
    assert f"mlflow=={mlflow.__version__}" in requirements
    # `mlflow models serve` answers an /invocations request (started and stopped here, by pid).
    port = _free_port()
    server = subprocess.Popen(
        [sys.executable, "-m", "mlflow", "models", "serve", "-m", "models:/mlp_digits/1", "--env-manager", "local",
         "-h", "127.0.0.1", "-p", str(port)],
        env={**os.environ, "MLFLOW_TRACKING_URI": uri}, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        start_new_session=True,
    )  # fmt: skip
    try:
        assert server.stderr is not None
        said = []
        for line in iter(server.stderr.readline, b""):  # until it says it listens (or dies: EOF)
            said.append(line.decode(errors="replace"))
            if f"127.0.0.1:{port}" in said[-1] and (
                "running on" in said[-1].lower() or "listening" in said[-1].lower()
            ):
                break
        else:
            pytest.fail("mlflow models serve ended before it listened:\n" + "".join(said))
        request = urllib.request.Request(
            f"http://127.0.0.1:{port}/invocations",
            data=json.dumps({"inputs": x[:3].tolist()}).encode(),
            headers={"Content-Type": "application/json"},
        )
        with urllib.request.urlopen(request, timeout=60) as response:
            predictions = np.asarray(json.loads(response.read())["predictions"])
        assert predictions.shape == (3, 10)
        assert np.allclose(predictions, np.asarray(model.predict(x[:3])), atol=1e-5)
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(timeout=30)


def test_register_without_export_model_registers_the_checkpoint_folder_with_a_note(
    workdir: Path, analysed_sweep: object
) -> None:
    from mlflow.tracking import MlflowClient

    from tests.conftest import AnalysedSweep

    assert isinstance(analysed_sweep, AnalysedSweep)
    uri = analysed_sweep.tracking_uri
    status, out = run_cli("register", "analysed-1", "--trial", "trial_0001", "--name", "plain", "--tracking-uri", uri)
    assert status == 0, out
    assert "Registered models:/plain/1 from trial_0001's checkpoint" in out and "no export_model" in out
    version = MlflowClient(uri).get_model_version("plain", "1")
    assert "not an MLflow model" in (version.description or "")
    assert (version.source or "").endswith("/best_checkpoint")
    assert version.run_id is not None
    files = {f.path for f in MlflowClient(uri).list_artifacts(version.run_id, "best_checkpoint")}
    assert files == {"best_checkpoint/state.json"}
    status, out = run_cli("register", "analysed-1", "--trial", "trial_9999", "--tracking-uri", uri)
    assert status == 2 and "--trial 'trial_9999' is not a trial of sweep 'analysed-1'" in out
    # An explicit --alias moves to the version registered, whatever it scores.
    status, out = run_cli(
        "register", "analysed-1", "--trial", "trial_0000", "--name", "plain", "--alias", "chosen", "--tracking-uri", uri
    )
    assert status == 0 and "models:/plain@chosen -> version 2" in out, out
    assert str(MlflowClient(uri).get_model_version_by_alias("plain", "chosen").version) == "2"
    note = load_sweep("analysed-1", tracking_uri=uri).tags["mlflow.note.content"]
    assert note.count("**Registered:**") == 1 and "[plain version 2](#/models/plain/versions/2)" in note


def test_a_sweep_opens_as_training_runs_describes_its_best_and_moves_champion_to_its_model(
    analysed_sweep: object,
) -> None:
    from mlflow.tracking import MlflowClient

    from tests.conftest import AnalysedSweep

    assert isinstance(analysed_sweep, AnalysedSweep)
    uri = analysed_sweep.tracking_uri
    client = MlflowClient(uri)
    sweep = load_sweep("analysed-1", tracking_uri=uri)
    experiment = client.get_experiment_by_name(sweep.experiment)
    assert experiment is not None
    # MLflow 3's UI opens the experiment on its training runs, not on the GenAI traces view.
    assert experiment.tags["mlflow.experimentKind"] == "custom_model_development"
    # The parent run's description: the report's link once one is logged, the best trial
    # (linked), its value and config, the model.
    note = sweep.tags["mlflow.note.content"]
    if "tunetrain.report" in sweep.tags:  # (another test of the session may have written a report)
        report = f"**Report:** [{sweep.tags['tunetrain.report'].rpartition('/')[2]}]("
        assert note.startswith(report), note
        note = note.partition("\n\n")[2]
    best, best_run = sweep.tags["tunetrain.best_trial"], sweep.tags["tunetrain.best_run_id"]
    assert note.startswith(f"**Best trial:** [{best}](#/experiments/{experiment.experiment_id}/runs/{best_run}), ")
    assert json.loads(note.split("```json\n")[1].split("\n```")[0]) == json.loads(sweep.tags["tunetrain.best_config"])
    # The sweep registered version 1, and @champion (held by none before) went to it.
    assert f"models:/{sweep.experiment}@champion -> version 1" in analysed_sweep.output
    assert str(client.get_model_version_by_alias(sweep.experiment, "champion").version) == "1"


def test_champion_moves_only_to_a_better_version(tmp_path: Path) -> None:
    from mlflow.tracking import MlflowClient

    from tunetrain.tracking.registry import RegisteredVersion, promote_if_better

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    client.create_registered_model("m")

    def version(loss: float | None) -> RegisteredVersion:
        tags = {} if loss is None else {"tunetrain.best_loss": f"{loss:.6g}"}
        made = client.create_model_version("m", source=str(tmp_path), tags=tags)
        return RegisteredVersion("m", str(made.version), f"models:/m/{made.version}", "checkpoint")

    def promote(candidate: RegisteredVersion, loss: float) -> str:
        return promote_if_better(uri, candidate, "champion", metric="loss", mode="min", value=loss)

    assert promote(version(0.5), 0.5) == "models:/m@champion -> version 1"  # nobody held it
    assert promote(version(0.7), 0.7) == (
        "models:/m@champion stays on version 1: its loss 0.5 is at least as good as version 2's 0.7"
    )
    assert promote(version(0.5), 0.5).startswith("models:/m@champion stays on version 1")  # a tie keeps it
    assert promote(version(0.4), 0.4) == "models:/m@champion -> version 4 (loss 0.4 beats version 1's 0.5)"
    assert str(client.get_model_version_by_alias("m", "champion").version) == "4"
    client.delete_model_version_tag("m", "4", "tunetrain.best_loss")  # a holder with nothing to compare
    assert promote(version(0.9), 0.9) == "models:/m@champion -> version 5 (version 4 has no loss to compare)"


def test_the_gpt2_experiment_exports_a_model_mlflow_saves_and_another_process_loads(tmp_path: Path) -> None:
    import torch

    from tunetrain import load_experiment
    from tunetrain import space as spaces
    from tunetrain.tracking import register_version

    gpt2 = load_experiment(EXPERIMENTS / "gpt2_lr.py")
    assert gpt2.export_model is not None and gpt2.export_example is not None
    config = spaces.merge(gpt2.defaults, spaces.unflatten(spaces.baseline_point(gpt2.space, {})))
    file_module = sys.modules[gpt2.train_loop.__module__]  # the experiment file, as load_experiment imported it
    trained = file_module.build_model(config, vocab_size=256)
    torch.save({"model": trained.state_dict()}, tmp_path / "state.pt")  # as the train loop saves it
    model = gpt2.export_model(str(tmp_path), config)
    example = gpt2.export_example(config)
    assert tuple(model(torch.as_tensor(example)).shape) == (2, 16, 256)  # next-token logits
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(uri)
    run = client.create_run(client.create_experiment("gpt2", artifact_location=(tmp_path / "art").as_uri()))
    client.set_terminated(run.info.run_id)
    version = register_version(
        tracking_uri=uri, run_id=run.info.run_id, name="gpt2", checkpoint_dir=str(tmp_path), model=model,
        input_example=example, tags={},
    )  # fmt: skip
    # A fresh interpreter, which cannot import the experiment file's module: the class came by value.
    code = (
        f"import mlflow, numpy as np; mlflow.set_tracking_uri({uri!r}); "
        f"print(mlflow.pyfunc.load_model({version.model_uri!r}).predict(np.zeros((1, 16), dtype=np.int64)).shape)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "(1, 16, 256)"
