"""Headless Chromium against a real MLflow UI, for tests/test_ui_browser.py and for the
screenshots in docs/ (scripts/mlflow_ui_screenshot.py uses the same functions).

The UI is started by ``tunetrain ui`` itself, in a subprocess, and the links are the ones it
prints: what a user opens is what is checked."""

from __future__ import annotations

import contextlib
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

# Headless Chromium on a closed network: no first-run, sync or background connections.
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-dev-shm-usage",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
]
RENDER_MS = 20_000  # virtual time the page gets to load its data and render


def chromium() -> str:
    """Debian's Chromium (installed by .ci/run), or another Chromium or Chrome."""
    found = next((b for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)
    if found is None:
        raise RuntimeError("No Chromium on this machine: apt-get install -y chromium (.ci/run installs it).")
    return found


def _run(url: str, *what: str, size: str) -> str:
    with tempfile.TemporaryDirectory() as profile:
        command = [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={profile}", f"--window-size={size}"]
        command += [f"--virtual-time-budget={RENDER_MS}", *what, url]
        done = subprocess.run(command, check=True, capture_output=True, text=True, timeout=300)
    return done.stdout


def dump_dom(url: str, *, size: str = "1600,1000") -> str:
    """The page's DOM once its scripts ran (Chromium's ``--dump-dom``)."""
    return _run(url, "--dump-dom", size=size)


def screenshot(url: str, output: Path, *, size: str = "1600,1000") -> Path:
    _run(url, f"--screenshot={output.resolve()}", size=size)
    return output


def columns(dom: str) -> set[str]:
    """The runs table's column ids (``metrics.`loss```, ``params.`lr```, ...)."""
    return set(re.findall(r'col-id="([^"]+)"', dom))


def text(dom: str) -> str:
    """The page's visible words, in one line."""
    dom = re.sub(r"<(script|style)\b.*?</\1>", " ", dom, flags=re.S)
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def tunetrain_ui(tracking_uri: str, sweep: str | None = None, *, report: bool = True) -> Iterator[dict[str, str]]:
    """``tunetrain ui [SWEEP]`` running on a free port: the links it printed, ``trials`` and
    (``report``: the sweep has one) ``report``. Stopped with Ctrl+C on leaving."""
    command = [sys.executable, "-m", "tunetrain", "ui", *([sweep] if sweep else [])]
    command += ["--tracking-uri", tracking_uri, "--port", str(free_port())]
    ui = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert ui.stdout is not None
        said: list[str] = []
        links: list[str] = []
        while len(links) < (2 if report else 1):  # printed once the server answers
            said.append(line := ui.stdout.readline())
            assert line, f"tunetrain ui ended: {said}"
            links += re.findall(r"http://127\.0\.0\.1\S+", line)
        yield {"trials": links[0], **({"report": links[1]} if report else {})}
    finally:
        ui.send_signal(signal.SIGINT)
        ui.wait(timeout=120)
