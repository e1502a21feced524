"""The hand-off, ``tunetrain.register``: a sweep's best trial (or a named one) in MLflow's Model Registry,
from its best kept checkpoint; also what a sweep does at its end unless ``--no-register``."""

from __future__ import annotations

import dataclasses
import os
from typing import Any, TextIO

from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.records import SweepOutcome
from tunetrain.sweeps.request import recorded_experiment
from tunetrain.tracking.registry import CHAMPION_ALIAS, RegisteredVersion, promote_if_better


@dataclasses.dataclass(frozen=True)
class Registered:
    """A registered model version and where it came from."""

    name: str
    version: str
    model_uri: str  # models:/NAME/VERSION: mlflow.pyfunc.load_model, `mlflow models serve -m`
    kind: str  # "pytorch": a loadable model (export_model); "checkpoint": the folder as artifacts
    trial: str
    run_id: str
    checkpoint: str
    metric: str = ""  # the sweep's metric, and the trial's best value of it
    mode: str = "min"
    value: float | None = None
    alias: str = ""  # what happened to the alias, when one was asked: "models:/NAME@ALIAS -> version N"

    @property
    def registered_version(self) -> RegisteredVersion:
        """The version as the registry's functions take it (set_alias, promote_if_better, ...)."""
        return RegisteredVersion(self.name, self.version, self.model_uri, self.kind)

    def line(self) -> str:
        what = "as an mlflow.pytorch model" if self.kind == "pytorch" else "as its checkpoint folder (no export_model)"
        return f"Registered {self.model_uri} from {self.trial}'s checkpoint {os.path.basename(self.checkpoint)} {what}"


def register(
    sweep: str | None = None,
    *,
    trial: str | None = None,
    name: str | None = None,
    tracking_uri: str | None = None,
    experiment: Experiment | str | os.PathLike[str] | None = None,
    trust_changed_file: bool = False,
    alias: str | None = None,
) -> Registered:
    """Register the best kept checkpoint of sweep ``sweep``'s best trial (or of ``trial``, a
    trial name or run id) as a new version of registered model ``name`` (default: the
    experiment's name). ``experiment`` (default: the file the sweep recorded) gives
    ``export_model``: with it the version is an ``mlflow.pytorch`` model that
    ``mlflow.pyfunc.load_model("models:/NAME/VERSION")`` loads and runs; without it the
    checkpoint folder is logged on the trial's run and registered as it is, with a note.
    The recorded file is imported only with the content the sweep recorded, unless
    ``trust_changed_file``. ``alias`` (``"champion"``) is moved to the new version
    (``models:/NAME@ALIAS``)."""
    from tunetrain.results.analysis import load_sweep, nested_config
    from tunetrain.tracking import register_version
    from tunetrain.tracking.registry import registered_tags, set_alias, version_tags

    found = load_sweep(sweep, tracking_uri=tracking_uri)
    row = _chosen_trial(found, trial)
    checkpoint = row["checkpoint"]
    if not isinstance(checkpoint, str) or not checkpoint:
        raise ExperimentError(
            f"Trial {row['trial']} of sweep {found.name!r} kept no checkpoint, so there is no model to register.",
            fix="Report checkpoints with ray.train.report(metrics, checkpoint=...) in the train loop.",
        )
    run = next(r for r in found.runs if r.run_id == row["run_id"])
    config = nested_config(run.params)
    exp = recorded_experiment(  # None: no export
        experiment,
        found.experiment_file,
        sha256=found.experiment_sha256,
        trust_changed_file=trust_changed_file,
    )
    metric = found.metric
    tags = version_tags(
        sweep=found.name,
        sweep_run_id=found.run_id,
        trial=str(row["trial"]),
        trial_run_id=str(row["run_id"]),
        config=config,
        seed=row["seed"],
        checkpoint=checkpoint,
        metric=metric,
        value=row[f"best_{metric}"],
    )
    model, example, note = None, None, ""
    from ray.train import Checkpoint  # local paths and cloud URIs alike

    with Checkpoint(checkpoint).as_directory() as folder:
        if exp is not None and exp.export_model is not None:
            model = exp.export_model(folder, config)
            example = exp.export_example(config) if exp.export_example is not None else None
        else:
            note = (
                "The trial's checkpoint folder as the trial saved it, not an MLflow model: the experiment sets no "
                "export_model (docs/carry_forward.md)."
            )
        version = register_version(
            tracking_uri=found.store.tracking_uri,
            run_id=str(row["run_id"]),
            name=name or found.experiment,
            checkpoint_dir=folder,
            model=model,
            input_example=example,
            tags=tags,
            description=note,
        )
    found.store.set_tags(found.run_id, registered_tags(version, found.tags))
    said = set_alias(found.store.tracking_uri, version, alias) if alias else ""
    return Registered(
        name=version.name,
        version=version.version,
        model_uri=version.model_uri,
        kind=version.kind,
        trial=str(row["trial"]),
        run_id=str(row["run_id"]),
        checkpoint=checkpoint,
        metric=metric,
        mode=found.mode,
        value=float(row[f"best_{metric}"]),
        alias=said,
    )


def _chosen_trial(found: Any, trial: str | None) -> Any:
    """The row (``Sweep.trials()``) of the sweep's best trial, or of ``trial`` (name or run id)."""
    trials = found.trials()
    if trial is None:
        best = found.best(1) if found.metric in found.metrics else trials.iloc[0:0]
        if best.empty:
            raise ExperimentError(
                f"Sweep {found.name!r} has no trial with a finite {found.metric!r} to register.",
                fix="Look at the trials with `tunetrain show`; pass --trial to register one anyway.",
            )
        return best.iloc[0]
    rows = trials[(trials["trial"] == trial) | (trials["run_id"] == trial)]
    if rows.empty:
        raise ExperimentError(
            f"--trial {trial!r} is not a trial of sweep {found.name!r}; its trials are {', '.join(trials['trial'])}.",
            fix="Pass a trial name (trial_0003) or run id from `tunetrain show SWEEP --all-columns`.",
        )
    return rows.iloc[0]


def register_at_end(
    outcome: SweepOutcome,
    experiment: Experiment,
    *,
    tracking_uri: str,
    stream: TextIO,
    alias: str | None = CHAMPION_ALIAS,
) -> Registered | None:
    """A sweep's end: its best trial registered (the line printed), or why not, in one line;
    ``alias`` moved to it when it beats the version holding it (see
    :func:`tunetrain.tracking.registry.promote_if_better`). A failure here never changes the
    sweep's result (everything is recorded already)."""
    try:
        registered = register(outcome.parent_run_id, tracking_uri=tracking_uri, experiment=experiment)
        if alias and registered.value is not None:
            said = promote_if_better(
                tracking_uri,
                registered.registered_version,
                alias,
                metric=registered.metric,
                mode=registered.mode,
                value=registered.value,
            )
            registered = dataclasses.replace(registered, alias=said)
    except ExperimentError as exc:
        print(f"Model not registered: {exc.message}", file=stream, flush=True)
        return None
    except Exception as exc:  # the registry is a convenience: say why and go on
        print(
            f"Model not registered ({type(exc).__name__}: {exc}); retry: tunetrain register {outcome.name}",
            file=stream,
            flush=True,
        )
        return None
    print(registered.line(), file=stream, flush=True)
    if registered.alias:
        print(registered.alias, file=stream, flush=True)
    return registered
