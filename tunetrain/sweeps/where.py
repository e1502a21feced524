"""A sweep's first stage: where it runs. The tracking store, the Ray cluster and the storage,
as MLflow's and Ray's tools find them, resolved and checked before Ray starts."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.storage import DEFAULT_STORAGE, Storage, check_storage
from tunetrain.sweeps.request import SweepRequest

if TYPE_CHECKING:
    from tunetrain.tracking import TrackingURI


def locate(
    experiment: Experiment, request: SweepRequest, *, dry_run: bool, recorder: Callable[..., Any] | None, stream: TextIO
) -> Where:
    """Where ``request`` runs ``experiment`` (see :func:`_where`); an embedded Ray about to
    start beside another one is said."""
    where = _where(experiment, request, dry_run=dry_run, recorder=recorder)
    _warn_beside_other_rays(where, stream)
    return where


@dataclasses.dataclass(frozen=True)
class Where:
    """Where a sweep runs, resolved and checked before Ray starts."""

    store: TrackingURI  # the tracking store, with where it came from
    address: str | None  # the Ray cluster (None: an embedded Ray)
    address_source: str  # where the address came from, for the line that names it
    storage: str
    nodes: list[Any]  # the cluster's nodes (this machine's, for an embedded Ray)
    others: list[str] = dataclasses.field(default_factory=list)  # Rays an embedded one would run beside

    @property
    def tracking_uri(self) -> str:
        return self.store.uri


def _where(
    experiment: Experiment, request: SweepRequest, *, dry_run: bool, recorder: Callable[..., Any] | None
) -> Where:
    """The store and the cluster, as MLflow's and Ray's tools find them (flag, then
    MLFLOW_TRACKING_URI / RAY_ADDRESS, then the embedded default), and the storage: a
    server that does not answer, a store that would refuse the sweep's runs, a storage
    that cannot be written, a cluster of several nodes without a shared storage are errors
    now, before anything starts."""
    from tunetrain import cluster, tracking

    # The store must take the sweep's runs (unless a recorder of the caller's takes them).
    records_to = experiment.name if recorder is None else None
    store = tracking.store_for_sweep(request.tracking_uri, experiment_name=records_to)
    storage_given, storage = request.storage is not None, request.storage or DEFAULT_STORAGE
    check_storage(storage)  # writable, with room: refused now, not when the disk fills mid-sweep
    log_dir = Path(DEFAULT_STORAGE if Storage(storage).is_uri else storage).resolve() / "logs"
    found = cluster.find_cluster(request.address, dry_run=dry_run, log_dir=log_dir)
    address, nodes = found.address, found.nodes
    if address is not None and len(nodes) > 1 and not storage_given:
        raise ExperimentError(
            f"The cluster at {address} has {len(nodes)} nodes, and no --storage was given: trial "
            f"checkpoints and sweep state would go to ./{DEFAULT_STORAGE} on this machine only, which the "
            "other nodes cannot see.",
            fix="Pass --storage: a path on a filesystem every node shares, or a URI (s3://bucket/path); "
            "see docs/cluster.md.",
        )
    return Where(store, address, found.source, storage, nodes, found.others)


def _warn_beside_other_rays(where: Where, stream: TextIO) -> None:
    """An embedded Ray about to start beside another one (another sweep's): said, with the fix."""
    if where.others:
        print(
            f"tunetrain: warning: another Ray runs on this machine ({', '.join(where.others)}; another sweep's "
            "embedded Ray?), and this sweep starts one of its own beside it: each counts the machine's CPUs as its "
            "own. To share one, start it with `tunetrain up` before the sweeps (docs/cluster.md).",
            file=stream,
            flush=True,
        )
