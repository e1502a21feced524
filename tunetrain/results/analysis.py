"""Sweeps as pandas tables, read from MLflow (any tracking URI, not Ray's files).

    from tunetrain.results.analysis import list_sweeps, load_sweep

    sweep = load_sweep()                 # the newest sweep in ./mlflow.db
    sweep.trials()                       # one row per trial
    sweep.history()                      # every metric point, long format
    sweep.best(k=3)                      # the best trials by the sweep's metric

Column names follow Ray Tune's ``ResultGrid.get_dataframe()`` for the config
(``config/lr``), so notebooks written for Ray Tune read the same way.
"""

from __future__ import annotations

import ast
import functools
import math
from typing import Any, Literal

import pandas as pd

from tunetrain import space as spaces
from tunetrain.errors import ExperimentError
from tunetrain.records import against_baseline
from tunetrain.tracking import RunRecord, SweepStore, TrackingURI, check_existing, resolve_tracking_uri, schema

__all__ = ["Sweep", "list_sweeps", "load_sweep", "nested_config"]

Mode = Literal["min", "max"]


def _value(text: str) -> Any:
    """An MLflow param (always a string) back as the Python value it was logged from."""
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError):
        return {"true": True, "false": False}.get(text.lower(), text)


def nested_config(params: dict[str, str]) -> dict[str, Any]:
    """A trial's config as its train loop received it, from its MLflow params (dotted keys
    nested again, values typed back; ``tunetrain.*`` params left out)."""
    return spaces.unflatten({k: _value(v) for k, v in params.items() if not k.startswith(schema.TAG_PREFIX)})


def _objectives(tags: dict[str, str]) -> list[tuple[str, Mode]]:
    """(metric, mode) of each objective, from the parent run's tags."""
    text = tags.get(schema.OBJECTIVES_TAG)
    if text:  # "loss (min), n_params (min)"
        pairs = [item.strip().rsplit(" (", 1) for item in text.split(",")]
        return [(metric, "max" if mode.rstrip(")") == "max" else "min") for metric, mode in pairs]
    mode: Mode = "max" if tags.get(schema.MODE_TAG) == "max" else "min"
    return [(tags.get(schema.METRIC_TAG, ""), mode)]


def _better(mode: str) -> Any:
    return min if mode == "min" else max


class Sweep:
    """One recorded sweep: its parent run, its trials' runs and their metric histories.

    Built by :func:`load_sweep`; tables are read once and cached.
    """

    def __init__(self, store: SweepStore, parent: RunRecord) -> None:
        self.store = store
        self.parent = parent
        self.run_id = parent.run_id
        self.name = parent.tags.get(schema.SWEEP_NAME_TAG, parent.name)
        self.experiment = store.experiment_name(parent.experiment_id)
        self.objectives = _objectives(parent.tags)
        self.metric, self.mode = self.objectives[0]
        self.scheduler = parent.tags.get(schema.SCHEDULER_TAG, "")
        self.searcher = parent.tags.get(schema.SEARCHER_TAG, "")
        self.tags = parent.tags
        self.runs = store.trials(parent)

    def __repr__(self) -> str:
        return (
            f"Sweep({self.name!r}, experiment={self.experiment!r}, trials={len(self.runs)}, "
            f"metric={self.metric!r}, mode={self.mode!r}, scheduler={self.scheduler!r}, searcher={self.searcher!r})"
        )

    @property
    def experiment_file(self) -> str:
        """The experiment file the sweep ran ("" when no file defined it)."""
        return str(self.tags.get(schema.EXPERIMENT_FILE_TAG, ""))

    @property
    def experiment_sha256(self) -> str | None:
        """The sha256 of that file's content when the sweep started."""
        return self.tags.get(schema.EXPERIMENT_SHA256_TAG)

    @property
    def space(self) -> dict[str, str]:
        """Each searched parameter and its distribution, as the sweep recorded it."""
        return {
            k.removeprefix(schema.SPACE_PARAM_PREFIX): v
            for k, v in self.parent.params.items()
            if k.startswith(schema.SPACE_PARAM_PREFIX)
        }

    def is_log_scale(self, param: str) -> bool:
        """Whether the space drew ``param`` on a log scale (``tune.loguniform`` and kin)."""
        return "log" in self.space.get(param, "")

    def choices(self, param: str) -> list[Any] | None:
        """The values a categorical dimension (``tune.choice``, ``tune.grid_search``) offered,
        in the space's order, as the sweep recorded them; None for any other dimension."""
        recorded = self.space.get(param, "")
        for kind in ("choice(", "grid_search("):
            if recorded.startswith(kind) and recorded.endswith(")"):
                try:
                    values = ast.literal_eval(recorded[len(kind) : -1])
                except (ValueError, SyntaxError):  # choices that are not literals: shown as found
                    return None
                return list(values) if isinstance(values, list | tuple) else None
        return None

    @property
    def params(self) -> list[str]:
        """The config keys that vary between trials (searched dimensions), in the space's order."""
        varying = [key for key in self.space if key in self._config_keys()]
        return varying or self._config_keys()

    def _config_keys(self) -> list[str]:
        keys: dict[str, None] = {}
        for run in self.runs:
            keys.update((k, None) for k in run.params if k != schema.SEED_TAG)
        return list(keys)

    @functools.cached_property
    def metrics(self) -> list[str]:
        """Every metric any trial recorded, objectives first."""
        found: dict[str, None] = {m: None for m, _ in self.objectives}
        for run in self.runs:
            found.update((k, None) for k in sorted(run.metrics))
        return [m for m in found if any(m in run.metrics for run in self.runs)]

    @functools.cached_property
    def _history(self) -> pd.DataFrame:
        frame = self.store.histories([r.run_id for r in self.runs], self.metrics)
        names = {r.run_id: r.name for r in self.runs}
        frame["trial"] = frame["run_id"].map(names)
        frame = frame.astype({"step": "int64", "value": float, "timestamp": float})
        frame = frame[["run_id", "trial", "step", "metric", "value", "timestamp"]]
        return frame.sort_values(["trial", "metric", "step", "timestamp"], kind="stable").reset_index(drop=True)

    def history(self, metrics: str | list[str] | None = None) -> pd.DataFrame:
        """Every recorded point, one row each: run_id, trial, step, metric, value, timestamp."""
        frame = self._history
        if metrics is not None:
            wanted = [metrics] if isinstance(metrics, str) else list(metrics)
            unknown = sorted(set(wanted) - set(self.metrics))
            if unknown:
                raise ExperimentError(
                    f"Metric(s) {', '.join(map(repr, unknown))} not recorded in sweep {self.name!r}; "
                    f"it has: {', '.join(map(repr, self.metrics))}.",
                    fix="Use one of those names.",
                )
            frame = frame[frame["metric"].isin(wanted)].reset_index(drop=True)
        return frame

    def _best_points(self, metric: str, mode: str) -> dict[str, tuple[float, int]]:
        """Each trial's best finite value of ``metric`` over its history, and its (first) step."""
        points = self._history[self._history["metric"] == metric]
        if points.empty:  # no trial reported it (every one failed first): an empty mask would pick columns
            return {}
        points = points[points["value"].map(math.isfinite).astype(bool)].sort_values(["run_id", "step"], kind="stable")
        if points.empty:
            return {}
        index = (
            points.groupby("run_id")["value"].idxmin() if mode == "min" else points.groupby("run_id")["value"].idxmax()
        )
        best = points.loc[index]
        return {str(r): (float(v), int(s)) for r, v, s in zip(best["run_id"], best["value"], best["step"], strict=True)}

    def _best_values(self, metric: str, mode: str) -> dict[str, float]:
        """Each trial's best finite value of ``metric`` over its history."""
        return {run_id: value for run_id, (value, _) in self._best_points(metric, mode).items()}

    @functools.cached_property
    def _trials(self) -> pd.DataFrame:
        rows: list[dict[str, Any]] = []
        best = {metric: self._best_points(metric, mode) for metric, mode in self.objectives}
        for run in self.runs:
            tags = run.tags
            row: dict[str, Any] = {
                "trial": run.name,
                "trial_index": int(tags.get(schema.TRIAL_INDEX_TAG, len(rows))),
                "status": tags.get(schema.STATUS_TAG, run.status.lower()),
                "seed": _value(run.params.get(schema.SEED_TAG, tags.get(schema.SEED_TAG, "None"))),
                "baseline": tags.get(schema.BASELINE_TAG) == "true",
                "iterations": int(tags.get(schema.ITERATIONS_TAG, 0)),
                "duration_s": _duration(run),
                "start_time": pd.Timestamp(run.start_time, unit="s") if run.start_time else pd.NaT,
            }
            row.update({f"config/{k}": _value(v) for k, v in run.params.items() if k != schema.SEED_TAG})
            for metric, _ in self.objectives:
                row[f"best_{metric}"] = best[metric].get(run.run_id, (math.nan, None))[0]
            for metric in self.metrics:
                row[metric] = run.metrics.get(metric, math.nan)
            row["pareto"] = tags.get(schema.PARETO_TAG) == "true"
            row["checkpoint"] = tags.get(schema.CHECKPOINT_BEST_TAG) or tags.get(schema.CHECKPOINT_LATEST_TAG)
            # The step of the best value of the sweep's metric, and of the checkpoint kept as best:
            # they differ when the loop did not checkpoint at that step (or retention dropped it).
            row["best_step"] = best[self.metric].get(run.run_id, (None, math.nan))[1]
            row["checkpoint_step"] = _int_or_nan(tags.get(schema.CHECKPOINT_STEP_TAG))
            row["error"] = tags.get(schema.ERROR_TAG)
            row["run_id"] = run.run_id
            rows.append(row)
        frame = pd.DataFrame(rows)
        if not len(self.objectives) > 1 and "pareto" in frame:
            frame = frame.drop(columns="pareto")
        return frame

    def trials(self) -> pd.DataFrame:
        """One row per trial: trial, trial_index, status, seed, baseline (the sweep's baseline
        trial), iterations (steps run),
        duration_s, start_time, ``config/<key>`` for every config value, ``best_<metric>``
        for each objective (by its mode), the last value of every metric, ``pareto`` (several
        objectives), checkpoint (the best kept, else the latest), error and run_id."""
        return self._trials.copy()

    def best(self, k: int = 1, *, metric: str | None = None, mode: Mode | None = None) -> pd.DataFrame:
        """The ``k`` best trials by their best value of ``metric`` (the sweep's first objective).

        Trials stopped early by the scheduler compete with the value they reached; trials
        without a finite value (failed, diverged) are left out.
        """
        if k < 1:
            raise ValueError(f"k must be at least 1, but got {k=}.")
        metric = metric or self.metric
        if metric not in self.metrics:
            raise ExperimentError(
                f"Metric {metric!r} not recorded in sweep {self.name!r}; it has: {', '.join(map(repr, self.metrics))}.",
                fix="Use one of those names.",
            )
        mode = mode or dict(self.objectives).get(metric, self.mode)
        if mode not in ("min", "max"):
            raise ValueError(f"mode must be 'min' or 'max', but got {mode=}.")
        frame = self._trials.copy()
        values = self._best_values(metric, mode)
        frame["_rank_value"] = frame["run_id"].map(values)
        frame = frame[frame["_rank_value"].notna()]
        frame = frame.sort_values(["_rank_value", "trial_index"], ascending=[mode == "min", True], kind="stable")
        return frame.drop(columns="_rank_value").head(k).reset_index(drop=True)

    def versus_baseline(self) -> str | None:
        """The best trial against the baseline trial (absolute and relative difference in the
        sweep's metric), as the sweep's summary says it; None without a baseline trial."""
        frame = self._trials
        base = frame[frame["baseline"]] if "baseline" in frame else frame.iloc[0:0]
        if base.empty:
            return None
        top = self.best(1) if self.metric in self.metrics else frame.iloc[0:0]
        row = base.iloc[0]
        value = row[f"best_{self.metric}"]
        return against_baseline(
            metric=self.metric,
            mode=self.mode,
            best=(str(top.iloc[0]["trial"]), float(top.iloc[0][f"best_{self.metric}"])) if not top.empty else None,
            baseline=(str(row["trial"]), None if pd.isna(value) else float(value), str(row["status"])),
        )

    def confirmation(self) -> pd.DataFrame:
        """A ``tunetrain confirm`` sweep's configurations, one row each, best mean first:
        the original trial whose config it ran again, its value in the original sweep
        (``original``, recorded when the confirmation ran), the mean, spread (``std``, sample
        standard deviation), ``min`` and ``max`` of this sweep's best ``metric`` over its seeds,
        and ``seeds``. Empty for a sweep that confirms nothing."""
        columns = ["trial", "original", "mean", "std", "min", "max", "seeds"]
        frame = self._trials
        if schema.CONFIRMS_TAG not in self.tags or frame.empty:
            return pd.DataFrame(columns=columns)
        value = f"best_{self.metric}"
        of = {run.run_id: run.tags.get(schema.CONFIRM_OF_TAG) for run in self.runs}
        original = {
            run.tags.get(schema.CONFIRM_OF_TAG): _value(run.tags.get(schema.CONFIRM_ORIGINAL_TAG, "nan"))
            for run in self.runs
        }
        frame = frame.assign(_of=frame["run_id"].map(of)).dropna(subset=["_of"])
        grouped = frame.groupby("_of")[value]
        table = pd.DataFrame(
            {
                "original": [float(original.get(key, math.nan)) for key in grouped.groups],
                "mean": grouped.mean(),
                "std": grouped.std(),
                "min": grouped.min(),
                "max": grouped.max(),
                "seeds": grouped.count(),
            }
        )
        table = table.rename_axis("trial").reset_index()
        return table.sort_values("mean", ascending=self.mode == "min", kind="stable").reset_index(drop=True)[columns]

    def best_config(self, *, metric: str | None = None, mode: Mode | None = None) -> dict[str, Any]:
        """The best trial's config, nested as the train loop received it."""
        top = self.best(1, metric=metric, mode=mode)
        if top.empty:
            raise ExperimentError(
                f"Sweep {self.name!r} has no trial with a finite {metric or self.metric!r}.",
                fix="Look at the trials' errors with `tunetrain show SWEEP`.",
            )
        run = next(r for r in self.runs if r.run_id == top.iloc[0]["run_id"])
        return nested_config(run.params)

    def best_checkpoint(self, *, metric: str | None = None, mode: Mode | None = None) -> BestCheckpoint | None:
        """Where the best trial's best kept checkpoint lies (None when it kept none): a path (a
        ``str``) that also says which step it holds and that step's ``metric`` value, beside the
        step and value of the trial's best (``.describe()``; they differ when the loop did not
        checkpoint the best step)."""
        metric = metric or self.metric
        top = self.best(1, metric=metric, mode=mode)
        if top.empty or not isinstance(top.iloc[0]["checkpoint"], str):
            return None
        row = top.iloc[0]
        mode = mode or dict(self.objectives).get(metric, self.mode)
        best_value, best_step = self._best_points(metric, mode)[row["run_id"]]
        step = None if pd.isna(row["checkpoint_step"]) else int(row["checkpoint_step"])
        points = self._history[
            (self._history["run_id"] == row["run_id"])
            & (self._history["metric"] == metric)
            & (self._history["step"] == step)
        ]
        return BestCheckpoint(
            row["checkpoint"],
            trial=str(row["trial"]),
            metric=metric,
            step=step,
            value=float(points["value"].iloc[0]) if len(points) else None,
            best_step=best_step,
            best_value=best_value,
        )

    def pbt_exploits(self) -> pd.DataFrame:
        """PBT/PB2 exploits, one row each: step, trial (recipient), donor, param, old, new."""
        rows: list[dict[str, Any]] = []
        for run in self.runs:
            if schema.PBT_EXPLOITS_TAG not in run.tags:
                continue
            record = self.store.load_json_artifact(run.run_id, schema.PBT_EXPLOITS_ARTIFACT) or {}
            for exploit in record.get("exploits", []):
                for param, new in exploit.get("new", {}).items():
                    rows.append(
                        {
                            "step": exploit["step"],
                            "trial": run.name,
                            "donor": exploit["donor"],
                            "donor_step": exploit.get("donor_step"),
                            "param": param,
                            "old": exploit.get("old", {}).get(param),
                            "new": new,
                        }
                    )
        columns = ["step", "trial", "donor", "donor_step", "param", "old", "new"]
        return pd.DataFrame(rows, columns=columns).sort_values(["step", "trial"], kind="stable").reset_index(drop=True)

    def settings(self) -> dict[str, str]:
        """The sweep's settings as recorded on its parent run (``tunetrain.*`` tags)."""
        return {k.removeprefix("tunetrain."): v for k, v in sorted(self.tags.items()) if k.startswith("tunetrain.")}

    def environment(self) -> dict[str, str]:
        """Package versions and hardware recorded on the parent run."""
        return {k: v for k, v in sorted(self.tags.items()) if k.startswith(schema.ENVIRONMENT_PREFIXES)}


def existing_store(tracking_uri: str | TrackingURI | None) -> SweepStore:
    """The store ``tracking_uri`` names (None: ``MLFLOW_TRACKING_URI``, else ./mlflow.db; a
    :class:`TrackingURI` is one a sweep resolved already), which must exist: reading never
    creates one."""
    found = resolve_tracking_uri(tracking_uri, flag="tracking_uri")
    check_existing(found)
    return SweepStore(found.uri)


def _sweep_status(run: Any) -> str:
    """The parent run's status, and ``all failed`` (``all diverged``, ``all failed or
    diverged``) for a sweep that finished with no trial completed or stopped early by the
    scheduler (its command exited 1)."""
    status = str(run.status).lower()
    counts = [run.tags.get(schema.TRIALS_STATUS_PREFIX + key) for key in ("completed", "stopped_early")]
    recorded = status == "finished" and None not in counts and int(run.tags.get(schema.TRIALS_TAG, 0)) > 0
    if not recorded or any(int(value) for value in counts):
        return status
    # No trial with a result: said as what happened to them (NaN is not a crash).
    diverged = int(run.tags.get(schema.TRIALS_STATUS_PREFIX + "diverged") or 0)
    if diverged and diverged == int(run.tags.get(schema.TRIALS_TAG, 0)):
        return "all diverged"
    return "all failed or diverged" if diverged else "all failed"


def list_sweeps(*, experiment: str | None = None, tracking_uri: str | None = None, smoke: bool = False) -> pd.DataFrame:
    """Every sweep in the store (of one experiment, or all), newest first: sweep, experiment,
    start_time, status, trials, metric, mode, best value, scheduler, searcher, run_id. The
    ``--smoke`` runs' sweeps only with ``smoke=True``."""
    store = existing_store(tracking_uri)
    names: dict[str, str] = {}
    rows = []
    for run in store.sweeps(experiment, smoke=smoke):
        if run.experiment_id not in names:
            names[run.experiment_id] = store.experiment_name(run.experiment_id)
        metric = run.tags.get(schema.METRIC_TAG, "")
        rows.append(
            {
                "sweep": run.tags.get(schema.SWEEP_NAME_TAG, run.name),
                "experiment": names[run.experiment_id],
                "start_time": pd.Timestamp(run.start_time, unit="s") if run.start_time else pd.NaT,
                "status": _sweep_status(run),
                "trials": int(run.tags.get(schema.TRIALS_TAG, run.tags.get(schema.NUM_SAMPLES_TAG, 0))),
                "metric": metric,
                "mode": run.tags.get(schema.MODE_TAG, ""),
                "best_value": run.metrics.get(schema.BEST_METRIC_PREFIX + metric, math.nan),
                "scheduler": run.tags.get(schema.SCHEDULER_TAG, ""),
                "searcher": run.tags.get(schema.SEARCHER_TAG, ""),
                "run_id": run.run_id,
            }
        )
    columns = ["sweep", "experiment", "start_time", "status", "trials", "metric", "mode", "best_value"]
    return pd.DataFrame(rows, columns=[*columns, "scheduler", "searcher", "run_id"])


def load_sweep(
    sweep: str | None = None, *, experiment: str | None = None, tracking_uri: str | TrackingURI | None = None
) -> Sweep:
    """A sweep by name or parent run id (None: the newest, of ``experiment`` when given)."""
    store = existing_store(tracking_uri)
    return Sweep(store, store.sweep(sweep, experiment=experiment))


def _duration(run: RunRecord) -> float:
    """Seconds the trial ran: its recorded duration (which leaves out the time a resumed sweep
    was stopped), else its run's end minus start."""
    if schema.DURATION_TAG in run.tags:
        return float(run.tags[schema.DURATION_TAG])
    return (run.end_time - run.start_time) if run.end_time and run.start_time else math.nan


def _int_or_nan(text: str | None) -> float | int:
    return int(text) if text not in (None, "") else math.nan


class BestCheckpoint(str):
    """The path of a trial's best kept checkpoint, with the step it holds and that step's value
    of ``metric``, beside the step and value of the trial's best (see
    :meth:`Sweep.best_checkpoint`). It is the path wherever a ``str`` is taken."""

    trial: str
    metric: str
    step: int | None
    value: float | None
    best_step: int
    best_value: float

    def __new__(cls, path: str, **facts: Any) -> BestCheckpoint:
        checkpoint = super().__new__(cls, path)
        checkpoint.__dict__.update(facts)
        return checkpoint

    @property
    def holds_best(self) -> bool:
        """Whether the checkpoint is of the step with the trial's best value."""
        return self.step == self.best_step

    def describe(self) -> str:
        """One line: the checkpoint's step and value, and the best step's when they differ."""
        held = "step ?" if self.step is None else f"step {self.step}"
        if self.value is not None:
            held += f" ({self.metric} {self.value:.6g})"
        best = f"{self.metric} {self.best_value:.6g} at step {self.best_step}"
        if self.holds_best:
            return f"{self.trial}: checkpoint of {held}, its best {self.metric}"
        return f"{self.trial}: checkpoint of {held}; its best was {best}, which has no kept checkpoint"

    def __repr__(self) -> str:
        return f"BestCheckpoint({str(self)!r}: {self.describe()})"
