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


def _fits(bundle: Resources, free: dict[str, float]) -> bool:
    return all(free.get(key, 0.0) + 1e-9 >= amount for key, amount in bundle.items() if amount > 0)


def _take(bundle: Resources, free: dict[str, float]) -> None:
    for key, amount in bundle.items():
        free[key] = free.get(key, 0.0) - amount


def _place(bundles: Sequence[Resources], strategy: str, nodes: list[dict[str, float]]) -> bool:
    """First-fit placement of one trial's bundles onto ``nodes`` (mutated on success)."""
    trial = [dict(node) for node in nodes]
    if strategy == "STRICT_PACK":
        total = {key: sum(b.get(key, 0.0) for b in bundles) for b in bundles for key in b}
        for index, node in enumerate(trial):
            if _fits(total, node):
                _take(total, node)
                nodes[index] = node
                return True
        return False
    used: set[int] = set()
    for bundle in bundles:
        for index, node in enumerate(trial):
            if strategy == "STRICT_SPREAD" and index in used:
                continue
            if _fits(bundle, node):
                _take(bundle, node)
                used.add(index)
                break
        else:
            return False
    nodes[:] = trial
    return True


def describe_resources(resources: Resources) -> str:
    return ", ".join(f"{key}={value:g}" for key, value in sorted(resources.items()) if key not in _IGNORED)


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
