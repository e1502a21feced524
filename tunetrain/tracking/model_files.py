"""A registered model, loaded for serving, and MLflow's scoring format: ``{"inputs": ...}`` in,
``{"predictions": ...}`` out, as ``mlflow models serve``'s ``/invocations`` takes and answers
(MLflow's own scoring server is a separate web app, not callable from a Ray Serve replica)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping
from typing import Any

from tunetrain.errors import ExperimentError


def fetch_model(model_uri: str, *, tracking_uri: str) -> dict[str, bytes]:
    """The files of ``model_uri`` (an alias ``models:/NAME@ALIAS``, a version
    ``models:/NAME/N``, ``runs:/...``) from the store at ``tracking_uri``, by path, checked
    by loading them here (``mlflow.pyfunc.load_model``) before they go anywhere. A URI that
    names nothing, or a model that does not load, is bad input, said with what the store holds.

    Files rather than the loaded model: MLflow's loaded models do not pickle, and files need
    no store credentials where they are loaded (a Ray Serve replica on any node)."""
    import tempfile
    from pathlib import Path

    import mlflow
    import mlflow.artifacts
    from mlflow.tracking import MlflowClient

    if model_uri.startswith("models:/"):
        _check_registered(MlflowClient(tracking_uri), model_uri)
    with tempfile.TemporaryDirectory() as folder, _no_progress_bar():
        try:
            # tracking_uri named here: load_model alone reads the process's global store, which
            # mlflow.set_tracking_uri would change for every later call of the process.
            local = mlflow.artifacts.download_artifacts(
                artifact_uri=model_uri, tracking_uri=tracking_uri, dst_path=folder
            )
            files = {str(p.relative_to(local)): p.read_bytes() for p in Path(local).rglob("*") if p.is_file()}
            load_files(files)
        except mlflow.exceptions.MlflowException as exc:
            raise ExperimentError(
                f"MLflow could not load {model_uri} from {tracking_uri}: {exc.message}",
                fix="Pass models:/NAME@ALIAS, models:/NAME/VERSION or a sweep that registered an mlflow.pytorch model "
                "(an experiment with export_model).",
            ) from None
    return files


@contextlib.contextmanager
def _no_progress_bar() -> Iterator[None]:
    """MLflow's tqdm bar for downloads off (MLflow's own switch), put back after."""
    key = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"
    before = os.environ.get(key)
    os.environ[key] = "false"
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = before


def load_files(files: Mapping[str, bytes]) -> Any:
    """``mlflow.pyfunc.load_model`` of a model's files (:func:`fetch_model`), written to a new
    temporary folder that stays while the process lives (the model may read them lazily)."""
    import tempfile
    from pathlib import Path

    import mlflow.pyfunc

    folder = Path(tempfile.mkdtemp(prefix="tunetrain-model-"))
    for name, data in files.items():
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / name).write_bytes(data)
    return mlflow.pyfunc.load_model(str(folder))


def _check_registered(client: Any, model_uri: str) -> None:
    import mlflow

    name, _, ref = model_uri.removeprefix("models:/").partition("@")
    if not ref:
        name, _, ref = name.partition("/")
    try:
        if "@" in model_uri:
            client.get_model_version_by_alias(name, ref)
        else:
            client.get_model_version(name, ref)
    except mlflow.exceptions.MlflowException:
        known = [m.name for m in client.search_registered_models(max_results=20)]
        raise ExperimentError(
            f"{model_uri} names no registered model version in this store (its models: {', '.join(known) or 'none'}).",
            fix="Pass models:/NAME@champion or models:/NAME/VERSION of one of those, or a sweep's name.",
        ) from None


def predict(model: Any, body: Mapping[str, Any]) -> dict[str, Any]:
    """The model's predictions for a request body in MLflow's format, ``{"inputs": ...}``:
    converted to the model's input signature (a tensor spec's dtype and shape, else a table).
    A body that does not fit is a ValueError saying the shape the model takes: the caller's
    400, never the model's own error deep in its forward pass (a 500)."""
    import numpy as np
    import pandas as pd

    if not isinstance(body, Mapping) or "inputs" not in body or body["inputs"] is None:
        raise ValueError(
            'the request body must be JSON with "inputs", as for `mlflow models serve`: {"inputs": '
            + input_contract(model)
            + "}"
        )
    schema = model.metadata.get_input_schema()
    if schema is not None and schema.is_tensor_spec():
        dtype = schema.numpy_types()[0]
        try:
            data: Any = np.asarray(body["inputs"], dtype=dtype)
        except (ValueError, TypeError) as exc:
            raise ValueError(f'"inputs" must be {input_contract(model)}, but it is not ({exc})') from None
        if not _fits(data.shape, schema.inputs[0].shape):
            raise ValueError(f'"inputs" must be {input_contract(model)}, but got shape {list(data.shape)}')
    else:
        data = pd.DataFrame(body["inputs"])
    out = model.predict(data)
    if isinstance(out, pd.DataFrame):
        return {"predictions": out.to_dict(orient="records")}
    return {"predictions": np.asarray(out).tolist()}


def input_contract(model: Any) -> str:
    """What ``"inputs"`` must be for the model, in words: for a tensor spec, its shape (-1:
    any number of rows) and dtype, e.g. ``a list of rows of 64 numbers (shape [-1, 64],
    float32)``; else a table's records."""
    schema = model.metadata.get_input_schema()
    if schema is None or not schema.is_tensor_spec():
        return "a list of records ([{column: value, ...}, ...])"
    shape, dtype = list(schema.inputs[0].shape), schema.numpy_types()[0]
    if len(shape) == 2 and shape[0] == -1 and shape[1] > 0:
        return f"a list of rows of {shape[1]} numbers (shape {shape}, {dtype})"
    return f"an array of shape {shape} ({dtype}; -1: any size)"


def _fits(shape: tuple[int, ...], spec: tuple[int, ...]) -> bool:
    return len(shape) == len(spec) and all(want in (-1, got) for got, want in zip(shape, spec, strict=True))
