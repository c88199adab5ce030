"""Traces as a run's rows: :class:`TraceRows` streams :class:`~greval.dataset.records.HashedRow` s (one per
trace, id = trace id) as :class:`~greval.dataset.records.DataFile` does for a table, and says in one line per
kind what could not be mapped (traces without a question, a retriever span, …).

A source that can take verdicts back (Phoenix) overrides :meth:`TraceRows.after_run`, which ``greval run``
calls once the run has finished.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import TYPE_CHECKING

from greval.dataset.records import HashedRow, hash_row
from greval.errors import DataError
from greval.traces.assemble import assemble
from greval.traces.spans import Span

if TYPE_CHECKING:
    from greval.runner import RunSummary
    from greval.spec import BaseSpec
    from greval.store.store import Store

__all__ = ["TraceRows", "group_traces"]


def group_traces(spans: Iterable[Span]) -> list[list[Span]]:
    """Spans grouped by trace id, traces in order of first appearance."""
    traces: dict[str, list[Span]] = {}
    for span in spans:
        traces.setdefault(span.trace_id, []).append(span)
    return list(traces.values())


class TraceRows:
    """A trace export (or server) read as a dataset: each iteration reads the spans again (``read``) and
    yields one hashed row per trace; ``notes`` holds what the last full read could not map."""

    def __init__(self, label: str, read: Callable[[], Iterable[Sequence[Span]]], limit: int | None = None) -> None:
        self.label = label
        self.read = read
        self.limit = limit
        self.notes: list[str] = []
        #: Record id -> the trace's root span id and, per chunk id, its (retriever span id, position).
        self.places: dict[str, tuple[str, dict[str, tuple[str, int]]]] = {}

    def __iter__(self) -> Iterator[HashedRow]:
        missing: Counter[str] = Counter()
        examples: dict[str, list[str]] = {}
        skipped: Counter[str] = Counter()
        count = 0
        for spans in self.read():
            if self.limit is not None and count >= self.limit:
                break
            done = assemble(spans)
            count += 1
            for what in done.missing:
                missing[what] += 1
                examples.setdefault(what, []).append(done.trace_id)
            skipped.update(done.skipped_kinds)
            chunks = done.row.get("chunks") or []
            self.places[done.trace_id] = (
                str(done.row["root_span_id"]),
                {str(c["id"]): (str(c["span_id"]), int(c["position"])) for c in chunks if "id" in c},
            )
            yield hash_row(done.row, "id", where=f"{self.label}: trace {done.trace_id}")
        if count == 0:
            raise DataError(f"{self.label}: no traces")
        self.notes = self._notes(count, missing, examples, skipped)

    def _notes(
        self, count: int, missing: Counter[str], examples: dict[str, list[str]], skipped: Counter[str]
    ) -> list[str]:
        notes = []
        for what, n in missing.items():
            shown = ", ".join(examples[what][:3]) + (" …" if n > 3 else "")
            notes.append(f"{self.label}: {n} of {count} trace(s) have no {what}: {shown}")
        if skipped:
            kinds = ", ".join(f"{name} ({n})" for name, n in skipped.most_common(5))
            notes.append(
                f"{self.label}: {sum(skipped.values())} span(s) mapped to no field (greval reads the root, retriever "
                f"and LLM spans): {kinds}"
            )
        return notes

    def after_run(self, store: Store, summary: RunSummary, specs: Sequence[BaseSpec]) -> list[str]:
        """What to do once a run over these traces has finished (nothing, for an export file); lines to say."""
        return []
