"""Writing verdicts to a file (``greval results export``, :func:`export_results`): CSV, JSONL or Parquet.

The rows are :func:`greval.store.results.result_rows`, the ones ``load_results`` shows, written as they are
read from the store: an export's memory does not grow with the store (a test holds a large store's export to
the peak of a small one's). Every file has the same columns in the same order, whatever the rows hold; a
JSON value (``outputs``, a record's ``counts``) is JSON text in CSV and Parquet and an object in JSONL. The
file is written beside its destination and moved there once complete: an export that fails leaves no half
file behind. It is readable by the owner only (0600, :func:`greval.paths.private_output`): it holds their
records and verdicts, as the store does.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from greval.errors import UserError
from greval.paths import private_output
from greval.store.backend import batched
from greval.store.results import ITEM_COLUMNS, RECORD_COLUMNS, result_rows
from greval.store.store import Store

if TYPE_CHECKING:
    import pyarrow as pa

#: Each exported column's type (Parquet's schema; ``json``: a mapping, written as JSON text where the format
#: has no objects). The columns of both levels are here.
COLUMN_TYPES: dict[str, Literal["str", "int", "float", "json"]] = {
    "spec": "str",
    "spec_hash": "str",
    "judge": "str",
    "record_id": "str",
    "record_hash": "str",
    "item_id": "str",
    "status": "str",
    "items": "int",
    "items_ok": "int",
    "units": "float",
    "counts": "json",
    "label": "str",
    "value": "int",
    "score": "float",
    "confidence": "float",
    "reason": "str",
    "error": "str",
    "outputs": "json",
    "tokens_in": "int",
    "tokens_cached": "int",
    "tokens_out": "int",
    "latency_ms": "float",
    "attempts": "int",
    "run_id": "str",
    "created_at": "float",
    "updated_at": "float",
    "token_confidence": "float",
}

_FORMATS = {"csv": "csv", "jsonl": "jsonl", "ndjson": "jsonl", "parquet": "parquet", "pq": "parquet"}

#: Rows per Parquet row group (and per batch held in memory while writing one).
PARQUET_BATCH = 2000


def export_results(
    store: str | Path,
    output: str | Path,
    fmt: str | None = None,
    spec: str | None = None,
    level: Literal["item", "record"] = "item",
    *,
    all_versions: bool = False,
) -> int:
    """Write verdicts to CSV, JSONL or Parquet (format from ``fmt`` or the file's suffix); returns rows. Of each
    metric's production version (``spec``: NAME or NAME@HASH; ``all_versions``: every version but those only
    experiments judged: :func:`greval.store.results.result_rows`)."""
    out = Path(output)
    kind = _FORMATS.get((fmt or out.suffix.lstrip(".")).lower())
    if kind is None:
        raise UserError(f"unknown export format {(fmt or out.suffix.lstrip('.'))!r}; use csv, jsonl or parquet")
    columns = ITEM_COLUMNS if level == "item" else RECORD_COLUMNS
    with Store(store) as st, private_output(out) as part:
        n = _WRITERS[kind](result_rows(st, spec, level, all_versions=all_versions), columns, part)
    return n


def _flat(row: Mapping[str, Any], columns: Sequence[str]) -> list[Any]:
    """A row's values in column order, mappings as JSON text."""
    return [_json(row.get(c)) if COLUMN_TYPES[c] == "json" else row.get(c) for c in columns]


def _json(value: Any) -> str | None:
    return None if value is None else json.dumps(value, ensure_ascii=False)


def _csv(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], path: Path) -> int:
    n = 0
    with path.open("w", encoding="utf-8", newline="") as f:
        out = csv.writer(f)
        out.writerow(columns)
        for row in rows:
            out.writerow(_flat(row, columns))  # None: an empty field
            n += 1
    return n


def _jsonl(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], path: Path) -> int:
    n = 0
    with path.open("w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps({c: row.get(c) for c in columns}, ensure_ascii=False) + "\n")
            n += 1
    return n


def _arrow_schema(columns: Sequence[str]) -> pa.Schema:
    import pyarrow as pa

    types = {"str": pa.string(), "json": pa.string(), "int": pa.int64(), "float": pa.float64()}
    return pa.schema([(c, types[COLUMN_TYPES[c]]) for c in columns])


def _parquet(rows: Iterable[Mapping[str, Any]], columns: Sequence[str], path: Path) -> int:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = _arrow_schema(columns)
    n = 0
    with pq.ParquetWriter(path, schema) as out:
        for batch in batched(rows, PARQUET_BATCH):
            values = zip(*(_flat(r, columns) for r in batch), strict=True)  # column by column
            arrays = [pa.array(list(col), type=field.type) for col, field in zip(values, schema, strict=True)]
            out.write_table(pa.Table.from_arrays(arrays, schema=schema))
            n += len(batch)
        if n == 0:
            out.write_table(schema.empty_table())
    return n


_WRITERS: dict[str, Callable[[Iterable[Mapping[str, Any]], Sequence[str], Path], int]] = {
    "csv": _csv,
    "jsonl": _jsonl,
    "parquet": _parquet,
}
