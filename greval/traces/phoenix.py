"""Arize Phoenix as a source: ``greval run phoenix://HOST:PORT/PROJECT`` reads a project's traces through
Phoenix's own client (``arize-phoenix-client``, the ``[phoenix]`` extra), and span exports (Parquet / JSONL) are
read from files. Either way spans go through :mod:`greval.traces.openinference`.

The address takes the window and filters as query parameters: ``?last=24h`` (or ``start=`` / ``end=``, ISO 8601),
``root=NAME`` (only traces whose root span has this name), ``limit=N`` (traces, newest first; default 1000).
``phoenix+https://`` for a server behind TLS. The API key comes from ``PHOENIX_API_KEY`` and nowhere else: it is
sent as a bearer token and never printed or stored (an address with credentials in it is refused).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from greval.traces.openinference import span_from_row
from greval.traces.phoenix_address import (
    TIMEOUT_S,
    PhoenixAddress,
    is_phoenix_ref,
    parse_address,
    phoenix_client,
    phoenix_error,
)
from greval.traces.phoenix_annotations import write_back
from greval.traces.source import TraceRows, group_traces
from greval.traces.spans import Span

if TYPE_CHECKING:
    from greval.runner.options import RunSummary
    from greval.spec import BaseSpec
    from greval.store.store import Store

__all__ = ["PhoenixAddress", "PhoenixRows", "export_spans", "is_phoenix_ref", "parse_address", "phoenix_client"]

_TRACES_PER_REQUEST = 50


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

        return write_back(self, store, summary, specs)


def export_spans(rows: Iterable[Mapping[str, Any]], label: str) -> Iterator[Span]:
    """A Phoenix span export's rows (REST spans as JSONL, a span dataframe as Parquet / JSONL) as spans."""
    for n, row in enumerate(rows, start=1):
        yield span_from_row(row, f"{label}: row {n}")
