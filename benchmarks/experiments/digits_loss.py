# The README's digits MLP (experiments/mlp_digits.py), judged by validation loss and searched
# at random, for the search-efficiency benchmark (ASHA vs FIFO on the same seeded searcher).
#
#   python -m tunetrain sweep benchmarks/experiments/digits_loss.py --scheduler fifo --num-samples 16

from __future__ import annotations

from pathlib import Path

from tunetrain import load_experiment

experiment = load_experiment(Path(__file__).resolve().parents[2] / "experiments" / "mlp_digits.py").replace(
    name="bench_digits",  # MLflow experiment
    metric="val_loss",  # lower is better
    mode="min",
    searcher="random",  # seeded random search: both schedulers see the same configs
    scheduler_options={},  # the scheduler's defaults (ASHA: grace 1, reduction factor 2, max_t 12)
)
