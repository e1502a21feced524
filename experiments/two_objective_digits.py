# Two objectives on the digits MLP (experiments/mlp_digits.py): validation loss against the
# number of parameters. Optuna's NSGA-II searches on both; ASHA stops trials on the first
# (val_loss); the sweep prints the Pareto-optimal trials and tags their MLflow runs
# (tunetrain.pareto=true; the parent run lists them in tunetrain.pareto_run_ids).
#
#   python -m tunetrain sweep experiments/two_objective_digits.py

from __future__ import annotations

from pathlib import Path

from ray import tune

from tunetrain import load_experiment

experiment = load_experiment(Path(__file__).resolve().parent / "mlp_digits.py").replace(
    name="two_objective_digits",  # the MLflow experiment
    space={
        "lr": tune.loguniform(1e-4, 3e-2),  # Adam learning rate
        "hidden": tune.randint(4, 257),  # width of the hidden layer: the size objective
        "dropout": tune.uniform(0.0, 0.5),  # dropout after the hidden layer
    },
    metric=["val_loss", "n_params"],  # both minimised; the first decides ASHA's stops
    mode=["min", "min"],
    num_samples=16,  # trials
)
