"""``tunetrain.replay``: one recorded trial run again from its MLflow record alone, and its
metric histories compared step by step (see :mod:`tunetrain.replay`)."""

from __future__ import annotations

import dataclasses
import sys
import tempfile
from datetime import datetime
from pathlib import Path
from typing import Any, TextIO

from tunetrain.storage import DEFAULT_STORAGE
from tunetrain.sweeps.request import SweepRequest
from tunetrain.sweeps.result import SweepResult
from tunetrain.sweeps.session import Launch, execute


@dataclasses.dataclass
class ReplayResult:
    """The replay's run, and how its metric histories compare with the original's."""

    original_run_id: str
    run_id: str | None  # the replay's MLflow run (None when it did not run to the end)
    comparisons: list[Any]  # tunetrain.replay.MetricComparison, one per metric
    provenance_differences: list[tuple[str, str, str]]  # (tag, original, replay)
    sweep: SweepResult

    @property
    def identical(self) -> bool:
        """Every metric's history is the same, step by step, times and rates aside (those
        differ on every run; see replay_compare.is_timing). False when nothing ran."""
        return self.run_id is not None and all(c.identical for c in self.comparisons if not c.timing)


def replay(
    run_id: str,
    *,
    steps: int | None = None,
    tracking_uri: str | None = None,
    storage: str = DEFAULT_STORAGE,
    address: str | None = None,
    stream: TextIO | None = None,
    command: list[str] | None = None,
    trust_changed_file: bool = False,
) -> ReplayResult:
    """Run the trial of MLflow run ``run_id`` again from its record (config, seed, workers,
    the experiment file its sweep ran), record it as a new run linked to the original, and
    compare the metric histories over ``steps`` steps (default: as many as it recorded). The
    downloaded experiment file is imported only with the sha256 its sweep recorded, unless
    ``trust_changed_file``."""
    from tunetrain import tracking
    from tunetrain.api import replay_compare as replaying
    from tunetrain.tracking import schema

    out = stream or sys.stdout
    found = tracking.resolve_tracking_uri(tracking_uri)
    tracking.check_existing(found)  # the recorded trial must be somewhere
    uri = found.uri
    store = tracking.SweepStore(uri)
    with tempfile.TemporaryDirectory(prefix="tunetrain-replay-") as folder:
        spec = replaying.prepare_replay(
            store, run_id, steps=steps, folder=Path(folder), trust_changed_file=trust_changed_file
        )
        print(replaying.describe(spec), file=out, flush=True)
        name = f"replay-{spec.run.name}-{datetime.now().strftime('%Y%m%d-%H%M%S')}"
        request = SweepRequest(
            experiment=spec.experiment,
            tracking_uri=found,  # with where it came from, for the line that names it
            storage=storage,
            address=address,
            name=name,
            command=tuple(command if command is not None else [f"tunetrain.replay({run_id!r})"]),
            report=False,
            register=False,
        )
        result = execute(request, experiment=spec.experiment, launch=Launch(stream=out, trial_seeds=(spec.seed,)))
    if not result.run_ids or result.status != "ok":
        print(f"\nThe replay did not run to the end (exit {result.exit_status}); nothing to compare.", file=out)
        return ReplayResult(run_id, None, [], [], result)
    new_run = next(iter(result.run_ids.values()))
    store.set_tags(new_run, {schema.REPLAY_OF_TAG: spec.run.run_id, schema.REPLAY_OF_TRIAL_TAG: spec.run.name})
    if result.parent_run_id:
        store.set_tags(result.parent_run_id, {schema.REPLAY_OF_TAG: spec.run.run_id})
    metrics = sorted(spec.run.metrics)
    comparisons = replaying.compare_histories(
        store.histories([spec.run.run_id], metrics), store.histories([new_run], metrics), steps=spec.steps
    )
    store.log_dict(new_run, replaying.to_record(comparisons), schema.REPLAY_COMPARISON_ARTIFACT)
    assert result.parent_run_id is not None  # a run id exists, so its parent does
    differences = replaying.provenance_differences(spec.parent.tags, store.run(result.parent_run_id).tags)
    replayed = ReplayResult(spec.run.run_id, new_run, comparisons, differences, result)
    print(f"\nReplay of {spec.run.name} (run {spec.run.run_id}) as run {new_run}:", file=out)
    print(replaying.comparison_table(comparisons), file=out)
    if differences:
        print("Recorded provenance that differs (original -> replay):", file=out)
        for key, old, new in differences:
            print(f"  {key}: {old} -> {new}", file=out)
    else:
        print("Recorded provenance: the same (package versions, hardware, deterministic mode, file hash).", file=out)
    verdict = "identical" if replayed.identical else "DIFFERENT"
    print(f"Metric histories: {verdict} over {spec.steps} step(s).", file=out, flush=True)
    return replayed
