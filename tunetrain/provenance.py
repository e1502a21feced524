"""Code, package and hardware facts recorded with every sweep."""

from __future__ import annotations

import importlib.metadata
import platform
import subprocess
from pathlib import Path

PACKAGES = ("ray", "torch", "optuna", "hyperopt", "mlflow", "transformers", "numpy")


def package_versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in PACKAGES:
        try:
            versions[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            versions[name] = "not installed"
    return versions


def git_state(path: str | Path) -> dict[str, str]:
    """The commit of the git tree holding ``path`` and whether it is dirty (empty outside a repo)."""
    folder = Path(path).resolve()
    folder = folder if folder.is_dir() else folder.parent

    def git(*args: str) -> str:
        return subprocess.run(
            ["git", *args], cwd=folder, capture_output=True, text=True, check=True, timeout=10
        ).stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        dirty = bool(git("status", "--porcelain"))
    except (OSError, subprocess.SubprocessError):
        return {}
    return {"git_commit": commit, "git_dirty": str(dirty).lower()}


def git_diff(path: str | Path) -> str:
    """``git diff HEAD`` of the tree holding ``path`` (uncommitted changes; empty outside a repo)."""
    folder = Path(path).resolve()
    folder = folder if folder.is_dir() else folder.parent
    try:
        return subprocess.run(
            ["git", "diff", "HEAD"], cwd=folder, capture_output=True, text=True, check=True, timeout=30
        ).stdout
    except (OSError, subprocess.SubprocessError):
        return ""


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def gpu_names() -> list[str]:
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count())]


def gpu_memory_gib() -> list[float]:
    import torch

    if not torch.cuda.is_available():
        return []
    return [torch.cuda.get_device_properties(i).total_memory / 2**30 for i in range(torch.cuda.device_count())]


def cuda_version() -> str:
    """The CUDA version torch was built with ('' for a CPU build)."""
    import torch

    return str(torch.version.cuda or "")
