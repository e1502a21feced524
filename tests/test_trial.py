from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from tunetrain.seeding import derive_seed
from tunetrain.trial import TrialNamer, trial_index, trial_name


def test_trial_names_follow_the_searchers_own_counter() -> None:
    # Tune's experiment tag starts with the searcher's counter: from 1 for Optuna, 0 for random.
    assert TrialNamer(first=1)(SimpleNamespace(experiment_tag="1_lr=0.1")) == "trial_0000"
    assert TrialNamer(first=0)(SimpleNamespace(experiment_tag="3_lr=0.1")) == "trial_0003"
    assert trial_index(trial_name(42)) == 42


def test_foreign_trial_names_are_rejected() -> None:
    with pytest.raises(ValueError, match="Not a tunetrain trial name"):
        trial_index("train_fn_abc12_00001")


def test_derived_seeds_are_stable_and_distinct() -> None:
    # The same root and index give the same seed in every process (another interpreter, with
    # its own hash seed) and in every release: recorded sweeps are replayed from these values.
    pinned = {(0, 1): 1817441348, (0, 2): 993632895, (7, 3): 1318712413}
    assert {path: derive_seed(*path) for path in pinned} == pinned
    code = "from tunetrain.seeding import derive_seed; print(derive_seed(0, 1), derive_seed(0, 2), derive_seed(7, 3))"
    other = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        env={**os.environ, "PYTHONHASHSEED": "12345"},
    )
    assert other.stdout.split() == [str(seed) for seed in pinned.values()]
    # Neighbours differ.
    assert len({derive_seed(0, i) for i in range(100)}) == 100
    assert derive_seed(0, 1) != derive_seed(1, 1)


def test_a_checkpoint_handed_over_from_another_node_is_a_copy_in_the_sweeps_storage(tmp_path: Path) -> None:
    import ray.train

    from tunetrain.trial._group import _hand_over

    # What rank 0 does when the trial's own process runs on another node: its loop's folder
    # (on its own disk) is copied into the storage, which the trial's process reads.
    loop_folder = tmp_path / "loop"
    (loop_folder / "sub").mkdir(parents=True)
    (loop_folder / "sub" / "model.pt").write_bytes(b"weights")
    handed = _hand_over(ray.train.Checkpoint.from_directory(str(loop_folder)), str(tmp_path / "storage" / "t-handover"))
    copy = Path(handed.path)
    assert copy.parent == tmp_path / "storage" / "t-handover"
    assert (copy / "sub" / "model.pt").read_bytes() == b"weights"
    handed.filesystem.delete_dir(handed.path)  # what the trial's process does once Tune copied it
    assert not copy.exists() and (loop_folder / "sub" / "model.pt").exists()


def test_a_group_ranks_train_utilities_give_its_start_checkpoint_ranks_and_collectives() -> None:
    import ray.train

    from tunetrain.trial._group import _GroupTrainFnUtils

    # What ray.train.get_checkpoint/get_context/barrier reach on a worker-group rank.
    start = ray.train.Checkpoint("/somewhere/checkpoint_000002")
    ranks = {"world_size": 2, "world_rank": 1, "local_rank": 1, "local_world_size": 2, "node_rank": 0}
    utils = _GroupTrainFnUtils(experiment_name="t", ranks=ranks, mailbox=None, start=start, hand_over_to=None)
    assert utils.get_checkpoint() is start  # a restored trial's loop starts from it
    assert utils.is_distributed()
    context = utils.get_context()
    assert (context.get_world_size(), context.get_world_rank(), context.get_local_rank()) == (2, 1, 1)
    # Collectives go through torch's process group, not local mode's no-ops.
    local = _GroupTrainFnUtils.__mro__[1]  # Train's local-mode utilities
    assert "barrier" in vars(_GroupTrainFnUtils) and "broadcast_from_rank_zero" in vars(_GroupTrainFnUtils)
    assert "barrier" in vars(local)  # what they override


@pytest.mark.usefixtures("ray_cluster")
def test_a_groups_rendezvous_port_is_held_from_the_moment_it_is_chosen(tmp_path: Path) -> None:
    """Rank 0's rendezvous store binds port 0 itself: the port it hands the other ranks is
    already taken (a probe socket closed before torch binds would leave it to anyone)."""
    import socket

    import ray

    from tunetrain import cluster
    from tunetrain.trial._group import _Worker

    cluster.connect(None, log_dir=tmp_path)  # the session's Ray, as a sweep starts it
    worker = _Worker.remote()  # type: ignore[attr-defined]
    host, port = ray.get(worker.address.remote(2))
    with socket.socket() as other, pytest.raises(OSError):
        other.bind((host, port))
    ray.kill(worker)
