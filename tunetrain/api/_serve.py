"""``tunetrain.serve``: a registered model (or a sweep's) served on Ray Serve over HTTP, until
Ctrl+C or SIGTERM."""

from __future__ import annotations

import signal
import sys
import tempfile
import threading
from pathlib import Path
from typing import TextIO

from tunetrain.errors import ExperimentError
from tunetrain.serving import Served, check_serving, serve_model, stop_serving


def serve(
    model: str | None = None,
    *,
    tracking_uri: str | None = None,
    replicas: int = 1,
    num_cpus: float = 1.0,
    host: str = "127.0.0.1",
    port: int = 8000,
    address: str | None = None,
    block: bool = True,
    stream: TextIO | None = None,
) -> Served:
    """Serve ``model`` on Ray Serve: a model URI (``models:/NAME@champion``,
    ``models:/NAME/VERSION``, ``runs:/...``) or a sweep (name or parent run id; None: the
    newest) whose registered version is served. ``replicas`` replicas of ``num_cpus`` CPUs each,
    on ``host:port`` (127.0.0.1: this machine only), on the Ray a sweep would use (``address``,
    ``RAY_ADDRESS``, the machine's `tunetrain up` Ray, else an embedded one). With ``block``,
    it serves until Ctrl+C or SIGTERM, then stops Serve; else it returns once the replicas
    answer (a notebook; ``ray.serve.shutdown()`` stops it)."""
    from tunetrain import cluster, tracking
    from tunetrain.tracking.model_files import fetch_model

    out = stream or sys.stdout
    check_serving(replicas=replicas, num_cpus=num_cpus, port=port)
    try:
        import ray.serve  # noqa: F401  (its extra's packages: said now, before anything starts)
    except ImportError as exc:
        raise ExperimentError(
            f"Ray Serve is not installed ({exc.msg.split('.')[0]}).", fix='pip install "tunetrain[serve]"'
        ) from None
    store = tracking.resolve_tracking_uri(tracking_uri)
    tracking.check_existing(store)
    model_uri = model_uri_of(model, tracking_uri=store.uri)
    files = fetch_model(model_uri, tracking_uri=store.uri)  # checked by loading it, before Ray starts
    address, source = cluster.resolve_address(address)
    logs = cluster.connect(address, log_dir=Path(tempfile.gettempdir()) / "tunetrain_serve")
    print(f"Ray: {address or 'embedded'} ({source}); logs: {logs}", file=out, flush=True)
    served = serve_model(model_uri, files, replicas=replicas, num_cpus=num_cpus, host=host, port=port, stream=out)
    if not block:
        return served
    print("Ctrl+C or SIGTERM stops it.", file=out, flush=True)
    try:
        _until_stopped()
    finally:
        stop_serving(out)
    return served


def _until_stopped() -> None:
    """Wait for Ctrl+C (SIGINT) or SIGTERM. Handlers of its own, which only set an event, put
    back afterwards: Ray Serve's controller and the CLI's handlers would otherwise turn the
    signal into a KeyboardInterrupt at any point of the shutdown that follows."""
    stop = threading.Event()
    if threading.current_thread() is not threading.main_thread():  # no handlers there: a notebook's interrupt
        try:
            stop.wait()
        except KeyboardInterrupt:
            return
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        stop.wait()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def model_uri_of(model: str | None, *, tracking_uri: str) -> str:
    """``model`` when it is a model URI; else the ``models:/NAME/VERSION`` that sweep ``model``
    registered (None: the newest sweep)."""
    if model is not None and model.startswith(("models:/", "runs:/")):
        return model
    from tunetrain.results.analysis import load_sweep
    from tunetrain.tracking import schema

    found = load_sweep(model, tracking_uri=tracking_uri)
    registered = found.tags.get(schema.REGISTERED_MODEL_TAG)
    if not registered:
        raise ExperimentError(
            f"Sweep {found.name!r} registered no model, so there is nothing of it to serve.",
            fix=f"Register its best trial (`tunetrain register {found.name}`), or pass models:/NAME@champion.",
        )
    return f"models:/{registered}"
