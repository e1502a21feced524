"""The commands that run trials or fix a sweep's record: sweep, resume, replay, sync, doctor."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, TextIO

from tunetrain.cli._options import EXIT_ALL_FAILED, EXIT_OK, TRUST_CHANGED_HELP, _command
from tunetrain.errors import ExperimentError
from tunetrain.storage import DEFAULT_STORAGE, Storage

if TYPE_CHECKING:
    from tunetrain.sweeps.request import SweepRequest

_SWEEP_EXAMPLES = """examples:
  tunetrain sweep experiments/mlp_digits.py                          # the experiment as written
  tunetrain sweep experiments/mlp_digits.py --num-samples 16 --set batch_size=32
  tunetrain sweep experiments/mlp_digits.py --smoke                  # one tiny trial, then verdicts
  tunetrain sweep experiments/mlp_digits.py --dry-run                # the plan (and its cost), nothing run
  tunetrain sweep experiments/gpt2_lr.py --address auto --storage /shared/results --budget 2h
  tunetrain sweep experiments/gpt2_lr.py --config-from SWEEP --set train.max_steps=2000
"""


def sweep_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sweep",
        help="run a hyperparameter sweep of an experiment file",
        description="Run the experiment's sweep through Ray Tune and record every trial in MLflow.",
        epilog=_SWEEP_EXAMPLES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    group0 = parser.add_argument_group("what to run")
    group0.add_argument("file", help="experiment file, e.g. experiments/mlp_digits.py")
    group0.add_argument("--num-samples", type=int, help="number of trials")
    # The names as tunetrain.experiment lists them (tests/test_cli.py holds them equal; the
    # experiment module is not imported here, so that --help answers at once).
    group0.add_argument(
        "--scheduler",
        help="fifo, asha, hyperband, median, pbt or pb2 (default: the experiment's; see docs/schedulers.md)",
    )
    group0.add_argument(
        "--searcher", help="auto, optuna, async_bohb, hyperopt, random or grid (default: the experiment's)"
    )
    group0.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a default or pin a space dimension (Python literal; nested keys with dots)",
    )
    group0.add_argument(
        "--config-from",
        metavar="SWEEP_OR_RUN_ID",
        help="pin every value of a sweep's best config (or of one trial's run) from the tracking store; "
        "--set values win",
    )
    group0.add_argument(
        "--resume",
        action="store_true",
        help="continue the sweep --name (default: this experiment's newest under --storage) after a crash or "
        "Ctrl+C: ended trials stay ended, the others go on from their checkpoints, in the same MLflow runs",
    )
    group1 = parser.add_argument_group("where it runs and records")
    group1.add_argument("--address", help="Ray cluster to use (auto, HOST:PORT, ray://HOST:10001); default: embedded")
    group1.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    group1.add_argument(
        "--storage",
        help="where trial checkpoints and sweep state go: a path or URI (s3://...) every node sees; "
        f"default ./{DEFAULT_STORAGE} (one machine only)",
    )
    group1.add_argument("--name", help="sweep name (default: EXPERIMENT-DATE-TIME)")
    group2 = parser.add_argument_group("how much (resources, concurrency, budget)")
    group2.add_argument(
        "--workers-per-trial",
        type=_workers,
        help="Ray Train workers (DDP processes) per trial: N, or MIN-MAX for elastic trials",
    )
    group2.add_argument("--use-gpu", action="store_true", default=None, help="give each worker a GPU")
    group2.add_argument(
        "--trial-runner",
        choices=("auto", "in_process", "worker_group", "torch_trainer"),
        help="in_process: single-worker trials in a reused process; worker_group: a fixed number of workers "
        "kept with the reused trial process; torch_trainer: a TorchTrainer per trial; auto (default): "
        "in_process for 1 worker, worker_group for a fixed number, torch_trainer for an elastic range",
    )
    group2.add_argument("--max-concurrent", type=int, help="trials run at once (default: what the cluster fits)")
    group2.add_argument(
        "--max-failures", type=int, help="restarts of a trial from its checkpoint after a worker failure (default 0)"
    )
    group2.add_argument(
        "--placement-strategy",
        choices=("PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"),
        help="how a trial's workers are placed on nodes (default: the experiment's, PACK)",
    )
    group2.add_argument(
        "--budget",
        help="stop launching trials once the next would overrun it: wall time (90s, 30m, 2h) or 5cpu-h, 1.5gpu-h",
    )
    group2.add_argument(
        "--ask-above",
        metavar="COST",
        help="ask before starting when the estimate (after a --smoke run) or the --budget exceeds this: "
        "1h, 2cpu-h, 10gpu-h (default: $TUNETRAIN_CONFIRM_ABOVE, else 10gpu-h for GPU sweeps); without a "
        "terminal the sweep refuses (exit 2) unless --yes",
    )
    group2.add_argument("--confirm-above", metavar="COST", help="the old name of --ask-above, still taken")
    group2.add_argument("--yes", action="store_true", help="start without asking (see --ask-above)")
    group0.add_argument(
        "--no-baseline",
        dest="baseline",
        action="store_const",
        const=False,
        default=None,
        help="run no baseline trial (by default the experiment's defaults with each searched dimension at its "
        "centre run first, and the best trial is judged against it)",
    )
    group0.add_argument(
        "--warm-start",
        action="append",
        metavar="SWEEP_OR_RUN_ID",
        help="give the completed trials of an earlier sweep (or one trial's run; URI#NAME for another store) to "
        "the searcher as evaluated points before it suggests anything (optuna); repeatable",
    )
    group3 = parser.add_argument_group("reproducibility")
    group3.add_argument("--seed", type=int, help="the sweep's root seed (default: the experiment's, else drawn)")
    group3.add_argument(
        "--deterministic",
        action="store_true",
        default=None,
        help="torch's deterministic algorithms on every worker (recorded; see docs/reproducibility.md)",
    )
    group4 = parser.add_argument_group("checks and output")
    group4.add_argument(
        "--dry-run",
        action="store_true",
        help="print the resolved plan (with a cost estimate after a --smoke run) and start nothing",
    )
    group4.add_argument(
        "--estimate", action="store_true", help="as --dry-run, and fail when no smoke run gives the timings"
    )
    group4.add_argument(
        "--smoke",
        action="store_true",
        help="run one tiny trial first and check metric, loss, checkpoint round trip, resources and timing",
    )
    group4.add_argument("--smoke-steps", type=int, default=5, help="iterations of the smoke trial (default 5)")
    group4.add_argument(
        "--no-report",
        action="store_true",
        help="no HTML sweep report (nor its MLflow artifacts) at the end",
    )
    group4.add_argument(
        "--no-register",
        action="store_true",
        help="do not register the best trial's model in MLflow's Model Registry at the end (see tunetrain register)",
    )
    group4.add_argument(
        "--alias",
        help="the registered model's alias that moves to this sweep's version when it beats the version holding "
        "it (models:/NAME@ALIAS; default champion; '' for none)",
    )
    parser.set_defaults(command=sweep_command, records=True)


def _workers(text: str) -> int | tuple[int, int]:
    """``--workers-per-trial``: ``2`` or an elastic range ``1-4``."""
    from tunetrain.resources import parse_workers

    try:
        return parse_workers(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected N or MIN-MAX (e.g. 2 or 1-4), but got {text!r}") from None


def sweep_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain import api
    from tunetrain.sweeps.request import ask_above_setting

    request = _request(args)
    if args.smoke:
        _refuse_with_smoke(args)
        smoked = api.smoke_request(request, steps=args.smoke_steps, stream=stream)
        return EXIT_OK if smoked.passed else EXIT_ALL_FAILED
    result = api.run_request(
        request,
        ask_flag=ask_above_setting(args.ask_above, args.confirm_above)[1],
        resume=args.resume,
        dry_run=args.dry_run,
        require_estimate=args.estimate,
        stream=stream,
    )
    return result.exit_status


def _request(args: argparse.Namespace) -> SweepRequest:
    """The sweep the flags ask for; its errors name what the user typed (the flag, --set's text)."""
    from tunetrain.overrides import parse_assignment
    from tunetrain.sweeps.request import SWEEP_FIELDS, SweepRequest, ask_above_setting
    from tunetrain.tracking.registry import CHAMPION_ALIAS

    # The Experiment fields that sweep flags set (flag dest == field == tunetrain.sweep keyword).
    return SweepRequest(
        experiment=args.file,
        fields={field: getattr(args, field) for field in SWEEP_FIELDS},
        overrides=dict(parse_assignment(text) for text in args.overrides),
        config_from=args.config_from,
        tracking_uri=args.tracking_uri,
        storage=args.storage,
        address=args.address,
        name=args.name,
        budget=args.budget,
        report=not args.no_report,
        register=not args.no_register,
        alias=CHAMPION_ALIAS if args.alias is None else (args.alias or None),
        ask_above=ask_above_setting(args.ask_above, args.confirm_above, said_as=("--ask-above", "--confirm-above"))[0],
        yes=args.yes,
        command=tuple(_command(args)),
        typed={parse_assignment(t)[0]: t.partition("=")[2].strip() for t in args.overrides},
        said_as={field: "--" + field.replace("_", "-") for field in SWEEP_FIELDS},
    )


# What --smoke (one short trial, to check the loop and time it) cannot honour: said, not dropped.
_NOT_WITH_SMOKE = {
    "dry_run": "--dry-run",
    "estimate": "--estimate",
    "budget": "--budget",
    "config_from": "--config-from",
    "resume": "--resume",
    "ask_above": "--ask-above",
    "confirm_above": "--confirm-above",
    "yes": "--yes",
    "no_register": "--no-register",
    "alias": "--alias",
}


def _refuse_with_smoke(args: argparse.Namespace) -> None:
    given = [flag for dest, flag in _NOT_WITH_SMOKE.items() if getattr(args, dest, None) not in (None, False)]
    if given:
        raise ExperimentError(
            f"--smoke runs one short trial to check the loop and time it (it registers nothing and asks for no "
            f"consent), so {', '.join(given)} cannot apply to it.",
            fix="Run the smoke check on its own (tunetrain sweep FILE --smoke), then the sweep with "
            f"{' '.join(given)} and without --smoke.",
        )


def replay_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="run one recorded trial again and compare",
        description="Run one recorded trial again from its MLflow record alone (config, seed, workers, "
        "experiment file), record it as a new run linked to the original, and compare the metric "
        "histories step by step. Exit 0 when they are identical, 1 when they differ.",
    )
    parser.add_argument("run_id", help="the trial's MLflow run id (`tunetrain show SWEEP --all-columns`)")
    parser.add_argument("--steps", type=int, help="steps to run (default: as many as the trial recorded)")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help="where the replay's checkpoints go")
    parser.add_argument("--address", help="Ray cluster to use (default: embedded)")
    parser.add_argument("--trust-changed-file", action="store_true", help=TRUST_CHANGED_HELP)
    parser.set_defaults(command=replay_command, records=True)


def replay_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain import api

    replayed = api.replay(
        args.run_id,
        steps=args.steps,
        tracking_uri=args.tracking_uri,
        storage=args.storage,
        address=args.address,
        stream=stream,
        command=_command(args),
        trust_changed_file=args.trust_changed_file,
    )
    if replayed.run_id is None:  # it did not run to the end
        return replayed.sweep.exit_status or EXIT_ALL_FAILED
    return EXIT_OK if replayed.identical else EXIT_ALL_FAILED


def resume_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "resume",
        help="continue a sweep that crashed or was interrupted, with the command it started with",
        description="Continue sweep SWEEP (a folder under --storage) with the command line it started with: "
        "ended trials stay ended, the others go on from their checkpoints, the searcher from its state, every "
        "trial in its own MLflow run. Exit 0 when the sweep already finished.",
    )
    parser.add_argument("sweep", help="the sweep's name (its folder under --storage)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help="where the sweep ran (its --storage)")
    parser.add_argument("--num-samples", type=int, help="run more trials than the sweep started with")
    parser.set_defaults(command=resume_command, records=True)


def resume_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    import os
    import shlex

    from tunetrain import api
    from tunetrain.sweeps import resumable

    header = resumable.header(args.storage, args.sweep)  # the rest is read once, by the resume
    argv = shlex.split(str(header.get("command", "")))[3:]  # after "python -m tunetrain"
    # The recorded command's own --name/--storage/--resume give way to these (said once each).
    replaced = {"--name": 1, "--storage": 1, "--resume": 0}
    if args.num_samples is not None:
        replaced["--num-samples"] = 1
    # The storage absolute: the recorded command works from any folder, as the printed one does.
    storage = Storage(args.storage).absolute()
    argv = [*_without_flags(argv, replaced), "--resume", "--name", args.sweep, "--storage", storage]
    if args.num_samples is not None:
        argv += ["--num-samples", str(args.num_samples)]
    if isinstance(header.get("request"), dict):
        # The sweep saved its plan: it is rebuilt from there. Its resume_command tag is the
        # sweep command that resumes it (paste it to do the same).
        command = ["python", "-m", "tunetrain", *argv] if argv[0] == "sweep" else _command(args)
        result = api.resume(
            args.sweep, storage=args.storage, num_samples=args.num_samples, stream=stream, command=command
        )
        return result.exit_status
    # A sweep of an older tunetrain saved only its command line: run it again, resuming.
    if not argv or argv[0] != "sweep":
        raise ExperimentError(
            f"Sweep {args.sweep!r} did not record the command it started with (its journal's header: {header}).",
            fix="Resume it with the same command line plus --resume --name " + args.sweep,
        )
    # The sweep command's own parser (not the CLI's whole one, which imports this module).
    parser = argparse.ArgumentParser(prog="tunetrain")
    sweep_parser(parser.add_subparsers(required=True))
    resumed = parser.parse_args(argv)
    resumed.argv = argv
    cwd = str(header.get("cwd") or "")
    if cwd and not Path(resumed.file).is_absolute() and not Path(resumed.file).exists():
        resumed.file = os.path.join(cwd, resumed.file)  # started from another folder
    if header.get("tracking_uri") and resumed.tracking_uri is None:
        resumed.tracking_uri = header["tracking_uri"]
    status: int = sweep_command(resumed, stream=stream)
    return status


def _without_flags(argv: list[str], flags: dict[str, int]) -> list[str]:
    """``argv`` without each of ``flags`` (flag -> how many values follow it), in either the
    ``--flag value`` or the ``--flag=value`` form."""
    out: list[str] = []
    skip = 0
    for word in argv:
        if skip:
            skip -= 1
        elif word in flags:
            skip = flags[word]
        elif not any(word.startswith(flag + "=") for flag in flags):
            out.append(word)
    return out


def sync_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "sync",
        help="write a sweep's records that its tracking store did not take (it was away) to the store",
        description="Send what sweep SWEEP's journal holds and its MLflow store does not (after an outage that "
        "outlasted the sweep), without doubling what is there. Exit 0 when everything is in the store.",
    )
    parser.add_argument("sweep", help="the sweep's name (its folder under --storage)")
    parser.add_argument("--storage", default=DEFAULT_STORAGE, help="where the sweep ran (its --storage)")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for the store (default 120)")
    parser.set_defaults(command=sync_command, records=True)


def sync_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain import api

    synced = api.sync(args.sweep, storage=args.storage, timeout_s=args.timeout, stream=stream)
    return EXIT_OK if synced.complete else EXIT_ALL_FAILED


def doctor_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "doctor",
        help="check a Ray cluster, tracking store and storage before a sweep",
        description="Check what a sweep needs: the cluster's nodes and resources, the same package versions on "
        "every node, the State API, GPUs and CUDA, the tracking store (reachable, takes runs) and the storage "
        "(writable from every node, seen by the driver). Exit 0 when there is no problem, 1 otherwise.",
    )
    parser.add_argument("--address", help="Ray cluster (auto, HOST:PORT, ray://HOST:10001); default: embedded")
    parser.add_argument("--tracking-uri", help="MLflow tracking URI (default: sqlite:///./mlflow.db)")
    parser.add_argument("--storage", help="the --storage sweeps will use")
    parser.set_defaults(command=doctor_command)


def doctor_command(args: argparse.Namespace, *, stream: TextIO = sys.stdout) -> int:
    from tunetrain import doctor, tracking
    from tunetrain.cluster import resolve_address

    return doctor.run(
        address=resolve_address(args.address)[0],
        tracking_uri=tracking.resolve_tracking_uri(args.tracking_uri).uri,
        storage=args.storage,
        storage_given=args.storage is not None,
        stream=stream,
    )
