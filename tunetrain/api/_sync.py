"""``tunetrain.sync``: what a sweep's journal holds and its MLflow store does not (an outage
that outlasted the sweep, a record the store refused until its cause was fixed), written to
the store without doubling what is there."""

from __future__ import annotations

import dataclasses
import sys
from typing import TextIO

from tunetrain.errors import ExperimentError
from tunetrain.storage import DEFAULT_STORAGE
from tunetrain.sweeps.resumable import journal_path


@dataclasses.dataclass(frozen=True)
class SyncResult:
    """How many of the sweep's unsent records were written, and how many are still unsent."""

    sweep: str
    tracking_uri: str
    sent: int
    unsent: int

    @property
    def complete(self) -> bool:
        """Everything the journal holds is in the store."""
        return self.unsent == 0


def sync(
    sweep_name: str, *, storage: str = DEFAULT_STORAGE, timeout_s: float = 120.0, stream: TextIO | None = None
) -> SyncResult:
    """Send what sweep ``sweep_name``'s journal (under ``storage``) holds and its store does
    not, waiting up to ``timeout_s`` for the store; every record is written idempotently (a
    run found by its trial id, a metric point present is not logged again)."""
    from tunetrain import tracking

    out = stream or sys.stdout
    path = journal_path(storage, sweep_name)
    if not path.exists():
        raise ExperimentError(
            f"No tracking journal for sweep {sweep_name!r} at {str(path)!r}.",
            fix="Pass the sweep's name and the --storage it ran with.",
        )
    header = tracking.Journal.header_of(path)
    recorder = tracking.SweepRecorder(
        tracking_uri=header["tracking_uri"],
        experiment_name=header["experiment_name"],
        artifact_location=header.get("artifact_location"),
        error_stream=out,
        journal=path,
        drain_timeout_s=timeout_s,
    )
    count = recorder.send_unsent()
    recorder.flush()
    recorder.close()
    left = recorder.unsent
    print(
        f"Sweep {sweep_name}: {count - left} of {count} unsent record(s) written to {header['tracking_uri']}"
        + (f"; {left} still unsent (is the store up?)" if left else "."),
        file=out,
    )
    return SyncResult(sweep=sweep_name, tracking_uri=header["tracking_uri"], sent=count - left, unsent=left)
