"""What ``greval run DATA`` reads: a ``phoenix://`` address, a tracing tool's export recognised by its shape
(not its name), or — anything else, or whenever ``--map`` / ``--id-column`` are given — a plain table
(:class:`~greval.dataset.records.DataFile`).

Recognised exports: Phoenix spans (REST spans or a span dataframe: ``context.span_id`` + ``span_kind`` /
``attributes``), LangSmith runs (``run_type``) and dataset examples (``inputs`` + ``outputs``), Langfuse
observations (``traceId`` + an observation ``type``) and trace downloads (a trace with its ``observations``).
An OpenTelemetry (OTLP) file is named as such, in one line, rather than read as a table.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

from greval.dataset.limits import ReadLimits
from greval.dataset.records import DataFile
from greval.dataset.source import DataSource, Opened, register_recogniser
from greval.dataset.tables import check_file, iter_rows, read_json
from greval.errors import DataError, UserError, option
from greval.traces import langfuse, langsmith
from greval.traces.openinference import is_span_row
from greval.traces.phoenix import PhoenixRows, export_spans
from greval.traces.phoenix_address import is_phoenix_ref, parse_address
from greval.traces.source import TraceRows, group_traces
from greval.traces.spans import Span

__all__ = ["FORMATS", "open_data", "recognise", "sniff", "spans_of"]

#: Export kind -> what the notes call it.
FORMATS = {
    "phoenix": "Phoenix spans",
    "langsmith-runs": "LangSmith runs",
    "langsmith-examples": "LangSmith dataset examples",
    "langfuse-observations": "Langfuse observations",
    "langfuse-traces": "Langfuse traces",
}


def _whole_json(path: Path, limits: ReadLimits | None) -> Any:
    """A .json file's value (trace downloads are one object), read within the limits."""
    try:
        return read_json(path, limits)
    except DataError:
        return None  # the table reader says what is wrong with it, when the run reads the file


def _langfuse_traces(value: Any) -> list[Mapping[str, Any]] | None:
    if langfuse.is_trace_object(value):
        return [value]
    if isinstance(value, Mapping) and isinstance(value.get("traces"), list):
        value = value["traces"]
    if isinstance(value, list) and value and all(langfuse.is_trace_object(v) for v in value):
        return value
    return None


def sniff(path: Path, kind: str, limits: ReadLimits | None = None) -> str | None:
    """The export kind of a data file from its first row (None: a plain table); ``limits``: what reading it
    may cost."""
    if kind == "json":
        value = _whole_json(path, limits)
        if _langfuse_traces(value) is not None:
            return "langfuse-traces"
        if isinstance(value, Mapping) and ("resourceSpans" in value or "resource_spans" in value):
            raise DataError(
                f"{path}: an OpenTelemetry (OTLP) span export, which greval does not read as a file; send the spans "
                "to Phoenix and read phoenix://HOST:PORT/PROJECT, or export them from Phoenix as Parquet / JSONL"
            )
    try:
        first = next(iter_rows(path, limits), None)
    except DataError:
        return None  # the table reader reports it when the run reads the file
    if first is None:
        return None
    if "resourceSpans" in first or "resource_spans" in first:
        raise DataError(f"{path}: an OpenTelemetry (OTLP) span export; export the spans from Phoenix instead")
    if is_span_row(first):
        return "phoenix"
    if langsmith.is_run_row(first):
        return "langsmith-runs"
    if langfuse.is_observation_row(first):
        return "langfuse-observations"
    if langsmith.is_example_row(first):
        return "langsmith-examples"
    return None


def spans_of(path: Path, fmt: str, label: str, limits: ReadLimits | None) -> Iterator[Span]:
    """The spans of an export file of kind ``fmt`` (:func:`sniff`), streamed in file order (a trace download is
    read whole); what ``greval run`` groups into traces, and ``greval watch`` too, a trace's spans up to a cap."""

    if fmt == "langfuse-traces":
        traces = _langfuse_traces(_whole_json(path, limits))
        yield from langfuse.trace_spans(traces or [], label)
        return
    rows: Iterable[Mapping[str, Any]] = iter_rows(path, limits)
    readers: dict[str, Callable[[Iterable[Mapping[str, Any]], str], Iterator[Span]]] = {
        "phoenix": export_spans,
        "langsmith-runs": langsmith.run_spans,
        "langsmith-examples": langsmith.example_spans,
        "langfuse-observations": langfuse.observation_spans,
    }
    yield from readers[fmt](rows, label)


def open_data(
    data: str | Path,
    mapping: Mapping[str, str] | None,
    id_column: str | None,
    limit: int | None,
    limits: ReadLimits | None = None,
) -> DataFile | TraceRows:
    """The rows of ``greval run DATA``: a Phoenix project, a recognised trace export, or a plain table (a file
    read within ``limits``)."""

    if is_phoenix_ref(str(data)):
        if mapping or id_column:
            raise UserError(
                f"{option('mapping')} and {option('id_column')} apply to table files; a phoenix:// source maps its "
                "spans itself"
            )
        return PhoenixRows(parse_address(str(data)), limit)
    path, kind = check_file(data)  # a missing file or an unknown format fails here, before the store is opened
    fmt = None if mapping or id_column else sniff(path, kind, limits)
    if fmt is None:
        return DataFile(data, mapping, id_column, limit, limits)
    label = f"{path} ({FORMATS[fmt]})"
    return TraceRows(label, lambda: group_traces(spans_of(path, fmt, label, limits)), limit)


def recognise(source: DataSource) -> Opened | None:
    """A Phoenix project or a recognised trace export, opened (None: a plain table, read by the source itself)
    — the recogniser this module registers with :mod:`greval.dataset.source`."""
    opened = open_data(source.data, source.mapping, source.id_column, source.limit, source.limits)
    if not isinstance(opened, TraceRows):
        return None
    return Opened(
        rows=opened,
        where=str(source.data),
        read_notes=lambda: list(opened.notes),
        origin=opened.origin,
        after_run=opened.after_run,
    )


register_recogniser(recognise)
