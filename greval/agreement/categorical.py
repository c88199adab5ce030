"""The categorical sections of the agreement report: the classification report (human = truth), the confusion
matrix, where the judge and people disagree (cells, per-label bias), and each label's prevalence corrected for
the judge's errors (Rogan–Gladen for two labels, confusion-matrix inversion for more)."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from greval.agreement import bootstrap as bs
from greval.agreement import resampling
from greval.agreement import stats as st
from greval.agreement.models import (
    INVALID_LABEL,
    AgreementOptions,
    Bias,
    CategoricalReport,
    ConfusionMatrix,
    DisagreementCell,
    Estimate,
    LabelBias,
    LabelReport,
    Prevalence,
)
from greval.agreement.prepare import MISSING, Prepared
from greval.agreement.resampling import estimate
from greval.agreement.stats import FloatArray, IntArray


def categorical_report(prep: Prepared, options: AgreementOptions, est: dict[str, Estimate]) -> CategoricalReport:
    """The categorical sections; the bias figures move from `est` (the headline) into `bias`."""
    labels = list(prep.scale.labels or [])
    k = len(labels)
    h, j = prep.h, prep.j_nom
    has_invalid = bool(np.any(j == k))
    n_codes = k + 1 if has_invalid else k
    cm = st.confusion(h, j, n_codes) if len(h) else np.zeros((k, n_codes), dtype=np.int64)
    cm = cm[:k]
    judge_labels = labels + ([INVALID_LABEL] if has_invalid else [])
    return CategoricalReport(
        labels=labels,
        per_label=_per_label(st.classification_report(h, j, labels) if len(h) else {}, labels),
        confusion=ConfusionMatrix(labels=labels, judge_labels=judge_labels, counts=cm.tolist()),
        bias=_bias(cm, labels, judge_labels, prep.scale.ordered, est),
        prevalence=prevalence(prep, options),
    )


def _per_label(rep: dict[str, Any], labels: list[str]) -> list[LabelReport]:
    """sklearn's classification report: one row per label, then the macro and weighted averages."""
    names = [lab for lab in labels if lab in rep] + [avg for avg in ("macro avg", "weighted avg") if avg in rep]
    return [
        LabelReport(
            label=name,
            precision=float(rep[name]["precision"]),
            recall=float(rep[name]["recall"]),
            f1=float(rep[name]["f1-score"]),
            support=int(rep[name]["support"]),
        )
        for name in names
    ]


def _cells(cm: IntArray, labels: list[str], judge_labels: list[str], ordered: bool) -> list[DisagreementCell]:
    """The off-diagonal cells of the confusion matrix (human rows × judge columns), most frequent first."""
    k, n_codes = len(labels), len(judge_labels)
    n = int(cm.sum())
    off = int(cm.sum() - np.trace(cm[:, :k]))
    cells = []
    for a, b in itertools.product(range(k), range(n_codes)):
        if a == b or cm[a, b] == 0:
            continue
        cells.append(
            DisagreementCell(
                human=labels[a],
                judge=judge_labels[b],
                count=int(cm[a, b]),
                share_of_items=float(cm[a, b] / n),
                share_of_disagreements=float(cm[a, b] / off),
                steps=(b - a) if (ordered and b < k) else None,
            )
        )
    cells.sort(key=lambda c: -c.count)
    return cells


def _bias(cm: IntArray, labels: list[str], judge_labels: list[str], ordered: bool, est: dict[str, Estimate]) -> Bias:
    """Where the judge leans: its disagreement cells, each label's share by the judge and by people, and the
    headline's bias figures (taken out of `est`)."""
    n = int(cm.sum())
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
    return Bias(
        disagreement_rate=est.pop("disagreement_rate"),
        judge_above_rate=est.pop("judge_above_rate", None),
        judge_below_rate=est.pop("judge_below_rate", None),
        mean_signed_steps=est.pop("mean_signed_steps", None),
        mean_signed_score=est.pop("mean_signed_score", None),
        per_label=per_bias,
        cells=_cells(cm, labels, judge_labels, ordered),
    )


Shares = tuple[FloatArray | None, str | None, FloatArray, FloatArray, int, int]
"""(corrected shares or None, note, the judge's observed shares, people's shares, n judged, n labelled)."""


def _shares(t: IntArray, k: int, labels: Sequence[str] | None = None) -> Shares:
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
    pi, note = st.corrected_prevalence(q, cm, labels)
    return pi, note, q, hs, n_judged, int(cm.sum())


def prevalence(prep: Prepared, options: AgreementOptions) -> Prevalence:
    """Each label's share among every judged item, corrected for the judge's errors measured on the labelled
    ones; bootstrapped over every item (judged or labelled), never within groups."""
    labels = list(prep.scale.labels or [])
    k = len(labels)
    method = "rogan-gladen" if k == 2 else "confusion-matrix inversion (least squares, clipped, renormalised)"
    # One tally cell per row: judge code × human code, code k where missing.
    cells = np.where(prep.all_j == MISSING, k, prep.all_j) * (k + 1) + np.where(prep.all_h == MISSING, k, prep.all_h)
    n_cells = (k + 1) * (k + 1)
    pi, note, q, hs, n_j, n_l = _shares(st.tally(cells, n_cells)[0], k, labels)

    def stat(b: bs.Batch) -> dict[str, FloatArray]:
        out = np.full((b.size, k), np.nan)
        for r, t in enumerate(b.tally(cells, n_cells)):
            p = _shares(t, k)[0]
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
