"""``tunetrain replay RUN_ID``: run one recorded trial again from its MLflow record alone.

The record holds everything a trial needs: its resolved config (params), its seed
(``tunetrain.seed``), the number of workers and the trial runner (the sweep's tags), and the
experiment file itself (an artifact of the sweep's parent run). The replay is a sweep of one
trial with exactly that config and seed, recorded as a new run linked to the original
(``tunetrain.replay_of``); then the two metric histories are compared step by step, and the
provenance items that differ (package versions, hardware, deterministic mode) are named.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import Any

import pandas as pd

from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment, StopRule, load_experiment
from tunetrain.resources import parse_workers
from tunetrain.results.analysis import nested_config
from tunetrain.tracking import RunRecord, SweepStore, schema

REPLAY_OF_TAG = schema.REPLAY_OF_TAG

# Recorded facts that can make two runs of the same trial differ.
_PROVENANCE_PREFIXES = (
    schema.VERSION_PREFIX,
    schema.HARDWARE_PREFIX,
    schema.DETERMINISTIC_TAG,
    schema.EXPERIMENT_SHA256_TAG,
)


@dataclasses.dataclass
class ReplaySpec:
    """What to run again: the original trial's run and sweep, and the one-trial experiment."""

    run: RunRecord
    parent: RunRecord
    experiment: Experiment
    seed: int
    steps: int
    note: str = ""


# Names ending in "_s" are times in seconds or rates per second (StepRunner's step_time_s,
# tokens_per_s; Tune's time_this_iter_s): the same steps take a different time on every run,
# so they are shown but never decide whether a replay is identical.
TIMING_SUFFIX = "_s"


def is_timing(metric: str) -> bool:
    return metric.endswith(TIMING_SUFFIX)


@dataclasses.dataclass
class MetricComparison:
    metric: str
    compared: int  # points compared, in report order
    original_points: int
    replayed_points: int
    first_step: int | None = None  # the first step whose values differ
    original: float | None = None
    replayed: float | None = None
    max_abs_diff: float = 0.0

    @property
    def identical(self) -> bool:
        return self.first_step is None and self.original_points == self.replayed_points

    @property
    def timing(self) -> bool:
        """A time or a rate: compared and shown, not part of the verdict."""
        return is_timing(self.metric)


def prepare_replay(
    store: SweepStore, run_id: str, *, steps: int | None, folder: Path, trust_changed_file: bool = False
) -> ReplaySpec:
    """Read the trial's record and build its one-trial experiment (the experiment file is
    downloaded into ``folder``, and imported only with the sha256 the sweep recorded)."""
    from tunetrain.sweeps.request import check_recorded_file

    run = store.run(run_id)
    parent_id = run.tags.get(schema.PARENT_TAG)
    if parent_id is None or schema.SEED_TAG not in run.params:
        raise ExperimentError(
            f"Run {run_id} is not a tunetrain trial (no parent sweep run or no tunetrain.seed param).",
            fix="Pass the run id of a trial: `tunetrain show SWEEP --all-columns` lists them.",
        )
    parent = store.run(parent_id)
    source = parent.tags.get(schema.EXPERIMENT_FILE_TAG, "")
    if not source:
        raise ExperimentError(
            f"The sweep of run {run_id} recorded no experiment file, so the trial cannot be replayed.",
            fix="Replay trials of sweeps run with `tunetrain sweep FILE`.",
        )
    local = store.download_artifact(parent.run_id, Path(source).name, folder)
    check_recorded_file(local, parent.tags.get(schema.EXPERIMENT_SHA256_TAG), trust_changed_file=trust_changed_file)
    experiment = load_experiment(local)
    recorded = int(run.tags.get(schema.ITERATIONS_TAG, 0))
    note = ""
    exploits = (
        store.load_json_artifact(run.run_id, schema.PBT_EXPLOITS_ARTIFACT)
        if schema.PBT_EXPLOITS_TAG in run.tags
        else None
    )
    if exploits and exploits.get("exploits"):
        first = int(exploits["exploits"][0]["step"])
        note = f"PBT changed this trial at step {first}; the replay runs its first {first} steps, before the exploit."
        recorded = min(recorded, first)
    steps = steps if steps is not None else recorded
    if steps < 1:
        raise ExperimentError(
            f"Steps to replay must be at least 1, but got steps={steps} (the trial recorded {recorded}).",
            fix="Pass --steps N with N >= 1.",
        )
    config = nested_config(run.params)
    tags = parent.tags
    workers = parse_workers(str(tags.get(schema.WORKERS_PER_TRIAL_TAG, experiment.workers_per_trial)))
    runner = tags.get(schema.TRIAL_RUNNER_TAG, "auto")
    one_trial = experiment.one_trial(
        stop=StopRule(max_iterations=steps),
        space=config,  # every value pinned: the searcher has nothing to choose
        defaults=config,  # the same: what the experiment's preflight checks, as in its sweep
        workers_per_trial=workers,
        trial_runner=runner if runner in ("in_process", "worker_group", "torch_trainer") else "auto",
        seed=int(tags.get(schema.ROOT_SEED_TAG, 0)),
        deterministic=tags.get(schema.DETERMINISTIC_TAG) == "true",
        # On the device it ran on: a sweep's --use-gpu is not in the experiment file.
        use_gpu=experiment.use_gpu or run.tags.get(schema.DEVICE_TAG) == "cuda",
    )
    return ReplaySpec(
        run=run, parent=parent, experiment=one_trial, seed=int(run.params[schema.SEED_TAG]), steps=steps, note=note
    )


def _in_order(history: pd.DataFrame, metric: str) -> pd.DataFrame:
    # Report order: after a restore, steps may repeat, so order by time, then step.
    points = history[history["metric"] == metric]
    return points.sort_values(["timestamp", "step"], kind="stable").reset_index(drop=True)


def _same(a: float, b: float) -> bool:
    return a == b or (math.isnan(a) and math.isnan(b))


def compare_histories(original: pd.DataFrame, replayed: pd.DataFrame, *, steps: int) -> list[MetricComparison]:
    """Each metric of the original's first ``steps`` steps against the replay's, point by point."""
    comparisons = []
    for metric in sorted(set(original["metric"])):
        a = _in_order(original[original["step"] <= steps], metric)
        b = _in_order(replayed, metric)
        result = MetricComparison(metric, min(len(a), len(b)), len(a), len(b))
        for i in range(result.compared):
            x, y = float(a["value"][i]), float(b["value"][i])
            if not _same(x, y):
                diff = abs(x - y)
                result.max_abs_diff = max(result.max_abs_diff, diff if math.isfinite(diff) else math.inf)
                if result.first_step is None:
                    result.first_step, result.original, result.replayed = int(a["step"][i]), x, y
        comparisons.append(result)
    return comparisons


def provenance_differences(original: dict[str, str], replayed: dict[str, str]) -> list[tuple[str, str, str]]:
    """(item, original value, replay value) for every recorded item that differs."""
    keys = sorted(k for k in {*original, *replayed} if k.startswith(_PROVENANCE_PREFIXES))
    return [(k, original.get(k, "-"), replayed.get(k, "-")) for k in keys if original.get(k) != replayed.get(k)]


def describe(spec: ReplaySpec) -> str:
    config = json.dumps(nested_config(spec.run.params), default=str)
    return (
        f"Replaying {spec.run.name} (run {spec.run.run_id}) of sweep {spec.parent.name}: "
        f"{spec.experiment.workers_per_trial} worker(s), seed {spec.seed}, {spec.steps} step(s)\n"
        f"  config: {config}" + (f"\n  note: {spec.note}" if spec.note else "")
    )


def comparison_table(comparisons: list[MetricComparison]) -> str:
    lines = [f"  {'metric':<20} {'points':>7}  {'identical':<9}  first difference"]
    for c in comparisons:
        if c.timing:
            lines.append(f"  {c.metric:<20} {c.compared:>7}  {'timing':<9}  a time or rate: shown, not judged")
            continue
        if c.identical:
            detail = ""
        elif c.first_step is not None:
            detail = (
                f"step {c.first_step}: {c.original!r} (original) vs {c.replayed!r} (replay); "
                f"max |diff| {c.max_abs_diff:.3g}"
            )
        else:
            detail = f"{c.original_points} points in the original, {c.replayed_points} in the replay"
        lines.append(f"  {c.metric:<20} {c.compared:>7}  {'yes' if c.identical else 'no':<9}  {detail}".rstrip())
    return "\n".join(lines)


def to_record(comparisons: list[MetricComparison]) -> dict[str, Any]:
    """The comparison as JSON, logged on the replay's run (``replay_comparison.json``)."""
    return {"metrics": [dataclasses.asdict(c) | {"identical": c.identical, "timing": c.timing} for c in comparisons]}
