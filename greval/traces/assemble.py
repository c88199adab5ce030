"""One trace's spans → one dataset row (what :func:`greval.dataset.records.hash_row` makes a record of).

The row's id is the trace id, so verdicts go back to the trace they judge and a re-read trace is the same
record (content-addressed: an unchanged trace is never judged twice). Fields:

- ``question``: the root span's input, else the first LLM span's last user message;
- ``answer``: the root span's output, else the last LLM span's output;
- ``chunks``: every retriever span's documents in order, ``{id, text, score, metadata, span_id, position}``
  (a document retrieved twice is kept once);
- efficiency fields, named as the store report reads them (:data:`greval.report.store_report.EFFICIENCY`):
  ``prompt_tokens`` / ``output_tokens`` / ``tokens`` summed over the LLM spans, ``llm_calls``, ``latency_s`` (the
  root span's duration);
- ``root_span_id``; and the root span's metadata keys as fields of their own (``expected_answer`` there feeds
  ``answer_alignment``), unless they would replace one of the above.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import Any

from pydantic import BaseModel, Field

from greval.traces.spans import Span

__all__ = ["Assembled", "assemble", "root_of"]

#: Fields a trace fills itself; metadata keys of these names are left out (and said).
RESERVED = (
    "id", "question", "answer", "chunks", "prompt_tokens", "output_tokens", "tokens", "llm_calls", "latency_s",
    "root_span_id",
)  # fmt: skip


class Assembled(BaseModel):
    """A trace as a row, and what could not be read from it (each a short phrase counted across traces)."""

    trace_id: str
    row: dict[str, Any]
    missing: list[str] = Field(default_factory=list)
    skipped_kinds: Counter[str] = Field(default_factory=Counter)


def root_of(spans: Sequence[Span]) -> Span:
    """The trace's root: a span without a parent in the trace (the earliest, if several)."""
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_id or s.parent_id not in ids] or list(spans)
    return _ordered(roots)[0]


def _ordered(spans: Sequence[Span]) -> list[Span]:
    return sorted(spans, key=lambda s: (s.start is None, s.start.timestamp() if s.start else 0.0, s.span_id))


def _chunks(retrievers: Sequence[Span]) -> list[dict[str, Any]]:
    chunks: list[dict[str, Any]] = []
    seen: set[str] = set()
    for span in retrievers:
        for doc in span.documents:
            key = doc.id if doc.id is not None else f"{span.span_id}:{doc.position}"
            if key in seen:
                continue
            seen.add(key)
            chunk: dict[str, Any] = {"text": doc.text, "span_id": span.span_id, "position": doc.position}
            if doc.id is not None:
                chunk["id"] = doc.id
            if doc.score is not None:
                chunk["score"] = doc.score
            if doc.metadata:
                chunk["metadata"] = doc.metadata
            chunks.append(chunk)
    if any("id" not in c for c in chunks):  # ids for documents that had none: their place in the trace
        for i, c in enumerate(chunks, start=1):
            c.setdefault("id", f"d{i}")
    return chunks


def _sum(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def assemble(spans: Sequence[Span]) -> Assembled:
    """The row of one trace's spans (all of one trace id)."""
    spans = _ordered(spans)
    root = root_of(spans)
    llms = [s for s in spans if s.kind == "llm"]
    retrievers = [s for s in spans if s.kind == "retriever"]
    question = root.input or next((s.input for s in llms if s.input), None)
    answer = root.output or next((s.output for s in reversed(llms) if s.output), None)
    prompt = _sum([s.prompt_tokens for s in llms])
    output = _sum([s.completion_tokens for s in llms])
    total = _sum([s.total_tokens if s.total_tokens is not None else _sum([s.prompt_tokens, s.completion_tokens])
                  for s in llms])  # fmt: skip
    if not llms:  # no LLM span: the root's own counts (LangSmith puts a trace's totals on its root run)
        prompt, output, total = root.prompt_tokens, root.completion_tokens, root.total_tokens
    row: dict[str, Any] = {
        "id": root.trace_id,
        "question": question,
        "answer": answer,
        "chunks": _chunks(retrievers) or None,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "tokens": total,
        "llm_calls": len(llms) or None,
        "latency_s": None if root.seconds is None else round(root.seconds, 6),
        "root_span_id": root.span_id,
    }
    missing = [name for name, value in (("question", question), ("answer", answer)) if not value]
    if not retrievers:
        missing.append("retriever span (so no chunks)")
    elif row["chunks"] is None:
        missing.append("retrieved documents (so no chunks)")
    for key, value in root.metadata.items():
        if key in RESERVED:
            missing.append(f"metadata key {key!r} (a field greval fills from the spans)")
        elif value is not None:
            row[key] = value
    skipped = Counter(s.name or s.kind for s in spans if s is not root and s.kind == "other")
    return Assembled(
        trace_id=root.trace_id,
        row={k: v for k, v in row.items() if v is not None},
        missing=missing,
        skipped_kinds=skipped,
    )
