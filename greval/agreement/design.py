"""Design-based agreement: figures measured on a non-random sample of labelled items, weighted back to the
population the sample was drawn from.

When people label an uncertainty-selected or stratified sample, the labelled items are not a simple random
sample: the judge's hardest items are over-represented, so plain agreement on them is biased (usually
towards worse agreement). ``greval annotate push`` stores each item's inclusion probability π and the
selection it came from; here every item counts with weight 1/π (Hájek: weighted sums divided by the sum of
weights), and the bootstrap resamples *within* each selection stratum, keeping strata that were taken whole
(every π = 1, e.g. the "uncertain" slice) fixed, since a census has no sampling error.

Figures are the plug-in estimates from the weighted confusion matrix: accuracy (a ratio of weighted
counts, exactly unbiased when the weights sum to the population size as they do for greval's selections),
Cohen's κ, balanced accuracy, macro F1 and each label's precision / recall / F1 (smooth functions of the
same matrix: consistent, with O(1/n) bias), and each label's share of the human labels (the population
prevalence). The bootstrap draws with replacement inside a stratum and
ignores the finite-population correction, so its intervals are slightly conservative when a stratum's
sample is a large share of it. ``tests/test_agreement.py`` checks bias and coverage by simulation.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, cast

import numpy as np
import numpy.typing as npt
from pydantic import BaseModel, Field

from greval.agreement import stats as st
from greval.agreement.bootstrap import Resampling, percentile_ci
from greval.agreement.models import DesignEstimate, DesignReport
from greval.agreement.prepare import label_text, numbers
from greval.dataset.frame import Frame

if TYPE_CHECKING:
    import pandas as pd

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


class DesignSample(BaseModel):
    """Labelled items with how they were selected: the inputs of a design-based estimate."""

    human: list[int] = Field(description="Human label codes 0..k-1.")
    judge: list[int] = Field(description="Judge label codes 0..k (k: an answer outside the labels).")
    probability: list[float] = Field(description="Each item's inclusion probability π (0 < π ≤ 1).")
    stratum: list[str] = Field(description="The selection each item came from (uncertain, control, stratum:X ...).")

    def arrays(self) -> tuple[IntArray, IntArray, FloatArray, IntArray]:
        n = len(self.human)
        if not (len(self.judge) == len(self.probability) == len(self.stratum) == n):
            raise ValueError("human, judge, probability and stratum must have one entry per item")
        p = np.asarray(self.probability, dtype=np.float64)
        if n and (not np.all(np.isfinite(p)) or p.min() <= 0 or p.max() > 1):
            raise ValueError("inclusion probabilities must lie in (0, 1]")
        _, strata = np.unique(np.asarray(self.stratum, dtype=object), return_inverse=True)
        return (
            np.asarray(self.human, dtype=np.int64),
            np.asarray(self.judge, dtype=np.int64),
            1.0 / p,
            strata.reshape(-1).astype(np.int64),
        )


def _confusions(human: IntArray, judge: IntArray, n_codes: int, counts: FloatArray) -> FloatArray:
    """(R, codes, codes) confusion matrices: item i adds counts[r, i] to cell (human_i, judge_i)."""
    cells = human * n_codes + judge
    onehot = np.zeros((len(cells), n_codes * n_codes), dtype=np.float64)
    onehot[np.arange(len(cells)), cells] = 1.0
    return np.asarray(counts @ onehot, dtype=np.float64).reshape(-1, n_codes, n_codes)


def _figures(cm: FloatArray, k: int, labels: Sequence[str]) -> dict[str, FloatArray]:
    """Accuracy, κ, balanced accuracy, macro F1, human-label shares and per-label precision / recall / F1 of
    each (weighted) confusion matrix (humans are the truth, as in scikit-learn's classification report);
    NaN where undefined.

    The stats functions are ratios of sums, so weighted counts may stand in for counts. As scikit-learn:
    balanced accuracy is the mean recall over the labels people used; macro F1 averages over the labels
    either side used, an undefined F1 (no true positive, nothing predicted) counting 0."""
    as_counts = cast(IntArray, cm)
    out = {"accuracy": st.accuracy_from(as_counts)[0], "kappa": st.kappa_from(as_counts)[0]}
    total = cm.sum(axis=(1, 2))
    support = cm.sum(axis=2)[:, :k]
    predicted = cm.sum(axis=1)[:, :k]
    tp = np.diagonal(cm, axis1=1, axis2=2)[:, :k]
    with np.errstate(divide="ignore", invalid="ignore"):
        precision = tp / predicted
        recall = tp / support
        f1 = 2 * tp / (support + predicted)
        used = (support + predicted) > 0
        # the mean over the labels people used; NaN for a resample with none (np.nanmean would warn there, and
        # the warning reached the quick start's output)
        seen = support > 0
        out["balanced_accuracy"] = np.where(seen, recall, 0.0).sum(axis=1) / seen.sum(axis=1)
        out["macro_f1"] = np.where(used, np.nan_to_num(f1), 0.0).sum(axis=1) / used.sum(axis=1)
        for i, label in enumerate(labels):
            out[f"prevalence[{label}]"] = support[:, i] / total
        for name, values in (("precision", precision), ("recall", recall), ("f1", f1)):
            for i, label in enumerate(labels):
                out[f"{name}[{label}]"] = values[:, i]
    return out


def stratified_counts(
    strata: IntArray, resamples: int, seed: int, census: npt.NDArray[np.bool_] | None = None
) -> FloatArray:
    """(R, items): how often each item is drawn when every stratum is resampled with replacement to its own
    size; items of census strata (``census[stratum]``) are kept once in every resample."""
    rng = np.random.default_rng(seed)
    n = len(strata)
    counts = np.zeros((resamples, n), dtype=np.float64)
    for s in np.unique(strata):
        members = np.flatnonzero(strata == s)
        if census is not None and census[s]:
            counts[:, members] = 1.0
            continue
        picks = rng.integers(0, len(members), size=(resamples, len(members)))
        offsets = (np.arange(resamples, dtype=np.int64) * len(members))[:, None]
        drawn = np.bincount((picks + offsets).reshape(-1), minlength=resamples * len(members))
        counts[:, members] = drawn.reshape(resamples, len(members))
    return counts


def design_estimates(
    sample: DesignSample,
    labels: Sequence[str],
    resampling: Resampling | None = None,
    domain: npt.NDArray[np.bool_] | None = None,
    *,
    resamples: int | None = None,
    seed: int | None = None,
) -> list[DesignEstimate]:
    """Accuracy, Cohen's κ and each label's prevalence among human labels, weighted by 1/π, beside the
    unweighted figures, with stratified-bootstrap percentile intervals of the weighted ones (``resampling``,
    or its keywords ``resamples``, ``seed``).

    ``domain``: the items of a subpopulation (a slice). Its figures use only its items, but the bootstrap
    resamples the whole sample's strata, so the number of the domain's items in a resample varies as it
    would in a new sample (resampling the domain's own items alone would fix that number, and a domain
    with few sampled items would get an interval of no width)."""
    boot = Resampling.of(resampling, resamples=resamples, seed=seed)
    resamples = boot.resamples
    human, judge, w, strata = sample.arrays()
    k = len(labels)
    n_codes = k + 1  # code k: a judge answer outside the labels
    inside = np.ones(len(human), dtype=np.bool_) if domain is None else np.asarray(domain, dtype=np.bool_)
    n = int(inside.sum())
    if n == 0:
        return [DesignEstimate(name=name, note="no labelled items") for name in _names(labels)]
    if human.max() >= k or judge.max() > k or min(human.min(), judge.min()) < 0:
        raise ValueError("label codes out of range")
    mask = inside.astype(np.float64)
    plain = _figures(_confusions(human, judge, n_codes, mask[None, :]), k, labels)
    weighted = _figures(_confusions(human, judge, n_codes, (w * mask)[None, :]), k, labels)
    census = np.array([np.all(w[strata == s] == 1.0) for s in range(int(strata.max()) + 1)])
    drawn: dict[str, FloatArray] = {}
    if resamples > 0:
        counts = stratified_counts(strata, resamples, boot.seed, census)
        drawn = _figures(_confusions(human, judge, n_codes, counts * (w * mask)[None, :]), k, labels)
    out = []
    for name in _names(labels):
        est = DesignEstimate(name=name, weighted=_finite(weighted[name][0]), unweighted=_finite(plain[name][0]))
        if n < 2 and name == "kappa":
            est.weighted = est.unweighted = None
            est.note = "κ needs at least 2 labelled items"
        elif name in drawn:
            vals = drawn[name][np.isfinite(drawn[name])]
            undefined = resamples - len(vals)
            if est.weighted is not None and len(vals) >= max(2, resamples // 2):
                est.ci_low, est.ci_high = percentile_ci(vals, boot.level)
                if undefined:
                    est.note = f"{undefined}/{resamples} resamples undefined, CI from the rest"
            elif est.weighted is not None:
                est.note = f"CI undefined: statistic undefined in {undefined}/{resamples} resamples"
        out.append(est)
    return out


def _names(labels: Sequence[str]) -> list[str]:
    per_label = [f"{name}[{label}]" for name in ("prevalence", "precision", "recall", "f1") for label in labels]
    return ["accuracy", "kappa", "balanced_accuracy", "macro_f1", *per_label]


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


REPORT_NAMES = {"kappa": "cohen_kappa"}
"""Design-weighted figures under the agreement report's metric names, where they differ (gate, review, slices)."""


def report_name(figure: str) -> str:
    """The agreement report's name for a design-weighted figure."""
    return REPORT_NAMES.get(figure, figure)


DESIGN_COLUMNS = ("probability", "stratum")
"""Frame columns that say how each labelled item was selected (``greval annotate push`` records them)."""


def design_report(
    frame: Frame,
    items: Sequence[str],
    human: IntArray | FloatArray,
    judge: IntArray | FloatArray,
    labels: Sequence[str] | None,
    resampling: Resampling,
    notes: Sequence[str] = (),
    domain: Collection[str] | None = None,
) -> DesignReport | None:
    """The design-weighted figures of a frame whose rows carry ``probability`` (and ``stratum``), for the
    compared ``items`` with their human / judge label codes (``labels`` given) or values (``labels`` None: a
    value scale); None when every item was taken with certainty (the plain figures are then the design's own),
    every item had the same probability (equal weights change nothing), or no item says how it was selected.
    ``notes``: what was assumed before (:func:`respondents`), shown with the figures. ``domain``: the items
    of a slice, estimated as a subpopulation of the whole sample (see :func:`design_estimates`). Only a frame
    that says how its items were selected gets here, so pandas is imported here, not for every frame."""
    if "probability" not in frame.columns or not len(items):
        return None
    import pandas as pd

    notes = list(notes)
    keys = [label_text(v, {}) for v in frame["item"]]
    strata_col = frame["stratum"] if "stratum" in frame.columns else ["sample"] * len(frame)
    per_row = pd.DataFrame({"item": keys, "probability": numbers(frame["probability"]), "stratum": strata_col})
    conflicting = per_row.dropna(subset=["probability"]).groupby("item")["probability"].nunique()
    if (conflicting > 1).any():
        notes.append(
            f"{int((conflicting > 1).sum())} item(s) were selected by several pushes with different probabilities: "
            "the first row's is used"
        )
    first = per_row.dropna(subset=["item"]).drop_duplicates("item").set_index("item").reindex(list(items))
    prob = first["probability"]
    unknown = prob.isna()
    if unknown.all():
        return None
    strata = first["stratum"].astype(object).where(first["stratum"].notna(), "(none)").astype(str)
    if unknown.any():
        notes.append(
            f"{int(unknown.sum())} labelled item(s) came from no recorded selection (e.g. imported labels): they "
            "count as a stratum of their own, as if taken with certainty (weight 1) - an assumption"
        )
        prob = prob.fillna(1.0)
        strata = strata.where(~unknown, "imported")
    if bool((prob >= 1.0).all()) or (not unknown.any() and prob.nunique() == 1):
        return None  # equal weights (a census, or one simple random sample): the plain figures are the design's
    counts = {str(k): int(v) for k, v in strata.value_counts().sort_index().items()}
    summary = (
        "the labelled items were not a simple random sample (selection strata: "
        + ", ".join(f"{k} {v}" for k, v in counts.items())
        + "): the figures above treat them as one; these weight each item by 1/π, its inverse inclusion "
        "probability, to estimate the figures over every judged item"
    )
    inside = None if domain is None else np.array([it in domain for it in items], dtype=np.bool_)
    if inside is not None:
        counts = {str(k): int(v) for k, v in strata[inside].value_counts().sort_index().items()}
    if labels is None:
        estimates = design_value_estimates(
            np.asarray(human, dtype=np.float64),
            np.asarray(judge, dtype=np.float64),
            prob.to_numpy(dtype=np.float64),
            [str(x) for x in strata],
            resampling,
            inside,
        )
    else:
        sample = DesignSample(
            human=[int(x) for x in human],
            judge=[int(x) for x in judge],
            probability=[float(x) for x in prob],
            stratum=[str(x) for x in strata],
        )
        estimates = design_estimates(sample, labels, resampling, inside)
    return DesignReport(
        summary=summary, estimates=estimates, strata=counts, resamples=resampling.resamples, notes=notes
    )


VALUE_FIGURES = ("mean_human", "mean_judge", "mean_error", "mae", "rmse", "exact", "within_1")
"""Design-weighted figures of a value scale: people's and the judge's mean score over every judged item, the
judge's signed and absolute error, and the share of exact / within-one agreement."""


def design_value_estimates(
    human: FloatArray,
    judge: FloatArray,
    probability: FloatArray,
    stratum: Sequence[str],
    resampling: Resampling | None = None,
    domain: npt.NDArray[np.bool_] | None = None,
) -> list[DesignEstimate]:
    """:data:`VALUE_FIGURES` weighted by 1/π (Hájek means), beside the unweighted ones, with stratified-bootstrap
    percentile intervals (census strata kept whole, and ``domain`` as in :func:`design_estimates`)."""
    boot = resampling or Resampling()
    resamples = boot.resamples
    inside = np.ones(len(human), dtype=np.bool_) if domain is None else np.asarray(domain, dtype=np.bool_)
    if not inside.any():
        return [DesignEstimate(name=name, note="no labelled items") for name in VALUE_FIGURES]
    mask = inside.astype(np.float64)
    w = 1.0 / probability
    _, codes = np.unique(np.asarray(stratum, dtype=object), return_inverse=True)
    strata = codes.reshape(-1).astype(np.int64)
    err = judge - human
    columns = np.stack([human, judge, err, np.abs(err), err**2, np.abs(err) < 0.5, np.abs(err) < 1.5]).T

    def figures(weights: FloatArray) -> FloatArray:
        """(R, figures) weighted means; RMSE is the root of the weighted mean square."""
        means = (weights @ columns) / weights.sum(axis=1, keepdims=True)
        means[:, 4] = np.sqrt(means[:, 4])
        return np.asarray(means, dtype=np.float64)

    plain = figures(mask[None, :])[0]
    weighted = figures((w * mask)[None, :])[0]
    drawn: FloatArray | None = None
    if resamples > 0:
        census = np.array([np.all(w[strata == s] == 1.0) for s in range(int(strata.max()) + 1)])
        with np.errstate(divide="ignore", invalid="ignore"):  # a resample may hold none of the domain
            drawn = figures(stratified_counts(strata, resamples, boot.seed, census) * (w * mask)[None, :])
    out = []
    for i, name in enumerate(VALUE_FIGURES):
        est = DesignEstimate(name=name, weighted=_finite(weighted[i]), unweighted=_finite(plain[i]))
        if drawn is not None:
            vals = drawn[:, i][np.isfinite(drawn[:, i])]
            if len(vals) >= max(2, resamples // 2):
                est.ci_low, est.ci_high = percentile_ci(vals, boot.level)
                if len(vals) < resamples:
                    est.note = f"{resamples - len(vals)}/{resamples} resamples undefined, CI from the rest"
            else:
                est.note = f"CI undefined: statistic undefined in {resamples - len(vals)}/{resamples} resamples"
        out.append(est)
    return out


def respondents(frame: Frame) -> tuple[Frame, list[str]]:
    """A frame whose ``selected`` column says how many units each row's stratum selected (labelled or not),
    with probabilities for the labelled units (:func:`for_respondents`) and without that column; the notes
    say what was assumed. Applied once to the whole frame, so slices weigh their items the same way."""
    if "selected" not in frame.columns:
        return frame, []
    table = frame.to_pandas()
    known = table.dropna(subset=["stratum", "selected"]).drop_duplicates("stratum")
    selected = {str(s): int(n) for s, n in zip(known["stratum"], known["selected"], strict=True)}
    probability = {str(s): float(p) for s, p in zip(known["stratum"], known["probability"], strict=True)}
    # Strata nobody has labelled yet have no row to carry their count: the store's frame lists them here.
    for stratum, (n, p) in frame.attrs.get(SELECTION_ATTR, {}).items():
        selected.setdefault(str(stratum), int(n))
        probability.setdefault(str(stratum), float(p))
    out, notes = for_respondents(table, selected, probability)
    return Frame.of(out).without("selected"), notes


SELECTION_ATTR = "selection"
"""``frame.attrs`` key: {stratum: (units selected, inclusion probability)} of every selection stratum."""


def for_respondents(
    frame: pd.DataFrame, selected: Mapping[str, int], probability: Mapping[str, float]
) -> tuple[pd.DataFrame, list[str]]:
    """Inclusion probabilities of the *labelled* items when people have labelled only part of a selection.

    ``selected``: units selected per stratum; ``probability``: their π per stratum. Within a stratum the
    labelled units stand for the unlabelled ones (π × labelled / selected): a missing-at-random assumption,
    sound when the order people label in does not depend on their answers, and stated in the notes. A stratum
    nobody has labelled yet cannot be represented: the notes say so.
    """
    if "stratum" not in frame.columns or "probability" not in frame.columns:
        return frame, []
    out = frame.copy()
    labelled = out.dropna(subset=["stratum"]).groupby("stratum")["item"].nunique()
    notes: list[str] = []
    missing = 0
    for stratum, n_sel in sorted(selected.items()):
        m = int(labelled.get(stratum, 0))
        missing += n_sel - m
        if m == 0:
            notes.append(
                f"stratum {stratum}: none of its {n_sel} selected items is labelled yet; the figures "
                "cannot cover the items it stands for"
            )
            continue
        rows = out["stratum"] == stratum
        out.loc[rows, "probability"] = probability[stratum] * m / n_sel
    if missing:
        notes.insert(
            0,
            f"{missing} selected item(s) have no human label yet: in each selection stratum the labelled items "
            "stand for the rest (π × labelled/selected), assuming the order of labelling is unrelated to the "
            "answers",
        )
    return out, notes
