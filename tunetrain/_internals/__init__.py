"""The one seam to Ray's, MLflow's, Optuna's and CPython's private and internal APIs.

Every use of a private name (``_private``, ``_internal``, an underscored attribute or
method) of another library lives here, in a named function or class, with the version it was
written against and what breaks without it; tests/test_internals.py exercises each against
the pinned versions, so that an upgrade fails there first, naming the function. Nothing
else in tunetrain reaches into Ray or MLflow internals (a grep for ``._internal``,
``._private``, ``_loads_with_cloudpickle`` or ``SqlMetric`` outside this file finds
nothing; tests/test_layout.py finds every other library's private name by the syntax
tree), and where a public API does the job it is used instead.

Written against Ray 2.60.0 and MLflow 3.17.2. Ray is imported inside the functions (the
CLI's quick commands need none of it); MLflow only in :func:`sql_metric_points` and
:func:`sql_log_metrics`, which the tracking package calls (the one other place that imports
mlflow).
"""

from tunetrain._internals._mlflow import (
    mlflow_metric_key_problem,
    sql_log_metrics,
    sql_metric_points,
    sqlite_experiment_stage,
)
from tunetrain._internals._python import (
    exit_after_exit_handlers,
    picklable_sampler,
)
from tunetrain._internals._ray import (
    ExploitHooks,
    abort_train_run,
    enable_ray_token_auth,
    get_train_fn_utils,
    host_oom_fails_the_trial,
    hyperband_bracket_sizes,
    local_ray_address,
    ray_address_file,
    ray_logs_dir,
    read_tune_checkpoints,
    repair_torn_tune_state,
    restore_tuner,
    resumed_search,
    retarget_tune_checkpoints,
    route_raylet_messages,
    running_ray_instances,
    set_train_fn_utils,
    stop_and_kill_trial,
    stop_before_start,
    torn_error_file_reads_as_absent,
    train_api_in_tune_function,
    train_fn_utils_base,
    tune_session,
)
from tunetrain._internals._tune_signal import note_tune_stop_signal, signal_handlers_kept

__all__ = [
    "ExploitHooks",
    "abort_train_run",
    "enable_ray_token_auth",
    "exit_after_exit_handlers",
    "get_train_fn_utils",
    "host_oom_fails_the_trial",
    "hyperband_bracket_sizes",
    "local_ray_address",
    "mlflow_metric_key_problem",
    "note_tune_stop_signal",
    "picklable_sampler",
    "ray_address_file",
    "ray_logs_dir",
    "read_tune_checkpoints",
    "repair_torn_tune_state",
    "restore_tuner",
    "resumed_search",
    "retarget_tune_checkpoints",
    "route_raylet_messages",
    "running_ray_instances",
    "set_train_fn_utils",
    "signal_handlers_kept",
    "sql_log_metrics",
    "sql_metric_points",
    "sqlite_experiment_stage",
    "stop_and_kill_trial",
    "stop_before_start",
    "torn_error_file_reads_as_absent",
    "train_api_in_tune_function",
    "train_fn_utils_base",
    "tune_session",
]
