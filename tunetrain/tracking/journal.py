"""The sweep's tracking journal: every record on local disk before it goes to MLflow."""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

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
        self._lock = threading.Lock()
        path.parent.mkdir(parents=True, exist_ok=True)
        self._file = path.open("a", encoding="utf-8")

    def write(self, line: Mapping[str, Any], *, sync: bool = False) -> None:
        text = json.dumps(line, default=_json_default, allow_nan=True)
        with self._lock:
            self._file.write(text + "\n")
            self._file.flush()  # in the OS once written: a killed driver loses nothing
            if sync:  # a machine that goes down loses nothing either
                os.fsync(self._file.fileno())

    def close(self) -> None:
        with self._lock:
            self._file.close()

    @staticmethod
    def read(path: Path) -> JournalState:
        """Everything a journal holds (a torn last line, from a crash mid-write, is skipped)."""
        state = JournalState()
        with path.open(encoding="utf-8") as f:
            for text in f:
                try:
                    line = json.loads(text)
                except json.JSONDecodeError:
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
                elif "seq" in line:
                    state.entries.append(line)
        return state


@dataclasses.dataclass
class JournalState:
    header: dict[str, Any] = dataclasses.field(default_factory=dict)
    entries: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    acked: int = 0
    parent_run_id: str | None = None
    experiment_id: str | None = None
    run_ids: dict[str, str] = dataclasses.field(default_factory=dict)

    @property
    def unsent(self) -> list[dict[str, Any]]:
        return [entry for entry in self.entries if entry["seq"] > self.acked]

    @property
    def last_seq(self) -> int:
        return self.entries[-1]["seq"] if self.entries else 0
