"""A sweep's storage (checkpoints, Tune's state): a local folder or a URI (s3://, gs://,
file://) that pyarrow opens, and its check before anything starts: a local folder must take
files and have room for the sweep's journal, state and first checkpoints."""

from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
from pathlib import Path

from tunetrain.errors import ExperimentError

# The least free space a sweep starts with on local storage. Not a guess at what the sweep
# needs (checkpoints differ by orders of magnitude): below it, the journal and Tune's state
# alone may not fit, and a full disk mid-sweep ends it with an error (docs/fault_tolerance.md).
MIN_FREE_BYTES = 32 * 2**20

DEFAULT_STORAGE = "tunetrain_results"  # relative to the folder a sweep starts in


@dataclasses.dataclass(frozen=True)
class Storage:
    """A storage as given (``--storage``, ``storage=``): a local path or a URI."""

    text: str

    def __str__(self) -> str:
        return self.text

    @property
    def is_uri(self) -> bool:
        """A URI (s3://, gs://, file://): left to its filesystem, never resolved as a path."""
        return "://" in self.text

    def absolute(self) -> str:
        """The storage as a command run from any folder can name it (a URI as it is)."""
        return self.text if self.is_uri else os.path.abspath(self.text)

    def resolved(self) -> str:
        """The storage with its links resolved, as Tune is given it (a URI as it is)."""
        return self.text if self.is_uri else str(Path(self.text).resolve())


def check_storage(storage: str, *, flag: str = "--storage") -> None:
    """Refuse (ExperimentError, naming ``flag``) a local storage that cannot be written or has
    less than :data:`MIN_FREE_BYTES` free; a URI (s3://, file://) is left to its filesystem."""
    if Storage(storage).is_uri:
        return
    folder = nearest_folder(Path(storage))
    problem = folder_unwritable(folder) or _too_full(folder)
    if problem:
        raise ExperimentError(
            f"{flag} {storage!r} cannot take the sweep: {problem}.",
            fix=f"Free space there, fix its permissions, or pass {flag} with a folder on another disk.",
        )


def nearest_folder(path: Path) -> Path:
    """``path`` itself if it exists, else its nearest existing ancestor: where a new folder
    or file under ``path`` would be created."""
    folder = path.absolute()
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    return folder


def folder_unwritable(folder: Path) -> str | None:
    """Why no file can be created in ``folder``, or None. Tried, not asked: root passes every
    permission check (os.access), and a folder like /proc takes no files."""
    if not folder.is_dir():
        return f"{folder} is not a folder"
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".tunetrain-write-check-"):
            return None
    except OSError as exc:
        return f"no file can be created in {folder} ({exc.strerror or exc})"


def _too_full(folder: Path) -> str | None:
    free = shutil.disk_usage(folder).free
    if free >= MIN_FREE_BYTES:
        return None
    return f"its disk has {free / 2**20:.1f} MiB free, less than the {MIN_FREE_BYTES // 2**20} MiB a sweep starts with"
