from __future__ import annotations

import re
from html import escape as html_escape
from pathlib import Path

from mlflow.tracking import MlflowClient

from tests.conftest import AnalysedSweep
from tunetrain.results.analysis import load_sweep
from tunetrain.results.report import write_report


def test_the_sweep_ends_with_a_report_logged_on_its_parent_run(analysed_sweep: AnalysedSweep) -> None:
    sweep = load_sweep("analysed-1", tracking_uri=analysed_sweep.tracking_uri)
    report = analysed_sweep.storage / "analysed-1" / "report.html"
    # The sweep said where the report is, and wrote it there.
    assert f"Report: {report}" in analysed_sweep.output
    html = report.read_text()
    # Self-contained: every image is embedded, nothing is fetched from elsewhere.
    assert len(re.findall(r"src='data:image/png;base64,", html)) == 5
    assert not re.search(r"src=['\"](?!data:)", html)
    # It holds the best config, the top table and the sweep's settings.
    assert '"optimizer": ' in html and sweep.best(1).iloc[0]["trial"] in html
    assert "asha" in html and "version.ray" in html
    # The best trial against the baseline, as the summary says it (9 finished trials: the
    # importance chart is drawn, one of the 5 images).
    versus = sweep.versus_baseline()
    assert versus is not None and versus in analysed_sweep.output and html_escape(versus) in html
    assert "No hyperparameter importance" not in html
    # The MLflow UI shows it: the HTML and the PNGs are artifacts of the parent run.
    artifacts = {
        a.path for a in MlflowClient(tracking_uri=analysed_sweep.tracking_uri).list_artifacts(sweep.run_id, "report")
    }
    assert {"report/report.html", "report/learning_curves.png", "report/rungs.png"} <= artifacts


def test_write_report_without_mlflow_keeps_the_pngs_beside_the_html(
    analysed_sweep: AnalysedSweep, tmp_path: Path
) -> None:
    sweep = load_sweep("analysed-1", tracking_uri=analysed_sweep.tracking_uri)
    path = write_report(sweep, tmp_path / "r.html", top_k=2, log_to_mlflow=False)
    assert path.exists()
    assert sorted(p.name for p in (tmp_path / "r_figures").iterdir()) == [
        "importance.png",
        "learning_curves.png",
        "metric_vs_params.png",
        "parallel_coordinates.png",
        "rungs.png",
    ]
    # top_k=2: two trial rows in the top table.
    top_table = path.read_text().split("<h2>Top 2 trials by loss (min)</h2>")[1].split("<h2>")[0]
    assert top_table.count("<td>trial_") == 2
