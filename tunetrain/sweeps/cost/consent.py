"""``sweep --ask-above`` (old name ``--confirm-above``): ask before a sweep that would cost more than a threshold.

The threshold is wall time (``1h``) or resource time (``2cpu-h``, ``10gpu-h``), written as a
``--budget``. A sweep asks when what it is expected to cost in that unit exceeds it: the
estimate of ``--dry-run`` (from the experiment's latest smoke run of the same trial shape) or,
where the sweep has one in that unit, its ``--budget`` (what it is allowed to spend). An
interactive sweep (stdin a terminal) shows both and asks; any other refuses with the flag to
pass (``--yes``), before anything starts. Below the threshold nothing is asked.

Where no flag gives the threshold: ``TUNETRAIN_CONFIRM_ABOVE``, else ``10gpu-h`` for sweeps
whose trials hold GPUs, else none. The answer goes on the sweep's parent run
(``tunetrain.consent``).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

from tunetrain.errors import ExperimentError
from tunetrain.sweeps.cost.budget import Budget, parse_budget

ENV_VAR = "TUNETRAIN_CONFIRM_ABOVE"
GPU_DEFAULT = "10gpu-h"
_UNIT = {"wall": "h", "cpu": "CPU-h", "gpu": "GPU-h"}


@dataclasses.dataclass(frozen=True)
class Threshold:
    budget: Budget
    source: str  # "--ask-above" (or "--confirm-above"), "TUNETRAIN_CONFIRM_ABOVE" or "the GPU default"


def threshold(text: str | None, *, gpus_per_trial: float, flag: str = "--ask-above") -> Threshold | None:
    """The threshold in force: ``text`` (given as ``flag``: ``--ask-above``, or its old name
    ``--confirm-above``), the environment, the GPU default, or none."""
    if text is not None:
        return Threshold(parse_budget(text, flag=flag), flag)
    if os.environ.get(ENV_VAR):
        return Threshold(parse_budget(os.environ[ENV_VAR], flag=ENV_VAR), ENV_VAR)
    if gpus_per_trial > 0:
        return Threshold(parse_budget(GPU_DEFAULT), "the default for GPU sweeps")
    return None


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.3g}"


def exceeded(limit: Threshold, *, estimate: Any, budget: Budget | None) -> list[str]:
    """Why the sweep is over the threshold (one line per reason); empty when it is not.
    ``estimate`` is a :class:`tunetrain.sweeps.cost.estimate.Estimate` or None."""
    kind, unit = limit.budget.kind, _UNIT[limit.budget.kind]
    reasons = []
    if estimate is not None:
        expected = {"wall": estimate.wall_s, "cpu": estimate.cpu_hours * 3600, "gpu": estimate.gpu_hours * 3600}[kind]
        if expected > limit.budget.seconds:
            reasons.append(f"the estimate is {_hours(expected)} {unit}")
    if budget is not None and budget.kind == kind and budget.seconds > limit.budget.seconds:
        reasons.append(f"--budget {budget.text} allows {_hours(budget.seconds)} {unit}")
    if reasons:
        reasons[-1] += f", above {limit.budget.text} ({limit.source})"
    return reasons


def obtain(
    reasons: list[str],
    *,
    details: str,
    yes: bool,
    stream: TextIO,
    interactive: bool | None = None,
    ask: Callable[[str], str] = input,
) -> str:
    """The consent to record, once given: ``"--yes"`` or ``"asked"``; raises ExperimentError
    when refused or when there is nobody to ask."""
    if yes:
        return "--yes"
    interactive = sys.stdin.isatty() if interactive is None else interactive
    what = "; ".join(reasons)
    if not interactive:
        raise ExperimentError(
            f"This sweep needs consent before it starts: {what}; and there is no terminal to ask on.",
            fix="Pass --yes (yes=True from Python) to start it, or raise --ask-above "
            f"(or {ENV_VAR}), or make it smaller.",
        )
    print(f"{details}\nThis sweep is expensive: {what}.", file=stream, flush=True)
    answer = ask("Start it? [y/N] ").strip().lower()
    if answer not in ("y", "yes"):
        raise ExperimentError(
            f"Sweep not started: the answer was {answer!r}, not yes.", fix="Run it again and answer y, or pass --yes."
        )
    return "asked"
