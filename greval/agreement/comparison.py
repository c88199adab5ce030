"""compare_agreement: several judge versions side by side, and a paired bootstrap of each version minus the
first on the items every version compares (the same resampled items feed every version);
compare_independent: two sides that share no items (two systems answering their own questions), each side's
figures on its own items and the difference from two independent bootstraps."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import numpy as np

from greval.agreement import bootstrap as bs
from greval.agreement import resampling
from greval.agreement.agreement import compute_agreement
from greval.agreement.headline import Headline, headline
from greval.agreement.models import AgreementOptions, AgreementScale, BootstrapInfo, ComparisonReport, Difference
from greval.agreement.prepare import Prepared, prepare, resolve_scale
from greval.agreement.resampling import Statistic, bootstrap_info, estimate
from greval.agreement.stats import FloatArray, IntArray, Val
from greval.dataset.frame import Frame
from greval.errors import DataError

if TYPE_CHECKING:
    import pandas as pd


def compare_agreement(
    frames: Mapping[str, Frame] | Mapping[str, pd.DataFrame],
    scale: AgreementScale,
    options: AgreementOptions | None = None,
) -> ComparisonReport:
    """Several judge versions side by side, and a paired bootstrap of each version minus the first.

    Each version keeps its own invalid-answer handling; differences are on the items every version
    compares (the same resampled items feed every version, so the CI is paired).
    """
    options = options or AgreementOptions()
    if len(frames) < 2:
        raise DataError("comparing needs at least two judge versions")
    tables = {name: Frame.of(frame) for name, frame in frames.items()}
    names = list(tables)
    scale = resolve_scale(tables[names[0]], scale, options)
    reports = {name: compute_agreement(tables[name], scale, options) for name in names}
    preps = {name: prepare(tables[name], scale, options) for name in names}
    common = set(preps[names[0]].items)
    for p in preps.values():
        common &= set(p.items)
    order = [i for i in preps[names[0]].items if i in common]
    notes: list[str] = []
    if any(len(p.items) != len(order) for p in preps.values()):
        notes.append(f"differences use the {len(order)} items every version compares")
    aligned = {name: _aligned(p, order) for name, p in preps.items()}
    heads = {name: headline(q, options) for name, q in aligned.items()}
    base = preps[names[0]]
    groups = aligned[names[0]].groups
    differences = _differences(names, heads, len(order), groups, options)
    info = None
    if options.resamples > 0 and order:
        info = _paired_info(base, len(order), groups, options)
        notes.append(
            f"paired differences: {options.resamples} resamples of {info.unit} ({info.n_units}), seed {options.seed}"
        )
    return ComparisonReport(
        reports=reports, common_items=len(order), differences=differences, bootstrap=info, notes=notes
    )


def _aligned(p: Prepared, order: list[str]) -> Prepared:
    """`p` on the items of `order` (each one of `p.items`), in that order."""
    pos = {it: n for n, it in enumerate(p.items)}
    sel = np.array([pos[i] for i in order], dtype=np.int64)
    q = Prepared(
        scale=p.scale,
        items=order,
        groups=None if p.groups is None else p.groups[sel],
        counts=p.counts.model_copy(update={"items_compared": len(order)}),
    )
    if p.scale.kind == "categorical":
        q.h, q.j_nom, q.j_ord, q.invalid = p.h[sel], p.j_nom[sel], p.j_ord[sel], p.invalid[sel]
        q.score = None if p.score is None else p.score[sel]
    else:
        q.hv, q.jv, q.invalid = p.hv[sel], p.jv[sel], p.invalid[sel]
    return q


def _diff_statistics(names: list[str], heads: dict[str, Headline]) -> tuple[Statistic | None, bs.BatchStatistic | None]:
    """Each version's headline minus the first's over one resample (`rest`) or a batch of them (`batched`),
    keyed "version|metric"; None where the first version has no such statistic."""
    base = names[0]

    def diff_batch(b: bs.Batch) -> dict[str, FloatArray]:
        vals = {name: fn(b) for name in names if (fn := heads[name].batched) is not None}
        out: dict[str, FloatArray] = {}
        for name in names[1:]:
            for metric, vb in vals.get(name, {}).items():
                va = vals[base].get(metric)
                out[f"{name}|{metric}"] = np.full(b.size, np.nan) if va is None else vb - va
        return out

    def diff(idx: IntArray, inst: IntArray | None) -> dict[str, Val]:
        out: dict[str, Val] = {}
        vals = {name: rest(idx, inst) for name in names if (rest := heads[name].rest) is not None}
        for name in names[1:]:
            for metric, (vb, _) in vals.get(name, {}).items():
                va = vals[base].get(metric, (None, None))[0]
                out[f"{name}|{metric}"] = (None, None) if va is None or vb is None else (vb - va, None)
        return out

    return (diff if heads[base].rest is not None else None), (diff_batch if heads[base].batched is not None else None)


def _differences(
    names: list[str], heads: dict[str, Headline], n: int, groups: IntArray | None, options: AgreementOptions
) -> list[Difference]:
    """Every headline figure of each version minus the first's, with its paired CI."""
    rest, batched = _diff_statistics(names, heads)
    cis = resampling.cis(options, n, groups, rest, batched)
    base = names[0]
    points = {name: heads[name].point for name in names}
    differences = []
    for name in names[1:]:
        for metric, (vb, nb) in points[name].items():
            va, na = points[base].get(metric, (None, None))
            val: Val = (None, na or nb or "undefined in a version") if va is None or vb is None else (vb - va, None)
            e = estimate(val, n, cis.get(f"{name}|{metric}"))
            beyond = None if e.ci_low is None or e.ci_high is None else bool(e.ci_low > 0 or e.ci_high < 0)
            differences.append(Difference(metric=metric, a=base, b=name, estimate=e, beyond_ci=beyond))
    return differences


def _paired_info(base: Prepared, n: int, groups: IntArray | None, options: AgreementOptions) -> BootstrapInfo:
    """What the paired bootstrap resampled: the first version's unit, counted on the common items."""
    unit = resampling.resample_unit(base.groups is not None, options, base.multi_row_items, base.groups_are_records)
    n_units = len(np.unique(groups)) if groups is not None else n
    return bootstrap_info(unit, n_units, options)


def compare_independent(
    frames: Mapping[str, Frame] | Mapping[str, pd.DataFrame],
    scale: AgreementScale,
    options: AgreementOptions | None = None,
) -> ComparisonReport:
    """Two sides judged on different items: each side's agreement report, and B − A of every headline figure
    with a CI from independent bootstraps — each side resamples its own units (seeds `seed` and `seed + 1`)
    and resample r of A is subtracted from resample r of B. Nothing is paired: `common_items` is 0."""
    options = options or AgreementOptions()
    if len(frames) != 2:
        raise DataError("an independent comparison has two sides")
    tables = {name: Frame.of(frame) for name, frame in frames.items()}
    (a, fa), (b, fb) = tables.items()
    scale = resolve_scale(fa, scale, options)
    reports = {a: compute_agreement(fa, scale, options), b: compute_agreement(fb, scale, options)}
    preps = {a: prepare(fa, scale, options), b: prepare(fb, scale, options)}
    heads = {name: headline(p, options) for name, p in preps.items()}
    draws: dict[str, dict[str, FloatArray]] = {}
    if options.resamples > 0 and all(p.counts.items_compared for p in preps.values()):
        for k, (name, p) in enumerate(preps.items()):
            sampler = resampling.resampler(
                p.counts.items_compared, p.groups, options.model_copy(update={"seed": options.seed + k})
            )
            draws[name] = bs.collect(sampler, heads[name].rest, heads[name].batched)
    n = sum(p.counts.items_compared for p in preps.values())
    differences = []
    for metric, (vb, nb) in heads[b].point.items():
        va, na = heads[a].point.get(metric, (None, None))
        val: Val = (None, na or nb or "undefined on a side") if va is None or vb is None else (vb - va, None)
        ci = None
        if metric in draws.get(a, {}) and metric in draws.get(b, {}):
            diff = draws[b][metric] - draws[a][metric]
            ci = options.resampling.summarise({metric: diff[np.isfinite(diff)]})[metric]
        e = estimate(val, n, ci)
        beyond = None if e.ci_low is None or e.ci_high is None else bool(e.ci_low > 0 or e.ci_high < 0)
        differences.append(Difference(metric=metric, a=a, b=b, estimate=e, beyond_ci=beyond))
    notes = []
    if draws:
        units = ", ".join(
            f"{name}: {r.bootstrap.n_units} {r.bootstrap.unit}" for name, r in reports.items() if r.bootstrap
        )
        notes.append(
            f"independent differences: {options.resamples} resamples of each side's own units ({units}), "
            f"seeds {options.seed} and {options.seed + 1}"
        )
    return ComparisonReport(reports=reports, common_items=0, differences=differences, notes=notes, paired=False)
