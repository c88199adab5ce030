"""Turn the long (item, annotator) frame into aligned per-item arrays, counting every row it sets aside.

Rules (documented in docs/agreement.md):
- Labels are compared as strings: 2, 2.0 and "2" are the same label. `mapping` applies to both sides first.
- A judge answer is *invalid* when missing or not a label of the scale (not a number on a value scale, or
  outside min..max). Invalid answers follow the policy: `as-wrong`, `drop` (the whole item, both sides)
  or `label:X`. A human answer that is not a label is a user error.
- One judge verdict per item; several human rows per item are reduced to a consensus: the majority label
  (an item whose top labels tie is left out of the judge comparison and counted) or the mean value.
- Items with no human answer are left out of the comparison (counted) but still count in the judge's
  observed prevalence.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from greval.agreement.models import AgreementOptions, AgreementScale, Counts
from greval.agreement.stats import BoolArray, FloatArray, IntArray, worst_case_codes
from greval.errors import DataError

MISSING = -1


def _is_missing(v: Any) -> bool:
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    if v is pd.NA or v is pd.NaT:
        return True
    return isinstance(v, str) and not v.strip()


def label_text(v: Any, mapping: dict[str, str]) -> str | None:
    """The canonical string of a raw answer (whole floats lose their '.0'), after `mapping`."""
    if _is_missing(v):
        return None
    if isinstance(v, bool | np.bool_):
        s = str(bool(v)).lower()
    elif (isinstance(v, float | np.floating) and float(v).is_integer()) or isinstance(v, int | np.integer):
        s = str(int(v))
    else:
        s = str(v).strip()
    return mapping.get(s, s)


def _sort_labels(labels: set[str]) -> list[str]:
    """Numeric order when every label is a number, else alphabetical."""
    try:
        return sorted(labels, key=float)
    except ValueError:
        return sorted(labels)


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


def _require(frame: pd.DataFrame, columns: list[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DataError(f"missing column(s) {missing}; the frame has {list(frame.columns)}")


def resolve_scale(frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions) -> AgreementScale:
    """Fill in labels from the human answers when a categorical scale gives none."""
    if scale.kind != "categorical" or scale.labels is not None:
        return scale
    _require(frame, ["human"])
    seen = {s for s in (label_text(v, options.mapping) for v in frame["human"]) if s is not None}
    if not seen:
        raise DataError("no human labels to infer the label set from; pass --labels")
    return scale.model_copy(update={"labels": _sort_labels(seen)})


def _value_of(s: str | None, scale: AgreementScale) -> float | None:
    if s is None:
        return None
    if scale.scores is not None and s in scale.scores:
        return float(scale.scores[s])
    try:
        v = float(s)
    except ValueError:
        return None
    return v if math.isfinite(v) else None


def _in_bounds(v: float, scale: AgreementScale) -> bool:
    return (scale.min is None or v >= scale.min) and (scale.max is None or v <= scale.max)


def prepare(frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions) -> Prepared:
    """Validate and reduce the frame; raises DataError for user mistakes."""
    _require(frame, ["item", "judge", "human"])
    scale = resolve_scale(frame, scale, options)
    categorical = scale.kind == "categorical"
    labels = scale.labels or []
    index = {lab: i for i, lab in enumerate(labels)}
    k = len(labels)
    if categorical and k < 1:
        raise DataError("a categorical scale needs at least one label")
    notes: list[str] = []

    policy = options.invalid
    fill_code: int | None = None
    fill_value: float | None = None
    if policy.startswith("label:"):
        target = policy.removeprefix("label:")
        if categorical:
            if target not in index:
                raise DataError(f"--invalid {policy}: {target!r} is not a label; labels are {labels}")
            fill_code = index[target]
        else:
            fill_value = _value_of(target, scale)
            if fill_value is None:
                raise DataError(f"--invalid {policy}: {target!r} is not a number on this scale")

    has_annot = "annotator" in frame.columns
    has_group = "group" in frame.columns
    items = frame["item"].map(lambda v: None if _is_missing(v) else label_text(v, {}))
    if items.isna().any():
        raise DataError(f"{int(items.isna().sum())} row(s) have no item id")

    # Human answers, validated row by row.
    human_txt = [label_text(v, options.mapping) for v in frame["human"]]
    human_val: list[float | None] = []
    bad: list[str] = []
    for s in human_txt:
        if s is None:
            human_val.append(None)
        elif categorical:
            if s not in index:
                bad.append(s)
            human_val.append(float(index.get(s, -1)))
        else:
            v = _value_of(s, scale)
            if v is None or not _in_bounds(v, scale):
                bad.append(s)
            human_val.append(v)
    if bad:
        uniq = sorted(set(bad))[:5]
        if categorical:
            what = f"labels are {labels} (use --map or --labels)"
        elif scale.min is None and scale.max is None:
            what = "a value scale expects numbers (or --kind categorical)"
        else:
            what = f"the scale is {scale.min}..{scale.max}"
        raise DataError(f"unknown human answer(s) {uniq} ({len(bad)} row(s)); {what}")

    judge_txt = [label_text(v, options.mapping) for v in frame["judge"]]
    annot = [str(a) for a in frame["annotator"]] if has_annot else ["human"] * len(frame)
    group_raw = [None if _is_missing(g) else str(g) for g in frame["group"]] if has_group else None

    # Reduce to one record per item, in order of first appearance.
    order: list[str] = []
    per_item: dict[str, dict[str, Any]] = {}
    for r, item in enumerate(items.tolist()):
        rec = per_item.get(item)
        if rec is None:
            rec = per_item[item] = {"judge": set(), "humans": {}, "group": None}
            order.append(item)
        if judge_txt[r] is not None:
            rec["judge"].add(judge_txt[r])
        if human_val[r] is not None:
            rec["humans"][annot[r]] = human_val[r]
        if group_raw is not None and rec["group"] is None:
            rec["group"] = group_raw[r]
    multi = [i for i in order if len(per_item[i]["judge"]) > 1]
    if multi:
        ex = multi[0]
        raise DataError(
            f"{len(multi)} item(s) have several judge verdicts "
            f"(e.g. {ex!r}: {sorted(per_item[ex]['judge'])}); one verdict per item is expected"
        )

    group_names = sorted({per_item[i]["group"] for i in order if per_item[i]["group"] is not None})
    group_index = {g: n for n, g in enumerate(group_names)}
    if has_group and any(per_item[i]["group"] is None for i in order):
        raise DataError("some items have no group id")

    n_missing_h = n_invalid = n_dropped = n_tied = 0
    comp_items: list[str] = []
    h_list: list[float] = []
    j_list: list[float | None] = []  # None = invalid
    all_j: list[int] = []
    all_h: list[int] = []
    all_g: list[int] = []
    labelled: list[str] = []
    for item in order:
        rec = per_item[item]
        verdict = next(iter(rec["judge"])) if rec["judge"] else None
        jval: float | None
        if categorical:
            jval = float(index[verdict]) if verdict in index else None
        else:
            jval = _value_of(verdict, scale)
            if jval is not None and not _in_bounds(jval, scale):
                jval = None
        humans: dict[str, float] = rec["humans"]
        hval: float | None = None
        tied = False
        if humans and categorical:
            top = Counter(humans.values()).most_common()
            if len(top) > 1 and top[0][1] == top[1][1]:
                tied = True
            else:
                hval = top[0][0]
        elif humans:
            hval = float(np.mean(list(humans.values())))
        all_j.append(MISSING if jval is None or not categorical else int(jval))
        all_h.append(MISSING if hval is None or not categorical else int(hval))
        all_g.append(group_index[rec["group"]] if has_group else 0)
        if not humans:
            n_missing_h += 1
            continue
        labelled.append(item)
        if jval is None:
            n_invalid += 1
        if tied:
            n_tied += 1
            continue
        if jval is None:
            if policy == "drop":
                n_dropped += 1
                continue
            if fill_code is not None:
                jval = float(fill_code)
            elif fill_value is not None:
                jval = fill_value
        assert hval is not None
        comp_items.append(item)
        h_list.append(hval)
        j_list.append(jval)

    prep = Prepared(
        scale=scale,
        items=comp_items,
        groups=None,
        counts=Counts(
            rows=len(frame),
            items=len(order),
            items_missing_human=n_missing_h,
            items_invalid_judge=n_invalid,
            items_dropped_invalid=n_dropped,
            items_tied_majority=n_tied,
            items_compared=0,
            annotators=len(set(annot)) if has_annot else 1,
            groups=len(group_names) if has_group else None,
        ),
        notes=notes,
        all_j=np.array(all_j, dtype=np.int64),
        all_h=np.array(all_h, dtype=np.int64),
        all_groups=np.array(all_g, dtype=np.int64) if has_group else None,
    )
    if n_missing_h:
        notes.append(f"{n_missing_h} item(s) without a human answer left out of the comparison")
    if n_tied:
        notes.append(f"{n_tied} item(s) whose human majority is tied left out of the judge comparison")
    if n_invalid:
        notes.append(f"{n_invalid} compared/labelled item(s) with an invalid or missing judge answer: policy {policy}")

    if categorical:
        h_arr = np.array(h_list, dtype=np.int64)
        inv = np.array([v is None for v in j_list], dtype=np.bool_)
        j_nom = np.array([k if v is None else int(v) for v in j_list], dtype=np.int64)
        j_ord = np.where(inv, worst_case_codes(h_arr, k), j_nom).astype(np.int64)
        prep.h, prep.j_nom, prep.j_ord, prep.invalid = h_arr, j_nom, j_ord, inv
    else:
        keep = [True] * len(j_list)
        jv: list[float] = []
        unscorable = 0
        for n, (hv, jvv) in enumerate(zip(h_list, j_list, strict=True)):
            if jvv is None:
                if scale.min is not None and scale.max is not None:
                    jvv = scale.max if (hv - scale.min) < (scale.max - hv) else scale.min
                else:
                    keep[n] = False
                    unscorable += 1
                    jvv = math.nan
            jv.append(jvv)
        if unscorable:
            notes.append(
                f"{unscorable} invalid judge answer(s) cannot be scored as wrong without the scale's "
                "min and max; those items are left out on both sides (set min/max or use --invalid label:X)"
            )
            prep.counts.items_dropped_invalid += unscorable
        sel = np.array(keep, dtype=np.bool_)
        prep.hv = np.array(h_list, dtype=float)[sel]
        prep.jv = np.array(jv, dtype=float)[sel]
        prep.invalid = np.array([v is None for v in j_list], dtype=np.bool_)[sel]
        comp_items = [it for it, ok in zip(comp_items, keep, strict=True) if ok]
        prep.items = comp_items
    prep.counts.items_compared = len(prep.items)
    if has_group:
        prep.groups = np.array([group_index[per_item[i]["group"]] for i in prep.items], dtype=np.int64)

    if has_annot:
        names = sorted(set(annot))
        arow = {a: n for n, a in enumerate(names)}
        mat = np.full((len(names), len(labelled)), np.nan)
        nom = np.full(len(labelled), np.nan)
        posv = np.full(len(labelled), np.nan)
        for col, item in enumerate(labelled):
            for a, v in per_item[item]["humans"].items():
                mat[arow[a], col] = v
            verdict = next(iter(per_item[item]["judge"])) if per_item[item]["judge"] else None
            jv_c: float | None
            if categorical:
                jv_c = float(index[verdict]) if verdict in index else None
            else:
                jv_c = _value_of(verdict, scale)
                if jv_c is not None and not _in_bounds(jv_c, scale):
                    jv_c = None
            if jv_c is not None:
                nom[col] = posv[col] = jv_c
            elif fill_code is not None:
                nom[col] = posv[col] = fill_code
            elif fill_value is not None:
                nom[col] = posv[col] = fill_value
            elif policy == "as-wrong" and categorical:
                nom[col] = k
                posv[col] = np.nan  # no single human to be farthest from: left out of positional figures
            elif policy == "as-wrong" and scale.min is not None and scale.max is not None:
                mean_h = float(np.nanmean(mat[:, col]))
                posv[col] = nom[col] = scale.max if (mean_h - scale.min) < (scale.max - mean_h) else scale.min
        prep.annotators = names
        prep.human_matrix = mat
        prep.ceil_judge_nom = nom
        prep.ceil_judge_pos = posv
        if has_group:
            prep.ceil_groups = np.array([group_index[per_item[i]["group"]] for i in labelled], dtype=np.int64)
    return prep
