"""A sweep report: one self-contained HTML file (plots embedded as PNG), plus the PNGs.

``python -m tunetrain report SWEEP`` writes it and logs it with the PNGs as artifacts of the
sweep's parent run (under ``report/``), so the MLflow UI shows them; ``sweep`` does the same
at its end unless ``--no-report``.
"""

from __future__ import annotations

import base64
import html
import io
import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from tunetrain.results.analysis import Sweep
from tunetrain.results.plots import importance_omitted, sweep_figures

__all__ = ["write_report"]

REPORT_ARTIFACT_DIR = "report"

_STYLE = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1100px; color: #222; }
h1 { font-size: 1.6em; } h2 { font-size: 1.2em; margin-top: 1.8em; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; font-size: 0.85em; } td, th { padding: 3px 8px; border: 1px solid #ddd; }
th { background: #f4f4f4; text-align: left; } pre { background: #f6f6f6; padding: 0.8em; }
img { max-width: 100%; margin: 0.5em 0; } .muted { color: #777; }
"""


def _table(rows: Mapping[str, Any]) -> str:
    cells = "".join(f"<tr><th>{html.escape(str(k))}</th><td>{html.escape(str(v))}</td></tr>" for k, v in rows.items())
    return f"<table>{cells}</table>"


def _png(figure: Any) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=100)
    return buffer.getvalue()


def _top_table(sweep: Sweep, top_k: int) -> str:
    top = sweep.best(top_k) if sweep.metric in sweep.metrics else pd.DataFrame()
    if top.empty:
        trials = sweep.trials()
        diverged = int((trials["status"] == "diverged").sum()) if len(trials) else 0
        why = f": {diverged} trial(s) diverged (NaN or infinite)" if diverged else ""
        return f"<p class='muted'>No trial reported a finite value of the metric{why}.</p>"
    columns = ["trial", "baseline", "status", "iterations"]
    columns += [c for c in top.columns if c.startswith(("best_", "config/"))]
    columns += [m for m in sweep.metrics if m in top.columns and f"best_{m}" not in columns][:4]
    columns += ["seed", "run_id"]
    return str(top[columns].to_html(index=False, float_format=lambda v: f"{v:.6g}", na_rep="", border=0))


def _confirmation(sweep: Sweep) -> str:
    """A ``tunetrain confirm`` sweep's configurations: the spread of the metric over the seeds."""
    table = sweep.confirmation()
    if table.empty:
        return ""
    confirms = html.escape(sweep.settings().get("confirms", "?"))
    return (
        f"<h2>Confirmation of {confirms}: best {html.escape(sweep.metric)} per configuration over its seeds</h2>"
        + str(table.to_html(index=False, float_format=lambda v: f"{v:.6g}", na_rep="", border=0))
    )


def write_report(sweep: Sweep, output: str | Path, *, top_k: int = 10, log_to_mlflow: bool = True) -> Path:
    """Write ``output`` (an .html file) and its PNGs next to it (``<stem>_figures/``);
    with ``log_to_mlflow``, log them as artifacts of the sweep's parent run. Returns the path."""
    if top_k < 1:
        raise ValueError(f"top_k must be at least 1, but got {top_k=}.")
    output = Path(output)
    figures_dir = output.with_name(f"{output.stem}_figures")
    figures_dir.mkdir(parents=True, exist_ok=True)
    trials = sweep.trials()
    counts = trials["status"].value_counts().to_dict() if len(trials) else {}
    best = sweep.best(1) if sweep.metric in sweep.metrics else pd.DataFrame()
    best_value = best.iloc[0][f"best_{sweep.metric}"] if not best.empty else math.nan
    figures = sweep_figures(sweep)
    pngs: list[Path] = []
    images = []
    for name, figure in figures.items():
        data = _png(figure)
        path = figures_dir / f"{name}.png"
        path.write_bytes(data)
        pngs.append(path)
        encoded = base64.b64encode(data).decode()
        title = html.escape(name.replace("_", " "))
        images.append(f"<h3>{title}</h3><img alt='{name}' src='data:image/png;base64,{encoded}'>")
    summary = {
        "experiment": sweep.experiment,
        "sweep": sweep.name,
        "parent run id": sweep.run_id,
        "objectives": ", ".join(f"{m} ({mode})" for m, mode in sweep.objectives),
        "trials": ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) or "0",
        f"best {sweep.metric}": f"{best_value:.6g}" if math.isfinite(float(best_value)) else "-",
        "best trial": best.iloc[0]["trial"] if not best.empty else "-",
        "best checkpoint": (best.iloc[0]["checkpoint"] or "-") if not best.empty else "-",
        "against the baseline": sweep.versus_baseline() or "no baseline trial",
    }
    if (omitted := importance_omitted(sweep)) is not None:
        images.append(f"<p class='muted'>{html.escape(omitted)}</p>")
    settings = {k: v for k, v in sweep.settings().items() if not k.startswith(("pareto", "best_config"))}
    best_config = json.dumps(sweep.best_config(), indent=2, default=str) if not best.empty else "{}"
    space = sweep.space
    body = f"""<!DOCTYPE html>
<html><head><meta charset="utf-8"><title>{html.escape(sweep.name)}: tunetrain sweep report</title>
<style>{_STYLE}</style></head><body>
<h1>Sweep {html.escape(sweep.name)}</h1>
{_table(summary)}
<h2>Best config</h2>
<pre>{html.escape(best_config, quote=False)}</pre>
<h2>Top {top_k} trials by {html.escape(sweep.metric)} ({sweep.mode})</h2>
{_top_table(sweep, top_k)}
{_confirmation(sweep)}
<h2>Plots</h2>
{"".join(images) or "<p class='muted'>No metric was reported: nothing to plot.</p>"}
<h2>Search space</h2>
{_table(space) if space else "<p class='muted'>(no searched parameters)</p>"}
<h2>Sweep settings</h2>
{_table(settings)}
<h2>Environment</h2>
{_table(sweep.environment())}
</body></html>
"""
    output.write_text(body, encoding="utf-8")
    if log_to_mlflow:
        sweep.store.log_artifacts(sweep.run_id, [output], artifact_path=REPORT_ARTIFACT_DIR)
        sweep.store.log_artifacts(sweep.run_id, pngs, artifact_path=REPORT_ARTIFACT_DIR)
        sweep.store.link_report(sweep.run_id, f"{REPORT_ARTIFACT_DIR}/{output.name}")
    return output
