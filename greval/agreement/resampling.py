"""How the agreement reports resample, and what they say about it: the per-group protocol (a statistic inside
each group, averaged over the groups; its bootstrap resamples items within each group), the CIs of a statistic,
and the report's bootstrap section. The draws themselves are bootstrap.py's."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import cast

import numpy as np

from greval.agreement import bootstrap as bs
from greval.agreement.models import AgreementOptions, BootstrapInfo, Estimate, ResampleUnit
from greval.agreement.stats import IntArray, Val
from greval.dataset.frame import Frame
from greval.errors import DataError, option

Statistic = Callable[[IntArray, IntArray | None], dict[str, Val]]
"""Figures of one subset of rows (row indices, and each drawn row's group code when the protocol needs it)."""

GroupValues = dict[int, tuple[int, dict[str, Val]]]
"""{group code: (n items, figures)}: a statistic inside each group."""


class StratifiedResampler(bs.Resampler):
    """Resamples items within each group (strata kept whole, sizes fixed): the per-group protocol's bootstrap.

    Groups there are fixed subsets (a paper's datasets, documents), so the CI reflects which items each
    group happened to get, not which groups were chosen. Its one batch yields (row indices, each row's
    group code) per resample; the per-group protocol has no batched statistic.
    """

    def __init__(self, groups: IntArray, resamples: int, seed: int) -> None:
        super().__init__(len(groups), None, resamples, seed)
        self.groups = groups
        self.strata = [np.flatnonzero(groups == g).astype(np.int64) for g in np.unique(groups)]

    def batches(self) -> Iterator[bs.Batch]:
        if self.n:
            yield _StratifiedDraws(self)


class _StratifiedDraws(bs.Batch):
    def __init__(self, sampler: StratifiedResampler) -> None:
        super().__init__(sampler, np.empty((sampler.resamples, 0), dtype=np.int64))

    def draws(self) -> Iterator[tuple[IntArray, IntArray]]:
        s = cast(StratifiedResampler, self.sampler)
        rng = np.random.default_rng(s.seed)
        for _ in range(s.resamples):
            idx = np.concatenate([t[rng.integers(0, len(t), size=len(t))] for t in s.strata]).astype(np.int64)
            yield idx, s.groups[idx]


def check_protocol(frame: Frame, options: AgreementOptions) -> None:
    """The per-group protocol needs groups."""
    if options.protocol == "per-group" and "group" not in frame.columns:
        raise DataError(f"{option('AgreementOptions.protocol')} per-group needs a group column ({option('group')})")


def resampler(n: int, groups: IntArray | None, options: AgreementOptions) -> bs.Resampler:
    """Items, whole groups (clusters), or items within groups (per-group protocol)."""
    if options.protocol == "per-group" and groups is not None:
        return StratifiedResampler(groups, options.resamples, options.seed)
    return options.resampling.resampler(n, groups)


def cis(
    options: AgreementOptions,
    n: int,
    groups: IntArray | None,
    fn: Statistic | None = None,
    batched: bs.BatchStatistic | None = None,
    protocol: bool = True,
) -> dict[str, bs.CI]:
    """Percentile CIs of `fn` / `batched` over `n` rows (none without resamples or rows). `protocol=False`
    for the figures the per-group protocol leaves pooled (prevalence, ceiling): they never resample within
    groups."""
    if options.resamples <= 0 or n == 0:
        return {}
    sampler = resampler(n, groups, options) if protocol else options.resampling.resampler(n, groups)
    return bs.run(sampler, fn, options.level, batched)


def estimate(val: Val, n: int, ci: bs.CI | None) -> Estimate:
    """A figure, the n behind it and its CI; the notes of both joined."""
    value, note = val
    if value is None or ci is None:
        return Estimate(value=value, n=n, note=note)
    notes = [x for x in (note, ci.note) if x]
    return Estimate(value=value, n=n, ci_low=ci.low, ci_high=ci.high, note="; ".join(notes) or None)


def group_values(base: Statistic, idx: IntArray, gids: IntArray) -> GroupValues:
    """The pooled statistic inside each group: {group code: (n items, figures)}."""
    out: GroupValues = {}
    for g in np.unique(gids):
        sub = idx[gids == g]
        out[int(g)] = (len(sub), base(sub, None))
    return out


def mean_over_groups(per: GroupValues) -> dict[str, Val]:
    """Unweighted mean of each figure over the groups where it is defined (papers' "Average")."""
    names: dict[str, None] = {}
    for _, figures in per.values():
        names.update(dict.fromkeys(figures))
    out: dict[str, Val] = {}
    for name in names:
        vals = [v for _, f in per.values() if (v := f.get(name, (None, None))[0]) is not None]
        if vals:
            out[name] = float(np.mean(vals)), None
            continue
        why = next((n for _, f in per.values() if (n := f.get(name, (None, None))[1])), "undefined")
        out[name] = None, f"undefined in every group ({len(per)}), e.g. {why}"
    return out


def per_group(base: Statistic, point_groups: IntArray | None) -> Statistic:
    """`base` inside each group, averaged over groups; the group of each drawn row comes as `inst`."""

    def fn(idx: IntArray, inst: IntArray | None) -> dict[str, Val]:
        gids = inst if inst is not None else point_groups
        assert gids is not None
        if not len(idx):  # no group at all (an empty slice): the figures of no rows, each saying why it is undefined
            return base(idx, None)
        return mean_over_groups(group_values(base, idx, gids))

    return fn


def resample_unit(
    grouped: bool, options: AgreementOptions, multi_row_items: bool = True, records: bool = False
) -> ResampleUnit:
    """What the bootstrap resamples: groups (``records`` when the groups are a store's records), items within
    groups (per-group protocol), items, or rows (when every item is one row)."""
    if grouped:
        if options.protocol == "per-group":
            return "items within groups"
        return "records" if records else "groups"
    return "items" if multi_row_items else "rows"


def bootstrap_info(unit: ResampleUnit, n_units: int, options: AgreementOptions) -> BootstrapInfo:
    """What the report's CIs resampled (``unit``, how many) and how (the options' resamples, seed, level)."""
    return BootstrapInfo(unit=unit, n_units=n_units, **options.resampling.model_dump())


def bootstrap_note(info: BootstrapInfo) -> str:
    """The report's note on its CIs."""
    return (
        f"{int(info.level * 100)}% percentile bootstrap CIs: {info.resamples} resamples of "
        f"{info.unit} ({info.n_units}), seed {info.seed}"
    )
