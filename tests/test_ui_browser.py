"""The links `tunetrain ui` prints, opened in a real headless Chromium (Debian's, installed by
.ci/run) against the real MLflow UI it starts: the sweep's trials in MLflow 3's Model training
view with the objective and the tuned parameters as columns, and its report one click away.
The same functions make the screenshots in docs/ (scripts/mlflow_ui_screenshot.py)."""

from __future__ import annotations

import pytest

from tests import browser
from tests.conftest import AnalysedSweep, run_cli
from tunetrain.results.analysis import load_sweep

pytestmark = pytest.mark.slow


def test_the_printed_links_open_the_sweeps_trials_with_their_columns_and_its_report(
    analysed_sweep: AnalysedSweep,
) -> None:
    uri = analysed_sweep.tracking_uri
    status, out = run_cli(
        "report", "analysed-1", "--tracking-uri", uri, "--output", str(analysed_sweep.folder / "analysed-1_report.html")
    )
    assert status == 0, out
    sweep = load_sweep("analysed-1", tracking_uri=uri)
    with browser.tunetrain_ui(uri, "analysed-1") as links:
        trials = browser.dump_dom(links["trials"])
        report = browser.dump_dom(links["report"])
        parent = browser.dump_dom(links["report"].split("/artifactPath/")[0] + "?workflowType=machine_learning")
    words = browser.text(trials)
    # The Model training view (its side bar: Runs, Models), not the GenAI one (Observability,
    # Sessions, Judges), which MLflow 3.17 opens by default whatever the experiment's kind.
    assert "Observability" not in words and "Judges" not in words and "Run Name" in words, words[:2000]
    # The objective and every tuned parameter are columns of the table, not behind "Show more".
    shown = browser.columns(trials)
    assert "metrics.`loss`" in shown and {f"params.`{p}`" for p in sweep.params} <= shown, shown
    # Only the sweep's trials, best loss first (MLflow's rows, in order).
    best_first = [t for t in sweep.best(len(sweep.runs))["trial"] if t in words]
    assert best_first and [words.index(t) for t in best_first] == sorted(words.index(t) for t in best_first)
    assert sweep.name not in words.split("Run Name", 1)[1].split("matching runs")[0]  # not the parent run
    # The report: the parent run's artifact, rendered in place by MLflow's HTML viewer.
    assert 'class="mlflow-html-iframe"' in report and "analysed-1_report.html" in browser.text(report)
    # One click from the parent run: the first line of its description.
    assert "Report: analysed-1_report.html" in browser.text(parent)
