"""Plain records of a sweep's trials, shared by the tuner layer, the console and the CLI."""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
from pathlib import Path
from typing import Any, Literal

from tunetrain.rungs import RungRanking
from tunetrain.storage import Storage

TrialStatus = Literal[
    "pending", "running", "completed", "stopped_early", "diverged", "oom", "timed_out", "failed", "interrupted"
]
ENDED = ("completed", "stopped_early", "diverged", "oom", "timed_out", "failed", "interrupted")
# What an "oom" trial's error starts with when Ray's memory monitor killed its process (the
# host, not its device, ran out of memory).
HOST_OOM = "Ray's memory monitor killed the trial"


def as_number(value: Any) -> float | None:
    """``value`` as a float when it is a number of any numeric type: Python's (``True`` is
    1.0), NumPy's scalars and 0-d arrays, a 0-d torch tensor (anything 0-d with ``item()``);
    None when it is not a number (a string, None, a list, a tensor of several values).

    Written here rather than left to MLflow or Tune: MLflow's ``Metric`` takes any object and
    fails the whole batch later, and Tune passes the value on as it came, so one rule, applied
    where a report is first seen, decides what is a number for the whole record."""
    if isinstance(value, numbers.Real):
        return float(value)
    if getattr(value, "ndim", None) == 0 and callable(getattr(value, "item", None)):
        item = value.item()  # NumPy's bool_ and 0-d arrays, torch's 0-d tensors
        return float(item) if isinstance(item, numbers.Real) else None
    return None


def type_name(value: Any) -> str:
    """The type of a refused value, as a user would write it (``numpy.ndarray``, ``str``)."""
    kind = type(value)
    module = kind.__module__.split(".")[0]
    return kind.__name__ if module == "builtins" else f"{module}.{kind.__name__}"


@dataclasses.dataclass
class TrialRecord:
    """One trial as the sweep saw it."""

    name: str
    index: int
    trial_id: str
    config: dict[str, Any]
    seed: int
    baseline: bool = False  # the sweep's baseline trial (Experiment.baseline)
    status: TrialStatus = "running"
    iterations: int = 0
    last: dict[str, float] = dataclasses.field(default_factory=dict)
    best_value: float | None = None
    error: str | None = None
    checkpoints: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    start_time: float = 0.0
    end_time: float | None = None
    # Why the trial restarted from its checkpoint (worker failures), oldest first.
    restarts: list[str] = dataclasses.field(default_factory=list)
    # Seconds it ran in the sweep's earlier sessions (before a Ctrl+C or crash and a resume),
    # and when it started running in this one: its duration leaves out the time in between.
    ran_s: float = 0.0
    running_since: float = 0.0
    # The sweep's metric at each iteration reported (tunetrain.rungs measures early stopping on it).
    values: dict[int, float] = dataclasses.field(default_factory=dict)

    def ended(self, status: TrialStatus, end_time: float, error: str | None = None) -> None:
        """The trial ended (in this session): its status, and the time it ran is added up."""
        self.status, self.end_time, self.error = status, end_time, error
        self.ran_s += max(0.0, end_time - (self.running_since or self.start_time))

    def reopened(self, now: float) -> None:
        """A resumed sweep goes on with an interrupted trial."""
        self.status, self.end_time, self.error = "running", None, None
        self.running_since = now

    def reported(self, step: int, metrics: dict[str, float], *, metric: str, mode: str) -> None:
        """A report the sweep recorded (from Tune, or replayed from the journal on resume)."""
        self.iterations = step
        self.last = metrics
        if metric in metrics:
            self.values[step] = metrics[metric]
            self.observe(mode, metrics[metric])

    def checkpointed(self, path: str, *, score: str) -> None:
        """Tune kept a checkpoint of the last report, scored by that report's ``score`` value."""
        self.checkpoints.append({"step": self.iterations, "path": path, "score": self.last.get(score)})

    def observe(self, mode: str, value: float) -> None:
        """Keep the best finite value of the sweep's metric seen so far."""
        if not math.isfinite(value):
            return
        if self.best_value is None or (value < self.best_value if mode == "min" else value > self.best_value):
            self.best_value = value

    def best_checkpoint(self, score: str, order: str) -> dict[str, Any] | None:
        scored = [c for c in self.checkpoints if isinstance(c.get("score"), float) and math.isfinite(c["score"])]
        if not scored:
            return self.checkpoints[-1] if self.checkpoints else None
        # Of checkpoints with the same score, the latest: the one Ray's checkpoint manager keeps
        # (ray.train._internal.checkpoint_manager, Ray 2.60: on a tie, the later checkpoint
        # ranks higher, and num_to_keep deletes from the lowest). An accuracy ties often.
        if order == "min":
            return min(scored, key=lambda c: (c["score"], -c["step"]))
        return max(scored, key=lambda c: (c["score"], c["step"]))


# A sweep's name is its folder under the storage (and part of every printed command): one
# path component, from a character set every filesystem and object store takes.
NAME_RULE = (
    "one folder name of letters, digits, '_', '-', '.' and spaces, starting with a letter, digit or '_', "
    "at most 128 characters"
)
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_. -]{0,127}")


def name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a sweep (or the experiment its sweeps are named after), or None."""
    if not isinstance(name, str) or not _NAME.fullmatch(name) or name.endswith((" ", ".")):
        return f"a name must be {NAME_RULE} (not ending in a space or '.'), but got {name!r}"
    return None


def sweep_command(verb: str, sweep_name: str, storage: str) -> str:
    """The command line that resumes or syncs a sweep (``verb``), to print: quoted for a
    shell, and with a local storage folder absolute, so that it works from any folder."""
    import shlex

    where = Storage(storage).absolute()
    return shlex.join(["tunetrain", verb, sweep_name, "--storage", where])


def error_headline(text: str) -> str:
    """The last non-empty line of an error text (for a traceback: the exception itself)."""
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else "(no message)"


def rank_trials(trials: list[TrialRecord], mode: str) -> list[TrialRecord]:
    """Trials with a finite metric, best first (by each trial's best reported value)."""
    scored = [(t.best_value, t) for t in trials if t.best_value is not None]
    ordered = sorted(scored, key=lambda pair: pair[0] if mode == "min" else -pair[0])
    return [t for _, t in ordered]


def pareto_front(trials: list[TrialRecord], objectives: list[tuple[str, str]]) -> list[TrialRecord]:
    """Trials whose last reported values of the objectives no other trial dominates (at least
    as good on every objective, better on one). Trials missing an objective or with a
    non-finite value take no part."""

    def key(trial: TrialRecord) -> list[float] | None:
        values: list[float] = []
        for metric, mode in objectives:  # as values to minimise
            value = trial.last.get(metric)
            if value is None or not math.isfinite(value):
                return None
            values.append(value if mode == "min" else -value)
        return values

    scored = [(values, trial) for trial in trials if (values := key(trial)) is not None]

    def dominated(a: list[float]) -> bool:
        return any(all(x <= y for x, y in zip(b, a, strict=True)) and b != a for b, _ in scored)

    return sorted((t for values, t in scored if not dominated(values)), key=lambda t: t.index)


def against_baseline(
    *, metric: str, mode: str, best: tuple[str, float | None] | None, baseline: tuple[str, float | None, str] | None
) -> str | None:
    """The line that judges the best trial against the baseline: ``best`` is (name, value),
    ``baseline`` (name, value, status); None when the sweep had no baseline trial."""
    if baseline is None:
        return None
    name, value, status = baseline
    if value is None or not math.isfinite(value):
        return f"Baseline {name} ended {status} without a finite {metric}: nothing to compare the best trial with."
    if best is None or best[1] is None:
        return f"Baseline {name}: {metric}={value:.4g}."
    if best[0] == name:
        return f"Baseline {name} ({metric}={value:.4g}) is the best trial: no searched config beat it."
    gain = (value - best[1]) if mode == "min" else (best[1] - value)
    word = ("lower" if gain >= 0 else "higher") if mode == "min" else ("higher" if gain >= 0 else "lower")
    relative = f" ({abs(gain) / abs(value):.1%} {'better' if gain >= 0 else 'worse'})" if value != 0 else ""
    return (
        f"Against the baseline {name} ({metric}={value:.4g}): best {best[0]} {metric}={best[1]:.4g}, "
        f"{abs(gain):.4g} {word}{relative}."
    )


@dataclasses.dataclass
class SweepOutcome:
    """What a finished (or interrupted) sweep hands back to the CLI."""

    name: str  # the sweep's name: its folder under the storage, the parent run's name
    sweep_id: str
    metric: str
    mode: str
    trials: list[TrialRecord]
    experiment_id: str | None
    parent_run_id: str | None
    tracking_uri: str
    run_ids: dict[str, str]
    bad_input: str | None = None
    bad_input_fix: str = ""
    interrupted: bool = False
    log_path: str | None = None
    storage_path: str | None = None
    # Several objectives: (metric, mode) of each, and the Pareto-optimal trials.
    objectives: list[tuple[str, str]] = dataclasses.field(default_factory=list)
    pareto: list[TrialRecord] = dataclasses.field(default_factory=list)
    # Why the sweep launched fewer trials than planned (--budget), else "".
    stop_reason: str = ""
    # Checkpoints the sweep keeps on disk (local storage): how many, and their bytes.
    checkpoints_kept: int = 0
    checkpoint_bytes: int = 0
    # Seconds the sweep ran, from its record's start to its close (Ray's start not included).
    sweep_s: float = 0.0
    # The config keys (dotted) the searcher chooses; the rest of a config is fixed.
    searched: list[str] = dataclasses.field(default_factory=list)
    # Records the store refused (not an outage: those wait in the journal for `tunetrain sync`):
    # how many, and the first one's error. A sweep with any does not end as a success.
    record_errors: int = 0
    record_error: str | None = None
    # Why the sweep's journal (its local copy of the record) could not be written, if so.
    journal_error: str | None = None
    # Under ASHA: how well each rung ranked the trials as the next did, and the first rung.
    rung_rankings: list[RungRanking] = dataclasses.field(default_factory=list)
    grace_period: int = 1
    # Under ASHA: rung -> how many trials went on past it because it misled when they reached it.
    overruled_stops: dict[int, int] = dataclasses.field(default_factory=dict)

    @property
    def best(self) -> TrialRecord | None:
        ranked = rank_trials(self.trials, self.mode)
        return ranked[0] if ranked else None

    @property
    def baseline(self) -> TrialRecord | None:
        return next((t for t in self.trials if t.baseline), None)

    def versus_baseline(self) -> str | None:
        """:func:`against_baseline` for this sweep."""
        base, best = self.baseline, self.best
        return against_baseline(
            metric=self.metric,
            mode=self.mode,
            best=(best.name, best.best_value) if best else None,
            baseline=(base.name, base.best_value, base.status) if base else None,
        )

    def count(self, status: str) -> int:
        return sum(1 for t in self.trials if t.status == status)


def checkpoint_usage(sweep_dir: str | Path) -> tuple[int, int]:
    """(number, total bytes) of the trial checkpoints kept in a sweep's folder on local disk."""
    root = Path(sweep_dir)
    # Tune's (trial folders) and any Ray Train left (train/<run>/, multi-worker trials).
    folders = [p for pattern in ("*/checkpoint_*", "train/*/checkpoint_*") for p in root.glob(pattern) if p.is_dir()]
    size = sum(f.stat().st_size for folder in folders for f in folder.rglob("*") if f.is_file())
    return len(folders), size


# What StepStats reports (tunetrain.training), read here without importing torch.
DATA_TIME = "data_time_s"
STEP_TIME = "step_time_s"


def slow_data(stats: dict[str, float]) -> bool:
    """Whether a trial's last report says data loading bounds it: more than a third of the
    step's time spent waiting for batches."""
    data, step = stats.get(DATA_TIME), stats.get(STEP_TIME)
    return data is not None and step is not None and step > 0 and data > step / 3
