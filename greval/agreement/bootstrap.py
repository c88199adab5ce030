"""Seeded bootstrap over items or whole groups (clusters), with percentile CIs.

We resample ourselves rather than call scipy.stats.bootstrap because one resample must feed every
statistic at once, be shared across judge versions (paired differences), and may draw whole clusters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt
import sklearn

from greval.agreement.stats import Val

IntArray = npt.NDArray[np.int64]


class Resampler:
    """Draws bootstrap resamples of row indices; units are single rows or whole groups."""

    def __init__(self, n: int, groups: IntArray | None, resamples: int, seed: int) -> None:
        self.n = n
        self.resamples = resamples
        self.seed = seed
        if groups is None:
            self.units: list[IntArray] = [np.array([i], dtype=np.int64) for i in range(n)]
            self.clustered = False
        else:
            self.units = [np.flatnonzero(groups == g).astype(np.int64) for g in np.unique(groups)]
            self.clustered = True

    def draws(self) -> Iterator[tuple[IntArray, IntArray]]:
        """Yield (row indices, cluster-instance ids): a group drawn twice counts as two clusters."""
        rng = np.random.default_rng(self.seed)
        m = len(self.units)
        if m == 0:
            return
        if not self.clustered:
            for _ in range(self.resamples):
                idx = rng.integers(0, m, size=m).astype(np.int64)
                yield idx, idx
            return
        sizes = np.array([len(u) for u in self.units])
        for _ in range(self.resamples):
            pick = rng.integers(0, m, size=m)
            idx = np.concatenate([self.units[p] for p in pick])
            inst = np.repeat(np.arange(m, dtype=np.int64), sizes[pick])
            yield idx, inst


def percentile_ci(samples: list[float], confidence: float) -> tuple[float, float]:
    """Percentile interval of the bootstrap distribution."""
    tail = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(np.asarray(samples, dtype=float), [tail, 1.0 - tail])
    return float(lo), float(hi)


class CI:
    """A bootstrap interval, or None with a note."""

    def __init__(self, low: float | None, high: float | None, note: str | None) -> None:
        self.low, self.high, self.note = low, high, note


def summarise(samples: dict[str, list[float]], resamples: int, confidence: float) -> dict[str, CI]:
    """CIs from collected resample values; resamples where a statistic was undefined are counted in a note."""
    out: dict[str, CI] = {}
    for name, vals in samples.items():
        undefined = resamples - len(vals)
        if len(vals) < max(2, resamples // 2):
            out[name] = CI(None, None, f"CI undefined: statistic undefined in {undefined}/{resamples} resamples")
            continue
        lo, hi = percentile_ci(vals, confidence)
        note = f"{undefined}/{resamples} resamples undefined, CI from the rest" if undefined else None
        out[name] = CI(lo, hi, note)
    return out


def run(
    resampler: Resampler,
    statistic: Callable[[IntArray, IntArray], dict[str, Val]],
    confidence: float,
) -> dict[str, CI]:
    """Bootstrap every statistic that `statistic` returns; keys seen in any resample get a CI."""
    samples: dict[str, list[float]] = {}
    # The point estimate already validated these arrays; skipping sklearn's re-validation halves the cost.
    with sklearn.config_context(skip_parameter_validation=True, assume_finite=True):
        for idx, inst in resampler.draws():
            for name, (value, _) in statistic(idx, inst).items():
                bucket = samples.setdefault(name, [])
                if value is not None:
                    bucket.append(value)
    return summarise(samples, resampler.resamples, confidence)
