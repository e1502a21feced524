"""The package's shape, as docs/design.md states it: layers import downwards only, mlflow and
Ray's and MLflow's private APIs only where they belong, no module over ~500 lines."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "tunetrain"
MODULES = sorted(PACKAGE.rglob("*.py"))


def _name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module ``path`` imports (at any depth: lazy imports count)."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


# What each layer must never import (tunetrain modules, by prefix): cli -> api -> sweeps ->
# {results, algorithms, trial} -> tracking -> building blocks. Of a sweep's stages only the
# session (the end-of-sweep report), warm start and the hand-off read the record back.
_UP = ("tunetrain.api", "tunetrain.cli")
FORBIDDEN = {
    "tunetrain.api": ("tunetrain.cli",),
    "tunetrain.sweeps": _UP,
    **{
        f"tunetrain.sweeps.{stage}": ("tunetrain.results",)
        for stage in ("run", "callback", "policy", "plan", "cluster", "console", "cost", "resumable", "request")
    },
    "tunetrain.results": (*_UP, "tunetrain.sweeps", "tunetrain.algorithms", "tunetrain.trial"),
    "tunetrain.algorithms": (*_UP, "tunetrain.sweeps", "tunetrain.results"),
    "tunetrain.trial": (*_UP, "tunetrain.sweeps", "tunetrain.results"),
    "tunetrain.tracking": (*_UP, "tunetrain.sweeps", "tunetrain.results", "tunetrain.algorithms", "tunetrain.trial"),
}


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layers_import_downwards_only(layer: str) -> None:
    wrong = [
        f"{_name(path)} imports {module}"
        for path in MODULES
        if _name(path).startswith(layer)
        for module in sorted(_imports(path))
        if module.startswith(FORBIDDEN[layer])
    ]
    assert wrong == []


def test_only_the_tracking_package_and_the_seam_import_mlflow() -> None:
    importers = {
        _name(path) for path in MODULES if any(m == "mlflow" or m.startswith("mlflow.") for m in _imports(path))
    }
    assert importers and all(m.startswith("tunetrain.tracking") or m == "tunetrain._internals" for m in importers)


PRIVATE = re.compile(
    r"\._internal\b|\._private\b|_loads_with_cloudpickle|SqlMetric|_local_tuner|_tracking_client|"
    r"ManagedSessionMaker|_checkpoint_results|_TrainingResult|_find_newest_experiment_checkpoint|"
    r"\._exploit\(|_hyperparam_mutations|print_to_stdstream|_global_node|\.abort\.remote|SqlLatestMetric|"
    r"_validate_metric\b|_validate_metric_name"
)


def test_private_ray_and_mlflow_apis_are_used_in_the_seam_only() -> None:
    seam = PACKAGE / "_internals.py"
    used = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in MODULES
        if path != seam
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if PRIVATE.search(line) and not line.lstrip().startswith("#") and "_internals." not in line
    ]
    assert used == []
    assert PRIVATE.search(seam.read_text())  # the pattern finds what the seam holds


def test_no_module_is_over_500_lines() -> None:
    long = {str(p.relative_to(REPO)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}
