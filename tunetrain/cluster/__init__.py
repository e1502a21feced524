"""Connecting to Ray: an embedded one on this machine, or a cluster (the run layer's first step).

Ray's own output goes to log files, not to the console."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import socket
import sys
import tempfile
from pathlib import Path
from typing import Any

import ray

from tunetrain import _internals
from tunetrain.errors import ExperimentError

# Train V2 reports reach Tune at each controller poll, every 2 s by default: too slow for
# short trials (measured on 2 CPUs: 0.5 s -> ~9.5 s from trial start to first report of a
# 2-worker trial, 0.2 s -> ~8.5 s, 0.1 s -> ~8 s with more polling load). Users can still
# set their own value in the environment.
_RAY_ENV_DEFAULTS = {"RAY_TRAIN_HEALTH_CHECK_INTERVAL_S": "0.2"}


def local_nodes() -> list[dict[str, float]]:
    """The nodes of the Ray this process already uses (a notebook's ``ray.init(num_gpus=2)``:
    its own CPUs, GPUs and custom resources), else the one node an embedded Ray would have on
    this machine."""
    if ray.is_initialized():
        return cluster_nodes()
    import torch

    node = {"CPU": float(os.cpu_count() or 1)}
    if torch.cuda.is_available():
        node["GPU"] = float(torch.cuda.device_count())
    return [node]


ADDRESS_ENV = "RAY_ADDRESS"
CONNECT_TIMEOUT_S = 5.0


def resolve_address(given: str | None, *, flag: str = "--address") -> tuple[str | None, str]:
    """The Ray cluster to use, as Ray's own tools find it: ``given`` (what ``flag`` said),
    else ``RAY_ADDRESS`` (set by ``ray job submit`` and KubeRay for their drivers), else the
    Ray this process already uses (None), else the machine's running Ray started by
    ``tunetrain up`` or ``ray start --head`` (as ``ray.init()`` finds it), else None (an
    embedded Ray); with where it came from."""
    if given:
        return given, f"from {flag}"
    if os.environ.get(ADDRESS_ENV):
        return os.environ[ADDRESS_ENV], f"from {ADDRESS_ENV}"
    if ray.is_initialized():  # a notebook's second sweep: the Ray its first one started or joined
        return None, "the Ray this process already uses"
    if (shared := running_local_ray()) is not None:
        return shared, "the Ray running on this machine, joined: `tunetrain up` or `ray start --head` started it"
    if (stale := _internals.local_ray_address()) is not None:
        if _owner(None) != os.getuid():
            return None, (
                f"no {flag}, {ADDRESS_ENV} not set; Ray's address file names {stale}, a Ray another user started "
                f"(`ray start`), so not joined ({flag} {stale} joins it)"
            )
        if unreachable(stale, timeout_s=1.0) is not None:
            return None, (
                f"no {flag}, {ADDRESS_ENV} not set; Ray's address file names {stale}, where no Ray answers "
                "(stopped without `ray stop`), so not joined"
            )
    # "No shared Ray", not "no Ray": another sweep's embedded Ray may run here (never joined,
    # and warned of before this line: the two must not contradict each other).
    return None, f"no {flag}, {ADDRESS_ENV} not set, no shared Ray on this machine (`tunetrain up` starts one)"


@dataclasses.dataclass(frozen=True)
class FoundCluster:
    """The Ray a sweep will use, found before it starts."""

    address: str | None  # None: an embedded Ray (or the one this process already uses)
    source: str  # where the address came from, for the line that names it
    nodes: list[dict[str, float]]  # its nodes' resources (this machine's, for an embedded Ray)
    others: list[str]  # other Rays on this machine that an embedded Ray would run beside


def find_cluster(given: str | None, *, dry_run: bool, log_dir: Path) -> FoundCluster:
    """The Ray ``given`` (the --address) names, as :func:`resolve_address` finds it, and its
    nodes. An embedded Ray gets this machine's resources, so nothing starts here; a cluster
    is asked: read only for a dry run (no driver, no log), else connected to (its driver's
    log under ``log_dir``)."""
    address, source = resolve_address(given)
    if address is None:
        return FoundCluster(address, source, local_nodes(), other_rays())
    if dry_run:
        return FoundCluster(address, source, read_nodes(address), [])
    connect(address, log_dir=log_dir)
    return FoundCluster(address, source, cluster_nodes(), [])


def user_ray_dir() -> Path:
    """The temporary folder of the Ray that this user's ``tunetrain up`` starts (Ray's
    ``--temp-dir``): its address file, sessions and logs, apart from Ray's default folder and
    from other users', so that only this user's sweeps find it and ``tunetrain down`` stops
    it alone."""
    return Path(tempfile.gettempdir()) / f"tunetrain-ray-{os.getuid()}"


def _owner(temp_dir: str | None) -> int | None:
    try:
        return os.stat(_internals.ray_address_file(temp_dir)).st_uid
    except OSError:
        return None


def running_local_ray() -> str | None:
    """The address of this user's shared Ray on this machine, when it answers: the one this
    user's ``tunetrain up`` started (in :func:`user_ray_dir`), else one this user started with
    ``ray start --head`` (Ray's default folder); None otherwise. A sweep with no address joins
    it rather than starting a second Ray beside it: Ray Train V2 needs one Ray per machine, and
    two would each count the machine's CPUs as theirs (docs/cluster.md). Another user's Ray is
    never joined without --address."""
    for temp_dir in (str(user_ray_dir()), None):
        address = _internals.local_ray_address(temp_dir)
        if address is None or _owner(temp_dir) != os.getuid():
            continue  # none started there, or another user's
        if unreachable(address, timeout_s=1.0) is None:
            return address  # (else stopped without `ray stop`: the file outlives it)
    return None


def other_rays() -> list[str]:
    """The Rays already running on this machine that a sweep starting an embedded Ray would
    run beside (another process's embedded Ray); none when this process has one already."""
    if ray.is_initialized():
        return []
    return sorted(_internals.running_ray_instances())


def check_port(flag: str, value: int, *, fix: str) -> None:
    """A TCP port a flag gave (``tunetrain up``'s, ``tunetrain serve``'s), refused before anything starts."""
    if not 1 <= value <= 65535:
        raise ExperimentError(f"{flag} must be a TCP port, from 1 to 65535, but got {value}.", fix=fix)


def unreachable(address: str, *, timeout_s: float = CONNECT_TIMEOUT_S) -> str | None:
    """Why nothing accepts connections at the address's HOST:PORT (``ray://HOST:PORT`` too);
    None when something does, or when the address names no port (``auto``: Ray finds it)."""
    host_port = address.removeprefix("ray://")
    host, _, port = host_port.rpartition(":")
    if not port.isdigit():
        return None
    try:
        with socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s):
            return None
    except OSError as exc:
        return f"{type(exc).__name__}: {exc}"


def connect(address: str | None, *, log_dir: Path) -> str:
    """Start an embedded Ray (address None) or connect to a cluster; returns Ray's log folder.
    An address where nothing listens is bad input, said within seconds (``ray.init`` would
    retry for minutes).

    Ray's own worker output goes to its log files, not to the console.
    """
    if address is not None and not ray.is_initialized():
        _check_reachable(address)
    env = {key: os.environ.get(key, value) for key, value in _RAY_ENV_DEFAULTS.items()}
    os.environ.update(env)
    # tunetrain checks that the metric is reported itself (once, with a clear message).
    os.environ.setdefault("TUNE_DISABLE_STRICT_METRIC_CHECKING", "1")
    # Tune's newer console output prints a banner even at verbose=0; the classic one is silent.
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    # Tune saves the sweep's state (trials, searcher) every 10 s or more by default; a driver
    # killed in between resumes from an older state and redoes that much work (the journal
    # keeps the record right either way, see docs/fault_tolerance.md). Once a second bounds
    # both the redone work and the cost of saving (a few ms for a hundred trials).
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1")
    # Tune writes every result of every trial again to its own CSV, JSON and TensorBoard files
    # (the last fsynced at each flush) in the driver: MLflow already holds each metric at each
    # step. Measured on 2 CPUs, 300 trials of 3 reports: 37.7 s of sweep with them, 29.0 s
    # without. Ray's switch; `TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=0` brings them back.
    os.environ.setdefault("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "1")
    _route_ray_logging(log_dir / "ray_driver.log")  # for what ray.init itself logs
    if address is not None:
        use_cluster_token()
    sigterm = _sigterm_handler()
    if not ray.is_initialized():
        ray.init(
            # None is an embedded Ray: "local" starts one. Ray's own None would join the Ray
            # its address file names, and wait on one that was stopped without `ray stop`
            # (the file outlives it) for ever; which Ray to join is resolve_address's to say.
            address=address if address is not None else "local",
            log_to_driver=False,
            logging_level=logging.WARNING,
            runtime_env={"env_vars": env},
        )
    _route_ray_logging(log_dir / "ray_driver.log")  # ray.init puts its console handler back
    _keep_sigterm_handler(sigterm)
    _internals.route_raylet_messages(logging.getLogger("ray.raylet_messages"))
    _internals.host_oom_fails_the_trial()  # Ray's memory monitor killing one trial ends that trial
    _internals.torn_error_file_reads_as_absent()  # a full disk's cut error.pkl never ends Tuner.fit
    return _internals.ray_logs_dir()


def _check_reachable(address: str) -> None:
    if (why := unreachable(address)) is not None:
        port = address.rpartition(":")[2]
        raise ExperimentError(
            f"Nothing answers at the Ray address {address} ({why}).",
            fix=f"Start the head node (`ray start --head --port {port}`), pass the address `ray start --head` "
            f"printed, or leave --address and {ADDRESS_ENV} unset for an embedded Ray.",
        )


def read_nodes(address: str) -> list[dict[str, float]]:
    """The alive nodes' resources of the cluster at ``address``, read without connecting to
    it as a driver (no job, no driver log): Ray's State API (``ray.util.state.list_nodes``,
    served by the head's dashboard, which ``ray[default]`` starts). For ``--dry-run``."""
    from ray.util.state import list_nodes

    _check_reachable(address)
    use_cluster_token()
    try:
        states = list_nodes(address=address, detail=True, timeout=int(CONNECT_TIMEOUT_S) * 2)
    except Exception as exc:  # Ray raises several kinds here (RayStateApiException, ConnectionError, ...)
        raise ExperimentError(
            f"The cluster at {address} answers, but its State API does not ({type(exc).__name__}: "
            f"{str(exc).splitlines()[0] if str(exc) else ''}); a dry run reads the cluster's nodes from it "
            "without connecting.",
            fix="Start the head with its dashboard (`ray start --head`, from ray[default], which tunetrain also "
            "needs to free stopped trials' resources), or run without --dry-run.",
        ) from None
    return [
        {key: float(value) for key, value in (node.resources_total or {}).items()}
        for node in states
        if node.state == "ALIVE"
    ]


def use_cluster_token() -> None:
    """Send the cluster's authentication token when connecting to a running cluster.

    ``ray start`` (Ray 2.60) turns token authentication on and keeps the token in
    ``~/.ray/auth_token``; ``ray.init(address=...)`` sends it only when ``RAY_AUTH_MODE=token``
    is set, and otherwise fails after a minute with "Authentication token is missing".
    So with a token at hand (that file or ``RAY_AUTH_TOKEN``) and no mode chosen, token
    mode is chosen, as ``ray start`` itself does.
    """
    has_token = "RAY_AUTH_TOKEN" in os.environ or (Path.home() / ".ray" / "auth_token").exists()
    # Turned on in this process (Ray's config is cached), else for child processes only.
    if "RAY_AUTH_MODE" not in os.environ and has_token and not _internals.enable_ray_token_auth():
        os.environ["RAY_AUTH_MODE"] = "token"


_PLAIN = {"formatter": "plain"}
# The RAY_DATA_LOGGING_CONFIG this process set (a user's own is left alone).
_ray_data_config_set: list[str] = []


def quiet_ray_data(log_dir: Path) -> None:
    """Ray Data's messages to ``log_dir/ray_data.log`` instead of the console ("The Ray
    cluster currently does not have any available CPUs. The Dataset job will hang..." while
    trials hold every CPU, on a sweep's console). Ray Data gives its "ray.data" logger a
    console handler of its own, not propagated to "ray", when it is imported: its documented
    switch, ``RAY_DATA_LOGGING_CONFIG``, names a config with a file handler only (read at
    that import), and a "ray.data" logger already configured loses its console handlers now."""
    import json

    log_dir.mkdir(parents=True, exist_ok=True)
    target = log_dir / "ray_data.log"
    if os.environ.get("RAY_DATA_LOGGING_CONFIG") in (None, *_ray_data_config_set):
        config = log_dir / "ray_data_logging.yaml"  # JSON is YAML, which Ray Data reads
        config.write_text(
            json.dumps(
                {
                    "version": 1,
                    "disable_existing_loggers": False,
                    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
                    "handlers": {
                        "file": {"class": "logging.FileHandler", "filename": str(target), "formatter": "plain"}
                    },
                    "loggers": {"ray.data": {"level": "INFO", "handlers": ["file"], "propagate": False}},
                }
            )
        )
        os.environ["RAY_DATA_LOGGING_CONFIG"] = str(config)
        _ray_data_config_set.append(str(config))
    if "ray.data" in sys.modules:  # imported (by the experiment file) before this sweep's config
        logger = logging.getLogger("ray.data")
        for old in list(logger.handlers):
            if not isinstance(old, logging.FileHandler) or old.baseFilename == str(target.resolve()):
                logger.removeHandler(old)
        handler = logging.FileHandler(target)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        logger.addHandler(handler)


def _route_ray_logging(path: Path) -> None:
    """Send Ray's Python loggers (and warnings) to a file instead of the console."""
    path.parent.mkdir(parents=True, exist_ok=True)
    quiet_ray_data(path.parent)
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    logging.captureWarnings(True)
    for name in ("ray", "py.warnings"):
        logger = logging.getLogger(name)
        for old in list(logger.handlers):
            logger.removeHandler(old)
            if isinstance(old, logging.FileHandler):
                with contextlib.suppress(OSError):  # the last sweep's log, on a disk that may be full or gone
                    old.close()
        logger.addHandler(handler)
        logger.propagate = False


def _sigterm_handler() -> Any:
    """This process's Python SIGTERM handler (None off the main thread: it cannot change)."""
    import signal
    import threading

    return signal.getsignal(signal.SIGTERM) if threading.current_thread() is threading.main_thread() else None


def _keep_sigterm_handler(before: Any) -> None:
    """Put back the SIGTERM handler the process had before ``ray.init``.

    Ray 2.60's ``ray.init`` replaces it with its own (one that exits the process at once,
    plus a C++ failure-signal handler that aborts it), so a `kill` during a sweep would skip
    the clean end the CLI gives it (trials closed, summary). A handler the program set (the
    CLI's, or a user's) is put back; where none was set (the default), Ray's stays."""
    import signal

    from tunetrain.console import live

    if callable(before) and signal.getsignal(signal.SIGTERM) is not before:
        signal.signal(signal.SIGTERM, before)
    elif before == signal.SIG_DFL and live.in_kernel():
        # A Jupyter kernel (no handler of its own): at shutdown, Jupyter sends SIGTERM to a
        # kernel still busy after its shutdown request, and Ray's C++ handler printed a stack
        # dump. A clean exit instead: Python's exit handlers (Ray's shutdown among them).
        signal.signal(signal.SIGTERM, _exit_cleanly)


def _exit_cleanly(signum: int, frame: Any) -> None:
    raise SystemExit(128 + signum)


def cluster_nodes() -> list[dict[str, float]]:
    return [
        {key: float(value) for key, value in node["Resources"].items()} for node in ray.nodes() if node.get("Alive")
    ]
