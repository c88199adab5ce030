"""Arize Phoenix as a source: ``greval run phoenix://HOST:PORT/PROJECT`` reads a project's traces through
Phoenix's own client (``arize-phoenix-client``, the ``[phoenix]`` extra), and span exports (Parquet / JSONL) are
read from files. Either way spans go through :mod:`greval.traces.openinference`.

The address takes the window and filters as query parameters: ``?last=24h`` (or ``start=`` / ``end=``, ISO 8601),
``root=NAME`` (only traces whose root span has this name), ``limit=N`` (traces, newest first; default 1000).
``phoenix+https://`` for a server behind TLS. The API key comes from ``PHOENIX_API_KEY`` and nowhere else: it is
sent as a bearer token and never printed or stored (an address with credentials in it is refused).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

from pydantic import BaseModel, Field

from greval.errors import DataError, UserError
from greval.traces.openinference import span_from_row
from greval.traces.source import TraceRows, group_traces
from greval.traces.spans import Span, parse_time

if TYPE_CHECKING:
    from phoenix.client import Client

    from greval.runner.options import RunSummary
    from greval.spec import BaseSpec
    from greval.store.store import Store

__all__ = ["PhoenixAddress", "PhoenixRows", "export_spans", "is_phoenix_ref", "parse_address", "phoenix_client"]

SCHEMES = ("phoenix://", "phoenix+http://", "phoenix+https://")
KEY_ENV = "PHOENIX_API_KEY"
_TRACES_PER_REQUEST = 50
TIMEOUT_S = 60


class PhoenixAddress(BaseModel):
    """Where the traces are and which to read."""

    base_url: str
    project: str
    start: datetime | None = None
    end: datetime | None = None
    root: str | None = Field(None, description="Only traces whose root span has this name.")
    limit: int = Field(1000, ge=1, description="Traces to read at most (the newest).")

    @property
    def label(self) -> str:
        return f"phoenix {self.base_url} project {self.project!r}"


def is_phoenix_ref(data: str) -> bool:
    return str(data).lower().startswith(SCHEMES)


_DURATION = re.compile(r"^(\d+)\s*([smhdw])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days", "w": "weeks"}


def _time(ref: str, name: str, value: str) -> datetime:
    parsed = parse_time(value)
    if parsed is None:
        raise DataError(f"{ref}: {name}={value!r} is not an ISO 8601 time (e.g. 2025-05-01T00:00:00Z)")
    return parsed


def parse_address(ref: str) -> PhoenixAddress:
    """``phoenix://HOST:PORT/PROJECT?last=24h&root=rag&limit=500`` as a :class:`PhoenixAddress`."""
    parts = urlsplit(ref)
    if parts.username or parts.password:
        raise UserError(f"phoenix address: put the API key in {KEY_ENV}, not in the address")
    scheme = "https" if parts.scheme.lower() == "phoenix+https" else "http"
    path = [p for p in parts.path.split("/") if p]
    if not parts.hostname or not path:
        raise DataError(f"{ref}: expected phoenix://HOST:PORT/PROJECT (the project's name, e.g. 'default')")
    prefix = "/".join(path[:-1])
    base = f"{scheme}://{parts.netloc}" + (f"/{prefix}" if prefix else "")
    query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
    unknown = sorted(set(query) - {"last", "start", "end", "root", "limit"})
    if unknown:
        raise DataError(f"{ref}: unknown parameter(s) {', '.join(unknown)}; use last, start, end, root, limit")
    start = _time(ref, "start", query["start"]) if "start" in query else None
    end = _time(ref, "end", query["end"]) if "end" in query else None
    if "last" in query:
        m = _DURATION.match(query["last"].strip())
        if m is None:
            raise DataError(f"{ref}: last={query['last']!r}: use a number and s, m, h, d or w (e.g. last=24h)")
        start = datetime.now(UTC) - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
    limit = query.get("limit", "1000")
    if not limit.isdigit() or int(limit) < 1:
        raise DataError(f"{ref}: limit={limit!r} must be a whole number of traces, at least 1")
    return PhoenixAddress(
        base_url=base, project=path[-1], start=start, end=end, root=query.get("root") or None, limit=int(limit)
    )


def phoenix_client(addr: PhoenixAddress) -> Client:
    """Phoenix's client for the address, with ``PHOENIX_API_KEY`` (if set) as its bearer token."""
    try:
        from phoenix.client import Client
    except ImportError:
        raise UserError("reading Phoenix needs its client: pip install 'greval[phoenix]'") from None
    return Client(base_url=addr.base_url, api_key=os.environ.get(KEY_ENV) or None)


def phoenix_error(addr: PhoenixAddress, exc: Exception) -> UserError:
    """A failed request as one line (the URL and status, never a header)."""
    import httpx

    if isinstance(exc, httpx.HTTPStatusError):
        code = exc.response.status_code
        if code in (401, 403):
            return UserError(f"{addr.label}: Phoenix refused the request (HTTP {code}); check {KEY_ENV}")
        if code == 404:
            return DataError(f"{addr.label}: not found on the server (HTTP 404): is the project's name right?")
        return UserError(f"{addr.label}: Phoenix answered HTTP {code} to {exc.request.url.path}")
    if isinstance(exc, httpx.HTTPError):
        return UserError(f"{addr.label}: cannot reach Phoenix ({type(exc).__name__}: {exc})")
    raise exc


def _fetch(addr: PhoenixAddress) -> list[list[Span]]:
    """The window's traces (root spans first, newest ``limit`` of them, then every span of those traces)."""
    import httpx

    client = phoenix_client(addr)
    try:
        roots = client.spans.get_spans(
            project_identifier=addr.project,
            start_time=addr.start,
            end_time=addr.end,
            parent_id="null",
            name=addr.root,
            limit=addr.limit,
            timeout=TIMEOUT_S,
        )
        trace_ids = list(dict.fromkeys(r["context"]["trace_id"] for r in roots))
        spans: list[Span] = []
        for i in range(0, len(trace_ids), _TRACES_PER_REQUEST):
            batch = trace_ids[i : i + _TRACES_PER_REQUEST]
            rows = client.spans.get_spans(
                project_identifier=addr.project, trace_ids=batch, limit=1_000_000, timeout=TIMEOUT_S
            )
            spans += [span_from_row(dict(r), f"{addr.label}: span {r['context']['span_id']}") for r in rows]
    except httpx.HTTPError as exc:
        raise phoenix_error(addr, exc) from None
    order = {t: i for i, t in enumerate(sorted(trace_ids))}
    return sorted(group_traces(spans), key=lambda trace: order[trace[0].trace_id])


class PhoenixRows(TraceRows):
    """A Phoenix project's traces as a run's rows (read once, kept for the run); verdicts go back to it."""

    def __init__(self, addr: PhoenixAddress, limit: int | None = None) -> None:
        self.addr = addr
        self._traces: list[list[Span]] | None = None
        super().__init__(addr.label, self._read, limit)

    def _read(self) -> Iterable[Sequence[Span]]:
        if self._traces is None:
            self._traces = _fetch(self.addr)
        return self._traces

    def after_run(self, store: Store, summary: RunSummary, specs: Sequence[BaseSpec]) -> list[str]:
        from greval.traces.phoenix_annotations import write_back

        return write_back(self, store, summary, specs)


def export_spans(rows: Iterable[Mapping[str, Any]], label: str) -> Iterator[Span]:
    """A Phoenix span export's rows (REST spans as JSONL, a span dataframe as Parquet / JSONL) as spans."""
    for n, row in enumerate(rows, start=1):
        yield span_from_row(row, f"{label}: row {n}")
