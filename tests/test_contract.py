"""Every scheduler x searcher pairing through a real short sweep ("auto" through the searcher
it resolves to, and once itself), and what each scheduler is for: ASHA stops at rungs,
HyperBand stops the worse trials of a bracket at its milestone, median stopping stops early,
PBT hands weights over between distributed trials; several objectives give a Pareto front."""

from __future__ import annotations

import filecmp
import json
from pathlib import Path
from typing import Any

import pytest
from scipy.stats import spearmanr

from tests.conftest import EXPERIMENTS, run_cli, write_experiment
from tests.test_sweep import by_status, sweep_runs
from tunetrain.experiment_checks import SCHEDULERS, SEARCHERS
from tunetrain.results.analysis import load_sweep

pytestmark = pytest.mark.usefixtures("ray_cluster")

# A loop that checkpoints every step and resumes from a checkpoint, as PBT and HyperBand
# (which pauses and resumes trials) need.
CHECKPOINTING = """
import json
import os
import tempfile

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    start, total = 0, 0.0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            state = json.load(f)
        start, total = state["step"], state["total"]
    for step in range(start, ITERATIONS):
        total += config["x"]
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step + 1, "total": total}, f)
            loss = total / (step + 1) + 1.0 / (step + 1)
            checkpoint = ray.train.Checkpoint.from_directory(folder)
            ray.train.report({"loss": loss, "x_used": config["x"]}, checkpoint=checkpoint)


experiment = Experiment(
    name="contract", train_loop=loop, space={"x": SPACE}, metric="loss", mode="min",
    num_samples=SAMPLES, stop=StopRule(max_iterations=ITERATIONS), seed=3,
    baseline=False,  # the schedulers' own decisions; the baseline, which they never see, is test_sweep's
)
"""


def checkpointing(folder: Path, *, space: str, samples: int, iterations: int) -> Path:
    body = CHECKPOINTING.replace("SPACE", space).replace("SAMPLES", str(samples)).replace("ITERATIONS", str(iterations))
    return write_experiment(folder, body)


REFUSED = {
    *((scheduler, searcher) for scheduler in ("pbt", "pb2") for searcher in ("optuna", "async_bohb", "hyperopt")),
    ("pb2", "grid"),
}
# What searcher "auto" picks for each scheduler on this one-objective, flat space.
AUTO = {"pbt": "random", "pb2": "random", "fifo": "optuna"}
# In the quick tier: the refusals (nothing runs) and the demo's pairing; the rest are slow.
QUICK = {("asha", "optuna"), *REFUSED}
# "auto" is resolved in the plan, and the run builds the searcher it chose: with any other
# scheduler its sweep is that scheduler's sweep with the chosen searcher (test_cli checks
# each choice on the dry run); FIFO's real "auto" sweep checks the choice is recorded.
PAIRS = [
    pytest.param(scheduler, searcher, marks=() if (scheduler, searcher) in QUICK else pytest.mark.slow)
    for scheduler in SCHEDULERS
    for searcher in SEARCHERS
    if searcher != "auto" or scheduler == "fifo"
]


@pytest.mark.parametrize(("scheduler", "searcher"), PAIRS)
def test_every_scheduler_and_searcher_pairing_runs_or_is_refused_up_front(
    workdir: Path, store_template: Path, scheduler: str, searcher: str
) -> None:
    # The smallest sweep that shows the pairing working: two trials (two samples, or the two
    # grid points) of three steps; what each scheduler does is shown by the tests below.
    grid = searcher == "grid"
    space = "tune.grid_search([0.2, 0.8])" if grid else "tune.uniform(0.0, 1.0)"
    path = checkpointing(workdir, space=space, samples=1 if grid else 2, iterations=3)
    status, out = run_cli("sweep", str(path), "--scheduler", scheduler, "--searcher", searcher, "--no-report")
    if (scheduler, searcher) in REFUSED:
        # Refused before anything ran, naming the searchers that work with this scheduler.
        assert status == 2, out
        assert f"Scheduler {scheduler!r} cannot be paired with searcher {searcher!r}" in out
        assert "works with searcher 'random'" in out
        assert filecmp.cmp(workdir / "mlflow.db", store_template, shallow=False)  # not a byte written
        return
    assert status == 0, out
    _, parent, children = sweep_runs(workdir, "contract")
    # One child run per trial (2 samples, or the 2 grid points), each ended with a status.
    assert len(children) == 2
    assert all(run.data.tags["tunetrain.status"] in ("completed", "stopped_early") for run in children)
    assert parent.data.tags["tunetrain.scheduler"] == scheduler
    assert parent.data.tags["tunetrain.searcher"] == (
        AUTO.get(scheduler, "async_bohb") if searcher == "auto" else searcher
    )
    assert parent.data.tags["tunetrain.searcher_note"].startswith("auto: " if searcher == "auto" else "as configured")


def _iterations(children: list[Any]) -> dict[str, list[int]]:
    return {
        status: sorted(int(r.data.tags["tunetrain.iterations"]) for r in runs)
        for status, runs in by_status(children).items()
    }


@pytest.mark.slow
def test_asha_stops_trials_exactly_at_its_rungs(workdir: Path) -> None:
    path = checkpointing(workdir, space="tune.uniform(0.0, 1.0)", samples=12, iterations=8)
    status, out = run_cli("sweep", str(path), "--scheduler", "asha", "--searcher", "random", "--no-report")
    assert status == 0, out
    client, parent, children = sweep_runs(workdir, "contract")
    stopped = [r for r in children if r.data.tags["tunetrain.status"] == "stopped_early"]
    assert stopped, _iterations(children)
    for run in stopped:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
        # grace 1, reduction factor 2, max_t 8: rungs at 1, 2 and 4 iterations; the recorded
        # steps of a stopped trial end exactly on one of them.
        assert steps == list(range(1, len(steps) + 1)) and steps[-1] in (1, 2, 4)
    # How well each rung ranked the trials as the next did, from the trials' recorded values.
    histories = [{m.step: m.value for m in client.get_metric_history(run.info.run_id, "loss")} for run in children]
    measured = json.loads(parent.data.tags["tunetrain.rung_ranking"])
    assert [(m["rung"], m["next"]) for m in measured] == [(1, 2), (2, 4), (4, 8)]
    for m in measured:
        pairs = [(h[m["rung"]], h[m["next"]]) for h in histories if m["rung"] in h and m["next"] in h]
        assert m["trials"] == len(pairs)
        if len(pairs) >= 5:
            rho = spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic
            assert m["rho"] == pytest.approx(rho)
    assert "Early stopping: how each rung ranks the trials" in out and "iteration 1 -> 2: " in out, out
    # The stops ASHA did not make at a rung while it misled (tunetrain's ASHA), by rung.
    overruled = json.loads(parent.data.tags["tunetrain.rung_overruled"])
    assert set(overruled) <= {"1", "2", "4"} and all(n > 0 for n in overruled.values())
    assert ("went on instead of stopping there" in out) == bool(overruled), out


@pytest.mark.slow
def test_hyperband_stops_the_worse_trials_of_a_bracket_at_its_milestone(workdir: Path) -> None:
    path = checkpointing(workdir, space="tune.uniform(0.0, 1.0)", samples=9, iterations=9)
    status, out = run_cli("sweep", str(path), "--scheduler", "hyperband", "--searcher", "random", "--no-report")
    assert status == 0, out
    client, _, children = sweep_runs(workdir, "contract")
    iterations = _iterations(children)
    # max_t 9, reduction factor 3: brackets of 3 trials x 9 iterations, 5 x 3 and 9 x 1 (the
    # last gets only the 9th trial). The 5-trial bracket keeps its best 2 after 3 iterations
    # and stops the other 3 there; everything else runs to the end.
    assert iterations == {"stopped_early": [3, 3, 3], "completed": [9] * 6}, iterations
    for run in children:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "loss")]
        # Paused trials resumed from their checkpoints on the same run: each step once, in order.
        assert steps == list(range(1, int(run.data.tags["tunetrain.iterations"]) + 1))


@pytest.mark.slow
@pytest.mark.parametrize("scheduler", ["median"])
def test_median_stopping_stops_poor_trials_early(workdir: Path, scheduler: str) -> None:
    path = checkpointing(workdir, space="tune.uniform(0.0, 1.0)", samples=9, iterations=9)
    status, out = run_cli("sweep", str(path), "--scheduler", scheduler, "--searcher", "random", "--no-report")
    assert status == 0, out
    _, _, children = sweep_runs(workdir, "contract")
    iterations = _iterations(children)
    # Some trials ran to the end, some were stopped before it.
    assert iterations.get("stopped_early") and all(n < 9 for n in iterations["stopped_early"]), iterations
    assert iterations.get("completed") and all(n == 9 for n in iterations["completed"]), iterations


# A PBT test loop whose reported state is a function of the loaded weights: `total` lives in
# the checkpoint and grows by `rate` each step; `restored` is the total the run started from.
PBT = """
import json
import os
import tempfile
import time

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    start, total = 0, 0
    checkpoint = ray.train.get_checkpoint()
    if checkpoint is not None:
        with checkpoint.as_directory() as folder, open(os.path.join(folder, "state.json")) as f:
            state = json.load(f)
        start, total = state["step"], state["total"]
    restored = total
    for step in range(start, 12):
        time.sleep(0.2)  # stands for a training step
        total += config["rate"]
        with tempfile.TemporaryDirectory() as folder:
            if ray.train.get_context().get_world_rank() == 0:
                with open(os.path.join(folder, "state.json"), "w") as f:
                    json.dump({"step": step + 1, "total": total}, f)
                checkpoint = ray.train.Checkpoint.from_directory(folder)
            else:
                checkpoint = None
            ray.train.report({"total": total, "restored": restored, "rate": config["rate"]}, checkpoint=checkpoint)


experiment = Experiment(
    # A grid population: its 2 points are the 2 trials (num_samples=1), which must run side by side.
    name="pbt2", train_loop=loop, space={"rate": tune.grid_search([1, 1000])}, metric="total", mode="max",
    # synch: every perturbation waits for both trials, whenever each started (deterministic exploits)
    scheduler="pbt", scheduler_options={"perturbation_interval": 4, "quantile_fraction": 0.5, "synch": True},
    searcher="random", num_samples=1, workers_per_trial=2, resources_per_worker={"CPU": 0.5},
    stop=StopRule(max_iterations=12), seed=11,
)
"""


@pytest.mark.slow
def test_pbt_hands_the_donors_weights_to_a_two_worker_recipient_with_the_perturbed_value(workdir: Path) -> None:
    path = write_experiment(workdir, PBT)
    status, out = run_cli("sweep", str(path))
    assert status == 0, out
    client, _, children = sweep_runs(workdir, "pbt2")
    assert len(children) == 2  # an exploit keeps the recipient's one run
    runs = {r.data.tags["mlflow.runName"]: r for r in children}
    exploited = [r for r in children if "tunetrain.pbt.exploits" in r.data.tags]
    assert exploited, "PBT exploited at least once"

    def history(run: Any, key: str) -> list[float]:
        # In report order: after an exploit, steps continue from the donor's checkpoint and may
        # repeat, so values are not keyed by step.
        return [
            m.value
            for m in sorted(client.get_metric_history(run.info.run_id, key), key=lambda m: (m.timestamp, m.step))
        ]

    for run in exploited:
        exploits = json.loads(Path(client.download_artifacts(run.info.run_id, "pbt_exploits.json")).read_text())
        first = exploits["exploits"][0]
        donor = runs[first["donor"]]
        reports = list(zip(history(run, "restored"), history(run, "total"), history(run, "rate"), strict=True))
        # In report order, the recipient's first `step` reports are its own (a synchronous PBT
        # pause resumes a trial from its own checkpoint without repeating a step), with the
        # rate it started with ...
        assert all(report[2] == first["old"]["rate"] for report in reports[: first["step"]])
        # ... and the next is the first after the exploit: it started from a total the donor
        # had reported (the donor's weights) and went on with the perturbed rate.
        restored, total, rate = reports[first["step"]]
        assert restored > 0 and restored in set(history(donor, "total"))
        assert rate == first["new"]["rate"]
        assert total == restored + rate
        # The mutated value is readable over time on the run (step 0: the first value).
        assert (
            min(client.get_metric_history(run.info.run_id, "pbt.rate"), key=lambda m: m.step).value
            == first["old"]["rate"]
        )
        assert run.data.tags["tunetrain.pbt.last_donor"] in runs
    # The analysis API reads the same exploits back, and the sweep's report drew the lineage.
    sweep = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    exploits = sweep.pbt_exploits()
    assert set(exploits["trial"]) == {r.data.tags["mlflow.runName"] for r in exploited}
    assert (workdir / "tunetrain_results" / sweep.name / "report_figures" / "pbt_lineage.png").exists()


@pytest.mark.slow
def test_pbt_without_checkpoints_is_refused_after_the_first_reports(workdir: Path) -> None:
    path = write_experiment(
        workdir,
        PBT.replace("checkpoint=checkpoint)", "checkpoint=None)").replace("workers_per_trial=2", "workers_per_trial=1"),
    )
    status, out = run_cli("sweep", str(path))
    assert status == 2, out
    assert "clones trials from their checkpoints" in out and "without a checkpoint" in out


TWO_OBJECTIVES = """
import ray.train
from ray import tune
from tunetrain import Experiment


def loop(config):
    for step in range(2):
        ray.train.report({"error": (config["x"] - 0.8) ** 2, "size": config["x"]})


experiment = Experiment(
    name="mo", train_loop=loop, space={"x": tune.uniform(0.0, 1.0)}, metric=["error", "size"], mode=["min", "min"],
    scheduler="fifo", searcher="optuna", num_samples=8, seed=2, baseline=False,
)
"""


@pytest.mark.slow
def test_two_objectives_record_and_print_the_pareto_front(workdir: Path) -> None:
    status, out = run_cli("sweep", str(write_experiment(workdir, TWO_OBJECTIVES)))
    assert status == 0, out
    _, parent, children = sweep_runs(workdir, "mo")
    points = {r.info.run_id: (r.data.metrics["error"], r.data.metrics["size"]) for r in children}
    # The non-dominated trials, computed here from the recorded final values.
    front = {
        rid
        for rid, (e, s) in points.items()
        if not any(e2 <= e and s2 <= s and (e2, s2) != (e, s) for e2, s2 in points.values())
    }
    tagged = {r.info.run_id for r in children if r.data.tags.get("tunetrain.pareto") == "true"}
    assert tagged == front
    assert set(parent.data.tags["tunetrain.pareto_run_ids"].split(",")) == front
    # The sweep's other end-of-sweep tags are kept beside the front's (they were replaced).
    assert {"tunetrain.checkpoints_kept", "tunetrain.checkpoint_bytes"} <= set(parent.data.tags)
    assert f"Pareto-optimal trials ({len(front)}) on error (min), size (min)" in out
    # The analysis API knows both objectives and the front; the report drew it.
    sweep = load_sweep(tracking_uri=f"sqlite:///{workdir / 'mlflow.db'}")
    assert sweep.objectives == [("error", "min"), ("size", "min")]
    assert set(sweep.trials().query("pareto")["run_id"]) == front
    assert (workdir / "tunetrain_results" / sweep.name / "report_figures" / "pareto_front.png").exists()


@pytest.mark.slow
@pytest.mark.parametrize("searcher", ["optuna", "hyperopt"])
def test_a_conditional_space_records_only_the_chosen_branch(workdir: Path, searcher: str) -> None:
    status, out = run_cli(
        "sweep",
        str(EXPERIMENTS / "conditional_digits.py"),
        *("--searcher", searcher, "--num-samples", "6", "--set", "epochs=2", "--no-report"),
    )
    assert status == 0, out
    _, _, children = sweep_runs(workdir, "conditional_digits")
    for run in children:
        params = {k for k in run.data.params if k.startswith("optimizer.")}
        # SGD trials have momentum and no beta1; Adam trials the other way round.
        if run.data.params["optimizer.name"] == "sgd":
            assert params == {"optimizer.name", "optimizer.lr", "optimizer.momentum"}
        else:
            assert params == {"optimizer.name", "optimizer.lr", "optimizer.beta1"}


@pytest.mark.slow
def test_the_pbt_example_runs_on_the_digits_mlp(workdir: Path) -> None:
    status, out = run_cli(
        "sweep", str(EXPERIMENTS / "pbt_digits.py"), "--set", "epochs=3", "--no-report", "--no-baseline"
    )
    assert status == 0, out
    client, _, children = sweep_runs(workdir, "pbt_digits")
    assert len(children) == 4
    # Mutated values are recorded over time as metrics (step 0 is the first value).
    for run in children:
        assert min(m.step for m in client.get_metric_history(run.info.run_id, "pbt.lr")) == 0
