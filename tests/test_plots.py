from __future__ import annotations

import io
import math
from typing import Literal

import pytest
from matplotlib.figure import Figure

from tests.conftest import AnalysedSweep
from tunetrain import ExperimentError
from tunetrain.results import plots
from tunetrain.results.analysis import load_sweep


def _png(figure: Figure) -> bytes:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png")
    return buffer.getvalue()


def test_every_fitting_figure_renders_to_png(analysed_sweep: AnalysedSweep) -> None:
    figures = plots.sweep_figures(load_sweep(tracking_uri=analysed_sweep.tracking_uri))
    # An ASHA sweep of one objective: no PBT lineage, no Pareto front.
    assert set(figures) == {"learning_curves", "metric_vs_params", "parallel_coordinates", "importance", "rungs"}
    for figure in figures.values():
        assert _png(figure).startswith(b"\x89PNG")


def test_learning_curves_draw_one_line_per_trial(analysed_sweep: AnalysedSweep) -> None:
    sweep = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
    ax = plots.learning_curves(sweep, color_by="lr").axes[0]
    assert len(ax.lines) == len(sweep.runs)
    # Colour by a categorical parameter: a legend entry per category.
    legend = plots.learning_curves(sweep, color_by="optimizer").axes[0].get_legend()
    assert legend is not None
    assert sorted(t.get_text() for t in legend.get_texts()) == sorted(set(sweep.trials()["config/optimizer"]))
    with pytest.raises(ExperimentError, match=r"Parameter 'depth' not searched .* it has: 'lr', 'optimizer', 'width'"):
        plots.learning_curves(sweep, color_by="depth")


def test_metric_vs_params_uses_a_log_axis_for_log_parameters(analysed_sweep: AnalysedSweep) -> None:
    sweep = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
    axes = {ax.get_xlabel(): ax for ax in plots.metric_vs_params(sweep).axes if ax.get_visible()}
    assert axes["lr"].get_xscale() == "log" and axes["width"].get_xscale() == "linear"


def test_importances_come_from_optuna_and_sum_to_one(analysed_sweep: AnalysedSweep) -> None:
    sweep = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
    evaluators: tuple[Literal["fanova", "mdi", "ped_anova"], ...] = ("fanova", "mdi", "ped_anova")
    for evaluator in evaluators:
        importances = plots.param_importances(sweep, evaluator=evaluator)
        # Every searched parameter gets an importance (an empty table would fail here).
        assert set(importances.index) == {"lr", "optimizer", "width"}, importances
        assert (importances >= 0).all()
        assert evaluator == "ped_anova" or math.isclose(importances.sum(), 1.0, rel_tol=1e-6)


def test_rungs_count_the_trials_reaching_each_step(analysed_sweep: AnalysedSweep) -> None:
    sweep = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
    trials = sweep.trials()
    bars = plots.rungs(sweep).axes[0].patches
    heights = [int(bar.get_height()) for bar in bars]  # type: ignore[attr-defined]
    # ASHA stopped some trials (a rung below the full 6 steps), so there are several bars;
    # counts fall from rung to rung; the last bar is the trials that ran the full 6 steps.
    assert len(heights) >= 2, heights
    assert heights == sorted(heights, reverse=True) and heights[0] > heights[-1], heights
    assert heights[0] == len(trials)
    # The bars are ASHA's own rungs (grace 1, reduction factor 2, max_t 6: 1, 2, 4), as the sweep
    # recorded them, and the trials' end: not just the steps where trials happened to stop.
    labels = [tick.get_text() for tick in plots.rungs(sweep).axes[0].get_xticklabels()]
    assert labels == ["1", "2", "4", "end (6)"], labels
    assert heights[-1] == int((trials["iterations"] == 6).sum())


def test_pareto_front_needs_two_objectives(analysed_sweep: AnalysedSweep) -> None:
    sweep = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
    with pytest.raises(ExperimentError, match=r"has one objective .* a Pareto front needs two"):
        plots.pareto_front(sweep)
    # Two recorded metrics can still be set against each other.
    assert _png(plots.pareto_front(sweep, metrics=("loss", "accuracy"))).startswith(b"\x89PNG")


def test_parallel_coordinates_draw_a_choice_as_a_categorical_axis(analysed_sweep: AnalysedSweep) -> None:
    import pandas as pd

    sweep = load_sweep(tracking_uri=analysed_sweep.tracking_uri)
    assert sweep.choices("optimizer") == ["adam", "sgd"] and sweep.choices("lr") is None
    labels = {t.get_text() for t in plots.parallel_coordinates(sweep).axes[0].texts}
    assert {"adam", "sgd"} <= labels

    class NumericChoice:  # what _scaled asks of a sweep: hidden = tune.choice([16, 64, 256])
        def choices(self, param: str) -> list[int] | None:
            return [16, 64, 256]

        def is_log_scale(self, param: str) -> bool:
            return False

    # One evenly spaced tick per choice, labelled with it (not a linear scale's 96 or 24), and
    # each trial's value on its choice's tick however MLflow returned it.
    ys, ticks, names = plots._scaled(NumericChoice(), "hidden", pd.Series([64.0, 16, "256"]))  # type: ignore[arg-type]
    assert names == ["16", "64", "256"] and ticks == [0.0, 0.5, 1.0] and list(ys) == [0.5, 0.0, 1.0]

    class TextChoice(NumericChoice):  # tune.grid_search(["ok", "nan"]): "nan" is a name here
        def choices(self, param: str) -> list[int] | None:
            return ["ok", "nan"]  # type: ignore[list-item]

    ys, ticks, names = plots._scaled(TextChoice(), "kind", pd.Series(["nan", "ok"]))  # type: ignore[arg-type]
    assert names == ["ok", "nan"] and list(ys) == [1.0, 0.0]
