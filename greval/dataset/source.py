"""Where a run's records come from: one :class:`DataSource` and its :meth:`DataSource.open`.

A source is the data (a file path, a ``phoenix://`` address, a pandas DataFrame, a list of dicts or of Records,
a Hugging Face Dataset) with how to read it: the field mapping (greval field → column), the id column, a row
limit and the read limits. Every door that judges data — ``greval run``, ``greval.evaluate``, ``greval.run``,
``spec try``, the pytest fixture, the quick start — builds one and opens it here, so an option added to reading
reaches them all.

:meth:`DataSource.open` dispatches: an in-memory table is mapped and hashed now (pandas and datasets are
recognised without being imported: an object of theirs means its library is loaded already); a path is offered
to the registered recognisers first (the trace readers of :mod:`greval.traces` register theirs: a Phoenix
project, a LangSmith / Langfuse / Phoenix export recognised by its shape), and read as a table
(:class:`~greval.dataset.records.DataFile`, streamed a chunk at a time) when none takes it.
"""

from __future__ import annotations

import difflib
import importlib
import sys
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from greval.dataset.limits import ReadLimits
from greval.dataset.records import DataFile, HashedRow, Record, map_rows
from greval.dataset.tables import check_file
from greval.errors import DataError

#: A source's rows as the runner takes them: hashed rows or Records, read again each time they are iterated.
SourceRows = Iterable[HashedRow] | Iterable[Record]

#: What a run over traces does once it has finished (write verdicts back): (store, summary, specs) -> lines.
AfterRun = Callable[[Any, Any, Sequence[Any]], list[str]]


@dataclass
class Opened:
    """An opened source: its rows, what to call it, what reading it had to say (``notes``: read them after the
    rows were iterated — a streamed file notices repeated rows as it goes), and, for traces, where a record's
    fields come from (``origin``) and what to do once the run is over (``after_run``)."""

    rows: SourceRows
    where: str
    read_notes: Callable[[], list[str]] = lambda: []
    origin: Callable[[Sequence[str]], str] | None = None
    after_run: AfterRun | None = None
    #: Rows given (an in-memory table: before repeated rows were read once), else None (a stream).
    inputs: int | None = None

    @property
    def notes(self) -> list[str]:
        return self.read_notes()

    def fields(self) -> set[str] | None:
        """Every field some record has a value for (after the mapping); None for a streamed source (not read
        twice to find out)."""
        if self.inputs is None:
            return None
        return {k for r in self.rows for k in r.data}


#: A recogniser looks at a source whose data is a path and opens it when it is its kind (else None).
Recogniser = Callable[["DataSource"], Opened | None]

_RECOGNISERS: list[Recogniser] = []
#: Modules whose import registers their recognisers: imported by name on the first open of a path, so
#: ``greval.dataset`` depends on no reader of trace formats (they depend on it).
RECOGNISER_MODULES = ("greval.traces.detect",)


def register_recogniser(recogniser: Recogniser) -> Recogniser:
    """Offer ``recogniser`` every path a :class:`DataSource` opens (in registration order)."""
    if recogniser not in _RECOGNISERS:
        _RECOGNISERS.append(recogniser)
    return recogniser


class DataSource(BaseModel):
    """The data a run judges and how to read it (see the module doc). Frozen: one value passed down, never
    a dozen loose parameters."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)

    data: Any = Field(
        description="A file path or phoenix:// address, a pandas DataFrame, a list of dicts or Records, a Dataset."
    )
    mapping: dict[str, str] | None = Field(None, description="greval field -> column (dotted paths reach JSON).")
    id_column: str | None = Field(None, description="The column holding record ids (else id, else the content hash).")
    limit: int | None = Field(None, ge=1, description="Read only the first N records.")
    limits: ReadLimits | None = Field(None, description="What reading a file may cost.")
    name: str | None = Field(None, description="What to call the data in messages and runs (default: the path …).")

    @property
    def where(self) -> str:
        """What to call the data in messages (and the run's dataset)."""
        if self.name is not None:
            return self.name
        if isinstance(self.data, str | Path):
            return str(self.data)
        found = _table(self.data)
        return found[1] if found is not None else type(self.data).__name__

    def open(self) -> Opened:
        """The source's rows (see the module doc). A missing file, an unknown format or data of no known kind
        is a :class:`DataError` here, before any store is opened."""
        table = _table(self.data)
        if table is not None:
            return self._in_memory(table[0], self.name or table[1])
        if isinstance(self.data, str | Path):
            for name in RECOGNISER_MODULES:
                importlib.import_module(name)
            for recognise in _RECOGNISERS:
                opened = recognise(self)
                if opened is not None:
                    opened.where = self.name or opened.where
                    return opened
            return self._table_file()
        raise DataError(
            f"data: a {type(self.data).__name__} is not a dataset; pass a pandas DataFrame, a list of dicts, a "
            "Hugging Face Dataset or a file path"
        )

    def _in_memory(self, table: Iterable[Mapping[str, Any]] | list[Record], where: str) -> Opened:
        """An in-memory table mapped and hashed now (Records given as such are taken as they are)."""
        rows: Iterable[Mapping[str, Any]]
        if isinstance(table, list) and table and all(isinstance(r, Record) for r in table):
            if not (self.mapping or self.id_column):
                return Opened(rows=table[: self.limit] if self.limit else table, where=where, inputs=len(table))
            rows = [{"id": r.id, **r.data} for r in table]  # read again through the mapping
        else:
            rows = table  # type: ignore[assignment]  # a table of mappings (a list of Records is handled above)
        seen = [0]
        notes: list[str] = []
        found = list(map_rows(_counted(rows, seen), where, self.mapping, self.id_column, self.limit, notes))
        return Opened(rows=found, where=where, read_notes=lambda: list(notes), inputs=seen[0])

    def _table_file(self) -> Opened:
        """A plain table file, streamed (read again each time its rows are iterated)."""

        check_file(self.data)  # a missing file or an unknown format fails here, before the store is opened
        rows = DataFile(self.data, self.mapping, self.id_column, self.limit, self.limits)
        return Opened(rows=rows, where=self.where, read_notes=lambda: list(rows.notes))


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


def _table(data: Any) -> tuple[Iterable[Mapping[str, Any]] | list[Record], str] | None:
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
            return list(data), "the records"
        bad = next((i for i, r in enumerate(data) if not isinstance(r, Mapping)), None)
        if bad is not None:
            raise DataError(f"data: row {bad + 1} is a {type(data[bad]).__name__}, not a dict of fields")
        return data, "the list"
    return None


#: Names other evaluation libraries give greval's fields (DeepEval, Ragas, LangSmith …): a missing field's
#: message suggests the column to map.
ALIASES: dict[str, tuple[str, ...]] = {
    "question": ("user_input", "input", "query", "prompt"),
    "answer": ("response", "actual_output", "output", "prediction", "generated_answer"),
    "expected_answer": ("reference", "expected_output", "ground_truth", "ground_truths", "target", "gold"),
    "chunks": ("retrieved_contexts", "contexts", "retrieval_context", "context", "documents", "passages"),
}


def missing_field(
    required: Mapping[str, Sequence[str]], opened: Opened, mapping: Mapping[str, str] | None
) -> str | None:
    """A metric asked for whose required field no record has (``required``: metric name → its required
    fields), said in one line naming the field and the ``map=`` that fixes it; None when every metric can be fed
    (or the source is streamed: its records are skipped and counted instead)."""
    have = opened.fields()
    if have is None:
        return None
    for metric, fields in required.items():
        missing = [f for f in fields if f not in have]
        if not missing:
            continue
        name = missing[0]
        guess = next((c for c in ALIASES.get(name, ()) if c in have), None)
        guess = guess or next(iter(difflib.get_close_matches(name, sorted(have), n=1)), None)
        fix = dict(mapping or {}) | {name: guess or "YOUR_COLUMN"}
        return (
            f"{metric} needs the field {name!r}, which no record of {opened.where} has (fields: "
            f"{', '.join(sorted(have)) or 'none'}); map a column to it: map={fix!r}"
        )
    return None


__all__ = [
    "ALIASES",
    "AfterRun",
    "DataSource",
    "Opened",
    "Recogniser",
    "SourceRows",
    "missing_field",
    "register_recogniser",
]
