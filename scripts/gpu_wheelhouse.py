"""The wheels the GPU check needs, carried to a GPU machine that has no network.

The lent GPU machine (docs/training.md, "The GPU check") runs Python 3.12 with torch,
transformers and about 200 other packages, but not Ray, MLflow or Optuna, fetches nothing,
and takes files in transfers of at most 64 MiB, while Ray's wheel alone is 76 MiB. So:

    python scripts/gpu_wheelhouse.py build --out .gpu_wheels
        here: pip downloads tunetrain's dependencies, at the versions installed here, as
        wheels for that machine's Python (3.12, manylinux x86-64), leaves out what the
        machine has (scripts/gpu_machine_packages.txt), and cuts one tar of them into parts
        of at most --part-mib MiB, with a manifest of their SHA-256 sums;
    python3 scripts/gpu_wheelhouse.py install --parts .gpu_wheels --site /tmp/site
        there, once every part has arrived (one part per transfer: the parts of earlier
        transfers stay in place): checks each part, joins and unpacks them, installs the
        wheels into --site without touching the machine's packages, and imports them.

pip does the downloading and the installing; what is written here is only what pip has no
command for: leaving out the machine's packages, and a wheelhouse cut into checked parts.
tests/test_gpu_wheelhouse.py rehearses the trip on CPU: built, cut, carried part by part
into another folder, joined and installed for Python 3.12 into a target folder.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import io
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path
from typing import BinaryIO

HERE = Path(__file__).resolve().parent
MACHINE_PACKAGES = HERE / "gpu_machine_packages.txt"
# The GPU machine's own CUDA build of torch is used, never a wheel from here (it is 2.11 there,
# tunetrain pins 2.13.0 for CI; tunetrain is installed there with --no-deps).
NEVER_CARRIED = {"torch"}
# pip's platform tags for a manylinux x86-64 machine (pip matches each tag exactly).
PLATFORMS = [f"manylinux_2_{n}_x86_64" for n in (39, 35, 34, 31, 28, 27, 24, 17, 5)] + [
    "manylinux2014_x86_64",
    "manylinux1_x86_64",
]
# What the install imports to show the wheels work there (module names, not project names).
IMPORT_CHECK = ("ray", "ray.train", "ray.tune", "mlflow", "optuna", "hyperopt", "cmaes", "GPy")
MANIFEST = "manifest.json"


def canonical(name: str) -> str:
    """A project's name as pip compares them (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def machine_packages(path: Path = MACHINE_PACKAGES) -> set[str]:
    """The projects the GPU machine already has (one per line; '#' starts a comment)."""
    names = (line.split("#", 1)[0].strip() for line in path.read_text().splitlines())
    return {canonical(name) for name in names if name}


def requirements(have: set[str]) -> list[str]:
    """tunetrain's own dependencies (not its extras) that the machine lacks, each pinned to
    the version installed here, so that the GPU machine runs what CI tested."""
    pinned = []
    for line in importlib.metadata.requires("tunetrain") or []:
        if ";" in line and "extra ==" in line.split(";", 1)[1]:
            continue
        match = re.match(r"\s*([A-Za-z0-9_.-]+)(\[[^\]]*\])?", line)
        assert match is not None, line
        name, extras = match.group(1), match.group(2) or ""
        if canonical(name) in have or canonical(name) in NEVER_CARRIED:
            continue
        pinned.append(f"{name}{extras}=={importlib.metadata.version(name)}")
    return pinned


def wheel_project(path: Path) -> str:
    """The project a wheel file holds (its file name's first field)."""
    return canonical(path.name.split("-", 1)[0])


def pip_platform_args(python_version: str) -> list[str]:
    args = ["--only-binary=:all:", "--python-version", python_version, "--implementation", "cp"]
    for platform in PLATFORMS:
        args += ["--platform", platform]
    return args


def build(out: Path, *, python_version: str, part_mib: float, have: set[str]) -> dict:
    """Download, leave out what the machine has, and cut into checked parts under ``out``."""
    if part_mib <= 0:
        raise SystemExit(f"--part-mib must be above 0, but got part_mib={part_mib}. Give e.g. --part-mib 56.")
    out.mkdir(parents=True, exist_ok=True)
    if any(out.iterdir()):
        raise SystemExit(f"--out {out} is not empty: a wheelhouse is built into an empty folder. Give a new one.")
    wanted = requirements(have)
    with tempfile.TemporaryDirectory(prefix="tunetrain-wheels-") as tmp:
        wheels = Path(tmp) / "wheels"
        command = [sys.executable, "-m", "pip", "download", "-q", "-d", str(wheels), *pip_platform_args(python_version)]
        subprocess.run([*command, *wanted], check=True)
        carried = sorted(p for p in wheels.iterdir() if wheel_project(p) not in have | NEVER_CARRIED)
        left_out = sorted(p.name for p in wheels.iterdir() if p not in carried)
        tar_path = Path(tmp) / "wheels.tar"
        with tarfile.open(tar_path, "w") as tar:  # wheels are zip files already: no compression
            for wheel in carried:
                tar.add(wheel, arcname=f"wheels/{wheel.name}")
        parts = cut(tar_path, out, part_bytes=int(part_mib * 2**20))
        manifest = {
            "python_version": python_version,
            "requirements": wanted,
            "wheels": [p.name for p in carried],
            "left_out": left_out,
            "bytes": tar_path.stat().st_size,
            "sha256": sha256_of(tar_path),
            "parts": parts,
        }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def cut(tar_path: Path, out: Path, *, part_bytes: int) -> list[dict]:
    """Cut a file into parts of at most ``part_bytes`` (part-01, part-02, ...)."""
    parts: list[dict] = []
    with tar_path.open("rb") as source:
        while chunk := source.read(part_bytes):
            name = f"part-{len(parts) + 1:02d}"
            (out / name).write_bytes(chunk)
            parts.append({"name": name, "bytes": len(chunk), "sha256": hashlib.sha256(chunk).hexdigest()})
    return parts


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(2**20):
            digest.update(block)
    return digest.hexdigest()


class Joined(io.RawIOBase):
    """The parts read one after another as one stream (tarfile reads it), with the whole's
    SHA-256 computed on the way."""

    def __init__(self, paths: list[Path]) -> None:
        self._paths, self.digest = list(paths), hashlib.sha256()
        self._current_file: BinaryIO | None = None

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: memoryview) -> int:  # type: ignore[override]
        while True:
            if self._current_file is None:
                if not self._paths:
                    return 0
                self._current_file = self._paths.pop(0).open("rb")
            data = self._current_file.read(len(buffer))
            if data:
                buffer[: len(data)] = data
                self.digest.update(data)
                return len(data)
            self._current_file.close()
            self._current_file = None


def check_parts(parts_dir: Path) -> dict:
    """The manifest, once every part it names is in ``parts_dir`` and matches its sum."""
    manifest_path = parts_dir / MANIFEST
    if not manifest_path.is_file():
        raise SystemExit(f"No {MANIFEST} in --parts {parts_dir}: carry the folder's {MANIFEST} with each part.")
    manifest = json.loads(manifest_path.read_text())
    missing = [p["name"] for p in manifest["parts"] if not (parts_dir / p["name"]).is_file()]
    if missing:
        here = len(manifest["parts"]) - len(missing)
        raise SystemExit(
            f"{here} of {len(manifest['parts'])} parts are in {parts_dir}; missing: {', '.join(missing)}. "
            "Carry them (one per transfer) and run this again: the parts already there stay."
        )
    for part in manifest["parts"]:
        path = parts_dir / part["name"]
        if path.stat().st_size != part["bytes"] or sha256_of(path) != part["sha256"]:
            raise SystemExit(
                f"{path} does not match the manifest ({path.stat().st_size} bytes, {part['bytes']} expected, "
                "or another SHA-256): it was cut short or changed in transfer. Carry that part again."
            )
    return manifest


def install(parts_dir: Path, site: Path, *, for_python: str | None) -> list[str]:
    """Join the parts, unpack the wheels and install them into ``site`` (no dependency
    resolution: the machine's own packages are the rest). Returns the wheels installed."""
    manifest = check_parts(parts_dir)
    with tempfile.TemporaryDirectory(prefix="tunetrain-wheels-") as tmp:
        joined = Joined([parts_dir / p["name"] for p in manifest["parts"]])
        with tarfile.open(fileobj=io.BufferedReader(joined), mode="r|") as tar:
            tar.extractall(tmp, filter="data")
        if joined.digest.hexdigest() != manifest["sha256"]:
            raise SystemExit("The joined parts do not match the manifest's SHA-256: build the wheelhouse again.")
        wheels = sorted(str(p) for p in (Path(tmp) / "wheels").iterdir())
        target = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        target += ["--no-cache-dir", "--upgrade", "--target", str(site)]
        if for_python is not None:  # a rehearsal: another Python's wheels, unpacked only
            target += pip_platform_args(for_python)
        subprocess.run([*target, *wheels], check=True)
    return [Path(w).name for w in wheels]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    verbs = parser.add_subparsers(dest="verb", required=True)
    make = verbs.add_parser("build", help="download and cut the wheelhouse (here)")
    make.add_argument("--out", type=Path, required=True, help="an empty folder for the parts and manifest.json")
    make.add_argument("--python-version", default="3.12", help="the GPU machine's Python (default 3.12)")
    make.add_argument(
        "--part-mib", type=float, default=56.0, help="largest part, MiB (default 56: under 64 with the tree)"
    )
    make.add_argument("--have", type=Path, default=MACHINE_PACKAGES, help="the machine's packages, one per line")
    put = verbs.add_parser("install", help="join, check and install the parts (there)")
    put.add_argument("--parts", type=Path, required=True, help="the folder the parts and manifest.json arrived in")
    put.add_argument("--site", type=Path, required=True, help="where the wheels go (then: export PYTHONPATH=SITE)")
    put.add_argument("--for-python", help="a rehearsal: unpack another Python's wheels, skip the import check")
    args = parser.parse_args(argv)
    if args.verb == "build":
        manifest = build(
            args.out, python_version=args.python_version, part_mib=args.part_mib, have=machine_packages(args.have)
        )
        sizes = ", ".join(f"{p['name']} {p['bytes'] / 2**20:.1f} MiB" for p in manifest["parts"])
        print(
            f"{len(manifest['wheels'])} wheels for Python {args.python_version} ({manifest['bytes'] / 2**20:.1f} MiB), "
            f"{len(manifest['left_out'])} left out as the machine has them; parts: {sizes}"
        )
        return 0
    wheels = install(args.parts, args.site, for_python=args.for_python)
    print(f"Installed {len(wheels)} wheels into {args.site}")
    if args.for_python is None:
        check = "; ".join(f"import {module}" for module in IMPORT_CHECK)
        subprocess.run([sys.executable, "-c", check], check=True, env={**os.environ, "PYTHONPATH": str(args.site)})
        print(f"They import ({', '.join(IMPORT_CHECK)}). Now: export PYTHONPATH={args.site}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
