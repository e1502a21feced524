from __future__ import annotations

import math
from pathlib import Path

import pandas as pd
import pytest
from mlflow.tracking import MlflowClient

from tests.conftest import AnalysedSweep
from tunetrain import ExperimentError
from tunetrain.results.analysis import list_sweeps, load_sweep


def _children(sweep: AnalysedSweep) -> tuple[MlflowClient, list]:
    client = MlflowClient(tracking_uri=sweep.tracking_uri)
    experiment = client.get_experiment_by_name("analysed")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    return client, [r for r in runs if "mlflow.parentRunId" in r.data.tags]


def test_trial_table_matches_what_mlflows_own_client_returns(analysed_sweep: AnalysedSweep) -> None:
    client, children = _children(analysed_sweep)
    trials = load_sweep(tracking_uri=analysed_sweep.tracking_uri).trials().set_index("run_id")
    # The same trials: one row per child run.
    assert sorted(trials.index) == sorted(r.info.run_id for r in children)
    for run in children:
        row = trials.loc[run.info.run_id]
        # Config values come back typed as they were drawn (float, str, int).
        assert row["config/lr"] == float(run.data.params["lr"])
        assert row["config/optimizer"] == run.data.params["optimizer"]
        assert row["config/width"] == int(run.data.params["width"])
        assert row["seed"] == int(run.data.params["tunetrain.seed"])
        assert row["status"] == run.data.tags["tunetrain.status"]
        assert row["iterations"] == int(run.data.tags["tunetrain.iterations"])
        # Final value = MLflow's latest metric; best = the minimum of its whole history.
        assert row["loss"] == run.data.metrics["loss"]
        assert row["accuracy"] == run.data.metrics["accuracy"]
        assert row["best_loss"] == min(m.value for m in client.get_metric_history(run.info.run_id, "loss"))
        assert row["duration_s"] >= 0
        expected_checkpoint = run.data.tags.get("tunetrain.checkpoint.best") or run.data.tags.get(
            "tunetrain.checkpoint.latest"
        )
        assert (row["checkpoint"] if isinstance(row["checkpoint"], str) else None) == expected_checkpoint
    # Numbers are numeric columns, an integer parameter an integer one.
    assert pd.api.types.is_integer_dtype(trials["config/width"]) and pd.api.types.is_float_dtype(trials["config/lr"])
    # ASHA stopped some trials: they are in the table with their status and shorter runs.
    assert set(trials["status"]) <= {"completed", "stopped_early"}
    stopped = trials[trials["status"] == "stopped_early"]
    assert len(stopped) > 0 and (stopped["iterations"] < 6).all(), trials[["status", "iterations"]]
    # Every second step is checkpointed: a trial stopped after one step kept none.
    assert (trials["checkpoint"].notna() == (trials["iterations"] >= 2)).all()


def test_history_holds_every_point_mlflow_holds(analysed_sweep: AnalysedSweep) -> None:
    client, children = _children(analysed_sweep)
    history = load_sweep(tracking_uri=analysed_sweep.tracking_uri).history()
    assert list(history.columns) == ["run_id", "trial", "step", "metric", "value", "timestamp"]
    for run in children:
        for key in ("loss", "accuracy"):
            expected = sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            mine = history[(history["run_id"] == run.info.run_id) & (history["metric"] == key)]
            # Same points, none lost, none doubled.
            assert sorted(zip(mine["step"], mine["value"], strict=True)) == expected
    # A metric filter keeps only that metric.
    assert set(load_sweep(tracking_uri=analysed_sweep.tracking_uri).history("loss")["metric"]) == {"loss"}


def test_best_ranks_by_best_value_and_gives_the_config_as_the_loop_got_it(analysed_sweep: AnalysedSweep) -> None:
    sweep = load_sweep("analysed-1", tracking_uri=analysed_sweep.tracking_uri)
    trials = sweep.trials()
    top = sweep.best(3)
    # Best first, by each trial's best loss, whatever its status.
    assert list(top["best_loss"]) == sorted(trials["best_loss"])[:3]
    best = top.iloc[0]
    assert sweep.best_config() == {
        "lr": best["config/lr"],
        "optimizer": best["config/optimizer"],
        "width": best["config/width"],
    }
    # The parent run's own record of the best agrees.
    assert sweep.tags["tunetrain.best_trial"] == best["trial"]
    assert sweep.best_checkpoint() == best["checkpoint"]
    # By another metric and mode: the highest accuracy.
    assert sweep.best(1, metric="accuracy", mode="max").iloc[0]["accuracy"] == trials["accuracy"].max()


def test_sweeps_load_by_name_by_run_id_or_newest_and_unknown_names_are_refused(analysed_sweep: AnalysedSweep) -> None:
    uri = analysed_sweep.tracking_uri
    by_name = load_sweep("analysed-1", tracking_uri=uri)
    assert load_sweep(by_name.run_id, tracking_uri=uri).name == "analysed-1"
    assert load_sweep(tracking_uri=uri, experiment="analysed").run_id == by_name.run_id
    assert (by_name.metric, by_name.mode, by_name.scheduler) == ("loss", "min", "asha")
    assert "lr" in by_name.space and by_name.is_log_scale("lr") and not by_name.is_log_scale("width")
    with pytest.raises(ExperimentError, match=r"No sweep named 'nope'.*newest sweeps: analysed-1"):
        load_sweep("nope", tracking_uri=uri)
    with pytest.raises(ExperimentError, match=r"No experiment 'other'.*it has: .*'analysed'"):
        load_sweep(tracking_uri=uri, experiment="other")


def test_list_sweeps_gives_date_trials_and_best_value(analysed_sweep: AnalysedSweep) -> None:
    sweeps = list_sweeps(tracking_uri=analysed_sweep.tracking_uri)
    row = sweeps[sweeps["sweep"] == "analysed-1"].iloc[0]
    best = load_sweep("analysed-1", tracking_uri=analysed_sweep.tracking_uri).best(1).iloc[0]["best_loss"]
    # 8 trials and the baseline
    assert (row["experiment"], row["trials"], row["metric"], row["mode"]) == ("analysed", 9, "loss", "min")
    assert math.isclose(row["best_value"], best)
    assert row["status"] == "finished"


def test_unknown_metric_and_bad_k_are_refused_with_the_valid_values(analysed_sweep: AnalysedSweep) -> None:
    sweep = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
    with pytest.raises(ExperimentError, match=r"Metric\(s\) 'val' not recorded .* it has: 'loss', 'accuracy'"):
        sweep.history("val")
    with pytest.raises(ValueError, match="k must be at least 1, but got k=0"):
        sweep.best(0)


def test_the_best_checkpoint_names_its_step_beside_the_best_step(analysed_sweep: AnalysedSweep) -> None:
    sweep = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
    trials = sweep.trials()
    history = sweep.history("loss")
    for _, row in trials.iterrows():
        points = history[history["run_id"] == row["run_id"]]
        best = points.loc[points["value"].idxmin()]
        assert row["best_step"] == best["step"]
        # Every second step is checkpointed; the policy keeps the best by loss among them.
        kept = points[points["step"] % 2 == 0]
        if kept.empty:
            assert math.isnan(row["checkpoint_step"]) and not isinstance(row["checkpoint"], str)
        else:
            assert row["checkpoint_step"] == kept.loc[kept["value"].idxmin()]["step"]
    completed = trials[trials["iterations"] == 6]
    assert len(completed) > 0 and set(completed["best_step"]) == {5} and set(completed["checkpoint_step"]) == {6}
    # The best trial's checkpoint is a path that knows which step it holds.
    checkpoint = sweep.best_checkpoint()
    assert checkpoint is not None
    top = sweep.best(1).iloc[0]
    assert checkpoint == top["checkpoint"] and Path(checkpoint).is_dir()
    assert (checkpoint.step, checkpoint.best_step) == (top["checkpoint_step"], top["best_step"])
    at_step = history[(history["run_id"] == top["run_id"]) & (history["step"] == checkpoint.step)]["value"]
    assert checkpoint.value == at_step.iloc[0] and checkpoint.best_value == top["best_loss"]
    # The best trial ran all 6 steps (ASHA keeps the best): its checkpoint is of step 6, its best step 5.
    assert (checkpoint.step, checkpoint.best_step) == (6, 5) and not checkpoint.holds_best
    assert f"checkpoint of step 6 (loss {checkpoint.value:.6g}); its best was loss" in checkpoint.describe()
    assert "at step 5, which has no kept checkpoint" in checkpoint.describe()
