"""Map judge/human tables onto the agreement frame's contract (files are read by greval.dataset.tables).

Formats: .csv, .tsv, .jsonl/.ndjson, .json (an array of objects), .parquet, each optionally .gz.
Nested fields are selected with dots (`scores.consistency`): JSON is flattened (as pandas.json_normalize
does), and dict-valued cells (e.g. Parquet structs) are walked key by key.

:func:`read_columns` reads a file as a :class:`~greval.dataset.frame.Frame` without pandas (what
``greval agreement`` reads); :func:`read_table` as a pandas DataFrame, for Python callers. CSV/TSV cells are
read as text with no "NA" list: only an empty cell is missing, so labels such as `NA`, `None`, `null`, `N/A`
or `nan` survive (the agreement stage treats as missing only what the user lists in `missing_values`). JSON
`null` and Parquet nulls stay missing.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, overload

from greval.agreement.prepare.answers import is_null
from greval.dataset import tables as dataset_tables
from greval.dataset.frame import Frame
from greval.dataset.limits import ReadLimits
from greval.errors import DataError, option

if TYPE_CHECKING:
    import pandas as pd

CONTRACT = ("item", "judge", "human", "annotator", "group")

AnyFrame = TypeVar("AnyFrame", "Frame", "pd.DataFrame")


def read_table(path: str | Path, as_text: bool = False, limits: ReadLimits | None = None) -> pd.DataFrame:
    """A judge/human table as a DataFrame, read by the one table reader (:func:`greval.dataset.tables.read_frame`)
    with nested JSON flattened, so nested keys become dotted columns.

    `as_text=True` reads CSV/TSV cells as strings with only the empty cell missing (labels such as "NA" or
    "None" would otherwise become NaN); the default keeps pandas' number parsing for other callers.
    ``limits``: what reading the file may cost (:class:`ReadLimits`' defaults when None).
    """
    return dataset_tables.read_frame(path, as_text=as_text, flatten=True, limits=limits)


def read_columns(path: str | Path, limits: ReadLimits | None = None) -> Frame:
    """A judge/human table as a :class:`Frame` (CSV/TSV cells as text, nested JSON flattened into dotted
    columns), read without pandas unless the file is Parquet."""
    return dataset_tables.read_columns(path, flatten=True, limits=limits)


def _walk(value: Any, keys: list[str]) -> Any:
    for key in keys:
        if not isinstance(value, dict) or key not in value:
            return None
        value = value[key]
    return value


@overload
def select(frame: Frame, column: str) -> list[Any]: ...
@overload
def select(frame: pd.DataFrame, column: str) -> pd.Series: ...
def select(frame: Frame | pd.DataFrame, column: str) -> list[Any] | pd.Series:
    """A column by name, or a dotted path into dict-valued cells; DataError when absent. A Frame's column is
    a list, a DataFrame's a Series."""
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
            if isinstance(frame, Frame):
                return values
            import pandas as pd

            return pd.Series(values, index=frame.index, name=column)
    shown = list(frame.columns)[:20]
    more = f" (+{len(frame.columns) - 20} more)" if len(frame.columns) > 20 else ""
    raise DataError(f"no column {column!r}; columns are {shown}{more}")


def _ids(col: Sequence[Any]) -> list[str | None]:
    """Item ids as text; a missing id stays missing (not the text "nan") so the stage can refuse it."""
    return [None if is_null(v) else str(v) for v in col]


def to_agreement_frame(
    raw: AnyFrame,
    judge: str | None,
    human: str | None,
    item: str | None = None,
    annotator: str | None = None,
    group: str | None = None,
    slices: Sequence[str] = (),
    extra: Sequence[str] = (),
    score: str | None = None,
) -> AnyFrame:
    """The contract frame: item, judge, human[, annotator][, group][, score] plus slice/extra columns; a Frame
    from a Frame, a DataFrame from a DataFrame.

    Without `item`, each row is its own item (row number), which is right for one human per row.
    `judge` may be None when `score` gives the judge's answer (labels come from a threshold, or only the
    AUCs are wanted); `human` may be None when only the judge's runs are compared (compute_consistency).
    """
    source = Frame.of(raw)
    out = Frame(rows=len(source))
    out["item"] = _ids(select(source, item)) if item else [str(i) for i in range(len(source))]
    if judge is not None:
        out["judge"] = select(source, judge)
    if human is not None:
        out["human"] = select(source, human)
    if annotator:
        out["annotator"] = [str(v) for v in select(source, annotator)]
    if group:
        out["group"] = select(source, group)
    if score:
        out["score"] = select(source, score)
    for col in [*slices, *extra]:
        if col in out.columns:
            continue  # e.g. a slice by group: slice on the mapped contract column
        if col in CONTRACT:
            raise DataError(f"column {col!r} is a reserved name here; map it with {option(col)} instead")
        out[col] = select(source, col)
    return out if isinstance(raw, Frame) else out.to_pandas()
