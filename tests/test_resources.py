from __future__ import annotations

import pytest

from tunetrain import ExperimentError
from tunetrain.resources import check_fit, max_concurrent_trials

ONE_NODE = [{"CPU": 2.0, "memory": 1e9}]


def test_two_single_cpu_trials_fit_side_by_side_on_two_cpus() -> None:
    assert max_concurrent_trials(num_workers=1, worker={"CPU": 1}, strategy="PACK", nodes=ONE_NODE) == 2


def test_a_two_worker_trial_takes_the_whole_two_cpu_node() -> None:
    assert max_concurrent_trials(num_workers=2, worker={"CPU": 1}, strategy="PACK", nodes=ONE_NODE) == 1


def test_strict_spread_needs_a_node_per_worker() -> None:
    nodes = [{"CPU": 4.0}, {"CPU": 4.0}]
    check_fit(num_workers=2, worker={"CPU": 1}, strategy="STRICT_SPREAD", nodes=nodes)
    with pytest.raises(ExperimentError, match="STRICT_SPREAD"):
        check_fit(num_workers=3, worker={"CPU": 1}, strategy="STRICT_SPREAD", nodes=nodes)


def test_strict_pack_needs_one_node_for_all_workers() -> None:
    nodes = [{"CPU": 2.0}, {"CPU": 2.0}]
    # PACK may use both nodes; STRICT_PACK may not.
    check_fit(num_workers=4, worker={"CPU": 1}, strategy="PACK", nodes=nodes)
    with pytest.raises(ExperimentError):
        check_fit(num_workers=4, worker={"CPU": 1}, strategy="STRICT_PACK", nodes=nodes)


def test_a_trial_larger_than_the_cluster_is_refused_naming_the_largest_node() -> None:
    with pytest.raises(ExperimentError) as info:
        check_fit(num_workers=3, worker={"CPU": 1}, strategy="PACK", nodes=ONE_NODE)
    message = str(info.value)
    # The message gives the need, what the cluster has, and a fix.
    assert "3 worker(s) x (CPU=1)" in message
    assert "the largest node CPU=2" in message
    assert "Fix:" in message


def test_fractional_gpus_pack_per_device_not_as_a_pool() -> None:
    two_gpus = [{"CPU": 8.0, "GPU": 2.0}]

    def fits(gpu: float, workers: int = 1, strategy: str = "PACK") -> int:
        worker = {"CPU": 1.0, "GPU": gpu}
        return max_concurrent_trials(num_workers=workers, worker=worker, strategy=strategy, nodes=two_gpus)

    assert fits(0.5) == 4  # two shares on each device
    assert fits(0.6) == 2  # 1.8 <= 2 in all, but a device holds one 0.6 share only
    assert fits(0.3) == 6
    assert fits(1.0) == 2 and fits(2.0) == 1
    assert fits(1.0, workers=2, strategy="STRICT_PACK") == 1
    # A trial whose workers need more whole devices than a node has never fits.
    with pytest.raises(ExperimentError, match=r"GPU=2\b"):
        check_fit(num_workers=1, worker={"CPU": 1.0, "GPU": 3.0}, strategy="PACK", nodes=two_gpus)
