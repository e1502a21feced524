"""A trial's checkpoint in MLflow's Model Registry: as an ``mlflow.pytorch`` model (when the
experiment says how a checkpoint becomes a ``torch.nn.Module``) or as the checkpoint folder
itself, registered as a new version of a registered model.

The model is an MLflow 3 LoggedModel whose source run is the trial's run (the run stays as it
ended: nothing is reopened), so the UI links the version, the model and the trial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import tempfile
from collections.abc import Mapping
from typing import Any

from tunetrain.tracking import schema
from tunetrain.tracking.schema import CHAMPION_ALIAS

__all__ = [
    "CHAMPION_ALIAS",
    "RegisteredVersion",
    "move_to_confirmed",
    "promote_if_better",
    "register_version",
    "registered_tags",
    "set_alias",
    "version_of_run",
    "version_tags",
]


@dataclasses.dataclass(frozen=True)
class RegisteredVersion:
    name: str
    version: str
    model_uri: str  # what mlflow.pyfunc.load_model / `mlflow models serve -m` take: models:/NAME/VERSION
    kind: str  # "pytorch" (a loadable model) or "checkpoint" (the folder, as artifacts)


def register_version(
    *,
    tracking_uri: str,
    run_id: str,
    name: str,
    checkpoint_dir: str,
    model: Any = None,
    input_example: Any = None,
    tags: Mapping[str, Any],
    description: str = "",
) -> RegisteredVersion:
    """Register the trial run ``run_id``'s checkpoint as a new version of ``name``: ``model``
    (a ``torch.nn.Module``) logged with ``mlflow.pytorch``, else ``checkpoint_dir`` logged as
    the run's ``best_checkpoint/`` artifacts. ``tags`` go on the version."""
    import mlflow
    from mlflow.tracking import MlflowClient

    # MlflowClient throughout, not the fluent API (mlflow.log_model, register_model): that
    # keeps the tracking URI in a global and in MLFLOW_TRACKING_URI, which would then point
    # every later store lookup of this process at this store.
    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)
    with contextlib.suppress(mlflow.exceptions.MlflowException):  # it exists already
        client.create_registered_model(name)
    if model is not None:
        import mlflow.pytorch
        import torch

        # What mlflow.pytorch.log_model does, through the client: a LoggedModel whose source
        # run is the trial's (the run stays as it ended), its files, then READY.
        logged = client.create_logged_model(run.info.experiment_id, name="model", source_run_id=run_id)
        with tempfile.TemporaryDirectory() as folder:
            path = os.path.join(folder, "model")
            mlflow.pytorch.save_model(
                model,
                path,
                input_example=input_example,
                # Given, not inferred: inferring loads the model in a subprocess (slow, and it
                # guesses); `mlflow models serve --env-manager local` uses this environment.
                pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", f"mlflow=={mlflow.__version__}"],
            )
            client.log_model_artifacts(logged.model_id, path)
        client.finalize_logged_model(logged.model_id, "READY")
        version = client.create_model_version(
            name,
            # The model's artifact location, not "models:/<model_id>": MLflow's sqlite registry
            # (3.17.2) resolves such a source through the process's global tracking URI, not
            # this client's (a TODO in its create_model_version), and fails on any other store.
            source=logged.artifact_location,
            run_id=run_id,
            tags={k: str(v) for k, v in tags.items()},
            model_id=logged.model_id,
        )
        kind = "pytorch"
    else:
        client.log_artifacts(run_id, checkpoint_dir, artifact_path=schema.REGISTERED_CHECKPOINT_ARTIFACT)
        version = client.create_model_version(
            name,
            source=f"{run.info.artifact_uri}/{schema.REGISTERED_CHECKPOINT_ARTIFACT}",
            run_id=run_id,
            tags={k: str(v) for k, v in tags.items()},
        )
        kind = "checkpoint"
    if description:
        client.update_model_version(name, version.version, description=description)
    return RegisteredVersion(name, str(version.version), f"models:/{name}/{version.version}", kind)


def version_tags(
    *,
    sweep: str,
    sweep_run_id: str,
    trial: str,
    trial_run_id: str,
    config: Mapping[str, Any],
    seed: Any,
    checkpoint: str,
    metric: str,
    value: float,
) -> dict[str, str]:
    """The tags a registered version carries: the sweep and trial it came from (names and
    run ids), the trial's config and seed, the checkpoint, and its best value of ``metric``."""
    return {
        schema.VERSION_SWEEP_TAG: sweep,
        schema.VERSION_SWEEP_RUN_TAG: sweep_run_id,
        schema.VERSION_TRIAL_TAG: trial,
        schema.VERSION_TRIAL_RUN_TAG: trial_run_id,
        schema.VERSION_CONFIG_TAG: json.dumps(dict(config), sort_keys=True, default=str),
        schema.SEED_TAG: str(seed),
        schema.VERSION_CHECKPOINT_TAG: checkpoint,
        f"tunetrain.best_{metric}": f"{value:.6g}",
    }


def registered_tags(version: RegisteredVersion, parent_tags: Mapping[str, Any]) -> dict[str, str]:
    """The tags that link a sweep's parent run to the version registered from it: the
    ``NAME/VERSION`` tag, and a line with the version's link under the run's description."""
    note = str(parent_tags.get(schema.RUN_NOTE_TAG, "")).split("\n\n**Registered:**")[0]
    link = f"[{version.name} version {version.version}](#/models/{version.name}/versions/{version.version})"
    return {
        schema.REGISTERED_MODEL_TAG: f"{version.name}/{version.version}",
        schema.RUN_NOTE_TAG: (note + "\n\n" if note else "") + f"**Registered:** {link}",
    }


def set_alias(tracking_uri: str, version: RegisteredVersion, alias: str) -> str:
    """``alias`` moved to ``version`` (``models:/NAME@ALIAS`` loads it); the line that says so."""
    from mlflow.tracking import MlflowClient

    MlflowClient(tracking_uri).set_registered_model_alias(version.name, alias, version.version)
    return f"models:/{version.name}@{alias} -> version {version.version}"


def promote_if_better(
    tracking_uri: str, version: RegisteredVersion, alias: str, *, metric: str, mode: str, value: float
) -> str:
    """At a sweep's end: ``alias`` (``champion``) moves to ``version`` only when no version
    holds it yet, the holder has no value of ``metric`` to compare (its
    ``tunetrain.best_<metric>`` tag), or ``value`` beats the holder's; a tie keeps the
    holder, so that ``@champion`` stays the best version registered, not the newest. The
    line that says what happened."""
    import mlflow
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    try:
        holder = client.get_model_version_by_alias(version.name, alias)
    except mlflow.exceptions.MlflowException:  # no version holds it
        holder = None
    held = holder.tags.get(f"tunetrain.best_{metric}") if holder is not None else None
    if holder is not None and held is not None:
        better = value > float(held) if mode == "max" else value < float(held)
        if not better:
            return (
                f"models:/{version.name}@{alias} stays on version {holder.version}: its {metric} {held} is at least "
                f"as good as version {version.version}'s {value:.6g}"
            )
        why = f" ({metric} {value:.6g} beats version {holder.version}'s {held})"
    elif holder is not None:
        why = f" (version {holder.version} has no {metric} to compare)"
    else:
        why = ""
    return set_alias(tracking_uri, version, alias) + why


def version_of_run(tracking_uri: str, run_id: str) -> RegisteredVersion | None:
    """The newest registered version whose source is the trial run ``run_id`` (any model
    name), or None."""
    from mlflow.tracking import MlflowClient

    versions = MlflowClient(tracking_uri).search_model_versions(f"run_id = '{run_id}'")
    if not versions:
        return None
    newest = max(versions, key=lambda v: int(v.version))
    folder = (newest.source or "").endswith(f"/{schema.REGISTERED_CHECKPOINT_ARTIFACT}")
    kind = "checkpoint" if folder else "pytorch"
    return RegisteredVersion(newest.name, str(newest.version), f"models:/{newest.name}/{newest.version}", kind)


def move_to_confirmed(tracking_uri: str, version: RegisteredVersion, alias: str, *, confirmed_by: str) -> str:
    """After ``tunetrain confirm``: ``alias`` moved to the confirmed winner's ``version``
    (whatever the holder's single-seed value: the confirming sweep's mean over new seeds is
    the stronger evidence), the version tagged with the confirming sweep; the line that says
    what happened."""
    import mlflow
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    client.set_model_version_tag(version.name, version.version, schema.CONFIRMED_BY_TAG, confirmed_by)
    try:
        holder = client.get_model_version_by_alias(version.name, alias).version
    except mlflow.exceptions.MlflowException:  # no version holds it
        holder = None
    if holder is not None and str(holder) == str(version.version):  # MLflow's versions are strings here
        return f"models:/{version.name}@{alias} stays on version {version.version}, the confirmed winner's"
    was = f"; it was on version {holder}" if holder is not None else ""
    return set_alias(tracking_uri, version, alias) + f" (the confirmed winner{was})"
