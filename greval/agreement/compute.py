"""compute_agreement / compare_agreement: the Python entry points (no I/O; the CLI and reports reuse them)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from greval.agreement import bootstrap as bs
from greval.agreement import resampling
from greval.agreement import stats as st
from greval.agreement.calibration import calibration_from_frame, has_confidence
from greval.agreement.consistency import compute_consistency
from greval.agreement.design import design_report, respondents
from greval.agreement.models import (
    INVALID_LABEL,
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    Bias,
    CategoricalReport,
    Ceiling,
    ComparisonReport,
    ConfusionMatrix,
    Describe,
    DesignReport,
    Difference,
    DisagreementCell,
    Estimate,
    GroupFigures,
    LabelBias,
    LabelReport,
    PairAgreement,
    Prevalence,
    ValueReport,
)
from greval.agreement.prepare import MISSING, Prepared, label_text, prepare, resolve_scale
from greval.agreement.resampling import (
    Statistic,
    bootstrap_info,
    bootstrap_note,
    check_protocol,
    estimate,
    group_values,
    per_group,
    resample_unit,
    resampler,
)
from greval.agreement.stats import FloatArray, IntArray, Val
from greval.agreement.threshold import threshold_frame, threshold_note
from greval.errors import DataError

BIAS_KEYS = ("disagreement_rate", "judge_above_rate", "judge_below_rate", "mean_signed_steps", "mean_signed_score")


@dataclass
class Headline:
    """The headline statistics: their point estimates, and how the bootstrap computes them (`batched` for
    many resamples at once, `rest` one resample at a time for what is not vectorised)."""

    point: dict[str, Val]
    batched: bs.BatchStatistic | None
    rest: Statistic | None


def _headline(prep: Prepared, options: AgreementOptions) -> Headline:
    """The statistics over the compared items, and over bootstrap resamples of them."""
    every = _pooled_headline(prep, options)
    everything = np.arange(prep.counts.items_compared, dtype=np.int64)
    if options.protocol == "per-group":  # each resample's figures per group, then averaged: one at a time
        fn = per_group(every, prep.groups)
        return Headline(fn(everything, prep.groups), None, fn)
    return _vectorised(prep, options, every(everything, None))


def _categorical_setup(
    scale: AgreementScale, options: AgreementOptions
) -> tuple[int, FloatArray | None, int | None, bool]:
    """(number of labels, each label's score on an ordered scale, the --pos-label's code, whether invalid
    answers are a category of their own) — what every categorical headline needs."""
    labels = scale.labels or []
    scores = None
    if scale.ordered and scale.scores is not None and all(lab in scale.scores for lab in labels):
        scores = np.array([scale.scores[lab] for lab in labels], dtype=float)
    pos = labels.index(options.pos_label) if options.pos_label is not None else None
    return len(labels), scores, pos, options.invalid != "opposite"


def _vectorised(prep: Prepared, options: AgreementOptions, point: dict[str, Val]) -> Headline:
    """The pooled headline's bootstrap: confusion tallies and sums for a batch of resamples at once; the
    rest (positive-label and score figures, rank correlations) one resample at a time. Same formulas as
    the point estimate (greval.agreement.stats computes both from tallies)."""
    scale = prep.scale
    if scale.kind == "categorical":
        k, scores, pos, invalid_code = _categorical_setup(scale, options)
        batched: bs.BatchStatistic | None = None
        if prep.has_judge:
            (nom, n_nom), (ordc, n_ord) = st.categorical_cells(prep.h, prep.j_nom, prep.j_ord, prep.invalid, k)

            def cat(b: bs.Batch) -> dict[str, FloatArray]:
                tallies = b.tally(nom, n_nom), b.tally(ordc, n_ord) if scale.ordered else None
                batch = st.categorical_from_tallies(
                    *tallies, k, scale.ordered, options.alpha_max_values, scores, invalid_code
                )
                return {name: values for name, (values, _) in batch.items()}

            batched = cat
        rest: Statistic | None = None
        if pos is not None:

            def positive(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
                out: dict[str, Val] = {}
                if prep.has_judge:
                    out.update(st.positive_label_metrics(prep.h[idx], prep.j_nom[idx], pos))
                if prep.score is not None:
                    out.update(st.score_metrics(prep.h[idx] == pos, prep.score[idx]))
                return out

            rest = positive
        return Headline(point, batched, rest)
    domain = _value_domain(scale)
    vectorised = list(st.MOMENT_METRICS)
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

    def val_rest(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
        return st.value_metrics(
            prep.hv[idx], prep.jv[idx], None, "pooled", domain, options.alpha_max_values, vectorised
        )

    return Headline(point, val_batch, val_rest)


def _pooled_headline(prep: Prepared, options: AgreementOptions) -> Statistic:
    """Every headline figure over one subset of items, pooled."""
    scale = prep.scale
    if scale.kind == "categorical":
        k, scores, pos, invalid_code = _categorical_setup(scale, options)

        def cat(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
            out: dict[str, Val] = {}
            if prep.has_judge:
                out = st.categorical_metrics(
                    prep.h[idx],
                    prep.j_nom[idx],
                    prep.j_ord[idx],
                    prep.invalid[idx],
                    k,
                    scale.ordered,
                    options.alpha_max_values,
                    scores,
                    invalid_code,
                )
                if pos is not None:
                    out.update(st.positive_label_metrics(prep.h[idx], prep.j_nom[idx], pos))
            if pos is not None and prep.score is not None:
                out.update(st.score_metrics(prep.h[idx] == pos, prep.score[idx]))
            return out

        return cat
    domain = _value_domain(scale)

    def val(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
        return st.value_metrics(prep.hv[idx], prep.jv[idx], None, "pooled", domain, options.alpha_max_values)

    return val


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
    if name in ("roc_auc", "pr_auc") and prep.score is not None:
        return int(np.isfinite(prep.score).sum())
    return prep.counts.items_compared


def _categorical(prep: Prepared, options: AgreementOptions, est: dict[str, Estimate]) -> CategoricalReport:
    labels = list(prep.scale.labels or [])
    k = len(labels)
    h, j = prep.h, prep.j_nom
    has_invalid = bool(np.any(j == k))
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

    cis = resampling.cis(options, len(cells), prep.all_groups, None, stat, protocol=False)
    corrected = [
        estimate((None, note) if pi is None else (float(pi[i]), None), n_j, cis.get(lab))
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

    cis = resampling.cis(options, mat.shape[1], prep.ceil_groups, stat, protocol=False)
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
        human_pairwise_mean=estimate(mean_of(hp), n_multi, cis.get("human_pairwise_mean")),
        judge_pairwise_mean=estimate(mean_of(jp), n_judge, cis.get("judge_pairwise_mean")),
        human_alpha=estimate(ah, n_multi, cis.get("human_alpha")),
        alpha_with_judge=estimate(aj, n_with_judge, cis.get("alpha_with_judge")),
    )


def _describe(x: FloatArray) -> Describe:
    d = st.describe(x)
    return Describe(count=len(x), mean=d["mean"], median=d["median"], std=d["std"], min=d["min"], max=d["max"])


def _report(prep: Prepared, options: AgreementOptions) -> AgreementReport:
    head = _headline(prep, options)
    n = prep.counts.items_compared
    everything = np.arange(n, dtype=np.int64)
    cis: dict[str, bs.CI] = {}
    if options.bootstrap > 0 and n:
        cis = bs.run(resampler(n, prep.groups, options), head.rest, options.confidence, head.batched)
    est = {name: estimate(val, _n_for(name, prep), cis.get(name)) for name, val in head.point.items()}
    report = AgreementReport(scale=prep.scale, options=options, counts=prep.counts, metrics=est, notes=list(prep.notes))
    if prep.score is not None and (missing := int((~np.isfinite(prep.score)).sum())):
        report.notes.append(f"ROC-AUC / PR-AUC leave out {missing} compared item(s) without a score")
    used = skipped = None
    if options.protocol == "per-group" and prep.groups is not None and n:
        per = group_values(_pooled_headline(prep, options), everything, prep.groups)
        report.per_group = [
            GroupFigures(
                group=prep.group_names[g],
                n=size,
                metrics={name: Estimate(value=v, n=size, note=note) for name, (v, note) in figures.items()},
            )
            for g, (size, figures) in per.items()
        ]
        for name, e in est.items():
            defined = sum(1 for _, f in per.values() if f.get(name, (None, None))[0] is not None)
            if 0 < defined < len(per):
                extra = f"mean over {defined} of {len(per)} groups ({len(per) - defined} undefined, skipped)"
                e.note = f"{e.note}; {extra}" if e.note else extra
        first = "pearson" if prep.scale.kind == "value" else "accuracy"
        used = sum(1 for _, f in per.values() if f.get(first, (None, None))[0] is not None)
        skipped = len(per) - used
        report.notes.append(
            f"per-group protocol: each headline figure is the unweighted mean of its values in the {len(per)} "
            "groups (where defined; listed per group); the classification report, confusion, prevalence and "
            "ceiling are pooled"
        )
    if prep.scale.kind == "categorical":
        if prep.has_judge:
            report.categorical = _categorical(prep, options, est)
    else:
        report.value = ValueReport(
            judge=_describe(prep.jv[~prep.invalid]),  # valid answers only, before any substitution
            human=_describe(prep.hv),
            protocol=options.protocol,
            n_groups=used,
            groups_skipped=skipped,
        )
    report.metrics = est
    report.ceiling = _ceiling(prep, options) if prep.has_judge else None
    if options.bootstrap > 0:
        unit = resample_unit(prep.groups is not None, options, prep.multi_row_items)
        n_units = len(prep.group_names) if prep.groups is not None else n
        report.bootstrap = bootstrap_info(unit, n_units, options)
        report.notes.append(bootstrap_note(report.bootstrap))
    return report


def _check_options(frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions) -> None:
    """Flag combinations that cannot work, as one-line user errors."""
    check_protocol(frame, options)
    categorical = scale.kind == "categorical"
    labels = scale.labels or []
    if options.pos_label is not None:
        if not categorical:
            raise DataError("--pos-label needs a categorical scale")
        if options.pos_label not in labels:
            raise DataError(f"--pos-label {options.pos_label!r} is not a label; labels are {labels}")
    wants_threshold = options.threshold is not None or options.choose_threshold is not None
    if "score" in frame.columns or wants_threshold:
        if "score" not in frame.columns:
            raise DataError("a threshold turns scores into labels: give the score column (--score)")
        if not categorical:
            raise DataError("--score needs a categorical scale (the positive label and the rest)")
        if options.pos_label is None:
            raise DataError("--score needs --pos-label: which label a high score means")
    if wants_threshold:
        if len(labels) != 2:
            raise DataError(f"a threshold makes two labels; the scale has {len(labels)}: {labels}")
        if "judge" in frame.columns:
            raise DataError("a threshold makes the judge's labels from its score: --judge or a threshold, not both")
    if "judge" not in frame.columns and "score" not in frame.columns:
        raise DataError("missing column(s) ['judge']; give the judge's labels or its score")


def compute_agreement(
    frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions | None = None
) -> AgreementReport:
    """Judge-vs-human agreement for a long (item, annotator) frame; see docs/agreement.md.

    Raises greval.errors.DataError for user mistakes (missing columns, unknown human labels ...).
    """
    options = options or AgreementOptions()
    scale = resolve_scale(frame, scale, options)
    _check_options(frame, scale, options)
    threshold = None
    if options.threshold is not None or options.choose_threshold is not None:
        frame, threshold = threshold_frame(frame, scale, options)
    frame, assumed = respondents(frame)
    prep = prepare(frame, scale, options)
    report = _report(prep, options)
    report.threshold = threshold
    report.design = _design(frame, prep, scale, options, assumed)
    if report.design is None:
        report.notes += assumed  # equal weights, but items selected and not labelled still need saying
    else:
        report.notes.append(report.design.summary)
        prevalence = report.categorical.prevalence if report.categorical is not None else None
        if prevalence is not None:
            unweighted = (
                "its error rates were measured on the labelled items as if they were a random sample; the "
                "design-weighted prevalence[X] estimates each share from the weights instead"
            )
            prevalence.note = f"{prevalence.note}; {unweighted}" if prevalence.note else unweighted
    if has_confidence(frame) and "judge" in frame.columns:
        report.calibration = calibration_from_frame(frame, options)
    if threshold is not None:
        report.notes.append(threshold_note(threshold))
    plain: dict[str, Any] = {"slices": [], "threshold": None, "choose_threshold": None, "select_on": None}
    sub_options = options.model_copy(update=plain)
    for col in options.slices:
        if col not in frame.columns:
            raise DataError(f"slice column {col!r} not in the frame; columns are {list(frame.columns)}")
        parts: dict[str, AgreementReport] = {}
        for value, sub in frame.groupby(col, sort=True, dropna=False):
            key = value[0] if isinstance(value, tuple) else value
            absent = key is None or (isinstance(key, float) and math.isnan(key))
            if absent:  # rows without a value are a slice of their own, named so (not "nan")
                report.notes.append(f"slice {col}: {len(sub)} row(s) have no value, listed as {MISSING_SLICE!r}")
            part = parts[MISSING_SLICE if absent else str(key)] = _report(prepare(sub, scale, sub_options), sub_options)
            # A domain of the same design: the slice's items, with the whole sample's weights and resamples.
            domain = {t for v in sub["item"] if (t := label_text(v, {})) is not None}
            part.design = _design(frame, prep, scale, sub_options, domain=domain)
        report.slices[col] = parts
    return report


def _design(
    frame: pd.DataFrame,
    prep: Prepared,
    scale: AgreementScale,
    options: AgreementOptions,
    notes: Sequence[str] = (),
    domain: set[str] | None = None,
) -> DesignReport | None:
    """The design-weighted figures of a frame whose rows say how they were selected (None otherwise)."""
    if "probability" not in frame.columns:
        return None
    codes = scale.kind == "categorical" and scale.labels is not None
    return design_report(
        frame,
        prep.items,
        prep.h if codes else prep.hv,
        prep.j_nom if codes else prep.jv,
        scale.labels if codes else None,
        options.bootstrap,
        options.seed,
        options.confidence,
        notes,
        domain,
    )


MISSING_SLICE = "(missing)"
"""The slice of rows whose slice column is empty."""


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
            q.score = None if p.score is None else p.score[sel]
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
        rest = diff if heads[base].rest is not None else None
        batched = diff_batch if heads[base].batched is not None else None
        cis = bs.run(resampler(len(order), groups, options), rest, options.confidence, batched)
    differences = []
    for name in names[1:]:
        for metric, (vb, nb) in points[name].items():
            va, na = points[base].get(metric, (None, None))
            val: Val = (None, na or nb or "undefined in a version") if va is None or vb is None else (vb - va, None)
            e = estimate(val, len(order), cis.get(f"{name}|{metric}"))
            beyond = None if e.ci_low is None or e.ci_high is None else bool(e.ci_low > 0 or e.ci_high < 0)
            differences.append(Difference(metric=metric, a=base, b=name, estimate=e, beyond_ci=beyond))
    info = None
    if options.bootstrap > 0 and order:
        unit = resample_unit(preps[base].groups is not None, options, preps[base].multi_row_items)
        n_units = len(np.unique(groups)) if groups is not None else len(order)
        info = bootstrap_info(unit, n_units, options)
        notes.append(f"paired differences: {options.bootstrap} resamples of {unit} ({n_units}), seed {options.seed}")
    return ComparisonReport(
        reports=reports, common_items=len(order), differences=differences, bootstrap=info, notes=notes
    )


__all__ = ["BIAS_KEYS", "MISSING_SLICE", "compare_agreement", "compute_agreement", "compute_consistency"]
