#!/usr/bin/env python
"""Screenshots of the MLflow UI on a sweep, as `tunetrain ui` opens it, with headless Chromium.

    python scripts/mlflow_ui_screenshot.py --output-dir docs/images/analysis [SWEEP] [--tracking-uri URI]

Runs `tunetrain ui [SWEEP]` on a free port of 127.0.0.1, opens the two links it prints (the
sweep's trials, and its report on the parent run; run `tunetrain report SWEEP` first when the
sweep has none) and saves `mlflow_trials.png` and `mlflow_report.png`. The same functions
(tests/browser.py) check those pages in CI (tests/test_ui_browser.py). Needs Chromium
(Debian: `apt-get install -y chromium`; .ci/run installs it).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import browser
from tunetrain import tracking


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", nargs="?", help="sweep name or parent run id (default: the newest)")
    parser.add_argument("--tracking-uri", default=None, help="default: sqlite:///./mlflow.db")
    parser.add_argument("--output-dir", default=".", help="where the two PNGs go")
    parser.add_argument("--size", default="1600,900", help="window width,height in pixels")
    args = parser.parse_args()

    uri = args.tracking_uri or tracking.default_tracking_uri()
    folder = Path(args.output_dir)
    folder.mkdir(parents=True, exist_ok=True)
    with browser.tunetrain_ui(uri, args.sweep) as links:
        for name, link in (("mlflow_trials.png", links["trials"]), ("mlflow_report.png", links["report"])):
            print(f"{browser.screenshot(link, folder / name, size=args.size)}  ({link})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
