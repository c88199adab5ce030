"""Read judge/human tables from files and map their columns onto the agreement frame's contract.

Formats: .csv, .tsv, .jsonl/.ndjson, .json (an array of objects), .parquet, each optionally .gz.
Nested fields are selected with dots (`scores.consistency`): JSON is flattened with pandas.json_normalize,
and dict-valued cells (e.g. Parquet structs) are walked key by key.

CSV/TSV cells are read as text with no "NA" list: only an empty cell is missing, so labels such as `NA`,
`None`, `null`, `N/A` or `nan` survive (the agreement stage treats as missing only what the user lists in
`--missing-values`). JSON `null` and Parquet nulls stay missing.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from greval.errors import DataError

CONTRACT = ("item", "judge", "human", "annotator", "group")


def _suffixes(path: Path) -> list[str]:
    parts = [s.lower() for s in path.suffixes]
    return parts[:-1] if parts and parts[-1] == ".gz" else parts


def read_table(path: str | Path, as_text: bool = False) -> pd.DataFrame:
    """Read a file into a DataFrame; JSON records are flattened so nested keys become dotted columns.

    `as_text=True` reads CSV/TSV cells as strings with only the empty cell missing (labels such as "NA" or
    "None" would otherwise become NaN); the default keeps pandas' number parsing for other callers.
    """
    p = Path(path)
    if not p.exists():
        raise DataError(f"{p}: no such file")
    kind = (_suffixes(p) or [""])[-1]
    compression = "gzip" if p.suffix.lower() == ".gz" else None
    try:
        if kind in (".csv", ".tsv", ".tab"):
            sep = "\t" if kind != ".csv" else ","
            if as_text:
                return pd.read_csv(p, sep=sep, compression="infer", dtype=str, keep_default_na=False, na_values=[""])
            return pd.read_csv(p, sep=sep, compression="infer")
        if kind == ".parquet":
            return pd.read_parquet(p)
        if kind in (".jsonl", ".ndjson", ".json"):
            opener = gzip.open if compression else open
            with opener(p, "rt", encoding="utf-8") as fh:
                text = fh.read()
            records: Any
            if kind == ".json":
                records = json.loads(text)
                if isinstance(records, dict):
                    records = next((v for v in records.values() if isinstance(v, list)), [records])
            else:
                records = [json.loads(line) for line in text.splitlines() if line.strip()]
            if not isinstance(records, list) or not all(isinstance(r, dict) for r in records):
                raise DataError(f"{p}: expected JSON objects (an array, or one per line)")
            return pd.json_normalize(records)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        if isinstance(exc, DataError):
            raise
        raise DataError(f"{p}: cannot read: {exc}") from exc
    raise DataError(f"{p}: unknown format {kind or '(none)'}; use csv, tsv, jsonl, json or parquet (.gz ok)")


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
    AUCs are wanted); `human` may be None when only the judge's runs are compared (--pair-by).
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
            continue  # e.g. --slice group: slice on the mapped contract column
        if col in CONTRACT:
            raise DataError(f"column {col!r} is a reserved name here; map it with --{col} instead")
        out[col] = select(raw, col)
    return out.reset_index(drop=True)
