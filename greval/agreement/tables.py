"""Map judge/human tables onto the agreement frame's contract (files are read by greval.dataset.tables).

Formats: .csv, .tsv, .jsonl/.ndjson, .json (an array of objects), .parquet, each optionally .gz.
Nested fields are selected with dots (`scores.consistency`): JSON is flattened with pandas.json_normalize,
and dict-valued cells (e.g. Parquet structs) are walked key by key.

CSV/TSV cells are read as text with no "NA" list: only an empty cell is missing, so labels such as `NA`,
`None`, `null`, `N/A` or `nan` survive (the agreement stage treats as missing only what the user lists in
`missing_values`). JSON `null` and Parquet nulls stay missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from greval.dataset.limits import ReadLimits
from greval.dataset.tables import read_frame
from greval.errors import DataError, option

CONTRACT = ("item", "judge", "human", "annotator", "group")


def read_table(path: str | Path, as_text: bool = False, limits: ReadLimits | None = None) -> pd.DataFrame:
    """A judge/human table as a DataFrame, read by the one table reader (:func:`greval.dataset.tables.read_frame`)
    with nested JSON flattened, so nested keys become dotted columns.

    `as_text=True` reads CSV/TSV cells as strings with only the empty cell missing (labels such as "NA" or
    "None" would otherwise become NaN); the default keeps pandas' number parsing for other callers.
    ``limits``: what reading the file may cost (:class:`ReadLimits`' defaults when None).
    """
    return read_frame(path, as_text=as_text, flatten=True, limits=limits)


def _walk(value: Any, keys: list[str]) -> Any:
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


def select(frame: pd.DataFrame, column: str) -> pd.Series:
    """A column by name, or a dotted path into dict-valued cells; DataError when absent."""
    if column in frame.columns:
        return frame[column]
    parts = column.split(".")
    for cut in range(len(parts) - 1, 0, -1):
        head = ".".join(parts[:cut])
        if head in frame.columns:
            rest = parts[cut:]
            values = [_walk(v, rest) for v in frame[head]]
            if all(v is None for v in values):
                break
            return pd.Series(values, index=frame.index, name=column)
    shown = list(frame.columns)[:20]
    more = f" (+{len(frame.columns) - 20} more)" if len(frame.columns) > 20 else ""
    raise DataError(f"no column {column!r}; columns are {shown}{more}")


def _ids(col: pd.Series) -> list[str | None]:
    """Item ids as text; a missing id stays missing (not the text "nan") so the stage can refuse it."""
    return [None if v is None or v is pd.NA or (isinstance(v, float) and v != v) else str(v) for v in col]


def to_agreement_frame(
    raw: pd.DataFrame,
    judge: str | None,
    human: str | None,
    item: str | None = None,
    annotator: str | None = None,
    group: str | None = None,
    slices: Sequence[str] = (),
    extra: Sequence[str] = (),
    score: str | None = None,
) -> pd.DataFrame:
    """The contract frame: item, judge, human[, annotator][, group][, score] plus slice/extra columns.

    Without `item`, each row is its own item (row number), which is right for one human per row.
    `judge` may be None when `score` gives the judge's answer (labels come from a threshold, or only the
    AUCs are wanted); `human` may be None when only the judge's runs are compared (compute_consistency).
    """
    out = pd.DataFrame(index=raw.index)
    out["item"] = _ids(select(raw, item)) if item else [str(i) for i in range(len(raw))]
    if judge is not None:
        out["judge"] = select(raw, judge)
    if human is not None:
        out["human"] = select(raw, human)
    if annotator:
        out["annotator"] = select(raw, annotator).astype(str)
    if group:
        out["group"] = select(raw, group)
    if score:
        out["score"] = select(raw, score)
    for col in [*slices, *extra]:
        if col in out.columns:
            continue  # e.g. a slice by group: slice on the mapped contract column
        if col in CONTRACT:
            raise DataError(f"column {col!r} is a reserved name here; map it with {option(col)} instead")
        out[col] = select(raw, col)
    return out.reset_index(drop=True)
