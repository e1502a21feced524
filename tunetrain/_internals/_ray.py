"""The seam's uses of Ray's private names: Ray core, Ray Tune, Ray Train V2 (see :mod:`tunetrain._internals`)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

# -- Ray core ----------------------------------------------------------------------------


def ray_logs_dir() -> str:
    """The connected Ray session's log folder (printed so users find the workers' output).

    Ray 2.60: ``ray._private.worker._global_node.get_logs_dir_path()``; there is no public
    getter. Without it the console names Ray's default folder, which is right for an
    embedded Ray started with default settings only.
    """
    import ray

    try:
        node = ray._private.worker._global_node
        return str(node.get_logs_dir_path()) if node is not None else "/tmp/ray/session_latest/logs"
    except AttributeError:
        return "/tmp/ray/session_latest/logs"


def local_ray_address(temp_dir: str | None = None) -> str | None:
    """The GCS address of the Ray that ``ray start --head`` last started on this machine with
    this ``--temp-dir`` (None: Ray's default, what ``ray.init()`` with no address joins), or
    None; the caller checks that it still answers.

    Ray 2.60: ``ray._private.services.find_bootstrap_address(temp_dir)`` reads
    ``ray_current_cluster`` in that temporary folder (``ray stop`` removes it). Without it a
    sweep would not see the machine's running Ray and would start a second one.
    """
    from ray._private import services

    address = services.find_bootstrap_address(temp_dir)
    return str(address).strip() or None if address else None


def ray_address_file(temp_dir: str | None = None) -> str:
    """The file :func:`local_ray_address` reads (its owner is the user who started that Ray).

    Ray 2.60: ``ray._private.utils.get_ray_address_file(temp_dir)``.
    """
    from ray._private.utils import get_ray_address_file

    return str(get_ray_address_file(temp_dir))


def running_ray_instances() -> set[str]:
    """The GCS addresses of every Ray running on this machine, embedded ones too (their
    ``gcs_server`` processes, found by their command lines).

    Ray 2.60: ``ray._private.services.find_gcs_addresses()``, which caches a non-empty answer
    (cleared first, so a Ray stopped since is not reported). Without it a sweep could not warn
    that it starts a second Ray beside another sweep's.
    """
    from ray._private import services

    services.find_gcs_addresses.cache_clear()  # type: ignore[attr-defined]  # Ray sets it on the function
    return set(services.find_gcs_addresses())


def enable_ray_token_auth() -> bool:
    """Turn Ray's token authentication on in this running process; False when this Ray has
    no such function (the caller then sets ``RAY_AUTH_MODE=token`` for child processes).

    Ray 2.60: ``ray._private.authentication.authentication_token_setup._enable_token_auth``
    sets ``RAY_AUTH_MODE`` and refreshes Ray's cached config (the variable alone is read
    only at start-up). Without it, connecting to a ``ray start`` cluster fails after a
    minute with "Authentication token is missing".
    """
    try:
        from ray._private.authentication.authentication_token_setup import _enable_token_auth
    except ImportError:
        return False
    _enable_token_auth()
    return True


def route_raylet_messages(logger: logging.Logger) -> None:
    """Send the raylet's messages to the driver ("N PYTHON worker processes have been
    started", ...) to ``logger`` instead of stdout; other workers' output is untouched.

    Ray 2.60 prints them from a thread of its own through
    ``ray._private.worker.print_to_stdstream``, even with ``log_to_driver=False``, and has
    no setting for it; the printer is wrapped (once). Without it they flood the console.
    """
    from ray._private import worker

    original = worker.print_to_stdstream
    if getattr(original, "_tunetrain", False):
        return

    def print_to_stdstream(data: dict[str, Any], ignore_prefix: bool) -> None:
        if data.get("pid") == "raylet":
            for line in data.get("lines", []):
                logger.warning(line)
        else:
            original(data, ignore_prefix)

    print_to_stdstream._tunetrain = True  # type: ignore[attr-defined]
    worker.print_to_stdstream = print_to_stdstream


# -- Ray Tune ----------------------------------------------------------------------------


def hyperband_bracket_sizes(scheduler: Any) -> list[int]:
    """How many trials each bracket of Ray Tune's synchronous ``HyperBandScheduler`` takes
    (written for Ray 2.60). Ray keeps them behind private methods (``_get_n0``,
    ``_s_max_1``, ``_get_r0``); the formula is HyperBand's own: n0 = ceil(s_max_1 / (s + 1) *
    eta ** s) for the brackets with r0 = max_t * eta ** -s >= 1. Without it tunetrain could
    not size the searcher's concurrency limit to a bracket, and HyperBand would silently
    become FIFO (see :func:`tunetrain.algorithms.searcher_live_limit`)."""
    return [scheduler._get_n0(s) for s in range(scheduler._s_max_1) if scheduler._get_r0(s) > 0]


def restore_tuner(path: str, trainable: Any, *, param_space: Any, tune_config: Any, run_config: Any) -> Any:
    """``Tuner.restore`` of a sweep folder, with this run's TuneConfig and RunConfig.

    Tune restores the trials, the searcher's state and its counters from the folder, but the
    scheduler, stopper and callbacks as it pickled them when the sweep started; Ray 2.60's
    ``Tuner.restore`` takes no new ones, so they are set on its private ``_local_tuner``
    (``_tune_config``, ``_run_config``). Without it a resumed sweep records nothing (its
    callback would be the pickled one, without the recorder).
    """
    from ray import tune

    tuner = tune.Tuner.restore(
        path, trainable, param_space=param_space, resume_unfinished=True, resume_errored=False, restart_errored=False
    )
    local = tuner._local_tuner
    if local is None:
        raise RuntimeError("Tuner.restore gave a tuner without _local_tuner (Ray Client?): cannot resume here")
    local._tune_config, local._run_config = tune_config, run_config
    return tuner


def resumed_search(searcher: Any, num_samples: int) -> Any:
    """Tune's wrapper of a searcher (as ``Tuner`` builds it), whose restored count of trials
    to run becomes ``num_samples`` (a resumed sweep may be told to run more).

    Ray 2.60: ``SearchGenerator.set_state`` restores ``_total_samples`` and ``_finished``;
    they are raised after it. Without it ``tunetrain resume --num-samples N`` runs no more
    trials than the sweep started with.
    """
    from ray.tune.search import SearchGenerator

    class ResumedSearch(SearchGenerator):
        def set_state(self, state: dict[str, Any]) -> None:
            super().set_state(state)
            if self._total_samples < num_samples:
                self._total_samples, self._finished = num_samples, False

    return ResumedSearch(searcher)


def host_oom_fails_the_trial() -> None:
    """Make Tune end the one trial whose actor Ray's memory monitor killed, as it ends a trial
    whose actor died, instead of ending the whole sweep.

    Ray 2.60: Tune's private ``RayActorManager._actor_task_failed`` handles a trial actor's
    ``RayActorError`` (actor died) and ``RayTaskError``; anything else is re-raised as
    ``RuntimeError("Caught unexpected exception: ...")`` out of ``Tuner.fit``. When the host
    runs low on memory, the raylet kills the newest worker and the pending task of a killed
    actor fails with ``ray.exceptions.OutOfMemoryError``, which is neither: one trial's
    allocation ended every trial, with no summary and the parent run FAILED (issue 39). The
    error is passed on as an ``ActorDiedError``-like ``RayActorError`` whose text starts with
    ``OutOfMemoryError:`` (what the record reads). Idempotent; the driver's process only.
    """
    from ray.air.execution._internal.actor_manager import RayActorManager
    from ray.exceptions import OutOfMemoryError, RayActorError

    original = RayActorManager._actor_task_failed
    if getattr(original, "_tunetrain_oom", False):
        return

    def _actor_task_failed(self: Any, tracked_actor_task: Any, exception: Exception) -> None:
        if isinstance(exception, OutOfMemoryError):
            exception = RayActorError(error_msg=f"OutOfMemoryError: {exception}")
        original(self, tracked_actor_task, exception)

    _actor_task_failed._tunetrain_oom = True  # type: ignore[attr-defined]
    RayActorManager._actor_task_failed = _actor_task_failed  # type: ignore[method-assign]


def torn_error_file_reads_as_absent() -> None:
    """Make a trial's pickled error that does not load read as absent, so Tune falls back to
    the error's text file instead of ending ``Tuner.fit``.

    Ray 2.60: after every trial ended, ``Tuner.fit`` builds its ``ResultGrid``, which calls the
    private ``Trial.get_pickled_error`` of each errored trial: ``cloudpickle.loads`` of the
    ``error.pkl`` Tune wrote to the sweep's storage. On a full disk Tune's write of that file
    is cut short, and ``UnpicklingError`` escaped ``Tuner.fit`` with a traceback after the
    sweep had run (issue 39's full disk). tunetrain reads its trials' errors from its own
    record, not from the grid. Idempotent; the driver's process only.
    """
    from ray.tune.experiment.trial import Trial

    original = Trial.get_pickled_error
    if getattr(original, "_tunetrain_torn", False):
        return

    def get_pickled_error(self: Any) -> Exception | None:
        try:
            return original(self)
        except Exception:  # a torn pickle raises EOFError, UnpicklingError, ValueError, ...
            return None

    get_pickled_error._tunetrain_torn = True  # type: ignore[attr-defined]
    Trial.get_pickled_error = get_pickled_error  # type: ignore[method-assign]


def stop_before_start(controller: Any, trial: Any) -> None:
    """Stop a trial that never started (a budget refused it), from a scheduler's
    ``choose_trial_to_run``.

    Ray 2.60: the controller's ``stop_trial`` and the trial's ``init_local_path`` (Tune's
    result table at the end needs every trial's folder; without it the sweep ends with
    FileNotFoundError once a trial was refused).
    """
    trial.init_local_path()
    controller.stop_trial(trial)


def stop_and_kill_trial(controller: Any, trial: Any) -> None:
    """Stop a running trial that no longer answers and kill its process now (its Train
    workers, which it owns, die with it).

    Ray 2.60: the controller's ``stop_trial`` ends the trial (TERMINATED; the scheduler and
    searcher are told, with its last result) but only asks its actor to stop, an actor task
    that a train loop hung inside ``train()`` never runs; Tune kills it after
    ``TUNE_FORCE_TRIAL_CLEANUP_S`` (600 s), holding its CPUs until then. With
    ``reuse_actors`` it would instead keep the hung actor for the next trial, which then
    fails on it, so the controller's private ``_reuse_actors`` (the controller itself is the
    scheduler's wrapper's ``_tune_controller``) is off while it stops this one. The handle is
    the trial's ``temporary_state.ray_actor`` (Tune's internal state), read before
    ``stop_trial`` clears it.
    """
    import ray

    actor = trial.temporary_state.ray_actor
    tune_controller = getattr(controller, "_tune_controller", controller)
    reuse = tune_controller._reuse_actors
    tune_controller._reuse_actors = False
    try:
        controller.stop_trial(trial)
    finally:
        tune_controller._reuse_actors = reuse
    if actor is not None:
        ray.kill(actor, no_restart=True)


class ExploitHooks:
    """Mixin for Ray's PBT/PB2: calls ``self.exploited(trial, donor, old_config)`` after each
    exploit (the subclass records it).

    Ray 2.60: PBT clones a donor in its private ``_exploit(tune_controller, trial,
    trial_to_clone)``, the only place where recipient, donor and the new config meet; the
    mutated keys are its ``_hyperparam_mutations`` (PB2: ``_hyperparam_bounds``). Without it
    a PBT sweep's runs say nothing of their lineage (docs/schedulers.md).
    """

    def _exploit(self, tune_controller: Any, trial: Any, trial_to_clone: Any) -> None:
        old = dict(trial.config)
        before = self.before_exploit(trial, trial_to_clone)
        super()._exploit(tune_controller, trial, trial_to_clone)  # type: ignore[misc]
        self.exploited(trial, trial_to_clone, old, before)

    def mutated_space(self) -> Mapping[str, Any]:
        """The dimensions PBT/PB2 may change."""
        return getattr(self, "_hyperparam_mutations", None) or getattr(self, "_hyperparam_bounds", {})

    def before_exploit(self, trial: Any, donor: Any) -> Any:
        return None

    def exploited(self, trial: Any, donor: Any, old_config: dict[str, Any], before: Any) -> None:
        raise NotImplementedError


def repair_torn_tune_state(sweep_dir: str) -> str | None:
    """Before Tune restores a sweep: a newest saved experiment state that is not whole JSON
    is replaced by the driver's complete copy, or else set aside (Tune then restores the
    session before). Returns what was done, or None when the state was whole.

    Ray 2.60: the driver writes ``experiment_state-<session>.json`` into its staging folder
    (``<Ray's temp>/session_*/artifacts/*/<sweep>/driver_artifacts``) and a background
    syncer copies it to the sweep's folder with ``pyarrow.fs.copy_files``, which truncates
    the file first: a driver killed during the copy (once a second here) leaves it empty or
    cut, and ``tunetrain resume`` failed with "JSONDecodeError: Expecting value". The staging
    copy is whole unless the kill came during its own write, when the synced one is the one
    before. Found with Tune's private ``_find_newest_experiment_checkpoint``.
    """
    import glob
    import shutil
    import tempfile

    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint

    newest = _find_newest_experiment_checkpoint(sweep_dir)
    if newest is None or _whole_json(newest):
        return None
    name, sweep = os.path.basename(newest), os.path.basename(os.path.normpath(sweep_dir))
    # Ray's temporary folders: <tmp>/ray (an embedded Ray), <tmp>/tunetrain-ray-<uid> (tunetrain up).
    staged = os.path.join("session_*", "artifacts", "*", sweep, "driver_artifacts", name)
    found = glob.glob(os.path.join(os.environ.get("RAY_TMPDIR") or tempfile.gettempdir(), "*", staged))
    copies = sorted(set(found), key=os.path.getmtime, reverse=True)
    for copy in copies:
        if _whole_json(copy):
            shutil.copyfile(copy, newest + ".part")
            os.replace(newest + ".part", newest)
            return f"Tune's saved state {name} was cut by the kill; its driver's complete copy ({copy}) replaces it."
    os.replace(newest, newest + ".torn")
    return f"Tune's saved state {name} was cut by the kill and no complete copy is left: set aside as {name}.torn."


def _whole_json(path: str) -> bool:
    try:
        json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return False
    return True


def read_tune_checkpoints(sweep_dir: str) -> dict[str, str | None]:
    """Trial id -> the latest checkpoint that Tune's newest saved experiment state of the
    sweep names (what Tune restores the trial from); {} when there is no saved state."""
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
    from ray.tune.trainable.metadata import _TrainingRunMetadata

    state_path = _find_newest_experiment_checkpoint(sweep_dir)
    if state_path is None:
        return {}
    found: dict[str, str | None] = {}
    for trial_json, metadata_json in json.loads(Path(state_path).read_text())["trial_data"]:
        manager: Any = _TrainingRunMetadata.from_json_state(metadata_json).checkpoint_manager
        latest = manager.latest_checkpoint_result
        found[str(json.loads(trial_json)["trial_id"])] = latest.checkpoint.path if latest is not None else None
    return found


def retarget_tune_checkpoints(
    sweep_dir: str, choose: Callable[[str, str], tuple[str, int] | None]
) -> list[tuple[str, str, tuple[str, int] | None]]:
    """Rewrite Tune's newest saved experiment state so that no trial goes on from a
    checkpoint that is gone: for each trial whose latest checkpoint is missing on disk,
    ``choose(trial_id, missing_path)`` gives (path, step) of the checkpoint to go on from, or
    None to start again (or raises LookupError to leave the trial alone). Returns (trial id,
    missing path, choice) per trial changed.

    Ray 2.60's Tune saves its state at most once a second while deleting old checkpoints as
    new ones arrive; a sweep killed in between leaves a state naming a deleted checkpoint,
    and Tune then fails that trial ("Could not recover from checkpoint as it does not exist
    on storage anymore"; ray-project/ray#29099's fallback went with the old persistence
    code). The state is Tune's own JSON, read and written with Tune's private codecs
    (``_loads_with_cloudpickle``, ``TuneFunctionEncoder``), its ``_TrainingRunMetadata``
    and its checkpoint manager's ``_checkpoint_results`` / ``_latest_checkpoint_result``.
    """
    from ray import tune
    from ray.train._internal.session import _TrainingResult
    from ray.tune.execution.experiment_state import _find_newest_experiment_checkpoint
    from ray.tune.trainable.metadata import _TrainingRunMetadata
    from ray.tune.utils.serialization import TuneFunctionEncoder, _loads_with_cloudpickle

    state_path = _find_newest_experiment_checkpoint(sweep_dir)
    if state_path is None:
        return []
    state = json.loads(Path(state_path).read_text())
    changed: list[tuple[str, str, tuple[str, int] | None]] = []
    for entry in state["trial_data"]:
        trial_json, metadata_json = entry
        trial_state = _loads_with_cloudpickle(trial_json)
        metadata = _TrainingRunMetadata.from_json_state(metadata_json)
        manager: Any = metadata.checkpoint_manager
        latest: Any = manager.latest_checkpoint_result
        if latest is None or os.path.isdir(latest.checkpoint.path):
            continue
        trial_id = str(trial_state["trial_id"])
        try:
            choice = choose(trial_id, latest.checkpoint.path)
        except LookupError:
            continue
        manager._checkpoint_results = [r for r in manager._checkpoint_results if os.path.isdir(r.checkpoint.path)]
        if choice is not None:
            path, step = choice
            # Tune resumes the trial's iteration count from these metrics, and names its next
            # checkpoint after this one.
            result = _TrainingResult(
                checkpoint=tune.Checkpoint(path), metrics={**latest.metrics, "training_iteration": step}
            )
            manager._latest_checkpoint_result = result
            if all(r.checkpoint.path != path for r in manager._checkpoint_results):
                manager._checkpoint_results.append(result)
            trial_state["storage"].current_checkpoint_index = int(os.path.basename(path).rsplit("_", 1)[1])
        else:
            manager._latest_checkpoint_result = None
        changed.append((trial_id, latest.checkpoint.path, choice))
        entry[0] = json.dumps(trial_state, indent=2, cls=TuneFunctionEncoder)
        entry[1] = metadata.get_json_state()
    if changed:
        temporary = state_path + ".tunetrain"
        Path(temporary).write_text(json.dumps(state, indent=2, cls=TuneFunctionEncoder))
        os.replace(temporary, state_path)
    return changed


# -- Ray Train (V2) --------------------------------------------------------------------------


def tune_session() -> Any:
    """The Ray Tune function session of the trial running in this process.

    Ray 2.60: ``ray.train._internal.session.get_session`` (``ray.tune.get_context`` has no
    ``report`` that takes Train's arguments, nor ``loaded_checkpoint``). Without it
    single-worker trials cannot run in process.
    """
    from ray.train._internal.session import get_session

    session = get_session()
    if session is None:
        raise RuntimeError("no Ray Tune session: this runs inside a Ray Tune trial only")
    return session


@contextlib.contextmanager
def train_api_in_tune_function(session: Any) -> Iterator[None]:
    """While inside, ``ray.train.report/get_context/get_checkpoint`` work in a Tune function.

    Ray 2.60 refuses them there (it checks that the session's ``world_rank`` is None) to
    steer users to ``ray.tune.*``; the train loop is written for Ray Train, so the session
    has rank 0 meanwhile, as on a one-worker TorchTrainer. Without it an in-process trial
    fails at its first ``ray.train.report``.
    """
    session.world_rank = 0
    try:
        yield
    finally:
        session.world_rank = None


def train_fn_utils_base() -> type:
    """Train V2's local-mode utilities class (``ray.train.report`` and friends outside a
    TorchTrainer), for tunetrain's bridge to Tune to subclass.

    Ray 2.60: ``ray.train.v2._internal.execution.train_fn_utils.LocalTrainFnUtils``.
    """
    from ray.train.v2._internal.execution.train_fn_utils import LocalTrainFnUtils

    return LocalTrainFnUtils


def get_train_fn_utils() -> Any:
    """The utilities behind ``ray.train.*`` in this process (Ray 2.60, Train V2 internal)."""
    from ray.train.v2._internal.execution import train_fn_utils

    return train_fn_utils.get_train_fn_utils()


def set_train_fn_utils(utils: Any) -> None:
    """Replace the utilities behind ``ray.train.*`` in this process (None: unset).

    Ray 2.60, Train V2 internal: how an in-process trial's reports reach Tune, and how a new
    Train run starts from the checkpoint Tune restored its trial from (Train V2 dropped
    ``resume_from_checkpoint``). Without it: no in-process trials, and PBT exploits and
    resumed multi-worker trials would start from scratch.
    """
    from ray.train.v2._internal.execution import train_fn_utils

    train_fn_utils.set_train_fn_utils(utils)


def abort_train_run(controller: Any, *, timeout_s: float = 30.0) -> None:
    """Abort a Train V2 run through its controller actor (best effort).

    Ray 2.60: the controller actor's ``abort`` method (not a public API). Used when Tune
    stopped the trial: left to die with the trial's process, Ray 2.60's placement-group
    cleaner sometimes keeps the group, and its CPUs stay taken for the rest of the sweep.
    """
    import ray

    with contextlib.suppress(Exception):  # the trial's process is going away anyway
        ray.get(controller.abort.remote(), timeout=timeout_s)
