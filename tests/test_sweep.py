"""Real sweeps: a real local Ray, real TorchTrainer trials, a real sqlite MLflow store."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path
from typing import Any

import pytest
from mlflow.entities import Run
from mlflow.tracking import MlflowClient

from tests.conftest import EXPERIMENTS, REPO, run_cli, write_experiment
from tunetrain.results.analysis import load_sweep
from tunetrain.seeding import derive_seed

pytestmark = pytest.mark.usefixtures("ray_cluster")

KINDS = """
import pathlib
import time

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule, get_context

STARTED = pathlib.Path(__file__).parent / "started"
TOGETHER = 1  # trials that wait for each other before their first step (2: side by side)


def loop(config):
    context = get_context()
    # Each trial waits (2 minutes at most) until TOGETHER trials have started: with 2, both
    # of the sweep's 2 slots hold a trial at once, however long Ray takes to start them.
    STARTED.mkdir(exist_ok=True)
    (STARTED / config["kind"]).touch()
    deadline = time.monotonic() + 120
    while len(list(STARTED.iterdir())) < TOGETHER and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for the other trial's file
    for step in range(3):
        time.sleep(0.2)  # the work of one step
        if config["kind"] == "boom" and step == 1:
            raise RuntimeError("boom at step 1")
        loss = float("nan") if config["kind"] == "nan" and step == 1 else 1.0 / (step + 1)
        ray.train.report({"loss": loss, "trial_seed": context.trial_seed, "worker_seed": context.worker_seed})


experiment = Experiment(
    name="kinds",
    train_loop=loop,
    space={"kind": tune.grid_search(["ok", "boom", "nan"])},
    metric="loss",
    mode="min",
    scheduler="fifo",
    searcher="random",
    num_samples=1,
    stop=StopRule(max_iterations=3),
    seed=123,
)
"""


def sweep_runs(workdir: Path, experiment: str) -> tuple[MlflowClient, Run, list[Run]]:
    """The one parent run and the child runs of the only sweep in the store."""
    client = MlflowClient(f"sqlite:///{workdir / 'mlflow.db'}")
    exp = client.get_experiment_by_name(experiment)
    assert exp is not None
    runs = client.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    assert len(parents) == 1, "exactly one parent run per sweep"
    children = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == parents[0].info.run_id]
    assert len(children) == len(runs) - 1, "every other run is a child of the sweep"
    return client, parents[0], children


def by_status(children: list[Run]) -> dict[str, list[Run]]:
    out: dict[str, list[Run]] = {}
    for run in children:
        out.setdefault(run.data.tags["tunetrain.status"], []).append(run)
    return out


@pytest.mark.slow
def test_demo_sweep_runs_trials_side_by_side_with_asha_and_records_everything(workdir: Path) -> None:
    status, out = run_cli("sweep", str(EXPERIMENTS / "mlp_digits.py"), "--name", "demo")
    assert status == 0, out
    client, parent, children = sweep_runs(workdir, "mlp_digits")
    # num_samples child runs and the baseline's, each with every param and a seed.
    assert len(children) == 9
    baseline = [r for r in children if r.data.tags.get("tunetrain.baseline") == "true"]
    assert len(baseline) == 1 and baseline[0].data.tags["tunetrain.iterations"] == "12"  # never stopped early
    assert "Against the baseline trial_0000 (val_acc=" in out or "Baseline trial_0000 (val_acc=" in out
    for run in children:
        assert set(run.data.params) == {"lr", "hidden", "dropout", "batch_size", "epochs", "tunetrain.seed"}
        index = int(run.data.tags["tunetrain.trial_index"])
        assert run.data.params["tunetrain.seed"] == str(derive_seed(0, index))
        # The full metric history: one point per training iteration, no gap, no duplicate.
        iterations = int(run.data.tags["tunetrain.iterations"])
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_acc")]
        assert steps == list(range(1, iterations + 1))
        assert Path(run.data.tags["tunetrain.checkpoint.best"]).is_dir()
        assert run.data.tags["tunetrain.checkpoint.latest"]
        assert run.info.status == "FINISHED"
    statuses = by_status(children)
    assert set(statuses) <= {"completed", "stopped_early"}
    # ASHA stopped some trials before their last epoch, and let others finish.
    assert statuses.get("stopped_early"), statuses.keys()
    assert all(int(r.data.tags["tunetrain.iterations"]) < 12 for r in statuses["stopped_early"])
    assert all(int(r.data.tags["tunetrain.iterations"]) == 12 for r in statuses.get("completed", []))
    # Two trials really ran at once: some pair of child runs overlaps in time.
    spans = sorted((r.info.start_time, r.info.end_time) for r in children)
    assert any(later[0] < earlier[1] for earlier, later in itertools.pairwise(spans))
    # The parent run carries the sweep's settings and ends with the best trial.
    tags = parent.data.tags
    # The example names no searcher: "auto" picks the best measured for ASHA, said on the record.
    assert tags["tunetrain.scheduler"] == "asha" and tags["tunetrain.searcher"] == "async_bohb"
    assert tags["tunetrain.searcher_note"].startswith("auto: best measured with scheduler 'asha'")
    assert tags["tunetrain.root_seed"] == "0" and len(tags["tunetrain.experiment_sha256"]) == 64
    assert tags["tunetrain.best_run_id"] in {r.info.run_id for r in children}
    best = max(children, key=lambda r: max(m.value for m in client.get_metric_history(r.info.run_id, "val_acc")))
    assert parent.data.metrics["best_val_acc"] == pytest.approx(
        max(m.value for m in client.get_metric_history(best.info.run_id, "val_acc"))
    )
    # The summary shows the top trials, the best config and how to open MLflow.
    assert "Top 5 trials by val_acc (max)" in out
    assert "Best config:" in out
    assert f"mlflow ui --backend-store-uri sqlite:///{workdir / 'mlflow.db'}" in out
    # Ray's own worker output stayed off the console.
    assert "PYTHON worker processes" not in out and "(raylet)" not in out
    assert_held_out_loss_is_sane(client, children)


def test_failed_and_diverged_trials_are_recorded_and_the_sweep_goes_on(workdir: Path) -> None:
    path = write_experiment(workdir, KINDS.replace("TOGETHER = 1", "TOGETHER = 2"))
    status, out = run_cli("sweep", str(path))
    assert status == 0, out  # one trial completed
    # The grid's 3 points are the sweep's 3 trials (num_samples=1), 2 at a time on 2 CPUs.
    assert "3 trials, at most 2 at once" in out, out
    client, _parent, children = sweep_runs(workdir, "kinds")
    spans = sorted((r.info.start_time, r.info.end_time) for r in children)
    assert spans[1][0] < spans[0][1], spans  # the second started before the first ended
    runs: dict[str, Any] = {r.data.params["kind"]: r for r in children}
    assert runs["ok"].data.tags["tunetrain.status"] == "completed"
    assert runs["nan"].data.tags["tunetrain.status"] == "diverged"
    # The record keeps the value the loop reported (the scheduler and searcher saw +inf).
    nan_history = client.get_metric_history(runs["nan"].info.run_id, "loss")
    assert [m.step for m in nan_history] == [1, 2] and math.isnan(nan_history[1].value)
    boom = runs["boom"]
    assert boom.data.tags["tunetrain.status"] == "failed"
    assert boom.info.status == "FAILED"
    assert "boom at step 1" in boom.data.tags["tunetrain.error"]
    # What was reported before the failure stays recorded.
    assert [m.step for m in client.get_metric_history(boom.info.run_id, "loss")] == [1]
    # The seed recorded on the run is the one the worker was given (rank 0's is derived from it).
    ok = runs["ok"]
    seed = int(ok.data.params["tunetrain.seed"])
    assert client.get_metric_history(ok.info.run_id, "trial_seed")[0].value == seed
    assert client.get_metric_history(ok.info.run_id, "worker_seed")[0].value == derive_seed(seed, 0)
    assert "1 trial(s): RuntimeError: boom at step 1" in out
    # The report is written with failed and diverged trials too, and the trial table shows them.
    assert "Report: " in out and next(workdir.glob("tunetrain_results/*/report.html")).exists()
    table = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}").trials().set_index("config/kind")
    assert table.loc["nan", "status"] == "diverged" and table.loc["boom", "status"] == "failed"
    assert "boom at step 1" in table.loc["boom", "error"]


def test_a_sweep_where_every_trial_fails_exits_1_with_the_errors(workdir: Path) -> None:
    path = write_experiment(workdir, KINDS)
    status, out = run_cli("sweep", str(path), "--set", "kind=boom", "--no-report")
    assert status == 1
    assert "RuntimeError: boom at step 1" in out
    # --no-report: no report file, no report artifacts.
    assert "Report: " not in out and not list(workdir.glob("tunetrain_results/*/report.html"))


def test_a_metric_never_reported_stops_the_sweep_naming_the_reported_keys(workdir: Path) -> None:
    path = write_experiment(workdir, KINDS.replace('metric="loss"', 'metric="val_loss"'))
    status, out = run_cli("sweep", str(path), "--set", "kind=ok")
    assert status == 2
    assert "The experiment's metric 'val_loss' was never reported; the train loop reported: loss" in out
    _, parent, children = sweep_runs(workdir, "kinds")
    # Nothing stays RUNNING in MLflow.
    assert parent.info.status != "RUNNING" and all(r.info.status != "RUNNING" for r in children)


def documented_snippet(name: str) -> str:
    """The Python block after ``<!-- snippet: NAME -->`` in docs/analysis.md."""
    text = (REPO / "docs" / "analysis.md").read_text()
    block = text.split(f"<!-- snippet: {name} -->", 1)[1]
    return block.split("```python\n", 1)[1].split("```", 1)[0]


@pytest.mark.slow
def test_two_worker_ddp_sweep_keeps_plain_checkpoints_and_no_train_copies(workdir: Path) -> None:
    status, out = run_cli(
        "sweep",
        str(EXPERIMENTS / "mlp_digits.py"),
        *("--workers-per-trial", "2", "--num-samples", "2", "--set", "epochs=2", "--set", "lr=0.01", "--no-report"),
    )
    assert status == 0, out
    client, parent, children = sweep_runs(workdir, "mlp_digits")
    assert parent.data.tags["tunetrain.workers_per_trial"] == "2"
    # The stop rule follows --set epochs=2: a trial ends after its 2nd epoch, as completed (a
    # trial ASHA stops at its rung 1 is stopped_early).
    assert {r.data.tags["tunetrain.status"] for r in children} <= {"completed", "stopped_early"}
    assert all(
        r.data.tags["tunetrain.iterations"] == "2" for r in children if r.data.tags["tunetrain.status"] == "completed"
    )
    # Ray Train's own checkpoint copies are gone; what the summary counts is what is on disk.
    sweep_dir = workdir / "tunetrain_results" / parent.data.tags["tunetrain.sweep_name"]
    assert not list(sweep_dir.glob("train/*/checkpoint_*")), list(sweep_dir.glob("train/**"))
    on_disk = list(sweep_dir.glob("*/checkpoint_*"))
    assert f"Checkpoints: {len(on_disk)} kept" in out and parent.data.tags["tunetrain.checkpoints_kept"] == str(
        len(on_disk)
    )
    # The documented snippet loads the best checkpoint into the plain model (no DDP prefix)
    # and gets the validation accuracy the sweep recorded at that checkpoint's step.
    code = documented_snippet("load-best-checkpoint").replace(
        '"experiments/mlp_digits.py"', repr(str(EXPERIMENTS / "mlp_digits.py"))
    )
    namespace: dict[str, Any] = {}
    exec(compile(code, "docs/analysis.md", "exec"), namespace)
    checkpoint = namespace["checkpoint"]
    best = next(r for r in children if r.info.run_id == parent.data.tags["tunetrain.best_run_id"])
    recorded = {m.step: m.value for m in client.get_metric_history(best.info.run_id, "val_acc")}
    assert namespace["accuracy"] == pytest.approx(recorded[checkpoint.step], abs=1e-6)
    assert_held_out_loss_is_sane(client, children)


def assert_held_out_loss_is_sane(client: MlflowClient, children: list[Run]) -> None:
    """Wherever a digits trial classified the held-out split well, its held-out loss is small:
    the features are standardised on the training split without blowing up the pixels that are
    constant there (a held-out loss of 789 at 0.978 accuracy was the sign of it)."""
    checked = 0
    for run in children:
        loss = {m.step: m.value for m in client.get_metric_history(run.info.run_id, "val_loss")}
        for m in client.get_metric_history(run.info.run_id, "val_acc"):
            if m.value > 0.9:
                assert math.isfinite(loss[m.step]) and loss[m.step] < 5, (run.info.run_name, m.step, loss[m.step])
                checked += 1
    assert checked, "no trial reached 0.9 held-out accuracy"


@pytest.mark.slow
def test_gpt2_sweep_lowers_the_validation_loss(workdir: Path) -> None:
    status, out = run_cli(
        "sweep",
        str(EXPERIMENTS / "gpt2_lr.py"),
        "--no-baseline",
        "--num-samples",
        "4",
        "--set",
        "train.max_steps=40",
        "--set",
        "train.eval_every=20",
        "--no-report",  # the report and the registered model have tests of their own
        "--no-register",
    )
    assert status == 0, out
    client, parent, children = sweep_runs(workdir, "gpt2_lr")
    assert len(children) == 4
    best = next(r for r in children if r.info.run_id == parent.data.tags["tunetrain.best_run_id"])
    history = [m.value for m in sorted(client.get_metric_history(best.info.run_id, "val_loss"), key=lambda m: m.step)]
    # The best trial's last evaluation beats its first.
    assert history[-1] < history[0]


@pytest.mark.slow
def test_hugging_face_trainer_sweep_is_tuned_like_a_hand_written_loop(workdir: Path) -> None:
    status, out = run_cli(
        "sweep",
        str(EXPERIMENTS / "gpt2_hf_trainer.py"),
        "--no-baseline",
        "--num-samples",
        "6",
        "--set",
        "train.max_steps=8",
        "--set",
        "train.eval_every=2",
        "--set",
        "data.max_bytes=200000",
    )
    assert status == 0, out
    client, parent, children = sweep_runs(workdir, "gpt2_hf_trainer")
    assert len(children) == 6
    statuses = by_status(children)
    # ASHA (rungs at evaluations 2 and 4) decides on the Trainer's reports: a trial runs its
    # 4 evaluations, or is stopped at a rung.
    assert set(statuses) <= {"completed", "stopped_early"}, statuses.keys()
    assert all(r.data.tags["tunetrain.iterations"] == "4" for r in statuses.get("completed", []))
    assert all(r.data.tags["tunetrain.iterations"] in ("2", "4") for r in statuses.get("stopped_early", []))
    for run in children:
        evaluations = int(run.data.tags["tunetrain.iterations"])
        # Every evaluation is in MLflow: the Trainer's eval_loss, loss and pre-clip grad norm,
        # its global step, and the throughput the experiment adds ...
        for key in ("eval_loss", "loss", "grad_norm", "learning_rate", "tokens_per_s"):
            history = client.get_metric_history(run.info.run_id, key)
            assert sorted(m.step for m in history) == list(range(1, evaluations + 1)), (key, history)
        steps = client.get_metric_history(run.info.run_id, "step")
        assert sorted(m.value for m in steps) == [2.0 * k for k in range(1, evaluations + 1)]
        # ... and each evaluation's checkpoint (the Trainer's own files) is Tune's.
        latest = Path(run.data.tags["tunetrain.checkpoint.latest"])
        assert (latest / "checkpoint" / "model.safetensors").is_file(), latest
    # The best trial is the one with the lowest eval_loss.
    best = min(children, key=lambda r: r.data.metrics["eval_loss"])
    assert parent.data.tags["tunetrain.best_run_id"] == best.info.run_id


PARITY = """
import os
import tempfile

import ray.train
import ray.train.torch
import torch
from ray import tune
from torch.utils.data import DataLoader, TensorDataset
from tunetrain import CheckpointPolicy, Experiment, StopRule, get_context


def loop(config):
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(64, 4), torch.randn(64, 1))  # drawn from the worker's seeded RNG
    loader = ray.train.torch.prepare_data_loader(DataLoader(data, batch_size=16, shuffle=True))
    model = ray.train.torch.prepare_model(torch.nn.Linear(4, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=config["lr"])
    restored = ray.train.get_checkpoint() is not None
    for step in range(6):
        total = 0.0
        for x, y in loader:
            optimizer.zero_grad()
            loss = torch.nn.functional.mse_loss(model(x), y)
            loss.backward()
            optimizer.step()
            total += loss.item()
        context = ray.train.get_context()
        metrics = {"loss": total, "restored": float(restored), "rank": context.get_world_rank(),
                   "world_size": context.get_world_size(), "seed": get_context().worker_seed, "worker_pid": os.getpid()}
        with tempfile.TemporaryDirectory() as folder:
            torch.save(model.state_dict(), os.path.join(folder, "model.pt"))
            ray.train.report(metrics, checkpoint=ray.train.Checkpoint.from_directory(folder))


experiment = Experiment(
    name="parity", train_loop=loop, space={"lr": tune.grid_search([0.3, 0.01, 0.1])}, metric="loss", mode="min",
    scheduler="asha", scheduler_options={"grace_period": 1, "reduction_factor": 2}, searcher="random",
    num_samples=1, max_concurrent=1, stop=StopRule(max_iterations=6), seed=7,
    checkpoint=CheckpointPolicy(num_to_keep=None),
)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "runner"), [(1, "in_process"), (2, "worker_group")])
def test_reused_trial_processes_and_torch_trainer_trials_behave_identically(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, runner: str
) -> None:
    """3 trials one after another, each on the reused process (and, for 2 workers, the reused
    worker group), and each on a fresh TorchTrainer: the same records."""
    path = write_experiment(tmp_path, PARITY)
    recorded: dict[str, dict[int, Any]] = {}
    pids: dict[str, dict[int, set[float]]] = {}
    for used in (runner, "torch_trainer"):
        folder = tmp_path / used
        folder.mkdir()
        monkeypatch.chdir(folder)
        status, out = run_cli(
            "sweep", str(path), "--trial-runner", used, "--workers-per-trial", str(workers), "--no-report"
        )
        assert status == 0, out
        client, parent, children = sweep_runs(folder, "parity")
        assert parent.data.tags["tunetrain.trial_runner"] == used
        recorded[used] = {
            int(run.data.tags["tunetrain.trial_index"]): (
                run.data.tags["tunetrain.status"],
                run.data.tags["tunetrain.seed"],
                {
                    key: [
                        (m.step, m.value)
                        for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)
                    ]
                    for key in ("loss", "restored", "rank", "world_size", "seed")
                },
                [
                    c["step"]
                    for c in json.loads(
                        Path(client.download_artifacts(run.info.run_id, "checkpoints.json")).read_text()
                    )["checkpoints"]
                ],
            )
            for run in children
        }
        pids[used] = {
            int(run.data.tags["tunetrain.trial_index"]): {
                m.value for m in client.get_metric_history(run.info.run_id, "worker_pid")
            }
            for run in children
        }
    fast, trainer = recorded[runner], recorded["torch_trainer"]
    # Same seeds, same data order, same model: every metric of every step is identical, ASHA
    # stops the same trials at the same rungs, and the same steps are checkpointed. So each
    # trial on the reused process or group started fresh: its history is that of the same
    # config and seed on a new TorchTrainer.
    assert fast == trainer
    assert len(fast) == 3 and all(dict(history)["world_size"][0][1] == workers for _, _, history, _ in fast.values())
    # Each trial had its own seed (as recorded), and rank 0's worker seed differs per trial.
    assert len({seed for _, seed, _, _ in fast.values()}) == 3
    assert len({history["seed"][0][1] for _, _, history, _ in fast.values()}) == 3
    # ASHA did stop a trial early (so the comparison covers a scheduler decision).
    assert "stopped_early" in {status for status, _, _, _ in fast.values()}
    # The reused runner ran every trial's rank 0 in one process; the TorchTrainer in a new one each.
    assert len(set().union(*pids[runner].values())) == 1, pids[runner]
    assert len(set().union(*pids["torch_trainer"].values())) == 3, pids["torch_trainer"]


# A Ray Data loop (Ray Train's documented data path): each step reads the worker's shard of
# the "train" dataset; the ranks' rows are gathered and sorted, so the recorded values do not
# depend on which rank read which block.
RAY_DATA_PARITY = """
import ray.data
import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    shard = ray.train.get_dataset_shard("train")
    world = ray.train.get_context().get_world_size()
    for step in range(3):
        ids = [int(i) for batch in shard.iter_batches(batch_size=16) for i in batch["id"]]
        if world > 1:
            import torch.distributed as dist

            parts = [None] * world
            dist.all_gather_object(parts, ids)
            ids = [i for part in parts for i in part]
        ids.sort()
        loss = sum((config["a"] * i - 2.0 * i) ** 2 for i in ids) / len(ids) / (step + 1)
        ray.train.report({"loss": loss, "rows": len(ids), "distinct": len(set(ids)), "world_size": world})


experiment = Experiment(
    name="data_parity", train_loop=loop, space={"a": tune.grid_search([1.0, 3.0])}, metric="loss", mode="min",
    datasets={"train": lambda: ray.data.range(64, override_num_blocks=8)},
    scheduler="fifo", searcher="random", num_samples=1, stop=StopRule(max_iterations=3), seed=3, baseline=False,
)
"""


@pytest.mark.slow
@pytest.mark.parametrize(("workers", "runner"), [(1, "in_process"), (2, "worker_group")])
def test_a_ray_data_loop_reads_its_shards_alike_on_every_runner(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, runner: str
) -> None:
    path = write_experiment(tmp_path, RAY_DATA_PARITY)
    recorded = {}
    # The values are known without running (every row read once per step, whatever rank read
    # it); TorchTrainer, Ray Train's own data path, is run beside the 2-worker group only.
    for used in (runner, "torch_trainer") if workers > 1 else (runner,):
        folder = tmp_path / used
        folder.mkdir()
        monkeypatch.chdir(folder)
        status, out = run_cli(
            "sweep", str(path), "--trial-runner", used, "--workers-per-trial", str(workers), "--no-report"
        )
        assert status == 0, out
        assert "Datasets: train (64 rows); built once, in Ray's object store, shared by every trial." in out, out
        client, _, children = sweep_runs(folder, "data_parity")
        recorded[used] = {
            run.data.params["a"]: {
                key: [m.value for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: m.step)]
                for key in ("loss", "rows", "distinct", "world_size")
            }
            for run in children
        }
    expected = {
        str(a): {
            "loss": [
                pytest.approx(sum((a * i - 2.0 * i) ** 2 for i in range(64)) / 64 / (step + 1)) for step in range(3)
            ],
            # Every step (epoch) read each of the 64 rows once, across the trial's workers.
            "rows": [64.0] * 3,
            "distinct": [64.0] * 3,
            "world_size": [float(workers)] * 3,
        }
        for a in (1.0, 3.0)
    }
    assert all(histories == expected for histories in recorded.values()), recorded


def test_an_error_after_the_parent_run_exists_leaves_nothing_running(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tunetrain.sweeps import run

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("broken after the parent run was created")

    monkeypatch.setattr(run, "SweepCallback", broken)  # built only once the parent run exists
    path = write_experiment(workdir, KINDS)
    with pytest.raises(RuntimeError, match="broken after the parent run"):
        run_cli("sweep", str(path), "--set", "kind=ok", "--no-report")
    _, parent, children = sweep_runs(workdir, "kinds")
    assert parent.info.status == "FAILED" and children == []


BASELINED = """
import json
import os
import tempfile

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    start = 0
    if (checkpoint := ray.train.get_checkpoint()) is not None:  # PBT clones trials from checkpoints
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "step.json")) as f:
            start = json.load(f)["step"]
    for step in range(start, 4):
        # The centre (x=0.5) is the worst place to be: ASHA would cut it at its first rung.
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "step.json"), "w") as f:
                json.dump({"step": step + 1}, f)
            loss = 1 - abs(config["x"] - 0.5) + 1 / (step + 1)
            ray.train.report({"loss": loss}, checkpoint=ray.train.Checkpoint.from_directory(folder))


experiment = Experiment(
    name="baselined", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.uniform(0, 1), "net": {"width": tune.randint(8, 65)}}, defaults={"depth": 2},
    scheduler="asha", searcher="optuna", num_samples=4, stop=StopRule(max_iterations=4), seed=11,
)
"""


@pytest.mark.parametrize(("scheduler", "searcher"), [("asha", "optuna"), ("hyperband", "hyperopt"), ("pbt", "random")])
def test_a_baseline_trial_runs_first_to_its_end_and_the_best_is_judged_against_it(
    workdir: Path, scheduler: str, searcher: str
) -> None:
    path = write_experiment(workdir, BASELINED)
    common = ["--name", "b1", "--no-report", "--scheduler", scheduler, "--searcher", searcher]
    # Over --confirm-above, and let start with --yes: the consent is on the parent run.
    status, out = run_cli("sweep", str(path), *common, "--budget", "2h", "--confirm-above", "1h", "--yes")
    assert status == 0, out
    assert "Sweep b1: 4 trials and a baseline" in out
    _, parent, children = sweep_runs(workdir, "baselined")
    assert parent.data.tags["tunetrain.consent"] == "--yes: --budget 2h allows 2 h, above 1h (--confirm-above)"
    assert len(children) == 5  # num_samples, and the baseline beside them
    baselines = [r for r in children if r.data.tags.get("tunetrain.baseline") == "true"]
    assert len(baselines) == 1
    base = baselines[0]
    # The defaults and the centre of each searched dimension, run first and to its end.
    assert base.info.run_name == "trial_0000"
    assert (base.data.params["x"], base.data.params["net.width"], base.data.params["depth"]) == ("0.5", "36", "2")
    assert base.data.tags["tunetrain.status"] == "completed" and base.data.tags["tunetrain.iterations"] == "4"
    assert json.loads(parent.data.tags["tunetrain.baseline_config"]) == {"x": 0.5, "net.width": 36}
    sweep = load_sweep("b1")
    assert sweep.trials()["baseline"].tolist() == [True, False, False, False, False]
    best = sweep.best(1).iloc[0]
    versus = sweep.versus_baseline()
    assert versus is not None and versus in out  # the summary's line, as the record gives it
    assert f"best {best['trial']} loss={best['best_loss']:.4g}" in versus and "% better)" in versus
    status, shown = run_cli("show", "b1")
    assert status == 0 and versus in shown
    if scheduler != "asha":
        return  # what follows is the same whatever the scheduler and searcher: once
    # --no-baseline: the experiment's trials only. Under --confirm-above (no smoke run, no
    # budget: nothing over it), nothing is asked and the sweep says so on its parent run.
    status, out = run_cli(
        "sweep", str(path), "--name", "b2", "--no-baseline", "--num-samples", "2", "--confirm-above", "1h",
        "--scheduler", scheduler, "--searcher", searcher, "--no-register",
    )  # fmt: skip
    assert status == 0 and "Sweep b2: 2 trials," in out and "needs consent" not in out
    b2 = load_sweep("b2")
    assert not b2.trials()["baseline"].any() and b2.versus_baseline() is None
    assert b2.tags["tunetrain.consent"].startswith("not asked: no estimate (no smoke run of this trial shape)")
    # Its report: 2 finished trials rank no hyperparameters; one line says so instead of a chart.
    html = (workdir / "tunetrain_results" / "b2" / "report.html").read_text()
    assert "No hyperparameter importance: 2 trial(s) finished with a finite loss" in html
    assert "alt='importance'" not in html and "no baseline trial" in html
