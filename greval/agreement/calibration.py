"""Calibration of the judge's confidence against human labels: among verdicts given with confidence ≈ 0.8,
do people agree with the judge 80 % of the time?

Definitions (docs/agreement.md, "Is the judge's confidence calibrated?"):

- One observation per (item, annotator) row that has a judge answer, a human answer and a confidence: an item
  three people labelled is three observations (each person is a separate check of the same verdict), and the
  bootstrap keeps an item's rows together. The row is *correct* when the judge's answer equals the human's, as
  canonical text after the label mapping (exact match, also on value scales: 4 vs 5 is wrong, like 1 vs 5). The
  invalid-answer policy does not apply: a row without a judge answer has no confidence to check and is counted
  as skipped; an answer that is not a label is simply wrong.
- Rows are weighted by 1/π when the frame carries ``probability`` (the inclusion probability ``greval annotate
  push`` stores), so an uncertain-first sample — which over-represents low-confidence verdicts — does not distort
  the overall figures; rows without a recorded π weigh 1 (as in agreement/design.py). Without the column every
  row weighs 1.
- Bins: ``bins`` equal-width bins of [0, 1], each [low, high) and the last closed at 1. Per bin: the summed
  weight, the weighted mean confidence and the weighted accuracy, with a Wilson score interval on the accuracy
  computed at Kish's effective sample size (Σw)²/Σw² (= the count without weights). Wilson rather than a
  bootstrap: bins are often small or all-correct, where Wilson stays inside [0, 1] and is not degenerate.
- ECE = Σ_b (W_b / W) · |acc_b − conf_b| (W_b: the bin's weight); MCE = max_b |acc_b − conf_b| over non-empty
  bins; Brier = Σ w (confidence − correct)² / Σ w (the judge's confidence read as the probability that its
  answer is right).
- CIs of ECE and Brier: percentile bootstrap resampling whole groups (the frame's ``group`` column, e.g. a
  record), else whole items (all annotators of an item together), else rows (bootstrap.py's Resampler; every
  resample's bin sums by one matrix product). It resamples clusters, not the selection strata of a weighted
  sample, so with weights the interval is approximate.
- The plug-in ECE is never negative and a perfectly calibrated judge still shows ECE > 0 from noise alone;
  ``ece_if_calibrated`` is the 95th percentile of the ECE simulated for a perfectly calibrated judge with the
  same confidences and weights (correct with probability = its confidence): an ECE below it is no evidence of
  miscalibration.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import NormalDist

import numpy as np
import numpy.typing as npt

from greval.agreement import bootstrap as bs
from greval.agreement.models import (
    GROUPS_ARE_RECORDS,
    AgreementOptions,
    CalibrationBin,
    CalibrationReport,
    Estimate,
)
from greval.agreement.prepare import CONFIDENCE_COLUMN, is_null, label_text, numbers
from greval.agreement.resampling import estimate
from greval.dataset.frame import Frame
from greval.errors import DataError, option

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def bin_index(confidence: FloatArray, bins: int) -> IntArray:
    """Each confidence's bin 0..bins-1: [k/bins, (k+1)/bins), the last closed at 1. A hair of slack keeps
    0.3 (3.0000000000000004 tenths) and 0.7 in the bins their decimals say."""
    return np.minimum(np.floor(confidence * bins + 1e-9), bins - 1).astype(np.int64)


def wilson(successes: float, n: float, level: float) -> tuple[float | None, float | None]:
    """Wilson score interval of a proportion successes / n (n may be an effective, non-integer size)."""
    if n <= 0:
        return None, None
    z = NormalDist().inv_cdf(1.0 - (1.0 - level) / 2.0)
    p = successes / n
    denom = 1.0 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * np.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return float(max(0.0, centre - half)), float(min(1.0, centre + half))


def _features(correct: FloatArray, confidence: FloatArray, weight: FloatArray, bins: int) -> FloatArray:
    """(rows, 3·bins + 1): per bin the row's weight, weight × confidence, weight × correct; then its
    weighted squared error (the Brier term). Column sums over any set of rows give every figure."""
    n = len(correct)
    b = bin_index(confidence, bins)
    out = np.zeros((n, 3 * bins + 1), dtype=np.float64)
    rows = np.arange(n)
    out[rows, b] = weight
    out[rows, bins + b] = weight * confidence
    out[rows, 2 * bins + b] = weight * correct
    out[:, 3 * bins] = weight * (confidence - correct) ** 2
    return out


def _ece_brier(sums: FloatArray, bins: int) -> tuple[FloatArray, FloatArray]:
    """(R,) ECE and Brier from (R, 3·bins + 1) column sums (NaN where a resample has no weight)."""
    w = sums[:, :bins]
    total = w.sum(axis=1)
    gap = np.abs(sums[:, 2 * bins : 3 * bins] - sums[:, bins : 2 * bins]).sum(axis=1)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(total > 0, gap / total, np.nan), np.where(total > 0, sums[:, 3 * bins] / total, np.nan)


def _null_ece(confidence: FloatArray, weight: FloatArray, bins: int, resampling: bs.Resampling) -> float | None:
    """95th percentile of the ECE of a perfectly calibrated judge (correct with probability = its confidence)
    with these confidences and weights (its own draws: the seed's successor)."""
    n, resamples = len(confidence), resampling.resamples
    if n == 0 or resamples <= 0:
        return None
    rng = np.random.default_rng(resampling.seed + 1)
    onehot = np.zeros((n, bins), dtype=np.float64)
    onehot[np.arange(n), bin_index(confidence, bins)] = 1.0
    w_bin = weight @ onehot
    conf_bin = (weight * confidence) @ onehot
    total = float(w_bin.sum())
    per_batch = max(1, bs.MAX_CELLS // n)
    values: list[FloatArray] = []
    done = 0
    while done < resamples:
        size = min(per_batch, resamples - done)
        hits = (rng.random((size, n)) < confidence[None, :]).astype(np.float64)
        acc_bin = (hits * weight[None, :]) @ onehot
        values.append(np.abs(acc_bin - conf_bin[None, :]).sum(axis=1) / total)
        done += size
    return float(np.quantile(np.concatenate(values), 0.95))


def calibration(
    correct: Sequence[bool] | BoolArray,
    confidence: Sequence[float] | FloatArray,
    weight: Sequence[float] | FloatArray | None = None,
    groups: Sequence[int] | IntArray | None = None,
    bins: int = 10,
    resampling: bs.Resampling | None = None,
    *,
    resamples: int | None = None,
    seed: int | None = None,
    skipped_without_confidence: int = 0,
    skipped_without_answer: int = 0,
    unit: str = "rows",
) -> CalibrationReport:
    """The calibration report of rows that each have a confidence in [0, 1] (see the module doc).

    ``groups``: the bootstrap's cluster of each row (None: rows are independent), named by ``unit``;
    ``resampling`` (or its keywords ``resamples``, ``seed``): the bootstrap of the ECE and Brier CIs, whose
    level is also the bins' Wilson intervals'. The ``skipped_*`` counts only reach the report's notes (the
    caller left those rows out)."""
    boot = bs.Resampling.of(resampling, resamples=resamples, seed=seed)
    y, c, w = _checked(correct, confidence, weight, groups, bins)
    n = len(y)
    notes = _skip_notes(skipped_without_confidence, skipped_without_answer)
    weighted = weight is not None and not bool(np.all(w == 1.0))
    feats = _features(y, c, w, bins)
    sums = feats.sum(axis=0)
    out_bins, gaps = _bins(sums, c, w, bins, boot.level)
    skipped = {"n_without_confidence": skipped_without_confidence, "n_without_answer": skipped_without_answer}
    if n == 0:
        empty = Estimate(value=None, n=0, note="no row has a judge answer, a human answer and a confidence")
        return CalibrationReport(
            n=0, **skipped, weighted=weighted, bins=out_bins, ece=empty, mce=empty, brier=empty, notes=notes
        )
    ece_point, brier_point = (float(v[0]) for v in _ece_brier(sums[None, :], bins))
    cis: dict[str, bs.CI] = {}
    if boot.resamples > 0:

        def stat(batch: bs.Batch) -> dict[str, FloatArray]:
            ece, brier = _ece_brier(batch.sums(feats), bins)
            return {"ece": ece, "brier": brier}

        cis = boot.cis(n, None if groups is None else np.asarray(groups, dtype=np.int64), batched=stat)
    if weighted:
        notes.append(
            "rows weighted by 1/π (their inclusion probability), so a non-random sample (e.g. uncertain first) "
            "does not over-represent low-confidence verdicts; the bootstrap ignores the selection strata"
        )
    total = float(sums[:bins].sum())
    return CalibrationReport(
        n=n,
        **skipped,
        weighted=weighted,
        accuracy=float(sums[2 * bins : 3 * bins].sum() / total),
        mean_confidence=float(sums[bins : 2 * bins].sum() / total),
        bins=out_bins,
        ece=estimate((ece_point, None), n, cis.get("ece")),
        mce=Estimate(value=max(gaps), n=n),
        brier=estimate((brier_point, None), n, cis.get("brier")),
        ece_if_calibrated=_null_ece(c, w, bins, boot),
        resample_unit=unit if boot.resamples > 0 else None,
        notes=notes,
    )


def _checked(
    correct: Sequence[bool] | BoolArray,
    confidence: Sequence[float] | FloatArray,
    weight: Sequence[float] | FloatArray | None,
    groups: Sequence[int] | IntArray | None,
    bins: int,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """(correct, confidence, weight) as float arrays, one entry per row; a ValueError for what cannot be."""
    if bins < 1:
        raise ValueError("bins must be at least 1")
    y = np.asarray(correct, dtype=np.float64)
    c = np.asarray(confidence, dtype=np.float64)
    w = np.ones(len(y)) if weight is None else np.asarray(weight, dtype=np.float64)
    if not (len(y) == len(c) == len(w)) or (groups is not None and len(groups) != len(y)):
        raise ValueError("correct, confidence, weight and groups need one entry per row")
    if len(c) and (not np.all(np.isfinite(c)) or c.min() < 0 or c.max() > 1):
        raise ValueError("confidences must lie in [0, 1]")
    if len(w) and (not np.all(np.isfinite(w)) or w.min() <= 0):
        raise ValueError("weights must be positive")
    return y, c, w


def _skip_notes(without_confidence: int, without_answer: int) -> list[str]:
    notes: list[str] = []
    if without_confidence:
        notes.append(
            f"{without_confidence} row(s) with a judge and a human answer have no judge confidence: left "
            f"out of the calibration (a verdict from one sample has none; run the judge with {option('samples')} N)"
        )
    if without_answer:
        notes.append(
            f"{without_answer} row(s) with a confidence lack the judge's or the human's answer: left out "
            "of the calibration"
        )
    return notes


def _bins(
    sums: FloatArray, c: FloatArray, w: FloatArray, bins: int, level: float
) -> tuple[list[CalibrationBin], list[float]]:
    """Each bin's weight, mean confidence and accuracy with its Wilson interval; and |accuracy − confidence|
    of every non-empty bin (MCE is their maximum)."""
    n = len(c)
    counts = np.bincount(bin_index(c, bins), minlength=bins) if n else np.zeros(bins, dtype=np.int64)
    sq = np.bincount(bin_index(c, bins), weights=w * w, minlength=bins) if n else np.zeros(bins)
    out: list[CalibrationBin] = []
    gaps: list[float] = []
    for k in range(bins):
        wb, cb, ab = sums[k], sums[bins + k], sums[2 * bins + k]
        b = CalibrationBin(low=k / bins, high=(k + 1) / bins, count=int(counts[k]), weight=float(wb))
        if counts[k]:
            b.mean_confidence, b.accuracy = float(cb / wb), float(ab / wb)
            n_eff = float(wb * wb / sq[k])
            b.ci_low, b.ci_high = wilson(b.accuracy * n_eff, n_eff, level)
            gaps.append(abs(b.accuracy - b.mean_confidence))
        out.append(b)
    return out, gaps


def has_confidence(frame: Frame) -> bool:
    """Whether the frame carries a judge confidence on at least one row."""
    return CONFIDENCE_COLUMN in frame.columns and not all(is_null(v) for v in frame[CONFIDENCE_COLUMN])


def calibration_from_frame(frame: Frame, options: AgreementOptions) -> CalibrationReport:
    """The calibration report of a long (item, annotator) agreement frame with a ``judge_confidence`` column
    (and optionally ``probability``, ``group``); raises DataError for confidences that are not numbers in [0, 1]."""
    missing = frozenset(options.missing_values)
    judge = [label_text(v, options.mapping, missing) for v in frame["judge"]]
    human = [label_text(v, options.mapping, missing) for v in frame["human"]]
    raw = frame[CONFIDENCE_COLUMN]
    conf = numbers(raw)
    present = np.array([label_text(v, {}, missing) is not None for v in raw], dtype=bool)
    bad = present & ~np.isfinite(conf)
    if bad.any():
        examples = sorted({str(v) for v, b in zip(raw, bad, strict=True) if b})[:5]
        raise DataError(f"{int(bad.sum())} judge_confidence value(s) are not numbers, e.g. {examples}")
    out_of_range = present & np.isfinite(conf) & ((conf < 0) | (conf > 1))
    if out_of_range.any():
        values = sorted({float(v) for v in conf[out_of_range]})[:5]
        raise DataError(f"{int(out_of_range.sum())} judge_confidence value(s) outside [0, 1], e.g. {values}")
    answered = np.array([j is not None and h is not None for j, h in zip(judge, human, strict=True)], dtype=bool)
    use = answered & present
    weight: FloatArray | None = None
    if "probability" in frame.columns:
        p = numbers(frame["probability"])
        known = np.isfinite(p)
        if (known & ((p <= 0) | (p > 1))).any():
            raise DataError("inclusion probabilities must lie in (0, 1]")
        weight = np.where(known, 1.0 / np.where(known, p, 1.0), 1.0)[use]
    items = [label_text(v, {}) for v in frame["item"]]
    unit = "rows"
    codes: IntArray | None = None
    if "group" in frame.columns:
        key = [label_text(v, {}) for v in frame["group"]]
        unit = "records" if frame.attrs.get(GROUPS_ARE_RECORDS) else "groups"
    else:
        key = items
        unit = "items" if len(set(items)) < len(items) else "rows"
    if unit != "rows":
        _, inverse = np.unique(np.asarray([str(k) for k in key], dtype=object)[use], return_inverse=True)
        codes = inverse.reshape(-1).astype(np.int64)
    correct = np.array([j == h for j, h in zip(judge, human, strict=True)], dtype=bool)[use]
    return calibration(
        correct,
        conf[use],
        weight,
        codes,
        bins=options.calibration_bins,
        resampling=options.resampling,
        skipped_without_confidence=int((answered & ~present).sum()),
        skipped_without_answer=int((present & ~answered).sum()),
        unit=unit,
    )
