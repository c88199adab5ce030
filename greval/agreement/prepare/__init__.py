"""Turn the long (item, annotator) frame into aligned per-item arrays, counting every row it sets aside.

Three phases, each a function of its own: ``validate`` (the rows read on the scale, user mistakes refused),
``reduce_items`` (one record per item: its judge verdict, people's consensus, the invalid-answer policy) and
``build`` (the arrays every statistic reads); ``prepare`` runs them in turn.

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

from collections.abc import Mapping
from typing import TYPE_CHECKING

from greval.agreement.models import GROUPS_ARE_RECORDS, AgreementOptions, AgreementScale
from greval.agreement.prepare.answers import few, is_null, label_text, numbers
from greval.agreement.prepare.build import Prepared, build
from greval.agreement.prepare.reduce import MISSING, Reduced, reduce_items
from greval.agreement.prepare.validate import Rows, resolve_scale, validate
from greval.dataset.frame import Frame

if TYPE_CHECKING:
    import pandas as pd

CONFIDENCE_COLUMN = "judge_confidence"
"""The frame column with the judge's confidence in its answer (0..1; empty when it has none)."""

__all__ = [
    "CONFIDENCE_COLUMN",
    "MISSING",
    "Prepared",
    "Reduced",
    "Rows",
    "build",
    "few",
    "is_null",
    "label_text",
    "numbers",
    "prepare",
    "reduce_items",
    "resolve_scale",
    "validate",
]


def prepare(
    frame: Frame | pd.DataFrame,
    scale: AgreementScale,
    options: AgreementOptions,
    gold: Mapping[str, float | None] | None = None,
) -> Prepared:
    """Validate and reduce the frame (a Frame or a pandas DataFrame); raises DataError for user mistakes.
    ``gold``: each item's gold code / value in place of people's consensus (see reduce_items)."""
    table = Frame.of(frame)
    rows = validate(table, scale, options)
    prep = build(rows, reduce_items(rows, gold))
    prep.groups_are_records = bool(table.attrs.get(GROUPS_ARE_RECORDS))
    return prep
