"""The hand-off's last step: a registered model served over HTTP on Ray Serve, the serving half
of the Ray that runs the sweeps (Ray's own docs load models from MLflow's registry the same way).

One deployment, its replicas and their CPUs as asked, each loading the model's files (fetched
and checked once by the driver, so replicas need no store or credentials); requests in
MLflow's scoring format (``POST /invocations`` or ``/`` with ``{"inputs": ...}``), answered
as ``mlflow models serve`` answers them."""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Mapping
from typing import Any, TextIO

from tunetrain.cluster import check_port
from tunetrain.errors import ExperimentError

APP_NAME = "tunetrain"


@dataclasses.dataclass(frozen=True)
class Served:
    """A model served on Ray Serve: where to send requests."""

    model_uri: str
    url: str  # http://HOST:PORT/invocations
    replicas: int


class _Model:
    """The Serve deployment's replica: the model loaded once, then one request at a time."""

    def __init__(self, files: Mapping[str, bytes]) -> None:
        from tunetrain.tracking.model_files import load_files

        self.model = load_files(files)

    async def __call__(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        from tunetrain.tracking.model_files import predict

        try:
            body = await request.json()
        except ValueError as exc:
            return JSONResponse({"error": f"the request body is not JSON ({exc})"}, status_code=400)
        try:
            return JSONResponse(predict(self.model, body))
        except (ValueError, TypeError) as exc:  # the input does not fit the model's signature
            return JSONResponse({"error": str(exc)}, status_code=400)
        except Exception as exc:  # the model's own failure on an input that fits: still said in JSON
            return JSONResponse({"error": f"the model failed: {type(exc).__name__}: {exc}"}, status_code=500)


def check_serving(*, replicas: int, num_cpus: float, port: int) -> None:
    """The flags' values, refused before anything starts."""
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise ExperimentError(f"--replicas must be an integer >= 1, but got {replicas!r}.", fix="Pass --replicas 1.")
    if not num_cpus > 0:
        raise ExperimentError(
            f"--num-cpus is each replica's CPUs, more than 0, but got {num_cpus!r}.", fix="Pass --num-cpus 1 (or 0.5)."
        )
    check_port("--port", port, fix="Pass --port 8000.")


def serve_model(
    model_uri: str,
    files: Mapping[str, bytes],
    *,
    replicas: int,
    num_cpus: float,
    host: str,
    port: int,
    stream: TextIO = sys.stdout,
) -> Served:
    """Deploy the model's files on the connected Ray's Serve, on ``host:port``; returns once
    every replica answers (Serve's ``serve.run`` waits for them)."""
    from ray import serve

    _quiet_serve_logs()  # its handler comes with the import
    serve.start(http_options={"host": host, "port": port})
    _quiet_serve_logs()
    # A stop waits at most 5 s for requests in flight (Serve's default: 20 s per replica).
    deployment: Any = serve.deployment(
        name="model", num_replicas=replicas, ray_actor_options={"num_cpus": num_cpus}, graceful_shutdown_timeout_s=5
    )
    deployment = deployment(_Model)
    serve.run(deployment.bind(dict(files)), name=APP_NAME, route_prefix="/")
    served = Served(model_uri=model_uri, url=f"http://{host}:{port}/invocations", replicas=replicas)
    print(
        f"Serving {model_uri} on Ray Serve at {served.url} ({replicas} replica(s), {num_cpus:g} CPU each): "
        'POST {"inputs": [...]} as to `mlflow models serve`.',
        file=stream,
        flush=True,
    )
    return served


def _quiet_serve_logs() -> None:
    """Ray Serve's INFO lines ("Started Serve", "Application ... is ready") go to Ray's log
    files, as the rest of Ray's output does: the console gets tunetrain's one line."""
    import logging

    logger = logging.getLogger("ray.serve")
    for handler in list(logger.handlers):
        if isinstance(handler, logging.StreamHandler) and not isinstance(handler, logging.FileHandler):
            logger.removeHandler(handler)
    logger.propagate = True  # to the "ray" logger, which tunetrain sends to the driver log


def stop_serving(stream: TextIO = sys.stdout) -> None:
    """The deployment deleted and Serve shut down on the connected Ray."""
    from ray import serve

    serve.shutdown()
    print("Stopped serving.", file=stream, flush=True)
