"""Schedulers and searchers by name, built from Ray Tune's own classes (part of the tuner layer).

The searcher proposes configs, the scheduler decides which trials go on: tunetrain only
picks the class, derives defaults from the experiment and passes the user's options on.
The subclasses below add bookkeeping only (which trials a scheduler stopped, which PBT
exploits happened), never a decision of their own; the sweep's policy acts through two hooks
(before a launch: the budget; a trial left alone: the baseline).
"""

from tunetrain.algorithms._choice import ChosenAlgorithms, choose_algorithms
from tunetrain.algorithms._hyperopt_search import hyperopt_space
from tunetrain.algorithms._optuna_search import DefineByRunOptunaSearch, optuna_define_by_run
from tunetrain.algorithms._pairing import OPTUNA_SAMPLERS, check_pairing, searcher_owns_space
from tunetrain.algorithms._recording import (
    RecordingASHA,
    RecordingFIFO,
    RecordingHyperBand,
    RecordingMedian,
    RecordingPBT,
)
from tunetrain.algorithms._schedulers import (
    DEFAULT_MAX_T,
    asha_rungs,
    budget_warning,
    build_scheduler,
    pbt_mutations,
)
from tunetrain.algorithms._searchers import (
    TPE_SEARCHERS,
    build_searcher,
    resolve_searcher,
    searcher_live_limit,
)
from tunetrain.algorithms._tpe import FidelityTPESearch

__all__ = [
    "DEFAULT_MAX_T",
    "OPTUNA_SAMPLERS",
    "TPE_SEARCHERS",
    "ChosenAlgorithms",
    "DefineByRunOptunaSearch",
    "FidelityTPESearch",
    "RecordingASHA",
    "RecordingFIFO",
    "RecordingHyperBand",
    "RecordingMedian",
    "RecordingPBT",
    "asha_rungs",
    "budget_warning",
    "build_scheduler",
    "build_searcher",
    "check_pairing",
    "choose_algorithms",
    "hyperopt_space",
    "optuna_define_by_run",
    "pbt_mutations",
    "resolve_searcher",
    "searcher_live_limit",
    "searcher_owns_space",
]
