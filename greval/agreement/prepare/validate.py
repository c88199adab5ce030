"""Phase 1 of prepare: the frame's rows read one by one on the scale, every user mistake in them refused with
a one-line DataError (missing columns, unknown human answers, scores that are not numbers, an invalid-answer
policy the scale cannot follow). Nothing is reduced yet: one entry per row."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from functools import cached_property

from greval.agreement.models import AgreementOptions, AgreementScale
from greval.agreement.prepare.answers import in_bounds, is_missing, label_text, sort_labels, value_of
from greval.dataset.frame import Frame
from greval.errors import DataError, option


@dataclass
class Rows:
    """The frame's rows read on the scale, in frame order. Optional columns the frame lacks are None."""

    scale: AgreementScale
    """The scale, its labels filled in from the human answers when it gave none."""
    policy: str
    """The invalid-answer policy (AgreementOptions.invalid)."""
    fill_code: int | None
    """The label code an invalid answer becomes under `label:X` (categorical)."""
    fill_value: float | None
    """The value an invalid answer becomes under `label:X` (value scale)."""
    items: list[str]
    human_text: list[str | None]
    """Each row's human answer as canonical text (None: missing)."""
    human: list[float | None]
    """… as a label code (categorical) or a value (None: missing)."""
    judge_text: list[str | None] | None
    """Each row's judge answer as canonical text (None: missing); None without a judge column."""
    scores: list[float | None] | None
    """Each row's judge score (None: missing); None without a score column."""
    annotators: list[str]
    """The annotator column, or anonymous annotators #1, #2 … by row order within an item (#0: no answer)."""
    annotator_column: bool
    groups: list[str | None] | None

    @property
    def categorical(self) -> bool:
        return self.scale.kind == "categorical"

    @property
    def labels(self) -> list[str]:
        return self.scale.labels or []

    @cached_property
    def index(self) -> dict[str, int]:
        """Each label's code."""
        return {lab: i for i, lab in enumerate(self.labels)}

    @property
    def has_judge(self) -> bool:
        return self.judge_text is not None


def validate(frame: Frame, scale: AgreementScale, options: AgreementOptions) -> Rows:
    """The frame's rows, checked; raises DataError for user mistakes."""
    _require(frame, ["item", "human"] + ([] if "score" in frame.columns else ["judge"]))
    scale = resolve_scale(frame, scale, options)
    if scale.kind == "categorical" and not scale.labels:
        raise DataError("a categorical scale needs at least one label")
    fill_code, fill_value = _fill_policy(options.invalid, scale)
    items = [None if is_missing(v) else label_text(v, {}) for v in frame["item"]]
    if (no_id := items.count(None)) > 0:
        raise DataError(f"{no_id} row(s) have no item id")
    missing = frozenset(options.missing_values)
    human_text = [label_text(v, options.mapping, missing) for v in frame["human"]]
    human = _human_answers(human_text, scale)
    has_judge = "judge" in frame.columns
    item_list = [str(i) for i in items]
    annotator_column = "annotator" in frame.columns
    return Rows(
        scale=scale,
        policy=options.invalid,
        fill_code=fill_code,
        fill_value=fill_value,
        items=item_list,
        human_text=human_text,
        human=human,
        judge_text=[label_text(v, options.mapping, missing) for v in frame["judge"]] if has_judge else None,
        scores=_scores(frame, missing) if "score" in frame.columns else None,
        annotators=[str(a) for a in frame["annotator"]] if annotator_column else _anonymous(item_list, human),
        annotator_column=annotator_column,
        groups=[None if is_missing(g) else str(g) for g in frame["group"]] if "group" in frame.columns else None,
    )


def _require(frame: Frame, columns: list[str]) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise DataError(f"missing column(s) {missing}; the frame has {list(frame.columns)}")


def resolve_scale(frame: Frame, scale: AgreementScale, options: AgreementOptions) -> AgreementScale:
    """Fill in labels from the human answers when a categorical scale gives none."""
    if scale.kind != "categorical" or scale.labels is not None:
        return scale
    _require(frame, ["human"])
    missing = frozenset(options.missing_values)
    seen = {s for s in (label_text(v, options.mapping, missing) for v in frame["human"]) if s is not None}
    if not seen:
        raise DataError(f"no human labels to infer the label set from; pass {option('AgreementScale.labels')}")
    return scale.model_copy(update={"labels": sort_labels(seen)})


def _fill_policy(policy: str, scale: AgreementScale) -> tuple[int | None, float | None]:
    """The code / value an invalid answer becomes under `label:X`; checks `opposite` is usable."""
    categorical = scale.kind == "categorical"
    labels = scale.labels or []
    if policy == "opposite":
        if not categorical or len(labels) != 2:
            raise DataError(
                f"{option('AgreementOptions.invalid')} opposite needs exactly two labels (a binary task); "
                f"this scale has "
                f"{'values' if not categorical else len(labels)}: use as-wrong, drop or label:X"
            )
        return None, None
    if not policy.startswith("label:"):
        return None, None
    target = policy.removeprefix("label:")
    if categorical:
        if target not in labels:
            raise DataError(
                f"{option('AgreementOptions.invalid')} {policy}: {target!r} is not a label; labels are {labels}"
            )
        return labels.index(target), None
    fill_value = value_of(target, scale)
    if fill_value is None:
        raise DataError(f"{option('AgreementOptions.invalid')} {policy}: {target!r} is not a number on this scale")
    return None, fill_value


def _human_answers(texts: list[str | None], scale: AgreementScale) -> list[float | None]:
    """Each human answer's code (categorical) or value; an answer that is not on the scale is a user error."""
    categorical = scale.kind == "categorical"
    labels = scale.labels or []
    index = {lab: i for i, lab in enumerate(labels)}
    out: list[float | None] = []
    bad: list[str] = []
    for s in texts:
        if s is None:
            out.append(None)
        elif categorical:
            if s not in index:
                bad.append(s)
            out.append(float(index.get(s, -1)))
        else:
            v = value_of(s, scale)
            if v is None or not in_bounds(v, scale):
                bad.append(s)
            out.append(v)
    if not bad:
        return out
    if categorical:
        what = (
            f"labels are {labels} (use {option('AgreementOptions.mapping')} or {option('AgreementScale.labels')}, or "
            f"{option('AgreementOptions.missing_values')} for 'no answer')"
        )
    elif scale.min is None and scale.max is None:
        what = (
            f"a value scale expects numbers (or {option('AgreementScale.kind')} categorical; "
            f"{option('AgreementOptions.missing_values')} for 'no answer')"
        )
    else:
        what = f"the scale is {scale.min}..{scale.max}"
    raise DataError(f"unknown human answer(s) {sorted(set(bad))[:5]} ({len(bad)} row(s)); {what}")


def _scores(frame: Frame, missing: frozenset[str]) -> list[float | None]:
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


def _anonymous(items: list[str], human: list[float | None]) -> list[str]:
    """Without an annotator column: #1, #2 … by row order within each item; #0 for a row without an answer
    (it never enters the human matrix)."""
    seen_rows: Counter[str] = Counter()
    out = []
    for item, hv in zip(items, human, strict=True):
        if hv is None:
            out.append("#0")
            continue
        seen_rows[item] += 1
        out.append(f"#{seen_rows[item]}")
    return out
