"""Target 15, search quality: regret per unit of compute, at 1, 4 and 8 trials at once, of
tunetrain's searchers against Ray Tune's stock combinations, raw Optuna and Syne Tune.

Problems (all offline): mf-prior-bench's multi-fidelity Hartmann functions mfh3 and mfh6 in
its four correlation presets (good, moderate, bad, terrible), iteration i evaluating
fidelity 10 i of 100 and costing that fidelity's cost increment, scaled so that a full
trial (10 iterations) takes 2 s; Branin and Hartmann-6 (mf-prior-bench's mfh6 at its full
fidelity) as single-fidelity problems; and real learning curves recorded from PyTorch
training by tunetrain's own sweeps (benchmarks/_curves.py: the digits MLP, a 1-D CNN on
MNIST-1D, a character-level transformer; 20 epochs, each costing its recorded wall time).
Time is simulated (benchmarks/_simulated.py): the searchers and schedulers are the real
objects, driven as their libraries drive them. Problems and arms: benchmarks/_search_arms.py.

Multi-fidelity arms at an equal simulated wall-clock budget (30 full trials of compute:
60 s / k at k trials at once), every ASHA with grace period 1, reduction factor 3, max_t 10:
tunetrain's default ("auto"), tunetrain's other TPE searcher, Ray ASHA + random, Ray ASHA +
OptunaSearch, raw Optuna (TPE + HyperbandPruner, as study.optimize(n_jobs=k) runs it), Syne
Tune 0.16's ASHA and BOHB (its ASHA + KDE, the model-based multi-fidelity method it keeps);
on the real curves (max_t 20, a budget of 30 median full trials) also i-Epoch (Egele et
al. 2023: one epoch each, then the best trained fully). Single-fidelity arms at an equal
number of trials (60), FIFO: tunetrain's default, Ray's OptunaSearch, raw Optuna TPE and GP,
Ray's random search. Medians over seeds, spread as the 25th-75th percentiles.

    python benchmarks/search_quality.py                     # every family, 10 seeds, 2 processes
    python benchmarks/search_quality.py --families curves   # one family (mfh, single, curves)
    python benchmarks/search_quality.py --results F         # tabulate and plot a saved run again
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import _common as c
import _simulated as sim
from _search_arms import CURVES, FULL_TRIAL_S, MFH, full_trial_s, make_arm, problem
from _search_figures import _median, _runs, final, plot, plot_trials, reach_fraction, regret_at, spread

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
CURVE_RUN = [*MF_RUN, "i-Epoch"]
# "tunetrain optuna": tunetrain's TPE (FidelityTPESearch), what "auto" is on a space with a choice.
SF_ARMS = ["tunetrain auto", "tunetrain optuna", "Ray OptunaSearch", "raw Optuna TPE", "raw Optuna GP", "Ray random"]
FAMILIES = ("mfh", "single", "curves")


# -- runs ------------------------------------------------------------------------------------


def run_one(job: tuple[str, str, int, int, int]) -> dict[str, Any]:
    """One (problem, arm, concurrency, seed) run: its regret curve. ``size``: multi-fidelity,
    the budget in full trials of compute; single-fidelity, the number of trials."""
    name, arm, k, seed, size = job
    p = problem(name)
    started = time.perf_counter()
    if p.kind == "multi-fidelity":
        budget = size * full_trial_s(name)
        made = make_arm(arm, p, seed, k, budget_compute=budget)
        events = sim.simulate(p, made, workers=k, wall_s=budget / k, trials=None)
        curve: Any = sim.regret_curve(events, p)
    else:
        events = sim.simulate(p, make_arm(arm, p, seed, k, trials=size), workers=k, wall_s=None, trials=size)
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
    parser.add_argument("--families", nargs="+", choices=FAMILIES, default=list(FAMILIES), help="the problems run")
    parser.add_argument("--ks", nargs="+", type=int, default=[1, 4, 8], help="trials at once")
    parser.add_argument("--single-fidelity-only", action="store_true", help="only Branin and Hartmann-6")
    parser.add_argument("--equal-cost", action="store_true", help="single-fidelity trials all 1 s long")
    args = parser.parse_args()
    families = ["single"] if args.single_fidelity_only else args.families
    mf_run, syne_note = _available(MF_RUN)
    curve_run = _available(CURVE_RUN)[0]
    ks, seeds = args.ks, args.seeds
    tasks = MFH if "mfh" in families else []
    sf_problems = ["branin", "hartmann6"] if "single" in families else []
    curves = CURVES if "curves" in families else []
    if args.smoke:
        tasks, sf_problems, curves, seeds, ks = tasks[:1], sf_problems[:1], curves[:1], 1, [4]
        BUDGET_TRIALS, SF_TRIALS = 3, 12
    if args.equal_cost:
        os.environ["TUNETRAIN_BENCH_EQUAL_COST"] = "1"
    jobs = [(t, a, k, s, BUDGET_TRIALS) for t in tasks for a in mf_run for k in ks for s in range(seeds)]
    jobs += [(t, a, k, s, BUDGET_TRIALS) for t in curves for a in curve_run for k in ks for s in range(seeds)]
    jobs += [(t, a, k, s, SF_TRIALS) for t in sf_problems for a in SF_ARMS for k in ks for s in range(seeds)]
    jobs += [(t, "tunetrain reproducible", 4, s, BUDGET_TRIALS) for t in tasks[:2] for s in range(seeds)]
    jobs += [(t, "tunetrain reproducible", 4, s, SF_TRIALS) for t in sf_problems for s in range(seeds)]
    results, took = _results(jobs, args)
    results = _with_auto(results)
    images = c.REPO / "docs" / "images"
    if sf_problems and not (args.smoke or args.equal_cost):  # the figure is of the main run's lengths
        plot_trials(results, SF_ARMS, 4, images / "search_quality_single_k4.png", problems=sf_problems)
    if tasks:
        if not args.smoke:
            budgets = {t: BUDGET_TRIALS * full_trial_s(t) for t in tasks}
            for axis, kind in ((0, "wall"), (1, "compute")):
                plot(results, ["tunetrain auto", *mf_run], 4, axis, images / f"search_quality_{kind}_k4.png",
                     problems=tasks, budget_s=budgets)  # fmt: skip
        print(_section(results, tasks, sf_problems, ["tunetrain auto", *mf_run], ks, seeds, took, syne_note))
    elif sf_problems:
        print(
            "\n".join(
                _single_fidelity(results, sf_problems, ks, seeds) + _reproducible(results, [], sf_problems, seeds)
            )
        )
    if curves:
        if not args.smoke:
            budgets = {t: BUDGET_TRIALS * full_trial_s(t) for t in curves}
            plot(results, ["tunetrain auto", *curve_run], 4, 0, images / "search_quality_curves_k4.png",
                 problems=curves, budget_s=budgets)  # fmt: skip
        print(_curves_section(results, curves, ["tunetrain auto", *curve_run], ks, seeds, took))


def _results(jobs: list[tuple[str, str, int, int, int]], args: Any) -> tuple[list[dict[str, Any]], float]:
    """Every job's run (2 processes unless told), saved; or the saved runs of ``--results``."""
    if args.results:
        saved = json.loads(Path(args.results).read_text())
        return saved["results"], saved["took"]
    started = time.perf_counter()
    if args.smoke or args.processes == 1:
        results = [run_one(job) for job in jobs]
    else:
        with multiprocessing.get_context("spawn").Pool(args.processes) as pool:
            results = pool.map(run_one, jobs, chunksize=1)
    took = time.perf_counter() - started
    out = c.work_root("search_quality") / "results.json"
    out.write_text(json.dumps({"results": results, "took": took}))
    print(f"results: {out}", file=sys.stderr)
    return results, took


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
        fraction = reach_fraction(results, name, "tunetrain auto", k, target, budget_s=BUDGET_TRIALS * FULL_TRIAL_S)
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
            reach_fraction(
                results, t, "tunetrain auto", kk, medians["Ray ASHA + random"][i], budget_s=BUDGET_TRIALS * FULL_TRIAL_S
            )
            <= 0.5
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


def _curves_section(
    results: list[dict[str, Any]], curves: list[str], arms: list[str], ks: list[int], seeds: int, took: float
) -> str:
    """The real-curve family: per problem and k, each arm's final regret; per k, the geometric
    mean over the problems and whether auto is at or below the best other arm; each problem's
    noise floor and rung correlation (how far its low fidelities mislead)."""
    import _curves

    others = [a for a in arms if not a.startswith("tunetrain")]
    rows = []
    for name in curves:
        table = _curves.Table(_curves.load(name.removeprefix("curves_")))
        for k in ks:
            finals = {a: [final(r) for r in _runs(results, problem=name, arm=a, k=k)] for a in arms}
            rows.append([name if k == ks[0] else "", str(k), *(spread(finals[a]) for a in arms)])
        rows[-len(ks)][0] += (
            f" (noise floor {table.noise_floor():.3g}; epoch 1 ranks as the end {table.rung_correlation(1):.2f}, "
            f"epoch 4 {table.rung_correlation(4):.2f}; a full trial {full_trial_s(name):.1f} s)"
        )
    lines = [
        "| k | budget | " + " | ".join(arms) + " | auto <= best other |",
        "| " + " | ".join("---" for _ in arms) + " | --- | --- | --- |",
    ]
    verdicts = []
    for k in ks:
        for share in (1.0, 1 / 3):
            medians = {
                a: [
                    _median([_regret_at_share(r, share) for r in _runs(results, problem=t, arm=a, k=k)]) for t in curves
                ]
                for a in arms
            }
            geo = {a: math.exp(statistics.mean(math.log(max(v, 1e-9)) for v in medians[a])) for a in arms}
            wins = sum(medians["tunetrain auto"][i] <= min(medians[a][i] for a in others) for i in range(len(curves)))
            if share == 1.0:
                verdicts.append(geo["tunetrain auto"] <= min(geo[a] for a in others))
            lines.append(
                f"| {k} | {'all' if share == 1.0 else 'a third'} | "
                + " | ".join(f"{geo[a]:.3g}" for a in arms)
                + f" | {wins}/{len(curves)} |"
            )
    budgets = ", ".join(f"{t} {BUDGET_TRIALS * full_trial_s(t):.0f} s" for t in curves)
    return c.section(
        title="15b. Search quality on recorded real learning curves",
        command="python benchmarks/search_quality.py --families curves",
        target="at each k, tunetrain auto's geometric-mean final regret over the problems at or below the best "
        "other arm's",
        headers=["problem", "k", *arms],
        rows=rows,
        verdict=c.verdict(
            all(verdicts), ", ".join(f"k={k}: {'met' if v else 'not met'}" for k, v in zip(ks, verdicts, strict=True))
        ),
        notes=f"Cells: median final regret (val_loss above the grid's best final val_loss) [25th-75th percentile] over "
        f"{seeds} seeds, at an equal simulated wall-clock budget of {BUDGET_TRIALS} median full trials of compute / k "
        f"({budgets} at k=1); ASHA with grace period 1, reduction factor 3, max_t 20.\n\nGeometric mean over the "
        f"problems of the median regret at the budget's end (all) and after a third of it (10 median full trials):\n\n"
        + "\n".join(lines)
        + f"\n\n{len(results)} simulated runs in {took:.0f} s.",
    )


def _regret_at_share(run: dict[str, Any], share: float) -> float:
    """A multi-fidelity run's regret after ``share`` of its wall budget."""
    budget = BUDGET_TRIALS * full_trial_s(run["problem"]) / run["k"]
    return regret_at(run["curve"], budget * share, 0)


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
        # The default mode of the same searcher: TPE (auto is GP on the single-fidelity problems).
        default = "tunetrain auto" if problem(name).kind == "multi-fidelity" else "tunetrain optuna"
        base = _runs(results, problem=name, arm=default, k=4)
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
