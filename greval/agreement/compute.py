"""compute_agreement / compare_agreement: the Python entry points (no I/O; the CLI and reports reuse them)."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from greval.agreement import bootstrap as bs
from greval.agreement import stats as st
from greval.agreement.calibration import calibration_from_frame, has_confidence
from greval.agreement.design import design_report, respondents
from greval.agreement.models import (
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    Bias,
    BootstrapInfo,
    CategoricalReport,
    Ceiling,
    ComparisonReport,
    ConfusionMatrix,
    ConsistencyCounts,
    ConsistencyReport,
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
    ResampleUnit,
    ThresholdInfo,
    ValueReport,
)
from greval.agreement.prepare import MISSING, Prepared, label_text, prepare, resolve_scale
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


Statistic = Callable[[IntArray, IntArray | None], dict[str, Val]]


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


def _resampler(n: int, groups: IntArray | None, options: AgreementOptions) -> bs.Resampler:
    """Items, whole groups (clusters), or items within groups (per-group protocol)."""
    if options.protocol == "per-group" and groups is not None:
        return StratifiedResampler(groups, options.bootstrap, options.seed)
    return bs.Resampler(n, groups, options.bootstrap, options.seed)


def _group_values(base: Statistic, idx: IntArray, gids: IntArray) -> dict[int, tuple[int, dict[str, Val]]]:
    """The pooled statistic inside each group: {group code: (n items, figures)}."""
    out: dict[int, tuple[int, dict[str, Val]]] = {}
    for g in np.unique(gids):
        sub = idx[gids == g]
        out[int(g)] = (len(sub), base(sub, None))
    return out


def _mean_over_groups(per: dict[int, tuple[int, dict[str, Val]]]) -> dict[str, Val]:
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


def _per_group(base: Statistic, point_groups: IntArray | None) -> Statistic:
    """`base` inside each group, averaged over groups; the group of each drawn row comes as `inst`."""

    def fn(idx: IntArray, inst: IntArray | None) -> dict[str, Val]:
        gids = inst if inst is not None else point_groups
        assert gids is not None
        return _mean_over_groups(_group_values(base, idx, gids))

    return fn


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
        fn = _per_group(every, prep.groups)
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


def _bootstrap(
    prep: Prepared,
    options: AgreementOptions,
    fn: Statistic | None,
    n: int,
    groups: IntArray | None,
    batched: bs.BatchStatistic | None = None,
) -> dict[str, bs.CI]:
    if options.bootstrap <= 0 or n == 0:
        return {}
    return bs.run(bs.Resampler(n, groups, options.bootstrap, options.seed), fn, options.confidence, batched)


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


def _unit(prep: Prepared, options: AgreementOptions) -> ResampleUnit:
    if prep.groups is not None:
        return "items within groups" if options.protocol == "per-group" else "groups"
    return "items" if prep.multi_row_items else "rows"


def _report(prep: Prepared, options: AgreementOptions) -> AgreementReport:
    head = _headline(prep, options)
    n = prep.counts.items_compared
    everything = np.arange(n, dtype=np.int64)
    cis: dict[str, bs.CI] = {}
    if options.bootstrap > 0 and n:
        cis = bs.run(_resampler(n, prep.groups, options), head.rest, options.confidence, head.batched)
    est = {name: _estimate(val, _n_for(name, prep), cis.get(name)) for name, val in head.point.items()}
    report = AgreementReport(scale=prep.scale, options=options, counts=prep.counts, metrics=est, notes=list(prep.notes))
    if prep.score is not None and (missing := int((~np.isfinite(prep.score)).sum())):
        report.notes.append(f"ROC-AUC / PR-AUC leave out {missing} compared item(s) without a score")
    used = skipped = None
    if options.protocol == "per-group" and prep.groups is not None and n:
        per = _group_values(_pooled_headline(prep, options), everything, prep.groups)
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
        unit = _unit(prep, options)
        n_units = len(prep.group_names) if prep.groups is not None else n
        report.bootstrap = BootstrapInfo(
            unit=unit, n_units=n_units, resamples=options.bootstrap, seed=options.seed, confidence=options.confidence
        )
        report.notes.append(
            f"{int(options.confidence * 100)}% percentile bootstrap CIs: {options.bootstrap} resamples "
            f"of {unit} ({n_units}), seed {options.seed}"
        )
    return report


def _check_options(frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions) -> None:
    """Flag combinations that cannot work, as one-line user errors."""
    if options.protocol == "per-group" and "group" not in frame.columns:
        raise DataError("--protocol per-group needs a group column (--group)")
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


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _selection_mask(frame: pd.DataFrame, select_on: str) -> npt.NDArray[np.bool_]:
    """Rows where COL equals VALUE (compared as canonical text: 1, 1.0 and "1" match)."""
    col, _, want = select_on.partition("=")
    if col not in frame.columns:
        raise DataError(f"--select-on {select_on!r}: no column {col!r} in the frame")
    target = label_text(want, {})
    return np.array([label_text(v, {}) == target for v in frame[col]], dtype=np.bool_)


def judge_from_score(frame: pd.DataFrame, info: ThresholdInfo, options: AgreementOptions) -> pd.DataFrame:
    """The evaluated rows of `frame` with the judge's labels made from its score (renderers reuse this)."""
    out = frame
    if info.select_on is not None:
        out = frame[~_selection_mask(frame, info.select_on)].reset_index(drop=True)
    out = out.copy()
    missing = frozenset(options.missing_values)
    judged: list[str | None] = []
    for v in out["score"]:
        text = label_text(v, {}, missing)
        f = float(text) if text is not None and _is_number(text) else math.nan
        if not math.isfinite(f):
            judged.append(None)
        else:
            judged.append(
                info.pos_label if st.binarise(np.array([f]), info.threshold, info.rule)[0] else info.neg_label
            )
    out["judge"] = judged
    return out


def _threshold_frame(
    frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions
) -> tuple[pd.DataFrame, ThresholdInfo]:
    """The judge's labels from its score: a given threshold, or one chosen on the selection rows.

    With `select_on`, the threshold is chosen on those rows and the others are returned for evaluation.
    """
    labels = list(scale.labels or [])
    assert options.pos_label is not None
    pos = options.pos_label
    neg = labels[1 - labels.index(pos)]
    rule = options.threshold_rule
    if options.choose_threshold is None:
        assert options.threshold is not None
        info = ThresholdInfo(threshold=options.threshold, rule=rule, pos_label=pos, neg_label=neg)
        return judge_from_score(frame, info, options), info
    assert options.select_on is not None
    chosen = _selection_mask(frame, options.select_on)
    if not chosen.any() or chosen.all():
        what = "no row" if not chosen.any() else "every row"
        raise DataError(f"--select-on {options.select_on}: {what} matches; need rows to choose on and to evaluate")
    sel = prepare(frame[chosen].reset_index(drop=True), scale, options)
    assert sel.score is not None
    y = sel.h == labels.index(pos)
    has = np.isfinite(sel.score)
    if not (y[has].any() and (~y[has]).any()):
        raise DataError(f"--select-on {options.select_on}: the selection rows need both labels among people")
    t, v, grid = st.choose_threshold(y[has], sel.score[has], rule, options.choose_threshold)
    info = ThresholdInfo(
        threshold=t,
        rule=rule,
        pos_label=pos,
        neg_label=neg,
        chosen_by=options.choose_threshold,
        select_on=options.select_on,
        selection_items=int(has.sum()),
        selection_value=v,
        candidates=grid,
    )
    return judge_from_score(frame, info, options), info


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
        frame, threshold = _threshold_frame(frame, scale, options)
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
        how = (
            f"chosen by {threshold.chosen_by} on the {threshold.selection_items} items with {threshold.select_on} "
            f"(grid: their {threshold.candidates} distinct scores, lowest on ties); evaluated on the other rows"
            if threshold.chosen_by
            else "given"
        )
        op = ">" if threshold.rule == "gt" else "≥"
        report.notes.append(
            f"judge labels from its score: {threshold.pos_label} when score {op} {threshold.threshold:g}, else "
            f"{threshold.neg_label} (threshold {how})"
        )
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
        cis = bs.run(_resampler(len(order), groups, options), rest, options.confidence, batched)
    differences = []
    for name in names[1:]:
        for metric, (vb, nb) in points[name].items():
            va, na = points[base].get(metric, (None, None))
            val: Val = (None, na or nb or "undefined in a version") if va is None or vb is None else (vb - va, None)
            e = _estimate(val, len(order), cis.get(f"{name}|{metric}"))
            beyond = None if e.ci_low is None or e.ci_high is None else bool(e.ci_low > 0 or e.ci_high < 0)
            differences.append(Difference(metric=metric, a=base, b=name, estimate=e, beyond_ci=beyond))
    info = None
    if options.bootstrap > 0 and order:
        unit = _unit(preps[base], options)
        n_units = len(np.unique(groups)) if groups is not None else len(order)
        info = BootstrapInfo(
            unit=unit, n_units=n_units, resamples=options.bootstrap, seed=options.seed, confidence=options.confidence
        )
        notes.append(f"paired differences: {options.bootstrap} resamples of {unit} ({n_units}), seed {options.seed}")
    return ComparisonReport(
        reports=reports, common_items=len(order), differences=differences, bootstrap=info, notes=notes
    )


def compute_consistency(
    frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions | None = None, column: str = "run"
) -> ConsistencyReport:
    """Agreement of the judge with itself: the frame's `run` column names two runs per item (e.g. the
    original and the swapped order, or two seeds); pivoted to one row per item, the runs are compared
    like two annotators: consistency (share of items with the same answer) and Cohen's κ.

    An invalid answer (missing, or not a label) is one more category; two invalid answers for one item
    count as agreement or not by `options.invalid_pairs`. Items seen in only one run are counted, left out.
    """
    options = options or AgreementOptions()
    if scale.kind != "categorical":
        raise DataError("--pair-by compares categorical answers (consistency, κ); use --kind categorical")
    for col in ("item", "judge", "run"):
        if col not in frame.columns:
            raise DataError(f"missing column {col!r} for --pair-by")
    if options.protocol == "per-group" and "group" not in frame.columns:
        raise DataError("--protocol per-group needs a group column (--group)")
    missing = frozenset(options.missing_values)
    answers = [label_text(v, options.mapping, missing) for v in frame["judge"]]
    runs_raw = [label_text(v, {}) for v in frame["run"]]
    runs = list(dict.fromkeys(r for r in runs_raw if r is not None))
    if len(runs) != 2:
        raise DataError(f"--pair-by {column}: expected exactly two runs, found {len(runs)}: {runs[:6]}")
    if any(r is None for r in runs_raw):
        raise DataError(f"--pair-by {column}: {sum(r is None for r in runs_raw)} row(s) name no run")
    labels = list(scale.labels) if scale.labels else sorted({a for a in answers if a is not None})
    if not labels:
        raise DataError("no judge answers to compare; pass --labels")
    scale = scale.model_copy(update={"labels": labels})
    index = {lab: i for i, lab in enumerate(labels)}
    k = len(labels)
    items = [label_text(v, {}) for v in frame["item"]]
    if any(i is None for i in items):
        raise DataError(f"{sum(i is None for i in items)} row(s) have no item id")
    groups_raw = [label_text(v, {}) for v in frame["group"]] if "group" in frame.columns else None
    seen: dict[tuple[str, str], str | None] = {}
    conflict: list[str] = []
    repeated = 0
    order: list[str] = []
    group_of: dict[str, str | None] = {}
    for r, (item, run, ans) in enumerate(zip(items, runs_raw, answers, strict=True)):
        assert item is not None and run is not None
        if item not in group_of:
            order.append(item)
            group_of[item] = groups_raw[r] if groups_raw is not None else None
        key = (item, run)
        if key in seen:
            if seen[key] != ans:
                conflict.append(item)
            repeated += 1
        seen[key] = ans
    if conflict:
        bad = list(dict.fromkeys(conflict))
        shown = ", ".join(repr(i) for i in bad[:5]) + (f" and {len(bad) - 5} more" if len(bad) > 5 else "")
        raise DataError(f"{len(bad)} item(s) have two different answers in one run ({shown})")
    if groups_raw is not None and any(group_of[i] is None for i in order):
        raise DataError("some items have no group id")
    paired = [i for i in order if (i, runs[0]) in seen and (i, runs[1]) in seen]
    code_a: list[int] = []
    code_b: list[int] = []
    both_invalid = one_invalid = 0
    for item in paired:
        a, b = seen[(item, runs[0])], seen[(item, runs[1])]
        ca = index.get(a, k) if a is not None else k
        cb = index.get(b, k) if b is not None else k
        if ca == k and cb == k:
            both_invalid += 1
            if options.invalid_pairs == "disagree":
                cb = k + 1  # a second, different "invalid": never matches the first
        elif ca == k or cb == k:
            one_invalid += 1
        code_a.append(ca)
        code_b.append(cb)
    ja = np.array(code_a, dtype=np.int64)
    jb = np.array(code_b, dtype=np.int64)
    group_names = sorted({g for g in group_of.values() if g is not None})
    gidx = {g: n for n, g in enumerate(group_names)}
    groups = np.array([gidx[str(group_of[i])] for i in paired], dtype=np.int64) if groups_raw is not None else None
    n_codes = k + 2

    def base(idx: IntArray, _inst: IntArray | None) -> dict[str, Val]:
        return {"consistency": st.accuracy(ja[idx], jb[idx]), "cohen_kappa": st.cohen_kappa(ja[idx], jb[idx], n_codes)}

    fn = _per_group(base, groups) if options.protocol == "per-group" and groups is not None else base
    n = len(paired)
    everything = np.arange(n, dtype=np.int64)
    point = fn(everything, groups)
    cis: dict[str, bs.CI] = {}
    if options.bootstrap > 0 and n:
        cis = bs.run(_resampler(n, groups, options), fn, options.confidence)
    metrics = {name: _estimate(v, n, cis.get(name)) for name, v in point.items()}
    notes: list[str] = []
    per_group: list[GroupFigures] = []
    if options.protocol == "per-group" and groups is not None and n:
        per = _group_values(base, everything, groups)
        per_group = [
            GroupFigures(
                group=group_names[g], n=size, metrics={m: Estimate(value=v, n=size, note=w) for m, (v, w) in f.items()}
            )
            for g, (size, f) in per.items()
        ]
        notes.append("per-group protocol: each figure is the unweighted mean of its values in the groups")
    merged = np.minimum(np.vstack([ja, jb]), k).astype(np.int64)  # both "invalid" codes shown as one column
    cm = st.confusion(merged[0], merged[1], k + 1) if n else np.zeros((k + 1, k + 1), dtype=np.int64)
    label_names = [*labels, INVALID_LABEL]
    only_one = len(order) - n
    if only_one:
        notes.append(f"{only_one} item(s) appear in only one run: left out")
    if repeated:
        notes.append(f"{repeated} row(s) repeat an item's answer in the same run identically: counted once")
    if both_invalid:
        notes.append(
            f"{both_invalid} item(s) have an invalid answer in both runs: counted as "
            f"{'agreement' if options.invalid_pairs == 'agree' else 'disagreement'} (--invalid-pairs)"
        )
    info = None
    if options.bootstrap > 0:
        unit: ResampleUnit = (
            "items" if groups is None else ("items within groups" if options.protocol == "per-group" else "groups")
        )
        n_units = len(group_names) if groups is not None else n
        info = BootstrapInfo(
            unit=unit, n_units=n_units, resamples=options.bootstrap, seed=options.seed, confidence=options.confidence
        )
        notes.append(
            f"{int(options.confidence * 100)}% percentile bootstrap CIs: {options.bootstrap} resamples of "
            f"{unit} ({n_units}), seed {options.seed}"
        )
    return ConsistencyReport(
        column=column,
        runs=runs,
        scale=scale,
        options=options,
        counts=ConsistencyCounts(
            rows=len(frame),
            items=len(order),
            items_paired=n,
            items_one_run_only=only_one,
            items_both_invalid=both_invalid,
            items_one_invalid=one_invalid,
        ),
        metrics=metrics,
        confusion=ConfusionMatrix(labels=label_names, judge_labels=label_names, counts=cm.tolist()),
        per_group=per_group,
        bootstrap=info,
        notes=notes,
    )
