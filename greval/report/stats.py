"""The store report's statistics: means and dataset scores with bootstrap CIs, record-score distributions,
efficiency means, histograms and prevalence-corrected system shares. Pure, apart from
:func:`prevalence_corrected`, which reads the store's labels.

One bootstrap: every CI here is a percentile interval from :mod:`greval.agreement.bootstrap` (records drawn
with replacement by numpy's seeded ``default_rng``; the 2.5th and 97.5th percentiles, linear interpolation),
the resampler every agreement CI uses, drawn as a :class:`~greval.agreement.bootstrap.Resampling` says (default:
1000 resamples, seed 0, 95 %).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from greval.agreement import bootstrap
from greval.agreement.agreement import MISSING_SLICE
from greval.agreement.bootstrap import Resampling
from greval.agreement.models import AgreementOptions
from greval.report.agreement import prevalence_notes
from greval.report.models import CorrectedShare, CorrectedSystem, LabelShare, MeanCI, ScoreStats, Shares
from greval.spec import BaseSpec, CategoricalScale, Spec, ValueScale
from greval.store.results import MetricFigures, dataset_score

if TYPE_CHECKING:
    from greval.agreement.models import AgreementReport, Prevalence
    from greval.store.store import Store

#: The percentiles ScoreStats carries (numpy's linear method).
PERCENTILES = (5, 25, 75, 95)
#: Resamples and level of the CIs of means and dataset scores (seed: 0 unless given); the store report passes
#: its own count (``--bootstrap``) to every CI it shows, so one page states one count.
MEAN_RESAMPLES = RESAMPLES = bootstrap.RESAMPLES  # one default for every CI (greval.agreement.bootstrap.RESAMPLES)
LEVEL = bootstrap.LEVEL
#: Record fields treated as the evaluated system's efficiency figures when present.
EFFICIENCY = ("llm_calls", "prompt_tokens", "output_tokens", "tokens", "latency", "latency_s", "completion_time")


def scored_rows(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The record rows a metric's mean is taken over: ok or partial, with a score."""
    return [r for r in rows if r["status"] in ("ok", "partial") and r["score"] is not None]


def record_scores(rows: Sequence[dict[str, Any]]) -> list[float]:
    """The record scores a metric's mean is taken over (the same rows as MetricFigures.mean_score)."""
    return [float(r["score"]) for r in scored_rows(rows)]


def _percentile_ci(
    n: int, statistic: Callable[[bootstrap.Batch], bootstrap.FloatArray], resampling: Resampling
) -> tuple[float | None, float | None]:
    """The percentile CI of ``statistic`` over resamples of ``n`` records (greval.agreement's resampler; None,
    None when no resample defines it)."""
    ci = resampling.cis(n, batched=lambda b: {"value": statistic(b)}).get("value")
    return (None, None) if ci is None else (ci.low, ci.high)


def mean_ci(
    values: Sequence[float],
    resampling: Resampling | None = None,
    *,
    seed: int | None = None,
    resamples: int | None = None,
) -> MeanCI:
    """Mean, std and a percentile bootstrap CI (``resampling``, or its keywords ``seed``, ``resamples``);
    defined, documented results for n < 2."""
    boot = Resampling.of(resampling, resamples=resamples, seed=seed)
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(x) == 0:
        return MeanCI(n=0, mean=None, std=None, note="no scores")
    if len(x) == 1:
        return MeanCI(n=1, mean=float(x[0]), std=None, note="one score: no spread, no CI")
    std = float(np.std(x, ddof=1))
    if std == 0:
        return MeanCI(
            n=len(x), mean=float(x.mean()), std=0.0, ci_low=float(x[0]), ci_high=float(x[0]), note="all scores equal"
        )
    column = x[:, None]
    low, high = _percentile_ci(len(x), lambda b: b.sums(column)[:, 0] / len(x), boot)
    return MeanCI(n=len(x), mean=float(x.mean()), std=std, ci_low=low, ci_high=high)


def in_id_order(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Record rows in record-id order: what a bootstrap resamples must not depend on the order the store
    returns them in (verdicts written concurrently are stored in the order they finished)."""
    return sorted(rows, key=lambda r: (str(r.get("record_id", "")), str(r.get("record_hash", ""))))


def score_ci(
    rows: Sequence[dict[str, Any]],
    pooling: str,
    resampling: Resampling | None = None,
    *,
    seed: int | None = None,
    resamples: int | None = None,
) -> MeanCI:
    """A metric's dataset score (:func:`greval.store.results.dataset_score`, the figure every command shows)
    with a percentile bootstrap CI over records. Micro: records are resampled with their units, and each
    resample's score is Σ score·units / Σ units (a ratio estimator; the record is the sampling unit, since a
    record's items are judged together). Macro: :func:`mean_ci` of the record scores. The rows are taken in
    record-id order, so the CI does not depend on the order the store returns them in (verdicts written
    concurrently are stored in the order they finished). ``resampling`` (or its keywords): the bootstrap."""
    boot = Resampling.of(resampling, resamples=resamples, seed=seed)
    rows = in_id_order(rows)
    score, _, n, units = dataset_score(rows, pooling)
    scored = scored_rows(rows)
    if pooling != "micro" or all(r["units"] == 1 for r in scored):
        # macro, or one unit per record (micro = macro): the mean itself from dataset_score, so that it is the
        # same float everywhere
        return mean_ci(record_scores(rows), boot).model_copy(update={"mean": score})
    used = [r for r in scored if r["units"] > 0]
    x = np.asarray([float(r["score"]) for r in used])
    w = np.asarray([float(r["units"]) for r in used])
    std = float(np.std(x, ddof=1)) if len(x) > 1 else None
    pooled = f"pooled over {units:g} items (micro)"
    if score is None or len(x) == 0:
        return MeanCI(n=n, mean=score, std=None, note="no items to pool")
    if len(x) == 1:
        return MeanCI(n=n, mean=score, std=None, note=f"{pooled}; one record: no CI")
    if np.all(x == x[0]):
        return MeanCI(n=n, mean=score, std=0.0, ci_low=score, ci_high=score, note=f"{pooled}; all scores equal")
    pairs = np.column_stack([x * w, w])

    def ratio(batch: bootstrap.Batch) -> bootstrap.FloatArray:
        sums = batch.sums(pairs)
        return np.asarray(sums[:, 0] / sums[:, 1], dtype=np.float64)

    low, high = _percentile_ci(len(x), ratio, boot)
    return MeanCI(n=n, mean=score, std=std, ci_low=low, ci_high=high, note=pooled)


def label_counts_of(row: dict[str, Any], labels: Sequence[str]) -> list[int] | None:
    """A record row's verdicts per label, in ``labels``' order: its label (a record-level metric) or its items'
    label counts (a per-item one); None when the record has no ok verdict to count."""
    if row["status"] not in ("ok", "partial"):
        return None
    if row.get("counts") is not None:
        counted = row["counts"].get("labels", {})
        return [int(counted.get(lab, 0)) for lab in labels]
    if row.get("label") in labels and row["status"] == "ok":
        return [int(row["label"] == lab) for lab in labels]
    return None


def label_shares(rows: Sequence[dict[str, Any]], labels: Sequence[str], resampling: Resampling | None = None) -> Shares:
    """Each label's share of a categorical metric's ok verdicts over record rows, with a percentile bootstrap CI
    that resamples records (a per-item metric's records with their items: Σ count / Σ items, a ratio estimator,
    as :func:`score_ci` pools). The counts are the ones MetricFigures.distribution holds (ok verdicts)."""
    rows = sorted(rows, key=lambda r: (str(r.get("record_id", "")), str(r.get("record_hash", ""))))
    counted = [c for r in rows if (c := label_counts_of(r, labels)) is not None and any(c)]
    unit: Literal["records", "items"] = "items" if any(r.get("counts") is not None for r in rows) else "records"
    x = np.asarray(counted, dtype=np.float64).reshape(len(counted), len(labels))
    totals = x.sum(axis=0)
    n = int(totals.sum())
    out = Shares(unit=unit, n=n, records=len(counted), shares=[])
    if not n:
        out.note = "no verdict to count"
        out.shares = [LabelShare(label=lab, count=0, share=None) for lab in labels]
        return out
    cis: dict[str, tuple[float | None, float | None]] = {}
    if len(counted) > 1:
        pairs = np.column_stack([x, x.sum(axis=1)])

        def shares(batch: bootstrap.Batch) -> dict[str, bootstrap.FloatArray]:
            sums = batch.sums(pairs)
            return {lab: np.asarray(sums[:, i] / sums[:, -1], dtype=np.float64) for i, lab in enumerate(labels)}

        found = (resampling or Resampling()).cis(len(counted), batched=shares)
        cis = {lab: (ci.low, ci.high) for lab, ci in found.items()}
    else:
        out.note = "one record: no CI"
    out.shares = [
        LabelShare(
            label=lab,
            count=int(c),
            share=float(c) / n,
            ci_low=cis.get(lab, (None, None))[0],
            ci_high=cis.get(lab, (None, None))[1],
        )
        for lab, c in zip(labels, totals, strict=True)
    ]
    return out


def score_range(spec: BaseSpec, stats: ScoreStats | None) -> tuple[float, float] | None:
    """The range a metric's record scores lie in, so that a plot never puts scores of different ranges on one
    axis (a 1–5 value and a 0–1 share): a value scale's (or a mean of values) min–max, a categorical scale's
    label scores, a share 0–1; a computed or pipeline metric's 0–1 when its scores are in it, else their own
    min–max. None without any score."""
    if isinstance(spec, Spec):
        scale = spec.scale
        if isinstance(scale, ValueScale) and spec.aggregate in (None, "mean"):
            return float(scale.min), float(scale.max)
        if spec.aggregate == "share":
            return 0.0, 1.0
        scores = scale.scores() if isinstance(scale, CategoricalScale) else None
        return (min(scores.values()), max(scores.values())) if scores else None
    if stats is None or stats.min is None or stats.max is None:
        return None
    if stats.min >= 0 and stats.max <= 1:
        return 0.0, 1.0
    return float(math.floor(stats.min)), float(math.ceil(stats.max))


def score_stats(
    scores: Sequence[float],
    records: int | None = None,
    failed: int = 0,
    skipped: int = 0,
    resampling: Resampling | None = None,
) -> ScoreStats:
    """Statistics of record scores (the one definition for metric, system and group rows).

    ``records``: how many record ids had an outcome (default: the scores' count); ``failed``/``skipped``:
    how many of them failed or were skipped. Pure."""
    x = np.asarray([v for v in scores if v is not None and not math.isnan(v)], dtype=float)
    total = len(x) if records is None else records
    out = ScoreStats(
        records=total,
        n=len(x),
        mean=mean_ci(x.tolist(), resampling),
        failed=failed,
        skipped=skipped,
        failure_rate=failed / total if total else None,
        skip_rate=skipped / total if total else None,
    )
    if len(x):
        p5, p25, p75, p95 = (float(v) for v in np.percentile(x, PERCENTILES))
        out.median, out.min, out.max = float(np.median(x)), float(x.min()), float(x.max())
        out.p5, out.p25, out.p75, out.p95 = p5, p25, p75, p95
        out.std = float(np.std(x, ddof=1)) if len(x) > 1 else None
    return out


def rows_stats(rows: Sequence[dict[str, Any]], resampling: Resampling | None = None) -> ScoreStats:
    """:func:`score_stats` of record rows (their statuses give the failure and skip counts), in record-id
    order (:func:`in_id_order`: the CI of the mean resamples them)."""
    return score_stats(
        record_scores(in_id_order(rows)),
        records=len(rows),
        failed=sum(1 for r in rows if r["status"] == "error"),
        skipped=sum(1 for r in rows if r["status"] == "skipped"),
        resampling=resampling,
    )


def efficiency(rows: Sequence[dict[str, Any]], data: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The mean of each EFFICIENCY field over the records of ``rows`` that carry it as a number."""
    eff: dict[str, float] = {}
    for col in EFFICIENCY:
        vals = [data.get(r["record_hash"], {}).get(col) for r in rows]
        nums = [float(v) for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]
        if nums:
            eff[col] = float(np.mean(nums))
    return eff


def score_bins(scores: Sequence[float], bins: int = 10) -> tuple[list[str], list[int]]:
    """The bins of :func:`histogram` ("low–high" keys) and each score's bin: ``bins`` equal bins over [0, 1]
    when every score is in it, else over [min, max]; each bin holds its lower edge, the last also its upper
    edge (numpy.histogram's rule). The record explorer files each record under its score's bin."""
    x = np.asarray(scores, dtype=float)
    if not len(x):
        return [], []
    lo, hi = (0.0, 1.0) if x.min() >= 0 and x.max() <= 1 else (float(x.min()), float(x.max()))
    if hi == lo:
        hi = lo + 1.0
    edges = np.linspace(lo, hi, bins + 1)
    where = np.clip(np.searchsorted(edges, x, side="right") - 1, 0, bins - 1)
    return [f"{edges[i]:.3g}–{edges[i + 1]:.3g}" for i in range(bins)], [int(i) for i in where]


def histogram(scores: Sequence[float], bins: int = 10) -> dict[str, int]:
    """Record scores counted in :func:`score_bins`' bins; keys "low–high"."""
    keys, where = score_bins(scores, bins)
    counts = np.bincount(np.asarray(where, dtype=np.int64), minlength=len(keys))
    return {k: int(c) for k, c in zip(keys, counts, strict=True)}


@dataclass(frozen=True)
class Corrected:
    """A metric row's prevalence-corrected shares, computed once (:func:`prevalence_corrected`): the agreement
    stage's Prevalence over every verdict of the row — what its agreement page shows — and the rows the index's
    table shows (all records, then each system), made from the same computation."""

    whole: Prevalence | None = None
    systems: list[CorrectedSystem] = field(default_factory=list)
    judged: AgreementReport | None = None  # the report they come from (from_store.with_judged_prevalence)


def prevalence_corrected(
    st: Store,
    spec: Spec,
    fig: MetricFigures,
    items: Sequence[dict[str, Any]],
    recs: Sequence[dict[str, Any]],
    resampling: Resampling,
) -> Corrected:
    """Each system's (and all records') label prevalence corrected for the judge's error rates — THE corrected
    share of a store's metric, on the index and on its agreement page: greval.agreement computes it
    (``compute_agreement``'s Prevalence, Rogan–Gladen or confusion inversion, with its bootstrap CI) on the
    agreement frame of the labelled items completed with every other ok verdict of the metric version, so the
    raw shares are over all the judge's verdicts and the error rates over the labelled ones (per system: the
    system's own labelled items)."""

    rep = _judged_report(st, spec, fig, items, recs, resampling)
    if rep is None:
        return Corrected()
    scores = (spec.scale.scores() if isinstance(spec.scale, CategoricalScale) else None) or {}
    parts: list[tuple[str, AgreementReport]] = [("all", rep)]
    parts += [(name, sub) for name, sub in rep.slices.get("system", {}).items() if name != MISSING_SLICE]
    out = []
    for name, sub in parts:
        prev = sub.categorical.prevalence if sub.categorical is not None else None
        if prev is not None:
            out.append(_corrected_system(fig.spec, name, prev, scores))
    return Corrected(rep.categorical.prevalence if rep.categorical is not None else None, out, rep)


def _judged_report(
    st: Store,
    spec: Spec,
    fig: MetricFigures,
    items: Sequence[dict[str, Any]],
    recs: Sequence[dict[str, Any]],
    resampling: Resampling,
) -> AgreementReport | None:
    """greval.agreement.from_store's judged report (its prevalence THE prevalence) of the labelled items of
    ``fig``'s version and judge (the frame its agreement page compares) completed with every other ok verdict of
    the version in ``items``, each item's system the report's; None when the store names another version."""
    from greval.agreement.from_store import every_verdict_frame, judged_prevalence, store_frame

    frame, scale, sel = store_frame(st, spec.name, fig.judge, version=fig.spec_hash)
    if sel.spec_key != fig.spec_key:
        return None
    verdicts = [
        (str(r["record_id"]), str(r["item_id"]), r["label"])
        for r in items
        if r["spec_key"] == fig.spec_key
        and r["judge_key"] == fig.judge_key
        and r["status"] == "ok"
        and (r["item_id"] != "") == (spec.each is not None)
    ]
    full = every_verdict_frame(frame, verdicts, {r["record_id"]: r["system"] for r in recs})
    return judged_prevalence(full, scale, AgreementOptions(**resampling.model_dump()))


def _corrected_system(metric: str, system: str, prev: Prevalence, scores: dict[str, float]) -> CorrectedSystem:
    """One system's raw and corrected label shares, the mean label scores of both (Σ share × score), and its
    notes (those of the agreement page's prevalence table, greval.report.agreement.prevalence_notes)."""

    shares = [
        CorrectedShare(label=lab, raw=q, corrected=e.value, ci_low=e.ci_low, ci_high=e.ci_high, note=e.note)
        for lab, q, e in zip(prev.labels, prev.observed, prev.corrected, strict=True)
    ]
    scored = bool(scores) and all(s.label in scores for s in shares)
    return CorrectedSystem(
        metric=metric,
        system=system,
        method=prev.method,
        n_judged=prev.n_judged,
        n_labelled=prev.n_labelled,
        shares=shares,
        raw_score=math.fsum(s.raw * scores[s.label] for s in shares) if scored and prev.n_judged else None,
        corrected_score=(
            math.fsum((s.corrected or 0.0) * scores[s.label] for s in shares)
            if scored and all(s.corrected is not None for s in shares)
            else None
        ),
        note="; ".join(prevalence_notes(prev)) or None,
    )
