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

    tracking_uri, storage = request.tracking_uri, request.storage
    store = tracking.resolve_tracking_uri(tracking_uri)
    tracking.check_reachable(store)
    if recorder is None:  # the store must take the sweep's runs: refused now, not after Ray started
        tracking.check_writable(store, experiment.name)
    address, address_source = cluster.resolve_address(request.address)
    storage_given, storage = storage is not None, storage or DEFAULT_STORAGE
    check_storage(storage)  # writable, with room: refused now, not when the disk fills mid-sweep
    # The process's own Ray is asked; an embedded Ray gets this machine's resources, so the
    # plan is checked before Ray starts; a cluster is asked (connecting starts nothing).
    if address is None:
        return Where(store, address, address_source, storage, cluster.local_nodes())
    if dry_run:  # read, not connected to: a dry run starts no driver and writes no log
        nodes = cluster.read_nodes(address)
    else:
        log_dir = Path(DEFAULT_STORAGE if Storage(storage).is_uri else storage).resolve() / "logs"
        cluster.connect(address, log_dir=log_dir)
        nodes = cluster.cluster_nodes()
    if len(nodes) > 1 and not storage_given:
        raise ExperimentError(
            f"The cluster at {address} has {len(nodes)} nodes, and no --storage was given: trial "
            f"checkpoints and sweep state would go to ./{DEFAULT_STORAGE} on this machine only, which the "
            "other nodes cannot see.",
            fix="Pass --storage: a path on a filesystem every node shares, or a URI (s3://bucket/path); "
            "see docs/cluster.md.",
        )
    return Where(store, address, address_source, storage, nodes)


def _warn_beside_other_rays(where: Where, stream: TextIO) -> None:
    """An embedded Ray about to start beside another one (another sweep's): said, with the fix."""
    from tunetrain import cluster

    if where.address is None and (others := cluster.other_rays()):
        print(
            f"tunetrain: warning: another Ray runs on this machine ({', '.join(others)}; another sweep's embedded "
            "Ray?), and this sweep starts one of its own beside it: each counts the machine's CPUs as its own. "
            "To share one, start it with `tunetrain up` before the sweeps (docs/cluster.md).",
            file=stream,
            flush=True,
        )
