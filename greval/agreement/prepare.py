"""Turn the long (item, annotator) frame into aligned per-item arrays, counting every row it sets aside.

Rules (documented in docs/agreement.md):
- Labels are compared as strings: 2, 2.0 and "2" are the same label. `mapping` applies to both sides first.
- Missing means: a null (None/NaN/NA), an empty cell, or a text the user lists in `missing_values`. Nothing
  else: "NA", "None", "null", "N/A" and "nan" are labels unless the user says otherwise.
- A judge answer is *invalid* when missing or not a label of the scale (not a number on a value scale, or
  outside min..max). Invalid answers follow the policy: `as-wrong`, `drop` (the whole item, both sides),
  `opposite` (two labels: the one the human did not choose) or `label:X`. A human answer that is not a label
  is a user error.
- One judge verdict per item: identical repeats collapse (said in a note without an annotator column),
  different ones are an error naming the items. Several human rows per item are annotators (without an
  annotator column: anonymous ones, #1, #2 … in file order, with a note) reduced to a consensus: the majority
  label (an item whose top labels tie is left out of the judge comparison and counted) or the mean value.
  One annotator answering one item twice differently is an error.
- Items with no human answer are left out of the comparison (counted) but still count in the judge's
  observed prevalence.

Optional columns are recognised by name: ``annotator``, ``group``, ``score``, ``probability`` / ``stratum``
(design weights, agreement/design.py) and ``judge_confidence`` (the judge's confidence in [0, 1], read row by
row by agreement/calibration.py, not reduced here).
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from greval.agreement.models import AgreementOptions, AgreementScale, Counts
from greval.agreement.stats import BoolArray, FloatArray, IntArray, worst_case_codes
from greval.errors import DataError

MISSING = -1
CONFIDENCE_COLUMN = "judge_confidence"
"""The frame column with the judge's confidence in its answer (0..1; empty when it has none)."""


def _is_missing(v: Any) -> bool:
    """A null of any kind, or an empty / blank cell: no answer whatever the user's missing_values say."""
    if v is None:
        return True
    if isinstance(v, float) and math.isnan(v):
        return True
    if v is pd.NA or v is pd.NaT:
        return True
    return isinstance(v, str) and not v.strip()


_INTEGER = re.compile(r"[+-]?\d+")
_DECIMAL = re.compile(r"[+-]?(\d+\.\d*|\.\d+)")


def _canonical_number(s: str) -> str:
    """'2.0' and '02' read as 2, '1.50' as 1.5: text read from a CSV compares like the numbers pandas made."""
    if _INTEGER.fullmatch(s):
        return str(int(s))
    if _DECIMAL.fullmatch(s):
        f = float(s)
        return str(int(f)) if f.is_integer() and abs(f) < 2**53 else repr(f)
    return s


def label_text(v: Any, mapping: dict[str, str], missing: frozenset[str] = frozenset()) -> str | None:
    """The canonical string of a raw answer (whole numbers lose their '.0'), after `mapping`; None when missing."""
    if _is_missing(v):
        return None
    if isinstance(v, bool | np.bool_):
        s = str(bool(v)).lower()
    elif (isinstance(v, float | np.floating) and float(v).is_integer()) or isinstance(v, int | np.integer):
        s = str(int(v))
    else:
        raw = str(v).strip()
        if raw in missing:
            return None
        s = _canonical_number(raw)
    if s in missing:
        return None
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
    # the judge's raw score per compared item (NaN = none), when the frame has a `score` column
    score: FloatArray | None = None
    has_judge: bool = True
    group_names: list[str] = field(default_factory=list)
    multi_row_items: bool = False  # some item spans several rows: the resampling unit is the item, not the row


def _require(frame: pd.DataFrame, columns: list[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DataError(f"missing column(s) {missing}; the frame has {list(frame.columns)}")


def resolve_scale(frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions) -> AgreementScale:
    """Fill in labels from the human answers when a categorical scale gives none."""
    if scale.kind != "categorical" or scale.labels is not None:
        return scale
    _require(frame, ["human"])
    missing = frozenset(options.missing_values)
    seen = {s for s in (label_text(v, options.mapping, missing) for v in frame["human"]) if s is not None}
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


def few(items: list[str], n: int = 5) -> str:
    """A few item ids for an error message, quoted, with how many more."""
    shown = ", ".join(repr(i) for i in items[:n])
    return shown + (f" and {len(items) - n} more" if len(items) > n else "")


def _scores(frame: pd.DataFrame, missing: frozenset[str]) -> list[float | None]:
    """The judge's raw scores as floats (None = missing); a text that is not a number is a user error."""
    out: list[float | None] = []
    bad: list[str] = []
    for v in frame["score"]:
        s = label_text(v, {}, missing)
        if s is None:
            out.append(None)
            continue
        try:
            f = float(s)
        except ValueError:
            f = math.nan
        if not math.isfinite(f):
            bad.append(s)
        out.append(f if math.isfinite(f) else None)
    if bad:
        raise DataError(f"score column: {len(bad)} value(s) are not finite numbers, e.g. {sorted(set(bad))[:5]}")
    return out


def _fill_policy(
    policy: str, categorical: bool, index: dict[str, int], labels: list[str], scale: AgreementScale
) -> tuple[int | None, float | None]:
    """The code / value an invalid answer becomes under `label:X`; checks `opposite` is usable."""
    if policy == "opposite":
        if not categorical or len(labels) != 2:
            raise DataError(
                f"--invalid opposite needs exactly two labels (a binary task); this scale has "
                f"{'values' if not categorical else len(labels)}: use as-wrong, drop or label:X"
            )
        return None, None
    if not policy.startswith("label:"):
        return None, None
    target = policy.removeprefix("label:")
    if categorical:
        if target not in index:
            raise DataError(f"--invalid {policy}: {target!r} is not a label; labels are {labels}")
        return index[target], None
    fill_value = _value_of(target, scale)
    if fill_value is None:
        raise DataError(f"--invalid {policy}: {target!r} is not a number on this scale")
    return None, fill_value


def prepare(frame: pd.DataFrame, scale: AgreementScale, options: AgreementOptions) -> Prepared:
    """Validate and reduce the frame; raises DataError for user mistakes."""
    has_judge = "judge" in frame.columns
    _require(frame, ["item", "human"] + ([] if "score" in frame.columns else ["judge"]))
    scale = resolve_scale(frame, scale, options)
    categorical = scale.kind == "categorical"
    labels = scale.labels or []
    index = {lab: i for i, lab in enumerate(labels)}
    k = len(labels)
    if categorical and k < 1:
        raise DataError("a categorical scale needs at least one label")
    notes: list[str] = []
    missing = frozenset(options.missing_values)

    policy = options.invalid
    fill_code, fill_value = _fill_policy(policy, categorical, index, labels, scale)

    has_annot = "annotator" in frame.columns
    has_group = "group" in frame.columns
    has_score = "score" in frame.columns
    items = frame["item"].map(lambda v: None if _is_missing(v) else label_text(v, {}))
    if items.isna().any():
        raise DataError(f"{int(items.isna().sum())} row(s) have no item id")

    # Human answers, validated row by row.
    human_txt = [label_text(v, options.mapping, missing) for v in frame["human"]]
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
            what = f"labels are {labels} (use --map or --labels, or --missing-values for 'no answer')"
        elif scale.min is None and scale.max is None:
            what = "a value scale expects numbers (or --kind categorical; --missing-values for 'no answer')"
        else:
            what = f"the scale is {scale.min}..{scale.max}"
        raise DataError(f"unknown human answer(s) {uniq} ({len(bad)} row(s)); {what}")

    judge_txt = [label_text(v, options.mapping, missing) for v in frame["judge"]] if has_judge else []
    score_raw = _scores(frame, missing) if has_score else []
    item_list: list[str] = items.tolist()
    # Annotators: the column, or anonymous ones numbered by row order within each item.
    if has_annot:
        annot = [str(a) for a in frame["annotator"]]
    else:
        seen_rows: Counter[str] = Counter()
        annot = []
        for item, hv in zip(item_list, human_val, strict=True):
            if hv is None:
                annot.append("#0")  # no answer: never enters the human matrix
                continue
            seen_rows[item] += 1
            annot.append(f"#{seen_rows[item]}")
    group_raw = [None if _is_missing(g) else str(g) for g in frame["group"]] if has_group else None

    # Reduce to one record per item, in order of first appearance.
    order: list[str] = []
    per_item: dict[str, dict[str, Any]] = {}
    twice_same: list[str] = []
    twice_diff: list[str] = []
    rows_per_item: Counter[str] = Counter(item_list)
    for r, item in enumerate(item_list):
        rec = per_item.get(item)
        if rec is None:
            rec = per_item[item] = {"judge": set(), "judge_rows": 0, "humans": {}, "group": None, "score": set()}
            order.append(item)
        if has_judge and judge_txt[r] is not None:
            rec["judge"].add(judge_txt[r])
            rec["judge_rows"] += 1
        if has_score and score_raw[r] is not None:
            rec["score"].add(score_raw[r])
        if human_val[r] is not None:
            who = annot[r]
            if who in rec["humans"]:
                (twice_same if rec["humans"][who] == human_val[r] else twice_diff).append(item)
            rec["humans"][who] = human_val[r]
        if group_raw is not None and rec["group"] is None:
            rec["group"] = group_raw[r]
    if twice_diff:
        bad_items = list(dict.fromkeys(twice_diff))
        raise DataError(
            f"{len(bad_items)} item(s) have two different answers from one annotator ({few(bad_items)}); "
            "one answer per annotator and item is expected"
        )
    if twice_same:
        notes.append(
            f"{len(set(twice_same))} item(s) list the same annotator's identical answer on several rows: counted once"
        )
    multi = [i for i in order if len(per_item[i]["judge"]) > 1]
    if multi:
        ex = multi[0]
        raise DataError(
            f"{len(multi)} item(s) have several different judge verdicts ({few(multi)}; e.g. {ex!r}: "
            f"{sorted(per_item[ex]['judge'])}); one verdict per item is expected — if rows are one item under "
            "several conditions, leave out --item and cluster them with --group"
        )
    multi_score = [i for i in order if len(per_item[i]["score"]) > 1]
    if multi_score:
        raise DataError(f"{len(multi_score)} item(s) have several different scores ({few(multi_score)})")
    repeated = sum(1 for i in order if per_item[i]["judge_rows"] > 1)
    if repeated and not has_annot:
        notes.append(f"the judge's verdict is repeated identically on the rows of {repeated} item(s): counted once")
    several = [i for i in order if len(per_item[i]["humans"]) > 1] if not has_annot else []
    if several:
        notes.append(
            f"{len(several)} item(s) have several human rows and there is no annotator column: read as anonymous "
            "annotators (#1, #2 … in file order), reduced to the majority label / mean value (ties counted), "
            "with a human–human ceiling (pairwise figures pair rows by file order; α does not depend on it)"
        )

    group_names = sorted({per_item[i]["group"] for i in order if per_item[i]["group"] is not None})
    group_index = {g: n for n, g in enumerate(group_names)}
    if has_group and any(per_item[i]["group"] is None for i in order):
        raise DataError("some items have no group id")

    def judge_value(item: str) -> float | None:
        verdicts = per_item[item]["judge"]
        verdict = next(iter(verdicts)) if verdicts else None
        if categorical:
            return float(index[verdict]) if verdict in index else None
        v = _value_of(verdict, scale)
        return None if v is None or not _in_bounds(v, scale) else v

    n_missing_h = n_invalid = n_dropped = n_tied = 0
    comp_items: list[str] = []
    h_list: list[float] = []
    j_list: list[float | None] = []  # None = invalid
    all_j: list[int] = []
    all_h: list[int] = []
    all_g: list[int] = []
    labelled: list[str] = []
    consensus: dict[str, float | None] = {}
    for item in order:
        rec = per_item[item]
        jval = judge_value(item)
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
        consensus[item] = hval
        all_j.append(MISSING if jval is None or not categorical else int(jval))
        all_h.append(MISSING if hval is None or not categorical else int(hval))
        all_g.append(group_index[rec["group"]] if has_group else 0)
        if not humans:
            n_missing_h += 1
            continue
        labelled.append(item)
        if jval is None and has_judge:
            n_invalid += 1
        if tied:
            n_tied += 1
            continue
        if jval is None and has_judge:
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

    n_annot = len(set(annot)) if has_annot else max((len(per_item[i]["humans"]) for i in order), default=0)
    prep = Prepared(
        scale=scale,
        items=comp_items,
        groups=None,
        counts=Counts(
            rows=len(frame),
            rows_missing_judge=sum(1 for t in judge_txt if t is None),
            rows_missing_human=sum(1 for t in human_txt if t is None),
            items_several_human_rows=len(several),
            items=len(order),
            items_missing_human=n_missing_h,
            items_invalid_judge=n_invalid,
            items_dropped_invalid=n_dropped,
            items_tied_majority=n_tied,
            items_compared=0,
            annotators=n_annot if (has_annot or several) else 1,
            groups=len(group_names) if has_group else None,
        ),
        notes=notes,
        all_j=np.array(all_j, dtype=np.int64),
        all_h=np.array(all_h, dtype=np.int64),
        all_groups=np.array(all_g, dtype=np.int64) if has_group else None,
        has_judge=has_judge,
        group_names=group_names,
        multi_row_items=any(c > 1 for c in rows_per_item.values()),
    )
    if n_missing_h:
        notes.append(f"{n_missing_h} item(s) without a human answer left out of the comparison")
    if n_tied:
        notes.append(f"{n_tied} item(s) whose human majority is tied left out of the judge comparison")
    if n_invalid:
        notes.append(f"{n_invalid} compared/labelled item(s) with an invalid or missing judge answer: policy {policy}")

    if categorical:
        h_arr = np.array(h_list, dtype=np.int64)
        inv = np.array([v is None for v in j_list], dtype=np.bool_) if has_judge else np.zeros(len(h_list), np.bool_)
        if policy == "opposite":
            # binary: the label the human did not choose, counted as that label everywhere
            j_nom = np.array([1 - int(h) if v is None else int(v) for h, v in zip(h_list, j_list, strict=True)])
            j_nom = j_nom.astype(np.int64)
            j_ord = j_nom
        else:
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
    if has_score:
        prep.score = np.array(
            [next(iter(per_item[i]["score"])) if per_item[i]["score"] else math.nan for i in prep.items], dtype=float
        )

    if has_annot or several:
        names = sorted({a for a in annot if has_annot or a != "#0"}, key=lambda a: (len(a), a))
        arow = {a: n for n, a in enumerate(names)}
        mat = np.full((len(names), len(labelled)), np.nan)
        nom = np.full(len(labelled), np.nan)
        posv = np.full(len(labelled), np.nan)
        for col, item in enumerate(labelled):
            for a, v in per_item[item]["humans"].items():
                mat[arow[a], col] = v
            jv_c = judge_value(item) if has_judge else None
            if jv_c is not None:
                nom[col] = posv[col] = jv_c
            elif not has_judge:
                continue
            elif fill_code is not None:
                nom[col] = posv[col] = fill_code
            elif fill_value is not None:
                nom[col] = posv[col] = fill_value
            elif policy == "opposite":
                c = consensus[item]
                if c is not None:  # the label the people's majority did not choose; a tie has none
                    nom[col] = posv[col] = 1 - c
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
