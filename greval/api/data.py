"""What :func:`greval.evaluate` reads: a pandas DataFrame, a list of dicts, a Hugging Face ``datasets.Dataset``
or a file (anything ``greval run`` reads) → the hashed rows the runner takes, through the one mapping path
(:func:`greval.dataset.records.map_rows`). pandas and datasets are recognised without being imported: an
object of theirs means its library is loaded already.
"""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greval.dataset.records import HashedRow, Record, map_rows
from greval.errors import DataError
from greval.spec import BaseSpec
from greval.traces.source import TraceRows


@dataclass
class Rows:
    """The data's records (a row repeated exactly is read once), what to call the data in messages, and
    what reading it had to say."""

    rows: list[HashedRow]
    where: str
    inputs: int = 0
    notes: list[str] = field(default_factory=list)
    traces: TraceRows | None = None

    @property
    def ids(self) -> list[str]:
        return [r.id for r in self.rows]

    def fields(self) -> set[str]:
        """Every field some record has a value for (after ``map``)."""
        return {k for r in self.rows for k in r.data}


def _frame_rows(frame: Any) -> Iterator[dict[str, Any]]:
    """A DataFrame's rows as dicts, its columns' names as text (pandas' missing values stay missing)."""
    import pandas as pd

    columns = [str(c) for c in frame.columns]
    for values in frame.itertuples(index=False, name=None):
        yield {c: None if pd.api.types.is_scalar(v) and pd.isna(v) else v for c, v in zip(columns, values, strict=True)}


def _counted(rows: Iterable[Mapping[str, Any]], seen: list[int]) -> Iterator[Mapping[str, Any]]:
    for row in rows:
        seen[0] += 1
        yield row


def _table(data: Any) -> tuple[Iterable[Mapping[str, Any]], str] | None:
    """In-memory rows and their name, or None when ``data`` is not an in-memory table."""
    pandas = sys.modules.get("pandas")
    if pandas is not None and isinstance(data, pandas.DataFrame):
        twice = sorted({str(c) for c in data.columns[data.columns.duplicated()]})
        if twice:
            raise DataError(f"the DataFrame has several columns named {', '.join(map(repr, twice))}; rename them")
        return _frame_rows(data), "the DataFrame"
    hf = sys.modules.get("datasets")
    if hf is not None and isinstance(data, hf.DatasetDict):
        raise DataError(f"a DatasetDict holds several splits ({', '.join(data)}): pass one, e.g. data['test']")
    if hf is not None and isinstance(data, hf.Dataset):
        return iter(data), "the Dataset"
    if isinstance(data, Sequence) and not isinstance(data, str | bytes):
        if data and all(isinstance(r, Record) for r in data):  # greval.load_records' Records: their ids kept
            return ({"id": r.id, **r.data} for r in data), "the records"
        bad = next((i for i, r in enumerate(data) if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise DataError(f"data: row {bad + 1} is a {type(data[bad]).__name__}, not a dict of fields")
        return data, "the list"
    return None


def read_data(
    data: Any, mapping: Mapping[str, str] | None = None, id_column: str | None = None, limit: int | None = None
) -> Rows:
    """The data's records, mapped (``mapping``: greval field → column) and hashed, in the data's order.

    Ids come from ``id_column`` (else an ``id`` column, else each record's content hash) as
    :func:`greval.dataset.records.map_rows` reads them: ``1.0`` from a pandas column of integers with a missing
    value is ``1``; a record without an id among records with one (that missing value) is known by its content
    hash, as every record of data without ids is — a note names each change, and ``id_column`` given makes a
    missing id an error instead; a tuple, list, dict or bytes is refused rather than turned into its text."""
    table = _table(data)
    if table is not None:
        rows, where = table
        seen = [0]
        notes: list[str] = []
        found = list(map_rows(_counted(rows, seen), where, mapping, id_column, limit, notes))
        return Rows(rows=found, where=where, inputs=seen[0], notes=notes)
    if isinstance(data, str | Path):
        from greval.traces.detect import open_data

        source = open_data(data, mapping, id_column, limit)
        found = list(source)
        traces = source if isinstance(source, TraceRows) else None
        return Rows(rows=found, where=str(data), inputs=len(found), notes=list(source.notes), traces=traces)
    raise DataError(
        f"data: a {type(data).__name__} is not a dataset; pass a pandas DataFrame, a list of dicts, a Hugging Face "
        "Dataset or a file path"
    )


#: Names other evaluation libraries give greval's fields (DeepEval, Ragas, LangSmith …): a missing field's
#: message suggests the column to map.
ALIASES: dict[str, tuple[str, ...]] = {
    "question": ("user_input", "input", "query", "prompt"),
    "answer": ("response", "actual_output", "output", "prediction", "generated_answer"),
    "expected_answer": ("reference", "expected_output", "ground_truth", "ground_truths", "target", "gold"),
    "chunks": ("retrieved_contexts", "contexts", "retrieval_context", "context", "documents", "passages"),
}


def check_inputs(specs: Sequence[BaseSpec], rows: Rows, mapping: Mapping[str, str] | None) -> None:
    """A metric asked for whose required field no record has is the caller's mistake, said in one line naming
    the field and the ``map=`` that fixes it (rather than every record skipped)."""
    have = rows.fields()
    for spec in specs:
        missing = [f for f in spec.required_inputs() if f not in have]
        if not missing:
            continue
        name = missing[0]
        guess = next((c for c in ALIASES.get(name, ()) if c in have), None)
        guess = guess or next(iter(difflib.get_close_matches(name, sorted(have), n=1)), None)
        fix = dict(mapping or {}) | {name: guess or "YOUR_COLUMN"}
        raise DataError(
            f"{spec.name} needs the field {name!r}, which no record of {rows.where} has (fields: "
            f"{', '.join(sorted(have)) or 'none'}); map a column to it: map={fix!r}"
        )
