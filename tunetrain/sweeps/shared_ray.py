"""The machine's shared Ray: ``tunetrain up`` starts it, every sweep on this machine with no
``--address`` joins it (:func:`tunetrain.sweeps.cluster.resolve_address`), ``tunetrain down``
stops it.

It is Ray's own ``ray start --head`` (its dashboard on loopback), so Ray's tools (``ray status``, the
dashboard, ``ray.init()``) see the same Ray; tunetrain adds no daemon of its own. Joining a
running Ray takes about a second instead of the five to eight that starting one takes, and
two sweeps started side by side share its CPUs instead of each counting the machine's as
theirs (docs/cluster.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import TextIO

from tunetrain.errors import ExperimentError
from tunetrain.sweeps.cluster import check_port, running_local_ray

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
    command += ["--dashboard-host=127.0.0.1", "--disable-usage-stats"]
    command += [f"--num-cpus={num_cpus}"] if num_cpus is not None else []
    command += [f"--num-gpus={num_gpus}"] if num_gpus is not None else []
    command += [f"--dashboard-port={dashboard_port}"] if dashboard_port is not None else []
    log = Path(tempfile.gettempdir()) / "tunetrain_ray_up.log"
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
    """Stop the machine's shared Ray (Ray's ``ray stop``); the address it had, or None when
    none was running. ``ray stop`` ends every Ray process on this machine, a running sweep's
    embedded Ray too, as Ray's own command does."""
    address = running_local_ray()
    if address is None:
        print("No Ray started by `tunetrain up` or `ray start --head` is running on this machine.", file=stream)
        return None
    command = [sys.executable, "-m", "ray.scripts.scripts", "stop"]
    done = subprocess.run(command, capture_output=True, text=True, check=False, env={**os.environ})
    if done.returncode != 0:
        raise ExperimentError(
            f"`ray stop` failed (exit {done.returncode}): {(done.stderr or done.stdout).strip()[-500:]}",
            fix="Run `ray stop --force`.",
        )
    print(f"Stopped the Ray at {address}.", file=stream, flush=True)
    return address


def _check_count(flag: str, value: int | None) -> None:
    if value is not None and value < 0:
        raise ExperimentError(
            f"{flag} is how many the shared Ray offers its sweeps, 0 or more, but got {value}.",
            fix=f"Pass {flag} 0 or more, or leave it out: Ray counts this machine's.",
        )
