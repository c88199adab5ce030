"""Simulate bootstrap CI coverage for Cohen's κ and Spearman ρ with a known truth.

Each repetition draws n pairs from a known population, computes greval's percentile bootstrap CI
(greval.agreement.bootstrap: κ from batched confusion tallies, Spearman from average ranks, as in reports) and
checks whether it contains the population value. Coverage near the nominal level means the CIs in reports can be
trusted.

  κ:        pairs from a fixed k×k joint distribution P; κ = (Σ diag P − Σ p_h p_j) / (1 − Σ p_h p_j)
  Spearman: bivariate normal with correlation r; ρ_s = (6/π)·arcsin(r/2)
  --clustered: κ on n/5 groups of 5 items whose judge accuracy a_g ~ Beta(4, 2) varies by group
            (judge = human with prob. a_g, else a fresh draw from p); the population joint is
            E[a]·diag(p) + (1 − E[a])·p pᵀ. Compares resampling items (ignores the clusters) with
            resampling groups (what greval does when --group is given).

    python scripts/bootstrap_coverage.py                  # defaults, ~2-3 minutes on 2 cores
    python scripts/bootstrap_coverage.py --reps 1000 --resamples 1000 --n 100 --workers 4
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor

import numpy as np

from greval.agreement import bootstrap as bs
from greval.agreement import stats as st

# A 3-label joint distribution (rows human, columns judge): a judge that is right ~70% of the time,
# a little lenient (more mass above the diagonal).
JOINT = np.array(
    [
        [0.20, 0.06, 0.02],
        [0.04, 0.25, 0.07],
        [0.01, 0.05, 0.30],
    ]
)
JOINT = JOINT / JOINT.sum()


def true_kappa(p: np.ndarray) -> float:
    po = float(np.trace(p))
    pe = float(p.sum(axis=1) @ p.sum(axis=0))
    return (po - pe) / (1 - pe)


P_CLUSTER = np.array([0.3, 0.3, 0.4])
A_MEAN = 4 / 6  # Beta(4, 2)


def clustered_joint() -> np.ndarray:
    return A_MEAN * np.diag(P_CLUSTER) + (1 - A_MEAN) * np.outer(P_CLUSTER, P_CLUSTER)


def true_spearman(r: float) -> float:
    return 6 / math.pi * math.asin(r / 2)


def one_rep(args: tuple[str, int, int, int, float, float]) -> tuple[bool | None, float]:
    """One repetition: (covered?, CI width); covered is None when the CI is undefined."""
    which, seed, n, resamples, confidence, r = args
    rng = np.random.default_rng(seed)
    groups = None
    if which.startswith("clustered"):
        size = 5
        m = n // size
        k = len(P_CLUSTER)
        a = rng.beta(4, 2, size=m)
        h = rng.choice(k, size=m * size, p=P_CLUSTER).astype(np.int64)
        other = rng.choice(k, size=m * size, p=P_CLUSTER).astype(np.int64)
        j = np.where(rng.random(m * size) < np.repeat(a, size), h, other).astype(np.int64)
        n = m * size
        truth = true_kappa(clustered_joint())
        if which == "clustered-groups":
            groups = np.repeat(np.arange(m), size).astype(np.int64)
    elif which == "kappa":
        k = JOINT.shape[0]
        cells = rng.choice(k * k, size=n, p=JOINT.ravel())
        h, j = (cells // k).astype(np.int64), (cells % k).astype(np.int64)
        truth = true_kappa(JOINT)
    else:
        z = rng.multivariate_normal([0, 0], [[1, r], [r, 1]], size=n)
        x, y = z[:, 0], z[:, 1]
        truth = true_spearman(r)

        def stat(idx: np.ndarray, _inst: np.ndarray | None) -> dict[str, st.Val]:
            return {"x": st.correlation("spearman", x[idx], y[idx])}

    sampler = bs.Resampler(n, groups, resamples, seed + 1)
    if which == "spearman":
        ci = bs.run(sampler, stat, confidence)["x"]
    else:  # κ as greval bootstraps it: confusion tallies of whole batches of resamples
        codes = h * k + j

        def kappas(b: bs.Batch) -> dict[str, np.ndarray]:
            return {"x": st.kappa_from(b.tally(codes, k * k).reshape(b.size, k, k))[0]}

        ci = bs.run(sampler, None, confidence, kappas)["x"]
    if ci.low is None or ci.high is None:
        return None, math.nan
    return bool(ci.low <= truth <= ci.high), ci.high - ci.low


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=300, help="simulated data sets per statistic")
    ap.add_argument("--resamples", type=int, default=300, help="bootstrap resamples per data set")
    ap.add_argument("--n", type=int, default=200, help="items per data set")
    ap.add_argument("--r", type=float, default=0.5, help="latent correlation for the Spearman case")
    ap.add_argument("--confidence", type=float, default=0.95)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--only", choices=["kappa", "spearman", "clustered"], default=None)
    ap.add_argument("--clustered", action="store_true", help="also run the clustered κ scenario")
    a = ap.parse_args()
    print(f"reps={a.reps} resamples={a.resamples} n={a.n} confidence={a.confidence} seed={a.seed}")
    scenarios = [w for w in ("kappa", "spearman") if not a.only or w == a.only]
    if a.clustered or a.only == "clustered":
        scenarios += ["clustered-items", "clustered-groups"]
    for which in scenarios:
        truths = {"kappa": true_kappa(JOINT), "spearman": true_spearman(a.r)}
        truth = truths.get(which, true_kappa(clustered_joint()))
        jobs = [(which, a.seed * 1_000_003 + 2 * i, a.n, a.resamples, a.confidence, a.r) for i in range(a.reps)]
        t0 = time.time()
        with ProcessPoolExecutor(max_workers=a.workers) as pool:
            results = list(pool.map(one_rep, jobs, chunksize=max(1, a.reps // (8 * a.workers))))
        defined = [(c, w) for c, w in results if c is not None]
        cover = sum(c for c, _ in defined) / len(defined)
        se = math.sqrt(cover * (1 - cover) / len(defined))
        width = float(np.mean([w for _, w in defined]))
        print(
            f"{which:16s} truth={truth:.4f}  coverage={cover:.3f} ± {1.96 * se:.3f} (95% MC band)  "
            f"mean CI width={width:.3f}  undefined={len(results) - len(defined)}  {time.time() - t0:.0f}s"
        )


if __name__ == "__main__":
    main()
