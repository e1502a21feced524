"""MLflow recording and reading: the only package that imports mlflow (besides the one seam
of private APIs, :mod:`tunetrain._internals`).

One MLflow experiment per tunetrain experiment, one parent run per sweep and one child run
per trial (linked with the ``mlflow.parentRunId`` tag). Every call to MLflow happens on one
background thread, fed by a queue, so Ray Tune's event loop never waits on the tracking
store; metric points gather for up to a second and go out as one ``log_batch`` call per run,
never one call per metric key (on sqlite one point per call costs 4.5-7 ms, a batch 0.2 ms
per point). A tracking error never kills the sweep: the first one is printed once, clearly,
and the rest are counted.

- :mod:`~tunetrain.tracking.schema`: every tag, param and artifact name of the record;
- :mod:`~tunetrain.tracking.journal`: the records on local disk before they are sent;
- :mod:`~tunetrain.tracking.sweep_log`: the run side's records (sweep facts, TrialRecords)
  turned into MLflow's params, tags, metrics and artifacts: the run side speaks records;
- :mod:`~tunetrain.tracking.recorder`: the background recorder (and the no-op one);
- :mod:`~tunetrain.tracking.store`: reading sweeps back from any tracking URI;
- :mod:`~tunetrain.tracking.registry`: a trial's checkpoint as a registered model version;
- :mod:`~tunetrain.tracking.ui`: the MLflow UI server;
- :mod:`~tunetrain.tracking.uri`: which store (flag, ``MLFLOW_TRACKING_URI``, default), checked.
"""

from tunetrain.tracking import schema
from tunetrain.tracking._rules import check_params, metric_key_problem, param_value_problem, suggested_metric_key
from tunetrain.tracking.journal import JOURNAL_NAME, Journal, JournalState
from tunetrain.tracking.recorder import SweepRecorder
from tunetrain.tracking.recording import NullRecorder, Recorder
from tunetrain.tracking.registry import RegisteredVersion, register_version
from tunetrain.tracking.store import (
    RunRecord,
    SmokeLookup,
    SmokeTimings,
    SweepStore,
    check_store,
    default_tracking_uri,
    open_in_background,
    smoke_timings,
    trial_shape,
)
from tunetrain.tracking.sweep_log import (
    StartedSweep,
    SweepFacts,
    SweepLog,
    records_from_journal,
    started_sweep,
)
from tunetrain.tracking.ui import (
    free_port,
    port_holder,
    report_page,
    start_ui_server,
    stop_ui_server,
    sweep_view,
    ui_command,
)
from tunetrain.tracking.uri import (
    TrackingURI,
    artifact_location,
    check_existing,
    resolve_tracking_uri,
    store_for_sweep,
)

__all__ = [
    "JOURNAL_NAME",
    "Journal",
    "JournalState",
    "NullRecorder",
    "Recorder",
    "RegisteredVersion",
    "RunRecord",
    "SmokeLookup",
    "SmokeTimings",
    "StartedSweep",
    "SweepFacts",
    "SweepLog",
    "SweepRecorder",
    "SweepStore",
    "TrackingURI",
    "artifact_location",
    "check_existing",
    "check_params",
    "check_store",
    "default_tracking_uri",
    "free_port",
    "metric_key_problem",
    "open_in_background",
    "param_value_problem",
    "port_holder",
    "records_from_journal",
    "register_version",
    "report_page",
    "resolve_tracking_uri",
    "schema",
    "smoke_timings",
    "start_ui_server",
    "started_sweep",
    "stop_ui_server",
    "store_for_sweep",
    "suggested_metric_key",
    "sweep_view",
    "trial_shape",
    "ui_command",
]
