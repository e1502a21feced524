"""What a train loop can ask about the trial it runs in (its seed, rank and identity).

Set on every Ray Train worker by the trial driver before the user's train loop starts.
"""

from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class TrialContext:
    """The running trial, as seen from one Ray Train worker.

    Attributes:
        trial_name: Ray Tune's trial name, e.g. ``trial_0003``.
        trial_index: the trial's position in the sweep (0-based).
        trial_seed: the trial's seed, derived from the sweep's root seed and ``trial_index``.
        worker_seed: this worker's seed (derived from ``trial_seed`` and ``rank``); Python's
            ``random``, NumPy and torch are already seeded with it.
        rank: this worker's global rank; ``world_size`` workers run the trial.
    """

    trial_name: str
    trial_index: int
    trial_seed: int
    worker_seed: int
    rank: int
    world_size: int


_current: TrialContext | None = None


def get_context() -> TrialContext:
    """The current trial's context; only valid inside a train loop run by tunetrain."""
    if _current is None:
        raise RuntimeError(
            "tunetrain.get_context() is only available inside a train loop that tunetrain runs "
            "(python -m tunetrain sweep FILE)."
        )
    return _current


def set_context(context: TrialContext | None) -> None:
    """Set (or clear) this worker's trial context: the trial runners' call, not the user's."""
    global _current
    _current = context
