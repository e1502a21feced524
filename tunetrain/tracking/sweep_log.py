"""The run side's records in MLflow's vocabulary: the one module that turns a sweep's facts
and its :class:`~tunetrain.records.TrialRecord`s into the params, tags, metrics and
artifacts :mod:`~tunetrain.tracking.schema` names. The run side (:mod:`tunetrain.sweeps`)
speaks in records through :class:`SweepLog`, as accelerate's trackers take plain values;
the recorder underneath (:class:`~tunetrain.tracking.SweepRecorder`, or the caller's) writes
what it is handed, journaled first.

The journal keeps what the recorder was handed (MLflow's params and tags), so that
:func:`records_from_journal` reads a sweep's trials back from any journal, old ones too."""

from __future__ import annotations

import dataclasses
import json
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from tunetrain import provenance
from tunetrain import space as spaces
from tunetrain.records import ENDED, SweepOutcome, TrialRecord, TrialStatus, error_headline
from tunetrain.tracking import schema
from tunetrain.tracking.recording import Recorder
from tunetrain.tracking.store import trial_shape


@dataclasses.dataclass(frozen=True, kw_only=True)
class SweepFacts:
    """What a sweep's parent run says of it: its settings, code and cluster, as the plan has them."""

    sweep_id: str
    name: str  # the sweep's name
    experiment_file: str  # "" for an Experiment no file defines
    experiment_sha256: str
    scheduler: str
    searcher: str
    searcher_note: str
    objectives: tuple[tuple[str, str], ...]  # (metric, mode), the first is the sweep's metric
    num_samples: int
    root_seed: int
    deterministic: bool
    budget: str | None  # as given (--budget)
    workers: str  # "2", or "1-4" for an elastic range
    runner: str  # in_process | worker_group | torch_trainer
    max_concurrent: int
    sweep_dir: str
    command: str
    address: str | None  # None: an embedded Ray
    nodes: Sequence[Mapping[str, float]]
    space: Mapping[str, str]  # dotted key -> the dimension, described
    defaults: Mapping[str, Any]  # dotted key -> value
    consent: str = ""
    warm_sources: tuple[str, ...] = ()
    warm_trials: int = 0
    baseline: Mapping[str, Any] | None = None
    asha_rungs: tuple[Sequence[int], int] | None = None  # the rungs and max_t


def sweep_params_tags(facts: SweepFacts) -> tuple[dict[str, Any], dict[str, Any]]:
    """Params and tags of the sweep's parent run: settings, code, versions, hardware."""
    params: dict[str, Any] = {schema.SPACE_PARAM_PREFIX + k: v for k, v in facts.space.items()}
    params.update({schema.DEFAULT_PARAM_PREFIX + k: v for k, v in facts.defaults.items()})
    cpus = sum(node.get("CPU", 0.0) for node in facts.nodes)
    gpus = sum(node.get("GPU", 0.0) for node in facts.nodes)
    metric, mode = facts.objectives[0]
    tags: dict[str, Any] = {
        schema.SWEEP_ID_TAG: facts.sweep_id,
        schema.SWEEP_NAME_TAG: facts.name,
        schema.EXPERIMENT_FILE_TAG: facts.experiment_file,
        schema.EXPERIMENT_SHA256_TAG: facts.experiment_sha256,
        schema.SCHEDULER_TAG: facts.scheduler,
        schema.SEARCHER_TAG: facts.searcher,
        schema.SEARCHER_NOTE_TAG: facts.searcher_note,
        schema.METRIC_TAG: metric,
        schema.MODE_TAG: mode,
        # Every objective, so that readers (tunetrain.results.analysis) know them even if the sweep dies.
        schema.OBJECTIVES_TAG: _objectives_text(facts.objectives),
        schema.NUM_SAMPLES_TAG: facts.num_samples,
        schema.ROOT_SEED_TAG: facts.root_seed,
        schema.DETERMINISTIC_TAG: str(facts.deterministic).lower(),
        schema.BUDGET_TAG: facts.budget or "none",
        **trial_shape(workers=facts.workers, runner=facts.runner),
        schema.MAX_CONCURRENT_TAG: facts.max_concurrent,
        schema.STORAGE_PATH_TAG: facts.sweep_dir,
        schema.COMMAND_TAG: facts.command,
        schema.ADDRESS_TAG: facts.address or "embedded",
        **_hardware(len(facts.nodes), cpus, gpus),
    }
    if facts.consent:
        tags[schema.CONSENT_TAG] = facts.consent
    if facts.warm_sources:
        tags[schema.WARM_START_TAG] = "; ".join(facts.warm_sources)
        tags[schema.WARM_START_TRIALS_TAG] = facts.warm_trials
    if facts.baseline is not None:
        tags[schema.BASELINE_CONFIG_TAG] = json.dumps(facts.baseline, sort_keys=True, default=str)
    if facts.asha_rungs is not None:  # the report's rung chart draws these
        tags[schema.ASHA_RUNGS_TAG] = ",".join(map(str, facts.asha_rungs[0]))
        tags[schema.ASHA_MAX_T_TAG] = facts.asha_rungs[1]
    tags.update({schema.VERSION_PREFIX + name: version for name, version in provenance.package_versions().items()})
    if facts.experiment_file:
        tags.update({schema.GIT_TAG_PREFIX + k: v for k, v in provenance.git_state(facts.experiment_file).items()})
    return params, tags


def _hardware(nodes: int, cpus: float, gpus: float) -> dict[str, Any]:
    return {
        schema.HARDWARE_PREFIX + "nodes": nodes,
        schema.HARDWARE_PREFIX + "cpus": f"{cpus:g}",
        schema.HARDWARE_PREFIX + "gpus": f"{gpus:g}",
        schema.HARDWARE_PREFIX + "cpu_model": provenance.cpu_model(),
        schema.HARDWARE_PREFIX + "driver_cpu_count": os.cpu_count() or 0,
        schema.HARDWARE_PREFIX + "gpu_names": ", ".join(provenance.gpu_names()) or "none",
        schema.HARDWARE_PREFIX + "gpu_memory_gib": ", ".join(f"{m:.1f}" for m in provenance.gpu_memory_gib()) or "none",
        schema.HARDWARE_PREFIX + "cuda": provenance.cuda_version() or "none",
    }


def _objectives_text(objectives: Sequence[tuple[str, str]]) -> str:
    return ", ".join(f"{m} ({mode})" for m, mode in objectives)


def trial_provenance(sweep_tags: Mapping[str, Any]) -> dict[str, Any]:
    """The sweep's provenance tags that every trial's run carries too (file hash, git state,
    command, deterministic mode, package versions, hardware)."""
    return {
        k: v for k, v in sweep_tags.items() if k in schema.PROVENANCE_TAGS or k.startswith(schema.ENVIRONMENT_PREFIXES)
    }


@dataclasses.dataclass(frozen=True)
class StartedSweep:
    """A sweep as its journal says it started: its parent run's params and tags."""

    params: Mapping[str, Any]
    tags: Mapping[str, Any]

    @property
    def sweep_id(self) -> str | None:
        return self.tags.get(schema.SWEEP_ID_TAG)

    @property
    def root_seed(self) -> int:
        return int(self.tags[schema.ROOT_SEED_TAG])

    @property
    def num_samples(self) -> int:
        return int(self.tags[schema.NUM_SAMPLES_TAG])

    def changes(self, facts: SweepFacts) -> list[str]:
        """What differs between the sweep as it started and as ``facts`` would resume it."""
        return sweep_changes(self, *sweep_params_tags(facts))


def sweep_changes(started: StartedSweep, params: Mapping[str, Any], tags: Mapping[str, Any]) -> list[str]:
    """What differs between the sweep as it started and a parent run of ``params`` and
    ``tags``; empty when it may resume. More trials (``num_samples``) is not a change; fewer is."""
    found: list[str] = []
    old = {
        **{f"param {k}": v for k, v in started.params.items()},
        **{k: started.tags.get(k) for k in schema.SETTINGS_TAGS},
    }
    new = {**{f"param {k}": v for k, v in params.items()}, **{k: tags.get(k) for k in schema.SETTINGS_TAGS}}
    for key in sorted(set(old) | set(new)):
        before, after = old.get(key), new.get(key)
        if _normal(before) != _normal(after):
            label = key.removeprefix("tunetrain.")
            if key == schema.EXPERIMENT_SHA256_TAG:
                found.append(f"the experiment file's content (sha256 {str(before)[:12]} -> {str(after)[:12]})")
            else:
                found.append(f"{label}: {before!r} -> {after!r}")
    if int(tags[schema.NUM_SAMPLES_TAG]) < started.num_samples:
        found.append(f"num_samples: {started.num_samples} -> {tags[schema.NUM_SAMPLES_TAG]} (it may only grow)")
    return found


def _normal(value: Any) -> str:
    """A value as the journal holds it (JSON: tuples are lists), for comparing."""
    return json.dumps(value, default=str, sort_keys=True)


def started_sweep(entries: Sequence[Mapping[str, Any]]) -> StartedSweep:
    """The sweep's parent run as its journal's first ``start_sweep`` entry holds it."""
    start = next((entry for entry in entries if entry.get("op") == "start_sweep"), None)
    if start is None:
        return StartedSweep(params={}, tags={})
    return StartedSweep(params=dict(start.get("params") or {}), tags=dict(start.get("tags") or {}))


def records_from_journal(
    entries: Sequence[Mapping[str, Any]], *, metric: str, mode: str, score: str
) -> dict[str, TrialRecord]:
    """The trials a sweep's journal recorded, as the sweep's callback had them (by Tune trial
    id): config, seed, steps, best value, checkpoints (ranked by ``score``), restarts,
    status. What the journal holds is what the callback saw, so a resumed sweep goes on from
    exactly there."""
    records: dict[str, TrialRecord] = {}
    by_name: dict[str, TrialRecord] = {}
    for entry in entries:
        op, name = entry["op"], str(entry.get("trial"))
        if op == "start_trial":
            tags = entry["tags"]
            record = TrialRecord(
                name=name,
                index=int(tags[schema.TRIAL_INDEX_TAG]),
                trial_id=str(tags[schema.TRIAL_ID_TAG]),
                # The journal keeps the values themselves (the seed is a tunetrain.* param).
                config=spaces.unflatten(
                    {k: v for k, v in entry["params"].items() if not k.startswith(schema.TAG_PREFIX)}
                ),
                seed=int(tags[schema.SEED_TAG]),
                baseline=tags.get(schema.BASELINE_TAG) == "true",
                start_time=float(entry["start_time"]),
                running_since=float(entry["start_time"]),
            )
            records[record.trial_id] = by_name[name] = record
            continue
        found = by_name.get(name)
        if found is None:  # a record of the sweep's parent run
            continue
        _replay(found, entry, metric=metric, mode=mode, score=score)
    return records


def _replay(record: TrialRecord, entry: Mapping[str, Any], *, metric: str, mode: str, score: str) -> None:
    """One journal entry of a trial applied to its record (the callback's TrialRecord methods)."""
    op = entry["op"]
    if op == "metrics" and entry["step"] > 0:  # step 0: PBT's mutable values
        metrics = {k: float(v) for k, v in entry["metrics"].items()}
        record.reported(int(entry["step"]), metrics, metric=metric, mode=mode)
    elif op == "tags":
        tags = entry["tags"]
        if schema.CHECKPOINT_LATEST_TAG in tags:
            record.checkpointed(tags[schema.CHECKPOINT_LATEST_TAG], score=score)
        if schema.RESTART_REASON_TAG in tags:
            record.restarts.append(str(tags[schema.RESTART_REASON_TAG]))
    elif op == "reopen_trial":
        record.reopened(float(entry.get("time", record.start_time)))
    elif op == "end_trial":
        record.ended(entry["status"], float(entry["end_time"]), entry.get("error"))


class SweepLog:
    """What the run side records through: a sweep's facts and its trials' records in, the
    recorder's MLflow calls out. ``provenance`` (the parent run's code, version and hardware
    tags) is copied onto every trial's run once the sweep has started."""

    def __init__(self, recorder: Recorder) -> None:
        self.recorder = recorder
        self.provenance: dict[str, Any] = {}

    # -- the sweep's parent run ---------------------------------------------------------

    def start_sweep(self, facts: SweepFacts) -> str | None:
        """The parent run, with the experiment file and, when its git tree is dirty, the diff."""
        params, tags = sweep_params_tags(facts)
        self.provenance = trial_provenance(tags)
        parent = self.recorder.start_sweep(run_name=facts.name, params=params, tags=tags, sweep_id=facts.sweep_id)
        if parent is None and self.recorder.error_count:  # refused: the caller ends here
            return None
        if facts.experiment_file:
            self.recorder.log_sweep_artifact(facts.experiment_file)
            dirty = tags.get(schema.GIT_DIRTY_TAG) == "true"
            diff = provenance.git_diff(facts.experiment_file) if dirty else ""
            if diff:  # the uncommitted changes the sweep ran with
                self.recorder.log_sweep_text(diff, schema.GIT_DIFF_ARTIFACT)
        return parent

    def resume_sweep(self, facts: SweepFacts, *, resumes: int) -> str | None:
        """The parent run reopened for the ``resumes``-th resume, with its command."""
        self.provenance = trial_provenance(sweep_params_tags(facts)[1])
        return self.recorder.resume_sweep(
            tags={
                schema.RESUMES_TAG: resumes,
                f"{schema.RESUME_COMMAND_PREFIX}{resumes}": facts.command,
                schema.NUM_SAMPLES_TAG: facts.num_samples,
            }
        )

    def pareto_front(self, front: Sequence[TrialRecord]) -> None:
        for record in front:
            self.recorder.set_tags(record.name, {schema.PARETO_TAG: "true"})

    def end_sweep(self, outcome: SweepOutcome, *, status: str, resumes: int, disk_measured: bool) -> None:
        """The parent run ended: its best trial and config, what stopped it, the checkpoints'
        disk use (when ``disk_measured``: local storage), the Pareto front, and every
        status's count (0 included: a resumed sweep's counts replace the last session's)."""
        tags: dict[str, Any] = {}
        if outcome.stop_reason:
            tags[schema.STOP_REASON_TAG] = outcome.stop_reason
        if outcome.rung_rankings:  # how far ASHA's stops could be trusted (tunetrain.rungs)
            tags[schema.RUNG_RANKING_TAG] = json.dumps([r.as_dict() for r in outcome.rung_rankings])
            overruled = sorted(outcome.overruled_stops.items())
            tags[schema.RUNG_OVERRULED_TAG] = json.dumps({str(rung): trials for rung, trials in overruled})
        if disk_measured:
            tags[schema.CHECKPOINTS_KEPT_TAG] = outcome.checkpoints_kept
            tags[schema.CHECKPOINT_BYTES_TAG] = outcome.checkpoint_bytes
        if outcome.objectives:
            tags |= {
                schema.OBJECTIVES_TAG: _objectives_text(outcome.objectives),
                schema.PARETO_TRIALS_TAG: ",".join(r.name for r in outcome.pareto),
                schema.PARETO_RUN_IDS_TAG: ",".join(self.recorder.run_id(r.name) or "" for r in outcome.pareto),
            }
        best = outcome.best
        self.recorder.end_sweep(
            status=status,
            best_metrics={schema.BEST_METRIC_PREFIX + outcome.metric: best.best_value}
            if best and best.best_value is not None
            else {},
            tags={
                **tags,
                schema.TRIALS_TAG: len(outcome.trials),
                **{schema.TRIALS_STATUS_PREFIX + s: outcome.count(s) for s in ENDED},
            },
            best_trial=best.name if best else None,
            best_config=best.config if best else None,
            step=resumes,
        )

    # -- a trial's run --------------------------------------------------------------------

    def start_trial(self, record: TrialRecord, *, sweep_id: str, worker_seeds: Sequence[int]) -> None:
        """The trial's run: its config and seed as params; its ids, seeds and the sweep's provenance as tags."""
        self.recorder.start_trial(
            record.name,
            params={**spaces.flatten(record.config), schema.SEED_TAG: record.seed},
            tags={
                schema.TRIAL_ID_TAG: record.trial_id,
                schema.TRIAL_INDEX_TAG: record.index,
                schema.SWEEP_ID_TAG: sweep_id,
                schema.SEED_TAG: record.seed,
                # Each worker's seed (rank order): derived from the trial's seed and its rank.
                schema.WORKER_SEEDS_TAG: ",".join(str(seed) for seed in worker_seeds),
                **({schema.BASELINE_TAG: "true"} if record.baseline else {}),
                **self.provenance,
            },
            start_time=record.start_time,
        )

    def reopen_trial(self, record: TrialRecord) -> None:
        self.recorder.reopen_trial(record.name)

    def report(self, record: TrialRecord, *, step: int, metrics: Mapping[str, float]) -> None:
        self.recorder.log_metrics(record.name, step=step, metrics=metrics, timestamp=time.time())

    def mutable_values(self, record: TrialRecord, *, step: int, values: Mapping[str, float]) -> None:
        """The values PBT may change, as metrics (``pbt.KEY``) at ``step``."""
        metrics = {schema.PBT_METRIC_PREFIX + key: value for key, value in values.items()}
        self.recorder.log_metrics(record.name, step=step, metrics=metrics, timestamp=time.time())

    def placed(self, record: TrialRecord, nodes: Sequence[Mapping[str, Any]]) -> None:
        """Where the trial's workers run (rank order): node and device."""
        self.recorder.set_tags(
            record.name,
            {
                schema.NODES_TAG: ",".join(n["ip"] for n in nodes),
                schema.NODE_IDS_TAG: ",".join(n["node_id"] for n in nodes),
                schema.WORLD_SIZE_TAG: len(nodes),
                schema.DEVICE_TAG: ",".join(n["device"] for n in nodes),
                schema.DEVICE_NAME_TAG: nodes[0]["device_name"],
                schema.DEVICE_MEMORY_TAG: nodes[0]["device_memory_gib"],
            },
        )

    def restarted(self, record: TrialRecord) -> None:
        """The trial's restarts from its checkpoint: count, last reason, all of them."""
        self.recorder.set_tags(
            record.name,
            {schema.RESTARTS_TAG: len(record.restarts), schema.RESTART_REASON_TAG: record.restarts[-1]},
        )
        self.recorder.log_dict(
            record.name,
            schema.RESTARTS_ARTIFACT,
            {"restarts": [{"after_step": record.iterations, "reason": r} for r in record.restarts]},
        )

    def exploited(self, record: TrialRecord, *, history: Sequence[Mapping[str, Any]], donor: TrialRecord) -> None:
        """A PBT exploit of ``record`` (the last of its ``history``) from ``donor``."""
        self.recorder.set_tags(
            record.name,
            {
                schema.PBT_EXPLOITS_TAG: len(history),
                schema.PBT_LAST_DONOR_TAG: donor.name,
                schema.PBT_LAST_DONOR_RUN_ID_TAG: history[-1]["donor_run_id"] or "",
            },
        )
        self.recorder.log_dict(record.name, schema.PBT_EXPLOITS_ARTIFACT, {"exploits": list(history)})

    def checkpointed(self, record: TrialRecord, path: str) -> None:
        self.recorder.set_tags(record.name, {schema.CHECKPOINT_LATEST_TAG: path})

    def out_of_memory(self, record: TrialRecord, *, batch_settings: Mapping[str, Any], peak_gib: Any) -> None:
        """What a trial that ran out of memory had: its batch settings and peak memory."""
        tags: dict[str, Any] = {schema.OOM_BATCH_SETTINGS_TAG: json.dumps(dict(batch_settings), default=str)}
        if peak_gib is not None:
            tags[schema.OOM_PEAK_MEMORY_TAG] = peak_gib
        self.recorder.set_tags(record.name, tags)

    def end_trial(self, record: TrialRecord, *, status: TrialStatus, best: Mapping[str, Any] | None) -> None:
        """The trial's run ended (``record.ended`` was called): its steps, the time it ran,
        its best kept checkpoint and all of them, its error."""
        assert record.end_time is not None
        # The time it ran, without the time a Ctrl+C or crash kept the sweep stopped.
        tags: dict[str, Any] = {schema.ITERATIONS_TAG: record.iterations, schema.DURATION_TAG: round(record.ran_s, 3)}
        if best is not None:
            tags[schema.CHECKPOINT_BEST_TAG] = best["path"]
            tags[schema.CHECKPOINT_STEP_TAG] = best["step"]
        artifacts = (
            {schema.CHECKPOINTS_ARTIFACT: {"checkpoints": record.checkpoints, "best": best}}
            if record.checkpoints
            else {}
        )
        self.recorder.end_trial(
            record.name,
            status=status,
            end_time=record.end_time,
            tags=tags,
            error=record.error,
            error_headline=error_headline(record.error) if record.error else "",
            artifacts=artifacts,
        )

    # -- the recorder's state, as the run side reads it ----------------------------------

    def run_id(self, trial: str) -> str | None:
        return self.recorder.run_id(trial)

    def flush(self, timeout: float | None = None) -> bool:
        return self.recorder.flush(timeout=timeout)

    def close(self, timeout: float | None = None) -> None:
        self.recorder.close(timeout=timeout)
