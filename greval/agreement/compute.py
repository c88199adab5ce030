"""compute_agreement / compare_agreement: the Python entry points (no I/O; the CLI and reports reuse them)."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import numpy as np
import pandas as pd

from greval.agreement import bootstrap as bs
from greval.agreement import stats as st
from greval.agreement.models import (
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    Bias,
    CategoricalReport,
    Ceiling,
    ComparisonReport,
    ConfusionMatrix,
    Describe,
    Difference,
    DisagreementCell,
    Estimate,
    LabelBias,
    LabelReport,
    PairAgreement,
    Prevalence,
    ValueReport,
)
from greval.agreement.prepare import MISSING, Prepared, prepare, resolve_scale
from greval.agreement.stats import FloatArray, IntArray, Val
from greval.errors import DataError

INVALID_LABEL = "<invalid>"
BIAS_KEYS = ("disagreement_rate", "judge_above_rate", "judge_below_rate", "mean_signed_steps", "mean_signed_score")


def _estimate(val: Val, n: int, ci: bs.CI | None) -> Estimate:
    value, note = val
    if value is None or ci is None:
        return Estimate(value=value, n=n, note=note)
    notes = [x for x in (note, ci.note) if x]
    return Estimate(value=value, n=n, ci_low=ci.low, ci_high=ci.high, note="; ".join(notes) or None)


@dataclass
class Headline:
    """The headline statistics: their point estimates, and how the bootstrap computes them (`batched` for
    many resamples at once, `rest` one resample at a time for what is not vectorised)."""

    point: dict[str, Val]
    batched: bs.BatchStatistic | None
    rest: Callable[[IntArray, IntArray | None], dict[str, Val]] | None


def _headline(prep: Prepared, options: AgreementOptions) -> Headline:
    """The statistics over the compared items, and over bootstrap resamples of them."""
    scale = prep.scale
    if scale.kind == "categorical":
        labels = scale.labels or []
        k = len(labels)
        scores = None
        if scale.ordered and scale.scores is not None and all(lab in scale.scores for lab in labels):
            scores = np.array([scale.scores[lab] for lab in labels], dtype=float)
        point = st.categorical_metrics(
            prep.h, prep.j_nom, prep.j_ord, prep.invalid, k, scale.ordered, options.alpha_max_values, scores
        )
        (nom, n_nom), (ordc, n_ord) = st.categorical_cells(prep.h, prep.j_nom, prep.j_ord, prep.invalid, k)

        def cat(b: bs.Batch) -> dict[str, FloatArray]:
            tallies = b.tally(nom, n_nom), b.tally(ordc, n_ord) if scale.ordered else None
            batch = st.categorical_from_tallies(*tallies, k, scale.ordered, options.alpha_max_values, scores)
            return {name: values for name, (values, _) in batch.items()}

        return Headline(point, cat, None)
    domain = _value_domain(scale)
    grouped = options.protocol == "per-group"
    point = st.value_metrics(
        prep.hv, prep.jv, prep.groups if grouped else None, options.protocol, domain, options.alpha_max_values
    )
    vectorised = [name for name in st.MOMENT_METRICS if not (grouped and name == "pearson")]
    codes = st.value_kappa_codes(prep.hv, prep.jv, domain) if domain is not None else None
    if codes is not None and not isinstance(codes, str):
        vectorised += ["linear_kappa", "quadratic_kappa"]  # a fixed domain: the same codes in every resample
    features = st.value_features(prep.hv, prep.jv)

    def val_batch(b: bs.Batch) -> dict[str, FloatArray]:
        moments = st.moment_metrics(b.sums(features), b.constant(prep.jv), b.constant(prep.hv))
        out = {name: moments[name][0] for name in st.MOMENT_METRICS if name in vectorised}
        if codes is not None and not isinstance(codes, str):
            hc, jc, n_cats = codes
            cm = b.tally(hc * n_cats + jc, n_cats * n_cats).reshape(b.size, n_cats, n_cats)
            out["linear_kappa"] = st.kappa_from(cm, "linear")[0]
            out["quadratic_kappa"] = st.kappa_from(cm, "quadratic")[0]
        return out

    def val_rest(idx: IntArray, inst: IntArray | None) -> dict[str, Val]:
        groups = None
        if grouped:
            groups = inst if inst is not None else prep.groups
        return st.value_metrics(
            prep.hv[idx], prep.jv[idx], groups, options.protocol, domain, options.alpha_max_values, vectorised
        )

    return Headline(point, val_batch, val_rest)


def _value_domain(scale: AgreementScale) -> list[float] | None:
    """Integer min..max as weighted-κ categories, when the scale has whole-number bounds."""
    if scale.min is None or scale.max is None:
        return None
    if float(scale.min).is_integer() and float(scale.max).is_integer() and scale.max - scale.min <= 1000:
        return [float(v) for v in range(int(scale.min), int(scale.max) + 1)]
    return None


def _n_for(name: str, prep: Prepared) -> int:
    if name in BIAS_KEYS[1:]:
        return int((~prep.invalid).sum())
    return prep.counts.items_compared


def _bootstrap(
    prep: Prepared,
    options: AgreementOptions,
    fn: Callable[[IntArray, IntArray | None], dict[str, Val]] | None,
    n: int,
    groups: IntArray | None,
    batched: bs.BatchStatistic | None = None,
) -> dict[str, bs.CI]:
    if options.bootstrap <= 0 or n == 0:
        return {}
    sampler = bs.Resampler(n, groups, options.bootstrap, options.seed)
    return bs.run(sampler, fn, options.confidence, batched)


def _categorical(prep: Prepared, options: AgreementOptions, est: dict[str, Estimate]) -> CategoricalReport:
    labels = list(prep.scale.labels or [])
    k = len(labels)
    h, j = prep.h, prep.j_nom
    has_invalid = bool(prep.invalid.any())
    n_codes = k + 1 if has_invalid else k
    rep = st.classification_report(h, j, labels) if len(h) else {}
    per_label = [
        LabelReport(
            label=lab,
            precision=float(rep[lab]["precision"]),
            recall=float(rep[lab]["recall"]),
            f1=float(rep[lab]["f1-score"]),
            support=int(rep[lab]["support"]),
        )
        for lab in labels
        if lab in rep
    ]
    for avg in ("macro avg", "weighted avg"):
        if avg in rep:
            per_label.append(
                LabelReport(
                    label=avg,
                    precision=float(rep[avg]["precision"]),
                    recall=float(rep[avg]["recall"]),
                    f1=float(rep[avg]["f1-score"]),
                    support=int(rep[avg]["support"]),
                )
            )
    cm = st.confusion(h, j, n_codes) if len(h) else np.zeros((k, n_codes), dtype=np.int64)
    cm = cm[:k]
    judge_labels = labels + ([INVALID_LABEL] if has_invalid else [])
    n = len(h)
    off = int(cm.sum() - np.trace(cm[:, :k]))
    cells = []
    for a, b in itertools.product(range(k), range(n_codes)):
        if a == b or cm[a, b] == 0:
            continue
        steps = (b - a) if (prep.scale.ordered and b < k) else None
        cells.append(
            DisagreementCell(
                human=labels[a],
                judge=judge_labels[b],
                count=int(cm[a, b]),
                share_of_items=float(cm[a, b] / n),
                share_of_disagreements=float(cm[a, b] / off),
                steps=steps,
            )
        )
    cells.sort(key=lambda c: -c.count)
    judge_counts = cm.sum(axis=0)
    human_counts = cm.sum(axis=1)
    per_bias = [
        LabelBias(
            label=lab,
            judge_count=int(judge_counts[i]),
            human_count=int(human_counts[i]),
            judge_share=float(judge_counts[i] / n) if n else 0.0,
            human_share=float(human_counts[i] / n) if n else 0.0,
            difference=float((judge_counts[i] - human_counts[i]) / n) if n else 0.0,
        )
        for i, lab in enumerate(labels)
    ]
    bias = Bias(
        disagreement_rate=est.pop("disagreement_rate"),
        judge_above_rate=est.pop("judge_above_rate", None),
        judge_below_rate=est.pop("judge_below_rate", None),
        mean_signed_steps=est.pop("mean_signed_steps", None),
        mean_signed_score=est.pop("mean_signed_score", None),
        per_label=per_bias,
        cells=cells,
    )
    return CategoricalReport(
        labels=labels,
        per_label=per_label,
        confusion=ConfusionMatrix(labels=labels, judge_labels=judge_labels, counts=cm.tolist()),
        bias=bias,
        prevalence=_prevalence(prep, options),
    )


def _prevalence(prep: Prepared, options: AgreementOptions) -> Prevalence:
    labels = list(prep.scale.labels or [])
    k = len(labels)
    method = "rogan-gladen" if k == 2 else "confusion-matrix inversion (least squares, clipped, renormalised)"

    # One tally cell per row: judge code × human code, code k where missing.
    cells = np.where(prep.all_j == MISSING, k, prep.all_j) * (k + 1) + np.where(prep.all_h == MISSING, k, prep.all_h)
    n_cells = (k + 1) * (k + 1)

    def shares(t: IntArray) -> tuple[FloatArray | None, str | None, FloatArray, FloatArray, int, int]:
        """From one (judge + missing) × (human + missing) tally of rows."""
        t = t.reshape(k + 1, k + 1)
        judged = t[:k, :].sum(axis=1)
        n_judged = int(judged.sum())
        q = judged.astype(float) / max(n_judged, 1)
        cm = np.ascontiguousarray(t[:k, :k].T).astype(np.int64)  # human rows × judge columns
        lab = t[:, :k].sum(axis=0)
        hs = lab.astype(float) / max(int(lab.sum()), 1)
        if n_judged == 0:
            return None, "no valid judge answers", q, hs, 0, int(cm.sum())
        pi, note = st.corrected_prevalence(q, cm)
        return pi, note, q, hs, n_judged, int(cm.sum())

    pi, note, q, hs, n_j, n_l = shares(st.tally(cells, n_cells)[0])

    def stat(b: bs.Batch) -> dict[str, FloatArray]:
        out = np.full((b.size, k), np.nan)
        for r, t in enumerate(b.tally(cells, n_cells)):
            p = shares(t)[0]
            if p is not None:
                out[r] = p
        return {lab: out[:, i] for i, lab in enumerate(labels)}

    cis = _bootstrap(prep, options, None, len(cells), prep.all_groups, stat)
    corrected = [
        _estimate((None, note) if pi is None else (float(pi[i]), None), n_j, cis.get(lab))
        for i, lab in enumerate(labels)
    ]
    return Prevalence(
        method=method,
        labels=labels,
        n_judged=n_j,
        n_labelled=n_l,
        observed=[float(x) for x in q],
        human=[float(x) for x in hs],
        corrected=corrected,
        note=note if pi is not None else None,
    )


def _ceiling(prep: Prepared, options: AgreementOptions) -> Ceiling | None:
    """Human–human agreement on items with ≥2 annotators, next to the judge as one more annotator."""
    mat = prep.human_matrix
    if mat is None or len(prep.annotators) < 2:
        return None
    multi = np.sum(~np.isnan(mat), axis=0) >= 2
    if not multi.any():
        return None
    scale = prep.scale
    k = len(scale.labels or [])
    level: st.Level
    if scale.kind == "value":
        metric, level = "pearson", "interval"
    elif scale.ordered:
        metric, level = "quadratic_kappa", "ordinal"
    else:
        metric, level = "cohen_kappa", "nominal"
    judge = prep.ceil_judge_nom if metric == "cohen_kappa" else prep.ceil_judge_pos
    n_codes = k + 1 if (metric == "cohen_kappa" and bool(np.any(judge == k))) else k
    names = prep.annotators
    domain: list[float] | None = list(map(float, range(n_codes))) if scale.kind == "categorical" else None

    def pairs(cols: IntArray) -> tuple[list[PairAgreement], list[PairAgreement], Val, Val]:
        m = mat[:, cols]
        jrow = judge[cols]
        hp, jp = [], []
        for a, b in itertools.combinations(range(len(names)), 2):
            both = ~np.isnan(m[a]) & ~np.isnan(m[b])
            v, note = st.pairwise(metric, m[a][both], m[b][both], n_codes)
            hp.append(PairAgreement(a=names[a], b=names[b], n=int(both.sum()), value=v, note=note))
        for a in range(len(names)):
            both = ~np.isnan(m[a]) & ~np.isnan(jrow)
            v, note = st.pairwise(metric, jrow[both], m[a][both], n_codes)
            jp.append(PairAgreement(a="judge", b=names[a], n=int(both.sum()), value=v, note=note))
        ah = st.alpha(m, level, domain, options.alpha_max_values)
        aj = st.alpha(np.vstack([m, jrow[None, :]]), level, domain, options.alpha_max_values)
        return hp, jp, ah, aj

    def mean_of(ps: list[PairAgreement]) -> Val:
        vals = [p.value for p in ps if p.value is not None]
        if not vals:
            return None, "no annotator pair has a defined value"
        return float(np.mean(vals)), None

    cols_all = np.arange(mat.shape[1], dtype=np.int64)
    hp, jp, ah, aj = pairs(cols_all)

    def stat(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
        h2, j2, a2, b2 = pairs(idx)
        return {
            "human_pairwise_mean": mean_of(h2),
            "judge_pairwise_mean": mean_of(j2),
            "human_alpha": a2,
            "alpha_with_judge": b2,
        }

    cis = _bootstrap(prep, options, stat, mat.shape[1], prep.ceil_groups)
    n_multi = int(multi.sum())
    n_judge = int(np.sum(~np.isnan(judge)))
    n_with_judge = int(np.sum(np.sum(~np.isnan(mat), axis=0) + ~np.isnan(judge) >= 2))
    return Ceiling(
        metric=metric,
        alpha_level=level,
        n_annotators=len(names),
        n_items_multi=n_multi,
        human_pairs=hp,
        judge_pairs=jp,
        human_pairwise_mean=_estimate(mean_of(hp), n_multi, cis.get("human_pairwise_mean")),
        judge_pairwise_mean=_estimate(mean_of(jp), n_judge, cis.get("judge_pairwise_mean")),
        human_alpha=_estimate(ah, n_multi, cis.get("human_alpha")),
        alpha_with_judge=_estimate(aj, n_with_judge, cis.get("alpha_with_judge")),
    )


def _describe(x: FloatArray) -> Describe:
    d = st.describe(x)
    return Describe(count=len(x), mean=d["mean"], median=d["median"], std=d["std"], min=d["min"], max=d["max"])


def _report(prep: Prepared, options: AgreementOptions) -> AgreementReport:
    head = _headline(prep, options)
    n = prep.counts.items_compared
    cis = _bootstrap(prep, options, head.rest, n, prep.groups, head.batched)
    est = {name: _estimate(val, _n_for(name, prep), cis.get(name)) for name, val in head.point.items()}
    report = AgreementReport(scale=prep.scale, options=options, counts=prep.counts, metrics=est, notes=list(prep.notes))
    if prep.scale.kind == "categorical":
        report.categorical = _categorical(prep, options, est)
    else:
        used = skipped = None
        if options.protocol == "per-group" and prep.groups is not None and n:
            _, used, skipped = st.grouped_correlation("pearson", prep.jv, prep.hv, prep.groups)
            for kind in ("pearson", "spearman", "kendall"):
                e = est[kind]
                extra = f"mean over groups ({used} with a defined Pearson, {skipped} skipped)"
                e.note = f"{e.note}; {extra}" if e.note else extra
        report.value = ValueReport(
            judge=_describe(prep.jv[~prep.invalid]),  # valid answers only, before any substitution
            human=_describe(prep.hv),
            protocol=options.protocol,
            n_groups=used,
            groups_skipped=skipped,
        )
    report.metrics = est
    report.ceiling = _ceiling(prep, options)
    if options.bootstrap > 0:
        unit = "groups" if prep.groups is not None else "items"
        report.notes.append(
            f"{int(options.confidence * 100)}% percentile bootstrap CIs: {options.bootstrap} resamples "
            f"of {unit}, seed {options.seed}"
        )
    return report


def compute_agreement(
    frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions | None = None
) -> AgreementReport:
    """Judge-vs-human agreement for a long (item, annotator) frame; see docs/agreement.md.

    Raises greval.errors.DataError for user mistakes (missing columns, unknown human labels ...).
    """
    options = options or AgreementOptions()
    if options.protocol == "per-group" and "group" not in frame.columns:
        raise DataError("--protocol per-group needs a group column (--group)")
    if options.protocol == "per-group" and scale.kind != "value":
        raise DataError("--protocol per-group applies to correlations on a value scale")
    scale = resolve_scale(frame, scale, options)
    report = _report(prepare(frame, scale, options), options)
    sub_options = options.model_copy(update={"slices": []})
    for col in options.slices:
        if col not in frame.columns:
            raise DataError(f"slice column {col!r} not in the frame; columns are {list(frame.columns)}")
        parts: dict[str, AgreementReport] = {}
        for value, sub in frame.groupby(col, sort=True, dropna=False):
            key = value[0] if isinstance(value, tuple) else value
            parts[str(key)] = _report(prepare(sub, scale, sub_options), sub_options)
        report.slices[col] = parts
    return report


def compare_agreement(
    frames: Mapping[str, pd.DataFrame], scale: AgreementScale, options: AgreementOptions | None = None
) -> ComparisonReport:
    """Several judge versions side by side, and a paired bootstrap of each version minus the first.

    Each version keeps its own invalid-answer handling; differences are on the items every version
    compares (the same resampled items feed every version, so the CI is paired).
    """
    options = options or AgreementOptions()
    if len(frames) < 2:
        raise DataError("comparing needs at least two judge versions")
    names = list(frames)
    first = frames[names[0]]
    scale = resolve_scale(first, scale, options)
    reports = {name: compute_agreement(frames[name], scale, options) for name in names}
    preps = {name: prepare(frames[name], scale, options) for name in names}
    common = set(preps[names[0]].items)
    for p in preps.values():
        common &= set(p.items)
    order = [i for i in preps[names[0]].items if i in common]
    notes: list[str] = []
    if any(len(p.items) != len(order) for p in preps.values()):
        notes.append(f"differences use the {len(order)} items every version compares")
    aligned: dict[str, Prepared] = {}
    heads: dict[str, Headline] = {}
    for name, p in preps.items():
        pos = {it: n for n, it in enumerate(p.items)}
        sel = np.array([pos[i] for i in order], dtype=np.int64)
        q = Prepared(
            scale=p.scale,
            items=order,
            groups=None if p.groups is None else p.groups[sel],
            counts=p.counts.model_copy(update={"items_compared": len(order)}),
        )
        if scale.kind == "categorical":
            q.h, q.j_nom, q.j_ord, q.invalid = p.h[sel], p.j_nom[sel], p.j_ord[sel], p.invalid[sel]
        else:
            q.hv, q.jv, q.invalid = p.hv[sel], p.jv[sel], p.invalid[sel]
        aligned[name] = q
        heads[name] = _headline(q, options)
    base = names[0]
    groups = aligned[base].groups
    points = {name: heads[name].point for name in names}

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

    cis: dict[str, bs.CI] = {}
    if options.bootstrap > 0 and order:
        sampler = bs.Resampler(len(order), groups, options.bootstrap, options.seed)
        rest = diff if heads[base].rest is not None else None
        cis = bs.run(sampler, rest, options.confidence, diff_batch)
    differences = []
    for name in names[1:]:
        for metric, (vb, nb) in points[name].items():
            va, na = points[base].get(metric, (None, None))
            val: Val = (None, na or nb or "undefined in a version") if va is None or vb is None else (vb - va, None)
            e = _estimate(val, len(order), cis.get(f"{name}|{metric}"))
            beyond = None if e.ci_low is None or e.ci_high is None else bool(e.ci_low > 0 or e.ci_high < 0)
            differences.append(Difference(metric=metric, a=base, b=name, estimate=e, beyond_ci=beyond))
    return ComparisonReport(reports=reports, common_items=len(order), differences=differences, notes=notes)
