"""What a sweep will cost, from the timings of the experiment's latest ``--smoke`` run.

    expected iterations per trial  x  seconds per iteration              = one trial's training
    + the smoke's start-up, once per trial (a TorchTrainer per trial) or once per slot of
      trials at once (in process, worker group: later trials reuse the slot's process and
      workers, about 0.07 s, docs/benchmarks.md section 1)                = the sweep's trials
    trials (the baseline included) / trials at once                      = wall time
    trial-seconds x CPUs (GPUs) per trial                                = CPU-hours (GPU-hours)

Iterations per trial follow the scheduler: FIFO and PBT run every trial to ``max_t``; ASHA
keeps 1/reduction_factor of the trials at each rung (the expectation if it stops exactly that
share; with few trials, or trials one at a time, it compares each with fewer and stops fewer,
and at a rung that misleads it stops none (tunetrain.algorithms._rung_trust), so the estimate
also gives the cost if it stops none); median stopping and HyperBand stop
some trials by rules that depend on the results, so ``max_t`` is an upper bound there, and
the estimate says so.
"""

from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tunetrain.experiment import Experiment


@dataclasses.dataclass(frozen=True)
class Estimate:
    iterations_per_trial: float
    basis: str
    trial_s: float
    wall_s: float
    cpu_hours: float
    gpu_hours: float
    wall_s_at_most: float | None = None  # ASHA stopping no trial: every one to max_t


def _max_t(experiment: Experiment) -> float | None:
    """The most iterations a trial runs: the scheduler's ``max_t`` or the stop rule's limit,
    the lower of the two; None without either."""
    max_t = dict(experiment.scheduler_options).get("max_t", experiment.stop.max_iterations)
    if experiment.stop.max_iterations is not None and max_t is not None:
        max_t = min(max_t, experiment.stop.max_iterations)
    return max_t


def iterations_per_trial(experiment: Experiment) -> tuple[float, str] | None:
    """Expected iterations of one trial and how that was worked out; None when the
    experiment sets no iteration limit (its trials end when their train loop does)."""
    options = dict(experiment.scheduler_options)
    max_t = _max_t(experiment)
    if max_t is None:
        return None
    if experiment.scheduler == "asha":
        grace = int(options.get("grace_period", 1))
        rf = float(options.get("reduction_factor", 2))
        rungs = [grace * rf**k for k in range(64) if grace * rf**k < max_t]
        ends = [*rungs[1:], max_t]
        expected = grace + sum(
            rf ** -(k + 1) * (end - start) for k, (start, end) in enumerate(zip(rungs, ends, strict=True))
        )
        return expected, f"ASHA: grace {grace}, reduction factor {rf:g}, max_t {max_t:g}"
    if experiment.scheduler in ("median", "hyperband"):
        return float(max_t), f"{experiment.scheduler}: at most max_t {max_t:g} (an upper bound)"
    return float(max_t), f"{experiment.scheduler}: every trial runs max_t {max_t:g}"


def estimate(
    experiment: Experiment, *, max_concurrent: int, startup_s: float, iteration_s: float, trials: int | None = None
) -> Estimate | None:
    """The sweep's cost from a smoke run's timings; ``trials``: how many run (default the
    experiment's, grid points included; a sweep's plan adds its baseline trial)."""
    found = iterations_per_trial(experiment)
    if found is None:
        return None
    iterations, basis = found
    count = experiment.total_trials if trials is None else trials
    slots = max(1, min(max_concurrent, count))
    # A reused trial process (in process, worker group) starts once per slot; a TorchTrainer
    # trial starts its workers anew every time.
    starts = slots if experiment.reuses_trial_process else count
    total_s = starts * startup_s + count * iterations * iteration_s
    worker = experiment.worker_resources
    cpus = experiment.max_workers * worker.get("CPU", 0.0)  # an elastic trial at its largest
    gpus = experiment.max_workers * worker.get("GPU", 0.0)
    at_most = None
    if experiment.scheduler == "asha":
        full = float(_max_t(experiment) or iterations)  # every trial to max_t
        at_most = _wall(starts * startup_s + count * full * iteration_s, count, slots, startup_s + full * iteration_s)
    return Estimate(
        iterations_per_trial=iterations,
        basis=basis,
        trial_s=startup_s + iterations * iteration_s,
        wall_s=_wall(total_s, count, slots, startup_s + iterations * iteration_s),
        cpu_hours=total_s * cpus / 3600,
        gpu_hours=total_s * gpus / 3600,
        wall_s_at_most=at_most,
    )


def _wall(total_s: float, count: int, slots: int, trial_s: float) -> float:
    # Trials that end early free their slot for the next: the sum over slots, not waves of the longest.
    return min(total_s / slots, math.ceil(count / slots) * trial_s)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.1f} min"
    return f"{seconds / 3600:.1f} h"


def describe(
    experiment: Experiment, *, max_concurrent: int, smoke: Any, unfit: str = "", trials: int | None = None
) -> str:
    """The estimate lines of ``--dry-run``: from the latest smoke run of the sweep's trial shape
    (``smoke``, a :class:`tunetrain.tracking.SmokeTimings`), or why there is none and how to
    get one (``unfit``: why the newest smoke run does not apply)."""
    if smoke is None:
        if unfit:
            return f"Estimate: none. {unfit}"
        return "Estimate: no smoke run of this experiment recorded; run `tunetrain sweep FILE --smoke` first."
    name, startup_s, iteration_s = smoke.sweep, smoke.startup_s, smoke.iteration_s
    found = estimate(
        experiment, max_concurrent=max_concurrent, startup_s=startup_s, iteration_s=iteration_s, trials=trials
    )
    source = f"smoke run {name}: start-up {startup_s:.3g} s, {iteration_s:.3g} s per iteration"
    if found is None:
        return f"Estimate ({source}): unknown, the experiment sets no max_iterations (its trials end by themselves)."
    lines = [
        f"Estimate ({source}):",
        f"  {found.iterations_per_trial:.3g} iterations per trial ({found.basis}), ~{_duration(found.trial_s)} each",
        f"  wall time ~{_duration(found.wall_s)} with {max_concurrent} at once"
        + (f" (~{_duration(found.wall_s_at_most)} if ASHA stops none)" if found.wall_s_at_most else "")
        + f"; {found.cpu_hours:.3g} CPU-hours"
        + (f", {found.gpu_hours:.3g} GPU-hours" if found.gpu_hours else ""),
        "  start-up counted "
        + (
            "once per slot (trials reuse their slot's process)"
            if experiment.reuses_trial_process
            else "for every trial (a TorchTrainer each)"
        ),
    ]
    return "\n".join(lines)
