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
# The run side speaks in records; only tracking names MLflow's tags (tracking.schema).
_SCHEMA = ("tunetrain.tracking.schema",)
_BELOW_STAGES = (
    "tunetrain.sweeps",
    "tunetrain.results",
    "tunetrain.algorithms",
    "tunetrain.trial",
    "tunetrain.tracking",
)
FORBIDDEN = {
    "tunetrain.api": ("tunetrain.cli",),
    "tunetrain.sweeps": (*_UP, *_SCHEMA),
    **{
        f"tunetrain.sweeps.{stage}": ("tunetrain.results",)
        for stage in ("run", "callback", "policy", "plan", "cost", "resumable", "request")
    },
    "tunetrain.results": (*_UP, "tunetrain.sweeps", "tunetrain.algorithms", "tunetrain.trial"),
    "tunetrain.algorithms": (*_UP, "tunetrain.sweeps", "tunetrain.results", *_SCHEMA),
    "tunetrain.trial": (*_UP, "tunetrain.sweeps", "tunetrain.results", *_SCHEMA),
    "tunetrain.tracking": (*_UP, "tunetrain.sweeps", "tunetrain.results", "tunetrain.algorithms", "tunetrain.trial"),
    # Not stages: what serves a registered model (above the record it loads from), where a
    # sweep runs and what it shows (building blocks: they know no record).
    "tunetrain.serving": (*_UP, "tunetrain.sweeps", "tunetrain.results", "tunetrain.algorithms", "tunetrain.trial"),
    "tunetrain.cluster": (*_UP, *_BELOW_STAGES, "tunetrain.serving"),
    "tunetrain.console": (*_UP, *_BELOW_STAGES, "tunetrain.serving", "tunetrain.cluster"),
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
    assert importers and all(m.startswith(("tunetrain.tracking", "tunetrain._internals")) for m in importers)


PRIVATE = re.compile(
    r"\._internal\b|\._private\b|_loads_with_cloudpickle|SqlMetric|_local_tuner|_tracking_client|"
    r"ManagedSessionMaker|_checkpoint_results|_TrainingResult|_find_newest_experiment_checkpoint|"
    r"\._exploit\(|_hyperparam_mutations|print_to_stdstream|_global_node|\.abort\.remote|SqlLatestMetric|"
    r"_validate_metric\b|_validate_metric_name"
)


def test_private_ray_and_mlflow_apis_are_used_in_the_seam_only() -> None:
    seam = sorted((PACKAGE / "_internals").glob("*.py"))
    used = [
        f"{path.relative_to(REPO)}:{number}: {line.strip()}"
        for path in MODULES
        if path not in seam
        for number, line in enumerate(path.read_text().splitlines(), start=1)
        if PRIVATE.search(line) and not line.lstrip().startswith("#") and "_internals." not in line
    ]
    assert used == []
    assert PRIVATE.search("".join(path.read_text() for path in seam))  # the pattern finds what the seam holds


def test_no_module_is_over_500_lines() -> None:
    long = {str(p.relative_to(REPO)): n for p in MODULES if (n := len(p.read_text().splitlines())) > 500}
    assert long == {}


# The rules below are checked on the syntax tree (comments and docstrings are never code);
# each checker is also run on a small broken example, so that a rule that stopped finding
# anything fails here instead of passing silently.


def _module_sources() -> dict[str, str]:
    return {_name(path): path.read_text() for path in MODULES}


def _is_package(name: str, sources: dict[str, str]) -> bool:
    return any(other.startswith(name + ".") for other in sources)


def import_graph(sources: dict[str, str]) -> dict[str, set[str]]:
    """Module -> the package's modules it imports, at any depth (an import inside a function
    is an import too), relative imports resolved; ``from pkg import name`` counts as the
    module ``pkg.name`` where one exists, else as ``pkg``."""
    graph: dict[str, set[str]] = {}
    for name, source in sources.items():
        package = name if _is_package(name, sources) else name.rpartition(".")[0]
        found: set[str] = set()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                    base = ".".join([*parts, base] if base else parts)
                found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in sources else base for a in node.names)
        edges = set()
        for module in found:
            while module and module not in sources:
                module = module.rpartition(".")[0]
            if module and module != name:
                edges.add(module)
        graph[name] = edges
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def long_functions(source: str, *, limit: int = 100) -> list[tuple[str, int]]:
    """(name, lines) of each function or method longer than ``limit`` lines."""
    return [
        (node.name, node.end_lineno - node.lineno + 1)
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef)
        and node.end_lineno is not None
        and node.end_lineno - node.lineno + 1 > limit
    ]


def defined_names(sources: dict[str, str]) -> set[str]:
    """Every name the package defines: functions, classes, arguments, assigned names and
    attributes, import aliases. A ``._name`` read that is none of these is another library's."""
    names: set[str] = set()
    for source in sources.values():
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                names.add(node.attr)
            elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
                names.add(node.target.id)
            elif isinstance(node, ast.arg):
                names.add(node.arg)
    return names


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def foreign_private_uses(source: str, own: set[str]) -> list[str]:
    """Each use of another library's private name: an attribute ``x._name`` the package does
    not define, or an import of a private module or name from outside the package."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and _private(node.attr) and node.attr not in own:
            found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            if not node.module.startswith("tunetrain") and (
                any(_private(part) for part in node.module.split("."))
                or any(_private(alias.name) for alias in node.names)
            ):
                found.append(f"{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
        elif isinstance(node, ast.Import):
            found += [
                f"{node.lineno}: import {alias.name}"
                for alias in node.names
                if not alias.name.startswith("tunetrain") and any(_private(p) for p in alias.name.split("."))
            ]
    return found


def private_names_across_packages(sources: dict[str, str]) -> list[str]:
    """Each import of a private name (or a name from a private module) of one tunetrain
    package by a module of another: ``from tunetrain.results.analysis import _store`` in
    tunetrain.api. The seam (``tunetrain._internals``) is for every package."""
    found = []
    for name, source in sources.items():
        own = name.split(".")[1] if "." in name else ""
        for node in ast.walk(ast.parse(source)):
            if not (isinstance(node, ast.ImportFrom) and node.module and not node.level):
                continue
            parts = node.module.split(".")
            if parts[0] != "tunetrain" or len(parts) < 2 or parts[1] in (own, "_internals"):
                continue
            for alias in node.names:
                if any(_private(part) for part in [*parts[2:], alias.name]):
                    found.append(f"{name}: from {node.module} import {alias.name}")
    return found


def test_no_private_name_of_one_tunetrain_package_is_used_by_another() -> None:
    assert private_names_across_packages(_module_sources()) == []


# design.md: "the layers that run Ray import it at module level; every other module imports it
# inside the function that needs it" (so that `tunetrain list` or a results notebook does not
# pay Ray's import).
RAY_AT_MODULE_LEVEL = (
    "tunetrain.sweeps",
    "tunetrain.algorithms",
    "tunetrain.trial",
    "tunetrain.cluster",
    "tunetrain.doctor",
    "tunetrain.experiment",  # ray.cloudpickle: an experiment travels to Ray's workers
    "tunetrain._internals",
)


def imports_ray_at_module_level(source: str) -> bool:
    """Whether ``source`` imports Ray outside every function and class (a ``TYPE_CHECKING``
    block aside: it runs only under mypy)."""

    def ray(node: ast.AST) -> bool:
        if isinstance(node, ast.Import):
            return any(a.name == "ray" or a.name.startswith("ray.") for a in node.names)
        return isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "ray"

    def walk(nodes: list[ast.stmt]) -> bool:
        for node in nodes:
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                continue
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                if walk(node.orelse):
                    return True
                continue
            if ray(node) or walk([n for n in ast.iter_child_nodes(node) if isinstance(n, ast.stmt)]):
                return True
        return False

    return walk(ast.parse(source).body)


def test_ray_is_imported_at_module_level_only_by_the_layers_design_md_names() -> None:
    importers = [
        name
        for name, source in _module_sources().items()
        if imports_ray_at_module_level(source) and not name.startswith(RAY_AT_MODULE_LEVEL)
    ]
    assert importers == []


# The records a sweep hands from stage to stage (design.md's table), by the parameter names
# that carry them: never annotated Any, so that mypy follows each hand-off.
HAND_OFFS = ("request", "experiment", "where", "launch", "plan", "resume", "resumable", "outcome")


_ANY = ("Any", "Any | None", "'Any'")


def untyped_hand_offs(source: str) -> list[str]:
    """Each function parameter named for a stage's record and annotated ``Any``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            for arg in [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]:
                if arg.arg in HAND_OFFS and arg.annotation is not None and ast.unparse(arg.annotation) in _ANY:
                    found.append(f"{node.name}({arg.arg}: {ast.unparse(arg.annotation)})")
    return found


def test_no_hand_off_between_stages_is_typed_any() -> None:
    untyped = {
        name: found
        for name, source in _module_sources().items()
        if name != "tunetrain.serving"  # its `request` is Starlette's, not a sweep's
        and (found := untyped_hand_offs(source))
    }
    assert untyped == {}


def same_named_modules(names: list[str]) -> list[str]:
    """Module names (the last part) that two packages both use, ``__init__`` and
    ``__main__`` aside: ``sweeps/serving.py`` beside ``tracking/serving.py`` reads as one thing
    in a traceback, an import or a search."""
    places: dict[str, list[str]] = {}
    for name in names:
        *package, module = name.split(".")
        places.setdefault(module, []).append(".".join(package))
    return sorted(module for module, where in places.items() if len(where) > 1 and module != "__main__")


def test_no_two_packages_hold_modules_of_one_name() -> None:
    modules = [".".join(path.relative_to(REPO).with_suffix("").parts) for path in MODULES if path.name != "__init__.py"]
    assert imports_ray_at_module_level("import os\ntry:\n    import ray\nexcept ImportError:\n    pass\n")
    assert not imports_ray_at_module_level(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ray\ndef f():\n    from ray import tune\n"
    )
    assert untyped_hand_offs(
        "def f(plan: Any, *, outcome: 'SweepOutcome', other: Any, request: dict[str, Any]) -> None: ..."
    ) == ["f(plan: Any)"]
    assert same_named_modules(modules) == []


def test_no_import_cycles_at_module_or_function_level() -> None:
    assert cycles(import_graph(_module_sources())) == []


def test_no_function_over_100_lines_outside_the_cli() -> None:
    long = {
        f"{name}.{function}": lines
        for name, source in _module_sources().items()
        if not name.startswith("tunetrain.cli")
        for function, lines in long_functions(source)
    }
    assert long == {}


def test_no_private_name_of_ray_mlflow_optuna_or_the_stdlib_outside_the_seam() -> None:
    sources = _module_sources()
    own = defined_names(sources)
    used = {
        name: uses
        for name, source in sources.items()
        if not name.startswith("tunetrain._internals") and (uses := foreign_private_uses(source, own))
    }
    assert used == {}


def test_the_rules_find_what_they_forbid() -> None:
    broken = {
        "pkg": "",
        "pkg.a": "from pkg.b import thing\n",
        "pkg.b": "def thing():\n    from pkg import a  # a function-level import closes the cycle\n",
        "pkg.c": "from . import a\n",
    }
    assert cycles(import_graph(broken)) == [["pkg.a", "pkg.b"]]
    across = {
        "tunetrain.api._sweep": "from tunetrain.results.analysis import _store, load_sweep\n",
        "tunetrain.api.smoke": "from tunetrain.api._sweep import sweep\nfrom tunetrain._internals import x\n",
        "tunetrain.cli": "from tunetrain.trial._worker import worker_main\n",
    }
    assert private_names_across_packages(across) == [
        "tunetrain.api._sweep: from tunetrain.results.analysis import _store",
        "tunetrain.cli: from tunetrain.trial._worker import worker_main",
    ]
    assert import_graph(broken)["pkg.c"] == {"pkg.a"}
    assert imports_ray_at_module_level("import os\ntry:\n    import ray\nexcept ImportError:\n    pass\n")
    assert not imports_ray_at_module_level(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import ray\ndef f():\n    from ray import tune\n"
    )
    assert same_named_modules(["t.sweeps.serving", "t.tracking.serving", "t.cli.run", "t.sweeps.plan"]) == ["serving"]
    body = "".join(f"    x{i} = {i}\n" for i in range(100))
    assert long_functions(f"def f():\n{body}") == [("f", 101)]
    assert long_functions(f"def f():\n{body[:-12]}") == []
    source = (
        "import atexit\nfrom ray.tune.schedulers import _helper\nimport ray._private.utils\n"
        "class Mine:\n    def __init__(self):\n        self._mine = 1\n"
        "def f(m, scheduler):\n    '''docstrings like scheduler._get_n0() are not code'''\n"
        "    atexit._run_exitfuncs()\n    scheduler._get_n0()\n    return m._mine, m.__class__\n"
    )
    uses = foreign_private_uses(source, defined_names({"m": source}))
    assert uses == [
        "2: from ray.tune.schedulers import _helper",
        "3: import ray._private.utils",
        "9: atexit._run_exitfuncs",
        "10: scheduler._get_n0",
    ]
