"""What the Python API hands back."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Literal

from tunetrain import space as spaces
from tunetrain.errors import ExperimentError

if TYPE_CHECKING:
    import pandas as pd

    from tunetrain.records import SweepOutcome, TrialRecord
    from tunetrain.results.analysis import Sweep
    from tunetrain.sweeps.handoff import Registered
    from tunetrain.sweeps.plan import SweepPlan


Status = Literal["ok", "all_failed", "bad_input", "not_recorded", "dry_run"]


@dataclasses.dataclass
class SweepResult:
    """What a sweep did: its trials, the best one, where it is recorded.

    ``status`` is ``"ok"`` (a trial completed or was stopped early by the scheduler),
    ``"all_failed"``, ``"bad_input"`` (the sweep stopped itself: ``error`` says why),
    ``"not_recorded"`` (the tracking store refused records: ``error`` says which first; they
    stay in the journal) or ``"dry_run"`` (nothing ran).
    """

    name: str  # the sweep's name (its folder under the storage; plan.name)
    status: Status
    metric: str
    mode: str
    tracking_uri: str
    storage_path: str
    outcome: SweepOutcome | None = None  # what the run ended with; None for a dry run
    plan: SweepPlan | None = None  # None for the resume of a sweep that had finished
    registered: Registered | None = None  # the best trial's model version, if registered

    # What the run ended with, read from the outcome (not copied: one record of it).

    @property
    def trials(self) -> list[TrialRecord]:
        return self.outcome.trials if self.outcome is not None else []

    @property
    def experiment_id(self) -> str | None:
        return self.outcome.experiment_id if self.outcome is not None else None

    @property
    def parent_run_id(self) -> str | None:
        return self.outcome.parent_run_id if self.outcome is not None else None

    @property
    def run_ids(self) -> dict[str, str]:
        """Trial name -> MLflow run id."""
        return dict(self.outcome.run_ids) if self.outcome is not None else {}

    @property
    def interrupted(self) -> bool:
        return self.outcome.interrupted if self.outcome is not None else False

    @property
    def error(self) -> str | None:
        """Why the sweep stopped itself (bad input), else None."""
        return self.outcome.bad_input if self.outcome is not None else None

    @property
    def ran(self) -> SweepOutcome:
        """What the sweep's run ended with; an error for a dry run (or the resume of a sweep
        that had finished), which ran nothing."""
        if self.outcome is None:
            raise ExperimentError(
                f"Sweep {self.name!r} ran nothing here ({self.status}).", fix="Run it without dry_run."
            )
        return self.outcome

    @property
    def best_trial(self) -> TrialRecord | None:
        """The trial with the best value of the metric (None when none reported one)."""
        return self.outcome.best if self.outcome is not None else None

    @property
    def best_config(self) -> dict[str, Any] | None:
        best = self.best_trial
        return dict(best.config) if best is not None else None

    @property
    def best_metric(self) -> float | None:
        best = self.best_trial
        return best.best_value if best is not None else None

    @property
    def best_checkpoint(self) -> str | None:
        """The best trial's best checkpoint folder, by the experiment's checkpoint policy."""
        best = self.best_trial
        if best is None or self.plan is None:
            return None
        policy = self.plan.experiment.checkpoint
        kept = best.best_checkpoint(policy.score_attribute or self.metric, policy.score_order or self.mode)
        return str(kept["path"]) if kept is not None else None

    @property
    def exit_status(self) -> int:
        """The CLI's exit status: 0 ok (or dry run), 1 all trials failed, 2 bad input, 3 a
        record the store refused."""
        return {"ok": 0, "dry_run": 0, "all_failed": 1, "bad_input": 2, "not_recorded": 3}[self.status]

    def table(self) -> pd.DataFrame:
        """One row per trial (pandas): from MLflow when the sweep was recorded (as
        ``tunetrain show``), else from the sweep's own records."""
        if self.parent_run_id is not None:
            return self.analysis().trials()
        import pandas as pd

        rows = [
            {
                "trial": t.name,
                "status": t.status,
                "iterations": t.iterations,
                f"best_{self.metric}": t.best_value,
                **{f"config/{k}": v for k, v in spaces.flatten(t.config).items()},
            }
            for t in self.trials
        ]
        return pd.DataFrame(rows)

    def analysis(self) -> Sweep:
        """The sweep as :class:`tunetrain.results.analysis.Sweep` reads it back from MLflow."""
        if self.parent_run_id is None:
            raise ExperimentError(
                f"Sweep {self.name!r} has no MLflow record (recording was off, or it was a dry run).",
                fix="Run it with the default recorder to analyse it from MLflow.",
            )
        from tunetrain.results.analysis import load_sweep

        return load_sweep(self.parent_run_id, tracking_uri=self.tracking_uri)
