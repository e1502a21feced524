"""What was asked of a sweep: the experiment (an object or a file) with the fields a call
or a flag changed and the overrides applied, checked again (:func:`resolve_experiment`), and
the experiment a recorded sweep names, imported only as the sweep recorded it
(:func:`recorded_experiment`)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment, file_sha256, load_experiment
from tunetrain.overrides import apply_overrides

# Experiment fields a call (or a flag of `tunetrain sweep`, by the same name) may change,
# as sweep() names them.
SWEEP_FIELDS = (
    "num_samples",
    "scheduler",
    "searcher",
    "workers_per_trial",
    "use_gpu",
    "trial_runner",
    "max_concurrent",
    "max_failures",
    "placement_strategy",
    "seed",
    "deterministic",
    "baseline",
    "warm_start",
)


def resolve_experiment(
    experiment: Experiment | str | os.PathLike[str],
    *,
    overrides: Mapping[str, Any] | None = None,
    texts: Mapping[str, str] | None = None,
    names_used: Mapping[str, str] | None = None,
    **fields: Any,
) -> Experiment:
    """The experiment (or the file's) with ``fields`` changed and ``overrides`` applied
    (``{"optimizer.lr": 0.1}``: a fixed value, or a dimension pinned), validated again.
    ``texts`` are the overrides as typed (``--set``), ``names_used`` the names the caller
    gave the fields (``--num-samples``), for the messages of what is refused."""
    exp = experiment if isinstance(experiment, Experiment) else load_experiment(os.fspath(experiment))
    unknown = sorted(set(fields) - set(SWEEP_FIELDS))
    if unknown:
        raise TypeError(f"unexpected keyword argument(s) {unknown}; the fields a sweep may change: {SWEEP_FIELDS}")
    changes = {key: value for key, value in fields.items() if value is not None}
    if changes.get("scheduler", exp.scheduler) != exp.scheduler:
        changes["scheduler_options"] = {}  # the file's options belong to its own scheduler
    if changes.get("searcher", exp.searcher) != exp.searcher:
        changes["searcher_options"] = {}
    if overrides:
        changes["space"], changes["defaults"] = apply_overrides(exp.space, exp.defaults, dict(overrides), texts=texts)
    try:
        return exp.replace(**changes) if changes else exp
    except ExperimentError as exc:
        # Said with the name the caller used for the field (a flag, a keyword), not the
        # Experiment's: `--num-samples must be ...`, not `Experiment.num_samples must be ...`.
        names = {field: (names_used or {}).get(field, field) for field in fields if fields[field] is not None}
        message, fix = exc.message, exc.fix
        for field, name in names.items():
            message = message.replace(f"Experiment.{field} ", f"{name} ")
            fix = fix.replace(f"Set {field} ", f"Set {name} ") if fix else fix
        raise ExperimentError(message, fix=fix) from None


def recorded_experiment(
    given: Experiment | str | os.PathLike[str] | None,
    recorded: str,
    *,
    sha256: str | None,
    trust_changed_file: bool = False,
) -> Experiment | None:
    """The experiment a command about a recorded sweep uses: ``given`` (an Experiment or a
    file the user named), else the file the sweep recorded, imported only when its content
    is the one the sweep recorded (``sha256``: see :func:`check_recorded_file`); None when
    no file is given and the recorded one is not here."""
    if isinstance(given, Experiment):
        return given
    path = os.fspath(given) if given is not None else recorded
    if not path or (given is None and not os.path.isfile(path)):
        return None
    if given is None:
        check_recorded_file(path, sha256, trust_changed_file=trust_changed_file)
    return load_experiment(path)


def check_recorded_file(path: str | os.PathLike[str], sha256: str | None, *, trust_changed_file: bool) -> None:
    """Before a file a tracking record names (or holds) is imported, which runs its code:
    its sha256 must be the one the sweep recorded (``tunetrain.experiment_sha256``). Anyone
    who can write to a shared tracking server can change a tag or an artifact; a changed
    file is refused unless ``trust_changed_file`` (``--trust-changed-file``)."""
    if trust_changed_file:
        return
    actual = file_sha256(os.fspath(path))
    if sha256 != actual:
        recorded = f"sha256 {sha256[:12]}..." if sha256 else "no sha256"
        raise ExperimentError(
            f"The experiment file {os.fspath(path)!r} is not the one the sweep ran: its sha256 is {actual[:12]}..., "
            f"the sweep recorded {recorded}. Importing it would run code nobody checked.",
            fix="Check the file (or pass the one you mean with --experiment-file), or pass --trust-changed-file "
            "(trust_changed_file=True) to import it anyway.",
        )
