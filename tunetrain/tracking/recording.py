"""The interface every recorder implements (:class:`Recorder`), and the recorder that records
nothing (:class:`NullRecorder`); MLflow's is :class:`tunetrain.tracking.recorder.SweepRecorder`."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Recorder(Protocol):
    """What the sweep log (:class:`tunetrain.tracking.SweepLog`) records through:
    :class:`SweepRecorder` (MLflow, journaled) or :class:`NullRecorder` (recording off).
    ``tunetrain.sweep(..., recorder=...)`` takes a callable with :class:`SweepRecorder`'s
    keyword arguments that returns one. Both name it as their base, so mypy checks each
    method against the signatures written here (as accelerate's trackers implement
    ``GeneralTracker``)."""

    experiment_id: str | None
    error_count: int
    first_error: str | None
    journal_error: str | None
    drain_timeout_s: float

    def start_sweep(
        self, *, run_name: str, params: Mapping[str, Any], tags: Mapping[str, Any], sweep_id: str | None = None
    ) -> str | None: ...
    def resume_sweep(self, *, tags: Mapping[str, Any]) -> str | None: ...
    def log_sweep_artifact(self, local_path: str) -> None: ...
    def log_sweep_text(self, text: str, name: str) -> None: ...
    def set_sweep_tags(self, tags: Mapping[str, Any]) -> None: ...
    def end_sweep(
        self,
        *,
        status: str,
        best_metrics: Mapping[str, float],
        tags: Mapping[str, Any],
        best_trial: str | None,
        best_config: Mapping[str, Any] | None,
        step: int = 0,
    ) -> None: ...
    def start_trial(
        self, trial: str, *, params: Mapping[str, Any], tags: Mapping[str, Any], start_time: float
    ) -> None: ...
    def reopen_trial(self, trial: str) -> None: ...
    def log_metrics(self, trial: str, *, step: int, metrics: Mapping[str, float], timestamp: float) -> None: ...
    def set_tags(self, trial: str, tags: Mapping[str, Any]) -> None: ...
    def end_trial(
        self,
        trial: str,
        *,
        status: str,
        end_time: float,
        tags: Mapping[str, Any],
        error: str | None = None,
        error_headline: str = "",
        artifacts: Mapping[str, Any] | None = None,
    ) -> None: ...
    def log_dict(self, trial: str, name: str, content: Any) -> None: ...
    def run_id(self, trial: str) -> str | None: ...
    def flush(self, timeout: float | None = None) -> bool: ...
    @property
    def unsent(self) -> int: ...
    def close(self, timeout: float | None = None) -> None: ...


class NullRecorder(Recorder):
    """Recording off: every call of :class:`Recorder` does nothing, and no run id exists (what
    the benchmarks compare tracking against, and ``tunetrain.sweep(..., recorder=NullRecorder)``).
    Each method is written out, so a method added to the interface without one here fails
    mypy instead of being swallowed."""

    experiment_id: str | None = None
    error_count = 0
    first_error: str | None = None
    journal_error: str | None = None
    drain_timeout_s = 0.0

    def __init__(self, **options: Any) -> None:
        """Takes (and ignores) :class:`SweepRecorder`'s keyword arguments."""

    def start_sweep(
        self, *, run_name: str, params: Mapping[str, Any], tags: Mapping[str, Any], sweep_id: str | None = None
    ) -> str | None:
        return None

    def resume_sweep(self, *, tags: Mapping[str, Any]) -> str | None:
        return None

    def log_sweep_artifact(self, local_path: str) -> None:
        pass

    def log_sweep_text(self, text: str, name: str) -> None:
        pass

    def set_sweep_tags(self, tags: Mapping[str, Any]) -> None:
        pass

    def end_sweep(
        self,
        *,
        status: str,
        best_metrics: Mapping[str, float],
        tags: Mapping[str, Any],
        best_trial: str | None,
        best_config: Mapping[str, Any] | None,
        step: int = 0,
    ) -> None:
        pass

    def start_trial(self, trial: str, *, params: Mapping[str, Any], tags: Mapping[str, Any], start_time: float) -> None:
        pass

    def reopen_trial(self, trial: str) -> None:
        pass

    def log_metrics(self, trial: str, *, step: int, metrics: Mapping[str, float], timestamp: float) -> None:
        pass

    def set_tags(self, trial: str, tags: Mapping[str, Any]) -> None:
        pass

    def end_trial(
        self,
        trial: str,
        *,
        status: str,
        end_time: float,
        tags: Mapping[str, Any],
        error: str | None = None,
        error_headline: str = "",
        artifacts: Mapping[str, Any] | None = None,
    ) -> None:
        pass

    def log_dict(self, trial: str, name: str, content: Any) -> None:
        pass

    def run_id(self, trial: str) -> str | None:
        return None

    def flush(self, timeout: float | None = None) -> bool:
        return True

    @property
    def unsent(self) -> int:
        return 0

    def close(self, timeout: float | None = None) -> None:
        pass
