"""The machine's shared Ray: ``tunetrain up`` starts it, every sweep on this machine with no
``--address`` joins it (:func:`tunetrain.cluster.resolve_address`), ``tunetrain down``
stops it.

It is Ray's own ``ray start --head`` (its dashboard on loopback) in a temporary folder of the
user's own (:func:`tunetrain.cluster.user_ray_dir`): that user's sweeps find it there,
other users' do not (they join it only with ``--address``), and ``tunetrain down`` stops its
processes alone, where Ray's ``ray stop`` would stop every Ray on the machine. Ray's tools
reach it by its address (``ray status --address ...``); tunetrain adds no daemon of its own. Joining a
running Ray takes about a second instead of the five to eight that starting one takes, and
two sweeps started side by side share its CPUs instead of each counting the machine's as
theirs (docs/cluster.md)."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from typing import Any, TextIO

from tunetrain import _internals
from tunetrain.cluster import check_port, running_local_ray, user_ray_dir
from tunetrain.errors import ExperimentError

DEFAULT_PORT = 6379  # Ray's own default GCS port


def up(
    *,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    port: int = DEFAULT_PORT,
    dashboard_port: int | None = None,
    stream: TextIO = sys.stdout,
) -> str:
    """Start the machine's shared Ray (or find the one already running); its address."""
    _check_count("--num-cpus", num_cpus)
    _check_count("--num-gpus", num_gpus)
    for flag, value in (("--port", port), ("--dashboard-port", dashboard_port)):
        if value is not None:
            check_port(flag, value, fix=f"Pass {flag} 1024..65535.")
    if (running := running_local_ray()) is not None:
        print(f"A Ray is already running on this machine at {running}; sweeps join it.", file=stream, flush=True)
        return running
    command = [sys.executable, "-m", "ray.scripts.scripts", "start", "--head", f"--port={port}"]
    command += [f"--temp-dir={user_ray_dir()}", "--dashboard-host=127.0.0.1", "--disable-usage-stats"]
    command += [f"--num-cpus={num_cpus}"] if num_cpus is not None else []
    command += [f"--num-gpus={num_gpus}"] if num_gpus is not None else []
    command += [f"--dashboard-port={dashboard_port}"] if dashboard_port is not None else []
    user_ray_dir().mkdir(parents=True, exist_ok=True)
    log = user_ray_dir() / "up.log"  # this user's, beside the Ray it starts
    with log.open("w") as out:
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT, check=False)
    address = running_local_ray()
    if done.returncode != 0 or address is None:
        tail = "\n".join(log.read_text().splitlines()[-15:])
        raise ExperimentError(
            f"`ray start --head --port={port}` failed (exit {done.returncode}); the end of its output ({log}):\n{tail}",
            fix="A port in use: pass another --port; otherwise see Ray's message above.",
        )
    print(
        f"Ray is up at {address} (dashboard on 127.0.0.1; Ray's token authentication on, as `ray start` sets "
        "it). Sweeps on this machine with no --address now join it; `tunetrain down` stops it.",
        file=stream,
        flush=True,
    )
    return address


def down(*, stream: TextIO = sys.stdout) -> str | None:
    """Stop the Ray this user's ``tunetrain up`` started, and nothing else; the address it had,
    or None when none was running. Its processes are the ones whose command line names its
    temporary folder (:func:`~tunetrain.cluster.user_ray_dir`), owned by this user,
    with their children (the workers, renamed ``ray::...``): SIGTERM, then SIGKILL after 10 s.
    A Ray started by ``ray start --head`` is Ray's to stop (``ray stop``), and said."""
    import psutil

    folder = str(user_ray_dir())
    address = _internals.local_ray_address(folder)
    mine = [p for p in psutil.process_iter(["cmdline", "uids"]) if _started_in(p, folder)]
    if not mine:
        _forget(folder)
        if running_local_ray() is not None:
            print(
                "The Ray running on this machine was started by `ray start --head`, not `tunetrain up`: "
                "`ray stop` stops it (and every other Ray of yours on this machine).",
                file=stream,
            )
        else:
            print("No Ray started by your `tunetrain up` is running on this machine.", file=stream)
        return None
    processes = {p.pid: p for p in mine}
    for process in mine:
        with contextlib.suppress(psutil.Error):
            processes.update({child.pid: child for child in process.children(recursive=True)})
    for process in processes.values():
        with contextlib.suppress(psutil.Error):
            process.terminate()
    _, alive = psutil.wait_procs(list(processes.values()), timeout=10)
    for process in alive:
        with contextlib.suppress(psutil.Error):
            process.kill()
    psutil.wait_procs(alive, timeout=10)
    _forget(folder)
    print(f"Stopped the Ray at {address or folder} ({len(processes)} processes).", file=stream, flush=True)
    return address or folder


def _started_in(process: Any, folder: str) -> bool:
    """A process of this user whose command line names ``folder`` (Ray's --temp-dir, which
    its GCS, raylet, dashboard and log monitor carry)."""
    try:
        info = process.info
        return info["uids"].real == os.getuid() and any(folder in part for part in info["cmdline"] or ())
    except (KeyError, AttributeError, TypeError):
        return False


def _forget(folder: str) -> None:
    """The address file of a stopped Ray, removed as ``ray stop`` removes its own."""
    with contextlib.suppress(OSError):
        os.remove(_internals.ray_address_file(folder))


def _check_count(flag: str, value: int | None) -> None:
    if value is not None and value < 0:
        raise ExperimentError(
            f"{flag} is how many the shared Ray offers its sweeps, 0 or more, but got {value}.",
            fix=f"Pass {flag} 0 or more, or leave it out: Ray counts this machine's.",
        )
