"""The commands that carry a sweep's results forward: register, confirm and serve."""

from __future__ import annotations

import argparse
import sys
from typing import Any, TextIO

from tunetrain.cli._options import EXIT_OK, TRUST_CHANGED_HELP


def register_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "register",
        help="register a sweep's best model in MLflow's Model Registry",
        description="Log the best kept checkpoint of a sweep's best trial (or of --trial) to MLflow and register "
        "it as a new version of a registered model: an mlflow.pytorch model when the experiment has "
        "export_model, else the checkpoint folder with a note. A sweep does this at its end unless --no-register.",
    )
    parser.add_argument("sweep", nargs="?", help="sweep name or parent run id (default: the newest sweep)")
    parser.add_argument("--trial", help="a trial name (trial_0003) or run id instead of the best trial")
    parser.add_argument("--name", help="the registered model's name (default: the experiment's)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument(
        "--experiment-file", help="the experiment file whose export_model to use (default: the one the sweep recorded)"
    )
    parser.add_argument("--trust-changed-file", action="store_true", help=TRUST_CHANGED_HELP)
    parser.add_argument("--alias", help="move this alias to the new version (models:/NAME@ALIAS), e.g. champion")
    parser.set_defaults(command=register_command)


def register_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain.api import register

    registered = register(
        args.sweep,
        trial=args.trial,
        name=args.name,
        tracking_uri=args.tracking_uri,
        experiment=args.experiment_file,
        trust_changed_file=args.trust_changed_file,
        alias=args.alias,
    )
    print(registered.line(), file=stream)
    if registered.alias:
        print(registered.alias, file=stream)
    return EXIT_OK


def confirm_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "confirm",
        help="run a sweep's top configurations again with new seeds and re-rank them",
        description="Run the --top-k best configurations of a sweep again, --seeds times each with new seeds, to "
        "their end (FIFO, no early stopping), as a new sweep linked to the original (tags on both); print the "
        "configurations ranked by their mean and whether the original winner still wins; move the alias champion to "
        "the winner's registered version. The confirming sweep registers nothing of its own.",
    )
    parser.add_argument("sweep", nargs="?", help="sweep name or parent run id (default: the newest sweep)")
    parser.add_argument("--top-k", type=int, default=3, help="how many of the best configurations (default 3)")
    parser.add_argument("--seeds", type=int, default=3, help="runs of each, with new seeds (default 3)")
    parser.add_argument("--seed", type=int, help="the confirming sweep's root seed (default: drawn and recorded)")
    parser.add_argument("--name", help="the confirming sweep's name (default: SWEEP-confirm)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--storage", help="where its checkpoints go (default ./tunetrain_results)")
    parser.add_argument("--address", help="Ray cluster to use (default: embedded)")
    parser.add_argument("--experiment-file", help="the experiment file (default: the one the sweep recorded)")
    parser.add_argument("--no-report", action="store_true", help="no HTML report of the confirming sweep")
    parser.add_argument("--trust-changed-file", action="store_true", help=TRUST_CHANGED_HELP)
    parser.add_argument(
        "--alias",
        default="champion",
        help="the registered model's alias that moves to the confirmed winner's version, registered from the "
        "original sweep's trial if it has none (models:/NAME@ALIAS; default champion; '' for none)",
    )
    parser.set_defaults(command=confirm_command, records=True)


def confirm_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain.api import confirm
    from tunetrain.cli._options import _command

    result = confirm(
        args.sweep,
        top_k=args.top_k,
        seeds=args.seeds,
        seed=args.seed,
        name=args.name,
        tracking_uri=args.tracking_uri,
        storage=args.storage,
        address=args.address,
        experiment=args.experiment_file,
        report=not args.no_report,
        stream=stream,
        command=_command(args),
        trust_changed_file=args.trust_changed_file,
        alias=args.alias or None,
    )
    return result.sweep.exit_status


def serve_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "serve",
        help="serve a registered model (or a sweep's) over HTTP on Ray Serve",
        description="Deploy a registered model on Ray Serve, on the Ray a sweep would use (--address, RAY_ADDRESS, "
        "the machine's `tunetrain up` Ray, else an embedded one), and serve it until Ctrl+C or SIGTERM. Requests "
        'as to `mlflow models serve`: POST /invocations with {"inputs": [...]}, answered {"predictions": [...]}.',
    )
    parser.add_argument(
        "model", nargs="?", help="models:/NAME@ALIAS, models:/NAME/VERSION, or a sweep (default: the newest sweep)"
    )
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--replicas", type=int, default=1, help="replicas of the model (default 1)")
    parser.add_argument("--num-cpus", type=float, default=1.0, help="CPUs per replica (default 1)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1: this machine)")
    parser.add_argument("--port", type=int, default=8000, help="HTTP port (default 8000)")
    parser.add_argument("--address", help="Ray cluster to use (default: as a sweep finds it)")
    parser.set_defaults(command=serve_command)


def serve_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain.api import serve

    serve(
        args.model,
        tracking_uri=args.tracking_uri,
        replicas=args.replicas,
        num_cpus=args.num_cpus,
        host=args.host,
        port=args.port,
        address=args.address,
        stream=stream,
    )
    return EXIT_OK
