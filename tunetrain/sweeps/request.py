"""What was asked of a sweep: the experiment (an object or a file) with the fields a call
or a flag changed and the overrides applied, checked again (:func:`resolve_experiment`), and
the experiment a recorded sweep names, imported only as the sweep recorded it
(:func:`recorded_experiment`)."""

from __future__ import annotations

import ast
import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tunetrain import space as spaces
from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment, file_sha256, load_experiment
from tunetrain.overrides import apply_overrides
from tunetrain.redaction import strip_credentials
from tunetrain.tracking.registry import CHAMPION_ALIAS

if TYPE_CHECKING:
    from tunetrain.tracking import TrackingURI

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


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepRequest:
    """What was asked of one sweep, built once (by the CLI from its flags, by
    :func:`tunetrain.sweep` from its keywords, by a resume from the journal) and handed
    down whole: what to run (the experiment, the fields changed, the overrides) and where
    (the tracking store, the storage, the Ray address, the sweep's name). Its
    :meth:`saved` form is what the journal keeps for a resume."""

    experiment: Experiment | str  # an Experiment, or an experiment file's path
    fields: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # SWEEP_FIELDS given (no None)
    overrides: Mapping[str, Any] = dataclasses.field(default_factory=dict)  # dotted key -> value (--set)
    config_from: str | None = None  # a sweep or a trial whose config is pinned, overrides winning
    tracking_uri: str | TrackingURI | None = None  # None: MLFLOW_TRACKING_URI, else ./mlflow.db
    storage: str | None = None  # None: ./tunetrain_results
    address: str | None = None  # a Ray cluster; None: RAY_ADDRESS, else an embedded Ray
    name: str | None = None  # the sweep's name; None: one made from the experiment's
    budget: str | None = None  # "30m", "5cpu-h": stop launching trials that would overrun it
    report: bool = True  # the HTML report at the end
    register: bool = True  # the best trial to MLflow's Model Registry at the end
    alias: str | None = CHAMPION_ALIAS  # the registered model's alias moved to a better version
    ask_above: str | None = None  # ask before a sweep whose estimate exceeds it (--ask-above)
    yes: bool = False  # the answer given in advance (--yes)
    command: tuple[str, ...] | None = None  # the command line (or the Python call) recorded
    # For messages, what the user typed: --set values as text, each field's flag or keyword.
    typed: Mapping[str, str] = dataclasses.field(default_factory=dict)
    said_as: Mapping[str, str] = dataclasses.field(default_factory=dict)

    def __post_init__(self) -> None:
        unknown = sorted(set(self.fields) - set(SWEEP_FIELDS))
        if unknown:
            raise TypeError(f"unexpected keyword argument(s) {unknown}; the fields a sweep may change: {SWEEP_FIELDS}")
        object.__setattr__(self, "fields", {k: v for k, v in self.fields.items() if v is not None})

    @property
    def tracking_text(self) -> str | None:
        """The tracking URI as text (a :class:`TrackingURI` also says where it came from)."""
        return str(self.tracking_uri) if self.tracking_uri is not None else None

    def resolve(self, overrides: Mapping[str, Any] | None = None) -> Experiment:
        """The experiment with the fields changed and ``overrides`` (default: the request's)
        applied, validated again; refusals name the flag or keyword the user typed."""
        return resolve_experiment(
            self.experiment,
            overrides=self.overrides if overrides is None else overrides,
            texts=self.typed,
            names_used=self.said_as,
            **self.fields,
        )

    def saved(self, resolved: Experiment) -> dict[str, Any] | None:
        """The request as the journal keeps it, for a resume: values as Python literals (so
        that tuples and floats come back as they were), the overrides as ``resolved`` checked
        them (``--set precision=16`` is the string '16'), the tracking URI without
        credentials; None for an Experiment object that no file defines (it cannot be
        rebuilt from the journal)."""
        path = self.experiment if not isinstance(self.experiment, Experiment) else self.experiment.source_path
        if not path:
            return None
        flat = {**spaces.flatten(resolved.space), **spaces.flatten(resolved.defaults)}
        uri = self.tracking_text
        return {
            "experiment": str(Path(path).resolve()),
            "fields": {key: repr(value) for key, value in self.fields.items()},
            "overrides": {key: repr(flat[key]) for key in self.overrides},
            "tracking_uri": strip_credentials(uri) if uri else uri,
            "address": self.address,
            "budget": self.budget,
            "report": self.report,
            "register": self.register,
            "alias": self.alias,
            "ask_above": self.ask_above,
            "yes": self.yes,
        }

    @classmethod
    def from_saved(
        cls,
        saved: Mapping[str, Any],
        *,
        cwd: str,
        storage: str,
        name: str,
        tracking_uri: TrackingURI | None,
        num_samples: int | None = None,
        command: list[str] | None = None,
    ) -> SweepRequest:
        """The request a journal saved (:meth:`saved`), for resuming sweep ``name``;
        ``num_samples`` may grow it."""
        fields = {key: ast.literal_eval(text) for key, text in saved.get("fields", {}).items()}
        if num_samples is not None:
            fields["num_samples"] = num_samples
        path = str(saved["experiment"])
        if cwd and not Path(path).is_absolute() and not Path(path).exists():  # relative to where it started
            path = os.path.join(cwd, path)
        return cls(
            experiment=path,
            fields=fields,
            overrides={key: ast.literal_eval(text) for key, text in saved.get("overrides", {}).items()},
            tracking_uri=tracking_uri,
            storage=storage,
            address=saved.get("address"),
            name=name,
            budget=saved.get("budget"),
            report=bool(saved.get("report", True)),
            # A journal of an older tunetrain did not save these: what it did then (the defaults).
            register=bool(saved.get("register", True)),
            alias=saved.get("alias", CHAMPION_ALIAS),
            ask_above=saved.get("ask_above"),
            yes=bool(saved.get("yes", False)),
            command=tuple(command) if command is not None else None,
        )


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


def ask_above_setting(
    ask_above: str | None, confirm_above: str | None, *, said_as: tuple[str, str] = ("ask_above", "confirm_above")
) -> tuple[str | None, str]:
    """The one setting that ``ask_above`` and its old name ``confirm_above`` give, and the flag
    the consent question names (the one used). Both may be given only with the same value;
    ``said_as`` names them as the user typed them (keywords, or the CLI's flags)."""
    if ask_above is not None and confirm_above is not None and ask_above != confirm_above:
        new, old = said_as
        raise ExperimentError(
            f"{new} and {old} are one setting ({old} is its old name), but got {new}={ask_above!r} and "
            f"{old}={confirm_above!r}.",
            fix=f"Pass {new} only.",
        )
    return (ask_above if ask_above is not None else confirm_above), (
        "--confirm-above" if confirm_above is not None else "--ask-above"
    )
