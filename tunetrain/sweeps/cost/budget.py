"""``sweep --budget``: stop launching trials once the next one would overrun a budget.

A budget is wall time (``90s``, ``30m``, ``2h``) or resource time (``5cpu-h``,
``1.5gpu-h``: the CPUs or GPUs the sweep's trials hold, times how long they hold them).
The budget counts from the first trial's start. Before each new trial starts, the gate adds
what a trial has cost so far on average (the mean of the trials that ended; nothing before
the first ends) to what is spent, and refuses the launch when that exceeds the budget.
Running trials always finish; trials started before (a HyperBand or PBT trial resumed from
its pause) are not new and always go on.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Literal

from tunetrain.errors import ExperimentError

BudgetKind = Literal["wall", "cpu", "gpu"]
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0}
_PATTERN = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(s|m|h|cpu-h|gpu-h)\s*$")


@dataclasses.dataclass(frozen=True)
class Budget:
    kind: BudgetKind
    seconds: float  # wall seconds, or CPU/GPU-seconds
    text: str


def parse_budget(text: str, *, flag: str = "--budget") -> Budget:
    """``2h``, ``30m``, ``90s`` (wall time) or ``5cpu-h``, ``1.5gpu-h`` (resource hours);
    ``flag`` names the flag (or setting) the text came from in the error."""
    match = _PATTERN.match(str(text).lower())
    if match is None or float(match.group(1)) <= 0:
        raise ExperimentError(
            f"{flag} must be a positive number with a unit: s, m, h (wall time) or cpu-h, gpu-h, but got {text!r}.",
            fix="Write it like 2h, 30m, 90s, 5cpu-h or 1.5gpu-h.",
        )
    value, unit = float(match.group(1)), match.group(2)
    if unit in _UNITS:
        return Budget("wall", value * _UNITS[unit], text)
    return Budget("cpu" if unit == "cpu-h" else "gpu", value * 3600.0, text)


class BudgetGate:
    """Decides whether the sweep may launch another trial (see the module docstring)."""

    def __init__(self, budget: Budget, *, cpus_per_trial: float, gpus_per_trial: float) -> None:
        if budget.kind == "gpu" and gpus_per_trial <= 0:
            raise ExperimentError(
                f"--budget {budget.text} counts GPU-hours, but the sweep's trials hold no GPU.",
                fix="Use a wall-time or cpu-h budget, or --use-gpu.",
            )
        self.budget = budget
        self._rate = {"wall": 1.0, "cpu": cpus_per_trial, "gpu": gpus_per_trial}[budget.kind]
        self._start: float | None = None  # the budget counts from the first trial's start
        self._running: dict[str, float] = {}
        self._started: set[str] = set()
        self._ended: list[float] = []
        self.launched = 0
        self.refused = 0
        self.reason = ""

    def started(self, trial_id: str) -> None:
        if trial_id in self._started:
            return
        self._started.add(trial_id)
        now = time.monotonic()
        self._start = now if self._start is None else self._start
        self._running[trial_id] = now
        self.launched += 1

    def has_started(self, trial_id: str) -> bool:
        return trial_id in self._started

    def ended(self, trial_id: str) -> None:
        began = self._running.pop(trial_id, None)
        if began is not None:
            self._ended.append(time.monotonic() - began)

    def _spent(self, now: float) -> float:
        if self.budget.kind == "wall":
            return 0.0 if self._start is None else now - self._start
        return self._rate * (sum(self._ended) + sum(now - t for t in self._running.values()))

    def allows_launch(self) -> bool:
        now = time.monotonic()
        expected = self._rate * (sum(self._ended) / len(self._ended)) if self._ended else 0.0
        spent = self._spent(now)
        if spent + expected <= self.budget.seconds:
            return True
        if not self.reason:
            unit = "s" if self.budget.kind == "wall" else f"{self.budget.kind}-s"
            self.reason = (
                f"budget {self.budget.text}: {spent:.0f} {unit} spent, a trial costs about {expected:.0f} {unit}; "
                f"stopped launching after {self.launched} trial(s)"
            )
        return False
