from __future__ import annotations

import json
import subprocess
import sys

import torch
from torch.utils.data import DataLoader, TensorDataset

from tunetrain import TrialContext, data_loader_seeding
from tunetrain.context import set_context
from tunetrain.seeding import seed_everything


def _order(worker_seed: int, num_workers: int = 0) -> list[float]:
    set_context(TrialContext("trial_0000", 0, 1, worker_seed, 0, 1))
    try:
        data = TensorDataset(torch.arange(32, dtype=torch.float64))
        loader = DataLoader(data, batch_size=4, shuffle=True, num_workers=num_workers, **data_loader_seeding())
        return [float(x) for (batch,) in loader for x in batch]
    finally:
        set_context(None)


def test_data_loaders_shuffle_by_the_worker_seed() -> None:
    torch.manual_seed(123)  # the global generator plays no part
    first = _order(7)
    torch.manual_seed(456)
    # The same worker seed: the same order, whatever the global state; another seed: another order.
    assert _order(7) == first
    assert _order(8) != first
    # With loader worker processes too (each seeded from the loader's generator).
    assert _order(7, num_workers=2) == first


def _fresh_python(code: str) -> str:
    """``code`` in a new interpreter (where torch is not imported yet); its output."""
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_torch_imported_after_seeding_gets_the_latest_seed() -> None:
    # A loop that imports torch itself, after the trial seeded everything: the same draws as
    # when torch was seeded directly.
    out = _fresh_python(
        "import json, sys\n"
        "from tunetrain.seeding import seed_everything\n"
        "seed_everything(5)\n"
        "seed_everything(7)\n"
        "assert 'torch' not in sys.modules\n"
        "import torch\n"
        "print(json.dumps(torch.rand(3).tolist()))\n"
    )
    torch.manual_seed(7)
    assert json.loads(out) == torch.rand(3).tolist()
    # Once imported, torch is seeded directly.
    seed_everything(11)
    first = torch.rand(3).tolist()
    seed_everything(11)
    assert torch.rand(3).tolist() == first


def test_a_trial_process_imports_torch_only_when_its_loop_does() -> None:
    # Each new trial process imports tunetrain.trial; torch costs it about 2 s of CPU.
    out = _fresh_python("import sys\nimport tunetrain.trial\nprint('torch' in sys.modules)\n")
    assert out.strip() == "False"
