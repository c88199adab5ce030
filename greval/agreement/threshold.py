"""The judge's labels made from its score: at a given threshold, or at one chosen on selection rows (COL=VALUE)
and evaluated on the others. The choice itself is stats.choose_threshold's."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from greval.agreement import stats as st
from greval.agreement.models import AgreementOptions, AgreementScale, ThresholdInfo
from greval.agreement.prepare import label_text, prepare
from greval.dataset.frame import Frame
from greval.errors import DataError, option

if TYPE_CHECKING:
    import pandas as pd


def wants_threshold(options: AgreementOptions) -> bool:
    """Whether the options make the judge's labels from its score."""
    return options.threshold is not None or options.choose_threshold is not None


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def selection_mask(frame: Frame, select_on: str) -> npt.NDArray[np.bool_]:
    """Rows where COL equals VALUE (compared as canonical text: 1, 1.0 and "1" match)."""
    col, _, want = select_on.partition("=")
    if col not in frame.columns:
        raise DataError(f"{option('AgreementOptions.select_on')} {select_on!r}: no column {col!r} in the frame")
    target = label_text(want, {})
    return np.array([label_text(v, {}) == target for v in frame[col]], dtype=np.bool_)


def judge_from_score(frame: Frame | pd.DataFrame, info: ThresholdInfo, options: AgreementOptions) -> Frame:
    """The evaluated rows of `frame` with the judge's labels made from its score (renderers reuse this)."""
    frame = Frame.of(frame)
    out = frame.copy() if info.select_on is None else frame.where(~selection_mask(frame, info.select_on))
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


def threshold_frame(frame: Frame, scale: AgreementScale, options: AgreementOptions) -> tuple[Frame, ThresholdInfo]:
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
    chosen = selection_mask(frame, options.select_on)
    if not chosen.any() or chosen.all():
        what = "no row" if not chosen.any() else "every row"
        raise DataError(
            f"{option('AgreementOptions.select_on')} {options.select_on}: {what} matches; "
            "need rows to choose on and to evaluate"
        )
    sel = prepare(frame.where(chosen), scale, options)
    assert sel.score is not None
    y = sel.h == labels.index(pos)
    has = np.isfinite(sel.score)
    if not (y[has].any() and (~y[has]).any()):
        raise DataError(
            f"{option('AgreementOptions.select_on')} {options.select_on}: "
            "the selection rows need both labels among people"
        )
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


def threshold_note(info: ThresholdInfo) -> str:
    """The report's note on how the judge's labels were made from its score."""
    how = (
        f"chosen by {info.chosen_by} on the {info.selection_items} items with {info.select_on} "
        f"(grid: their {info.candidates} distinct scores, lowest on ties); evaluated on the other rows"
        if info.chosen_by
        else "given"
    )
    op = ">" if info.rule == "gt" else "≥"
    return (
        f"judge labels from its score: {info.pos_label} when score {op} {info.threshold:g}, else "
        f"{info.neg_label} (threshold {how})"
    )
