"""scripts/gpu_check.sh rehearsed on CPU (``REHEARSAL=1``): every step of the GPU check, its
report and its figures, so that the script is known to work before a GPU's minutes are spent
on it. On a GPU it runs the same commands with --use-gpu and larger sizes."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.own_ray]


def test_the_gpu_check_rehearses_every_step_on_cpu_and_its_checks_pass(tmp_path: Path) -> None:
    out = tmp_path / "gpu_check"
    env = {**os.environ, "REHEARSAL": "1", "OUT": str(out)}
    run = subprocess.run(
        ["bash", str(REPO / "scripts" / "gpu_check.sh")], capture_output=True, text=True, env=env, timeout=900
    )
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-4000:]
    for check in ("bf16 sweep completed", "4 trials packed at once", "replay within 2%", "2-worker trial"):
        assert f"PASS  {check}" in run.stdout, run.stdout[-4000:]
    assert "FAIL" not in run.stdout
    figures = json.loads((out / "gpu_check.json").read_text())
    assert figures["device"] == "cpu" and figures["gpus"] == 0
    assert figures["large_tokens_per_s"] > 0 and figures["plain_tokens_per_s"] > 0 and "ddp_vs_plain" in figures
    assert figures["replay"]["identical"]  # on CPU a replay is exact
