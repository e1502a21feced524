"""One Ray for the machine's sweeps: ``tunetrain up`` starts it (Ray's ``ray start --head``),
two sweeps started at once from two processes both join it and both finish with every trial
recorded, ``tunetrain down`` stops it; and the flags' bad values are refused."""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import small_experiment, write_experiment
from tunetrain.cli import main
from tunetrain.cluster import resolve_address, running_local_ray

SIDE_BY_SIDE = small_experiment("side_by_side", steps=3, samples=3, step_s=0.3, resources_per_worker={"CPU": 1})


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _tunetrain(folder: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "tunetrain", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=folder,
        env={key: value for key, value in os.environ.items() if key != "RAY_ADDRESS"},
    )


def _finish(process: subprocess.Popen[str]) -> str:
    out, _ = process.communicate(timeout=400)
    assert process.returncode == 0, out
    return out


@pytest.fixture()
def shared_ray(tmp_path: Path) -> Iterator[str]:
    """``tunetrain up`` on a free port; ``tunetrain down`` afterwards, whatever happened."""
    assert running_local_ray() is None, "a Ray started by `ray start` already runs on this machine"
    up = _finish(_tunetrain(tmp_path, "up", "--num-cpus", "2", "--port", str(_free_port())))
    address = running_local_ray()
    try:
        assert address is not None and f"Ray is up at {address}" in up, up
        yield address
    finally:
        _tunetrain(tmp_path, "down").communicate(timeout=120)


@pytest.mark.slow
@pytest.mark.own_ray
def test_two_sweeps_at_once_from_two_processes_share_the_machines_one_ray(tmp_path: Path, shared_ray: str) -> None:
    folders = [tmp_path / "first", tmp_path / "second"]
    sweeps = []
    for folder in folders:
        folder.mkdir()
        sweeps.append(_tunetrain(folder, "sweep", str(write_experiment(folder, SIDE_BY_SIDE)), "--no-register"))
    outputs = [_finish(process) for process in sweeps]

    logs = set()
    for folder, out in zip(folders, outputs, strict=True):
        assert f"Ray: {shared_ray} (the Ray running on this machine, joined" in out, out
        assert "warning: another Ray runs on this machine" not in out, out
        logs.add(re.search(r"^Ray logs: (\S+)", out, re.MULTILINE).group(1))  # type: ignore[union-attr]
        assert "3 trials (3 completed)" in out, out
        client = MlflowClient(f"sqlite:///{folder / 'mlflow.db'}")
        experiment = client.get_experiment_by_name("side_by_side")
        assert experiment is not None
        runs = client.search_runs([experiment.experiment_id])
        assert len(runs) == 4 and {run.info.status for run in runs} == {"FINISHED"}  # the parent and 3 trials
    assert len(logs) == 1, logs  # one Ray session for both sweeps

    down = _finish(_tunetrain(tmp_path, "down"))
    assert f"Stopped the Ray at {shared_ray} (" in down, down
    assert running_local_ray() is None
    assert "no shared Ray on this machine" in resolve_address(None)[1]


def test_up_refuses_bad_flags_before_starting_anything(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["up", "--num-cpus", "-1"]) == 2
    assert "--num-cpus is how many the shared Ray offers its sweeps, 0 or more, but got -1." in capsys.readouterr().err
    assert main(["up", "--port", "70000"]) == 2
    assert "--port must be a TCP port, from 1 to 65535, but got 70000." in capsys.readouterr().err


@pytest.mark.own_ray  # resolve_address says what a process without a Ray finds
def test_a_sweep_about_to_start_a_second_ray_beside_another_says_so(
    workdir: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tunetrain import cluster

    monkeypatch.setattr(cluster, "other_rays", lambda: ["10.0.0.9:6379"])  # another sweep's embedded Ray
    status = main(["sweep", str(write_experiment(workdir, SIDE_BY_SIDE)), "--dry-run"])
    out = capsys.readouterr().out
    assert status == 0, out
    assert "tunetrain: warning: another Ray runs on this machine (10.0.0.9:6379; another sweep's embedded Ray?)" in out
    assert "start it with `tunetrain up` before the sweeps" in out
    # The Ray line a sweep prints after it does not say there is no Ray (before: "no Ray running
    # on this machine").
    said = resolve_address(None)[1]
    assert "no shared Ray on this machine (`tunetrain up` starts one)" in said and "no Ray running" not in said


@pytest.mark.own_ray  # resolve_address says what a process without a Ray finds
def test_a_ray_another_user_started_is_not_joined_and_said(monkeypatch: pytest.MonkeyPatch) -> None:
    # Before: the machine's one address file decided, whoever had started that Ray.
    from ray._private.utils import get_ray_address_file

    address_file = Path(get_ray_address_file(None))
    before = address_file.read_text() if address_file.exists() else None
    address_file.parent.mkdir(parents=True, exist_ok=True)
    address_file.write_text("127.0.0.1:6390")  # what `ray start --head` of the file's owner wrote
    try:
        monkeypatch.setattr(os, "getuid", lambda: os.stat(address_file).st_uid + 4242)  # someone else
        address, said = resolve_address(None)
        assert running_local_ray() is None and address is None
        assert "names 127.0.0.1:6390, a Ray another user started (`ray start`), so not joined" in said, said
        assert "(--address 127.0.0.1:6390 joins it)" in said
    finally:
        monkeypatch.undo()
        if before is None:
            address_file.unlink(missing_ok=True)
        else:
            address_file.write_text(before)


@pytest.mark.slow
@pytest.mark.own_ray
def test_down_stops_the_ray_up_started_and_no_other_ray_on_the_machine(tmp_path: Path) -> None:
    # Before: `tunetrain down` was Ray's `ray stop`, which ends every Ray on the machine: another
    # sweep's embedded one, another user's.
    from tunetrain import _internals

    embedded = subprocess.Popen(  # another process's embedded Ray, as a running sweep has
        [sys.executable, "-c", "import ray, sys; ray.init(num_cpus=1); print('up', flush=True); sys.stdin.read()"],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd=tmp_path,
    )  # fmt: skip
    try:
        assert embedded.stdout is not None and embedded.stdout.readline().strip() == "up"
        others = _internals.running_ray_instances()
        up = _finish(_tunetrain(tmp_path, "up", "--num-cpus", "1", "--port", str(_free_port())))
        address = running_local_ray()
        assert address is not None and f"Ray is up at {address}" in up, up
        assert _internals.running_ray_instances() == others | {address}
        down = _finish(_tunetrain(tmp_path, "down"))
        assert f"Stopped the Ray at {address} (" in down, down
        assert running_local_ray() is None
        assert _internals.running_ray_instances() == others  # the embedded Ray runs on
        assert embedded.poll() is None
    finally:
        embedded.communicate("", timeout=120)
