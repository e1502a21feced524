# A conditional search space on the digits MLP (experiments/mlp_digits.py): the optimizer is
# a choice, and each choice brings parameters of its own (momentum only for SGD, beta1 only
# for Adam). Optuna (TPE, define-by-run) and HyperOpt (nested hp.choice) search it as such.
#
#   python -m tunetrain sweep experiments/conditional_digits.py
#   python -m tunetrain sweep experiments/conditional_digits.py --searcher hyperopt
#
# In MLflow a trial's params are the chosen branch only, e.g. optimizer.name=sgd,
# optimizer.lr, optimizer.momentum.

from __future__ import annotations

from pathlib import Path

from ray import tune

from tunetrain import load_experiment

experiment = load_experiment(Path(__file__).resolve().parent / "mlp_digits.py").replace(
    name="conditional_digits",  # the MLflow experiment
    space={
        "optimizer": tune.choice(
            [
                {
                    "name": "sgd",  # SGD and its own settings
                    "lr": tune.loguniform(1e-3, 3e-1),  # learning rate
                    "momentum": tune.uniform(0.0, 0.95),  # momentum
                },
                {
                    "name": "adam",  # Adam and its own settings
                    "lr": tune.loguniform(1e-4, 3e-2),  # learning rate
                    "beta1": tune.uniform(0.8, 0.99),  # first-moment decay
                },
            ]
        ),
        "hidden": tune.choice([16, 64, 256]),  # width of the hidden layer (both branches)
    },
    defaults={
        "dropout": 0.1,  # dropout after the hidden layer
        "batch_size": 64,  # per-worker batch size
        "epochs": 12,  # epochs per trial
    },
    num_samples=12,  # trials
)
