"""Seeded bootstrap over items or whole groups (clusters), with percentile CIs.

We resample ourselves rather than call scipy.stats.bootstrap because one resample must feed every
statistic at once, be shared across judge versions (paired differences), and may draw whole clusters.

Resamples are drawn in batches: an (R × units) matrix of unit indices per batch, sized so that the arrays
built from it stay under `MAX_CELLS` elements each (the whole bootstrap stays well under 1 GiB). A
*batched* statistic sees the batch at once (tallies of cell codes by one `np.bincount`, sums of per-row
terms by one matrix product) and returns one value per resample; a *per-resample* statistic sees the row
indices of one resample at a time (what is not vectorised: Spearman, Kendall, per-group correlations ...).
The draws are the same either way: numpy's Generator gives the same integers for one (R, m) call as for R
calls of size m (a test checks it).

How many resamples, their seed and the CI's level travel as one value, :class:`Resampling`: every function
above the draws takes one (its public keywords ``resamples=`` / ``seed=`` build it, :meth:`Resampling.of`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, ConfigDict, Field

from greval.agreement.stats import Val

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

MAX_CELLS = 1 << 23
"""Elements in one batch's largest arrays (8 Mi: 64 MiB as int64 or float64)."""

#: The resamples of every bootstrap CI greval shows when none are asked for: the run summary's and report's
#: scores, agreement, the gate, ``Results.summary`` — one default, so every surface prints the same interval.
RESAMPLES = 1000
#: The level of every CI greval shows (a 95 % interval).
LEVEL = 0.95

ResampleStatistic = Callable[[IntArray, IntArray], dict[str, Val]]
"""Statistics of one resample from its (row indices, cluster-instance ids)."""

BatchStatistic = Callable[["Batch"], dict[str, FloatArray]]
"""Statistics of a batch of R resamples: one value per resample, NaN where undefined."""


class Resampler:
    """Draws bootstrap resamples of row indices; units are single rows or whole groups."""

    def __init__(self, n: int, groups: IntArray | None, resamples: int, seed: int, max_cells: int = MAX_CELLS) -> None:
        self.n = n
        self.resamples = resamples
        self.seed = seed
        self.max_cells = max_cells
        self.clustered = groups is not None
        if groups is None:
            self.m = n
            self.unit_of_row = np.arange(n, dtype=np.int64)
            self.units: list[IntArray] = []
            self.sizes = np.ones(n, dtype=np.int64)
        else:
            _, inverse = np.unique(groups, return_inverse=True)
            self.unit_of_row = inverse.reshape(-1).astype(np.int64)
            self.m = int(self.unit_of_row.max(initial=-1)) + 1
            self.sizes = np.bincount(self.unit_of_row, minlength=self.m).astype(np.int64)
            # Each unit's rows in row order (a stable sort keeps it).
            order = np.argsort(self.unit_of_row, kind="stable").astype(np.int64)
            self.units = np.split(order, np.cumsum(self.sizes)[:-1]) if self.m else []

    def batches(self) -> Iterator[Batch]:
        """The resamples in batches of at most max(1, max_cells // units) rows."""
        rng = np.random.default_rng(self.seed)
        if self.m == 0:
            return
        per_batch = max(1, self.max_cells // self.m)
        done = 0
        while done < self.resamples:
            size = min(per_batch, self.resamples - done)
            yield Batch(self, rng.integers(0, self.m, size=(size, self.m)).astype(np.int64, copy=False))
            done += size

    def draws(self) -> Iterator[tuple[IntArray, IntArray]]:
        """Yield (row indices, cluster-instance ids) per resample: a group drawn twice counts as two clusters."""
        for batch in self.batches():
            yield from batch.draws()


class Batch:
    """R consecutive resamples: `picks[r]` are the units drawn for resample r."""

    def __init__(self, sampler: Resampler, picks: IntArray) -> None:
        self.sampler = sampler
        self.picks = picks
        self.size = picks.shape[0]
        self._weights: FloatArray | None = None

    def draws(self) -> Iterator[tuple[IntArray, IntArray]]:
        """Each resample's (row indices, cluster-instance ids), as the per-resample statistics want them."""
        s = self.sampler
        for pick in self.picks:
            if not s.clustered:
                yield pick, pick
                continue
            idx = np.concatenate([s.units[p] for p in pick])
            inst = np.repeat(np.arange(s.m, dtype=np.int64), s.sizes[pick])
            yield idx, inst

    def unit_weights(self) -> FloatArray:
        """(R, units): how many times each unit was drawn in each resample."""
        if self._weights is None:
            m = self.sampler.m
            self._weights = np.stack([np.bincount(pick, minlength=m) for pick in self.picks]).astype(np.float64)
        return self._weights

    def tally(self, codes: IntArray, n_cells: int) -> IntArray:
        """(R, n_cells): how many rows of each cell code 0..n_cells-1 each resample holds."""
        s = self.sampler
        if not s.clustered:
            # One bincount per resample over codes in the smallest dtype that holds them: no offsets and
            # no int64 temporaries of the batch's size (several times faster than one offset bincount).
            small = codes.astype(np.min_scalar_type(max(n_cells - 1, 0)))
            rows = [np.bincount(row, minlength=n_cells) for row in small[self.picks]]
            return np.stack(rows).astype(np.int64, copy=False)
        per_unit = np.bincount(s.unit_of_row * n_cells + codes, minlength=s.m * n_cells).reshape(s.m, n_cells)
        return np.rint(self.unit_weights() @ per_unit.astype(np.float64)).astype(np.int64)

    def sums(self, values: FloatArray) -> FloatArray:
        """(R, columns): column sums of `values` (rows × columns) over each resample's rows."""
        s = self.sampler
        per_unit = values
        if s.clustered:
            per_unit = np.zeros((s.m, values.shape[1]), dtype=np.float64)
            np.add.at(per_unit, s.unit_of_row, values)
        return np.asarray(self.unit_weights() @ per_unit, dtype=np.float64)

    def constant(self, x: FloatArray) -> npt.NDArray[np.bool_]:
        """(R,): whether every row in the resample has the same value of x."""
        s = self.sampler
        lo = np.full(s.m, np.inf)
        hi = np.full(s.m, -np.inf)
        np.minimum.at(lo, s.unit_of_row, x)
        np.maximum.at(hi, s.unit_of_row, x)
        drawn = self.unit_weights() > 0
        low = np.where(drawn, lo[None, :], np.inf).min(axis=1)
        high = np.where(drawn, hi[None, :], -np.inf).max(axis=1)
        return np.asarray(low == high)


def percentile_ci(samples: FloatArray | list[float], level: float) -> tuple[float, float]:
    """Percentile interval of the bootstrap distribution (``level``: 0.95 for a 95 % interval)."""
    tail = (1.0 - level) / 2.0
    lo, hi = np.quantile(np.asarray(samples, dtype=float), [tail, 1.0 - tail])
    return float(lo), float(hi)


class CI:
    """A bootstrap interval, or None with a note."""

    def __init__(self, low: float | None, high: float | None, note: str | None) -> None:
        self.low, self.high, self.note = low, high, note


def summarise(samples: dict[str, FloatArray], resamples: int, level: float) -> dict[str, CI]:
    """CIs from collected resample values; resamples where a statistic was undefined are counted in a note."""
    out: dict[str, CI] = {}
    for name, vals in samples.items():
        undefined = resamples - len(vals)
        if len(vals) < max(2, resamples // 2):
            out[name] = CI(None, None, f"CI undefined: statistic undefined in {undefined}/{resamples} resamples")
            continue
        lo, hi = percentile_ci(vals, level)
        note = f"{undefined}/{resamples} resamples undefined, CI from the rest" if undefined else None
        out[name] = CI(lo, hi, note)
    return out


def collect(
    resampler: Resampler, statistic: ResampleStatistic | None, batched: BatchStatistic | None = None
) -> dict[str, FloatArray]:
    """Every statistic's value in each resample, in draw order (NaN where undefined): what :func:`run`
    summarises, and what an independent difference of two bootstraps subtracts resample by resample.
    `batched` (per batch) and `statistic` (per resample) should return different keys."""
    chunks: dict[str, list[FloatArray]] = {}
    done = 0
    for batch in resampler.batches():
        got: dict[str, FloatArray] = {}
        if batched is not None:
            got.update({name: np.asarray(v, dtype=np.float64) for name, v in batched(batch).items()})
        if statistic is not None:
            for r, (idx, inst) in enumerate(batch.draws()):
                for name, (value, _) in statistic(idx, inst).items():
                    col = got.setdefault(name, np.full(batch.size, np.nan))
                    col[r] = np.nan if value is None else value
        for name in got.keys() - chunks.keys():  # first seen in this batch: undefined in the ones before
            chunks[name] = [np.full(done, np.nan)]
        for name, parts in chunks.items():
            parts.append(got.get(name, np.full(batch.size, np.nan)))
        done += batch.size
    return {name: np.concatenate(parts) for name, parts in chunks.items()}


def run(
    resampler: Resampler,
    statistic: ResampleStatistic | None,
    level: float,
    batched: BatchStatistic | None = None,
) -> dict[str, CI]:
    """Bootstrap every statistic that `batched` (per batch) or `statistic` (per resample) returns; keys
    seen in any resample get a CI. The two should return different keys."""
    values = collect(resampler, statistic, batched)
    return summarise({name: v[np.isfinite(v)] for name, v in values.items()}, resampler.resamples, level)


class Resampling(BaseModel):
    """How a bootstrap CI is drawn, as one value: how many resamples (0 or fewer: no CI), the seed of the
    draws (the same seed, the same interval) and the interval's level (0.95: a 95 % interval). Frozen: built
    once where a user's options are read, passed down unchanged."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    resamples: int = Field(RESAMPLES, description="Bootstrap resamples; 0 (or fewer): no CI.")
    seed: int = Field(0, description="Seed of the draws.")
    level: float = Field(LEVEL, gt=0.0, lt=1.0, description="The CI's level: 0.95 for a 95 % interval.")

    @classmethod
    def of(
        cls,
        base: Resampling | None = None,
        *,
        resamples: int | None = None,
        seed: int | None = None,
        level: float | None = None,
    ) -> Resampling:
        """``base`` (default: the defaults) with the keywords a caller gave (None: left as it is)."""
        given = {k: v for k, v in (("resamples", resamples), ("seed", seed), ("level", level)) if v is not None}
        found = base or cls()
        return found.model_copy(update=given) if given else found

    def resampler(self, n: int, groups: IntArray | None = None) -> Resampler:
        """Draws of ``n`` rows, or of whole groups when ``groups`` gives each row's."""
        return Resampler(n, groups, self.resamples, self.seed)

    def cis(
        self,
        n: int,
        groups: IntArray | None = None,
        statistic: ResampleStatistic | None = None,
        batched: BatchStatistic | None = None,
    ) -> dict[str, CI]:
        """:func:`run` over :meth:`resampler`'s draws."""
        return run(self.resampler(n, groups), statistic, self.level, batched)

    def summarise(self, samples: dict[str, FloatArray]) -> dict[str, CI]:
        """:func:`summarise` of values collected over these resamples."""
        return summarise(samples, self.resamples, self.level)
