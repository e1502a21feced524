from __future__ import annotations

from pathlib import Path

import pytest
from ray import tune

from tests.conftest import EXPERIMENTS, make_experiment, write_experiment
from tunetrain import ExperimentError, StopRule, load_experiment

HEADER = "from ray import tune\nfrom tunetrain import Experiment\n\ndef loop(config):\n    pass\n\n"
VALID = 'Experiment(name="e", train_loop=loop, space={"lr": tune.uniform(0, 1)}, metric="loss", mode="min")'


@pytest.mark.parametrize("path", sorted(EXPERIMENTS.glob("*.py")), ids=lambda p: p.name)
def test_every_shipped_experiment_loads(path: Path) -> None:
    experiment = load_experiment(path)
    # The loaded experiment remembers where it came from (recorded with each sweep).
    assert experiment.source_path == str(path.resolve())


def test_missing_file_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match="does not exist"):
        load_experiment(tmp_path / "nope.py")


def test_file_without_experiment_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match="defines no Experiment"):
        load_experiment(write_experiment(tmp_path, HEADER))


def test_file_with_two_experiments_is_refused_naming_both(tmp_path: Path) -> None:
    path = write_experiment(tmp_path, HEADER + f"a = {VALID}\nb = {VALID}\n")
    with pytest.raises(ExperimentError, match=r"defines 2 Experiments \(a, b\)"):
        load_experiment(path)


def test_file_that_raises_on_import_is_reported_as_bad_input(tmp_path: Path) -> None:
    with pytest.raises(ExperimentError, match="ZeroDivisionError"):
        load_experiment(write_experiment(tmp_path, "1 / 0\n"))


def test_space_value_that_is_not_a_distribution_is_refused() -> None:
    with pytest.raises(ExperimentError) as info:
        make_experiment(space={"opt": {"lr": object()}})
    # The message names the offending key (dotted) and says what is allowed.
    assert "'opt.lr'" in str(info.value)
    assert "Ray Tune distribution" in str(info.value)


def test_distribution_in_defaults_is_refused() -> None:
    with pytest.raises(ExperimentError, match="defaults are fixed values"):
        make_experiment(defaults={"lr": tune.uniform(0, 1)})


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [
        ("mode", "maximize", "mode must be 'min' or 'max'"),
        ("scheduler", "bohb", "Unknown scheduler 'bohb'; valid schedulers are fifo, asha, hyperband, median, pbt, pb2"),
        ("searcher", "smac", "Unknown searcher 'smac'; valid searchers are auto, optuna, async_bohb, hyperopt, random"),
        ("num_samples", 0, "num_samples must be an integer >= 1"),
        ("workers_per_trial", -1, "workers_per_trial must be an integer >= 1"),
        ("placement_strategy", "ANY", "Unknown placement_strategy 'ANY'"),
    ],
)
def test_bad_fields_are_refused_with_the_rule_and_the_value(field: str, value: object, pattern: str) -> None:
    with pytest.raises(ExperimentError, match=pattern):
        make_experiment(**{field: value})


def test_stop_rule_rejects_non_positive_budgets() -> None:
    with pytest.raises(ExperimentError, match="max_iterations must be a positive number"):
        StopRule(max_iterations=0)


def test_use_gpu_adds_a_gpu_to_each_worker() -> None:
    assert make_experiment(use_gpu=True, resources_per_worker={"CPU": 2}).worker_resources == {"CPU": 2.0, "GPU": 1.0}


def test_a_gpu_share_is_a_fraction_of_one_device_or_whole_devices_and_whole_for_multi_worker_trials() -> None:
    # One-worker trials pack by fraction; whole numbers take whole devices.
    assert make_experiment(use_gpu=True, resources_per_worker={"GPU": 0.5}).worker_resources["GPU"] == 0.5
    make_experiment(use_gpu=True, resources_per_worker={"GPU": 2}, workers_per_trial=2)
    # Ray places a worker on one device or on whole devices: 1.5 never places.
    with pytest.raises(ExperimentError, match=r'resources_per_worker\["GPU"\].*but got 1.5') as info:
        make_experiment(resources_per_worker={"GPU": 1.5})
    assert '{"GPU": 1} or {"GPU": 2}' in str(info.value)
    # Two ranks of one trial on one device: refused, naming the field and both fixes.
    for workers in (2, (1, 4)):
        with pytest.raises(ExperimentError, match="Duplicate GPU detected") as info:
            make_experiment(use_gpu=True, resources_per_worker={"GPU": 0.5}, workers_per_trial=workers)
        assert "--workers-per-trial" in str(info.value) and "workers_per_trial=1" in str(info.value)


@pytest.mark.parametrize("workers", [(0, 2), (3, 2), (1, 2, 3), (1.0, 2)])
def test_an_elastic_range_must_be_min_then_max_both_at_least_1(workers: object) -> None:
    with pytest.raises(ExperimentError, match=r"a range \(min, max\) with 1 <= min <= max"):
        make_experiment(workers_per_trial=workers)


def test_an_elastic_range_starts_with_min_and_grows_to_max() -> None:
    experiment = make_experiment(workers_per_trial=[1, 4])  # a list, as written by hand
    # Read as a range: elastic, its minimum to start and fit, its maximum for budgets.
    assert experiment.workers_per_trial == (1, 4) and experiment.elastic
    assert (experiment.min_workers, experiment.max_workers) == (1, 4)
    # Elastic trials need Ray Train: never the in-process runner.
    assert not experiment.in_process


def test_max_failures_must_be_a_count() -> None:
    with pytest.raises(ExperimentError, match="max_failures must be an integer >= 0"):
        make_experiment(max_failures=-1)


def test_a_baseline_is_true_false_or_values_of_the_searched_dimensions() -> None:
    assert make_experiment().baseline is True
    assert make_experiment(baseline={"lr": 0.5}).baseline == {"lr": 0.5}
    with pytest.raises(ExperimentError, match="baseline must be True, False or a dict"):
        make_experiment(baseline="centre")
    with pytest.raises(ExperimentError, match=r"baseline\['lr'\]=2: lr is searched in \[0, 1\]"):
        make_experiment(baseline={"lr": 2})


def test_datasets_take_ray_datasets_or_functions_and_refuse_anything_else() -> None:
    import ray.data

    make_experiment(datasets={"train": lambda: ray.data.range(4)})  # a function: built after Ray starts
    with pytest.raises(
        ExperimentError, match=r"Experiment.datasets\['train'\] must be a ray.data.Dataset or a function"
    ):
        make_experiment(datasets={"train": [1, 2, 3]})
    with pytest.raises(ExperimentError, match="non-empty strings, but got ''"):
        make_experiment(datasets={"": lambda: ray.data.range(4)})
    with pytest.raises(ExperimentError, match=r"data_config must be a ray\.train\.DataConfig, but got dict"):
        make_experiment(datasets={"train": lambda: ray.data.range(4)}, data_config={"split": True})


def test_dist_backend_follows_ray_trains_rule_unless_set_and_an_unknown_one_is_refused() -> None:
    assert make_experiment().backend == "gloo"
    assert make_experiment(use_gpu=True).backend == "nccl"
    assert make_experiment(use_gpu=True, dist_backend="gloo").backend == "gloo"
    with pytest.raises(ExperimentError, match="Unknown dist_backend 'mpi'"):
        make_experiment(dist_backend="mpi")
