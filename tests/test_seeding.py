from __future__ import annotations

import torch
from torch.utils.data import DataLoader, TensorDataset

from tunetrain import TrialContext, data_loader_seeding
from tunetrain.context import _set_context


def _order(worker_seed: int, num_workers: int = 0) -> list[float]:
    _set_context(TrialContext("trial_0000", 0, 1, worker_seed, 0, 1))
    try:
        data = TensorDataset(torch.arange(32, dtype=torch.float64))
        loader = DataLoader(data, batch_size=4, shuffle=True, num_workers=num_workers, **data_loader_seeding())
        return [float(x) for (batch,) in loader for x in batch]
    finally:
        _set_context(None)


def test_data_loaders_shuffle_by_the_worker_seed() -> None:
    torch.manual_seed(123)  # the global generator plays no part
    first = _order(7)
    torch.manual_seed(456)
    # The same worker seed: the same order, whatever the global state; another seed: another order.
    assert _order(7) == first
    assert _order(8) != first
    # With loader worker processes too (each seeded from the loader's generator).
    assert _order(7, num_workers=2) == first
