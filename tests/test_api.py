"""tunetrain.sweep and tunetrain.resume from Python: what the result holds, recording off, bad
input, and a resume rebuilt from the request the journal saved (old journals: the command)."""

from __future__ import annotations

import io
import json
import math
import os
from pathlib import Path

import pytest

import tunetrain
from tests.conftest import run_cli, write_experiment
from tunetrain.results.analysis import load_sweep
from tunetrain.tracking import NullRecorder

TOY = """
import json
import os
import tempfile

import ray.train
from ray import tune
from tunetrain import Experiment, StopRule


def loop(config):
    for step in range(4):
        loss = (config["x"] - 0.3) ** 2 + config["offset"] + 1 / (step + 1)
        with tempfile.TemporaryDirectory() as folder:
            with open(os.path.join(folder, "state.json"), "w") as f:
                json.dump({"step": step + 1}, f)
            ray.train.report({"loss": loss}, checkpoint=ray.train.Checkpoint.from_directory(folder))


experiment = Experiment(
    name="toy", train_loop=loop, metric="loss", mode="min",
    space={"x": tune.uniform(0, 1)}, defaults={"offset": 0.0},
    num_samples=2, scheduler="fifo", searcher="random", stop=StopRule(max_iterations=4),
)
"""


def _journal(workdir: Path, name: str) -> Path:
    return workdir / "tunetrain_results" / name / "tracking_journal.jsonl"


def test_sweep_from_python_returns_its_trials_the_best_and_where_mlflow_has_them(
    workdir: Path, ray_cluster: None
) -> None:
    path = write_experiment(workdir, TOY)
    out = io.StringIO()
    result = tunetrain.sweep(
        path, num_samples=3, seed=11, overrides={"offset": 0.5}, name="py", report=False, stream=out
    )
    assert result.status == "ok" and result.exit_status == 0 and not result.interrupted
    assert "Sweep py: 3 trials and a baseline" in out.getvalue()
    assert "Sweep py finished: 4 trials" in out.getvalue()
    assert len(result.trials) == 4 and set(result.run_ids) == {t.name for t in result.trials}
    best = min(result.trials, key=lambda t: float("inf") if t.best_value is None else t.best_value)
    assert result.best_trial is best and result.best_metric == best.best_value
    assert result.best_config is not None and result.best_config == best.config
    assert result.best_config["offset"] == 0.5
    assert result.best_checkpoint is not None and Path(result.best_checkpoint, "state.json").exists()
    # The table and the analysis are MLflow's record of the same sweep.
    table = result.table()
    assert sorted(table["trial"]) == sorted(t.name for t in result.trials)
    assert result.analysis().best_config() == result.best_config
    assert result.analysis().run_id == result.parent_run_id
    # The journal saved the request a resume rebuilds the sweep from.
    header = json.loads(_journal(workdir, "py").read_text().splitlines()[0])
    assert header["request"]["experiment"] == str(path.resolve())
    assert header["request"]["fields"] == {"num_samples": "3", "seed": "11"}
    assert header["request"]["overrides"] == {"offset": "0.5"}


def test_recording_off_writes_no_store_and_no_journal(bare_workdir: Path, ray_cluster: None) -> None:
    path = write_experiment(bare_workdir, TOY)
    result = tunetrain.sweep(path, recorder=NullRecorder, name="off", stream=io.StringIO())
    assert result.status == "ok" and result.parent_run_id is None and result.run_ids == {}
    assert not (bare_workdir / "mlflow.db").exists() and not _journal(bare_workdir, "off").exists()
    assert len(result.table()) == 3 and math.isfinite(result.best_metric or math.nan)
    with pytest.raises(tunetrain.ExperimentError, match="has no MLflow record"):
        result.analysis()


def test_bad_input_raises_before_anything_starts(bare_workdir: Path) -> None:
    path = write_experiment(bare_workdir, TOY)
    with pytest.raises(tunetrain.ExperimentError, match="num_samples"):
        tunetrain.sweep(path, num_samples=0, stream=io.StringIO())
    with pytest.raises(tunetrain.ExperimentError, match="Unknown --set key"):
        tunetrain.sweep(path, overrides={"nope": 1}, stream=io.StringIO())
    assert sorted(os.listdir(bare_workdir)) == ["exp.py"]  # nothing written


def _reopen(journal: Path, *, drop_request: bool = False) -> None:
    """Make a finished sweep's journal look like one whose driver died before its end (and,
    with ``drop_request``, like one an older tunetrain wrote: a command line, no request)."""
    lines = [json.loads(line) for line in journal.read_text().splitlines()]
    if drop_request:
        lines[0].pop("request")
    kept = [line for line in lines if line.get("op") != "end_sweep"]
    journal.write_text("".join(json.dumps(line) + "\n" for line in kept))


def test_resume_rebuilds_the_sweep_from_its_saved_request(workdir: Path, ray_cluster: None) -> None:
    path = write_experiment(workdir, TOY)
    # Fields and overrides a rebuilt sweep must have again (else the resume is refused as changed).
    first = tunetrain.sweep(
        path, num_samples=2, seed=5, scheduler="asha", overrides={"offset": 0.25}, name="again", report=False
    )
    assert first.status == "ok"
    _reopen(_journal(workdir, "again"))
    moved = workdir / "elsewhere"
    moved.mkdir()
    os.chdir(moved)  # the request holds the file's absolute path and the store it used
    out = io.StringIO()
    resumed = tunetrain.resume("again", storage=str(workdir / "tunetrain_results"), stream=out)
    assert resumed.status == "ok" and resumed.parent_run_id == first.parent_run_id, out.getvalue()
    assert "changed since it started" not in out.getvalue()
    assert resumed.analysis().tags["tunetrain.resumes"] == "1"
    assert sorted(t.name for t in resumed.trials) == sorted(t.name for t in first.trials)


def test_an_old_journal_resumes_from_its_command_line(workdir: Path, ray_cluster: None) -> None:
    path = write_experiment(workdir, TOY)
    status, _ = run_cli("sweep", str(path), "--name", "old", "--seed", "2", "--no-report")
    assert status == 0
    _reopen(_journal(workdir, "old"), drop_request=True)
    with pytest.raises(tunetrain.ExperimentError, match="tunetrain resume old"):
        tunetrain.resume("old")
    status, out = run_cli("resume", "old")
    assert status == 0 and "Sweep old finished: 3 trials" in out, out  # 2 and the baseline


def test_confirm_reruns_the_top_configurations_with_new_seeds_and_reranks_them(
    workdir: Path, ray_cluster: None
) -> None:
    path = write_experiment(workdir, TOY)
    first = tunetrain.sweep(path, num_samples=5, seed=3, name="six", report=False, register=False)
    assert first.status == "ok" and len(first.trials) == 6  # 5 and the baseline
    # @champion on the worst trial's version; the two best have versions of their own.
    ranked = load_sweep("six").best(6)
    worst = tunetrain.register("six", trial=str(ranked.iloc[-1]["trial"]), alias="champion")
    top_versions = {
        str(row["trial"]): tunetrain.register("six", trial=str(row["trial"])) for _, row in ranked[:2].iterrows()
    }
    status, out = run_cli("confirm", "six", "--top-k", "2", "--seeds", "2", "--seed", "8")
    assert status == 0, out
    assert "(from the store of sweep six)" in out and "from --tracking-uri" not in out, out  # no such flag was given
    original = load_sweep("six")
    top = original.best(2)
    confirming = load_sweep("six-confirm")
    runs = confirming.trials()
    assert len(runs) == 4 and set(runs["status"]) == {"completed"}  # every one to its end
    assert confirming.tags["tunetrain.confirms"] == "six" and original.tags["tunetrain.confirmed_by"] == "six-confirm"
    assert confirming.scheduler == "fifo"
    # Each configuration twice, with two new seeds (none of the original's).
    of = [run.tags["tunetrain.confirm_of"] for run in confirming.runs]
    assert sorted(of) == sorted(list(top["trial"]) * 2)
    assert not set(runs["seed"]) & set(original.trials()["seed"]) and runs["seed"].nunique() == 4
    for _, row in runs.iterrows():  # the original trial's config, searched values and fixed ones
        source = original.trials().set_index("trial").loc[of[list(runs["run_id"]).index(row["run_id"])]]
        assert row["config/x"] == source["config/x"] and row["config/offset"] == source["config/offset"]
    table = confirming.confirmation()
    assert list(table.columns) == ["trial", "original", "mean", "std", "min", "max", "seeds"]
    assert sorted(table["trial"]) == sorted(top["trial"]) and set(table["seeds"]) == {2}
    assert "Configurations of six ranked by their mean loss (min) over the new seeds:" in out
    winner = str(top.iloc[0]["trial"])
    assert f"The original winner, {winner}," in out
    assert ("still wins" in out) == (table.iloc[0]["trial"] == winner)
    # @champion moved to the confirmed winner's version, which existed: no new version.
    from mlflow.tracking import MlflowClient

    confirmed = top_versions[str(table.iloc[0]["trial"])]
    client = MlflowClient(original.store.tracking_uri)
    holder = client.get_model_version_by_alias("toy", "champion")
    assert str(holder.version) == confirmed.version and holder.tags["tunetrain.confirmed_by"] == "six-confirm"
    moved = (
        f"models:/toy@champion -> version {confirmed.version} (the confirmed winner; it was on version {worst.version})"
    )
    assert moved in out, out
    assert len(client.search_model_versions("name = 'toy'")) == 3
    status, out = run_cli("confirm", "six", "--top-k", "0")
    assert status == 2 and "--top-k must be an integer >= 1, but got 0" in out


def test_the_public_surface_is_the_one_list_and_loads_neither_ray_nor_torch() -> None:
    import subprocess
    import sys

    # A fresh interpreter: this one has imported everything already.
    code = (
        "import sys, tunetrain\n"
        "heavy = sorted(m for m in ('ray', 'torch', 'mlflow') if m in sys.modules)\n"
        "assert heavy == [], heavy\n"
        "missing = [n for n in tunetrain.__all__ if getattr(tunetrain, n, None) is None]\n"
        "assert missing == [], missing\n"
        "assert set(tunetrain.__all__) <= set(dir(tunetrain))\n"
        "print(len(tunetrain.__all__))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert {"sweep", "resume", "Experiment", "StopRule", "ExperimentError", "get_context"} <= set(tunetrain.__all__)
    assert int(done.stdout) == len(tunetrain.__all__) == 26
    with pytest.raises(AttributeError, match="no attribute 'swep'"):
        tunetrain.swep  # noqa: B018
