"""Seeds: one root seed per sweep, one derived seed per trial, one per worker.

Derivation goes through NumPy's SeedSequence, which is built for exactly this (independent,
well-mixed child seeds from a root and an index path) so no home-made hashing is needed.
"""

from __future__ import annotations

import random
import sys
from typing import Any

import numpy as np
import wrapt


def draw_root_seed() -> int:
    """A fresh root seed for a sweep that was given none (it is recorded)."""
    return int(np.random.SeedSequence().generate_state(1)[0] % (2**31))


def derive_seed(root: int, *path: int) -> int:
    """A seed in [0, 2**31) that depends only on ``root`` and the index ``path``."""
    return int(np.random.SeedSequence([root, *path]).generate_state(1)[0] % (2**31))


# The seed torch gets when it is imported after seed_everything (None: no hook registered).
_torch_seed: int | None = None


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch (CPU and every CUDA device).

    torch is seeded now if it is imported, and otherwise the moment it is (wrapt's post-import
    hook): importing it costs about 2 s of CPU in every new trial process, which a loop that
    never uses torch should not pay, and a loop that imports torch itself gets the generator
    state it would have had (nothing can draw from torch's generator before torch exists)."""
    global _torch_seed
    random.seed(seed)
    np.random.seed(seed)
    registered, _torch_seed = _torch_seed is not None, seed
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.manual_seed(seed)  # also seeds every CUDA device
    elif not registered:
        wrapt.register_post_import_hook(_seed_torch, "torch")


def _seed_torch(torch: Any) -> None:
    """The post-import hook: seed torch with the latest seed_everything's seed."""
    if _torch_seed is not None:
        torch.manual_seed(_torch_seed)


def data_loader_seeding() -> dict[str, Any]:
    """Keyword arguments for ``torch.utils.data.DataLoader`` that make its shuffling and its
    worker processes follow this Ray Train worker's seed (PyTorch's reproducibility recipe)::

        DataLoader(dataset, batch_size=64, shuffle=True, num_workers=2, **tunetrain.data_loader_seeding())

    Only inside a train loop run by tunetrain (it reads ``get_context().worker_seed``).
    """
    import torch

    from tunetrain.context import get_context

    return {
        "generator": torch.Generator().manual_seed(get_context().worker_seed),
        "worker_init_fn": seed_loader_worker,
    }


def seed_loader_worker(worker_id: int) -> None:
    """``worker_init_fn`` for DataLoader workers: torch seeds each worker from the loader's
    generator (base seed + worker id); Python's ``random`` and NumPy follow that seed."""
    import torch

    seed = torch.initial_seed() % 2**32
    random.seed(seed)
    np.random.seed(seed)
