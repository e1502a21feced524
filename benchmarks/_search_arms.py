"""The problems and arms of benchmarks/search_quality.py: every searcher and scheduler the
benchmark compares, built as its own library builds it, for the simulated backend
(benchmarks/_simulated.py).

Problems: mf-prior-bench's multi-fidelity Hartmann functions (mfh3, mfh6 in four correlation
presets; iteration i evaluates fidelity 10 i of 100 and costs that fidelity's cost increment,
scaled so that a full trial takes 2 s); Branin and Hartmann-6 as single-fidelity problems
(0.5 to 1.5 s a trial); and the recorded real learning curves ("curves_digits",
"curves_mnist1d", "curves_chars": benchmarks/_curves.py), each epoch costing the wall time it
took when recorded.
"""

from __future__ import annotations

import functools
import hashlib
import math
import os
from collections.abc import Callable, Mapping
from typing import Any

import _curves
import _simulated as sim

MFH = [f"mfh{d}_{p}" for d in (3, 6) for p in ("good", "moderate", "bad", "terrible")]
CURVES = [f"curves_{name}" for name in _curves.PROBLEMS]
FULL_TRIAL_S = 2.0  # an mfh trial's simulated length


def asha(p: sim.Problem) -> dict[str, int]:
    """Every arm's ASHA: grace period 1, reduction factor 3, up to the problem's full budget."""
    return {"grace_period": 1, "reduction_factor": 3, "max_t": p.max_t}


@functools.cache
def full_trial_s(name: str) -> float:
    """The simulated seconds of a full-budget trial: 2 s for mfh, the median over the grid of a
    recorded config's 20 epochs."""
    if name.startswith("curves_"):
        return _curves.Table(_curves.load(name.removeprefix("curves_"))).median_trial_s()
    return FULL_TRIAL_S


# -- problems --------------------------------------------------------------------------------


@functools.cache
def problem(name: str) -> sim.Problem:
    from ray import tune

    if name.startswith("curves_"):
        return _curves.curve_problem(name.removeprefix("curves_"))
    if name == "branin":
        return sim.Problem(
            "branin",
            {"x0": tune.uniform(-5, 10), "x1": tune.uniform(0, 15)},
            1,
            _branin,
            _sf_cost,
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
            name, space, 1, functools.partial(_mfh, bench, scale_at=10), _sf_cost, optimum, "single-fidelity"
        )
    return sim.Problem(
        name,
        space,
        10,
        functools.partial(_mfh, bench, scale_at=1),
        lambda config, i: (cost[i] - cost[i - 1]) * scale,
        optimum,
        "multi-fidelity",
    )


def _sf_cost(config: Mapping[str, Any], step: int) -> float:
    """A single-fidelity trial's length: 0.5 to 1.5 s, fixed by its config (trials side by
    side end in an order that depends on them, as real ones do)."""
    if os.environ.get("TUNETRAIN_BENCH_EQUAL_COST") == "1":  # --equal-cost (set before the worker processes start)
        return 1.0
    digest = hashlib.sha256(repr(sorted(config.items())).encode()).digest()
    return 0.5 + digest[0] / 255


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


def _tunetrain_arm(
    p: sim.Problem, searcher: str, seed: int, k: int, options: Mapping[str, Any], *, trials: int = 10_000
) -> sim.Arm:
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
        scheduler_options=asha(p) if multi else {},
        searcher=searcher,
        searcher_options=dict(options),
        num_samples=trials,  # what "auto" decides by (GP for a small numeric space of few trials)
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
        AsyncHyperBandScheduler(metric="loss", mode="min", time_attr="training_iteration", **asha(p))  # type: ignore[arg-type]
        if p.kind == "multi-fidelity"
        else FIFOScheduler()
    )
    built = None
    if searcher == "optuna":
        built = OptunaSearch(metric="loss", mode="min", seed=seed)
        built.set_search_properties("loss", "min", p.space)
    return sim.RayArm(built, scheduler, space=p.space, seed=seed)


def _optuna_arm(p: sim.Problem, seed: int, *, gp: bool = False) -> sim.Arm:
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    pruner: Any = (
        optuna.pruners.HyperbandPruner(min_resource=1, max_resource=p.max_t, reduction_factor=3)
        if p.kind == "multi-fidelity"
        else optuna.pruners.NopPruner()
    )
    # GPSampler (Optuna 5): Gaussian-process BO; trials still running count as their predicted
    # mean (Optuna's own constant liar for GP); TPESampler: Optuna's default.
    sampler = optuna.samplers.GPSampler(seed=seed) if gp else optuna.samplers.TPESampler(seed=seed)
    study = optuna.create_study(sampler=sampler, pruner=pruner)
    return sim.OptunaArm(study, p.space)


def _syne_arm(p: sim.Problem, method: str, seed: int) -> sim.Arm:
    from syne_tune.optimizer.baselines import ASHA as SyneASHA
    from syne_tune.optimizer.baselines import BOHB

    cls = SyneASHA if method == "asha" else BOHB
    scheduler = cls(
        {key: _syne_domain(domain) for key, domain in p.space.items()},
        metric="loss",
        time_attr="step",
        max_t=p.max_t,
        do_minimize=True,
        random_seed=seed,
        grace_period=1,
        reduction_factor=3,
    )
    return sim.SyneTuneArm(scheduler)


def _syne_domain(domain: Any) -> Any:
    """A Ray Tune domain as Syne Tune's own (log scale kept; Ray's integer upper bound is
    exclusive, Syne Tune's inclusive)."""
    from ray.tune.search.sample import Categorical, Integer
    from syne_tune.config_space import choice, lograndint, loguniform, randint, uniform

    log = type(domain.get_sampler()).__name__ == "_LogUniform"
    if isinstance(domain, Categorical):
        return choice(list(domain.categories))
    if isinstance(domain, Integer):
        return (lograndint if log else randint)(domain.lower, domain.upper - 1)
    return (loguniform if log else uniform)(domain.lower, domain.upper)


class EpochArm:
    """i-Epoch (Egele et al. 2023, "Is One Epoch All You Need for Multi-Fidelity HPO?",
    arXiv 2307.15422): random configs each trained ``epochs`` iterations, then the ``top_k``
    best of them trained to the full budget (as new trials, from scratch, as the paper's
    second phase does). Written here because no library ships it; ~40 lines.

    The first phase goes on while its compute plus the second phase's stays within
    ``budget_compute`` (worker-seconds): each first-phase trial is charged its first epoch's
    recorded time when it starts, and the second phase is planned as ``workers`` full trials
    of the slowest chosen config per round of ``workers``, at ``MARGIN`` times its first
    epoch's time x max_t: what a user who saw the first epochs would plan, with room for
    later epochs that run slower (on the recorded curves a full trial took up to 1.58x its
    first epoch x 20 at the 90th percentile) and for the hand-over. ``top_k`` is at least
    ``workers``, so the second phase keeps every worker busy."""

    MARGIN = 1.5

    def __init__(self, p: sim.Problem, *, seed: int, budget_compute: float, workers: int, epochs: int = 1) -> None:
        import random

        self.p, self.rng, self.budget, self.epochs = p, random.Random(seed), budget_compute, epochs
        self.workers, self.top_k = workers, max(3, workers)
        self.spent, self.n = 0.0, 0
        self.configs: dict[int, dict[str, Any]] = {}
        self.seen: dict[int, float] = {}  # first-phase trial -> its value after `epochs`
        self.second: list[dict[str, Any]] | None = None
        self.full: set[int] = set()

    def _reserve(self) -> float:
        chosen = sorted(self.seen, key=self.seen.__getitem__)[: self.top_k] or list(self.configs)[:1]
        slowest = max((self.p.cost(self.configs[t], 1) for t in chosen), default=0.0)
        rounds = math.ceil(self.top_k / self.workers)
        return rounds * self.workers * slowest * self.p.max_t * self.MARGIN

    def ask(self) -> tuple[int, dict[str, Any]] | str | None:
        if self.second is None:
            config = {k: d.sample(random_state=self.rng.randrange(2**31)) for k, d in self.p.space.items()}
            cost = sum(self.p.cost(config, step) for step in range(1, self.epochs + 1))
            if self.spent + cost + self._reserve() <= self.budget or not self.configs:
                self.spent += cost
                return self._start(config)
            if len(self.seen) < len(self.configs):
                return None  # the first phase's last results decide the second
            best = sorted(self.seen, key=self.seen.__getitem__)[: self.top_k]
            self.second = [self.configs[t] for t in best]
        if not self.second:
            return "FINISHED"
        trial = self._start(self.second.pop(0))
        self.full.add(trial[0])
        return trial

    def _start(self, config: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        self.n += 1
        self.configs[self.n] = config
        return self.n, config

    def report(self, trial: int, step: int, value: float, *, last: bool) -> bool:
        if trial in self.full:
            return not last
        self.seen[trial] = value
        return step < self.epochs


def make_arm(
    arm: str, p: sim.Problem, seed: int, k: int, *, budget_compute: float = math.inf, trials: int = 10_000
) -> sim.Arm:
    """Arm ``arm`` on ``p`` at ``k`` workers; ``budget_compute``: the run's worker-seconds (i-Epoch
    plans its two phases by it); ``trials``: the sweep's num_samples (a single-fidelity run's
    trials; tunetrain's "auto" decides by it)."""
    makers: dict[str, Callable[[], sim.Arm]] = {
        "tunetrain auto": lambda: _tunetrain_arm(p, "auto", seed, k, {}, trials=trials),
        "tunetrain optuna": lambda: _tunetrain_arm(p, "optuna", seed, k, {}, trials=trials),
        "tunetrain async_bohb": lambda: _tunetrain_arm(p, "async_bohb", seed, k, {}),
        "tunetrain reproducible": lambda: _tunetrain_arm(p, "auto", seed, k, {"reproducible": True}, trials=trials),
        "Ray ASHA + random": lambda: _ray_arm(p, "random", seed),
        "Ray random": lambda: _ray_arm(p, "random", seed),
        "Ray ASHA + OptunaSearch": lambda: _ray_arm(p, "optuna", seed),
        "Ray OptunaSearch": lambda: _ray_arm(p, "optuna", seed),
        "raw Optuna TPE + Hyperband": lambda: _optuna_arm(p, seed),
        "raw Optuna TPE": lambda: _optuna_arm(p, seed),
        "raw Optuna GP": lambda: _optuna_arm(p, seed, gp=True),
        "i-Epoch": lambda: EpochArm(p, seed=seed, budget_compute=budget_compute, workers=k),
        "Syne Tune ASHA": lambda: _syne_arm(p, "asha", seed),
        "Syne Tune BOHB": lambda: _syne_arm(p, "bohb", seed),
    }
    return makers[arm]()
