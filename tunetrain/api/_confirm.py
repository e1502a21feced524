"""``tunetrain.confirm``: the k best configurations of a sweep run again with new seeds, to
their end, as a new sweep linked to the original; then the configurations re-ranked by their
mean over the seeds (with an ASHA sweep's noisy early rungs, a winner picked from one seed is
often luck)."""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Any, TextIO

import pandas as pd

from tunetrain import space as spaces
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.overrides import apply_overrides
from tunetrain.sweeps.result import SweepResult
from tunetrain.tracking.registry import CHAMPION_ALIAS


@dataclasses.dataclass
class ConfirmResult:
    """The confirming sweep, its configurations re-ranked, and whether the original winner
    still wins."""

    sweep: SweepResult
    table: pd.DataFrame  # tunetrain.results.analysis.Sweep.confirmation(): trial, original, mean, std, min, max, seeds
    winner: str  # the original sweep's best trial
    winner_holds: bool
    alias: str = ""  # what happened to the alias: "models:/NAME@ALIAS -> version N (the confirmed winner ...)"


def confirm(
    sweep: str | None = None,
    *,
    top_k: int = 3,
    seeds: int = 3,
    tracking_uri: str | None = None,
    storage: str | None = None,
    address: str | None = None,
    name: str | None = None,
    experiment: Experiment | str | os.PathLike[str] | None = None,
    seed: int | None = None,
    report: bool = True,
    stream: TextIO | None = None,
    command: list[str] | None = None,
    trust_changed_file: bool = False,
    alias: str | None = CHAMPION_ALIAS,
) -> ConfirmResult:
    """Run the ``top_k`` best configurations of ``sweep`` (name or parent run id; default the
    newest) again, ``seeds`` times each with new seeds, FIFO (no early stopping), as a new
    sweep (``name``, default ``<sweep>-confirm``) of the experiment (default: the file the
    sweep recorded); tag both sweeps with the link and print the configurations ranked by
    their mean. ``seed`` is the new sweep's root seed (default: drawn and recorded). The
    recorded file is imported only with the content the sweep recorded, unless
    ``trust_changed_file``. ``alias`` (``champion``; None or "" for none) then moves to the
    registered version of the configuration that wins on the mean (the original sweep's trial
    of it), registered now if it has none; the confirming sweep itself registers nothing."""
    from tunetrain.api._sweep import sweep as run_sweep
    from tunetrain.results.analysis import load_sweep, nested_config
    from tunetrain.sweeps.request import recorded_experiment
    from tunetrain.tracking import TrackingURI, schema

    out = stream or sys.stdout
    _check_counts(top_k=top_k, seeds=seeds)
    original = load_sweep(sweep, tracking_uri=tracking_uri)
    if original.metric not in original.metrics:
        raise ExperimentError(
            f"Sweep {original.name!r} has no trial with a finite {original.metric!r}: nothing to confirm.",
            fix="Look at its trials with `tunetrain show`.",
        )
    top = original.best(top_k)
    recorded = original.tags.get(schema.EXPERIMENT_FILE_TAG, "")
    exp = recorded_experiment(
        experiment,
        recorded,
        sha256=original.tags.get(schema.EXPERIMENT_SHA256_TAG),
        trust_changed_file=trust_changed_file,
    )
    if exp is None:
        raise ExperimentError(
            f"The sweep's experiment file {recorded!r} is not here, and confirming runs it again.",
            fix="Pass the experiment file with --experiment-file.",
        )
    configs = {
        str(row["trial"]): spaces.flatten(nested_config(_params(original, row["run_id"]))) for _, row in top.iterrows()
    }
    searched = spaces.free_dimensions(exp.space)
    if not searched:
        raise ExperimentError(
            f"Experiment {exp.name!r} searches no dimension: its trials all run one config.",
            fix="Confirm a sweep that searched something.",
        )
    confirming, points = _confirming(exp, configs, searched, seeds=seeds, seed=seed)
    new_name = name or f"{original.name}-confirm"
    print(
        f"Confirming sweep {original.name}: its {len(points)} best configuration(s), {seeds} new seed(s) each, "
        f"run to their end as sweep {new_name}.",
        file=out,
        flush=True,
    )
    result = run_sweep(
        confirming,
        tracking_uri=TrackingURI(original.store.tracking_uri, f"the store of sweep {original.name}"),
        storage=storage,
        address=address,
        name=new_name,
        report=False,  # written below, once the trials carry their links
        register=False,
        stream=out,
        command=command or [f"tunetrain.confirm({original.name!r}, top_k={top_k}, seeds={seeds})"],
    )
    store = original.store
    if result.parent_run_id is None:
        raise ExperimentError(f"Confirming sweep {new_name} recorded nothing.", fix="See its output above.")
    _link(original, result, configs, searched, top)
    confirmed = load_sweep(result.parent_run_id, tracking_uri=store.tracking_uri)
    table = confirmed.confirmation()
    winner = str(top.iloc[0]["trial"])
    holds = not table.empty and str(table.iloc[0]["trial"]) == winner
    print("", file=out)
    print(describe(table, original=original.name, metric=original.metric, mode=original.mode, winner=winner), file=out)
    said = _hand_off(original, table, exp, alias=alias, confirmed_by=new_name, stream=out) if alias else ""
    if report:
        from pathlib import Path

        from tunetrain.sweeps.session import end_of_sweep_report

        end_of_sweep_report(result.ran, store.tracking_uri, Path(result.storage_path), out)
    return ConfirmResult(sweep=result, table=table, winner=winner, winner_holds=holds, alias=said)


def _hand_off(original: Any, table: Any, exp: Experiment, *, alias: str, confirmed_by: str, stream: TextIO) -> str:
    """``alias`` moved to the registered version of the confirmed winner (the original sweep's
    trial of it, ``table``'s first), registering it first when it has none; or why not, in
    one line, printed. The confirmation stands either way: a registry problem is said, not
    raised."""
    if table.empty:
        return ""
    said = _move_alias(original, str(table.iloc[0]["trial"]), exp, alias=alias, confirmed_by=confirmed_by)
    print(said, file=stream, flush=True)
    return said


def _move_alias(original: Any, trial: str, exp: Experiment, *, alias: str, confirmed_by: str) -> str:
    from tunetrain.sweeps.handoff import register
    from tunetrain.tracking.registry import move_to_confirmed, version_of_run

    tracking_uri = original.store.tracking_uri
    run_id = str(original.trials().set_index("trial").loc[trial, "run_id"])
    try:
        version = version_of_run(tracking_uri, run_id)
        if version is None:
            registered = register(original.run_id, trial=trial, tracking_uri=tracking_uri, experiment=exp)
            moved = move_to_confirmed(tracking_uri, registered.registered_version, alias, confirmed_by=confirmed_by)
            return registered.line() + "\n" + moved
        return move_to_confirmed(tracking_uri, version, alias, confirmed_by=confirmed_by)
    except ExperimentError as exc:
        return f"@{alias} not moved: {exc.message}"
    except Exception as exc:  # the registry is a convenience: say why and go on
        retry = f"tunetrain register {original.name} --trial {trial} --alias {alias}"
        return f"@{alias} not moved ({type(exc).__name__}: {exc}); move it with `{retry}`"


def _check_counts(**counts: int) -> None:
    for label, value in counts.items():
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            raise ExperimentError(
                f"--{label.replace('_', '-')} must be an integer >= 1, but got {value!r}.",
                fix="Use e.g. --top-k 3 --seeds 3.",
            )


def _confirming(
    exp: Experiment, configs: dict[str, dict[str, Any]], searched: list[str], *, seeds: int, seed: int | None
) -> tuple[Experiment, list[dict[str, Any]]]:
    """The confirming sweep's experiment (each configuration ``seeds`` times, FIFO, random
    search over exactly those points) and the points."""
    # Fixed values as the original sweep ran them (its --set), the same for every trial.
    first = next(iter(configs.values()))
    fixed = {key: first[key] for key in spaces.flatten(exp.defaults) if key in first}
    space, defaults = apply_overrides(exp.space, exp.defaults, fixed)
    points = [spaces.unflatten({key: config[key] for key in searched}) for config in configs.values()]
    confirming = exp.replace(
        space=space,
        defaults=defaults,
        scheduler="fifo",  # every trial to its end: no early stopping
        scheduler_options={},
        searcher="random",
        searcher_options={"points_to_evaluate": [p for p in points for _ in range(seeds)]},
        num_samples=len(points) * seeds,
        baseline=False,
        warm_start=(),
        seed=seed,
    )
    return confirming, points


def _link(
    original: Any, result: SweepResult, configs: dict[str, dict[str, Any]], searched: list[str], top: Any
) -> None:
    """Both sweeps tagged with the link, and each confirming trial with the original trial
    it re-runs and that trial's value."""
    from tunetrain.tracking import schema

    store = original.store
    store.set_tags(result.parent_run_id, {schema.CONFIRMS_TAG: original.name, schema.CONFIRMS_RUN_TAG: original.run_id})
    earlier = original.tags.get(schema.CONFIRMED_BY_TAG)
    store.set_tags(original.run_id, {schema.CONFIRMED_BY_TAG: f"{earlier}, {result.name}" if earlier else result.name})
    value_of = {str(row["trial"]): float(row[f"best_{original.metric}"]) for _, row in top.iterrows()}
    for trial in result.trials:
        flat = spaces.flatten(trial.config)
        match = next((t for t, config in configs.items() if spaces.holds(flat, {k: config[k] for k in searched})), None)
        run_id = result.run_ids.get(trial.name)
        if match is not None and run_id is not None:
            store.set_tags(run_id, {schema.CONFIRM_OF_TAG: match, schema.CONFIRM_ORIGINAL_TAG: f"{value_of[match]!r}"})


def describe(table: pd.DataFrame, *, original: str, metric: str, mode: str, winner: str) -> str:
    """The re-ranked table and the verdict on the original winner."""
    lines = [f"Configurations of {original} ranked by their mean {metric} ({mode}) over the new seeds:"]
    header = ["rank", "trial", f"original {metric}", "mean", "std", "min", "max", "seeds"]
    rows = [
        [str(i + 1), str(r["trial"]), *(_fmt(r[c]) for c in ("original", "mean", "std", "min", "max")), str(r["seeds"])]
        for i, r in table.iterrows()
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
    lines += ["  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)) for row in [header, *rows]]
    if table.empty:
        lines.append("No confirming trial reported a finite value.")
    else:
        lines.append(_verdict(table, winner))
    return "\n".join(lines)


def _verdict(table: pd.DataFrame, winner: str) -> str:
    """Whether the original winner still wins on the mean; a tie for first (equal means: the
    table's order among them is no evidence) is said as one, never called a win or a loss."""
    best = table.iloc[0]["mean"]
    first = [str(r["trial"]) for _, r in table.iterrows() if r["mean"] == best]
    if winner in first and len(first) > 1:
        others = ", ".join(t for t in first if t != winner)
        return (
            f"The original winner, {winner}, ties with {others} (mean {_fmt(best)} each): it is kept, as a tie "
            "does not overturn it."
        )
    if winner in first:
        return f"The original winner, {winner}, still wins (mean {_fmt(best)})."
    place = next((i + 1 for i, r in table.iterrows() if str(r["trial"]) == winner), None)
    return (
        f"The original winner, {winner}, does not hold: {table.iloc[0]['trial']} wins on the mean "
        f"({_fmt(best)}); {winner} is " + (f"#{place}." if place else "without a finite value.")
    )


def _fmt(value: Any) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else f"{float(value):.4g}"


def _params(sweep: Any, run_id: str) -> dict[str, str]:
    return dict(next(run for run in sweep.runs if run.run_id == run_id).params)
