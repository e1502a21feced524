"""``tunetrain doctor``: can this cluster, tracking store and storage run a sweep?

Each check gives a line: ``ok`` with what it found, or ``PROBLEM`` with what is wrong and
the fix. Facts that only a node knows (package versions, GPUs, whether it can write the
storage) come from a small Ray task pinned to each node.
"""

from __future__ import annotations

import dataclasses
import os
import socket
import uuid
from pathlib import Path
from typing import Any, TextIO

import ray

from tunetrain import provenance
from tunetrain.redaction import redact
from tunetrain.storage import Storage


@dataclasses.dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""

    def line(self) -> str:
        text = f"  {'ok     ' if self.ok else 'PROBLEM'}  {self.name}: {self.detail}"
        return text + (f"\n           fix: {self.fix}" if not self.ok and self.fix else "")


def node_facts(storage: str | None, probe: str) -> dict[str, Any]:
    """What a node knows about itself; run on every node. Writes ``probe`` under ``storage``
    (a path every node must share) to show the node can write there."""
    facts: dict[str, Any] = {
        "node_id": ray.get_runtime_context().get_node_id(),
        "ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
        "versions": provenance.package_versions(),
        "cuda": provenance.cuda_version(),
        "gpus": [
            f"{name} ({memory:.0f} GiB)"
            for name, memory in zip(provenance.gpu_names(), provenance.gpu_memory_gib(), strict=False)
        ],
        "storage_error": "",
    }
    if storage is not None and not Storage(storage).is_uri:
        try:
            folder = Path(storage) / ".tunetrain_doctor"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / f"{probe}-{facts['node_id']}").write_text(facts["ip"])
        except OSError as exc:
            facts["storage_error"] = f"{type(exc).__name__}: {exc}"
    return facts


def connect(address: str | None) -> Check:
    """Connect to the cluster (an embedded Ray when ``address`` is None)."""
    if address and address not in ("auto", "local") and not address.startswith("ray://"):
        from tunetrain.cluster import unreachable

        why = unreachable(address)
        if why is not None:
            return Check(
                "cluster",
                False,
                f"nothing answers at {address} ({why})",
                fix=f"Start the head node (`ray start --head --port {address.rpartition(':')[2]}`) "
                "or pass the address `ray start --head` printed.",
            )
    import tempfile

    from tunetrain.cluster import connect as connect_ray

    try:
        # As a sweep connects (same settings and token handling); Ray's own log lines go to
        # a file outside the working folder, which doctor leaves as it found it.
        connect_ray(address, log_dir=Path(tempfile.gettempdir()) / "tunetrain-doctor")
    except Exception as exc:
        return Check(
            "cluster",
            False,
            f"cannot connect to {address or 'an embedded Ray'}: {type(exc).__name__}: {exc}",
            fix="Start the cluster (`ray start --head`) and pass --address auto or HOST:PORT.",
        )
    return Check("cluster", True, f"connected to {address or 'an embedded local Ray'}")


def cluster_checks(*, storage: str | None, multi_node_storage_given: bool) -> tuple[list[Check], list[str]]:
    """The checks that need a connected Ray; also returns the lines that describe the nodes."""
    checks: list[Check] = []
    nodes = [node for node in ray.nodes() if node.get("Alive")]
    lines = []
    for node in nodes:
        resources = node["Resources"]
        custom = {k: v for k, v in resources.items() if not k.startswith("node:") and k not in _STANDARD}
        lines.append(
            f"  node {node['NodeManagerAddress']} ({node['NodeID'][:12]}): {resources.get('CPU', 0):g} CPU, "
            f"{resources.get('GPU', 0):g} GPU, memory {resources.get('memory', 0) / 2**30:.1f} GiB, object store "
            f"{resources.get('object_store_memory', 0) / 2**30:.1f} GiB" + (f", custom {custom}" if custom else "")
        )
    # The State API (ray[default]): Ray Train V2 uses it to free the resources of stopped trials.
    try:
        from ray.util.state import list_nodes

        list_nodes(limit=1)
        checks.append(Check("State API", True, "answers"))
    except Exception as exc:
        checks.append(
            Check(
                "State API",
                False,
                f"{type(exc).__name__}: {exc}",
                fix='Install ray[default] on every node (pip install "ray[default,tune,train]") and keep the '
                "dashboard on (ray start without --include-dashboard=false).",
            )
        )
    probe = uuid.uuid4().hex[:8]
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    remote = ray.remote(num_cpus=0)(node_facts)
    refs = [
        remote.options(scheduling_strategy=NodeAffinitySchedulingStrategy(node["NodeID"], soft=False)).remote(
            storage, probe
        )
        for node in nodes
    ]
    facts = ray.get(refs, timeout=120)
    mine = provenance.package_versions()
    for fact in facts:
        where = f"node {fact['ip']} ({fact['node_id'][:12]})"
        differ = {k: (mine.get(k), v) for k, v in fact["versions"].items() if mine.get(k) != v}
        if differ:
            checks.append(
                Check(
                    f"versions on {where}",
                    False,
                    ", ".join(f"{k} {v} (driver {d})" for k, (d, v) in differ.items()),
                    fix="Install the same versions on every node as on the driver (pip freeze on the driver).",
                )
            )
        else:
            checks.append(Check(f"versions on {where}", True, "same as the driver's"))
        if fact["gpus"]:
            checks.append(Check(f"GPUs on {where}", True, f"{', '.join(fact['gpus'])}; CUDA {fact['cuda'] or '?'}"))
    if storage is not None and not Storage(storage).is_uri:
        folder = Path(storage) / ".tunetrain_doctor"
        seen = {path.name.split("-", 1)[1] for path in folder.glob(f"{probe}-*")} if folder.exists() else set()
        for fact in facts:
            where = f"node {fact['ip']} ({fact['node_id'][:12]})"
            if fact["storage_error"]:
                checks.append(
                    Check(
                        f"storage from {where}",
                        False,
                        f"cannot write {storage}: {fact['storage_error']}",
                        fix="Pass a --storage every node can write (a shared filesystem, or s3://, gs://).",
                    )
                )
            elif fact["node_id"] not in seen:
                checks.append(
                    Check(
                        f"storage from {where}",
                        False,
                        f"it wrote to {storage}, but the driver does not see that: not a shared filesystem",
                        fix="Pass a --storage on a filesystem every node and the driver share (NFS, ...) or a URI.",
                    )
                )
            else:
                checks.append(Check(f"storage from {where}", True, f"writes {storage}, and the driver sees it"))
        for path in folder.glob(f"{probe}-*"):
            path.unlink(missing_ok=True)
    if len(nodes) > 1 and not multi_node_storage_given:
        checks.append(
            Check(
                "storage",
                False,
                f"the cluster has {len(nodes)} nodes and no --storage was given",
                fix="Pass --storage: a path every node shares, or a URI (s3://bucket/path).",
            )
        )
    return checks, lines


_STANDARD = {"CPU", "GPU", "memory", "object_store_memory", "accelerator_type"}


def run(
    *, address: str | None, tracking_uri: str, storage: str | None, stream: TextIO, storage_given: bool = True
) -> int:
    """All checks, printed; 0 when there is no problem, 1 otherwise."""
    from tunetrain import tracking

    print("tunetrain doctor", file=stream)
    print(f"  driver: python {provenance.package_versions()['python']}, pid {os.getpid()}", file=stream)
    checks = [connect(address)]
    node_lines: list[str] = []
    if checks[0].ok:
        more, node_lines = cluster_checks(storage=storage, multi_node_storage_given=storage_given)
        checks += more
    problem = tracking.check_store(tracking_uri)
    checks.append(
        Check(
            "tracking", problem is None, problem or f"{redact(tracking_uri)} answers and takes runs", fix=_TRACKING_FIX
        )
    )
    for line in node_lines:
        print(line, file=stream)
    for check in checks:
        print(check.line(), file=stream)
    problems = [c for c in checks if not c.ok]
    print(f"{len(problems)} problem(s)." if problems else "No problems found.", file=stream, flush=True)
    return 1 if problems else 0


_TRACKING_FIX = (
    "Start the tracking server (mlflow server --backend-store-uri sqlite:///mlflow.db --host 127.0.0.1; "
    "for other machines, protect it first: docs/cluster.md) or pass the right --tracking-uri."
)
