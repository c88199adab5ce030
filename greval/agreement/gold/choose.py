"""From the agreement frame to the gold: people's answers read as the stage reads them (validate and reduce:
the same labels, relabelling, missing answers and refusals), the gold estimated over them, and what the report
needs of them — each item's gold in the prepare step's terms, each annotator's answers and answer times."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any

import numpy as np

from greval.agreement.gold.estimate import Answers, Gold, estimate_gold
from greval.agreement.models import AgreementOptions, AgreementScale, GoldChoice
from greval.agreement.prepare import Prepared, is_null, label_text, reduce_items, validate
from greval.agreement.prepare.answers import sort_labels
from greval.dataset.frame import Frame
from greval.errors import DataError, option

ANSWERED_AT = "answered_at"
"""The frame column with when each person answered (epoch seconds or ISO 8601; optional): labels per hour."""

MAX_CATEGORIES = 20
"""A label model on a value scale reads each distinct value as a category; more than this are not categories."""


@dataclass
class Chosen:
    """The gold of a frame and people's answers beside it."""

    gold: Gold
    answers: Answers
    values: dict[str, float | None]
    """Each item's gold as the prepare step reads it (a label code, or a value scale's value); None: tied."""
    times: dict[str, list[float]] = field(default_factory=dict)
    """Each annotator's answer times (epoch seconds), when the frame has an ``answered_at`` column."""
    given: dict[str, int] = field(default_factory=dict)
    """Each annotator's answers in all."""

    @property
    def adjudicators(self) -> set[str]:
        return set(self.gold.choice.adjudicators)


def choose_gold(frame: Frame, scale: AgreementScale, options: AgreementOptions, choice: GoldChoice) -> Chosen:
    """The gold of every item people answered, under ``choice``; DataError for a choice the frame cannot meet."""
    rows = validate(frame, scale, options)
    if not rows.annotator_column and choice.method != "majority":
        raise DataError(
            f"{option('gold')} {choice.method} tells people apart: give the annotator column ({option('annotator')})"
        )
    red = reduce_items(rows)
    people = {i: red.items[i].humans for i in red.order if red.items[i].humans}
    if rows.categorical:
        answers = Answers(list(rows.labels), {i: {a: int(v) for a, v in h.items()} for i, h in people.items()})
    else:
        answers = _value_answers(people, choice)
    gold = estimate_gold(answers, choice, options.seed)
    values = {i: (None if c is None else _value(answers, c, rows.categorical)) for i, c in gold.codes.items()}
    given: dict[str, int] = {}
    for h in people.values():
        for a in h:
            given[a] = given.get(a, 0) + 1
    times = _times(frame, rows.annotators, rows.human) if ANSWERED_AT in frame.columns else {}
    return Chosen(gold, answers, values, times, given)


def _value(answers: Answers, code: int, categorical: bool) -> float:
    return float(code) if categorical else float(answers.labels[code])


def _value_answers(people: dict[str, dict[str, float]], choice: GoldChoice) -> Answers:
    """A value scale's answers with each distinct value a category (labels: the values as text)."""
    texts = {v: str(label_text(v, {})) for h in people.values() for v in h.values()}
    labels = sort_labels(set(texts.values()))
    if choice.method != "annotator" and len(labels) > MAX_CATEGORIES:
        raise DataError(
            f"{option('gold')} {choice.method} reads each value as a category; people gave {len(labels)} distinct "
            f"values (more than {MAX_CATEGORIES}): choose an annotator's labels, or give a categorical scale"
        )
    index = {lab: n for n, lab in enumerate(labels)}
    return Answers(labels, {i: {a: index[texts[v]] for a, v in h.items()} for i, h in people.items()})


def _times(frame: Frame, annotators: list[str], human: list[float | None]) -> dict[str, list[float]]:
    """Each annotator's answer times (rows with an answer and a time)."""
    out: dict[str, list[float]] = {}
    for who, answer, when in zip(annotators, human, frame[ANSWERED_AT], strict=True):
        if answer is None or is_null(when) or (isinstance(when, str) and not when.strip()):
            continue
        out.setdefault(who, []).append(_seconds(when))
    return out


def _seconds(when: Any) -> float:
    """An answer time as epoch seconds: a number, a datetime, or ISO 8601 text."""
    if isinstance(when, datetime):
        return when.timestamp()
    if isinstance(when, int | float | np.number) and math.isfinite(float(when)):
        return float(when)
    try:
        return datetime.fromisoformat(str(when).strip()).timestamp()
    except ValueError:
        raise DataError(
            f"{ANSWERED_AT}: {str(when)[:40]!r} is not a time (epoch seconds or ISO 8601, e.g. 2025-01-31T09:30:00)"
        ) from None


def gold_rows(frame: Frame, chosen: Chosen) -> Frame:
    """One row per item with a gold, its human answer the gold label (its other columns the item's first row's):
    the judge's calibration against the gold, each item once."""
    first: dict[str, int] = {}
    for r, item in enumerate(frame["item"]):
        key = label_text(item, {})
        if key is not None and key not in first and chosen.gold.codes.get(key) is not None:
            first[key] = r
    rows = frame.take(list(first.values()))
    rows["human"] = [chosen.gold.items[key].label for key in first]
    return rows.without("annotator") if "annotator" in rows.columns else rows


def people_only(prep: Prepared, adjudicators: set[str]) -> Prepared:
    """``prep`` with the adjudicators' rows taken out of the ceiling's annotators × items matrix: they settle
    the gold, they are not one more reviewer."""
    if not adjudicators or prep.human_matrix is None:
        return prep
    keep = [n for n, a in enumerate(prep.annotators) if a not in adjudicators]
    return replace(prep, annotators=[prep.annotators[n] for n in keep], human_matrix=prep.human_matrix[keep])
