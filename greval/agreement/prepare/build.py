"""Phase 3 of prepare: the aligned arrays every statistic reads (`Prepared`), built from the reduced items —
codes or values per compared item (an invalid answer as the policy says), the prevalence codes of every item,
the groups and scores, the annotators × items matrix of the human ceiling — and the counts of where rows went."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from greval.agreement.models import AgreementScale, Counts
from greval.agreement.prepare.answers import farthest
from greval.agreement.prepare.reduce import Reduced
from greval.agreement.prepare.validate import Rows
from greval.agreement.stats import BoolArray, FloatArray, IntArray, worst_case_codes
from greval.errors import option


@dataclass
class Prepared:
    """Aligned arrays over the compared items, plus what the extra reports need."""

    scale: AgreementScale
    items: list[str]
    groups: IntArray | None
    counts: Counts
    notes: list[str] = field(default_factory=list)
    # categorical
    h: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    j_nom: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    j_ord: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    invalid: BoolArray = field(default_factory=lambda: np.zeros(0, dtype=np.bool_))
    # value
    hv: FloatArray = field(default_factory=lambda: np.zeros(0))
    jv: FloatArray = field(default_factory=lambda: np.zeros(0))
    # prevalence: every item, judge code / majority human code or MISSING
    all_j: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    all_h: IntArray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    all_groups: IntArray | None = None
    # ceiling: annotators × human-labelled items (codes or values, NaN = not labelled), and the judge's
    # answer on those items as a nominal code / positional code or value (NaN = left out by the policy)
    annotators: list[str] = field(default_factory=list)
    human_matrix: FloatArray | None = None
    ceil_judge_nom: FloatArray = field(default_factory=lambda: np.zeros(0))
    ceil_judge_pos: FloatArray = field(default_factory=lambda: np.zeros(0))
    ceil_groups: IntArray | None = None
    # the judge's raw score per compared item (NaN = none), when the frame has a `score` column
    score: FloatArray | None = None
    has_judge: bool = True
    group_names: list[str] = field(default_factory=list)
    multi_row_items: bool = False  # some item spans several rows: the resampling unit is the item, not the row


def build(rows: Rows, red: Reduced) -> Prepared:
    """The arrays of the compared items (and of every item, for prevalence and the ceiling)."""
    grouped = rows.groups is not None
    prep = Prepared(
        scale=rows.scale,
        items=list(red.compared),
        groups=None,
        counts=_counts(rows, red),
        notes=list(red.notes),
        all_j=np.array(red.all_j, dtype=np.int64),
        all_h=np.array(red.all_h, dtype=np.int64),
        all_groups=np.array(red.all_g, dtype=np.int64) if grouped else None,
        has_judge=rows.has_judge,
        group_names=red.group_names,
        multi_row_items=len(set(rows.items)) < len(rows.items),
    )
    if rows.categorical:
        _categorical(prep, rows, red)
    else:
        _values(prep, rows, red)
    prep.counts.items_compared = len(prep.items)
    group_index = {g: n for n, g in enumerate(red.group_names)}
    if grouped:
        prep.groups = np.array([group_index[str(red.items[i].group)] for i in prep.items], dtype=np.int64)
    if rows.scores is not None:
        prep.score = np.array([_score(red, i) for i in prep.items], dtype=float)
    if rows.annotator_column or red.anonymous:
        _ceiling(prep, rows, red)
        if grouped:
            prep.ceil_groups = np.array([group_index[str(red.items[i].group)] for i in red.labelled], dtype=np.int64)
    return prep


def _counts(rows: Rows, red: Reduced) -> Counts:
    """Where the rows went (items_compared is set once the arrays are built)."""
    several = rows.annotator_column or red.anonymous
    if rows.annotator_column:
        n_annot = len(set(rows.annotators))
    else:
        n_annot = max((len(red.items[i].humans) for i in red.order), default=0)
    return Counts(
        rows=len(rows.items),
        rows_missing_judge=sum(1 for t in rows.judge_text or [] if t is None),
        rows_missing_human=sum(1 for t in rows.human_text if t is None),
        items_several_human_rows=red.anonymous,
        items=len(red.order),
        items_missing_human=red.missing_human,
        items_invalid_judge=red.invalid,
        items_dropped_invalid=red.dropped,
        items_tied_majority=red.tied,
        items_compared=0,
        annotators=n_annot if several else 1,
        groups=len(red.group_names) if rows.groups is not None else None,
    )


def _score(red: Reduced, item: str) -> float:
    scores = red.items[item].scores
    return next(iter(scores)) if scores else math.nan


def _categorical(prep: Prepared, rows: Rows, red: Reduced) -> None:
    """Codes: people's consensus, the judge's answer (an invalid one as code k, or the label people did not
    choose under `opposite`), and for ordered figures the worst case of an invalid answer."""
    k = len(rows.labels)
    h = np.array(red.human, dtype=np.int64)
    n = len(red.human)
    inv = np.array([v is None for v in red.judge], dtype=np.bool_) if rows.has_judge else np.zeros(n, np.bool_)
    if rows.policy == "opposite":
        # binary: the label the human did not choose, counted as that label everywhere
        pairs = zip(red.human, red.judge, strict=True)
        j_nom = np.array([1 - int(hv) if v is None else int(v) for hv, v in pairs]).astype(np.int64)
        j_ord = j_nom
    else:
        j_nom = np.array([k if v is None else int(v) for v in red.judge], dtype=np.int64)
        j_ord = np.where(inv, worst_case_codes(h, k), j_nom).astype(np.int64)
    prep.h, prep.j_nom, prep.j_ord, prep.invalid = h, j_nom, j_ord, inv


def _values(prep: Prepared, rows: Rows, red: Reduced) -> None:
    """Values: an invalid answer as the end of the scale farthest from people's value (as-wrong); without
    both ends it cannot be scored, and the item is left out on both sides (counted, with a note)."""
    scale = rows.scale
    bounded = scale.min is not None and scale.max is not None
    keep = [v is not None or bounded for v in red.judge]
    jv = [
        v if v is not None else farthest(hv, scale) if bounded else math.nan
        for hv, v in zip(red.human, red.judge, strict=True)
    ]
    unscorable = keep.count(False)
    if unscorable:
        prep.notes.append(
            f"{unscorable} invalid judge answer(s) cannot be scored as wrong without the scale's min and max; those "
            f"items are left out on both sides (set min/max or use {option('AgreementOptions.invalid')} label:X)"
        )
        prep.counts.items_dropped_invalid += unscorable
    sel = np.array(keep, dtype=np.bool_)
    prep.hv = np.array(red.human, dtype=float)[sel]
    prep.jv = np.array(jv, dtype=float)[sel]
    prep.invalid = np.array([v is None for v in red.judge], dtype=np.bool_)[sel]
    prep.items = [it for it, ok in zip(red.compared, keep, strict=True) if ok]


def _ceiling(prep: Prepared, rows: Rows, red: Reduced) -> None:
    """The annotators × labelled items matrix, and the judge's answer on those items as the policy reads it."""
    names = sorted({a for a in rows.annotators if rows.annotator_column or a != "#0"}, key=lambda a: (len(a), a))
    arow = {a: n for n, a in enumerate(names)}
    mat = np.full((len(names), len(red.labelled)), np.nan)
    nom = np.full(len(red.labelled), np.nan)
    pos = np.full(len(red.labelled), np.nan)
    for col, name in enumerate(red.labelled):
        item = red.items[name]
        for a, v in item.humans.items():
            mat[arow[a], col] = v
        nom[col], pos[col] = _ceiling_judge(item.judge_value, item.consensus, mat[:, col], rows)
    prep.annotators = names
    prep.human_matrix = mat
    prep.ceil_judge_nom = nom
    prep.ceil_judge_pos = pos


def _ceiling_judge(value: float | None, consensus: float | None, humans: FloatArray, rows: Rows) -> tuple[float, float]:
    """(nominal code, positional code or value) of the judge on one labelled item; NaN where it is left out."""
    if value is not None:
        return value, value
    if not rows.has_judge:
        return math.nan, math.nan
    if rows.fill_code is not None:
        return rows.fill_code, rows.fill_code
    if rows.fill_value is not None:
        return rows.fill_value, rows.fill_value
    scale = rows.scale
    if rows.policy == "opposite":  # the label the people's majority did not choose; a tie has none
        return (1 - consensus, 1 - consensus) if consensus is not None else (math.nan, math.nan)
    if rows.policy == "as-wrong" and rows.categorical:
        return len(rows.labels), math.nan  # no single human to be farthest from: left out of positional figures
    if rows.policy == "as-wrong" and scale.min is not None and scale.max is not None:
        worst = farthest(float(np.nanmean(humans)), scale)
        return worst, worst
    return math.nan, math.nan
