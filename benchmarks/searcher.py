"""Target 5, searcher overhead: 1,000 trials of a 5-d toy objective through tunetrain's
searcher path (the Ray Tune searcher tunetrain builds, driven as Tune drives it: suggest,
then on_trial_complete) against the library itself in memory: raw Optuna ask/tell with the
same seeded TPE sampler, and raw HyperOpt ``fmin`` with TPE.

This is the searcher's own cost; each trial of a real sweep also pays the per-trial floor
measured by target 3.

    python benchmarks/searcher.py
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c


def objective(config: dict[str, float]) -> float:
    return sum((config[f"x{i}"] - 0.1 * i) ** 2 for i in range(5))


def tunetrain_path(name: str, trials: int, seed: int) -> float:
    from ray import tune

    from tunetrain import Experiment
    from tunetrain.algorithms import build_searcher

    space = {f"x{i}": tune.uniform(-1.0, 1.0) for i in range(5)}
    experiment = Experiment(
        name="bench", train_loop=lambda config: None, space=space, metric="loss", mode="min", searcher=name
    )
    start = time.perf_counter()
    searcher: Any
    searcher, _ = build_searcher(experiment, seed=seed, max_concurrent=1)
    searcher.set_search_properties("loss", "min", space)  # what Tune does with the param space
    for i in range(trials):
        config = searcher.suggest(str(i))
        searcher.on_trial_complete(str(i), {"loss": objective(config)})
    return time.perf_counter() - start


def raw_optuna(trials: int, seed: int) -> float:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    start = time.perf_counter()
    study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=seed))
    for _ in range(trials):
        trial = study.ask()
        config = {f"x{i}": trial.suggest_float(f"x{i}", -1.0, 1.0) for i in range(5)}
        study.tell(trial, objective(config))
    return time.perf_counter() - start


def raw_hyperopt(trials: int, seed: int) -> float:
    import numpy as np
    from hyperopt import Trials, fmin, hp, tpe

    space = {f"x{i}": hp.uniform(f"x{i}", -1.0, 1.0) for i in range(5)}
    start = time.perf_counter()
    fmin(
        objective,
        space,
        algo=tpe.suggest,
        max_evals=trials,
        trials=Trials(),
        rstate=np.random.default_rng(seed),
        show_progressbar=False,
    )
    return time.perf_counter() - start


def main() -> None:
    args = c.parser(__doc__ or "").parse_args()
    trials, repeats = (20, 1) if args.smoke else (1000, args.repeats)
    rows = []
    ratios = {}
    for name, raw in (("optuna", raw_optuna), ("hyperopt", raw_hyperopt)):
        tunetrain_path(name, 5, 0), raw(5, 0)  # warm up: imports and first-call costs stay out
        ours = [tunetrain_path(name, trials, seed) for seed in range(repeats)]
        theirs = [raw(trials, seed) for seed in range(repeats)]
        ratios[name] = c.median(ours) / c.median(theirs)
        rows.append([f"{name} TPE", trials, repeats, c.median(theirs), c.median(ours), ratios[name]])
    print(
        c.section(
            title="5. Searcher overhead",
            command="python benchmarks/searcher.py",
            target="<= 1.2x raw Optuna ask/tell in memory for 1,000 trials of a 5-d objective; same for HyperOpt",
            headers=["searcher", "trials", "repeats", "raw library median s", "tunetrain path median s", "ratio"],
            rows=rows,
            verdict=c.verdict(
                all(r <= 1.2 for r in ratios.values()),
                ", ".join(f"{name} {ratio:.3f}x" for name, ratio in ratios.items()),
            ),
            notes="Both sides use the same seeded TPE settings (Optuna's TPESampler(seed); HyperOpt's TPE with "
            "its default 20 random start-up points). The tunetrain path is Ray Tune's OptunaSearch / "
            "HyperOptSearch, built as a sweep builds them.",
        )
    )


if __name__ == "__main__":
    main()
