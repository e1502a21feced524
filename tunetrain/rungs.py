"""How far a sweep's early stopping could be trusted: how well each ASHA rung ranks the trials
that went on to the next, measured on the sweep's own trials.

ASHA stops a trial at a rung (iteration r) when its value there is not in the top
1/reduction_factor: that is right only if the order of trials at r is the order they would
have at the next rung. Hyper-Tune (Li et al., VLDB 2022) measures this per rung, as the rank
correlation between the values at two budgets, and weighs each budget's results by it. Here
it is Spearman's rho between each trial's value at rung r and at the next rung (or max_t),
over the trials that reported at both; 1 is the same order, 0 none, below 0 the reverse.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Mapping, Sequence

# Fewer trials at both budgets than this: no rho (three points always rank somehow).
MIN_TRIALS = 5
# A rho below this with MIN_TRIALS or more: the rung misleads, and the summary says so.
MISLEADS_BELOW = 0.5


@dataclasses.dataclass(frozen=True)
class RungRanking:
    """Rung ``rung`` against ``next``: Spearman's rho over ``trials`` trials (None: too few
    trials, or every value the same)."""

    rung: int
    next: int
    trials: int
    rho: float | None

    @property
    def misleads(self) -> bool:
        return self.rho is not None and self.rho < MISLEADS_BELOW

    def text(self) -> str:
        rho = f"{self.rho:.2f}" if self.rho is not None else "n/a"
        return f"{self.rung} -> {self.next}: {rho} ({self.trials} trial{'s' if self.trials != 1 else ''})"

    def as_dict(self) -> dict[str, object]:
        return {"rung": self.rung, "next": self.next, "trials": self.trials, "rho": self.rho}


def asha_milestones(grace_period: int, reduction_factor: float, max_t: int) -> list[int]:
    """The iterations below max_t at which Ray's AsyncHyperBandScheduler (one bracket) may
    stop a trial. Its rungs are grace_period * reduction_factor**k, floats, and a trial is
    decided at the first iteration at or past one (``iteration >= rung``), at most once per
    iteration: the rungs rounded up, each once. A reduction factor of 1.5 from 1 decides at
    1, 2, 3, 4, 6, 8 (rungs 1, 1.5, 2.25, 3.4, 5.1, 7.6), not at their integer parts."""
    out: list[int] = []
    for k in range(64):
        rung = grace_period * reduction_factor**k
        if rung >= max_t:
            break
        at = math.ceil(rung)
        if at < max_t and at not in out:
            out.append(at)
    return out


def rung_rankings(values: Sequence[Mapping[int, float]], rungs: Sequence[int], max_t: int) -> list[RungRanking]:
    """One :class:`RungRanking` per pair of consecutive budgets (each rung, then max_t);
    ``values``: each trial's metric at each iteration it reported."""
    out = []
    for low, high in itertools.pairwise([*rungs, max_t]):
        pairs = [
            (v[low], v[high])
            for v in values
            if low in v and high in v and math.isfinite(v[low]) and math.isfinite(v[high])
        ]
        out.append(RungRanking(low, high, len(pairs), rank_correlation(pairs)))
    return out


def rank_correlation(pairs: Sequence[tuple[float, float]]) -> float | None:
    """Spearman's rho between the first and second values of ``pairs`` (each trial's value at
    a lower and a higher budget); None with fewer than MIN_TRIALS pairs or a side all alike."""
    from scipy.stats import spearmanr

    if len(pairs) < MIN_TRIALS or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return None
    return float(spearmanr([a for a, _ in pairs], [b for _, b in pairs]).statistic)


def summary_lines(
    rankings: Sequence[RungRanking], *, grace_period: int, overruled: Mapping[int, int] | None = None
) -> list[str]:
    """The summary's lines on early stopping: every rung's rho, the stops ASHA did not make
    at a rung while it misled (``overruled``: rung -> trials), and a warning with the fix when
    a rung misleads."""
    if not rankings:
        return []
    lines = [
        "Early stopping: how each rung ranks the trials as the next rung does (Spearman's rho; 1 = the same order):",
        "  iteration " + "; ".join(r.text() for r in rankings),
    ]
    for rung, trials in sorted((overruled or {}).items()):
        lines.append(
            f"  Rung {rung} misled when {trials} trial{'s' if trials != 1 else ''} reached it: "
            f"{'they' if trials != 1 else 'it'} went on instead of stopping there "
            "(scheduler_options={'skip_misleading_rungs': False} stops them as Ray's ASHA does)."
        )
    misleading = [r for r in rankings if r.misleads]
    if misleading:
        first = misleading[0]
        lines.append(
            f"  Rung {first.rung} misleads (rho {first.rho:.2f}): trials stopped there may have won later. A later "
            f"first rung trusts it less: scheduler_options={{'grace_period': {max(grace_period + 1, first.next)}}}."
        )
    return lines
