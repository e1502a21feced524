"""The commands that start and stop the machine's shared Ray: up and down."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from tunetrain.cli._options import EXIT_OK


def up_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "up",
        help="start one Ray on this machine that every sweep here joins",
        description="Start Ray on this machine (Ray's `ray start --head`, its dashboard on 127.0.0.1) and leave it "
        "running: "
        "every sweep, notebook and resume of yours on this machine with no --address and no RAY_ADDRESS joins it "
        "(about "
        "a second) instead of starting its own, and sweeps started side by side share its CPUs. "
        "`tunetrain down` stops it.",
    )
    parser.add_argument("--num-cpus", type=int, help="CPUs it offers the sweeps (default: this machine's)")
    parser.add_argument("--num-gpus", type=int, help="GPUs it offers the sweeps (default: this machine's)")
    parser.add_argument("--port", type=int, default=6379, help="its GCS port on 127.0.0.1 (default 6379)")
    parser.add_argument("--dashboard-port", type=int, help="Ray dashboard's port (default 8265)")
    parser.set_defaults(command=up_command)


def up_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain.cluster.shared_ray import up

    up(
        num_cpus=args.num_cpus,
        num_gpus=args.num_gpus,
        port=args.port,
        dashboard_port=args.dashboard_port,
        stream=stream,
    )
    return EXIT_OK


def down_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "down",
        help="stop the Ray `tunetrain up` started",
        description="Stop the Ray that your `tunetrain up` started on this machine, and no other: its processes "
        "(their command lines name its folder) and their workers. A Ray started by `ray start --head` is stopped "
        "by `ray stop`, which ends every Ray of yours on the machine.",
    )
    parser.set_defaults(command=down_command)


def down_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain.cluster.shared_ray import down

    down(stream=stream)
    return EXIT_OK
