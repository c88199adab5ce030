"""Pure agreement statistics on aligned numpy arrays (no pandas, no I/O).

Every function returns `Val = (value, note)`: a finite float, or None with a note saying why it is
undefined. Confusion-based statistics (accuracy, balanced accuracy, macro-F1, Cohen's κ, Krippendorff's α)
and the moment-based ones (MAE, RMSE, Pearson ...) are computed here from tallies / sums, for many bootstrap
resamples at once (`BatchVal`) or for one (the point estimate), by the same function; the tests check them
against scikit-learn, scipy and krippendorff to 1e-12. The rest (Spearman, Kendall's τ-b, the positive label's
precision / recall / F1, ROC-AUC, average precision, the classification report) follow scikit-learn's and
scipy's algorithms step by step, in numpy, so they give the same numbers without importing either library
(importing them took most of a `greval agreement` call's CPU time); the tests keep those libraries as references.

Categorical arrays are integer codes into the spec's label list (0..k-1). A judge answer kept "as wrong"
is code k in nominal statistics (a category nobody else uses, so it never matches), and is replaced by the
label farthest from the human's (lowest on ties) where a position is needed (weighted κ, ordinal α).
"""

from __future__ import annotations

import math
from collections.abc import Collection, Sequence
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

Val = tuple[float | None, str | None]
Level = Literal["nominal", "ordinal", "interval", "ratio"]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def _finite(value: Any, why: str) -> Val:
    """A result as a float, or None with `why` when it is NaN/inf."""
    v = float(value)
    if math.isfinite(v):
        return v, None
    return None, why


def need(n: int, minimum: int, what: str) -> str | None:
    """The note for too few items, or None when there are enough."""
    if n < minimum:
        return f"{what} needs at least {minimum} item(s), got {n}"
    return None


# ----------------------------------------------------------------------------------------- categorical


def worst_case_codes(h: IntArray, k: int) -> IntArray:
    """For each human code, the label farthest from it (the lowest label on ties)."""
    return np.where(2 * h >= (k - 1), 0, k - 1).astype(np.int64)


# ------------------------------------------------------------------------------- batches of statistics
#
# Every confusion-based statistic is computed from tallies, for R resamples at once (the bootstrap) or for
# R = 1 (the point estimate): one formula per statistic, whichever asks.

Notes = npt.NDArray[np.object_]
BatchVal = tuple[FloatArray, Notes]
"""One statistic over R resamples: values (NaN where undefined) and why (None where defined)."""

Weights = Literal["linear", "quadratic"] | None


def batch_val(values: FloatArray, rules: Sequence[tuple[BoolArray, str | Notes]], why: str) -> BatchVal:
    """`values` made NaN, with a note, where a rule holds (the first listed wins) or the value is not finite.

    A rule's note is one string, or one string per resample where its mask holds.
    """
    vals = np.array(values, dtype=np.float64).reshape(-1)
    notes: Notes = np.full(vals.shape, None, dtype=object)
    undefined = ~np.isfinite(vals)
    notes[undefined] = why
    for mask, text in reversed(rules):
        notes[mask] = text
        undefined |= mask
    vals[undefined] = np.nan
    return vals, notes


def at(bv: BatchVal, i: int = 0) -> Val:
    """Resample i of a batch as a Val."""
    values, notes = bv
    note = notes[i]
    return (None, str(note)) if note is not None else (float(values[i]), None)


def _need_rule(n: IntArray, minimum: int, what: str) -> tuple[BoolArray, Notes]:
    mask = n < minimum
    return mask, np.array([need(int(x), minimum, what) for x in n[mask]], dtype=object)


def tally(codes: IntArray, n_cells: int) -> IntArray:
    """Counts of each cell code 0..n_cells-1 as one resample: shape (1, n_cells)."""
    return np.bincount(codes, minlength=n_cells).astype(np.int64).reshape(1, n_cells)


def _diagonal(cm: IntArray) -> IntArray:
    """(R, a, b) → (R, min(a, b)): the matching-code counts."""
    return np.diagonal(cm, axis1=1, axis2=2)


def accuracy_from(cm: IntArray) -> BatchVal:
    """Share of items on the diagonal of each (R, human, judge) confusion matrix."""
    n = cm.sum(axis=(1, 2))
    with np.errstate(divide="ignore", invalid="ignore"):
        value = _diagonal(cm).sum(axis=1) / n
    return batch_val(value, [_need_rule(n, 1, "accuracy")], "undefined")


def balanced_accuracy_from(cm: IntArray) -> BatchVal:
    """Mean recall over the labels people used (sklearn's definition); rows are the human codes."""
    k = cm.shape[1]
    n = cm.sum(axis=(1, 2))
    rows = cm.sum(axis=2)
    used = rows > 0
    with np.errstate(divide="ignore", invalid="ignore"):
        recall = np.where(used, _diagonal(cm)[:, :k] / np.where(used, rows, 1), 0.0)
        value = recall.sum(axis=1) / used.sum(axis=1)
    return batch_val(value, [_need_rule(n, 1, "balanced accuracy")], "undefined")


def _ratio(num: FloatArray, den: IntArray, zero: float) -> FloatArray:
    """num / den, and `zero` where den is 0 (scikit-learn's zero_division)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray(np.where(den > 0, num / np.where(den > 0, den, 1), zero), dtype=np.float64)


def per_label_from(cm: IntArray, k: int, zero: float) -> tuple[FloatArray, FloatArray, FloatArray, IntArray]:
    """(precision, recall, F1, support) of labels 0..k-1, each (R, k), from (R, human, judge) confusion
    matrices, people being the truth (scikit-learn's precision_recall_fscore_support: F1 = 2·tp / (support +
    predicted)); judge codes ≥ k (an invalid answer) predict no label. A ratio with nothing to divide is
    `zero` (0 in the classification report, NaN for the positive label)."""
    tp = _diagonal(cm)[:, :k].astype(np.float64)
    true = cm[:, :k, :].sum(axis=2)
    pred = cm[:, :, :k].sum(axis=1)
    return _ratio(tp, pred, zero), _ratio(tp, true, zero), _ratio(2.0 * tp, true + pred, zero), true


def macro_f1_from(cm: IntArray, k: int) -> BatchVal:
    """Macro F1 over labels 0..k-1 (a label with no support and no prediction scores 0); judge codes ≥ k
    (an invalid answer) are predictions of no label."""
    n = cm.sum(axis=(1, 2))
    f1 = per_label_from(cm, k, 0.0)[2]
    return batch_val(f1.mean(axis=1), [_need_rule(n, 1, "macro F1")], "undefined")


def _weight_matrix(n_codes: int, weights: Weights) -> FloatArray:
    pos = np.arange(n_codes, dtype=np.float64)
    diff = pos[None, :] - pos[:, None]
    if weights is None:
        return np.ones((n_codes, n_codes)) - np.eye(n_codes)
    return np.abs(diff) if weights == "linear" else diff**2


def kappa_from(cm: IntArray, weights: Weights = None) -> BatchVal:
    """Cohen's κ (optionally linear/quadratic weighted) of square (R, codes, codes) confusion matrices."""
    c = cm.astype(np.float64)
    n = cm.sum(axis=(1, 2))
    cols, rows = c.sum(axis=1), c.sum(axis=2)
    w = _weight_matrix(cm.shape[1], weights)
    with np.errstate(divide="ignore", invalid="ignore"):
        expected = cols[:, :, None] * rows[:, None, :] / n[:, None, None]
        value = 1.0 - (w * c).sum(axis=(1, 2)) / (w * expected).sum(axis=(1, 2))
    single: BoolArray = (cols + rows > 0).sum(axis=1) == 1
    rules: list[tuple[BoolArray, str | Notes]] = [
        _need_rule(n, 2, "κ"),
        (single, "both sides use the same single label: chance agreement is 1 and κ is undefined"),
    ]
    return batch_val(value, rules, "κ undefined (expected agreement is 1)")


def _distances(level: Level, values: FloatArray, n_v: FloatArray) -> FloatArray:
    """Krippendorff's δ² between the domain's values, (R or 1, V, V); ordinal depends on the value counts."""
    v = len(values)
    if level == "nominal":
        return (np.ones((v, v)) - np.eye(v))[None]
    if level == "interval":
        return ((values[:, None] - values[None, :]) ** 2)[None]
    if level == "ratio":
        total = values[:, None] + values[None, :]
        diff = values[:, None] - values[None, :]
        safe = np.where(total != 0, total, 1.0)
        return np.where(total != 0, diff / safe, 0.0)[None] ** 2
    idx = np.arange(v)
    lo, hi = np.minimum(idx[:, None], idx[None, :]), np.maximum(idx[:, None], idx[None, :])
    cum = np.concatenate([np.zeros((n_v.shape[0], 1)), np.cumsum(n_v, axis=1)], axis=1)
    between = cum[:, hi + 1] - cum[:, lo]
    return np.asarray((between - (n_v[:, lo] + n_v[:, hi]) / 2.0) ** 2, dtype=np.float64)


def alpha_from_coincidences(
    o: FloatArray,
    level: Level,
    values: FloatArray,
    distinct: IntArray,
    n_domain: IntArray,
    max_values: int,
) -> BatchVal:
    """Krippendorff's α from (R, V, V) coincidence matrices over the domain `values`.

    `distinct`: how many different values were coded in each resample; `n_domain`: the size of the domain
    the data was checked against (over `max_values` the statistic is skipped, as on the full data).
    """
    n_v = o.sum(axis=1)
    total = n_v.sum(axis=1)
    eye = np.eye(len(values))
    d = _distances(level, values, n_v)
    with np.errstate(divide="ignore", invalid="ignore"):
        e = (n_v[:, :, None] * n_v[:, None, :] - n_v[:, :, None] * eye) / (total - 1.0)[:, None, None]
        value = 1.0 - (o * d).sum(axis=(1, 2)) / (e * d).sum(axis=(1, 2))
    too_many = n_domain > max_values
    rules: list[tuple[BoolArray, str | Notes]] = [
        (total == 0, "α needs at least one unit coded twice"),
        (distinct < 2, "every answer is the same value: α is undefined (no expected disagreement)"),
        (
            too_many,
            np.array(
                [f"skipped: {x} distinct values > alpha_max_values={max_values}" for x in n_domain[too_many]],
                dtype=object,
            ),
        ),
    ]
    return batch_val(value, rules, "α undefined (no expected disagreement)")


def coincidences(data: FloatArray, values: FloatArray) -> FloatArray:
    """Krippendorff's coincidence matrix (V × V) of a coders × units matrix (NaN = not coded)."""
    counts = (data.T[:, :, None] == values[None, None, :]).sum(axis=1).astype(np.float64)
    coded = counts.sum(axis=1)
    pairable = coded >= 2
    counts, coded = counts[pairable], coded[pairable]
    scaled = counts / (coded - 1.0)[:, None]
    return np.asarray(scaled.T @ counts - np.diag(scaled.sum(axis=0)), dtype=np.float64)


def _square(cm: IntArray) -> IntArray:
    """(R, a, b) → (R, s, s), s = max(a, b), padded with zeros."""
    r, a, b = cm.shape
    s = max(a, b)
    out = np.zeros((r, s, s), dtype=np.int64)
    out[:, :a, :b] = cm
    return out


def _distinct(cm: IntArray) -> IntArray:
    """How many codes either side used, per square confusion matrix."""
    return np.asarray((cm.sum(axis=1) + cm.sum(axis=2) > 0).sum(axis=1), dtype=np.int64)


def _confusion_of(h: IntArray, j: IntArray, rows: int, cols: int) -> IntArray:
    """One (1, rows, cols) confusion matrix: human codes 0..rows-1 × judge codes 0..cols-1."""
    return tally(h * cols + j, rows * cols).reshape(1, rows, cols)


def _codes(x: IntArray) -> int:
    return int(x.max(initial=-1)) + 1


def accuracy(h: IntArray, j: IntArray) -> Val:
    return at(accuracy_from(_confusion_of(h, j, _codes(h), max(_codes(h), _codes(j)))))


def balanced_accuracy(h: IntArray, j: IntArray) -> Val:
    """Mean recall over the labels people used (sklearn's definition)."""
    return at(balanced_accuracy_from(_confusion_of(h, j, _codes(h), max(_codes(h), _codes(j)))))


def macro_f1(h: IntArray, j: IntArray, k: int) -> Val:
    """Macro F1 over the spec's labels 0..k-1 (a label with no support and no prediction scores 0)."""
    return at(macro_f1_from(_confusion_of(h, j, k, max(k, _codes(j))), k))


def cohen_kappa(h: IntArray, j: IntArray, n_codes: int, weights: Weights = None) -> Val:
    """Cohen's κ (optionally linear/quadratic weighted) over codes 0..n_codes-1."""
    return at(kappa_from(tally(h * n_codes + j, n_codes * n_codes).reshape(1, n_codes, n_codes), weights))


def alpha(data: FloatArray, level: Level, domain: Sequence[float] | None, max_values: int) -> Val:
    """Krippendorff's α on a coders × units matrix (NaN = not coded).

    Skipped above `max_values` distinct values (the coincidence matrix is values²).
    """
    coded = data[~np.isnan(data)]
    pairable = int(np.sum(np.sum(~np.isnan(data), axis=0) >= 2))
    if pairable < 1:
        return None, "α needs at least one unit coded twice"
    values = np.unique(coded) if domain is None else np.asarray(domain, dtype=float)
    distinct = len(np.unique(coded))
    if distinct < 2:
        return None, "every answer is the same value: α is undefined (no expected disagreement)"
    if len(values) > max_values:
        return None, f"skipped: {len(values)} distinct values > alpha_max_values={max_values}"
    o = coincidences(data, values)[None]
    one = np.array([1], dtype=np.int64)
    return at(alpha_from_coincidences(o, level, values, one * distinct, one * len(values), max_values))


def categorical_cells(
    h: IntArray, j_nom: IntArray, j_ord: IntArray, invalid: BoolArray, k: int
) -> tuple[tuple[IntArray, int], tuple[IntArray, int]]:
    """Each item's cell in the two tallies the categorical statistics need, with the tallies' sizes.

    Nominal: (invalid, human, judge code 0..k with k = invalid); ordinal: (invalid, human, judge position).
    """
    inv = invalid.astype(np.int64)
    return ((inv * k + h) * (k + 1) + j_nom, 2 * k * (k + 1)), ((inv * k + h) * k + j_ord, 2 * k * k)


def categorical_from_tallies(
    nom: IntArray,
    ord_: IntArray | None,
    k: int,
    ordered: bool,
    max_values: int,
    scores: FloatArray | None = None,
    invalid_code: bool = True,
) -> dict[str, BatchVal]:
    """The headline categorical statistics of R resamples from their tallies (see `categorical_cells`);
    `ord_` is needed for ordered scales. `invalid_code` False: invalid answers were already turned into
    labels, so no extra nominal category exists (signed bias still uses valid answers only)."""
    r = nom.shape[0]
    t = nom.reshape(r, 2, k, k + 1)
    cm = t.sum(axis=1)
    n_codes = k + ((t[:, 1].sum(axis=(1, 2)) > 0) & invalid_code).astype(np.int64)
    sq = _square(cm)
    out: dict[str, BatchVal] = {
        "accuracy": accuracy_from(cm),
        "balanced_accuracy": balanced_accuracy_from(cm),
        "macro_f1": macro_f1_from(cm, k),
        "cohen_kappa": kappa_from(sq),
    }
    acc, acc_notes = out["accuracy"]
    out["disagreement_rate"] = 1.0 - acc, acc_notes
    o = (sq + sq.transpose(0, 2, 1)).astype(np.float64)
    codes = np.arange(k + 1, dtype=np.float64)
    out["alpha_nominal"] = alpha_from_coincidences(o, "nominal", codes, _distinct(sq), n_codes, max_values)
    if not ordered:
        return out
    assert ord_ is not None
    to = ord_.reshape(r, 2, k, k)
    cmo = to.sum(axis=1)
    out["linear_kappa"] = kappa_from(cmo, "linear")
    out["quadratic_kappa"] = kappa_from(cmo, "quadratic")
    oo = (cmo + cmo.transpose(0, 2, 1)).astype(np.float64)
    domain = np.full(r, k, dtype=np.int64)
    positions = np.arange(k, dtype=np.float64)
    out["alpha_ordinal"] = alpha_from_coincidences(oo, "ordinal", positions, _distinct(cmo), domain, max_values)
    valid = to[:, 0]
    n_valid = valid.sum(axis=(1, 2))
    steps = np.arange(k)[None, :] - np.arange(k)[:, None]  # judge position minus human position
    rules = [(n_valid == 0, "no valid judge answers")]
    with np.errstate(divide="ignore", invalid="ignore"):
        out["judge_above_rate"] = batch_val((valid * (steps > 0)).sum(axis=(1, 2)) / n_valid, rules, "undefined")
        out["judge_below_rate"] = batch_val((valid * (steps < 0)).sum(axis=(1, 2)) / n_valid, rules, "undefined")
        out["mean_signed_steps"] = batch_val((valid * steps).sum(axis=(1, 2)) / n_valid, rules, "undefined")
        if scores is not None:
            diff = scores[None, :] - scores[:, None]
            out["mean_signed_score"] = batch_val((valid * diff).sum(axis=(1, 2)) / n_valid, rules, "undefined")
    return out


def categorical_metrics(
    h: IntArray,
    j_nom: IntArray,
    j_ord: IntArray,
    invalid: BoolArray,
    k: int,
    ordered: bool,
    max_values: int,
    scores: FloatArray | None = None,
    invalid_code: bool = True,
) -> dict[str, Val]:
    """The headline categorical statistics (the ones that get bootstrap CIs).

    `scores` (one number per label code) adds the judge's mean signed score difference for ordered scales;
    `invalid_code` as in `categorical_from_tallies`.
    """
    (nom, n_nom), (ordc, n_ord) = categorical_cells(h, j_nom, j_ord, invalid, k)
    tallies = tally(nom, n_nom), tally(ordc, n_ord)
    batch = categorical_from_tallies(*tallies, k, ordered, max_values, scores, invalid_code)
    return {name: at(bv) for name, bv in batch.items()}


def positive_label_metrics(h: IntArray, j: IntArray, pos: int) -> dict[str, Val]:
    """Precision, recall and F1 of one label against the rest (binary P/R/F1 with `pos` as positive).

    Undefined (None) rather than sklearn's 0 when a ratio has nothing to divide: precision when the judge
    never says `pos`, recall when people never do, F1 when neither does.
    """
    if (note := need(len(h), 1, "precision/recall")) is not None:
        return {"precision": (None, note), "recall": (None, note), "f1": (None, note)}
    one_vs_rest = _confusion_of((h == pos).astype(np.int64), (j == pos).astype(np.int64), 2, 2)
    p, r, f, _ = per_label_from(one_vs_rest, 2, math.nan)
    return {
        "precision": _finite(p[0, 1], "the judge never gives the positive label: precision undefined"),
        "recall": _finite(r[0, 1], "people never give the positive label: recall undefined"),
        "f1": _finite(f[0, 1], "neither side gives the positive label: F1 undefined"),
    }


def _score_curve(y: BoolArray, s: FloatArray) -> tuple[FloatArray, FloatArray]:
    """(true positives, false positives) when the items scoring at least each distinct score are called
    positive, highest score first (scikit-learn's confusion_matrix_at_thresholds)."""
    order = np.argsort(-s, kind="stable")
    s, truth = s[order], y[order].astype(np.float64)
    ends = np.concatenate([np.flatnonzero(np.diff(s)), [len(s) - 1]])
    tps = np.cumsum(truth)[ends]
    return tps, 1 + ends.astype(np.float64) - tps


def roc_auc(y: BoolArray, s: FloatArray) -> float:
    """Area under the ROC curve (trapezoids over its corners, as scikit-learn's roc_auc_score); both classes
    must be present."""
    tps, fps = _score_curve(y, s)
    if len(fps) > 2:  # collinear points dropped, as roc_curve(drop_intermediate=True)
        keep = np.concatenate([[True], np.logical_or(np.diff(fps, 2), np.diff(tps, 2)), [True]])
        tps, fps = tps[keep], fps[keep]
    fpr = np.concatenate([[0.0], fps]) / fps[-1]
    tpr = np.concatenate([[0.0], tps]) / tps[-1]
    return float(np.add.reduce(np.diff(fpr) * (tpr[1:] + tpr[:-1]) / 2.0))


def average_precision(y: BoolArray, s: FloatArray) -> float:
    """Average precision: precision at each distinct score weighted by the recall it adds (scikit-learn's
    average_precision_score); some item must be positive."""
    tps, fps = _score_curve(y, s)
    called = tps + fps
    precision = np.concatenate([np.where(called != 0, tps / np.where(called != 0, called, 1.0), 0.0)[::-1], [1.0]])
    recall = np.concatenate([(tps / tps[-1])[::-1], [0.0]])
    return float(max(0.0, -np.sum(np.diff(recall) * precision[:-1])))


def score_metrics(positive: BoolArray, score: FloatArray) -> dict[str, Val]:
    """ROC-AUC and PR-AUC (sklearn's average precision) of the judge's raw score for the positive label.

    Items without a score are left out (the caller counts them).
    """
    has = np.isfinite(score)
    y, s = positive[has], score[has]
    if (note := need(len(y), 2, "AUC")) is not None:
        return {"roc_auc": (None, note), "pr_auc": (None, note)}
    if bool(y.all()) or not bool(y.any()):
        why = "people use only one of the two classes: AUC undefined"
        out: dict[str, Val] = {"roc_auc": (None, why)}
        out["pr_auc"] = (None, "no positive item: average precision undefined") if not y.any() else (1.0, None)
        return out
    return {
        "roc_auc": _finite(roc_auc(y, s), "ROC-AUC undefined"),
        "pr_auc": _finite(average_precision(y, s), "average precision undefined"),
    }


def binarise(score: FloatArray, threshold: float, rule: str) -> BoolArray:
    """Positive when score > T (`gt`) or score ≥ T (`ge`)."""
    return np.asarray(score > threshold if rule == "gt" else score >= threshold, dtype=np.bool_)


def _confusions_at(positive: BoolArray, score: FloatArray, grid: FloatArray, rule: str) -> IntArray:
    """(thresholds, truth, call) confusion matrices of `binarise` at each threshold of `grid` (code 1: positive)."""
    side: Literal["left", "right"] = "right" if rule == "gt" else "left"

    def called(scores: FloatArray) -> IntArray:  # how many of `scores` pass each threshold
        return np.asarray(len(scores) - np.searchsorted(np.sort(scores), grid, side=side), dtype=np.int64)

    tp, fp = called(score[positive]), called(score[~positive])
    fn, tn = int(positive.sum()) - tp, int((~positive).sum()) - fp
    return np.stack([np.stack([tn, fp], axis=1), np.stack([fn, tp], axis=1)], axis=1)


def choose_threshold(positive: BoolArray, score: FloatArray, rule: str, criterion: str) -> tuple[float, float, int]:
    """The threshold maximising `criterion` on these items: (threshold, criterion value, grid size).

    The grid is the distinct observed scores in ascending order; ties go to the first maximum, i.e. the
    lowest threshold. Youden's J (sensitivity + specificity − 1) equals 2 × balanced accuracy − 1 on two
    classes, so both criteria choose the same threshold; both are offered because papers name either.
    People must use both labels on these items (the caller checks).
    """
    grid = np.unique(score[np.isfinite(score)])
    cm = _confusions_at(positive, score, grid, rule)
    _, recall, f1, _ = per_label_from(cm, 2, 0.0)
    if criterion == "max-f1":
        values = f1[:, 1]
    elif criterion == "max-balanced-accuracy":
        values = balanced_accuracy_from(cm)[0]
    else:
        values = recall[:, 1] + recall[:, 0] - 1.0
    best = int(np.argmax(values))  # first maximum = lowest threshold
    return float(grid[best]), float(values[best]), len(grid)


def classification_report(h: IntArray, j: IntArray, labels: list[str]) -> dict[str, Any]:
    """scikit-learn's classification report as a dict (output_dict=True, zero_division=0), over the spec's
    labels in order: each label's precision, recall, f1-score and support, then their "macro avg" (mean) and
    "weighted avg" (weighted by support)."""
    k = len(labels)
    p, r, f, support = (a[0] for a in per_label_from(_confusion_of(h, j, k, max(k, _codes(j))), k, 0.0))
    names = ("precision", "recall", "f1-score")
    report: dict[str, Any] = {
        lab: {**{name: float(a[i]) for name, a in zip(names, (p, r, f), strict=True)}, "support": float(support[i])}
        for i, lab in enumerate(labels)
    }
    total = float(np.sum(support))
    for avg, weights in (("macro avg", None), ("weighted avg", support)):
        figures = {name: float(np.average(a, weights=weights)) for name, a in zip(names, (p, r, f), strict=True)}
        report[avg] = {**figures, "support": total}
    return report


def confusion(h: IntArray, j: IntArray, n_codes: int) -> IntArray:
    """Confusion counts, rows human codes 0..n_codes-1, columns judge codes 0..n_codes-1."""
    return np.asarray(_confusion_of(h, j, n_codes, n_codes)[0], dtype=np.int64)


def corrected_prevalence(
    q: FloatArray, cm: IntArray, labels: Sequence[str] | None = None
) -> tuple[FloatArray | None, str | None]:
    """Label prevalence corrected for the judge's error rates.

    q: the judge's observed label shares; cm: confusion counts (human rows × judge cols, valid pairs); labels:
    the labels' names, for the note (people read names, not codes).
    Two labels: Rogan–Gladen π₁ = (q₁ + spec − 1)/(sens + spec − 1), clipped to [0, 1].
    More labels: least-squares solution of Mᵀπ = q with M = P(judge | human), negatives clipped to 0 and
    renormalised to sum 1. None when some label has no human support or the judge is no better than chance.
    """
    k = len(q)
    support = cm.sum(axis=1)
    if np.any(support == 0):
        missing = [repr(labels[i]) if labels is not None else str(i) for i in range(k) if support[i] == 0]
        return None, f"no human-labelled items for {', '.join(missing)}: error rates unknown"
    m = cm / support[:, None]
    notes: list[str] = []
    if k == 2:
        sens, spec = float(m[1, 1]), float(m[0, 0])
        youden = sens + spec - 1.0
        if youden <= 0:
            return None, "judge no better than chance (sensitivity + specificity ≤ 1): correction undefined"
        p1 = (float(q[1]) + spec - 1.0) / youden
        if p1 < 0 or p1 > 1:
            notes.append(f"Rogan–Gladen gave {p1:.4f}; clipped to [0, 1]")
        p1 = min(1.0, max(0.0, p1))
        return np.array([1.0 - p1, p1]), "; ".join(notes) or None
    if np.linalg.matrix_rank(m) < k:
        return None, "P(judge | human) is singular: the judge confuses labels too much to invert"
    pi, *_ = np.linalg.lstsq(m.T, q, rcond=None)
    if np.any(pi < 0):
        notes.append("negative shares clipped to 0 and renormalised")
    pi = np.clip(pi, 0.0, None)
    total = float(pi.sum())
    if total <= 0:
        return None, "corrected shares are all ≤ 0"
    return pi / total, "; ".join(notes) or None


# ----------------------------------------------------------------------------------------------- value


def describe(x: FloatArray) -> dict[str, float | None]:
    """count/mean/median/std (sample, ddof=1)/min/max; None where undefined."""
    n = len(x)
    return {
        "count": float(n),
        "mean": float(np.mean(x)) if n else None,
        "median": float(np.median(x)) if n else None,
        "std": float(np.std(x, ddof=1)) if n >= 2 else None,
        "min": float(np.min(x)) if n else None,
        "max": float(np.max(x)) if n else None,
    }


def _correlation_rules(
    n: IntArray, x_const: BoolArray, y_const: BoolArray, kind: str
) -> list[tuple[BoolArray, str | Notes]]:
    return [
        _need_rule(n, 2, kind),
        (x_const, "judge scores are constant: correlation undefined"),
        (y_const, "human scores are constant: correlation undefined"),
    ]


MOMENT_METRICS = ("mae", "rmse", "mean_signed_error", "exact_agreement", "within_1", "pearson")
"""The value-scale statistics computed from sums over the items (`value_features`)."""


def value_features(h: FloatArray, j: FloatArray) -> FloatArray:
    """Per-item terms whose sums give MOMENT_METRICS: an (items × 11) matrix.

    Columns: 1, j−h, |j−h|, (j−h)², j = h, |j−h| ≤ 1, x, y, x², y², xy with x the judge and y the human
    score, both shifted by their means over all the items given (so that sums of squares do not cancel).
    """
    d = j - h
    x = j - (float(np.mean(j)) if len(j) else 0.0)
    y = h - (float(np.mean(h)) if len(h) else 0.0)
    cols = [np.ones_like(d), d, np.abs(d), d * d, d == 0, np.abs(d) <= 1.0, x, y, x * x, y * y, x * y]
    return np.column_stack(cols).astype(np.float64) if len(d) else np.zeros((0, len(cols)))


def moment_metrics(sums: FloatArray, x_const: BoolArray, y_const: BoolArray) -> dict[str, BatchVal]:
    """MOMENT_METRICS of R resamples from their column sums of `value_features` (R × 11), and whether
    the judge's (x) or the human's (y) scores are constant in each resample."""
    n = sums[:, 0]
    count = np.rint(n).astype(np.int64)
    empty = [(count == 0, "no items to compare")]
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = sums / n[:, None]
        sx, sy, sxx, syy, sxy = (sums[:, c] for c in range(6, 11))
        cxx, cyy, cxy = sxx - sx * sx / n, syy - sy * sy / n, sxy - sx * sy / n
        r = np.clip(cxy / np.sqrt(cxx * cyy), -1.0, 1.0)
    return {
        "mae": batch_val(mean[:, 2], empty, "undefined"),
        "rmse": batch_val(np.sqrt(mean[:, 3]), empty, "undefined"),
        "mean_signed_error": batch_val(mean[:, 1], empty, "undefined"),
        "exact_agreement": batch_val(mean[:, 4], empty, "undefined"),
        "within_1": batch_val(mean[:, 5], empty, "undefined"),
        "pearson": batch_val(r, _correlation_rules(count, x_const, y_const, "pearson"), "pearson undefined"),
    }


def _moments_of(h: FloatArray, j: FloatArray) -> dict[str, BatchVal]:
    const = np.array([len(h) > 0 and bool(np.all(j == j[0]))]), np.array([len(h) > 0 and bool(np.all(h == h[0]))])
    return moment_metrics(value_features(h, j).sum(axis=0)[None], *const)


def rankdata(x: FloatArray) -> FloatArray:
    """Ranks 1..n, tied values sharing the mean of their ranks (scipy.stats.rankdata's "average")."""
    order = np.argsort(x, kind="stable")
    xs = x[order]
    starts = np.flatnonzero(np.concatenate([[True], xs[1:] != xs[:-1]]))
    counts = np.diff(np.concatenate([starts, [len(x)]]))
    out = np.empty(len(x), dtype=np.float64)
    out[order] = np.repeat(starts + 1 + (counts - 1) / 2.0, counts)
    return out


def spearman(x: FloatArray, y: FloatArray) -> float:
    """Spearman's ρ: Pearson's correlation of the average ranks (as scipy.stats.spearmanr computes it)."""
    ranked = np.column_stack([rankdata(x), rankdata(y)])
    matrix: FloatArray = np.asarray(np.corrcoef(ranked, rowvar=False), dtype=np.float64)
    return float(matrix[1, 0])


def _inversions(v: IntArray) -> int:
    """Pairs i < j with v[i] > v[j]: a bottom-up merge sort whose merges count, for each element of a right
    run, the larger elements of its left run (searchsorted on keys offset by block)."""
    n = len(v)
    vals = v.astype(np.int64)
    big = int(vals.max(initial=0)) + 1
    pos = np.arange(n, dtype=np.int64)
    count, width = 0, 1
    while width < n:
        block = pos // (2 * width)
        right = (pos // width) % 2 == 1
        left_keys = block[~right] * big + vals[~right]  # sorted: each run is, and blocks ascend
        base = block[right] * big
        ends = np.searchsorted(left_keys, base + big, side="left")
        larger = np.searchsorted(left_keys, base + vals[right], side="right")
        count += int((ends - larger).sum())
        vals = np.sort(block * big + vals) - block * big  # runs of 2 × width, merged
        width *= 2
    return count


def _discordant(xd: IntArray, yd: IntArray) -> int:
    """Pairs with x_i < x_j and y_i > y_j, of dense ranks 1..m in ascending x (y ascending within a tied x).
    Few distinct values (a rating scale): from their contingency table — each cell times the cells above-left
    of it, by cumulative sums; else by merge sort (:func:`_inversions`). Both count exactly."""
    mx, my = int(xd[-1]), int(yd.max(initial=0))
    if mx * my > 16 * len(xd):
        return _inversions(yd)
    table = np.bincount((xd - 1) * my + (yd - 1), minlength=mx * my).reshape(mx, my).astype(np.int64)
    higher_x_lower_y = np.cumsum(np.cumsum(table[::-1], axis=0)[::-1], axis=1)  # [a, b]: x ≥ a and y ≤ b
    return int((table[:-1, 1:] * higher_x_lower_y[1:, :-1]).sum())


def _tied_pairs(dense: IntArray) -> int:
    cnt = np.bincount(dense).astype(np.int64)
    return int((cnt * (cnt - 1) // 2).sum())


def kendall_tau_b(x: FloatArray, y: FloatArray) -> float:
    """Kendall's τ-b, as scipy.stats.kendalltau computes it (NaN when a side is constant): both sides as
    dense ranks, the discordant pairs counted exactly, ties on either side and on both subtracted."""
    size = len(x)
    perm = np.argsort(y)
    x, y = x[perm], y[perm]
    yd = np.concatenate([[True], y[1:] != y[:-1]]).cumsum(dtype=np.intp)
    perm = np.argsort(x, kind="mergesort")  # stable: y stays ascending within tied x
    x, yd = x[perm], yd[perm]
    xd = np.concatenate([[True], x[1:] != x[:-1]]).cumsum(dtype=np.intp)
    dis = _discordant(xd, yd)
    joint = np.concatenate([[True], (xd[1:] != xd[:-1]) | (yd[1:] != yd[:-1]), [True]])
    cnt = np.diff(np.flatnonzero(joint)).astype(np.int64)
    ntie = int((cnt * (cnt - 1) // 2).sum())
    xtie, ytie = _tied_pairs(xd), _tied_pairs(yd)
    tot = (size * (size - 1)) // 2
    if xtie == tot or ytie == tot:
        return math.nan
    con_minus_dis = tot - xtie - ytie + ntie - 2 * dis
    tau = con_minus_dis / np.sqrt(tot - xtie) / np.sqrt(tot - ytie)
    return float(np.minimum(1.0, max(-1.0, tau)))


def correlation(kind: str, x: FloatArray, y: FloatArray) -> Val:
    """Pearson (from moments, as in the bootstrap) / Spearman / Kendall τ-b; None for n < 2 or a constant
    side."""
    if kind == "pearson":
        return at(_moments_of(y, x)["pearson"])
    n = np.array([len(x)], dtype=np.int64)
    x_const = np.array([len(x) > 0 and bool(np.all(x == x[0]))])
    y_const = np.array([len(y) > 0 and bool(np.all(y == y[0]))])
    first = at(batch_val(np.zeros(1), _correlation_rules(n, x_const, y_const, kind), ""))
    if first[0] is None:
        return first
    if np.isnan(x).any() or np.isnan(y).any():
        return None, f"{kind} undefined"
    fn = {"spearman": spearman, "kendall": kendall_tau_b}[kind]
    return _finite(fn(x, y), f"{kind} undefined")


def grouped_correlation(kind: str, x: FloatArray, y: FloatArray, groups: IntArray) -> tuple[Val, int, int]:
    """Correlation within each group, averaged over the groups where it is defined.

    Returns (value, groups used, groups skipped because n < 2 or a side is constant).
    """
    vals: list[float] = []
    skipped = 0
    for g in np.unique(groups):
        sel = groups == g
        v, _ = correlation(kind, x[sel], y[sel])
        if v is None:
            skipped += 1
        else:
            vals.append(v)
    if not vals:
        return (None, f"no group has a defined {kind} correlation ({skipped} skipped)"), 0, skipped
    return (float(np.mean(vals)), None), len(vals), skipped


def integer_codes(x: FloatArray) -> bool:
    """True when every value is a whole number (weighted κ needs categories)."""
    return bool(np.all(np.isfinite(x)) and np.all(x == np.round(x)))


def value_kappa_codes(h: FloatArray, j: FloatArray, domain: list[float] | None) -> tuple[IntArray, IntArray, int] | str:
    """Both sides as category codes for weighted κ (the domain's, else the values seen), or why not."""
    if not (integer_codes(h) and integer_codes(j)):
        return "weighted κ needs whole-number scores on both sides"
    cats = np.asarray(domain, dtype=np.float64) if domain is not None else np.union1d(h, j)
    order = np.argsort(cats, kind="stable")
    ranked = cats[order]

    def codes(x: FloatArray) -> IntArray | None:  # each value's position in `cats`; None if one is not there
        at = np.minimum(np.searchsorted(ranked, x), max(len(ranked) - 1, 0))
        if len(x) and (not len(ranked) or not np.array_equal(ranked[at], x)):
            return None
        return np.asarray(order[at], dtype=np.int64)

    hc, jc = codes(h), codes(j)
    if hc is None or jc is None:
        return "values outside the scale's min..max"
    return hc, jc, len(cats)


VALUE_METRICS = (
    "mae",
    "rmse",
    "mean_signed_error",
    "exact_agreement",
    "within_1",
    "pearson",
    "spearman",
    "kendall",
    "linear_kappa",
    "quadratic_kappa",
    "alpha_interval",
    "alpha_ordinal",
)


def value_metrics(
    h: FloatArray,
    j: FloatArray,
    groups: IntArray | None,
    protocol: str,
    domain: list[float] | None,
    max_values: int,
    skip: Collection[str] = (),
) -> dict[str, Val]:
    """The headline value-scale statistics (the ones that get bootstrap CIs), but those in `skip` (which
    the bootstrap computes for many resamples at once)."""
    n = len(h)
    if n == 0:
        return {name: (None, "no items to compare") for name in VALUE_METRICS if name not in skip}
    out: dict[str, Val] = {}
    grouped = protocol == "per-group" and groups is not None
    if any(name not in skip for name in MOMENT_METRICS):
        moments = _moments_of(h, j)
        for name in MOMENT_METRICS[:-1]:
            out[name] = at(moments[name])
        if not grouped:
            out["pearson"] = at(moments["pearson"])
    for kind in ("pearson", "spearman", "kendall"):
        if kind in skip or (kind in out):
            continue
        if grouped:
            assert groups is not None
            out[kind] = grouped_correlation(kind, j, h, groups)[0]
        else:
            out[kind] = correlation(kind, j, h)
    if "linear_kappa" not in skip or "quadratic_kappa" not in skip:
        codes = value_kappa_codes(h, j, domain)
        if isinstance(codes, str):
            out["linear_kappa"] = out["quadratic_kappa"] = (None, codes)
        else:
            hc, jc, n_cats = codes
            out["linear_kappa"] = cohen_kappa(hc, jc, n_cats, "linear")
            out["quadratic_kappa"] = cohen_kappa(hc, jc, n_cats, "quadratic")
    data = np.vstack([h, j])
    if "alpha_interval" not in skip:
        out["alpha_interval"] = alpha(data, "interval", None, max_values)
    if "alpha_ordinal" not in skip:
        out["alpha_ordinal"] = alpha(data, "ordinal", None, max_values)
    return {name: out[name] for name in VALUE_METRICS if name in out and name not in skip}


def pairwise(kind: str, a: FloatArray, b: FloatArray, n_codes: int | None) -> Val:
    """One pairwise agreement for the human ceiling: cohen_kappa / quadratic_kappa / pearson."""
    if kind == "pearson":
        return correlation("pearson", a, b)
    assert n_codes is not None
    weights: Weights = "quadratic" if kind == "quadratic_kappa" else None
    return cohen_kappa(a.astype(np.int64), b.astype(np.int64), n_codes, weights)
