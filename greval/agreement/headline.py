"""The headline figures of judge vs people over the compared items (accuracy, κ, α, F1 … or the correlations
and errors of a value scale): their point estimates, and how the bootstrap computes them — by batch where the
figure comes from tallies or sums (greval.agreement.stats computes both from the same formulas), one resample
at a time for the rest. Shared by the agreement report and the version comparison."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from greval.agreement import bootstrap as bs
from greval.agreement import stats as st
from greval.agreement.models import AgreementOptions, AgreementScale
from greval.agreement.prepare import Prepared
from greval.agreement.resampling import Statistic, per_group
from greval.agreement.stats import FloatArray, IntArray, Val

BIAS_KEYS = ("disagreement_rate", "judge_above_rate", "judge_below_rate", "mean_signed_steps", "mean_signed_score")
"""The headline's figures of the judge's bias: the report lists them under `categorical.bias`."""


@dataclass
class Headline:
    """The headline statistics: their point estimates, and how the bootstrap computes them (`batched` for
    many resamples at once, `rest` one resample at a time for what is not vectorised)."""

    point: dict[str, Val]
    batched: bs.BatchStatistic | None
    rest: Statistic | None


def headline(prep: Prepared, options: AgreementOptions) -> Headline:
    """The statistics over the compared items, and over bootstrap resamples of them."""
    every = pooled_headline(prep, options)
    everything = np.arange(prep.counts.items_compared, dtype=np.int64)
    if options.protocol == "per-group":  # each resample's figures per group, then averaged: one at a time
        fn = per_group(every, prep.groups)
        return Headline(fn(everything, prep.groups), None, fn)
    point = every(everything, None)
    if prep.scale.kind == "categorical":
        return _categorical_headline(prep, options, point)
    return _value_headline(prep, options, point)


def categorical_setup(
    scale: AgreementScale, options: AgreementOptions
) -> tuple[int, FloatArray | None, int | None, bool]:
    """(number of labels, each label's score on an ordered scale, the positive label's code, whether invalid
    answers are a category of their own) — what every categorical headline needs."""
    labels = scale.labels or []
    scores = None
    if scale.ordered and scale.scores is not None and all(lab in scale.scores for lab in labels):
        scores = np.array([scale.scores[lab] for lab in labels], dtype=float)
    pos = labels.index(options.pos_label) if options.pos_label is not None else None
    return len(labels), scores, pos, options.invalid != "opposite"


def _categorical_headline(prep: Prepared, options: AgreementOptions, point: dict[str, Val]) -> Headline:
    """The pooled categorical bootstrap: confusion tallies for a batch of resamples at once; the
    positive-label and score figures one resample at a time."""
    scale = prep.scale
    k, scores, pos, invalid_code = categorical_setup(scale, options)
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
    if pos is None:
        return Headline(point, batched, None)

    def positive(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
        out: dict[str, Val] = {}
        if prep.has_judge:
            out.update(st.positive_label_metrics(prep.h[idx], prep.j_nom[idx], pos))
        if prep.score is not None:
            out.update(st.score_metrics(prep.h[idx] == pos, prep.score[idx]))
        return out

    return Headline(point, batched, positive)


def _value_headline(prep: Prepared, options: AgreementOptions, point: dict[str, Val]) -> Headline:
    """The pooled value-scale bootstrap: moments (and weighted κ on a fixed domain) for a batch of resamples
    at once; rank correlations one resample at a time."""
    domain = value_domain(prep.scale)
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


def pooled_headline(prep: Prepared, options: AgreementOptions) -> Statistic:
    """Every headline figure over one subset of items, pooled."""
    scale = prep.scale
    if scale.kind != "categorical":
        domain = value_domain(scale)

        def val(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
            return st.value_metrics(prep.hv[idx], prep.jv[idx], None, "pooled", domain, options.alpha_max_values)

        return val
    k, scores, pos, invalid_code = categorical_setup(scale, options)

    def cat(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
        out: dict[str, Val] = {}
        if prep.has_judge:
            h, j = prep.h[idx], prep.j_nom[idx]
            out = st.categorical_metrics(
                h,
                j,
                prep.j_ord[idx],
                prep.invalid[idx],
                k,
                scale.ordered,
                options.alpha_max_values,
                scores,
                invalid_code,
            )
            if pos is not None:
                out.update(st.positive_label_metrics(h, j, pos))
        if pos is not None and prep.score is not None:
            out.update(st.score_metrics(prep.h[idx] == pos, prep.score[idx]))
        return out

    return cat


def value_domain(scale: AgreementScale) -> list[float] | None:
    """Integer min..max as weighted-κ categories, when the scale has whole-number bounds."""
    if scale.min is None or scale.max is None:
        return None
    if float(scale.min).is_integer() and float(scale.max).is_integer() and scale.max - scale.min <= 1000:
        return [float(v) for v in range(int(scale.min), int(scale.max) + 1)]
    return None


def n_for(name: str, prep: Prepared) -> int:
    """The n behind one headline figure: the bias rates count valid answers only, the AUCs scored items."""
    if name in BIAS_KEYS[1:]:
        return int((~prep.invalid).sum())
    if name in ("roc_auc", "pr_auc") and prep.score is not None:
        return int(np.isfinite(prep.score).sum())
    return prep.counts.items_compared
