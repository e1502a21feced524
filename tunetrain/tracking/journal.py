"""The sweep's tracking journal: every record on local disk before it goes to MLflow."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any

from tunetrain.errors import ExperimentError

JOURNAL_NAME = "tracking_journal.jsonl"


def _json_default(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else str(value)  # numpy scalars, paths, ...


class Journal:
    """The sweep's tracking records on local disk, one JSON line each, written before they
    are sent to MLflow: what an outage or a crash left unsent is sent later from here
    (``tunetrain sync``, ``--resume``).

    Lines: a header (where the records go), entries (``seq``, ``op`` and its arguments),
    ``{"ack": N}`` once every entry up to N is in the store, and ``{"run": TRIAL, "run_id":
    ...}`` for each run the store created (TRIAL null for the sweep's parent run).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: str | None = None  # why the disk refused a record (then it takes no more)
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")
        try:
            _hold(self._file, path)
        except BaseException:
            self._file.close()
            raise
        # A line torn by a crash or a full disk mid-write would swallow the next record
        # (the two read as one bad line): what follows starts on a line of its own.
        if path.stat().st_size and _last_byte(path) != b"\n":
            try:
                self._file.write("\n")
                self._file.flush()
            except OSError as exc:  # a full disk: the journal takes no more (see write)
                self.error = f"{exc.strerror or exc} ({self.path})"

    def write(self, line: Mapping[str, Any], *, sync: bool = False) -> bool:
        """Append one record; False once the disk refused one (full, gone read-only): the
        journal then takes no more (a torn line is all a full disk leaves, and the next
        session starts on a line of its own), ``error`` says why, and the caller's records
        still go to the store."""
        text = json.dumps(line, default=_json_default, allow_nan=True)
        with self._lock:
            if self.error is not None:
                return False
            try:
                self._file.write(text + "\n")
                self._file.flush()  # in the OS once written: a killed driver loses nothing
                if sync:  # a machine that goes down loses nothing either
                    os.fsync(self._file.fileno())
            except OSError as exc:
                self.error = f"{exc.strerror or exc} ({self.path})"
                return False
        return True

    def close(self) -> None:
        with self._lock:
            if not self._file.closed:
                _lock_file(self.path).unlink(missing_ok=True)
                try:
                    self._file.close()  # and the lock with it
                except OSError as exc:  # what was buffered met a full disk
                    self.error = self.error or f"{exc.strerror or exc} ({self.path})"

    @staticmethod
    def check_free(path: Path) -> None:
        """Raise :class:`JournalBusy` (naming the holder's pid) when another process writes
        the journal at ``path`` now; before a resume starts anything."""
        if path.exists():
            with path.open("a", encoding="utf-8") as probe:
                _hold(probe, path, note_pid=False)  # released as the probe closes

    @staticmethod
    def header_of(path: Path) -> dict[str, Any]:
        """The journal's header (its first record) without reading the rest."""
        with path.open("rb") as f:
            for raw in f:
                try:
                    line = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    continue
                return line if isinstance(line, dict) and "journal" in line else {}
        return {}

    @staticmethod
    def read(path: Path) -> JournalState:
        """Everything a journal holds. A line that is not one whole JSON object (torn by a
        crash or a full disk mid-write, cut inside a UTF-8 character, or written by
        something else) is skipped and listed in ``skipped``: never fatal."""
        state = JournalState()
        with path.open("rb") as f:
            for number, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    line = json.loads(raw.decode("utf-8"))
                except (UnicodeDecodeError, json.JSONDecodeError):
                    line = None
                if not isinstance(line, dict):
                    state.skipped.append(number)
                    continue
                if "journal" in line:
                    state.header = line
                elif "ack" in line:
                    state.acked = max(state.acked, int(line["ack"]))
                elif "run_id" in line:
                    if line["run"] is None:
                        state.parent_run_id, state.experiment_id = line["run_id"], line.get("experiment_id")
                    else:
                        state.run_ids[line["run"]] = line["run_id"]
                elif "seq" in line and "op" in line:
                    state.entries.append(line)
                else:
                    state.skipped.append(number)
        return state


def _last_byte(path: Path) -> bytes:
    with path.open("rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1)


def _lock_file(path: Path) -> Path:
    return path.with_name(path.name + ".pid")


def _hold(file: IO[str], path: Path, *, note_pid: bool = True) -> None:
    """One writer per journal: an exclusive lock on the open file (the OS releases it when
    the process ends, killed or not), and the holder's pid beside it to name in the refusal.
    Two writers would interleave lines and sequence numbers, and records would double."""
    import fcntl

    try:
        fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        try:
            holder = _lock_file(path).read_text().strip() or "unknown"
        except OSError:
            holder = "unknown"
        raise JournalBusy(
            f"The tracking journal {path} is being written by another process (pid {holder}): a sweep, its "
            "resume or `tunetrain sync` runs on it now.",
            fix="Wait until it ends (or stop it), then run this again; one process at a time writes a journal.",
        ) from None
    if note_pid:
        with contextlib.suppress(OSError):  # only for naming the holder; a full disk may refuse it
            _lock_file(path).write_text(str(os.getpid()))


class JournalBusy(ExperimentError):
    """Another process holds the journal."""


@dataclasses.dataclass
class JournalState:
    header: dict[str, Any] = dataclasses.field(default_factory=dict)
    entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    acked: int = 0
    parent_run_id: str | None = None
    experiment_id: str | None = None
    run_ids: dict[str, str] = dataclasses.field(default_factory=dict)
    skipped: list[int] = dataclasses.field(default_factory=list)  # line numbers that were not records

    @property
    def unsent(self) -> list[dict[str, Any]]:
        return [entry for entry in self.entries if entry["seq"] > self.acked]

    @property
    def last_seq(self) -> int:
        return self.entries[-1]["seq"] if self.entries else 0


@dataclasses.dataclass
class JournalProgress:
    """Where a recorder stands in its journal's numbered entries: the state its background
    thread moves through, each transition one method here.

    ``seq`` is the last entry journaled; every entry up to ``applied`` is in the store, and
    ``acked`` is the last ``applied`` the journal was told (an ``ack`` line). Entries up to
    ``replay_until`` are sent again (a resume, ``tunetrain sync``) and ``doubtful`` is set
    while a write is retried: either way what is written may exist already. Once a write is
    given up (``kept``: refused, or the store still away at the end) no later entry is
    acknowledged either, so that ``tunetrain sync`` sends them all again, in order.
    ``pending_first`` is the first entry whose metric points wait in the batch."""

    seq: int = 0
    applied: int = 0
    acked: int = 0
    replay_until: int = 0
    pending_first: int = 0
    kept: bool = False
    doubtful: bool = False

    def resumed(self, state: JournalState) -> None:
        """A journal read back (a resume, a sync): what it acknowledged is in the store."""
        self.applied = self.acked = state.acked
        self.seq = max(state.last_seq, state.acked)

    def emitted(self) -> int:
        """A new entry: its number."""
        self.seq += 1
        return self.seq

    def replaying(self, last_seq: int) -> None:
        """Entries up to ``last_seq`` are sent again: each may be in the store already."""
        self.replay_until = last_seq

    def written(self, seq: int | None, *, done: bool) -> None:
        """Entry ``seq`` (None: a batch flush) was written (``done``) or given up."""
        self.kept = self.kept or not done
        if seq and not self.kept:
            self.applied = max(self.applied, seq)

    def to_ack(self) -> int | None:
        """The entry number to acknowledge in the journal now, if it moved (no points pending)."""
        if self.applied <= self.acked:
            return None
        self.acked = self.applied
        return self.acked

    def may_exist(self, seq: int) -> bool:
        """Whether entry ``seq`` may be in the store already (a retry, or sent again)."""
        return self.doubtful or seq <= self.replay_until

    @property
    def unsent(self) -> int:
        return self.seq - self.applied
