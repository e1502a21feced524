"""notebooks/analyze_sweep.ipynb runs for real (nbclient, a fresh kernel) against a sweep this
test session just ran; its outputs are not committed, so they cannot go stale."""

from __future__ import annotations

import os

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import REPO, AnalysedSweep

NOTEBOOK = REPO / "notebooks" / "analyze_sweep.ipynb"


def test_committed_notebook_has_no_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
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
