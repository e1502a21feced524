"""Does a trial fit the cluster, and how many trials fit at once?

Ray Train retries forever when a trial's workers can never be placed, and a Tune trial that
waits for them never ends, so tunetrain checks fit up front against the nodes' resources.
Pure functions over plain dicts: the tuner layer passes in what Ray reports.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from tunetrain.errors import ExperimentError

Resources = Mapping[str, float]
# Ray resources that are bookkeeping, not capacity a worker asks for.
_IGNORED = ("memory", "object_store_memory")


# A node's GPUs are devices, not a pool: Ray gives a worker asking for a fraction below 1
# a share of one device, and one asking for n >= 1 (whole numbers only) n whole devices. So
# three trials at GPU 0.6 fit two GPUs twice, not three times as 1.8 <= 2 would say. Each
# device's free share is kept under its own key beside the node's total.
_DEVICE = "GPU#"


def _with_devices(node: Resources) -> dict[str, float]:
    free = dict(node)
    if not any(key.startswith(_DEVICE) for key in free):
        free.update({f"{_DEVICE}{i}": 1.0 for i in range(int(free.get("GPU", 0.0) + 1e-9))})
    return free


def _gpu_devices(amount: float, free: dict[str, float]) -> list[str] | None:
    """The devices a worker's ``amount`` of GPU takes on this node, or None if it does not fit:
    a fraction goes on the fullest device that still has room (Ray packs shares onto a
    device in use), a whole number on that many unused devices."""
    devices = [key for key in free if key.startswith(_DEVICE)]
    if amount < 1:
        room = [key for key in devices if free[key] + 1e-9 >= amount]
        return [min(room, key=lambda key: free[key])] if room else None
    unused = [key for key in devices if free[key] >= 1 - 1e-9]
    count = round(amount)
    return unused[:count] if len(unused) >= count else None


def _fits(bundle: Resources, free: dict[str, float]) -> bool:
    if not all(free.get(key, 0.0) + 1e-9 >= amount for key, amount in bundle.items() if amount > 0):
        return False
    gpu = bundle.get("GPU", 0.0)
    return gpu <= 0 or _gpu_devices(gpu, free) is not None


def _take(bundle: Resources, free: dict[str, float]) -> None:
    gpu = bundle.get("GPU", 0.0)
    if gpu > 0:
        for key in _gpu_devices(gpu, free) or []:
            free[key] -= min(gpu, 1.0)
    for key, amount in bundle.items():
        free[key] = free.get(key, 0.0) - amount


def _take_all(bundles: Sequence[Resources], free: dict[str, float]) -> bool:
    for bundle in bundles:
        if not _fits(bundle, free):
            return False
        _take(bundle, free)
    return True


def _place(bundles: Sequence[Resources], strategy: str, nodes: list[dict[str, float]]) -> bool:
    """First-fit placement of one trial's bundles onto ``nodes`` (mutated on success)."""
    if strategy == "STRICT_PACK":  # every bundle on one node
        for index, node in enumerate(nodes):
            trial = _with_devices(node)
            if _take_all(bundles, trial):
                nodes[index] = trial
                return True
        return False
    trial_nodes = [_with_devices(node) for node in nodes]
    used: set[int] = set()
    for bundle in bundles:
        for index, node in enumerate(trial_nodes):
            if strategy == "STRICT_SPREAD" and index in used:
                continue
            if _fits(bundle, node):
                _take(bundle, node)
                used.add(index)
                break
        else:
            return False
    nodes[:] = trial_nodes
    return True


def describe_resources(resources: Resources) -> str:
    return ", ".join(
        f"{key}={value:g}"
        for key, value in sorted(resources.items())
        if key not in _IGNORED and not key.startswith(_DEVICE)
    )


def check_fit(*, num_workers: int, worker: Resources, strategy: str, nodes: Sequence[Resources]) -> None:
    """Raise :class:`ExperimentError` when one trial can never be placed on these nodes."""
    bundles = [dict(worker)] * num_workers
    if _place(bundles, strategy, [dict(node) for node in nodes]):
        return
    largest = max(nodes, key=lambda node: (node.get("GPU", 0.0), node.get("CPU", 0.0)), default={})
    total = {key: sum(node.get(key, 0.0) for node in nodes) for node in nodes for key in node}
    raise ExperimentError(
        f"A trial needs {num_workers} worker(s) x ({describe_resources(worker)}) with placement "
        f"{strategy}, which this cluster can never provide: it has {len(nodes)} node(s), "
        f"{describe_resources(total)} in all, the largest node {describe_resources(largest)}.",
        fix="Lower workers_per_trial (--workers-per-trial) or resources_per_worker, "
        "or connect to a larger cluster with --address.",
    )


def max_concurrent_trials(*, num_workers: int, worker: Resources, strategy: str, nodes: Sequence[Resources]) -> int:
    """How many trials the nodes can run side by side (at least 1)."""
    free = [dict(node) for node in nodes]
    bundles = [dict(worker)] * num_workers
    count = 0
    while count < 10_000 and _place(bundles, strategy, free):
        count += 1
    return max(count, 1)


def parse_workers(text: str) -> int | tuple[int, int]:
    """``workers_per_trial`` as recorded: ``2``, or ``1-4`` for an elastic range."""
    low, _, high = text.partition("-")
    return (int(low), int(high)) if high else int(low)
