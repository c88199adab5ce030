"""Where a watch reads traces from, a page at a time, after a position: a Phoenix project (its root spans in the
order Phoenix stored them) or a folder where trace exports land (OTLP JSON, LangSmith, Langfuse and Phoenix
exports; each file once, in the order of its modification time).

A position is a small JSON list, compared as a list: ``[rowid]`` of the last root span read (Phoenix), or
``[mtime_ns, name, traces read, finished]`` of a file (folder). The store keeps one per metric
(:mod:`greval.store.watch`). What a source cannot read is said in one line and counted, never raised: a span that
does not parse (its trace is not judged), a trace with more spans than the cap (not read further: its spans are
dropped as they arrive, so memory stays bounded), a file that is no trace export. A source that cannot be reached
raises :class:`SourceError`, which the watch retries with back-off.
"""

from __future__ import annotations

import base64
import functools
import itertools
import json
import os
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from greval.dataset.limits import ReadLimits
from greval.dataset.tables import check_file, iter_rows
from greval.errors import DataError, GrevalError, first_line
from greval.traces.assemble import root_of
from greval.traces.detect import FORMATS, sniff, spans_of
from greval.traces.openinference import span_from_row
from greval.traces.phoenix import PhoenixRows
from greval.traces.phoenix_address import (
    KEY_ENV,
    TIMEOUT_S,
    PhoenixAddress,
    is_phoenix_ref,
    parse_address,
    phoenix_error,
)
from greval.traces.source import TraceRows
from greval.traces.spans import Span, parse_time
from greval.watch.otlp import is_otlp, otlp_row, otlp_rows, raw_spans, starts_otlp, stream_spans, trace_of

__all__ = [
    "FolderSource",
    "Page",
    "PhoenixSource",
    "SeenTrace",
    "SourceError",
    "WatchSource",
    "open_source",
    "otlp_rows",
    "position_of",
    "position_text",
]

#: Spans asked of Phoenix per request (its API's maximum).
_SPANS_PER_REQUEST = 1000
#: Traces whose spans are asked in one request.
_TRACES_PER_REQUEST = 50


class SourceError(GrevalError):
    """A source that cannot be read now (one line). ``transient``: unreachable or failing (retried with back-off);
    else it refused the request or has no such project (``--once`` exits; a service keeps retrying: a project
    appears with its first trace)."""

    def __init__(self, message: str, *, transient: bool) -> None:
        super().__init__(message)
        self.transient = transient


@dataclass
class SeenTrace:
    """One trace as a source read it: where it is, its spans (none when it has a ``problem``), its root span's
    attributes (or metadata) and when it started (Unix seconds)."""

    position: list[Any]
    trace_id: str
    spans: list[Span]
    attributes: Mapping[str, Any]
    started: float
    problem: str | None = None


@dataclass
class Page:
    """Traces read together, and the position after them."""

    traces: list[SeenTrace]
    end: list[Any]
    notes: list[str] = field(default_factory=list)


class WatchSource:
    """What a watch reads: ``pages(after, size)``, and how a page's traces become rows (and go back)."""

    label: str = ""
    key: str = ""
    writes_back = False

    def pages(self, after: list[Any] | None, size: int) -> Iterator[Page]:
        raise NotImplementedError

    def rows(self, traces: Sequence[Sequence[Span]]) -> TraceRows:
        """A page's traces as rows (iterate them: each trace one record; ``places`` says where verdicts go)."""
        return TraceRows(self.label, lambda: traces)

    def close(self) -> None:
        """Release what the source holds open (its HTTP connection)."""


def _started(spans: Sequence[Span], default: float) -> float:
    root = root_of(spans)
    return root.start.timestamp() if root.start is not None else default


# ------------------------------------------------------------------------------------------------ Phoenix
def _rowid(global_id: str) -> int:
    """Phoenix's span row id from its GraphQL global id (``base64("Span:123")``)."""
    try:
        _, _, node = base64.b64decode(global_id).decode().partition(":")
        return int(node)
    except (ValueError, UnicodeDecodeError):
        raise SourceError(
            f"a span id Phoenix gave is not one greval knows: {global_id[:40]!r}", transient=False
        ) from None


def _settled(cutoff: float, row: Mapping[str, Any]) -> bool:
    """Whether a root span ended before ``cutoff`` (Unix seconds; one without an end counts as ended)."""
    ended = parse_time(row.get("end_time"))
    return ended is None or ended.timestamp() <= cutoff


def _cursor(rowid: int) -> str:
    return base64.b64encode(f"Span:{rowid}".encode()).decode()


class PhoenixSource(WatchSource):
    """A Phoenix project, read through its REST API: root spans in the order Phoenix stored them (``sort=id``),
    then each page's spans, at most ``max_spans`` per trace. A root span that ended less than ``settle_s`` ago is
    left, with every root after it, for the next pass: Phoenix stores the spans it receives a batch at a time, so
    a trace's last spans may land just after its root."""

    writes_back = True

    def __init__(self, addr: PhoenixAddress, max_spans: int, settle_s: float = 0.0) -> None:
        self.addr = addr
        self.max_spans = max_spans
        self.settle_s = settle_s
        self.label = addr.label
        self.key = f"phoenix {addr.base_url} {addr.project}" + (f" root={addr.root}" if addr.root else "")
        key = os.environ.get(KEY_ENV)
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        self._http = httpx.Client(base_url=addr.base_url, headers=headers, timeout=TIMEOUT_S)
        self._url = f"/v1/projects/{quote(addr.project, safe='')}/spans"

    def close(self) -> None:
        self._http.close()

    def _get(self, params: Mapping[str, Any]) -> dict[str, Any]:
        try:
            got = self._http.get(self._url, params={**params, "sort": "id", "order": "asc"})
            got.raise_for_status()
            body = got.json()
        except httpx.HTTPStatusError as exc:
            code = exc.response.status_code
            raise SourceError(str(phoenix_error(self.addr, exc)), transient=code >= 500 or code == 429) from None
        except (httpx.HTTPError, ValueError) as exc:
            raise SourceError(
                f"{self.label}: cannot reach Phoenix ({type(exc).__name__}: {exc})", transient=True
            ) from None
        if not isinstance(body, dict) or not isinstance(body.get("data"), list):
            raise SourceError(f"{self.label}: Phoenix answered something that is not a page of spans", transient=True)
        return body

    def _roots(self, after: int, size: int) -> list[dict[str, Any]]:
        params: dict[str, Any] = {"parent_id": "null", "limit": size}
        if after:
            params["cursor"] = _cursor(after + 1)
        if self.addr.start is not None:
            params["start_time"] = self.addr.start.isoformat()
        if self.addr.end is not None:
            params["end_time"] = self.addr.end.isoformat()
        if self.addr.root:
            params["name"] = [self.addr.root]
        rows: list[dict[str, Any]] = self._get(params)["data"]
        ids = [_rowid(str(r.get("id", ""))) for r in rows]
        if ids != sorted(ids) or (ids and ids[0] <= after):
            raise SourceError(
                f"{self.label}: this Phoenix does not list spans in the order it stored them (sort=id); "
                "greval watch needs Phoenix 20 or later",
                transient=False,
            )
        return rows

    def pages(self, after: list[Any] | None, size: int) -> Iterator[Page]:
        last = int(after[0]) if after else 0
        while True:
            found = self._roots(last, size)
            roots = list(itertools.takewhile(functools.partial(_settled, time.time() - self.settle_s), found))
            if roots:
                yield self._page(roots)
                last = _rowid(str(roots[-1]["id"]))
            if len(roots) < size:
                return

    def _page(self, roots: Sequence[Mapping[str, Any]]) -> Page:
        order = [str(r["context"]["trace_id"]) for r in roots]
        found = _Collected(self.max_spans, self.label)
        for i in range(0, len(order), _TRACES_PER_REQUEST):
            self._spans_of(order[i : i + _TRACES_PER_REQUEST], found)
        now = time.time()
        traces = []
        for root in roots:
            tid = str(root["context"]["trace_id"])
            attrs = root.get("attributes") if isinstance(root.get("attributes"), Mapping) else {}
            spans = found.spans.get(tid, [])
            started = _started(spans, now) if spans else now
            pos = [_rowid(str(root["id"]))]
            traces.append(SeenTrace(pos, tid, [] if tid in found.problems else spans, attrs or {}, started,
                                    found.problems.get(tid)))  # fmt: skip
        return Page(traces, traces[-1].position, found.notes())

    def _spans_of(self, trace_ids: Sequence[str], found: _Collected) -> None:
        """Every span of ``trace_ids`` (a trace past the cap is dropped from the next requests)."""
        wanted = list(trace_ids)
        cursor: str | None = None
        while wanted:
            params: dict[str, Any] = {"trace_id": wanted, "limit": _SPANS_PER_REQUEST}
            if cursor:
                params["cursor"] = cursor
            body = self._get(params)
            for row in body["data"]:
                found.add(row)
            cursor = body.get("next_cursor")
            if not cursor or not body["data"]:
                return
            wanted = [t for t in wanted if t not in found.oversize]

    def rows(self, traces: Sequence[Sequence[Span]]) -> TraceRows:

        rows = PhoenixRows(self.addr)
        rows.read = lambda: traces
        return rows


class _Collected:
    """Spans of a page's traces as they arrive: parsed one by one (a span that does not parse spoils its trace
    alone), at most ``cap`` per trace (the rest dropped as they come)."""

    def __init__(self, cap: int, label: str) -> None:
        self.cap = cap
        self.label = label
        self.spans: dict[str, list[Span]] = {}
        self.counts: dict[str, int] = {}
        self.problems: dict[str, str] = {}
        self.oversize: set[str] = set()

    def add(self, row: Mapping[str, Any], trace_id: str | None = None, where: str | None = None) -> None:
        ctx = row.get("context") if isinstance(row.get("context"), Mapping) else {}
        tid = str(trace_id or (ctx or {}).get("trace_id") or "")
        if not tid:
            self.problems.setdefault("", f"{self.label}: a span without a trace id")
            return
        n = self.counts[tid] = self.counts.get(tid, 0) + 1
        if n > self.cap:
            if tid not in self.oversize:
                self.oversize.add(tid)
                self.spans.pop(tid, None)
                self.problems[tid] = f"{self.label}: trace {tid} has more than {self.cap} spans: not judged"
            return
        if tid in self.problems:
            return
        try:
            span = span_from_row(row, where or f"{self.label}: span {(ctx or {}).get('span_id')}")
        except (DataError, ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            self.problems[tid] = f"{self.label}: trace {tid}: a span does not parse ({first_line(exc)}): not judged"
            self.spans.pop(tid, None)
            return
        self.spans.setdefault(tid, []).append(span)

    def notes(self) -> list[str]:
        return [p for t, p in self.problems.items() if t]


# ------------------------------------------------------------------------------------------------ folder
_SUFFIXES = (".json", ".jsonl", ".ndjson", ".csv", ".tsv", ".parquet", ".gz")


class FolderSource(WatchSource):
    """A folder where trace exports land: each file once, in order of (modification time, name), once it is
    ``settle_s`` old (a file still being written is left for the next pass)."""

    def __init__(self, folder: Path, max_spans: int, settle_s: float, limits: ReadLimits | None = None) -> None:
        if not folder.is_dir():
            raise DataError(f"{folder}: not a folder (greval watch reads a Phoenix project or a folder of exports)")
        self.folder = folder
        self.max_spans = max_spans
        self.settle_s = settle_s
        self.limits = limits
        self.label = f"folder {folder}"
        self.key = f"folder {folder.resolve()}"

    def _files(self) -> list[tuple[int, str]]:
        now = time.time_ns()
        out = []
        for entry in os.scandir(self.folder):
            if entry.name.startswith(".") or not entry.name.lower().endswith(_SUFFIXES):
                continue
            try:
                st = entry.stat()
            except OSError:
                continue
            if entry.is_file() and st.st_size > 0 and now - st.st_mtime_ns >= self.settle_s * 1e9:
                out.append((st.st_mtime_ns, entry.name))
        return sorted(out)

    def pages(self, after: list[Any] | None, size: int) -> Iterator[Page]:
        for mtime, name in self._files():
            start = 0
            if after:
                here = [mtime, name]
                if here < after[:2] or (here == after[:2] and after[3]):
                    continue
                start = int(after[2]) if here == after[:2] else 0
            yield from self._file_pages(mtime, name, start, size)

    def _file_pages(self, mtime: int, name: str, start: int, size: int) -> Iterator[Page]:
        path = self.folder / name
        traces, notes = self._read(path, mtime / 1e9)
        if start >= len(traces):
            yield Page([], [mtime, name, len(traces), 1], notes)
            return
        for i in range(start, len(traces), size):
            chunk = traces[i : i + size]
            done = i + len(chunk)
            for k, t in enumerate(chunk):
                t.position = [mtime, name, i + k + 1, int(i + k + 1 == len(traces))]
            yield Page(chunk, [mtime, name, done, int(done == len(traces))], notes if i == start else [])

    def _read(self, path: Path, landed: float) -> tuple[list[SeenTrace], list[str]]:
        """A file's traces (its problems said in lines); a file that is no trace export: none, and one line."""
        try:
            found = _Collected(self.max_spans, str(path))
            roots = self._collect(path, found)
        except DataError as exc:
            return [], [f"{path}: not read ({first_line(exc)})"]
        traces = []
        for tid, spans in found.spans.items():
            attrs = roots.get(tid) or (root_of(spans).metadata if spans else {})
            traces.append(SeenTrace([], tid, spans, attrs, _started(spans, landed)))
        for tid, problem in found.problems.items():
            if tid:
                traces.append(SeenTrace([], tid, [], roots.get(tid) or {}, landed, problem))
        return traces, found.notes()

    def _collect(self, path: Path, found: _Collected) -> dict[str, Mapping[str, Any]]:
        """Read ``path``'s spans into ``found``; the root spans' attributes, when the format keeps them."""

        _, kind = check_file(path)
        roots: dict[str, Mapping[str, Any]] = {}
        limits = self.limits or ReadLimits()
        if kind == "json" and starts_otlp(path, limits):  # OTLP JSON, a request per file: read as it streams
            _otlp_spans(stream_spans(path, limits), found, roots)
            return roots
        if kind == "jsonl":  # …or a request per line (the collector's file exporter)
            first = next(iter_rows(path, limits), None)
            if isinstance(first, Mapping) and is_otlp(first):
                _otlp_spans((sp for doc in iter_rows(path, limits) for sp in raw_spans(doc)), found, roots)
                return roots
        fmt = sniff(path, kind, self.limits)
        if fmt is None:
            raise DataError("no trace export: OTLP JSON, or a Phoenix, LangSmith or Langfuse export")
        if fmt == "phoenix":
            _phoenix_rows(iter_rows(path, self.limits), found, roots)
            return roots
        for span in spans_of(path, fmt, f"{path} ({FORMATS[fmt]})", self.limits):
            _add_span(found, span)
        return roots


def _add_span(found: _Collected, span: Span) -> None:
    """A span read by another tool's reader, counted against the cap as :meth:`_Collected.add` does."""
    tid = span.trace_id
    n = found.counts[tid] = found.counts.get(tid, 0) + 1
    if n > found.cap:
        if tid not in found.oversize:
            found.oversize.add(tid)
            found.spans.pop(tid, None)
            found.problems[tid] = f"{found.label}: trace {tid} has more than {found.cap} spans: not judged"
        return
    found.spans.setdefault(tid, []).append(span)


def _phoenix_rows(rows: Iterable[Mapping[str, Any]], found: _Collected, roots: dict[str, Mapping[str, Any]]) -> None:
    for n, row in enumerate(rows, start=1):
        _phoenix_row(row, n, found, roots)


def _phoenix_row(row: Mapping[str, Any], n: int, found: _Collected, roots: dict[str, Mapping[str, Any]]) -> None:
    ctx = row.get("context")
    tid = str(ctx.get("trace_id") or "") if isinstance(ctx, Mapping) else ""
    found.add(row, tid or None, f"{found.label}: row {n}")
    if tid and not row.get("parent_id") and isinstance(row.get("attributes"), Mapping) and tid not in roots:
        roots[tid] = row["attributes"]


def _otlp_spans(spans: Iterable[Mapping[str, Any]], found: _Collected, roots: dict[str, Mapping[str, Any]]) -> None:
    """OTLP spans, each converted to a Phoenix row unless its trace was already refused (past the span cap: its
    further spans are dropped as they are read, their trace id the only thing looked at)."""
    for n, sp in enumerate(spans, start=1):
        if trace_of(sp) in found.oversize:
            continue
        _phoenix_row(otlp_row(sp), n, found, roots)


# --------------------------------------------------------------------------------------------- opening
def open_source(ref: str, max_spans: int, settle_s: float, limits: ReadLimits | None = None) -> WatchSource:
    """``phoenix://HOST:PORT/PROJECT`` (its ``root``, ``start``, ``end`` and ``last`` parameters bound what is
    read) or a folder."""

    if is_phoenix_ref(ref):
        return PhoenixSource(parse_address(ref), max_spans, settle_s)
    return FolderSource(Path(ref), max_spans, settle_s, limits)


def position_text(position: Sequence[Any]) -> str:
    return json.dumps(list(position), separators=(",", ":"))


def position_of(text: str | None) -> list[Any] | None:
    return None if text is None else list(json.loads(text))
