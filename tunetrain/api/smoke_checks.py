"""``sweep --smoke``: one tiny trial of the experiment on the target cluster, and a verdict.

Checks, one line each: the trial's resources can be scheduled; the metric is reported
under the experiment's name; it is finite and improves; a checkpoint is saved and loads
back (a second tiny trial starts from it) when the experiment reports checkpoints, and must
for PBT; then the measured start-up time and time per training iteration.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
from collections.abc import Mapping
from typing import Any, Literal

import pandas as pd

from tunetrain.experiment import Experiment, StopRule
from tunetrain.overrides import apply_overrides
from tunetrain.records import SweepOutcome, TrialRecord

Verdict = Literal["PASS", "FAIL", "SKIP"]
DEFAULT_STEPS = 5


@dataclasses.dataclass
class SmokeCheck:
    name: str
    verdict: Verdict
    detail: str

    def line(self) -> str:
        return f"  {self.verdict:<4}  {self.name}: {self.detail}"


def smoke_experiment(experiment: Experiment, *, steps: int) -> Experiment:
    """One trial, FIFO, random search, ``steps`` iterations, the experiment's smoke values."""
    if steps < 2:
        raise ValueError(f"A smoke run needs at least 2 steps to see the metric improve, but got {steps=}.")
    space, defaults = experiment.space, experiment.defaults
    if experiment.smoke:
        space, defaults = apply_overrides(space, defaults, dict(experiment.smoke))
    return experiment.one_trial(
        stop=StopRule(max_iterations=steps, max_trial_seconds=experiment.stop.max_trial_seconds),
        space=space,
        defaults=defaults,
        # The experiment's own checkpoint policy: the smoke keeps what the sweep would keep,
        # and the round trip starts from the latest checkpoint, which Tune always keeps.
    )


def restore_experiment(smoke: Experiment) -> Experiment:
    """The round trip's second trial: one step, started from the first trial's checkpoint."""
    return smoke.replace(stop=StopRule(max_iterations=1, max_trial_seconds=smoke.stop.max_trial_seconds))


def resources_check(smoke: Experiment) -> SmokeCheck:
    """Reached only when the plan fitted the cluster (a trial that cannot fit is refused first)."""
    worker = ", ".join(f"{k}={v:g}" for k, v in smoke.worker_resources.items())
    return SmokeCheck(
        "resources", "PASS", f"a trial ({smoke.workers_per_trial} worker(s) x {worker}) was scheduled and ran"
    )


def trial_checks(
    experiment: Experiment, outcome: SweepOutcome, history: pd.DataFrame
) -> tuple[list[SmokeCheck], TrialRecord | None]:
    """The metric, finiteness/improvement checks; returns them and the trial when it ran."""
    metric, mode = experiment.primary_metric, experiment.primary_mode
    if outcome.bad_input:
        return [SmokeCheck("metric", "FAIL", outcome.bad_input)], None
    trial = outcome.trials[0] if outcome.trials else None
    if trial is None or trial.status == "failed":
        error = trial.error.strip().splitlines()[-1] if trial and trial.error else "the trial did not run"
        return [SmokeCheck("metric", "FAIL", f"the trial failed before the checks: {error}")], trial
    checks = []
    missing = [m for m, _ in experiment.objectives if m not in set(history["metric"])]
    if missing:
        reported = sorted(set(history["metric"]))
        checks.append(
            SmokeCheck("metric", "FAIL", f"{', '.join(missing)} never reported; reported: {', '.join(reported)}")
        )
        return checks, trial
    points = history[history["metric"] == metric].sort_values("step")
    checks.append(SmokeCheck("metric", "PASS", f"{metric} reported at {len(points)} step(s)"))
    values = [float(v) for v in points["value"]]
    bad = [(int(s), v) for s, v in zip(points["step"], values, strict=True) if not math.isfinite(v)]
    if bad:
        checks.append(SmokeCheck("finite and improving", "FAIL", f"{metric} is {bad[0][1]} at step {bad[0][0]}"))
        return checks, trial
    better = values[-1] < values[0] if mode == "min" else values[-1] > values[0]
    trend = f"{metric} {values[0]:.4g} -> {values[-1]:.4g} over {len(values)} step(s) ({mode})"
    checks.append(SmokeCheck("finite and improving", "PASS" if better else "FAIL", trend))
    return checks, trial


def checkpoint_check(experiment: Experiment, trial: TrialRecord) -> SmokeCheck | None:
    """None when a round trip is to be run; otherwise the verdict without one."""
    if trial.checkpoints:
        return None
    if experiment.scheduler in ("pbt", "pb2"):
        return SmokeCheck(
            "checkpoint",
            "FAIL",
            f"no checkpoint reported, and {experiment.scheduler.upper()} clones trials from their checkpoints "
            "(report with ray.train.report(metrics, checkpoint=...))",
        )
    return SmokeCheck("checkpoint", "SKIP", "no checkpoint reported (HyperBand and PBT need them)")


def round_trip_check(checkpoint: Mapping[str, Any], restored: SweepOutcome) -> SmokeCheck:
    trial = restored.trials[0] if restored.trials else None
    # It reported (whatever the value: a diverging loss is the other check's verdict).
    if trial is not None and trial.status != "failed" and trial.iterations >= 1:
        return SmokeCheck(
            "checkpoint",
            "PASS",
            f"saved at step {checkpoint['step']} and loaded back: a new trial started from it and reported",
        )
    returned_quietly = (  # no exception, no report: the sweep stopped it for the missing metric
        trial is not None
        and trial.iterations == 0
        and restored.bad_input is not None
        and trial.error in (None, restored.bad_input)
    )
    if returned_quietly:
        # The loop found nothing left to train: that it loads the checkpoint was not seen (a
        # loop that ignores it returns the same way), so it is not a pass.
        return SmokeCheck(
            "checkpoint",
            "SKIP",
            f"saved at step {checkpoint['step']}, but the trial started from it had no step left to run, so loading "
            "it back was not checked (give the smoke more steps than the checkpoint's: Experiment.smoke or "
            "--smoke-steps)",
        )
    error = trial.error.strip().splitlines()[-1] if trial and trial.error else "the restored trial did not report"
    return SmokeCheck("checkpoint", "FAIL", f"saved at step {checkpoint['step']} but does not load back: {error}")


def timings(trial: TrialRecord, history: pd.DataFrame) -> tuple[float, float, int] | None:
    """(start-up seconds: trial start to first report, median seconds per iteration, the
    number of iteration gaps it is the median of); None with fewer than 2 reports."""
    times = sorted(set(history["timestamp"]))
    if len(times) < 2:
        return None
    gaps = [b - a for a, b in itertools.pairwise(times)]
    return times[0] - trial.start_time, statistics.median(gaps), len(gaps)


def timing_check(measured: tuple[float, float, int] | None) -> SmokeCheck:
    if measured is None:
        return SmokeCheck("timing", "SKIP", "fewer than 2 reports")
    startup, per_step, gaps = measured
    return SmokeCheck(
        "timing",
        "PASS",
        f"start-up {startup:.3g} s (trial start to first report), {per_step:.3g} s per iteration (median of {gaps})",
    )
