"""``tunetrain.sweep`` and ``tunetrain.resume``: the experiment resolved from the call, the
request saved for a resume, and the run handed to :mod:`tunetrain.sweeps.session`."""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, Literal, TextIO

from tunetrain import records
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.storage import DEFAULT_STORAGE
from tunetrain.sweeps.request import SweepRequest, ask_above_setting
from tunetrain.sweeps.result import SweepResult
from tunetrain.sweeps.session import run_request
from tunetrain.tracking.registry import CHAMPION_ALIAS

if TYPE_CHECKING:
    from tunetrain.tracking import TrackingURI


def sweep(
    experiment: Experiment | str | os.PathLike[str],
    *,
    num_samples: int | None = None,
    scheduler: str | None = None,
    searcher: str | None = None,
    workers_per_trial: int | tuple[int, int] | None = None,
    use_gpu: bool | None = None,
    trial_runner: Literal["auto", "in_process", "worker_group", "torch_trainer"] | None = None,
    max_concurrent: int | None = None,
    max_failures: int | None = None,
    placement_strategy: Literal["PACK", "SPREAD", "STRICT_PACK", "STRICT_SPREAD"] | None = None,
    seed: int | None = None,
    deterministic: bool | None = None,
    baseline: bool | None = None,
    warm_start: list[str] | None = None,
    overrides: Mapping[str, Any] | None = None,
    config_from: str | None = None,
    tracking_uri: str | TrackingURI | None = None,
    storage: str | None = None,
    address: str | None = None,
    name: str | None = None,
    budget: str | None = None,
    ask_above: str | None = None,
    confirm_above: str | None = None,
    yes: bool = False,
    register: bool = True,
    alias: str | None = CHAMPION_ALIAS,
    report: bool = True,
    resume: bool = False,
    dry_run: bool = False,
    require_estimate: bool = False,
    recorder: Callable[..., Any] | None = None,
    stream: TextIO | None = None,
    command: list[str] | None = None,
) -> SweepResult:
    """Run the experiment's sweep through Ray Tune, every trial recorded in MLflow.

    ``experiment`` is an :class:`~tunetrain.Experiment` or an experiment file's path; the
    keywords change its fields for this sweep (``None``: the experiment's own), and
    ``overrides`` sets fixed values or pins dimensions (``{"optimizer.lr": 0.1}``);
    ``config_from`` (a sweep's name or parent run id: its best trial; or a trial's run id)
    pins every value of that config, ``overrides`` winning. ``register`` logs the best
    trial's best checkpoint to MLflow's Model Registry at the end (:func:`tunetrain.register`)
    and moves ``alias`` (None: none) to it when it beats the version holding it.
    ``baseline=False`` runs no baseline trial; ``warm_start`` (sweeps or trial run ids,
    ``URI#NAME`` in another store) gives their completed trials to the searcher.
    ``tracking_uri`` (default ``sqlite:///./mlflow.db``), ``storage`` (default
    ``./tunetrain_results``) and ``address`` (default an embedded Ray) say where it runs;
    ``budget`` (``"30m"``, ``"5cpu-h"``) stops launching trials that would overrun it;
    ``ask_above`` (old name ``confirm_above``; ``"10gpu-h"``, ``"1h"``; default
    ``TUNETRAIN_CONFIRM_ABOVE``, else 10gpu-h for GPU sweeps) asks before a sweep whose
    estimate or budget exceeds it, and refuses without a terminal unless ``yes``.
    ``resume=True`` continues sweep ``name`` (default: the experiment's newest under
    ``storage``). ``dry_run`` prints the plan (and a cost estimate after a smoke run).
    ``recorder`` makes the recorder (:class:`tunetrain.tracking.NullRecorder`: recording
    off). Progress goes to ``stream`` (default stdout). docs/python_api.md has each keyword.
    """
    asked_above, ask_flag = ask_above_setting(ask_above, confirm_above)
    request = SweepRequest(
        experiment=experiment if isinstance(experiment, Experiment) else os.fspath(experiment),
        fields={
            "num_samples": num_samples,
            "scheduler": scheduler,
            "searcher": searcher,
            "workers_per_trial": workers_per_trial,
            "use_gpu": use_gpu,
            "trial_runner": trial_runner,
            "max_concurrent": max_concurrent,
            "max_failures": max_failures,
            "placement_strategy": placement_strategy,
            "seed": seed,
            "deterministic": deterministic,
            "baseline": baseline,
            "warm_start": warm_start,
        },
        overrides=dict(overrides or {}),
        config_from=config_from,
        tracking_uri=tracking_uri,
        storage=storage,
        address=address,
        name=name,
        budget=budget,
        report=report,
        register=register,
        alias=alias,
        ask_above=asked_above,
        yes=yes,
        command=tuple(command) if command is not None else None,
    )
    return run_request(
        request,
        ask_flag=ask_flag,
        resume=resume,
        dry_run=dry_run,
        require_estimate=require_estimate,
        recorder=recorder,
        stream=stream,
    )


def resume(
    sweep_name: str,
    *,
    storage: str = DEFAULT_STORAGE,
    num_samples: int | None = None,
    stream: TextIO | None = None,
    command: list[str] | None = None,
) -> SweepResult:
    """Continue sweep ``sweep_name`` (its folder under ``storage``) after a crash or Ctrl+C,
    from the plan it saved when it started: ended trials stay ended, the others go on from
    their checkpoints, every trial in its own MLflow run. ``num_samples`` may grow it."""
    from tunetrain.sweeps import resumable as resuming

    header = resuming.header(storage, sweep_name)  # the rest is read once, by the resume
    saved = header.get("request")
    if not isinstance(saved, dict):
        raise ExperimentError(
            f"Sweep {sweep_name!r} was started by an older tunetrain and saved only its command line "
            f"({header.get('command', 'none')!r}), not its plan.",
            fix=f"Resume it from the command line: {records.sweep_command('resume', sweep_name, storage)}",
        )
    request = SweepRequest.from_saved(
        saved,
        cwd=str(header.get("cwd") or ""),
        storage=storage,
        name=sweep_name,
        tracking_uri=_recorded_uri(saved.get("tracking_uri") or header.get("tracking_uri")),
        num_samples=num_samples,
        command=command,
    )
    return run_request(request, resume=True, stream=stream)


def _recorded_uri(uri: str | None) -> TrackingURI | None:
    """The tracking URI a sweep's journal recorded, labelled so (not "from --tracking-uri")."""
    from tunetrain.tracking import TrackingURI

    return TrackingURI(uri, "the sweep's journal") if uri else None
