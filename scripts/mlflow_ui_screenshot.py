#!/usr/bin/env python
"""Screenshot of the MLflow UI comparing a sweep's trials, taken with headless Chromium.

    python scripts/mlflow_ui_screenshot.py --output compare.png [SWEEP] [--tracking-uri URI]

Starts the MLflow UI on a free port of 127.0.0.1 for the store, opens its compare-runs page
for the sweep's child runs (one per trial), lets the page render and saves a PNG. Needs a
Chromium or Chrome binary (Debian: `apt-get install -y chromium`); not part of CI.
"""

from __future__ import annotations

import argparse
import json
import shutil
import socket
import subprocess
import sys
import tempfile
import urllib.parse
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tunetrain import tracking
from tunetrain.results.analysis import load_sweep

# Headless Chromium on a closed network: no first-run, sync or background connections.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def compare_url(base: str, experiment_id: str, run_ids: list[str]) -> str:
    """MLflow's own compare-runs route, as the UI's Compare button builds it."""
    query = urllib.parse.urlencode({"runs": json.dumps(run_ids), "experiments": json.dumps([experiment_id])})
    return f"{base}/#/compare-runs?{query}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", help="sweep name or parent run id (default: the newest)")
    parser.add_argument("--tracking-uri", default=None, help="default: sqlite:///./mlflow.db")
    parser.add_argument("--output", default="mlflow_compare.png")
    parser.add_argument(
        "--chromium", default=None, help="browser binary (default: chromium, chromium-browser or google-chrome)"
    )
    parser.add_argument("--size", default="1600,1100", help="window width,height in pixels")
    parser.add_argument("--render-ms", type=int, default=20000, help="virtual time the page gets to render")
    args = parser.parse_args()

    browser = args.chromium or next(
        (b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None
    )
    if browser is None:
        print("No Chromium found. Install one (Debian: apt-get install -y chromium) or pass --chromium PATH.")
        return 2
    uri = args.tracking_uri or tracking.default_tracking_uri()
    sweep = load_sweep(args.sweep, tracking_uri=uri)
    server, base = tracking.start_ui_server(uri, port=free_port())
    try:
        url = compare_url(base, sweep.parent.experiment_id, [run.run_id for run in sweep.runs])
        output = Path(args.output).resolve()
        with tempfile.TemporaryDirectory() as profile:
            command = [
                browser,
                *CHROMIUM_FLAGS,
                f"--user-data-dir={profile}",
                f"--window-size={args.size}",
                f"--virtual-time-budget={args.render_ms}",
                f"--screenshot={output}",
                url,
            ]
            subprocess.run(command, check=True, capture_output=True, timeout=300)
    finally:
        tracking.stop_ui_server(server)
    print(f"{output} ({len(sweep.runs)} trials of {sweep.name}, {url})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
