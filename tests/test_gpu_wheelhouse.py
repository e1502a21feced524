"""The wheel trip to the GPU machine (scripts/gpu_wheelhouse.py), rehearsed on CPU.

The real wheelhouse is built for Python 3.12 from the package index (about 290 MB
downloaded), cut into parts, carried part by part into another folder, joined and checked,
and its wheels installed for Python 3.12 into a target folder: everything the GPU machine
does except importing them, which needs that machine's Python.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_wheelhouse.py"


def load_script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpu_wheelhouse", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def wheelhouse(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True)


def test_the_wheelhouse_asks_for_tunetrains_dependencies_pinned_and_not_what_the_machine_has() -> None:
    script = load_script()
    have = script.machine_packages()
    assert {"torch", "transformers", "numpy", "pandas"} <= have and "ray" not in have
    wanted = script.requirements(have)
    ray_version = __import__("importlib.metadata").metadata.version("ray")
    assert f"ray[default,train,tune]=={ray_version}" in wanted
    assert any(w.startswith("mlflow==") for w in wanted) and any(w.startswith("optuna==") for w in wanted)
    # The machine's own torch (its CUDA build) and its other packages are never carried.
    assert not [w for w in wanted if w.split("=")[0].split("[")[0].lower() in {"torch", "transformers", "pandas"}]


@pytest.mark.slow
def test_the_wheelhouse_is_built_cut_carried_part_by_part_joined_and_installed(tmp_path: Path) -> None:
    parts, there, site = tmp_path / "parts", tmp_path / "there", tmp_path / "site"
    built = wheelhouse("build", "--out", str(parts), "--part-mib", "40")
    assert built.returncode == 0, built.stderr
    manifest = json.loads((parts / "manifest.json").read_text())
    # Ray's wheel (76 MiB) alone is over one transfer: the tar is cut into parts of <= 40 MiB.
    assert len(manifest["parts"]) >= 3 and all(p["bytes"] <= 40 * 2**20 for p in manifest["parts"])
    names = {w.split("-", 1)[0].lower() for w in manifest["wheels"]}
    assert {"ray", "mlflow", "optuna", "hyperopt"} <= names and not {"torch", "numpy", "pandas"} & names
    assert any(w.startswith("numpy-") for w in manifest["left_out"])  # the machine has it
    assert all("cp312" in w or "-py3-" in w or "-py2.py3-" in w or "abi3" in w for w in manifest["wheels"])

    # The parts arrive one per transfer; until the last, the install says what is missing.
    there.mkdir()
    shutil.copy(parts / "manifest.json", there)
    for part in manifest["parts"][:-1]:
        shutil.copy(parts / part["name"], there)
    early = wheelhouse("install", "--parts", str(there), "--site", str(site), "--for-python", "3.12")
    last = manifest["parts"][-1]["name"]
    assert early.returncode != 0 and f"missing: {last}" in early.stderr and not site.exists()

    # A part cut short in transfer is refused by name.
    (there / last).write_bytes((parts / last).read_bytes()[:-1])
    short = wheelhouse("install", "--parts", str(there), "--site", str(site), "--for-python", "3.12")
    assert short.returncode != 0 and f"{there / last} does not match the manifest" in short.stderr

    shutil.copy(parts / last, there)
    done = wheelhouse("install", "--parts", str(there), "--site", str(site), "--for-python", "3.12")
    assert done.returncode == 0, done.stderr
    assert f"Installed {len(manifest['wheels'])} wheels" in done.stdout
    # Ray, MLflow and Optuna are unpacked for Python 3.12 (Ray's compiled core is cp312).
    (ray_info,) = site.glob("ray-*.dist-info")
    assert "Tag: cp312-cp312-" in (ray_info / "WHEEL").read_text()
    assert (site / "mlflow" / "__init__.py").is_file() and (site / "optuna" / "__init__.py").is_file()


def test_building_into_a_folder_that_holds_files_is_refused(tmp_path: Path) -> None:
    (tmp_path / "old").write_text("x")
    refused = wheelhouse("build", "--out", str(tmp_path))
    assert refused.returncode != 0 and f"--out {tmp_path} is not empty" in refused.stderr
