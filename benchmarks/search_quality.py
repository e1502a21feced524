"""Target 15, search quality: regret per unit of compute, at 1, 4 and 8 trials at once, of
tunetrain's searchers against Ray Tune's stock combinations, raw Optuna and Syne Tune.

Problems (all offline): mf-prior-bench's multi-fidelity Hartmann functions mfh3 and mfh6 in
its four correlation presets (good, moderate, bad, terrible), iteration i evaluating
fidelity 10 i of 100 and costing that fidelity's cost increment, scaled so that a full
trial (10 iterations) takes 2 s; Branin and Hartmann-6 (mf-prior-bench's mfh6 at its full
fidelity) as single-fidelity problems. Time is simulated (benchmarks/_simulated.py): the
searchers and schedulers are the real objects, driven as their libraries drive them.

Multi-fidelity arms at an equal simulated wall-clock budget (30 full trials of compute:
60 s / k at k trials at once), every ASHA with grace period 1, reduction factor 3, max_t 10:
tunetrain's default ("auto"), tunetrain's other TPE searcher, Ray ASHA + random, Ray ASHA +
OptunaSearch, raw Optuna (TPE + HyperbandPruner, as study.optimize(n_jobs=k) runs it), Syne
Tune 0.16's ASHA and BOHB (its ASHA + KDE, the model-based multi-fidelity method it keeps).
Single-fidelity arms at an equal number of trials (60), FIFO: tunetrain's default, Ray's
OptunaSearch, raw Optuna TPE, Ray's random search. Medians over seeds, spread as the
25th-75th percentiles.

    python benchmarks/search_quality.py              # ~25 min on 2 CPUs
    python benchmarks/search_quality.py --reproducible-cost   # adds the reproducible mode's cost
"""

from __future__ import annotations

import functools
import math
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _simulated as sim

MFH = [f"mfh{d}_{p}" for d in (3, 6) for p in ("good", "moderate", "bad", "terrible")]
MF_ARMS = [
    "tunetrain auto",
    "tunetrain optuna",
    "Ray ASHA + random",
    "Ray ASHA + OptunaSearch",
    "raw Optuna TPE + Hyperband",
    "Syne Tune ASHA",
    "Syne Tune BOHB",
]
SF_ARMS = ["tunetrain auto", "Ray OptunaSearch", "raw Optuna TPE", "Ray random"]
ASHA = {"grace_period": 1, "reduction_factor": 3, "max_t": 10}
FULL_TRIAL_S = 2.0


# -- problems --------------------------------------------------------------------------------


@functools.cache
def problem(name: str) -> sim.Problem:
    from ray import tune

    if name == "branin":
        return sim.Problem(
            "branin",
            {"x0": tune.uniform(-5, 10), "x1": tune.uniform(0, 15)},
            1,
            _branin,
            lambda i: 1.0,
            0.397887,
            "single-fidelity",
        )
    import mfpbench

    bench = mfpbench.get(name if name != "hartmann6" else "mfh6_good", seed=0)
    dims = len(list(bench.space.values()))
    cost = [0.0] + [float(bench.query(bench.sample(), at=10 * i).fid_cost.value) for i in range(1, 11)]
    scale = FULL_TRIAL_S / cost[10]
    optimum = float(bench.query(bench.sample(), at=100).value.definition.bounds[0])
    space = {f"X_{j}": tune.uniform(0.0, 1.0) for j in range(dims)}
    if name == "hartmann6":
        return sim.Problem(
            name, space, 1, functools.partial(_mfh, bench, scale_at=10), lambda i: 1.0, optimum, "single-fidelity"
        )
    return sim.Problem(
        name,
        space,
        10,
        functools.partial(_mfh, bench, scale_at=1),
        lambda i: (cost[i] - cost[i - 1]) * scale,
        optimum,
        "multi-fidelity",
    )


def _mfh(bench: Any, config: Mapping[str, Any], step: int, *, scale_at: int) -> float:
    point = bench.Config.from_dict({k: float(v) for k, v in config.items()})
    return float(bench.query(point, at=10 * step * scale_at).value.value)


def _branin(config: Mapping[str, Any], step: int) -> float:
    # Branin-Hoo (Dixon and Szegő's constants); its minimum is 0.397887. Three lines, so no
    # library is pulled in for it.
    x0, x1 = float(config["x0"]), float(config["x1"])
    b, c_, t = 5.1 / (4 * math.pi**2), 5 / math.pi, 1 / (8 * math.pi)
    return (x1 - b * x0**2 + c_ * x0 - 6) ** 2 + 10 * (1 - t) * math.cos(x0) + 10


# -- arms ------------------------------------------------------------------------------------


def _tunetrain_arm(p: sim.Problem, searcher: str, seed: int, k: int, options: Mapping[str, Any]) -> sim.Arm:
    from tunetrain import Experiment
    from tunetrain.algorithms import build_scheduler, build_searcher

    multi = p.kind == "multi-fidelity"
    experiment = Experiment(
        name="bench",
        train_loop=lambda config: None,
        space=p.space,
        metric="loss",
        mode="min",
        scheduler="asha" if multi else "fifo",
        scheduler_options=ASHA if multi else {},
        searcher=searcher,
        searcher_options=dict(options),
        num_samples=10_000,
    )
    scheduler = build_scheduler(experiment)
    built, _ = build_searcher(experiment, seed=seed, max_concurrent=k, stopped=scheduler.early_stopped)
    built.set_search_properties("loss", "min", p.space)
    return sim.RayArm(built, scheduler, space=p.space, seed=seed)


def _ray_arm(p: sim.Problem, searcher: str, seed: int) -> sim.Arm:
    import optuna
    from ray.tune.schedulers import AsyncHyperBandScheduler, FIFOScheduler
    from ray.tune.search.optuna import OptunaSearch

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    scheduler: Any = (
        AsyncHyperBandScheduler(metric="loss", mode="min", time_attr="training_iteration", **ASHA)
        if p.kind == "multi-fidelity"
        else FIFOScheduler()
    )
    built = None
    if searcher == "optuna":
        built = OptunaSearch(metric="loss", mode="min", seed=seed)
        built.set_search_properties("loss", "min", p.space)
    return sim.RayArm(built, scheduler, space=p.space, seed=seed)


def _optuna_arm(p: sim.Problem, seed: int) -> sim.Arm:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner: Any = (
        optuna.pruners.HyperbandPruner(min_resource=1, max_resource=p.max_t, reduction_factor=3)
        if p.kind == "multi-fidelity"
        else optuna.pruners.NopPruner()
    )
    study = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=seed), pruner=pruner)
    return sim.OptunaArm(study, p.space)


def _syne_arm(p: sim.Problem, method: str, seed: int) -> sim.Arm:
    from syne_tune.config_space import uniform
    from syne_tune.optimizer.baselines import ASHA as SyneASHA
    from syne_tune.optimizer.baselines import BOHB

    space = {key: uniform(domain.lower, domain.upper) for key, domain in p.space.items()}
    cls = SyneASHA if method == "asha" else BOHB
    scheduler = cls(
        space,
        metric="loss",
        time_attr="step",
        max_t=p.max_t,
        do_minimize=True,
        random_seed=seed,
        grace_period=1,
        reduction_factor=3,
    )
    return sim.SyneTuneArm(scheduler)


def make_arm(arm: str, p: sim.Problem, seed: int, k: int) -> sim.Arm:
    makers: dict[str, Callable[[], sim.Arm]] = {
        "tunetrain auto": lambda: _tunetrain_arm(p, "auto", seed, k, {}),
        "tunetrain optuna": lambda: _tunetrain_arm(p, "optuna", seed, k, {}),
        "tunetrain async_bohb": lambda: _tunetrain_arm(p, "async_bohb", seed, k, {}),
        "tunetrain reproducible": lambda: _tunetrain_arm(p, "auto", seed, k, {"reproducible": True}),
        "Ray ASHA + random": lambda: _ray_arm(p, "random", seed),
        "Ray random": lambda: _ray_arm(p, "random", seed),
        "Ray ASHA + OptunaSearch": lambda: _ray_arm(p, "optuna", seed),
        "Ray OptunaSearch": lambda: _ray_arm(p, "optuna", seed),
        "raw Optuna TPE + Hyperband": lambda: _optuna_arm(p, seed),
        "raw Optuna TPE": lambda: _optuna_arm(p, seed),
        "Syne Tune ASHA": lambda: _syne_arm(p, "asha", seed),
        "Syne Tune BOHB": lambda: _syne_arm(p, "bohb", seed),
    }
    return makers[arm]()


# -- runs ------------------------------------------------------------------------------------


def run_one(job: tuple[str, str, int, int, int]) -> dict[str, Any]:
    """One (problem, arm, concurrency, seed) run: its regret curve."""
    name, arm, k, seed, size = job
    p = problem(name)
    started = time.perf_counter()
    if p.kind == "multi-fidelity":
        events = sim.simulate(p, make_arm(arm, p, seed, k), workers=k, wall_s=size * FULL_TRIAL_S / k, trials=None)
        curve: Any = sim.regret_curve(events, p)
    else:
        events = sim.simulate(p, make_arm(arm, p, seed, k), workers=k, wall_s=None, trials=size)
        curve = sim.trials_curve(events, p)
    trials = len({e.trial for e in events})
    return {
        "problem": name,
        "arm": arm,
        "k": k,
        "seed": seed,
        "curve": curve,
        "trials": trials,
        "configs": [e.trial for e in events][:0],
        "cpu_s": time.perf_counter() - started,
    }
