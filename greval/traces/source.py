"""Traces as a run's rows: :class:`TraceRows` streams :class:`~greval.dataset.records.HashedRow` s (one per
trace, id = trace id; one per conversation for traces sharing a session id, id = the session id) as
:class:`~greval.dataset.records.DataFile` does for a table, and says in one line per kind what could not be
mapped (traces without a question, a retriever span, …).

A source that can take verdicts back (Phoenix) overrides :meth:`TraceRows.after_run`, which ``greval run``
calls once the run has finished.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from sys import intern
from typing import TYPE_CHECKING, NamedTuple

from greval.dataset.records import HashedRow, hash_row, normalise_trajectory
from greval.errors import DataError
from greval.traces.assemble import Assembled, assemble, assemble_conversation, session_of, step_spans
from greval.traces.spans import Span

if TYPE_CHECKING:
    from greval.runner.options import RunSummary
    from greval.spec import BaseSpec
    from greval.store.store import Store

__all__ = ["FIELD_ORIGINS", "Places", "TraceRows", "field_origin", "group_sessions", "group_traces"]


def group_traces(spans: Iterable[Span]) -> list[list[Span]]:
    """Spans grouped by trace id, traces in order of first appearance. The ids and names spans repeat are
    held once (a trace's id on each of its spans, a parent's id on each child, a step's name): a 200,000-step
    trace is held whole until it becomes a row."""
    traces: dict[str, list[Span]] = {}
    for span in spans:
        span.trace_id = intern(span.trace_id)
        span.span_id = intern(span.span_id)
        span.name = intern(span.name)
        if span.parent_id is not None:
            span.parent_id = intern(span.parent_id)
        traces.setdefault(span.trace_id, []).append(span)
    return list(traces.values())


def group_sessions(traces: Iterable[Sequence[Span]]) -> list[tuple[str | None, list[Sequence[Span]]]]:
    """Traces as the records they become, in order of first appearance: the traces sharing a session id
    together (a conversation), every other trace alone (``None``), as is a session of one trace."""
    units: dict[str, tuple[str | None, list[Sequence[Span]]]] = {}
    for trace in traces:
        session = session_of(trace)
        key = f"session\0{session}" if session else f"trace\0{id(trace)}"
        units.setdefault(key, (session, []))[1].append(trace)
    return [(session if len(group) > 1 else None, group) for session, group in units.values()]


#: Where greval reads a trace record's fields (greval.traces.assemble); any other field is a root span's metadata key.
FIELD_ORIGINS = {
    "question": "the root span's input (or the first LLM span's last user message)",
    "answer": "the root span's output (or the last LLM span's)",
    "chunks": "its retriever spans' documents (or the documents its chain spans pass on in their outputs)",
    "conversation": "the traces that share its session id",
    "trajectory": "its LLM spans' tool calls and its tool spans, in time order",
}


def field_origin(names: Sequence[str]) -> str:
    """Where a trace's record gets the fields ``names``, in words: what a note on records skipped for lack of
    them says (for a table it names the column mapping, which does not apply to traces)."""
    where = [f"{n} from {FIELD_ORIGINS.get(n) or _metadata_key(n)}" for n in names]
    return "greval reads a trace's " + ", and its ".join(where)


def _metadata_key(name: str) -> str:
    return f"the root span's metadata key {name!r}"


class Places(NamedTuple):
    """Where a record's verdicts go back to: its root span, each chunk's (retriever span, position), for a
    conversation its session and each turn's span (the root span of the turn's trace), and for an agent's
    trajectory each step's span (:func:`~greval.traces.assemble.step_spans`)."""

    root: str
    chunks: dict[str, tuple[str, int]]
    session: str | None
    turns: dict[str, str]
    steps: dict[str, str]


class TraceRows:
    """A trace export (or server) read as a dataset: each iteration reads the spans again (``read``) and
    yields one hashed row per trace; ``notes`` holds what the last full read could not map."""

    def __init__(self, label: str, read: Callable[[], Iterable[Sequence[Span]]], limit: int | None = None) -> None:
        self.label = label
        self.read = read
        self.limit = limit
        self.notes: list[str] = []
        #: Record id -> where its verdicts go back to.
        self.places: dict[str, Places] = {}

    def __iter__(self) -> Iterator[HashedRow]:
        missing: Counter[str] = Counter()
        examples: dict[str, list[str]] = {}
        skipped: Counter[str] = Counter()
        count = traces = 0
        sessions: list[int] = []
        for session, group in group_sessions(self.read()):
            if self.limit is not None and count >= self.limit:
                break
            done = assemble_conversation(session, group) if session else assemble(group[0])
            count += 1
            traces += len(group)
            if session:
                sessions.append(len(group))
            for what in done.missing:
                missing[what] += 1
                examples.setdefault(what, []).append(done.trace_id)
            skipped.update(done.skipped_kinds)
            self.places[done.trace_id] = _places(done, session)
            yield hash_row(done.row, "id", where=f"{self.label}: {'session' if session else 'trace'} {done.trace_id}")
        if count == 0:
            raise DataError(f"{self.label}: no traces")
        self.notes = self._notes(traces, missing, examples, skipped)
        if sessions:
            self.notes.append(
                f"{self.label}: {sum(sessions)} trace(s) of {len(sessions)} session(s) read as conversations, one "
                "record each (id = the session id; each trace a user and an assistant turn: its question and "
                "answer, not its retrieved chunks)"
            )

    def _notes(
        self, count: int, missing: Counter[str], examples: dict[str, list[str]], skipped: Counter[str]
    ) -> list[str]:
        notes = []
        for what, n in missing.items():
            ids = list(dict.fromkeys(examples[what]))
            shown = ", ".join(ids[:3]) + (" …" if len(ids) > 3 else "")
            notes.append(f"{self.label}: {n} of {count} trace(s) have no {what}: {shown}")
        if skipped:
            kinds = ", ".join(f"{name} ({n})" for name, n in skipped.most_common(5))
            notes.append(
                f"{self.label}: {sum(skipped.values())} span(s) mapped to no field (greval reads the root, retriever "
                f"and LLM spans): {kinds}"
            )
        return notes

    def origin(self, names: Sequence[str]) -> str:
        """Where these records get ``names`` (:func:`field_origin`): said of records skipped for lack of them."""
        return field_origin(names)

    def after_run(self, store: Store, summary: RunSummary, specs: Sequence[BaseSpec]) -> list[str]:
        """What to do once a run over these traces has finished (nothing, for an export file); lines to say."""
        return []


def _places(done: Assembled, session: str | None) -> Places:
    if session:
        turns = done.row.get("conversation") or []
        turn_spans = {str(t["id"]): str(t["span_id"]) for t in turns}
        return Places(str(done.row["root_span_id"]), {}, session, turn_spans, {})
    chunks = done.row.get("chunks") or []
    steps: dict[str, str] = {}
    if isinstance(done.row.get("trajectory"), list):
        with contextlib.suppress(DataError):  # said when the record is read; its verdicts stay on the root span
            steps = step_spans(normalise_trajectory(done.row["trajectory"], "trajectory"))
    return Places(
        str(done.row["root_span_id"]),
        {str(c["id"]): (str(c["span_id"]), int(c["position"])) for c in chunks if "id" in c},
        None,
        {},
        steps,
    )
