"""Seeds: one root seed per sweep, one derived seed per trial, one per worker.

Derivation goes through NumPy's SeedSequence, which is built for exactly this (independent,
well-mixed child seeds from a root and an index path) so no home-made hashing is needed.
"""

from __future__ import annotations

import random

import numpy as np


def draw_root_seed() -> int:
    """A fresh root seed for a sweep that was given none (it is recorded)."""
    return int(np.random.SeedSequence().generate_state(1)[0] % (2**31))


def derive_seed(root: int, *path: int) -> int:
    """A seed in [0, 2**31) that depends only on ``root`` and the index ``path``."""
    return int(np.random.SeedSequence([root, *path]).generate_state(1)[0] % (2**31))


def seed_everything(seed: int) -> None:
    """Seed Python's ``random``, NumPy's global generator and torch (CPU and every CUDA device)."""
    import torch

    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
