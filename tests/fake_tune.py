"""A fake Ray Tune event stream: the trial events Tune's controller sends to tunetrain's
stopper, scheduler hooks and callback, driven by hand, without Ray (as Syne Tune tests its
schedulers on a simulated backend). Tests of the policy, the callback and the plan run in
milliseconds on it; what only a real sweep shows (Tune's own scheduling, processes,
checkpoints on disk, MLflow) stays in the real-sweep tests.

The order is Tune's (Ray 2.60's TuneController): a result goes to the stopper first, then
to the callback; a trial's end to ``on_trial_complete`` (or ``on_trial_error``)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tunetrain.experiment import Experiment
from tunetrain.sweeps.callback import SweepCallback
from tunetrain.sweeps.plan import SweepPlan, plan_sweep
from tunetrain.sweeps.policy import SweepStopper
from tunetrain.tracking import SweepLog
from tunetrain.trial import worst_for_diverged


@dataclasses.dataclass
class FakeTrial:
    """What the callback reads of a Tune Trial: its id, name (``str(trial)``), config, error file."""

    trial_id: str
    name: str
    config: dict[str, Any]
    error_file: str | None = None
    status: str = "RUNNING"

    def __str__(self) -> str:
        return self.name


class CallLog:
    """A recorder that keeps every call made of it (method, trial, keywords): what tracking's
    SweepLog turned the callback's records into."""

    experiment_id = "0"

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def run_id(self, trial: str) -> str | None:
        return f"run-{trial}"

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)

        def call(*args: Any, **kwargs: Any) -> None:
            self.calls.append((name, args, kwargs))

        return call

    def of(self, method: str, trial: str | None = None) -> list[dict[str, Any]]:
        """The keywords (and ``trial``) of each call of ``method``, for one trial or all."""
        return [
            {"trial": args[0] if args else None, **kwargs}
            for name, args, kwargs in self.calls
            if name == method and (trial is None or (args and args[0] == trial))
        ]


class _View:
    def update(self, trials: Any, force: bool = False) -> None:
        pass

    def close(self) -> None:
        pass


@dataclasses.dataclass
class FakeScheduler:
    """The attributes tunetrain's schedulers share with the callback (see tunetrain.algorithms)."""

    early_stopped: dict[str, int] = dataclasses.field(default_factory=dict)
    exploits: list[dict[str, Any]] = dataclasses.field(default_factory=list)
    exempt: Any = None


def unit_plan(experiment: Experiment, tmp_path: Path, *, cpus: float = 2.0, **options: Any) -> SweepPlan:
    """The plan of ``experiment`` on one node of ``cpus`` CPUs, its storage under ``tmp_path``."""
    return plan_sweep(
        experiment,
        nodes=[{"CPU": cpus}],
        tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}",
        storage_path=str(tmp_path / "results"),
        address=None,
        **options,
    )


class FakeTune:
    """Drives a :class:`SweepCallback` and a :class:`SweepStopper` for ``plan`` as Tune would."""

    def __init__(self, plan: SweepPlan, *, scheduler: FakeScheduler | None = None) -> None:
        self.plan = plan
        self.stopper = SweepStopper(plan.experiment)
        self.scheduler = scheduler or FakeScheduler()
        self.recorder = CallLog()
        self.callback = SweepCallback(
            plan=plan,
            log=SweepLog(self.recorder),  # type: ignore[arg-type]  # CallLog: the Recorder protocol, duck-typed
            view=_View(),  # type: ignore[arg-type]
            stopper=self.stopper,
            scheduler=self.scheduler,
        )
        self._steps: dict[str, int] = {}

    def start(self, index: int, config: Mapping[str, Any]) -> FakeTrial:
        """Trial ``trial_NNNN`` (the searcher's ``index``-th config) starts."""
        trial = FakeTrial(trial_id=f"id{index:04d}", name=f"trial_{index:04d}", config=dict(config))
        self._steps[trial.trial_id] = 0
        self.callback.on_trial_start(0, [], trial)
        return trial

    def report(self, trial: FakeTrial, metrics: Mapping[str, Any], *, step: int | None = None) -> bool:
        """One ``ray.train.report`` (a non-finite objective handed on as the trial runners do:
        its worst value, the reported one aside); True when the stopper stops the trial (or
        the sweep)."""
        step = step if step is not None else self._steps[trial.trial_id] + 1
        self._steps[trial.trial_id] = max(step, self._steps[trial.trial_id])
        objectives = tuple((metric, str(mode)) for metric, mode in self.plan.experiment.objectives)
        result = {
            **worst_for_diverged(dict(metrics), objectives),
            "training_iteration": step,
            "time_total_s": float(step),
            "trial_id": trial.trial_id,
            "done": False,
            "timestamp": int(time.time()),
        }
        stop = self.stopper(trial.trial_id, result)
        self.callback.on_trial_result(0, [], trial, result)
        return stop or self.stopper.stop_all()

    def complete(self, trial: FakeTrial) -> None:
        trial.status = "TERMINATED"
        self.callback.on_trial_complete(0, [], trial)

    def early_stop(self, trial: FakeTrial) -> None:
        """The scheduler stops the trial at its latest step (as ASHA's on_trial_result does)."""
        self.scheduler.early_stopped[trial.trial_id] = self._steps[trial.trial_id]
        self.complete(trial)

    def fail(self, trial: FakeTrial, error: str, folder: Path) -> None:
        """The trial raises: Tune writes its error file and calls ``on_trial_error``."""
        path = folder / f"{trial.name}.error.txt"
        path.write_text(error)
        trial.error_file, trial.status = str(path), "ERROR"
        self.callback.on_trial_error(0, [], trial)

    def status(self, trial: FakeTrial) -> str:
        return self.callback.records[trial.trial_id].status
