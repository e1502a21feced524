import sys, os, math, statistics, multiprocessing, json
sys.path.insert(0,'/work/main/benchmarks')
def job(j):
    rule, name, k, seed = j
    import tunetrain.algorithms._tpe as T
    global ORIG
    if "ORIG" not in globals():
        ORIG = T._trusted
    T._trusted = (lambda known, budget, minimum=5: budget) if rule == "old" else ORIG
    import search_quality as sq
    r = sq.run_one((name, "tunetrain async_bohb", k, seed, 30))
    return rule, name, k, seed, r["curve"][-1][-1]
if __name__ == "__main__":
    fam = sys.argv[1]
    from _search_arms import MFH, CURVES
    names = CURVES if fam == "curves" else MFH
    seeds = int(sys.argv[2]) if len(sys.argv) > 2 else 10
    jobs = [(rule, n, k, s) for n in names for k in (1, 4, 8) for s in range(seeds) for rule in ("old", "new")]
    with multiprocessing.get_context("spawn").Pool(2) as pool:
        res = pool.map(job, jobs, chunksize=1)
    json.dump(res, open(f"/tmp/ab_{fam}.json", "w"))
    med = {}
    for rule, n, k, s, v in res:
        med.setdefault((rule, n, k), []).append(v)
    for k in (1, 4, 8):
        g = {}
        for rule in ("old", "new"):
            ms = [statistics.median(med[(rule, n, k)]) for n in names]
            g[rule] = math.exp(statistics.mean(math.log(max(m, 1e-6)) for m in ms))
            print(k, rule, " ".join(f"{n}:{m:.4g}" for n, m in zip(names, ms)))
        print(k, "geomean old", f"{g['old']:.4g}", "new", f"{g['new']:.4g}")
