"""Resuming a sweep: which one, whether it can be, and what changed since it started.

A sweep's folder (``<storage>/<sweep name>``) holds Ray Tune's state and tunetrain's
tracking journal (:class:`tunetrain.tracking.Journal`); the journal's first record holds
the sweep's settings as it started, which a resumed sweep must match.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunetrain.errors import ExperimentError
from tunetrain.records import name_problem
from tunetrain.storage import Storage
from tunetrain.tracking import JOURNAL_NAME, Journal, JournalState, StartedSweep
from tunetrain.tracking.sweep_log import sweep_changes


@dataclasses.dataclass(frozen=True)
class Resumable:
    """A sweep that stopped before it finished, as its journal recorded it."""

    name: str
    journal: JournalState
    params: dict[str, Any]  # the parent run's params and tags at the sweep's start
    tags: dict[str, Any]

    @property
    def started(self) -> StartedSweep:
        """The sweep's start as tracking reads it (its settings, seed, trial count)."""
        return StartedSweep(params=self.params, tags=self.tags)

    @property
    def sweep_id(self) -> str:
        return str(self.journal.header.get("sweep_id") or self.started.sweep_id)

    @property
    def root_seed(self) -> int:
        return self.started.root_seed

    @property
    def num_samples(self) -> int:
        return self.started.num_samples

    @property
    def ended_as(self) -> str | None:
        """The parent run's status if the sweep's last run ended it as finished, else None."""
        status = None
        for entry in self.journal.entries:
            if entry["op"] == "end_sweep":
                status = entry["status"]
            elif entry["op"] == "resume_sweep":
                status = None
        return status if status == "FINISHED" else None


# Where the driver keeps a sweep's journal, logs and report when its storage is a URI
# (s3://, gs://, file://): a local disk, relative to the folder the sweep runs in.
URI_STORAGE_LOCAL = "tunetrain_journals"


def local_dir(storage: str, name: str) -> Path:
    """The driver's folder of sweep ``name`` (journal, driver log, report): the sweep's own
    folder on local storage, ``./tunetrain_journals/NAME`` for a URI storage. A name that
    is not one folder name (``..``, ``a/b``) is refused: it would reach outside the storage."""
    if (problem := name_problem(name)) is not None:
        raise ExperimentError(
            f"The sweep name is its folder under the storage: {problem}.",
            fix="Pass the sweep's name as `tunetrain list` or the sweep's summary shows it.",
        )
    return _local_root(storage) / name


def _local_root(storage: str) -> Path:
    """Where the driver's folders of ``storage``'s sweeps are (see :func:`local_dir`)."""
    return Path(URI_STORAGE_LOCAL if Storage(storage).is_uri else storage)


def journal_path(storage: str, name: str) -> Path:
    """The journal of sweep ``name`` under ``storage`` (see :func:`local_dir`)."""
    return local_dir(storage, name) / JOURNAL_NAME


def stored(storage: str, name: str, file: str) -> bool:
    """Whether the sweep's folder under ``storage`` (a path or a pyarrow filesystem URI, as
    Ray Tune writes it) holds ``file``."""
    if not Storage(storage).is_uri:
        return (Path(storage) / name / file).exists()
    import pyarrow.fs

    filesystem, root = pyarrow.fs.FileSystem.from_uri(storage)
    return filesystem.get_file_info(f"{root.rstrip('/')}/{name}/{file}").type != pyarrow.fs.FileType.NotFound


def latest_sweep(storage: str, experiment_name: str) -> str | None:
    """The newest sweep of ``experiment_name`` under ``storage`` (by its journal's age)."""
    journals = sorted(_local_root(storage).glob(f"*/{JOURNAL_NAME}"), key=lambda p: p.stat().st_mtime, reverse=True)
    for path in journals:
        if Journal.header_of(path).get("experiment_name") == experiment_name:
            return path.parent.name
    return None


def header(storage: str, name: str) -> dict[str, Any]:
    """The journal header of sweep ``name`` under ``storage`` (what it started with), read
    without the rest of the journal; the same refusal as :func:`load` when there is none."""
    path = journal_path(storage, name)
    if not path.exists():
        load(storage, name)  # raises, naming the sweeps that are there
    return Journal.header_of(path)


def load(storage: str, name: str) -> Resumable:
    """The sweep ``name`` under ``storage``; an ExperimentError when there is none to resume."""
    path = journal_path(storage, name)
    if not path.exists():
        known = sorted(p.parent.name for p in path.parent.parent.glob(f"*/{JOURNAL_NAME}"))
        raise ExperimentError(
            f"No sweep {name!r} to resume under {str(storage)!r} (no {JOURNAL_NAME} in {str(path.parent)!r}); "
            f"sweeps there: {', '.join(known) or '(none)'}.",
            fix="Pass the sweep's name (--name, or `tunetrain resume NAME`) and the --storage it ran with.",
        )
    Journal.check_free(path)  # a sweep, resume or sync writing it now: refused before anything starts
    state = Journal.read(path)
    start = next((entry for entry in state.entries if entry["op"] == "start_sweep"), None)
    if start is None or not stored(storage, name, "tuner.pkl"):
        raise ExperimentError(
            f"Sweep {name!r} under {str(storage)!r} stopped before it started its first trial; "
            "there is nothing to resume.",
            fix="Start it again: tunetrain sweep FILE.",
        )
    return Resumable(name=name, journal=state, params=dict(start["params"]), tags=dict(start["tags"]))


def changes(sweep: Resumable, params: Mapping[str, Any], tags: Mapping[str, Any]) -> list[str]:
    """What differs between the sweep as it started and a parent run of ``params`` and
    ``tags`` (:func:`tunetrain.tracking.sweep_log.sweep_changes`); empty when it may resume."""
    return sweep_changes(sweep.started, params, tags)
