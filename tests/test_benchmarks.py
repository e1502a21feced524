"""The benchmarks run (tiny sizes); their figures are never asserted here (see docs/benchmarks.md)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = [pytest.mark.slow, pytest.mark.bench, pytest.mark.own_ray]


def test_every_benchmark_script_runs_and_writes_its_section(tmp_path: Path) -> None:
    # The scripts start their own Rays (own_ray: this process's is shut down first).
    output = tmp_path / "benchmarks.md"
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "run_all"), "--smoke", "--output", str(output)],
        capture_output=True,
        text=True,
        env={**os.environ, "TUNETRAIN_BENCH_DIR": str(tmp_path / "work")},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    text = output.read_text()
    # One section per target, each with its table and verdict (Met / Not met).
    for title in (
        "1. Trial start-up",
        "2. Sweep efficiency",
        "3. Bookkeeping",
        "4. Tracking cost",
        "5. Searcher overhead",
        "6. Training-loop overhead",
        "7. Search efficiency",
        "8. Driver memory",
        "9. Loading a sweep for analysis",
        "10. CLI answer time",
        "11. PBT exploit on 2-worker trials",
        "12. A 1,000-trial sweep",
        "13. Warm start",
        "14. Fixed cost of one sweep",
    ):
        assert f"## {title}" in text, title
    assert text.count("**Met:") + text.count("**Not met:") >= 14


def test_the_curves_recording_runs_a_sweep_per_problem_and_the_second_seeds(tmp_path: Path) -> None:
    # The shipped curves' regeneration command, at 2 epochs of 4 configs (--smoke), the second
    # seed's sweep for the first problem only.
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "record_curves.py"), "--smoke"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for problem, curves in (("digits", 8), ("mnist1d", 4), ("chars", 4)):
        assert f"curves_{problem}.json.gz: {curves} curves; curves_{problem} " in proc.stdout, proc.stdout
    assert "curves_digits_seed1 " in proc.stdout, proc.stdout


def test_the_start_up_rule_ab_runs_and_optunas_rule_makes_rays_draws(tmp_path: Path) -> None:
    # docs/benchmarks.md section 15 reads "results" (Optuna's start-up rule in tunetrain's TPE)
    # as Ray's stock OptunaSearch, so that the rule is the whole difference: their columns agree.
    proc = subprocess.run(
        [sys.executable, str(REPO / "benchmarks" / "startup_rule_ab.py"), "--seeds", "3", "--ks", "4"],
        capture_output=True,
        text=True,
        env={**os.environ, "TUNETRAIN_BENCH_DIR": str(tmp_path / "work")},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = [line.split(" | ") for line in proc.stdout.splitlines() if line.startswith(("| branin", "| hartmann6"))]
    assert len(rows) == 2, proc.stdout
    for row in rows:
        assert row[3] == row[4], row  # results == stock
