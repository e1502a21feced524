# Population-based training of the digits MLP (experiments/mlp_digits.py) with SGD: every
# 3 epochs the worse half of the population takes over a better trial's weights (from its
# checkpoint) and perturbs lr, momentum and weight decay within the ranges below.
#
#   python -m tunetrain sweep experiments/pbt_digits.py
#   python -m tunetrain sweep experiments/pbt_digits.py --workers-per-trial 2 --num-samples 2 \
#       --set epochs=6   # DDP trials: the exploit hands the donor's weights to a new TorchTrainer run
#
# Each exploit is recorded on the recipient's MLflow run (tag tunetrain.pbt.exploits, the
# artifact pbt_exploits.json, and the metrics pbt.lr, pbt.momentum, pbt.weight_decay over time).

from __future__ import annotations

from pathlib import Path

from ray import tune

from tunetrain import CheckpointPolicy, StopRule, load_experiment

EPOCHS = 12

experiment = load_experiment(Path(__file__).resolve().parent / "mlp_digits.py").replace(
    name="pbt_digits",  # the MLflow experiment
    space={
        "lr": tune.loguniform(1e-3, 3e-1),  # SGD learning rate (PBT multiplies by 0.8 or 1.2)
        "momentum": tune.uniform(0.0, 0.95),  # SGD momentum
        "weight_decay": tune.loguniform(1e-6, 1e-2),  # L2 penalty
    },
    defaults={
        "optimizer": "sgd",  # make_optimizer in mlp_digits.py
        "hidden": 64,  # width of the hidden layer
        "dropout": 0.1,  # dropout after the hidden layer
        "batch_size": 64,  # per-worker batch size
        "epochs": EPOCHS,  # epochs per trial
    },
    metric="val_acc",  # PBT ranks the population by validation accuracy
    mode="max",
    scheduler="pbt",  # Ray Tune's PopulationBasedTraining
    scheduler_options={
        "perturbation_interval": 3,  # exploit/explore every 3 epochs
        "quantile_fraction": 0.5,  # the worse half copies the better half
    },
    searcher="random",  # PBT explores by itself; the first configs are drawn at random
    num_samples=4,  # the population
    resources_per_worker={"CPU": 0.5},  # the whole population trains at once on 2 CPUs
    stop=StopRule(iterations_from=lambda c: c["epochs"]),  # every trial ends after its last epoch (after --set)
    checkpoint=CheckpointPolicy(num_to_keep=None),  # PBT keeps every checkpoint anyway
    seed=0,  # root seed
)
