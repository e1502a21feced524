"""What the user sees: one compact live line while a sweep runs, and the summary at the end."""

from __future__ import annotations

import json
import math
import time
from collections import Counter
from collections.abc import Callable
from typing import Any, TextIO

from tunetrain import rungs
from tunetrain.records import HOST_OOM, SweepOutcome, TrialRecord, error_headline, rank_trials, sweep_command
from tunetrain.redaction import redact
from tunetrain.space import flatten

_ORDER = ("running", "completed", "stopped_early", "diverged", "oom", "timed_out", "failed", "interrupted")


def _fmt(value: object) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


class LiveView:
    """The sweep's live state: trial states, best so far. On a terminal a progress bar on the
    status line with elapsed time and ETA (tqdm), in a Jupyter notebook one display updated in
    place with the top trials (:mod:`tunetrain.console.live`), at most every
    ``min_interval_s`` and at once on ``force``; elsewhere (a log file, CI) a line printed when
    the state changed, at most every ``log_interval_s``, and once more at the end, so that a
    200-trial sweep logs a few dozen lines, not one per trial event."""

    def __init__(
        self,
        *,
        metric: str,
        mode: str,
        total: int,
        stream: TextIO,
        min_interval_s: float = 1.0,
        log_interval_s: float = 10.0,
    ) -> None:
        from tunetrain.console import live

        self.metric = metric
        self.mode = mode
        self.total = total
        self.stream = stream
        self.min_interval_s = min_interval_s
        self.log_interval_s = log_interval_s
        self._start = time.monotonic()
        self._last_line = ""
        self._last_time = -math.inf
        self._held: list[TrialRecord] | None = None  # a state held back by the interval
        self._face: Any = None  # the bar or the notebook's display, made at the first update
        self._make_face: Callable[[], Any] | None = None  # None: log lines
        if live.in_notebook(stream):
            self._make_face = lambda: live.NotebookDisplay(metric=metric, mode=mode, total=total)
        elif stream.isatty():
            self._make_face = lambda: live.TerminalBar(total=total, stream=stream)

    def states(self, trials: list[TrialRecord]) -> str:
        """The trials' states and the best so far: ``2 running, 1 completed | best loss=0.3 (trial_0001)``."""
        counts: Counter[str] = Counter(t.status for t in trials)
        pending = max(self.total - len(trials), 0)
        parts = [f"{counts[s]} {s.replace('_', ' ')}" for s in _ORDER if counts[s]]
        if pending:
            parts.insert(0, f"{pending} pending")
        ranked = rank_trials(trials, self.mode)
        best = f" | best {self.metric}={_fmt(ranked[0].best_value)} ({ranked[0].name})" if ranked else ""
        return ", ".join(parts) + best

    def line(self, trials: list[TrialRecord]) -> str:
        elapsed = int(time.monotonic() - self._start)
        return f"[{elapsed // 60:02d}:{elapsed % 60:02d}] {len(trials)}/{self.total} trials: " + self.states(trials)

    def update(self, trials: list[TrialRecord], *, force: bool = False) -> None:
        now = time.monotonic()
        if self._make_face is not None:
            if force or now - self._last_time >= self.min_interval_s:
                self._show(trials, now)
            else:
                self._held = trials  # shown at the next update, or at close()
            return
        if now - self._last_time < self.log_interval_s:
            self._held = trials  # shown at the next interval, or at close()
            return
        self._held = None
        self._last_time = now  # an unchanged state is not looked at again before the interval
        self._print_if_changed(self.line(trials), now)

    def _show(self, trials: list[TrialRecord], now: float) -> None:
        if self._face is None and self._make_face is not None:
            self._face = self._make_face()
        self._face.show(trials, self.states(trials))
        self._held, self._last_time, self._last_line = None, now, self.line(trials)

    def _print_if_changed(self, line: str, now: float) -> None:
        # The elapsed-time prefix changes every second; compare what follows it.
        if line.split("]", 1)[1] != self._last_line.split("]", 1)[-1]:
            self.stream.write(line + "\n")
            self.stream.flush()
            self._last_line, self._last_time = line, now

    def close(self) -> None:
        if self._make_face is not None:
            if self._held is not None:  # the final state always shows
                self._show(self._held, time.monotonic())
            if self._face is not None:
                self._face.close()
            return
        if self._held is not None:  # the final state always shows
            self._print_if_changed(self.line(self._held), time.monotonic())
            self._held = None


def summary(outcome: SweepOutcome, *, ui_command: str, top_k: int = 5) -> str:
    """The end-of-sweep text: top trials, best config and metric, where to look in MLflow."""
    lines: list[str] = []
    counts: Counter[str] = Counter(t.status for t in outcome.trials)
    state = "interrupted" if outcome.interrupted else "finished"
    lines.append(
        f"Sweep {outcome.name} {state}: {len(outcome.trials)} trials ("
        + ", ".join(f"{counts[s]} {s.replace('_', ' ')}" for s in _ORDER if counts[s])
        + ")"
    )
    if outcome.stop_reason:
        lines.append(f"Stopped launching trials: {outcome.stop_reason}.")
    if outcome.interrupted and outcome.storage_path:
        storage = outcome.storage_path.rsplit("/", 1)[0]  # a URI keeps its "//" (Path would not)
        lines.append(f"Resume it (ended trials stay ended): {sweep_command('resume', outcome.name, storage)}")
    ranked = rank_trials(outcome.trials, outcome.mode)
    if ranked:
        shown = ranked[:top_k]
        keys, fixed = _columns(outcome, shown)
        header = ["trial", "status", "iters", f"best {outcome.metric}", *keys]
        rows = [
            [
                t.name + (" (baseline)" if t.baseline else ""),
                t.status,
                str(t.iterations),
                _fmt(t.best_value),
                *(_fmt(flatten(t.config).get(k, "")) for k in keys),
            ]
            for t in shown
        ]
        widths = [max(len(str(c)) for c in col) for col in zip(header, *rows, strict=False)]
        lines.append("")
        if fixed:  # once, not a column each (as `tunetrain show` prints the searched ones only)
            lines.append("Fixed values: " + ", ".join(f"{k}={_fmt(v)}" for k, v in fixed.items()))
        lines.append(f"Top {len(shown)} trials by {outcome.metric} ({outcome.mode}):")
        for row in [header, *rows]:
            lines.append("  " + "  ".join(str(c).ljust(w) for c, w in zip(row, widths, strict=False)))
        best = ranked[0]
        lines.append("")
        lines.append(f"Best trial: {best.name}  {outcome.metric}={_fmt(best.best_value)}")
        lines.append(f"Best config: {json.dumps(best.config, default=str, sort_keys=True)}")
        if best.name in outcome.run_ids:
            lines.append(f"Best run id: {outcome.run_ids[best.name]}")
    else:
        diverged = sum(t.status == "diverged" for t in outcome.trials)
        why = f": {diverged} trial(s) diverged (NaN or infinite)" if diverged else ""
        lines.append(f"No trial reported a finite {outcome.metric}{why}.")
    if (versus := outcome.versus_baseline()) is not None:
        lines.append(versus)
    if any(r.trials for r in outcome.rung_rankings):
        lines += [
            "",
            *rungs.summary_lines(
                outcome.rung_rankings, grace_period=outcome.grace_period, overruled=outcome.overruled_stops
            ),
        ]
    if len(outcome.objectives) > 1:
        lines.append("")
        names = [f"{metric} ({mode})" for metric, mode in outcome.objectives]
        lines.append(f"Pareto-optimal trials ({len(outcome.pareto)}) on {', '.join(names)}, last reported values:")
        for t in outcome.pareto:
            values = "  ".join(f"{metric}={_fmt(t.last.get(metric))}" for metric, _ in outcome.objectives)
            run = f"  run {outcome.run_ids[t.name]}" if t.name in outcome.run_ids else ""
            lines.append(f"  {t.name}  {values}{run}")
    lines += _diagnoses(outcome.trials)
    errors = Counter(error_headline(t.error) for t in outcome.trials if t.status == "failed" and t.error)
    if errors:
        lines.append("")
        lines.append("Errors:")
        for message, n in errors.most_common():
            lines.append(f"  {n} trial(s): {message[:300]}")
    lines.append("")
    if outcome.checkpoints_kept:
        lines.append(
            f"Checkpoints: {outcome.checkpoints_kept} kept, {outcome.checkpoint_bytes / 2**20:.1f} MiB "
            f"under {outcome.storage_path}"
        )
    lines.append(f"MLflow: tracking URI {redact(outcome.tracking_uri)}")
    if outcome.experiment_id is not None:
        lines.append(f"  experiment id {outcome.experiment_id}, sweep (parent) run id {outcome.parent_run_id}")
    lines.append(f"  open the UI: {ui_command}")
    if outcome.log_path:
        lines.append(f"Ray logs: {outcome.log_path}")
    return "\n".join(lines)


def _columns(outcome: SweepOutcome, shown: list[TrialRecord]) -> tuple[list[str], dict[str, object]]:
    """The summary table's config columns (the searched keys; without them known, the keys
    whose values differ between trials) and the values every shown trial has the same."""
    configs = [flatten(t.config) for t in shown]
    keys = sorted({k for config in configs for k in config})
    if outcome.searched:
        searched = [k for k in keys if any(k == s or k.startswith(s + ".") for s in outcome.searched)]
    else:
        searched = [k for k in keys if len({repr(config.get(k)) for config in configs}) > 1]
    fixed = {k: configs[0].get(k) for k in keys if k not in searched}
    return searched, fixed


# Config keys (last part, dotted) a train loop may expose against running out of memory,
# and what to set them to.
_REMEDIES = (
    ("batch_size", "a smaller batch"),
    ("accumulation_steps", "more gradient accumulation steps (the same effective batch)"),
    ("precision", "mixed precision: bf16"),
    ("activation_checkpointing", "activation checkpointing: True"),
    ("parallel_strategy", "sharding: fsdp"),
)


# What torch's process groups say when a collective timed out (NCCL's watchdog; gloo's).
_COLLECTIVE_TIMEOUT = (
    "Watchdog caught collective operation timeout",
    "ms for recv operation to complete",
    "ms for send operation to complete",
)


def _diagnoses(trials: list[TrialRecord]) -> list[str]:
    """Lines on trials that ran out of memory (with the remedies the experiment exposes), that
    stopped reporting, and whose data loading takes over a third of each step."""
    from tunetrain.records import slow_data

    lines: list[str] = []
    oom = [t for t in trials if t.status == "oom"]
    if oom:
        lines += ["", f"Out of memory: {len(oom)} trial(s) ({', '.join(t.name for t in oom[:8])})."]
        keys = sorted({k for t in oom for k in flatten(t.config)})
        exposed = [(k, what) for suffix, what in _REMEDIES for k in keys if k.rsplit(".", 1)[-1] == suffix]
        if exposed:
            lines.append("  Remedies this experiment exposes (--set KEY=VALUE, or narrow the space):")
            lines += [f"    {key}: {what}" for key, what in exposed]
        else:
            lines.append(
                "  The usual remedies: a smaller batch with gradient accumulation, mixed precision, activation "
                "checkpointing, FSDP (tunetrain.StepRunner; see docs/training.md)."
            )
        host = [t.name for t in oom if (t.error or "").startswith(HOST_OOM)]
        if host:
            lines.append(
                f"  The host ran out of memory ({', '.join(host[:8])}; Ray's memory monitor killed it and the sweep "
                "went on): fewer trials at once (--max-concurrent) or less memory per trial."
            )
    stalled = [t for t in trials if t.status == "failed" and any(m in (t.error or "") for m in _COLLECTIVE_TIMEOUT)]
    if stalled:
        lines += [
            "",
            f"A collective timed out: {len(stalled)} trial(s) ({', '.join(t.name for t in stalled[:8])}). A rank "
            "stopped reaching an all-reduce or barrier the others waited in (a hang, a rank that raised or died, "
            "uneven batches across ranks); the trial failed and the sweep went on. NCCL_DEBUG=INFO names the rank; "
            "dist_backend='gloo' rules NCCL out.",
        ]
    hung = [t for t in trials if t.status == "timed_out"]
    if hung:
        why = (hung[0].error or "").removeprefix("timed out: ")
        lines += ["", f"Timed out: {len(hung)} trial(s) ({', '.join(t.name for t in hung[:8])}): {why}."]
    slow = [t for t in trials if slow_data(t.last)]
    if slow:
        lines += [
            "",
            f"Data loading takes over a third of the step time in {len(slow)} trial(s) "
            f"({', '.join(t.name for t in slow[:8])}): more DataLoader workers, pinned memory or prefetching may help.",
        ]
    return lines
