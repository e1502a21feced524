"""The MLflow record's vocabulary: every tag, param, metric and artifact name a sweep's runs
use, in one place. Writers (the sweep log, the recorder, smoke, replay) and readers (analysis,
replay, resume, plots, the report) take the names from here; docs/tracking.md describes them.

A sweep is one parent run (``ROLE_TAG`` = ``"sweep"``) and one child run per trial
(``PARENT_TAG`` = the parent's run id), in the MLflow experiment named after the experiment.
"""

from __future__ import annotations

TAG_PREFIX = "tunetrain."  # every tunetrain tag (and the seed param) starts so
PARENT_TAG = "mlflow.parentRunId"  # MLflow's own: a trial's run -> its sweep's parent run

# -- on every run ------------------------------------------------------------------------
SWEEP_ID_TAG = "tunetrain.sweep_id"
STATUS_TAG = "tunetrain.status"  # a trial's tunetrain status (completed, stopped_early, ...)
ROLE_TAG = "tunetrain.role"  # "sweep" on a sweep's parent run

# -- the sweep's parent run ----------------------------------------------------------------
SWEEP_NAME_TAG = "tunetrain.sweep_name"
EXPERIMENT_FILE_TAG = "tunetrain.experiment_file"
EXPERIMENT_SHA256_TAG = "tunetrain.experiment_sha256"
SCHEDULER_TAG = "tunetrain.scheduler"
SEARCHER_TAG = "tunetrain.searcher"
SEARCHER_NOTE_TAG = "tunetrain.searcher_note"  # why: "as configured", or searcher="auto"'s choice
METRIC_TAG = "tunetrain.metric"
MODE_TAG = "tunetrain.mode"
OBJECTIVES_TAG = "tunetrain.objectives"  # "loss (min), acc (max)"
NUM_SAMPLES_TAG = "tunetrain.num_samples"
ROOT_SEED_TAG = "tunetrain.root_seed"
DETERMINISTIC_TAG = "tunetrain.deterministic"
BUDGET_TAG = "tunetrain.budget"
BASELINE_CONFIG_TAG = "tunetrain.baseline_config"  # JSON: the baseline trial's searched values
WARM_START_TAG = "tunetrain.warm_start"  # "SWEEP (N of M completed trials); ..."
WARM_START_TRIALS_TAG = "tunetrain.warm_start_trials"  # how many earlier trials the searcher got
CONSENT_TAG = "tunetrain.consent"  # --confirm-above: "--yes: <why>", "asked: <why>", "not asked: <why>"
WORKERS_PER_TRIAL_TAG = "tunetrain.workers_per_trial"  # "2", or "1-4" (elastic)
TRIAL_RUNNER_TAG = "tunetrain.trial_runner"  # in_process | worker_group | torch_trainer
MAX_CONCURRENT_TAG = "tunetrain.max_concurrent"
STORAGE_PATH_TAG = "tunetrain.storage_path"
COMMAND_TAG = "tunetrain.command"
ADDRESS_TAG = "tunetrain.address"
GIT_COMMIT_TAG = "tunetrain.git_commit"
GIT_DIRTY_TAG = "tunetrain.git_dirty"
GIT_TAG_PREFIX = "tunetrain."  # + each key of provenance.git_state()
HARDWARE_PREFIX = "hardware."  # hardware.cpus, hardware.gpu_names, ...
VERSION_PREFIX = "version."  # version.ray, version.torch, ...
ENVIRONMENT_PREFIXES = (VERSION_PREFIX, HARDWARE_PREFIX)
# ASHA's rungs ("1,2,4") and max_t, as the sweep's scheduler had them.
ASHA_RUNGS_TAG = "tunetrain.asha.rungs"
ASHA_MAX_T_TAG = "tunetrain.asha.max_t"
# Written at the sweep's end (again at each resumed session's end).
TRIALS_TAG = "tunetrain.trials"  # how many trials
TRIALS_STATUS_PREFIX = "tunetrain.trials."  # + status: how many trials ended so
BEST_RUN_ID_TAG = "tunetrain.best_run_id"
BEST_TRIAL_TAG = "tunetrain.best_trial"
BEST_CONFIG_TAG = "tunetrain.best_config"  # JSON
# ASHA's rungs ranked against the next: JSON [{"rung", "next", "trials", "rho"}, ...] (tunetrain.rungs)
RUNG_RANKING_TAG = "tunetrain.rung_ranking"
# ASHA's stops not made at a rung while it misled: JSON {"<rung>": trials} (algorithms/_rung_trust.py)
RUNG_OVERRULED_TAG = "tunetrain.rung_overruled"
BEST_METRIC_PREFIX = "best_"  # metric best_<metric>: one point per session, at step = resumes
STOP_REASON_TAG = "tunetrain.stop_reason"  # why fewer trials ran than planned (--budget)
CHECKPOINTS_KEPT_TAG = "tunetrain.checkpoints_kept"
CHECKPOINT_BYTES_TAG = "tunetrain.checkpoint_bytes"
PARETO_TRIALS_TAG = "tunetrain.pareto_trials"
PARETO_RUN_IDS_TAG = "tunetrain.pareto_run_ids"
# A resumed sweep: how often, and each session's command (RESUME_COMMAND_PREFIX + N).
RESUMES_TAG = "tunetrain.resumes"
RESUME_COMMAND_PREFIX = "tunetrain.resume_command."
# What a --smoke run measured, for the estimate of --dry-run/--estimate, and the trial
# shape it measured it with (an estimate uses a smoke of its own shape).
SMOKE_TAG = "tunetrain.smoke"  # "true" on a smoke run's parent runs
SMOKE_STARTUP_TAG = "tunetrain.smoke.startup_s"
SMOKE_ITERATION_TAG = "tunetrain.smoke.iteration_s"
SMOKE_SHAPE_TAGS = (WORKERS_PER_TRIAL_TAG, TRIAL_RUNNER_TAG)
# A replay: the run it replayed (on the new trial's run and its parent run).
# `tunetrain confirm`: the confirming sweep's parent run names the sweep it confirms, the
# confirmed sweep's parent run the sweeps that confirmed it, each trial the original trial
# whose config it runs again.
CONFIRMS_TAG = "tunetrain.confirms"  # the confirmed sweep's name
CONFIRMS_RUN_TAG = "tunetrain.confirms_run_id"
CONFIRMED_BY_TAG = "tunetrain.confirmed_by"  # "NAME, NAME" of the confirming sweeps
CONFIRM_OF_TAG = "tunetrain.confirm_of"  # on a confirming trial: the original trial's name
CONFIRM_ORIGINAL_TAG = "tunetrain.confirm_original"  # ... and that trial's best value there
REPLAY_OF_TAG = "tunetrain.replay_of"
REPLAY_OF_TRIAL_TAG = "tunetrain.replay_of_trial"

# Params of the parent run: SPACE_PARAM_PREFIX + key (the distribution, described),
# DEFAULT_PARAM_PREFIX + key (a fixed value).
SPACE_PARAM_PREFIX = "space."
DEFAULT_PARAM_PREFIX = "default."

# -- a trial's run --------------------------------------------------------------------------
# Params: the resolved config, flattened ("optimizer.lr"), plus SEED_TAG.
TRIAL_ID_TAG = "tunetrain.trial_id"  # Ray Tune's trial id
TRIAL_INDEX_TAG = "tunetrain.trial_index"
# -- a registered model version (register, and a sweep's end) --------------------------------
REGISTERED_CHECKPOINT_ARTIFACT = "best_checkpoint"  # on the trial's run, when no export_model
VERSION_SWEEP_TAG = "tunetrain.sweep"  # the sweep's name
VERSION_SWEEP_RUN_TAG = "tunetrain.sweep_run_id"
VERSION_TRIAL_TAG = "tunetrain.trial"
VERSION_TRIAL_RUN_TAG = "tunetrain.trial_run_id"
VERSION_CONFIG_TAG = "tunetrain.config"  # JSON
VERSION_CHECKPOINT_TAG = "tunetrain.checkpoint"  # the checkpoint folder it came from
REGISTERED_MODEL_TAG = "tunetrain.registered_model"  # on the sweep's parent run: "NAME/VERSION"
CHAMPION_ALIAS = "champion"  # the registered version a sweep's end may move to its best (--alias)
# MLflow's own: the experiment's kind (MLflow 3's UI reads it only while its GenAI / Model
# training switch is off: the switch's value, from the URL's workflowType or the browser's
# storage, decides; see tracking/ui.py), and a run's description (markdown).
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
RUN_NOTE_TAG = "mlflow.note.content"
# MLflow 3's UI: an experiment tag that holds a runs-page view (filter, sort, columns) in
# JSON, opened by the link's viewStateShareKey=KEY (its "Share" button writes the same).
SHARED_VIEW_TAG_PREFIX = "mlflow.sharedViewState."
REPORT_TAG = "tunetrain.report"  # the sweep's HTML report: its artifact path on the parent run
BASELINE_TAG = "tunetrain.baseline"  # "true" on the baseline trial's run
SEED_TAG = "tunetrain.seed"
WORKER_SEEDS_TAG = "tunetrain.worker_seeds"  # each worker's seed, rank order
ITERATIONS_TAG = "tunetrain.iterations"
DURATION_TAG = "tunetrain.duration_s"  # seconds it ran, summed over the sweep's sessions
ERROR_TAG = "tunetrain.error"  # the error's headline (the whole text: ERROR_ARTIFACT)
CHECKPOINT_LATEST_TAG = "tunetrain.checkpoint.latest"
CHECKPOINT_BEST_TAG = "tunetrain.checkpoint.best"
CHECKPOINT_STEP_TAG = "tunetrain.checkpoint.best_step"  # the step of the best checkpoint
RESTARTS_TAG = "tunetrain.restarts"
RESTART_REASON_TAG = "tunetrain.restart_reason"
NODES_TAG = "tunetrain.nodes"  # each worker's node IP, rank order
NODE_IDS_TAG = "tunetrain.node_ids"
WORLD_SIZE_TAG = "tunetrain.world_size"
DEVICE_TAG = "tunetrain.device"
DEVICE_NAME_TAG = "tunetrain.device_name"
DEVICE_MEMORY_TAG = "tunetrain.device_memory_gib"
OOM_BATCH_SETTINGS_TAG = "tunetrain.oom.batch_settings"
OOM_PEAK_MEMORY_TAG = "tunetrain.oom.peak_memory_gib"
PARETO_TAG = "tunetrain.pareto"  # "true" on a Pareto-optimal trial
PBT_EXPLOITS_TAG = "tunetrain.pbt.exploits"
PBT_LAST_DONOR_TAG = "tunetrain.pbt.last_donor"
PBT_LAST_DONOR_RUN_ID_TAG = "tunetrain.pbt.last_donor_run_id"
PBT_METRIC_PREFIX = "pbt."  # metrics pbt.<key>: the values PBT may change, from step 0

# -- artifacts --------------------------------------------------------------------------------
BEST_CONFIG_ARTIFACT = "best_config.json"  # parent run
GIT_DIFF_ARTIFACT = "git_diff.patch"  # parent run: the uncommitted changes it ran with
REPORT_ARTIFACT_DIR = "report"  # parent run: report.html and its PNGs
ERROR_TEXT_ARTIFACT = "error.txt"
CHECKPOINTS_ARTIFACT = "checkpoints.json"
RESTARTS_ARTIFACT = "restarts.json"
PBT_EXPLOITS_ARTIFACT = "pbt_exploits.json"
REPLAY_COMPARISON_ARTIFACT = "replay_comparison.json"

# tunetrain status -> MLflow run status. A trial stopped early or diverged ran as it
# should (the scheduler or the stop rule ended it); only a crash is a failed run.
RUN_STATUS = {
    "completed": "FINISHED",
    "stopped_early": "FINISHED",
    "diverged": "FINISHED",
    "oom": "FAILED",
    "timed_out": "FAILED",  # it stopped reporting and was stopped (max_trial_seconds)
    "failed": "FAILED",
    "interrupted": "KILLED",
}

# The parent-run tags that define what a sweep searches; a resumed sweep must keep them
# (num_samples may grow).
SETTINGS_TAGS = (
    METRIC_TAG,
    MODE_TAG,
    OBJECTIVES_TAG,
    SCHEDULER_TAG,
    SEARCHER_TAG,
    WORKERS_PER_TRIAL_TAG,
    TRIAL_RUNNER_TAG,
    ROOT_SEED_TAG,
    DETERMINISTIC_TAG,
    EXPERIMENT_SHA256_TAG,
)
# The sweep's provenance tags that every trial's run carries too (with HARDWARE_PREFIX and
# VERSION_PREFIX tags).
PROVENANCE_TAGS = (EXPERIMENT_SHA256_TAG, GIT_COMMIT_TAG, GIT_DIRTY_TAG, COMMAND_TAG, DETERMINISTIC_TAG)
