from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import pytest

from tunetrain.console import LiveView, summary
from tunetrain.records import SweepOutcome, TrialRecord


def record(name: str, status: Any, best: float | None, error: str | None = None) -> TrialRecord:
    index = int(name.split("_")[1])
    return TrialRecord(
        name=name,
        index=index,
        trial_id=name,
        config={"lr": 0.1 * (index + 1)},
        seed=index,
        status=status,
        best_value=best,
        error=error,
    )


def test_live_line_counts_states_and_shows_the_best_so_far() -> None:
    view = LiveView(metric="loss", mode="min", total=5, stream=io.StringIO())
    line = view.line([record("trial_0000", "running", 0.5), record("trial_0001", "stopped_early", 0.2)])
    assert "2/5 trials: 3 pending, 1 running, 1 stopped early | best loss=0.2 (trial_0001)" in line


def test_live_view_prints_only_changes_when_not_on_a_terminal() -> None:
    stream = io.StringIO()
    view = LiveView(metric="loss", mode="min", total=2, stream=stream, log_interval_s=0.0)
    trials = [record("trial_0000", "running", None)]
    view.update(trials)
    view.update(trials, force=True)  # nothing changed: nothing printed
    trials[0].status = "completed"
    view.update(trials)
    assert len(stream.getvalue().splitlines()) == 2


def test_live_view_logs_a_few_lines_for_a_long_sweep_and_always_the_final_state() -> None:
    stream = io.StringIO()
    view = LiveView(metric="loss", mode="min", total=200, stream=stream)  # 10 s between log lines
    trials: list[TrialRecord] = []
    for i in range(200):  # 400 changes of state, faster than the log interval
        trials.append(record(f"trial_{i:04d}", "running", None))
        view.update(trials, force=True)
        trials[-1].status = "completed"
        view.update(trials, force=True)
    view.close()
    lines = stream.getvalue().splitlines()
    # The first state and the final one, nothing in between.
    assert len(lines) == 2
    assert "1/200 trials: 199 pending, 1 running" in lines[0]
    assert "200/200 trials: 200 completed" in lines[-1]


def test_summary_ranks_trials_and_groups_errors() -> None:
    outcome = SweepOutcome(
        name="s",
        sweep_id="id",
        metric="acc",
        mode="max",
        trials=[
            record("trial_0000", "completed", 0.7),
            record("trial_0001", "completed", 0.9),
            record("trial_0002", "failed", None, error="Traceback ...\nValueError: bad\n"),
            record("trial_0003", "failed", None, error="Traceback ...\nValueError: bad"),
        ],
        experiment_id="1",
        parent_run_id="p",
        tracking_uri="sqlite:///x.db",
        run_ids={"trial_0001": "r1"},
    )
    text = summary(outcome, ui_command="mlflow ui --backend-store-uri sqlite:///x.db")
    # Best first (mode max), with its config and MLflow run id.
    assert text.index("trial_0001  completed") < text.index("trial_0000  completed")
    assert 'Best config: {"lr": 0.2}' in text and "Best run id: r1" in text
    # The same error of two trials is listed once, with its count.
    assert "2 trial(s): ValueError: bad" in text
    assert "mlflow ui --backend-store-uri sqlite:///x.db" in text


def test_summary_table_shows_the_searched_values_and_the_fixed_ones_once() -> None:
    trials = [record(f"trial_000{i}", "completed", 0.5 + i) for i in range(3)]
    for trial in trials:
        trial.config.update({"model": "tiny", "train": {"steps": 100, "clip": 1.0}})
    outcome = SweepOutcome(
        name="s",
        sweep_id="id",
        metric="loss",
        mode="min",
        trials=trials,
        experiment_id="1",
        parent_run_id="p",
        tracking_uri="sqlite:///x.db",
        run_ids={},
        searched=["lr"],
    )
    text = summary(outcome, ui_command="mlflow ui")
    header = next(line for line in text.splitlines() if line.strip().startswith("trial "))
    assert header.split() == ["trial", "status", "iters", "best", "loss", "lr"]
    assert "Fixed values: model=tiny, train.clip=1, train.steps=100" in text
    # Without the searched keys known (an older outcome), the columns are the values that differ.
    outcome.searched = []
    assert (
        next(line for line in summary(outcome, ui_command="mlflow ui").splitlines() if "iters" in line).split()[-1]
        == "lr"
    )


@pytest.mark.slow
@pytest.mark.own_ray  # the sweep runs in its own process, under a pseudo-terminal
def test_a_sweep_on_a_terminal_shows_a_progress_bar_with_its_eta(tmp_path: Path) -> None:
    import os
    import pty
    import re
    import subprocess
    import sys

    from tests.conftest import small_experiment, write_experiment

    path = write_experiment(tmp_path, small_experiment("terminal", steps=3, samples=4))
    primary, replica = pty.openpty()
    process = subprocess.Popen(
        [sys.executable, "-m", "tunetrain", "sweep", str(path), "--no-report", "--no-register"],
        stdin=replica, stdout=replica, stderr=replica, cwd=tmp_path, close_fds=True,
    )  # fmt: skip
    os.close(replica)
    chunks = []
    while True:  # until the process closes the terminal (EOF reads as EIO on Linux)
        try:
            chunk = os.read(primary, 65536)
        except OSError:
            break
        if not chunk:
            break
        chunks.append(chunk)
    os.close(primary)
    assert process.wait(timeout=60) == 0
    out = b"".join(chunks).decode(errors="replace")
    # tqdm's bar, rewritten in place: trials ended, elapsed<ETA, the states and the best.
    bars = re.findall(r"(\d)/4 trials ended \|[^|]*\| \[(\d\d:\d\d)<([0-9:?]+)\], ([^\r\n]*)", out)
    assert bars and bars[-1][0] == "4" and "4 completed | best loss=" in bars[-1][3], out
    assert "\r" in out and " trials: " not in out  # no log lines on a terminal


@pytest.mark.parametrize("columns", [80, 100, 160])
def test_the_bar_keeps_the_best_so_far_on_a_narrow_terminal(columns: int) -> None:
    # Before: tqdm cut the line at the terminal's edge, and an 80-column terminal lost the best.
    from tunetrain.console.live import TerminalBar

    out = io.StringIO()
    bar = TerminalBar(total=9, stream=out, columns=columns)
    view = LiveView(metric="val_loss", mode="min", total=9, stream=io.StringIO())
    trials = [record(f"trial_000{i}", s, 2.444 + i) for i, s in enumerate(["running", "running", "completed"])]
    trials += [record(f"trial_000{i}", "stopped_early", 3.0) for i in range(3, 7)]
    bar.show(trials, view.states(trials))
    shown = re.sub(r"\x1b\[[0-9;]*[A-Za-z]", "", out.getvalue()).rsplit("\r", 1)[-1].strip()  # tqdm's last state
    assert len(shown) <= columns, shown
    assert "best val_loss=2.444" in shown, shown
    if columns >= 160:  # room for everything, in the usual order
        assert "2 pending, 2 running, 1 completed, 4 stopped early | best val_loss=2.444 (trial_0000)" in shown, shown
    bar.close()
