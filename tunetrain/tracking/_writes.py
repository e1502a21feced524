"""What each journal entry does in the MLflow store (the recorder's thread runs these)."""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from mlflow.entities import Metric, Param, RunTag
from mlflow.exceptions import MlflowException
from mlflow.protos.databricks_pb2 import INVALID_PARAMETER_VALUE
from mlflow.tracking import MlflowClient

from tunetrain import _internals
from tunetrain.tracking._rules import (
    _MAX_METRICS_PER_BATCH,
    _MAX_PARAM_LENGTH,
    _MAX_PARAMS_PER_BATCH,
    _MAX_TAG_LENGTH,
    _MAX_TAGS_PER_BATCH,
    _transient,
    _trim,
    metric_key_problem,
)
from tunetrain.tracking.journal import Journal, JournalProgress
from tunetrain.tracking.schema import (
    BEST_CONFIG_ARTIFACT,
    BEST_CONFIG_TAG,
    BEST_RUN_ID_TAG,
    BEST_TRIAL_TAG,
    ERROR_TAG,
    ERROR_TEXT_ARTIFACT,
    EXPERIMENT_KIND,
    EXPERIMENT_KIND_TAG,
    PARENT_TAG,
    ROLE_TAG,
    RUN_NOTE_TAG,
    RUN_STATUS,
    STATUS_TAG,
    SWEEP_ID_TAG,
    TRIAL_ID_TAG,
)
from tunetrain.tracking.store import _metric_points


class _StoreWrites:
    """The recorder's writes to the store, one method per journal op (``_op_<op>``); the
    state they share is the recorder's (declared here for the type checker)."""

    experiment_name: str
    experiment_id: str | None
    parent_run_id: str | None
    _artifact_location: str | None
    _journal: Journal | None
    _run_ids: dict[str, str]
    _pending_metrics: dict[str, list[Metric]]
    _pending_since: float | None
    _progress: JournalProgress

    @property
    def _client(self) -> MlflowClient:
        raise NotImplementedError

    def _flush_metrics(self) -> None:
        if not self._pending_metrics:
            self._pending_since = None
            return
        if self._progress.may_exist(self._progress.pending_first):
            # Sent again (after an outage or a crash): leave out points already in the store.
            for run_id in list(self._pending_metrics):
                present = self._points(run_id, {m.key for m in self._pending_metrics[run_id]})
                self._pending_metrics[run_id] = [
                    m for m in self._pending_metrics[run_id] if (m.key, m.step) not in present
                ]
        refused: list[Exception] = []
        for run_id in list(self._pending_metrics):
            metrics = self._pending_metrics[run_id]
            for start in range(0, len(metrics), _MAX_METRICS_PER_BATCH):
                try:
                    self._send_points(run_id, metrics[start : start + _MAX_METRICS_PER_BATCH])
                except Exception as exc:
                    if _transient(exc):
                        raise  # kept pending: sent again, without what went out, when the store is back
                    refused.append(exc)  # a refused batch leaves the buffer too: no spinning on it
            del self._pending_metrics[run_id]  # gone out: a failure after this does not resend them
        self._pending_since = None
        if refused:
            raise refused[0]

    def _send_points(self, run_id: str, batch: list[Metric]) -> None:
        """One batch of a run's points. When the store refuses one point's name, the others
        still go (one bad key must not hold every valid point hostage); the refusal is raised."""
        good: list[Metric] = []
        bad: list[Metric] = []
        for m in batch:
            (bad if metric_key_problem(m.key) is not None else good).append(m)
        # A SQL store gets log_batch's rows without its per-point ORM work (the seam's
        # sql_log_metrics says why); any other store, log_batch itself.
        if good and not _internals.sql_log_metrics(self._client, run_id, good):
            self._client.log_batch(run_id, metrics=good)
        if bad:
            raise MlflowException(
                f"Metric {bad[0].key!r} not recorded: {metric_key_problem(bad[0].key)}",
                error_code=INVALID_PARAMETER_VALUE,
            )

    def _points(self, run_id: str, keys: set[str]) -> set[tuple[str, int]]:
        """The (metric, step) points of ``keys`` already in the run."""
        return {(key, step) for _, key, step, _, _ in _metric_points(self._client, [run_id], sorted(keys))}

    def _log_params_and_tags(self, run_id: str, params: Mapping[str, Any], tags: Mapping[str, Any]) -> None:
        param_list = [Param(key, _trim(str(value), _MAX_PARAM_LENGTH)) for key, value in params.items()]
        tag_list = [RunTag(key, _trim(str(value), _MAX_TAG_LENGTH)) for key, value in tags.items()]
        # One log_batch for both when they fit (each call is a transaction that first loads
        # the whole run: about 5 ms on sqlite, per trial and per call).
        batches = max(-(-len(param_list) // _MAX_PARAMS_PER_BATCH), -(-len(tag_list) // _MAX_TAGS_PER_BATCH))
        for i in range(batches):
            self._client.log_batch(
                run_id,
                params=param_list[i * _MAX_PARAMS_PER_BATCH : (i + 1) * _MAX_PARAMS_PER_BATCH],
                tags=tag_list[i * _MAX_TAGS_PER_BATCH : (i + 1) * _MAX_TAGS_PER_BATCH],
            )

    def _target(self, trial: str | None) -> str | None:
        """The run id of a trial (None: of the sweep's parent run)."""
        return self.parent_run_id if trial is None else self._run_ids.get(trial)

    def _apply(self, entry: dict[str, Any]) -> None:
        if entry["op"] == "metrics" and not self._pending_metrics:
            self._progress.pending_first = entry["seq"]
        getattr(self, f"_op_{entry['op']}")(entry)

    # -- what each journal entry does in the store -------------------------------------

    def _op_start_sweep(self, entry: dict[str, Any]) -> None:
        if self.parent_run_id is None:
            experiment = self._client.get_experiment_by_name(self.experiment_name)
            if experiment is None:
                self.experiment_id = self._client.create_experiment(
                    self.experiment_name,
                    artifact_location=self._artifact_location,
                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND},
                )
            elif experiment.lifecycle_stage == "deleted":  # deleted while the sweep started
                raise MlflowException(
                    f"The experiment {self.experiment_name!r} was deleted; restore it "
                    "(mlflow experiments restore) or remove it for good (mlflow gc).",
                    error_code=INVALID_PARAMETER_VALUE,
                )
            else:
                self.experiment_id = experiment.experiment_id
                if EXPERIMENT_KIND_TAG not in experiment.tags:  # made by an older tunetrain, or by hand
                    self._client.set_experiment_tag(self.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            found = self._find_run(f"tags.`{SWEEP_ID_TAG}` = '{entry['sweep_id']}' and tags.`{ROLE_TAG}` = 'sweep'")
            run_id = (
                found
                or self._client.create_run(
                    self.experiment_id,
                    run_name=entry["run_name"],
                    tags={SWEEP_ID_TAG: entry["sweep_id"], ROLE_TAG: "sweep"},
                ).info.run_id
            )
            self.parent_run_id = run_id
            if self._journal is not None:
                self._journal.write({"run": None, "run_id": run_id, "experiment_id": self.experiment_id}, sync=True)
        self._log_params_and_tags(self.parent_run_id, entry["params"], entry["tags"])

    def _op_resume_sweep(self, entry: dict[str, Any]) -> None:
        if self.parent_run_id is not None:
            self._client.update_run(self.parent_run_id, status="RUNNING")
            self._log_params_and_tags(self.parent_run_id, {}, entry["tags"])

    def _find_run(self, filter_string: str) -> str | None:
        if self.experiment_id is None:
            return None
        runs = self._client.search_runs([self.experiment_id], filter_string=filter_string, max_results=1)
        return runs[0].info.run_id if runs else None

    def _op_start_trial(self, entry: dict[str, Any]) -> None:
        trial, parent = entry["trial"], self.parent_run_id
        if parent is None or self.experiment_id is None or trial in self._run_ids:
            return
        trial_key = entry["tags"].get(TRIAL_ID_TAG, trial)
        found = None
        if self._progress.may_exist(entry["seq"]):
            found = self._find_run(f"tags.`{PARENT_TAG}` = '{parent}' and tags.`{TRIAL_ID_TAG}` = '{trial_key}'")
        run_id, rest = found, dict(entry["tags"])
        if run_id is None:
            fixed = {PARENT_TAG: parent, STATUS_TAG: "running", TRIAL_ID_TAG: trial_key}
            merged = {**fixed, **rest}  # as when they went out after the run: the entry's tags win
            # The trial's tags go in with the run when they fit in one call (one transaction
            # fewer per trial); otherwise the rest follow in batches, as the parameters do.
            with_run, rest = (merged, {}) if len(merged) <= _MAX_TAGS_PER_BATCH else (fixed, rest)
            run_id = self._client.create_run(
                self.experiment_id,
                start_time=int(entry["start_time"] * 1000),
                run_name=trial,
                tags={key: _trim(str(value), _MAX_TAG_LENGTH) for key, value in with_run.items()},
            ).info.run_id
        self._run_ids[trial] = run_id
        if self._journal is not None:
            self._journal.write({"run": trial, "run_id": run_id})
        params = entry["params"]
        if found is not None:  # the run's params stay its first (MLflow refuses a changed one)
            held = self._client.get_run(run_id).data.params
            params = {key: value for key, value in params.items() if key not in held}
        self._log_params_and_tags(run_id, params, rest)

    def _op_reopen_trial(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None:
            self._client.update_run(run_id, status="RUNNING")
            self._log_params_and_tags(run_id, {}, {STATUS_TAG: "running"})

    def _op_metrics(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is None:
            return
        ts = int(entry["timestamp"] * 1000)
        pending = self._pending_metrics.setdefault(run_id, [])
        pending.extend(Metric(key, float(value), ts, entry["step"]) for key, value in entry["metrics"].items())
        if self._pending_since is None:
            self._pending_since = time.monotonic()
        if len(pending) >= _MAX_METRICS_PER_BATCH:  # a full batch goes out at once
            self._flush_metrics()

    def _op_tags(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None:
            self._log_params_and_tags(run_id, {}, entry["tags"])

    def _op_dict(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None:
            self._client.log_dict(run_id, entry["content"], entry["name"])

    def _op_text(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None:
            self._client.log_text(run_id, entry["text"], entry["name"])

    def _op_artifact(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is not None and Path(entry["path"]).exists():
            self._client.log_artifact(run_id, entry["path"])

    def _op_end_trial(self, entry: dict[str, Any]) -> None:
        run_id = self._target(entry["trial"])
        if run_id is None:
            return
        self._flush_metrics()
        all_tags = {STATUS_TAG: entry["status"], **entry["tags"]}
        if entry.get("error"):
            all_tags[ERROR_TAG] = _trim(entry.get("error_headline") or entry["error"], 500)
            self._client.log_text(run_id, entry["error"], ERROR_TEXT_ARTIFACT)
        for name, content in (entry.get("artifacts") or {}).items():
            self._client.log_dict(run_id, content, name)
        self._log_params_and_tags(run_id, {}, all_tags)
        self._client.set_terminated(
            run_id, status=RUN_STATUS.get(entry["status"], "FINISHED"), end_time=int(entry["end_time"] * 1000)
        )

    def _op_end_sweep(self, entry: dict[str, Any]) -> None:
        parent = self.parent_run_id
        if parent is None:
            return
        all_tags = dict(entry["tags"])
        best_trial, best_config = entry.get("best_trial"), entry.get("best_config")
        if best_trial is not None and best_trial in self._run_ids:
            all_tags[BEST_RUN_ID_TAG] = self._run_ids[best_trial]
            all_tags[BEST_TRIAL_TAG] = best_trial
            all_tags[RUN_NOTE_TAG] = _best_note(  # what the run's page shows first
                best_trial, self._run_ids[best_trial], self.experiment_id, entry["best_metrics"], best_config
            )
        if best_config is not None:
            text = json.dumps(best_config, default=str)
            # A tag over MLflow's limit would be cut into invalid JSON: the whole config is
            # the artifact, and the tag says so instead.
            all_tags[BEST_CONFIG_TAG] = text if len(text) <= _MAX_TAG_LENGTH else _config_elsewhere(len(text))
            self._client.log_dict(parent, dict(best_config), BEST_CONFIG_ARTIFACT)
        now, step = int(entry["time"] * 1000), int(entry.get("step", 0))
        # The best value is one point per session of the sweep, at step = how often it was
        # resumed: the newest (MLflow's latest value: highest step) is the whole sweep's best,
        # and a session's end sent again writes nothing twice.
        present = self._points(parent, set(entry["best_metrics"]))
        metrics = [Metric(k, float(v), now, step) for k, v in entry["best_metrics"].items() if (k, step) not in present]
        if metrics:
            self._client.log_batch(parent, metrics=metrics)
        self._log_params_and_tags(parent, {}, all_tags)
        self._client.set_terminated(parent, status=entry["status"])


def _best_note(
    trial: str, run_id: str, experiment_id: str | None, best: Mapping[str, float], config: Mapping[str, Any] | None
) -> str:
    """The sweep's parent run description (markdown): its best trial, linked, the trial's
    best value and its config, which otherwise sit among dozens of tunetrain.* tags."""
    values = ", ".join(f"{key.removeprefix('best_')} = {value:.6g}" for key, value in best.items())
    link = f"#/experiments/{experiment_id}/runs/{run_id}" if experiment_id else ""
    lines = [f"**Best trial:** [{trial}]({link})" + (f", {values}" if values else "")]
    if config is not None:
        lines += ["", "**Best config:**", "", "```json", json.dumps(config, indent=2, default=str), "```"]
    return "\n".join(lines)


def _config_elsewhere(length: int) -> str:
    """The best-config tag of a config too long for a tag: valid JSON naming the artifact."""
    return json.dumps({"cut": f"{length:,} characters, over MLflow's tag limit", "artifact": BEST_CONFIG_ARTIFACT})
