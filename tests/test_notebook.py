"""The notebooks run for real (nbclient, a fresh kernel): notebooks/analyze_sweep.ipynb against a
sweep this test session just ran, notebooks/python_api.ipynb running its own sweep through
``tunetrain.sweep``; their outputs are not committed, so they cannot go stale. A kernel
interrupt (the notebook's Ctrl+C) ends a sweep cleanly and the kernel lives on."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import REPO, AnalysedSweep, write_experiment

NOTEBOOK = REPO / "notebooks" / "analyze_sweep.ipynb"
API_NOTEBOOK = REPO / "notebooks" / "python_api.ipynb"


@pytest.mark.parametrize("path", [NOTEBOOK, API_NOTEBOOK], ids=lambda p: p.name)
def test_committed_notebook_has_no_outputs(path: Path) -> None:
    notebook = nbformat.read(path, as_version=4)
    # Stale outputs would show another sweep than the reader's.
    assert all(not cell.get("outputs") for cell in notebook.cells if cell.cell_type == "code")


@pytest.mark.slow
def test_analysis_notebook_runs_and_draws_its_figures(
    analysed_sweep: AnalysedSweep, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # The kernel inherits the environment: the store and the sweep to load.
    monkeypatch.setenv("TUNETRAIN_TRACKING_URI", analysed_sweep.tracking_uri)
    monkeypatch.setenv("TUNETRAIN_SWEEP", "analysed-1")
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(analysed_sweep.folder)}}
    )
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    images = [o for o in outputs if "image/png" in o.get("data", {})]
    # Curves, importance, parallel coordinates, metric vs params and (ASHA) the rungs.
    assert len(images) == 5
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    # It found the sweep's best config and checkpoint (the toy loop saves state.json).
    assert "checkpoint: " + os.fspath(analysed_sweep.storage) in text and "state.json" in text


def _outputs(notebook: Any) -> tuple[str, list[Any]]:
    outputs = [output for cell in notebook.cells if cell.cell_type == "code" for output in cell.outputs]
    text = "".join(o.get("text", "") for o in outputs if o.get("output_type") == "stream")
    return text, [o for o in outputs if "image/png" in o.get("data", {})]


@pytest.mark.slow
@pytest.mark.own_ray  # the kernel starts its own Ray
def test_both_notebooks_run_from_where_jupyter_starts_them_into_the_roots_store(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    import shutil

    from mlflow.tracking import MlflowClient

    # The repository's layout (its experiments and notebooks), the kernel in notebooks/ as
    # Jupyter starts it: both notebooks find the root above and use its store, not a second one.
    # The Python API notebook runs its sweep (of the default experiment, mlp_digits) through
    # tunetrain.sweep and analyses it; the analysis notebook then finds that sweep.
    (tmp_path / "experiments").mkdir()
    shutil.copy(REPO / "experiments" / "mlp_digits.py", tmp_path / "experiments")
    shutil.copytree(REPO / "notebooks", tmp_path / "notebooks")
    for name in ("TUNETRAIN_EXPERIMENT", "MLFLOW_TRACKING_URI", "TUNETRAIN_TRACKING_URI", "TUNETRAIN_SWEEP"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("TUNETRAIN_NUM_SAMPLES", "2")
    kernel_folder = {"metadata": {"path": str(tmp_path / "notebooks")}}
    api = nbformat.read(tmp_path / "notebooks" / "python_api.ipynb", as_version=4)
    NotebookClient(api, timeout=600, kernel_name="python3", resources=kernel_folder).execute()  # then shut down
    text, images = _outputs(api)
    assert "ok finished" in text, text
    # The sweep's cell: tunetrain's lines, then one live display updated in place (its last
    # state saved, in HTML and plain text), then the summary; no status line per update,
    # nothing wiped (Tune's notebook reporter clears the cell), no widget advice.
    sweep_cell = next(c for c in api.cells if "tunetrain.sweep(" in "".join(c.source))
    kinds = [o.output_type for o in sweep_cell.outputs]
    (display,) = [o for o in sweep_cell.outputs if o.output_type == "display_data"]
    assert display.data["text/plain"].startswith("3/3 trials ended · elapsed "), display.data["text/plain"]
    assert "<progress value='3' max='3'" in display.data["text/html"] and "<table>" in display.data["text/html"]
    before = "".join(o.get("text", "") for o in sweep_cell.outputs[: kinds.index("display_data")])
    assert "Sweep " in before and "Ray: embedded" in before, before
    assert " trials: " not in text and "IPython.core.display.HTML" not in text and "Missing packages" not in text
    assert "clear_output" not in kinds
    # The kernel's shutdown (SIGTERM while Ray shuts down) prints no stack dump.
    assert "SIGTERM received" not in capfd.readouterr().err
    assert "best config: {" in text and f"best checkpoint: {tmp_path / 'tunetrain_results'}" in text, text
    assert len(images) == 1  # the learning curves
    assert (tmp_path / "mlflow.db").exists() and not (tmp_path / "notebooks" / "mlflow.db").exists()
    assert not (tmp_path / "notebooks" / "tunetrain_results").exists()
    recorded_client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    recorded = recorded_client.get_experiment_by_name("mlp_digits")
    assert recorded is not None
    runs = recorded_client.search_runs([recorded.experiment_id])
    assert len(runs) == 4 and all(r.info.status == "FINISHED" for r in runs)  # parent, 2 trials and the baseline
    analysis = nbformat.read(tmp_path / "notebooks" / "analyze_sweep.ipynb", as_version=4)
    NotebookClient(analysis, timeout=300, kernel_name="python3", resources=kernel_folder).execute()
    text, images = _outputs(analysis)
    # The newest sweep of the root's store: the one the first notebook ran, its checkpoint there.
    assert f"checkpoint: {tmp_path / 'tunetrain_results'}{os.sep}mlp_digits-" in text, text
    assert images  # its figures


SLOW = """
import os
import time
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(200):
        if step == 2:  # the test interrupts the kernel once a trial is this far
            open(os.path.join(os.environ["MARK_DIR"], "running"), "w").close()
        time.sleep(0.05)
        ray.train.report({"loss": config["x"] + 1 / (step + 1)})


experiment = Experiment(
    name="slow", train_loop=loop, metric="loss", mode="min", space={"x": tune.uniform(0, 1)},
    num_samples=2, searcher="random", stop=StopRule(max_iterations=200), seed=3, baseline=False,
)
"""


@pytest.mark.slow
@pytest.mark.own_ray  # the kernel starts its own Ray
def test_interrupting_the_kernel_ends_the_sweep_cleanly_and_the_kernel_lives_on(workdir: Path) -> None:
    from jupyter_client.manager import start_new_kernel
    from mlflow.tracking import MlflowClient

    path = write_experiment(workdir, SLOW)
    env = {**os.environ, "MARK_DIR": str(workdir)}
    manager, kernel = start_new_kernel(kernel_name="python3", cwd=str(workdir), env=env)
    try:
        cell = kernel.execute(f"import tunetrain\nresult = tunetrain.sweep({str(path)!r}, report=False)")
        deadline = time.monotonic() + 300
        while not (workdir / "running").exists():  # polling the file a trial writes
            assert time.monotonic() < deadline, "no trial reached step 2"
            time.sleep(0.05)
        manager.interrupt_kernel()  # the notebook's interrupt button: SIGINT to the kernel
        reply = kernel.get_shell_msg(timeout=300)
        while reply["parent_header"].get("msg_id") != cell:
            reply = kernel.get_shell_msg(timeout=300)
        assert reply["content"]["status"] == "ok", reply["content"]  # the cell ended, no traceback
        text = ""
        while True:
            message = kernel.get_iopub_msg(timeout=60)
            if message["parent_header"].get("msg_id") != cell:
                continue
            if message["msg_type"] == "stream":
                text += message["content"]["text"]
            if message["msg_type"] == "status" and message["content"]["execution_state"] == "idle":
                break
        assert "Sweep slow-" in text and "interrupted" in text and "tunetrain resume" in text, text
        # The kernel lives on, and the result says what happened.
        printed: list[str] = []

        def keep(message: dict[str, Any]) -> None:
            if message["msg_type"] == "stream":
                printed.append(message["content"]["text"])

        reply = kernel.execute_interactive("print(result.interrupted, result.name)", timeout=60, output_hook=keep)
        assert reply["content"]["status"] == "ok" and "".join(printed).startswith("True slow-"), printed
    finally:
        manager.shutdown_kernel(now=True)
        kernel.stop_channels()
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    recorded = client.get_experiment_by_name("slow")
    assert recorded is not None
    runs = client.search_runs([recorded.experiment_id])
    assert runs and all(r.info.status != "RUNNING" for r in runs)  # nothing stays RUNNING
    assert any(r.data.tags.get("tunetrain.status") == "interrupted" for r in runs)
