"""Benchmark greval's bootstrap: 100,000 (judge, human) pairs, 4 labels, 1,000 resamples of accuracy,
Cohen's κ and macro-F1 (issue 14's target: ≤ 10 s wall and ≤ 1 GiB peak memory on the project's machine).

Each round runs greval.agreement.bootstrap.run with a batched statistic (confusion tallies of whole
batches of resamples, the metrics from greval.agreement.stats) and prints its wall and CPU time and the
machine's load. Then the median of the rounds, the ratio to the target, the peak resident memory of the
process so far (resource.getrusage: imports and data included), and the speed-up over the per-resample path
greval used before (scikit-learn called on each resample) timed in this process on --old-resamples
resamples and scaled up. The first --old-resamples values of both paths are compared too (same seed, same
draws: they must agree to 1e-12).

    python scripts/bench_bootstrap.py                  # about a minute on 2 cores
    python scripts/bench_bootstrap.py --end-to-end     # also compute_agreement on the same table
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time

import numpy as np
import numpy.typing as npt
import sklearn
from sklearn import metrics as skm

from greval.agreement import bootstrap as bs
from greval.agreement import stats as st

TARGET_S = 10.0
TARGET_MIB = 1024.0
FloatArray = npt.NDArray[np.float64]


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.2f} {five:.2f} {fifteen:.2f} ({os.cpu_count()} CPUs)"


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # KiB on Linux


def data(n: int, k: int, seed: int) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """A judge that is right ~70% of the time, otherwise a uniform label."""
    rng = np.random.default_rng(seed)
    h = rng.integers(0, k, n)
    j = np.where(rng.random(n) < 0.7, h, rng.integers(0, k, n))
    return h.astype(np.int64), j.astype(np.int64)


def batched_three(h: npt.NDArray[np.int64], j: npt.NDArray[np.int64], k: int) -> bs.BatchStatistic:
    codes = h * k + j

    def stat(b: bs.Batch) -> dict[str, FloatArray]:
        cm = b.tally(codes, k * k).reshape(b.size, k, k)
        return {
            "accuracy": st.accuracy_from(cm)[0],
            "cohen_kappa": st.kappa_from(cm)[0],
            "macro_f1": st.macro_f1_from(cm, k)[0],
        }

    return stat


def old_path(
    h: npt.NDArray[np.int64], j: npt.NDArray[np.int64], k: int, resamples: int, seed: int
) -> dict[str, list[float]]:
    """The per-resample loop greval ran before: scikit-learn on each resample (validation skipped, as then)."""
    out: dict[str, list[float]] = {"accuracy": [], "cohen_kappa": [], "macro_f1": []}
    labels = list(range(k))
    with sklearn.config_context(skip_parameter_validation=True, assume_finite=True):
        for idx, _ in bs.Resampler(len(h), None, resamples, seed).draws():
            hh, jj = h[idx], j[idx]
            out["accuracy"].append(float(skm.accuracy_score(hh, jj)))
            out["cohen_kappa"].append(float(skm.cohen_kappa_score(hh, jj, labels=labels)))
            out["macro_f1"].append(float(skm.f1_score(hh, jj, labels=labels, average="macro", zero_division=0)))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100_000, help="(judge, human) pairs")
    ap.add_argument("--labels", type=int, default=4)
    ap.add_argument("--resamples", type=int, default=1000)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--old-resamples", type=int, default=100, help="resamples of the old path, scaled up")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--end-to-end", action="store_true", help="also time compute_agreement on the same table")
    a = ap.parse_args()
    h, j = data(a.n, a.labels, a.seed)
    stat = batched_three(h, j, a.labels)
    print(f"{a.n:,} pairs, {a.labels} labels, {a.resamples:,} resamples of accuracy, κ, macro-F1; {load()}")

    walls, cpus = [], []
    for r in range(a.rounds):
        t0, c0 = time.perf_counter(), time.process_time()
        cis = bs.run(bs.Resampler(a.n, None, a.resamples, a.seed), None, 0.95, stat)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        walls.append(wall)
        cpus.append(cpu)
        print(f"  round {r + 1}: wall {wall:6.2f} s  CPU {cpu:6.2f} s  {load()}")
    peak = peak_mib()
    wall, cpu = statistics.median(walls), statistics.median(cpus)
    for name, ci in cis.items():
        print(f"  {name:12s} 95% CI [{ci.low:.6f}, {ci.high:.6f}]")
    print(
        f"vectorised: median wall {wall:.2f} s, CPU {cpu:.2f} s; wall / target = {wall / TARGET_S:.3f} "
        f"(target {TARGET_S:.0f} s: {'met' if wall <= TARGET_S else 'MISSED'})"
    )
    print(
        f"peak memory (maxrss, whole process): {peak:.0f} MiB; / target = {peak / TARGET_MIB:.3f} "
        f"(target {TARGET_MIB:.0f} MiB: {'met' if peak <= TARGET_MIB else 'MISSED'})"
    )

    # The old per-resample path on the first --old-resamples resamples, scaled; and the same values?
    olds = []
    for _ in range(a.rounds):
        t0 = time.perf_counter()
        old = old_path(h, j, a.labels, a.old_resamples, a.seed)
        olds.append(time.perf_counter() - t0)
    old_wall = statistics.median(olds) * a.resamples / a.old_resamples
    batches = [stat(b) for b in bs.Resampler(a.n, None, a.old_resamples, a.seed).batches()]
    new = {name: np.concatenate([b[name] for b in batches]) for name in old}
    worst = max(float(np.max(np.abs(new[name] - np.array(old[name])))) for name in old)
    print(
        f"old per-resample path: {statistics.median(olds):.2f} s for {a.old_resamples} resamples (median of "
        f"{a.rounds}) → {old_wall:.1f} s for {a.resamples:,}; speed-up {old_wall / wall:.0f}×; "
        f"largest difference over those resamples {worst:.1e}; {load()}"
    )

    if a.end_to_end:
        import pandas as pd

        from greval.agreement import AgreementOptions, AgreementScale, compute_agreement

        names = [f"l{i}" for i in range(a.labels)]
        frame = pd.DataFrame(
            {"item": [f"i{i}" for i in range(a.n)], "judge": np.array(names)[j], "human": np.array(names)[h]}
        )
        t0, c0 = time.perf_counter(), time.process_time()
        compute_agreement(
            frame, AgreementScale(kind="categorical", labels=names), AgreementOptions(bootstrap=a.resamples)
        )
        print(
            f"compute_agreement end to end (reading the frame, every headline statistic and the prevalence, "
            f"both bootstrapped): wall {time.perf_counter() - t0:.2f} s, CPU {time.process_time() - c0:.2f} s, "
            f"peak {peak_mib():.0f} MiB; {load()}"
        )


if __name__ == "__main__":
    main()
