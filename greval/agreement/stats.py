"""Pure agreement statistics on aligned numpy arrays (no pandas, no I/O).

Every function returns `Val = (value, note)`: a finite float, or None with a note saying why it is
undefined. The numbers come from scikit-learn, scipy and krippendorff; this module only decides when a
statistic is defined and which arrays it sees.

Categorical arrays are integer codes into the spec's label list (0..k-1). A judge answer kept "as wrong"
is code k in nominal statistics (a category nobody else uses, so it never matches), and is replaced by the
label farthest from the human's (lowest on ties) where a position is needed (weighted κ, ordinal α).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Sequence
from functools import partial
from typing import Any, Literal

import krippendorff
import numpy as np
import numpy.typing as npt
from scipy import stats as sps
from sklearn import metrics as skm

Val = tuple[float | None, str | None]
Level = Literal["nominal", "ordinal", "interval", "ratio"]
IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def _finite(value: Any, why: str) -> Val:
    """A library result as a float, or None with `why` when it is NaN/inf."""
    v = float(value)
    if math.isfinite(v):
        return v, None
    return None, why


def _quiet(fn: Callable[[], Any]) -> Any:
    """Run a library call with its degenerate-input warnings silenced: we report those via notes."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return fn()


def need(n: int, minimum: int, what: str) -> str | None:
    """The note for too few items, or None when there are enough."""
    if n < minimum:
        return f"{what} needs at least {minimum} item(s), got {n}"
    return None


# ----------------------------------------------------------------------------------------- categorical


def worst_case_codes(h: IntArray, k: int) -> IntArray:
    """For each human code, the label farthest from it (the lowest label on ties)."""
    return np.where(2 * h >= (k - 1), 0, k - 1).astype(np.int64)


def accuracy(h: IntArray, j: IntArray) -> Val:
    if (note := need(len(h), 1, "accuracy")) is not None:
        return None, note
    return float(skm.accuracy_score(h, j)), None


def balanced_accuracy(h: IntArray, j: IntArray) -> Val:
    """Mean recall over the labels people used (sklearn's definition)."""
    if (note := need(len(h), 1, "balanced accuracy")) is not None:
        return None, note
    return _finite(_quiet(lambda: skm.balanced_accuracy_score(h, j)), "undefined")


def macro_f1(h: IntArray, j: IntArray, k: int) -> Val:
    """Macro F1 over the spec's labels (a label with no support and no prediction scores 0)."""
    if (note := need(len(h), 1, "macro F1")) is not None:
        return None, note
    return float(_quiet(lambda: skm.f1_score(h, j, labels=list(range(k)), average="macro", zero_division=0))), None


def cohen_kappa(h: IntArray, j: IntArray, n_codes: int, weights: str | None = None) -> Val:
    """Cohen's κ (optionally linear/quadratic weighted) over codes 0..n_codes-1."""
    if (note := need(len(h), 2, "κ")) is not None:
        return None, note
    if len(np.unique(np.concatenate([h, j]))) == 1:
        return None, "both sides use the same single label: chance agreement is 1 and κ is undefined"
    value = _quiet(lambda: skm.cohen_kappa_score(h, j, labels=list(range(n_codes)), weights=weights))
    return _finite(value, "κ undefined (expected agreement is 1)")


def alpha(data: FloatArray, level: Level, domain: Sequence[float] | None, max_values: int) -> Val:
    """Krippendorff's α on a coders × units matrix (NaN = not coded).

    Skipped above `max_values` distinct values: krippendorff builds a units × values² coincidence tensor.
    """
    coded = data[~np.isnan(data)]
    pairable = int(np.sum(np.sum(~np.isnan(data), axis=0) >= 2))
    if pairable < 1:
        return None, "α needs at least one unit coded twice"
    values = np.unique(coded) if domain is None else np.asarray(domain, dtype=float)
    if len(np.unique(coded)) < 2:
        return None, "every answer is the same value: α is undefined (no expected disagreement)"
    if len(values) > max_values:
        return None, f"skipped: {len(values)} distinct values > alpha_max_values={max_values}"
    dom = None if domain is None else list(domain)
    value = _quiet(lambda: krippendorff.alpha(data, value_domain=dom, level_of_measurement=level))
    return _finite(value, "α undefined (no expected disagreement)")


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

    `scores` (one number per label code) adds the judge's mean signed score difference for ordered scales.
    `invalid_code` False: invalid answers were already turned into labels (`--invalid opposite`), so no
    extra nominal category exists; signed bias still uses valid answers only.
    """
    n_codes = k + 1 if invalid_code and bool(invalid.any()) else k
    out: dict[str, Val] = {
        "accuracy": accuracy(h, j_nom),
        "balanced_accuracy": balanced_accuracy(h, j_nom),
        "macro_f1": macro_f1(h, j_nom, k),
        "cohen_kappa": cohen_kappa(h, j_nom, n_codes),
    }
    acc = out["accuracy"][0]
    out["disagreement_rate"] = (None, out["accuracy"][1]) if acc is None else (1.0 - acc, None)
    out["alpha_nominal"] = alpha(np.vstack([h, j_nom]).astype(float), "nominal", list(range(n_codes)), max_values)
    if ordered:
        out["linear_kappa"] = cohen_kappa(h, j_ord, k, "linear")
        out["quadratic_kappa"] = cohen_kappa(h, j_ord, k, "quadratic")
        out["alpha_ordinal"] = alpha(np.vstack([h, j_ord]).astype(float), "ordinal", list(range(k)), max_values)
        valid = ~invalid
        hv, jv = h[valid], j_ord[valid]
        if len(hv) == 0:
            why = "no valid judge answers"
            out["judge_above_rate"] = out["judge_below_rate"] = out["mean_signed_steps"] = (None, why)
        else:
            out["judge_above_rate"] = float(np.mean(jv > hv)), None
            out["judge_below_rate"] = float(np.mean(jv < hv)), None
            out["mean_signed_steps"] = float(np.mean(jv - hv)), None
        if scores is not None:
            out["mean_signed_score"] = (
                (float(np.mean(scores[jv] - scores[hv])), None) if len(hv) else (None, "no valid judge answers")
            )
    return out


def positive_label_metrics(h: IntArray, j: IntArray, pos: int) -> dict[str, Val]:
    """Precision, recall and F1 of one label against the rest (binary P/R/F1 with `pos` as positive).

    Undefined (None) rather than sklearn's 0 when a ratio has nothing to divide: precision when the judge
    never says `pos`, recall when people never do, F1 when neither does.
    """
    if (note := need(len(h), 1, "precision/recall")) is not None:
        return {"precision": (None, note), "recall": (None, note), "f1": (None, note)}
    p, r, f, _ = _quiet(lambda: skm.precision_recall_fscore_support(h, j, labels=[pos], zero_division=np.nan))
    return {
        "precision": _finite(p[0], "the judge never gives the positive label: precision undefined"),
        "recall": _finite(r[0], "people never give the positive label: recall undefined"),
        "f1": _finite(f[0], "neither side gives the positive label: F1 undefined"),
    }


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
        "roc_auc": _finite(_quiet(lambda: skm.roc_auc_score(y, s)), "ROC-AUC undefined"),
        "pr_auc": _finite(_quiet(lambda: skm.average_precision_score(y, s)), "average precision undefined"),
    }


def binarise(score: FloatArray, threshold: float, rule: str) -> BoolArray:
    """Positive when score > T (`gt`) or score ≥ T (`ge`)."""
    return np.asarray(score > threshold if rule == "gt" else score >= threshold, dtype=np.bool_)


def choose_threshold(positive: BoolArray, score: FloatArray, rule: str, criterion: str) -> tuple[float, float, int]:
    """The threshold maximising `criterion` on these items: (threshold, criterion value, grid size).

    The grid is the distinct observed scores in ascending order; ties go to the first maximum, i.e. the
    lowest threshold. Youden's J (sensitivity + specificity − 1) equals 2 × balanced accuracy − 1 on two
    classes, so both criteria choose the same threshold; both are offered because papers name either.
    """
    grid = np.unique(score[np.isfinite(score)])
    values = []
    for t in grid:
        pred = binarise(score, float(t), rule)
        if criterion == "max-f1":
            v = skm.f1_score(positive, pred, zero_division=0)
        elif criterion == "max-balanced-accuracy":
            v = _quiet(partial(skm.balanced_accuracy_score, positive, pred))
        else:
            sens = skm.recall_score(positive, pred, zero_division=0)
            spec = skm.recall_score(~positive, ~pred, zero_division=0)
            v = sens + spec - 1.0
        values.append(float(v))
    best = int(np.argmax(values))  # first maximum = lowest threshold
    return float(grid[best]), values[best], len(grid)


def classification_report(h: IntArray, j: IntArray, labels: list[str]) -> dict[str, Any]:
    """sklearn's classification report as a dict, over the spec's labels in order."""
    return dict(
        _quiet(
            lambda: skm.classification_report(
                h, j, labels=list(range(len(labels))), target_names=labels, output_dict=True, zero_division=0
            )
        )
    )


def confusion(h: IntArray, j: IntArray, n_codes: int) -> IntArray:
    """Confusion counts, rows human codes 0..k-1, columns judge codes 0..n_codes-1."""
    cm = skm.confusion_matrix(h, j, labels=list(range(n_codes)))
    return np.asarray(cm, dtype=np.int64)


def corrected_prevalence(q: FloatArray, cm: IntArray) -> tuple[FloatArray | None, str | None]:
    """Label prevalence corrected for the judge's error rates.

    q: the judge's observed label shares; cm: confusion counts (human rows × judge cols, valid pairs).
    Two labels: Rogan–Gladen π₁ = (q₁ + spec − 1)/(sens + spec − 1), clipped to [0, 1].
    More labels: least-squares solution of Mᵀπ = q with M = P(judge | human), negatives clipped to 0 and
    renormalised to sum 1. None when some label has no human support or the judge is no better than chance.
    """
    k = len(q)
    support = cm.sum(axis=1)
    if np.any(support == 0):
        missing = [i for i in range(k) if support[i] == 0]
        return None, f"no human-labelled items for label code(s) {missing}: error rates unknown"
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


def correlation(kind: str, x: FloatArray, y: FloatArray) -> Val:
    """Pearson / Spearman / Kendall τ-b from scipy, None for n < 2 or a constant side."""
    if (note := need(len(x), 2, kind)) is not None:
        return None, note
    if np.all(x == x[0]):
        return None, "judge scores are constant: correlation undefined"
    if np.all(y == y[0]):
        return None, "human scores are constant: correlation undefined"
    fn = {"pearson": sps.pearsonr, "spearman": sps.spearmanr, "kendall": sps.kendalltau}[kind]
    return _finite(_quiet(lambda: fn(x, y)[0]), f"{kind} undefined")


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


def value_metrics(
    h: FloatArray,
    j: FloatArray,
    groups: IntArray | None,
    protocol: str,
    domain: list[float] | None,
    max_values: int,
) -> dict[str, Val]:
    """The headline value-scale statistics (the ones that get bootstrap CIs)."""
    n = len(h)
    out: dict[str, Val] = {}
    if n == 0:
        note = "no items to compare"
        for name in (
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
        ):
            out[name] = (None, note)
        return out
    out["mae"] = float(skm.mean_absolute_error(h, j)), None
    out["rmse"] = float(skm.root_mean_squared_error(h, j)), None
    out["mean_signed_error"] = float(np.mean(j - h)), None
    out["exact_agreement"] = float(np.mean(j == h)), None
    out["within_1"] = float(np.mean(np.abs(j - h) <= 1.0)), None
    for kind in ("pearson", "spearman", "kendall"):
        if protocol == "per-group" and groups is not None:
            out[kind] = grouped_correlation(kind, j, h, groups)[0]
        else:
            out[kind] = correlation(kind, j, h)
    if integer_codes(h) and integer_codes(j):
        cats = domain if domain is not None else sorted(set(h.tolist()) | set(j.tolist()))
        index = {c: i for i, c in enumerate(cats)}
        if all(v in index for v in h.tolist() + j.tolist()):
            hc = np.array([index[v] for v in h.tolist()], dtype=np.int64)
            jc = np.array([index[v] for v in j.tolist()], dtype=np.int64)
            out["linear_kappa"] = cohen_kappa(hc, jc, len(cats), "linear")
            out["quadratic_kappa"] = cohen_kappa(hc, jc, len(cats), "quadratic")
        else:
            out["linear_kappa"] = out["quadratic_kappa"] = (None, "values outside the scale's min..max")
    else:
        why = "weighted κ needs whole-number scores on both sides"
        out["linear_kappa"] = out["quadratic_kappa"] = (None, why)
    data = np.vstack([h, j])
    out["alpha_interval"] = alpha(data, "interval", None, max_values)
    out["alpha_ordinal"] = alpha(data, "ordinal", None, max_values)
    return out


def pairwise(kind: str, a: FloatArray, b: FloatArray, n_codes: int | None) -> Val:
    """One pairwise agreement for the human ceiling: cohen_kappa / quadratic_kappa / pearson."""
    if kind == "pearson":
        return correlation("pearson", a, b)
    assert n_codes is not None
    weights = "quadratic" if kind == "quadratic_kappa" else None
    return cohen_kappa(a.astype(np.int64), b.astype(np.int64), n_codes, weights)
