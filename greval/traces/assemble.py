"""One trace's spans → one dataset row (what :func:`greval.dataset.records.hash_row` makes a record of); the traces
of one session → one conversation row (:func:`assemble_conversation`).

The row's id is the trace id, so verdicts go back to the trace they judge and a re-read trace is the same
record (content-addressed: an unchanged trace is never judged twice). Fields:

- ``question``: the root span's input, else the first LLM span's last user message;
- ``answer``: the root span's output, else the last LLM span's output;
- ``chunks``: every retriever span's documents in order, ``{id, text, score, metadata, span_id, position}``
  (a document retrieved twice is kept once); when no retriever span returned any, the documents chain spans
  passed on in their outputs (LangSmith's graph nodes and retrieval chains), each once, from the step that
  returned it first;
- efficiency fields, named as the store report reads them (:data:`greval.report.store_report.EFFICIENCY`):
  ``prompt_tokens`` / ``output_tokens`` / ``tokens`` summed over the LLM spans, ``llm_calls``, ``latency_s`` (the
  root span's duration);
- ``root_span_id``; and the root span's metadata keys as fields of their own (``expected_answer`` there feeds
  ``answer_alignment``, ``expected_trajectory`` the trajectory metrics), unless they would replace one of the above;
- for an agent's trace (an LLM span asked for a tool, or a tool span ran): ``trajectory``, the question, each LLM
  span's text and tool calls and each tool span's result in time order (:func:`trajectory_of`), and ``tools``, the
  tool definitions its LLM spans were offered.

A conversation (the traces sharing a session id, in time order): ``conversation``, each trace a user turn (its
question) and an assistant turn (its answer) with the trace id and root span id as the turn's metadata, as
Phoenix's own session view reads turns; its id is the session id; the efficiency fields summed over its traces;
``session_id``, ``trace_ids``, ``root_span_id`` (the first trace's) and the first trace's metadata keys.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from pydantic import BaseModel, Field

from greval.traces.spans import Span

__all__ = ["Assembled", "assemble", "assemble_conversation", "root_of", "session_of"]

#: Fields a trace fills itself; metadata keys of these names are left out (and said).
RESERVED = (
    "id", "question", "answer", "chunks", "prompt_tokens", "output_tokens", "tokens", "llm_calls", "latency_s",
    "root_span_id", "conversation", "session_id", "trace_ids",
)  # fmt: skip


class Assembled(BaseModel):
    """A trace as a row, and what could not be read from it (each a short phrase counted across traces)."""

    trace_id: str
    row: dict[str, Any]
    missing: list[str] = Field(default_factory=list)
    skipped_kinds: Counter[str] = Field(default_factory=Counter)


_NEVER = datetime.max.replace(tzinfo=UTC)  # traces without a start time sort last


def root_of(spans: Sequence[Span]) -> Span:
    """The trace's root: a span without a parent in the trace (the earliest, if several)."""
    ids = {s.span_id for s in spans}
    roots = [s for s in spans if not s.parent_id or s.parent_id not in ids] or list(spans)
    return _ordered(roots)[0]


def _ordered(spans: Sequence[Span]) -> list[Span]:
    return sorted(spans, key=lambda s: (s.start is None, s.start.timestamp() if s.start else 0.0, s.span_id))


def session_of(spans: Sequence[Span]) -> str | None:
    """The session (conversation) a trace belongs to: its root's session id, else any of its spans'."""
    return root_of(spans).session_id or next((s.session_id for s in _ordered(spans) if s.session_id), None)


def _chunks(spans: Sequence[Span], *, passed_on: bool = False) -> list[dict[str, Any]]:
    """The documents of ``spans`` in order as chunks, each kept once: by its id, else by its place (a
    retriever's), or by its text when ``passed_on`` (chain steps hand the same documents from one to the next)."""
    chunks: list[dict[str, Any]] = []
    seen: set[str] = set()
    for span in spans:
        for doc in span.documents:
            key = doc.id if doc.id is not None else doc.text if passed_on else f"{span.span_id}:{doc.position}"
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


def _chain_chunks(spans: Sequence[Span]) -> list[dict[str, Any]]:
    """Documents chain steps passed on (no retriever step returned any): each from the step that returned it
    first (the earliest to end — a graph's retrieve node, not the root that hands it back)."""
    carriers = [s for s in spans if s.kind == "chain" and s.documents]
    carriers.sort(key=lambda s: (s.end is None, s.end.timestamp() if s.end else 0.0, s.span_id))
    return _chunks(carriers, passed_on=True)


def _sum(values: Sequence[int | None]) -> int | None:
    known = [v for v in values if v is not None]
    return sum(known) if known else None


def _token_counts(root: Span, llms: Sequence[Span]) -> tuple[int | None, int | None, int | None]:
    """(prompt, output, total) tokens summed over the LLM spans; without one, the root's own counts (LangSmith
    puts a trace's totals on its root run)."""
    if not llms:
        return root.prompt_tokens, root.completion_tokens, root.total_tokens
    prompt = _sum([s.prompt_tokens for s in llms])
    output = _sum([s.completion_tokens for s in llms])
    total = _sum([s.total_tokens if s.total_tokens is not None else _sum([s.prompt_tokens, s.completion_tokens])
                  for s in llms])  # fmt: skip
    return prompt, output, total


def _gaps(row: dict[str, Any], retrievers: Sequence[Span]) -> list[str]:
    """What the row lacks, each a short phrase: question, answer, chunks (and why there are none)."""
    missing = [name for name in ("question", "answer") if not row[name]]
    if row["chunks"] is None and not retrievers:
        missing.append("retriever span, nor documents in a chain span's outputs (so no chunks)")
    elif row["chunks"] is None:
        missing.append("retrieved documents (so no chunks)")
    return missing


def _add_metadata(row: dict[str, Any], root: Span, missing: list[str]) -> None:
    """The root span's metadata keys as fields of their own, unless one would replace a field of the trace."""
    for key, value in root.metadata.items():
        if key in RESERVED:
            missing.append(f"metadata key {key!r} (a field greval fills from the spans)")
        elif value is not None:
            row[key] = value


def _under_tool(spans: Sequence[Span]) -> set[str]:
    """Ids of the spans below a tool span: what a tool does inside (an LLM it calls) is not the agent's step."""
    parent = {s.span_id: s.parent_id for s in spans}
    tools = {s.span_id for s in spans if s.kind == "tool"}
    below: set[str] = set()
    for s in spans:
        up, seen = s.parent_id, {s.span_id}
        while up is not None and up not in seen:
            if up in tools:
                below.add(s.span_id)
                break
            seen.add(up)
            up = parent.get(up)
    return below


def _call_step(call: Mapping[str, Any], span: Span, turn: int) -> dict[str, Any]:
    step = {"kind": "tool_call", "name": call["name"], "arguments": call.get("arguments"), "turn": turn}
    if call.get("id"):
        step["call_id"] = call["id"]
    return {**step, "span_id": span.span_id}


def _answered(pending: list[dict[str, Any]], tool: Span) -> dict[str, Any] | None:
    """The pending tool call a tool span answers: by call id, else the first of the same name."""
    found = next((c for c in pending if tool.call_id and c.get("call_id") == tool.call_id), None)
    found = found or next((c for c in pending if c["name"] == tool.name and not tool.call_id), None)
    if found is not None:
        pending.remove(found)
    return found


def trajectory_of(spans: Sequence[Span], question: str | None) -> list[dict[str, Any]] | None:
    """An agent's trajectory from a trace (spans in time order), or None when it called no tool: the question as
    the user's step; each LLM span's text and tool calls (one turn each); each tool span's result, after the call
    it answers (a tool span no LLM span asked for is its own call first). Steps carry their span's id."""
    if not any(s.kind == "tool" or s.tool_calls for s in spans):
        return None
    below = _under_tool(spans)
    steps: list[dict[str, Any]] = [{"kind": "user", "content": question, "turn": 0}] if question else []
    pending: list[dict[str, Any]] = []
    for turn, span in enumerate((s for s in spans if s.span_id not in below), start=1):
        if span.kind == "llm":
            if span.output and span.output.strip():
                steps.append({"kind": "assistant", "content": span.output, "turn": turn, "span_id": span.span_id})
            made = [_call_step(c, span, turn) for c in span.tool_calls]
            steps += made
            pending += made
        elif span.kind == "tool":
            if _answered(pending, span) is None:
                own = {"name": span.name, "arguments": span.arguments, "id": span.call_id}
                steps.append(_call_step(own, span, turn))
            result = {"kind": "tool_result", "name": span.name, "content": span.output or "", "turn": turn}
            steps.append({**result, **({"call_id": span.call_id} if span.call_id else {}), "span_id": span.span_id})
    return steps


def _offered_tools(spans: Sequence[Span]) -> list[Any] | None:
    """The tools the agent's LLM spans were offered, each once (by name, as first offered)."""
    seen: dict[str, Any] = {}
    for span in spans:
        for tool in span.tools:
            fn = tool.get("function", tool) if isinstance(tool, Mapping) else tool
            name = str(fn.get("name")) if isinstance(fn, Mapping) else str(fn)
            seen.setdefault(name, tool)
    return list(seen.values()) or None


def assemble(spans: Sequence[Span]) -> Assembled:
    """The row of one trace's spans (all of one trace id)."""
    spans = _ordered(spans)
    root = root_of(spans)
    llms = [s for s in spans if s.kind == "llm"]
    retrievers = [s for s in spans if s.kind == "retriever"]
    prompt, output, total = _token_counts(root, llms)
    row: dict[str, Any] = {
        "id": root.trace_id,
        "question": root.input or next((s.input for s in llms if s.input), None),
        "answer": root.output or next((s.output for s in reversed(llms) if s.output), None),
        "chunks": _chunks(retrievers) or _chain_chunks(spans) or None,
        "prompt_tokens": prompt,
        "output_tokens": output,
        "tokens": total,
        "llm_calls": len(llms) or None,
        "latency_s": None if root.seconds is None else round(root.seconds, 6),
        "root_span_id": root.span_id,
    }
    missing = _gaps(row, retrievers)
    _add_metadata(row, root, missing)
    _add_trajectory(row, spans, row["question"], missing)
    skipped = Counter(s.name or s.kind for s in spans if s is not root and s.kind == "other")
    return Assembled(
        trace_id=root.trace_id,
        row={k: v for k, v in row.items() if v is not None},
        missing=missing,
        skipped_kinds=skipped,
    )


def step_spans(steps: Sequence[Mapping[str, Any]]) -> dict[str, str]:
    """Step id -> the span its verdicts go back to (as annotations): a tool call's, the tool span that ran it
    (else the LLM span that asked for it); a message's or a final answer's, its LLM span. ``steps`` are
    normalised (:func:`~greval.dataset.records.normalise_trajectory`: a step's span id is in its metadata);
    calls pair with results as :func:`trajectory_of` paired them, by call id, else the first of the same name."""
    out: dict[str, str] = {}
    pending: list[Mapping[str, Any]] = []
    for step in steps:
        span = (step.get("metadata") or {}).get("span_id")
        if step["kind"] == "tool_result":
            call_id = step.get("call_id")
            call = next((c for c in pending if call_id and c.get("call_id") == call_id), None)
            call = call or next((c for c in pending if not call_id and c.get("name") == step.get("name")), None)
            if call is not None:
                pending.remove(call)
                if span:
                    out[str(call["id"])] = str(span)
            continue
        if step["kind"] == "tool_call":
            pending.append(step)
        if span:
            out[str(step["id"])] = str(span)
    return out


def _add_trajectory(row: dict[str, Any], spans: Sequence[Span], question: str | None, missing: list[str]) -> None:
    """An agent's trace: ``trajectory`` and ``tools`` (unless the root's metadata gives them); a trajectory that
    ends without the agent's answer is said in ``missing``."""
    steps = trajectory_of(spans, question)
    if steps is None:
        return
    for key, value in (("trajectory", steps), ("tools", _offered_tools(spans))):
        if key in row:
            missing.append(f"{key} from the spans (the root's metadata key {key!r} gives it)")
        elif value is not None:
            row[key] = value
    if steps[-1]["kind"] != "assistant":
        missing.append("final answer in its trajectory (it ends on a tool call or a tool result)")


_EFFICIENCY = ("prompt_tokens", "output_tokens", "tokens", "llm_calls", "latency_s")


def assemble_conversation(session_id: str, traces: Sequence[Sequence[Span]]) -> Assembled:
    """The row of one session's traces: a conversation, each trace a user and an assistant turn, in time order.
    A trace without a question or an answer leaves that turn out (said in ``missing``)."""
    parts = [assemble(t) for t in sorted(traces, key=lambda t: root_of(t).start or _NEVER)]
    turns: list[dict[str, Any]] = []
    missing: list[str] = []
    for part in parts:
        for role, field in (("user", "question"), ("assistant", "answer")):
            text = part.row.get(field)
            if not text:
                missing.append(f"{field} (so the conversation lacks that trace's {role} turn)")
                continue
            meta = {"trace_id": part.trace_id, "span_id": part.row["root_span_id"]}
            turns.append({"id": f"t{len(turns) + 1}", "role": role, "content": text, **meta})
    row: dict[str, Any] = {
        "id": session_id,
        "conversation": turns or None,
        "session_id": session_id,
        "trace_ids": [p.trace_id for p in parts],
        "root_span_id": parts[0].row["root_span_id"],
    }
    for name in _EFFICIENCY:
        known = [p.row[name] for p in parts if p.row.get(name) is not None]
        row[name] = (round(sum(known), 6) if name == "latency_s" else sum(known)) if known else None
    row.update({k: v for k, v in parts[0].row.items() if k not in RESERVED})
    skipped: Counter[str] = Counter()
    for p in parts:
        skipped.update(p.skipped_kinds)
    return Assembled(
        trace_id=session_id,
        row={k: v for k, v in row.items() if v is not None},
        missing=missing,
        skipped_kinds=skipped,
    )
