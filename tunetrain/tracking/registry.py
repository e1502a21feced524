"""A trial's checkpoint in MLflow's Model Registry: as an ``mlflow.pytorch`` model (when the
experiment says how a checkpoint becomes a ``torch.nn.Module``) or as the checkpoint folder
itself, registered as a new version of a registered model.

The model is an MLflow 3 LoggedModel whose source run is the trial's run (the run stays as it
ended: nothing is reopened), so the UI links the version, the model and the trial.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
from collections.abc import Iterator, Mapping
from typing import Any

from tunetrain.tracking import schema


@dataclasses.dataclass(frozen=True)
class RegisteredVersion:
    name: str
    version: str
    model_uri: str  # what mlflow.pyfunc.load_model / `mlflow models serve -m` take: models:/NAME/VERSION
    kind: str  # "pytorch" (a loadable model) or "checkpoint" (the folder, as artifacts)


@contextlib.contextmanager
def _fluent(tracking_uri: str) -> Iterator[None]:
    """MLflow's fluent API (log_model, register_model) on ``tracking_uri``, quietly: it keeps
    the tracking URI in a global, which is put back after."""
    import mlflow

    before = mlflow.get_tracking_uri()
    logger = logging.getLogger("mlflow")
    level = logger.level
    mlflow.set_tracking_uri(tracking_uri)
    logger.setLevel(logging.WARNING)  # no "Successfully registered model" / "Created version" lines
    try:
        yield
    finally:
        mlflow.set_tracking_uri(before)
        logger.setLevel(level)


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

    client = MlflowClient(tracking_uri)
    run = client.get_run(run_id)
    with _fluent(tracking_uri):
        if model is not None:
            import torch

            logged = mlflow.initialize_logged_model(
                name="model", source_run_id=run_id, experiment_id=run.info.experiment_id
            )
            info = mlflow.pytorch.log_model(
                model,
                name="model",
                model_id=logged.model_id,
                input_example=input_example,
                # Given, not inferred: inferring loads the model in a subprocess (slow, and it
                # guesses); `mlflow models serve --env-manager local` uses this environment.
                pip_requirements=[f"torch=={torch.__version__.split('+')[0]}", f"mlflow=={mlflow.__version__}"],
            )
            version = mlflow.register_model(info.model_uri, name, tags=dict(tags))
            kind = "pytorch"
        else:
            client.log_artifacts(run_id, checkpoint_dir, artifact_path=schema.REGISTERED_CHECKPOINT_ARTIFACT)
            with contextlib.suppress(mlflow.exceptions.MlflowException):  # it exists already
                client.create_registered_model(name)
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
