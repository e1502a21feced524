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

    python benchmarks/search_quality.py               # 10 seeds, 2 processes
    python benchmarks/search_quality.py --results F   # tabulate and plot a saved run again
"""

from __future__ import annotations

import functools
import hashlib
import json
import math
import multiprocessing
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c
import _simulated as sim

MFH = [f"mfh{d}_{p}" for d in (3, 6) for p in ("good", "moderate", "bad", "terrible")]
# The arms run; "tunetrain auto" is whichever of the two tunetrain searchers auto picks for ASHA
# (the same runs, relabelled: see _with_auto).
MF_RUN = [
    "tunetrain async_bohb",
    "tunetrain optuna",
    "Ray ASHA + random",
    "Ray ASHA + OptunaSearch",
    "raw Optuna TPE + Hyperband",
    "Syne Tune ASHA",
    "Syne Tune BOHB",
]
MF_ARMS = ["tunetrain auto", *MF_RUN]
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
        AsyncHyperBandScheduler(metric="loss", mode="min", time_attr="training_iteration", **ASHA)  # type: ignore[arg-type]
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
    return {
        "problem": name,
        "arm": arm,
        "k": k,
        "seed": seed,
        "curve": curve,
        "trials": len({e.trial for e in events}),
        "sim_s": events[-1].time if events else 0.0,
        "cpu_s": time.perf_counter() - started,
    }


# -- figures ---------------------------------------------------------------------------------


def regret_at(curve: list[Any], x: float, axis: int) -> float:
    """A multi-fidelity run's regret at wall time (axis 0) or compute (axis 1) ``x``."""
    value = math.inf
    for point in curve:
        if point[axis] > x:
            break
        value = point[2]
    return value


def final(run: Mapping[str, Any]) -> float:
    curve = run["curve"]
    if not curve:
        return math.inf
    return float(curve[-1][2] if isinstance(curve[-1], list | tuple) else curve[-1])


def spread(values: list[float]) -> str:
    """Median [25th-75th percentile]."""
    ordered = sorted(values)
    q = statistics.quantiles(ordered, n=4, method="inclusive") if len(ordered) > 1 else [ordered[0]] * 3
    return f"{q[1]:.3g} [{q[0]:.3g}-{q[2]:.3g}]"


def _median(values: list[float]) -> float:
    return float(statistics.median(values)) if values else math.inf


def _runs(results: list[dict[str, Any]], **match: Any) -> list[dict[str, Any]]:
    return [r for r in results if all(r[key] == value for key, value in match.items())]


def reach_fraction(results: list[dict[str, Any]], name: str, arm: str, k: int, target: float) -> float:
    """The share of the wall budget after which ``arm``'s median regret is at or below ``target``."""
    budget = BUDGET_TRIALS * FULL_TRIAL_S / k
    runs = _runs(results, problem=name, arm=arm, k=k)
    for i in range(1, 101):
        x = budget * i / 100
        if _median([regret_at(r["curve"], x, 0) for r in runs]) <= target:
            return i / 100
    return math.inf


def plot(results: list[dict[str, Any]], arms: list[str], k: int, axis: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 4, figsize=(16, 7), sharex=True)
    budget = BUDGET_TRIALS * FULL_TRIAL_S / k * (k if axis == 1 else 1)
    xs = [budget * i / 60 for i in range(1, 61)]
    for ax, name in zip(axes.flat, MFH, strict=True):
        for arm in arms:
            runs = _runs(results, problem=name, arm=arm, k=k)
            if runs:
                ys = [_median([regret_at(r["curve"], x, axis) for r in runs]) for x in xs]
                ax.plot(xs, [y if math.isfinite(y) else float("nan") for y in ys], label=arm)
        ax.set_title(name)
        ax.set_yscale("log")
    for ax in axes[1]:
        ax.set_xlabel("simulated wall time, s" if axis == 0 else "compute, worker-seconds")
    for ax in axes[:, 0]:
        ax.set_ylabel("median regret")
    axes.flat[0].legend(fontsize=7)
    fig.suptitle(f"Median regret at {k} trials at once (benchmarks/search_quality.py)")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=80)
    plt.close(fig)


# -- the script ------------------------------------------------------------------------------

BUDGET_TRIALS = 30  # the multi-fidelity budget: 30 full trials of compute
SF_TRIALS = 60


def _available(arms: list[str]) -> tuple[list[str], str]:
    try:
        import syne_tune  # noqa: F401
    except ImportError as exc:
        return [a for a in arms if not a.startswith("Syne Tune")], f"Syne Tune is not installed here ({exc})."
    return arms, "Syne Tune 0.16 installs here (the bench extra)."


def main() -> None:
    global BUDGET_TRIALS, SF_TRIALS
    parser = c.parser(__doc__ or "")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--results", help="a results file of an earlier run: only tabulate and plot it")
    parser.add_argument("--single-fidelity-only", action="store_true", help="only Branin and Hartmann-6")
    parser.add_argument("--equal-cost", action="store_true", help="single-fidelity trials all 1 s long")
    args = parser.parse_args()
    mf_run, syne_note = _available(MF_RUN)
    mf_arms = ["tunetrain auto", *mf_run]
    ks = [1, 4, 8]
    tasks, sf_problems, seeds = MFH, ["branin", "hartmann6"], args.seeds
    if args.smoke:
        tasks, sf_problems, seeds, ks = MFH[:1], ["branin"], 1, [4]
        BUDGET_TRIALS, SF_TRIALS = 3, 12
    if args.single_fidelity_only:
        tasks = []
    if args.equal_cost:
        os.environ["TUNETRAIN_BENCH_EQUAL_COST"] = "1"
    jobs = [(t, a, k, s, BUDGET_TRIALS) for t in tasks for a in mf_run for k in ks for s in range(seeds)]
    jobs += [(t, a, k, s, SF_TRIALS) for t in sf_problems for a in SF_ARMS for k in ks for s in range(seeds)]
    jobs += [(t, "tunetrain reproducible", 4, s, BUDGET_TRIALS) for t in tasks[:2] for s in range(seeds)]
    jobs += [(t, "tunetrain reproducible", 4, s, SF_TRIALS) for t in sf_problems for s in range(seeds)]
    started = time.perf_counter()
    if args.results:
        saved = json.loads(Path(args.results).read_text())
        results, took = saved["results"], saved["took"]
    else:
        if args.smoke or args.processes == 1:
            results = [run_one(job) for job in jobs]
        else:
            with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
                results = pool.map(run_one, jobs, chunksize=1)
        took = time.perf_counter() - started
        out = c.work_root("search_quality") / "results.json"
        out.write_text(json.dumps({"results": results, "took": took}))
        print(f"results: {out}", file=sys.stderr)
    results = _with_auto(results)
    if args.single_fidelity_only:
        print(
            "\n".join(
                _single_fidelity(results, sf_problems, ks, seeds) + _reproducible(results, [], sf_problems, seeds)
            )
        )
        return
    if not args.smoke:
        for k in (4,):
            plot(results, mf_arms, k, 0, c.REPO / "docs" / "images" / f"search_quality_wall_k{k}.png")
            plot(results, mf_arms, k, 1, c.REPO / "docs" / "images" / f"search_quality_compute_k{k}.png")
    print(_section(results, tasks, sf_problems, mf_arms, ks, seeds, took, syne_note))


def _with_auto(results: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The results, with the runs of the searcher that "auto" picks for ASHA on one objective
    and a flat space (tunetrain.algorithms.resolve_searcher) also under "tunetrain auto"."""
    from ray import tune

    from tunetrain import Experiment
    from tunetrain.algorithms import resolve_searcher

    asha = Experiment(
        name="bench",
        train_loop=lambda config: None,
        space={"x": tune.uniform(0, 1)},
        metric="loss",
        mode="min",
        scheduler="asha",
    )
    picked = f"tunetrain {resolve_searcher(asha)[0]}"
    return [
        *results,
        *(
            {**r, "arm": "tunetrain auto"}
            for r in results
            if r["arm"] == picked and r["k"] and problem(r["problem"]).kind == "multi-fidelity"
        ),
    ]


def _section(
    results: list[dict[str, Any]],
    tasks: list[str],
    sf_problems: list[str],
    mf_arms: list[str],
    ks: list[int],
    seeds: int,
    took: float,
    syne_note: str,
) -> str:
    k = 4 if 4 in ks else ks[0]
    others = [a for a in mf_arms if not a.startswith("tunetrain")]
    rows, reached, best = [], 0, 0
    for name in tasks:
        finals = {a: [final(r) for r in _runs(results, problem=name, arm=a, k=k)] for a in mf_arms}
        target = _median(finals["Ray ASHA + random"])
        fraction = reach_fraction(results, name, "tunetrain auto", k, target)
        ours = _median(finals["tunetrain auto"])
        best_other = min(_median(finals[a]) for a in others)
        reached += fraction <= 0.5
        best += ours <= best_other
        rows.append(
            [name, *(spread(finals[a]) for a in mf_arms), f"{fraction:.0%}" if math.isfinite(fraction) else "never"]
        )
    lines = [
        "",
        f"Multi-fidelity, every k (median final regret over {seeds} seeds; tasks where tunetrain auto is at or "
        "below the best other arm / reaches ASHA + random's final median regret within half the budget):",
        "",
        "| k | " + " | ".join(mf_arms) + " | auto <= best other | auto reaches ASHA+random in <= 50 % |",
        "| " + " | ".join("---" for _ in range(len(mf_arms) + 3)) + " |",
    ]
    for kk in ks:
        medians = {
            a: [_median([final(r) for r in _runs(results, problem=t, arm=a, k=kk)]) for t in tasks] for a in mf_arms
        }
        wins = sum(medians["tunetrain auto"][i] <= min(medians[a][i] for a in others) for i in range(len(tasks)))
        half = sum(
            reach_fraction(results, t, "tunetrain auto", kk, medians["Ray ASHA + random"][i]) <= 0.5
            for i, t in enumerate(tasks)
        )
        geo = {a: math.exp(statistics.mean(math.log(max(v, 1e-9)) for v in medians[a])) for a in mf_arms}
        lines.append(
            f"| {kk} | "
            + " | ".join(f"{geo[a]:.3g}" for a in mf_arms)
            + f" | {wins}/{len(tasks)} | {half}/{len(tasks)} |"
        )
    lines += ["", "(the arms' columns: geometric mean over the tasks of the median final regret)", ""]
    lines += _single_fidelity(results, sf_problems, ks, seeds)
    lines += _reproducible(results, tasks[:2], sf_problems, seeds)
    lines += [
        "",
        f"{len(results)} simulated runs in {took:.0f} s. {syne_note} Ray's TuneBOHB is not an arm: its "
        "HyperBandForBOHB pauses trials and picks which to resume through Tune's controller, which the simulated "
        "backend does not emulate; hpbandster, which it needs, installs here.",
    ]
    return c.section(
        title="15. Search quality",
        command="python benchmarks/search_quality.py",
        target="at k=4 on the 8 mfh tasks, tunetrain's default reaches ASHA + random's final median regret in <= 50 % "
        "of the budget on >= 6 of 8 and ends at or below the best other arm on >= 6 of 8; on Branin and Hartmann-6 "
        "at k=4, median regret at 60 trials <= 1.5x tunetrain's own at k=1 and below raw Optuna's n_jobs=4",
        headers=["task (k=4)", *mf_arms, "auto reaches ASHA+random's final at"],
        rows=rows,
        verdict=c.verdict(
            reached >= 6 and best >= 6 and _sf_met(results, sf_problems),
            f"reached in <= 50 % on {reached}/{len(tasks)}, at or below the best other arm on {best}/{len(tasks)}; "
            f"single-fidelity: {_sf_text(results, sf_problems)}",
        ),
        notes="Cells: median final regret [25th-75th percentile] over seeds, at an equal simulated wall-clock budget "
        f"({BUDGET_TRIALS} full trials of compute, {BUDGET_TRIALS * FULL_TRIAL_S:.0f} s / k).\n" + "\n".join(lines),
    )


def _sf_ratio(results: list[dict[str, Any]], name: str) -> tuple[float, float, float]:
    one = _median([final(r) for r in _runs(results, problem=name, arm="tunetrain auto", k=1)])
    four = _median([final(r) for r in _runs(results, problem=name, arm="tunetrain auto", k=4)])
    raw = _median([final(r) for r in _runs(results, problem=name, arm="raw Optuna TPE", k=4)])
    return one, four, raw


def _sf_met(results: list[dict[str, Any]], problems: list[str]) -> bool:
    for name in problems:
        one, four, raw = _sf_ratio(results, name)
        if not (four <= 1.5 * one and four < raw):
            return False
    return True


def _sf_text(results: list[dict[str, Any]], problems: list[str]) -> str:
    parts = []
    for name in problems:
        one, four, raw = _sf_ratio(results, name)
        ratio = four / one if one > 0 else math.inf
        parts.append(f"{name} k=4 {four:.3g} = {ratio:.2f}x k=1's {one:.3g}, raw Optuna n_jobs=4 {raw:.3g}")
    return "; ".join(parts)


def _single_fidelity(results: list[dict[str, Any]], problems: list[str], ks: list[int], seeds: int) -> list[str]:
    lines = [
        f"Single-fidelity, FIFO, regret at {SF_TRIALS} trials (median [25th-75th] over {seeds} seeds):",
        "",
        "| problem | k | " + " | ".join(SF_ARMS) + " |",
        "| " + " | ".join("---" for _ in range(len(SF_ARMS) + 2)) + " |",
    ]
    for name in problems:
        for k in ks:
            cells = [spread([final(r) for r in _runs(results, problem=name, arm=a, k=k)]) for a in SF_ARMS]
            lines.append(f"| {name} | {k} | " + " | ".join(cells) + " |")
    return [*lines, ""]


def _reproducible(results: list[dict[str, Any]], tasks: list[str], problems: list[str], seeds: int) -> list[str]:
    lines = [
        "Reproducible mode (searcher_options={'reproducible': True}) at k=4, against the default mode: "
        f"median final regret, and simulated wall time (multi-fidelity: to the budget's end; single-fidelity: to "
        f"{SF_TRIALS} trials):",
        "",
        "| problem | default regret | reproducible regret | default wall s | reproducible wall s | wall ratio |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for name in [*tasks, *problems]:
        base = _runs(results, problem=name, arm="tunetrain auto", k=4)
        rep = _runs(results, problem=name, arm="tunetrain reproducible", k=4)
        if not base or not rep:
            continue
        wall_b, wall_r = _median([r["sim_s"] for r in base]), _median([r["sim_s"] for r in rep])
        lines.append(
            f"| {name} | {spread([final(r) for r in base])} | {spread([final(r) for r in rep])} | {wall_b:.3g} | "
            f"{wall_r:.3g} | {wall_r / wall_b:.2f} |"
        )
    lines.append(
        "\nMulti-fidelity runs stop at the wall budget, so their wall time is the same and the cost shows as "
        "fewer trials in that time (regret); single-fidelity runs stop at 60 trials, so the cost shows as wall time."
    )
    return lines


if __name__ == "__main__":
    main()
