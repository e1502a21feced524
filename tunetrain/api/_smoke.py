"""``tunetrain.smoke``: one tiny trial of the experiment on the target cluster (and a second
from its checkpoint), then a verdict per check (see :mod:`tunetrain.api.smoke_checks`)."""

from __future__ import annotations

import dataclasses
import io
import os
import sys
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any, TextIO

from tunetrain.errors import ExperimentError
from tunetrain.experiment import Experiment
from tunetrain.sweeps.request import SweepRequest
from tunetrain.sweeps.result import SweepResult
from tunetrain.sweeps.session import Launch, execute

if TYPE_CHECKING:  # pandas, which smoke_checks imports, only when a smoke test runs
    from tunetrain.api.smoke_checks import SmokeCheck


@dataclasses.dataclass
class SmokeResult:
    """The smoke test's checks (``check.verdict``: PASS, FAIL or SKIP) and its sweep."""

    checks: list[SmokeCheck]
    sweep: SweepResult

    @property
    def passed(self) -> bool:
        """Every check passed or was skipped."""
        return not any(check.verdict == "FAIL" for check in self.checks)


def smoke(
    experiment: Experiment | str | os.PathLike[str],
    *,
    steps: int = 5,
    overrides: Mapping[str, Any] | None = None,
    tracking_uri: str | None = None,
    storage: str | None = None,
    address: str | None = None,
    name: str | None = None,
    stream: TextIO | None = None,
    command: list[str] | None = None,
    **fields: Any,
) -> SmokeResult:
    """Run one tiny trial of ``steps`` iterations (FIFO, random search, the experiment's smoke
    values) and check: its resources schedule, the metric is reported, finite and improves,
    a checkpoint saves and loads back (a second tiny trial starts from the latest), and the
    start-up and step times (recorded, for ``sweep(..., dry_run=True)``'s estimate).
    ``fields`` change the experiment as :func:`tunetrain.sweep`'s keywords do."""
    request = SweepRequest(
        experiment=experiment if isinstance(experiment, Experiment) else os.fspath(experiment),
        fields=fields,
        overrides=dict(overrides or {}),
        tracking_uri=tracking_uri,
        storage=storage,
        address=address,
        name=name,
        command=tuple(command) if command is not None else None,
    )
    return smoke_request(request, steps=steps, stream=stream)


def smoke_request(request: SweepRequest, *, steps: int = 5, stream: TextIO | None = None) -> SmokeResult:
    """:func:`smoke` of the experiment ``request`` asks for (what ``tunetrain sweep --smoke``
    runs once it has built the request)."""
    from tunetrain import tracking
    from tunetrain.api import smoke_checks as checks_of
    from tunetrain.tracking import schema

    out = stream or sys.stdout
    if steps < 2:
        raise ExperimentError(
            f"--smoke-steps must be at least 2 (to see the metric improve), but got {steps}.",
            fix="Pass --smoke-steps 5, or leave it out.",
        )
    exp = request.resolve()
    tiny = checks_of.smoke_experiment(exp, steps=steps)
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    # A smoke run's own sweeps: no report, nothing registered, not resumable from the journal.
    command = request.command or (f"tunetrain.smoke({exp.source_path or exp.name!r})",)
    asked = dataclasses.replace(request, command=tuple(command), report=False, register=False)
    try:
        result = execute(
            dataclasses.replace(asked, name=request.name or f"{exp.name}-smoke-{stamp}"),
            experiment=tiny,
            launch=Launch(stream=out),
        )
    except ExperimentError as exc:
        print(f"\nSmoke test of {exp.name}:\n  FAIL  resources or set-up: {exc}", file=out, flush=True)
        raise
    outcome = result.ran
    store = tracking.SweepStore(result.tracking_uri)
    if outcome.parent_run_id:
        store.set_tags(outcome.parent_run_id, {schema.SMOKE_TAG: "true"})
    reported = sorted({key for t in outcome.trials for key in t.last})
    history = store.histories(list(outcome.run_ids.values()), reported)
    checks = [checks_of.resources_check(tiny)]
    trial_checks, trial = checks_of.trial_checks(tiny, outcome, history)
    checks += trial_checks
    if trial is not None and trial.status != "failed" and not outcome.bad_input:
        verdict = checks_of.checkpoint_check(exp, trial)
        if verdict is None:
            # The latest, as a resumed or restarted trial would (Tune keeps it whatever the policy).
            latest = trial.checkpoints[-1]
            print(f"\nSmoke round trip: a new trial starts from {latest['path']}", file=out, flush=True)
            # Its own sweep's console is kept back and shown only if the round trip fails: a
            # trial with no step left is "failed" there, which the verdict below explains.
            said = io.StringIO()
            restored = execute(
                dataclasses.replace(asked, name=f"{exp.name}-smoke-restore-{stamp}"),
                experiment=checks_of.restore_experiment(tiny),
                launch=Launch(stream=said, initial_checkpoint=latest["path"]),
            ).ran
            if restored.parent_run_id:
                store.set_tags(restored.parent_run_id, {schema.SMOKE_TAG: "true"})
            verdict = checks_of.round_trip_check(latest, restored)
            if verdict.verdict == "FAIL":
                print(said.getvalue(), file=out, end="", flush=True)
        checks.append(verdict)
        measured = checks_of.timings(trial, history)
        checks.append(checks_of.timing_check(measured))
        if measured is not None and outcome.parent_run_id:  # for the cost estimate of a dry run
            store.set_tags(
                outcome.parent_run_id,
                {schema.SMOKE_STARTUP_TAG: f"{measured[0]:.6g}", schema.SMOKE_ITERATION_TAG: f"{measured[1]:.6g}"},
            )
    smoked = SmokeResult(checks=checks, sweep=result)
    failed = [c for c in checks if c.verdict == "FAIL"]
    ran = trial.iterations if trial is not None else 0
    print(f"\nSmoke test of {exp.name} ({ran} of {steps} steps ran):" if ran != steps else
          f"\nSmoke test of {exp.name} ({steps} steps):", file=out)  # fmt: skip
    for check in checks:
        print(check.line(), file=out)
    print(
        f"Smoke: {'FAILED, ' + str(len(failed)) + ' check(s)' if failed else 'all checks passed'}.",
        file=out,
        flush=True,
    )
    return smoked
