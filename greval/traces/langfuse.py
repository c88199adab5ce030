"""Langfuse exports → spans: a trace's "Download JSON" (the trace with its ``observations``; also a list of such
traces or a session's ``{"traces": [...]}``) and observation exports (the UI table's JSON / JSONL / CSV, the API's
observations, the blob-storage export's ``observations`` / ``observations_v2``, in camelCase or snake_case).

An observation: ``id``, ``traceId`` / ``trace_id``, ``parentObservationId``, ``type`` (GENERATION → an LLM step;
RETRIEVER, or a SPAN whose output is a list of documents → a retriever, but one whose output holds an answer beside
its documents — ``{answer, documents}`` — is the RAG step that answered: a chain; SPAN / AGENT / CHAIN …), ``name``,
``input`` / ``output`` (JSON or its text), ``startTime`` / ``endTime``, ``usageDetails`` (or the older ``usage``:
``input`` / ``output`` / ``total``; or ``promptTokens`` …), ``metadata``, ``level`` / ``statusMessage``. A trace's
``sessionId`` names the conversation it belongs to. A CHAIN / AGENT observation's output may pass LangChain Documents
on (``page_content``): a trace's chunks when no retriever returned any. An agent's GENERATIONs carry their tool calls
in their output message (``tool_calls``), its TOOL observations the arguments (input) and result.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from datetime import timedelta
from typing import Any

from greval.errors import DataError
from greval.traces.spans import (
    Document,
    Span,
    SpanKind,
    as_int,
    as_text,
    documents_from,
    looks_like_documents,
    maybe_json,
    message_text,
    metadata_of,
    parse_time,
    snake_keys,
    tool_call_id,
    tool_calls_in,
    tool_output,
)

__all__ = ["TYPES", "is_observation_row", "is_trace_object", "observation_spans", "trace_spans"]

#: Langfuse's observation types.
TYPES = frozenset(
    ("GENERATION", "SPAN", "EVENT", "AGENT", "TOOL", "CHAIN", "RETRIEVER", "EVALUATOR", "EMBEDDING", "GUARDRAIL")
)
_KINDS: dict[str, SpanKind] = {
    "GENERATION": "llm", "RETRIEVER": "retriever", "AGENT": "chain", "CHAIN": "chain", "TOOL": "tool",
}  # fmt: skip


def is_observation_row(row: Mapping[str, Any]) -> bool:
    r = snake_keys(row)
    return "trace_id" in r and str(r.get("type", "")).upper() in TYPES


def is_trace_object(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("observations"), list) and "id" in value


def _usage(r: Mapping[str, Any]) -> tuple[int | None, int | None, int | None]:
    for key in ("usage_details", "usage"):
        usage = maybe_json(r.get(key))
        if isinstance(usage, Mapping) and usage:
            u = snake_keys(usage)
            prompt = as_int(u.get("input", u.get("prompt_tokens", u.get("input_tokens"))))
            completion = as_int(u.get("output", u.get("completion_tokens", u.get("output_tokens"))))
            return prompt, completion, as_int(u.get("total", u.get("total_tokens")))
    return tuple(as_int(r.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))  # type: ignore[return-value]


#: An output's fields that hold the answer a step gave (``output`` is left out: it may hold documents).
_ANSWERS = ("answer", "result", "response")


def _answers(output: Any) -> bool:
    """Whether an output holds an answer beside its documents (``{answer, documents}``): the RAG step that
    answered from what it retrieved, not a retrieval."""
    value = maybe_json(output)
    return isinstance(value, Mapping) and any(as_text(value.get(k)) for k in _ANSWERS) and looks_like_documents(value)


def _kind(r: Mapping[str, Any]) -> SpanKind:
    kind = _KINDS.get(str(r.get("type", "")).upper())
    if kind:
        return kind
    if _answers(r.get("output")):
        return "chain"
    named = "retriev" in str(r.get("name") or "").lower()
    return "retriever" if looks_like_documents(r.get("output")) and (named or r.get("type") == "SPAN") else "other"


def _documents(kind: SpanKind, output: Any) -> tuple[Document, ...]:
    """A retriever's documents; a chain step's when it passes Documents on (``page_content``: its other lists
    are more often chat messages), or any it answered from (``{answer, documents}``)."""
    if kind not in ("retriever", "chain"):
        return ()
    return documents_from(output, strict=kind == "chain" and not _answers(output))


def _tool_parts(kind: SpanKind, r: Mapping[str, Any]) -> dict[str, Any]:
    """A GENERATION's tool calls (in its output message) and offered tools (its input's ``tools``); a TOOL
    observation's arguments (its input) and call id."""
    if kind == "llm":
        given = maybe_json(r.get("input"))
        tools = given.get("tools") if isinstance(given, Mapping) else None
        return {"tool_calls": tool_calls_in(r.get("output")), "tools": tuple(tools) if isinstance(tools, list) else ()}
    if kind != "tool":
        return {}
    return {"arguments": maybe_json(r.get("input")), "call_id": tool_call_id(r.get("output"))}


def _output(kind: SpanKind, output: Any) -> str | None:
    """A step's output as text: a GENERATION's also from its output message (``{role, content}``)."""
    if kind == "retriever":
        return None
    if kind == "tool":
        return tool_output(output)
    return as_text(output, answer=True) or (message_text(output) if kind == "llm" else None)


def observation_span(row: Mapping[str, Any], where: str, trace_id: str | None = None) -> Span:
    """One observation as a span; a DataError naming ``where`` when it has no id or trace id."""
    r = snake_keys(row)
    tid = r.get("trace_id") or trace_id
    if not r.get("id") or not tid:
        raise DataError(f"{where}: a Langfuse observation needs id and traceId")
    kind = _kind(r)
    prompt, completion, total = _usage(r)
    level = str(r.get("level") or "")
    return Span(
        trace_id=str(tid),
        span_id=str(r["id"]),
        parent_id=str(r["parent_observation_id"]) if r.get("parent_observation_id") else trace_id,
        name=str(r.get("name") or ""),
        kind=kind,
        start=parse_time(r.get("start_time")),
        end=parse_time(r.get("end_time")),
        input=as_text(r.get("input"), last_user=True),
        output=_output(kind, r.get("output")),
        documents=_documents(kind, r.get("output")),
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total,
        metadata=metadata_of(r.get("metadata")),
        error=str(r.get("status_message") or "error") if level == "ERROR" else None,
        session_id=str(r["session_id"]) if r.get("session_id") else None,
        **_tool_parts(kind, r),
    )


def observation_spans(rows: Iterable[Mapping[str, Any]], label: str) -> Iterator[Span]:
    for n, row in enumerate(rows, start=1):
        yield observation_span(row, f"{label}: row {n}")


def trace_spans(traces: Iterable[Mapping[str, Any]], label: str) -> Iterator[Span]:
    """Whole traces (a trace download): the trace itself is the root step (its input, output, metadata and
    latency), its observations the steps under it."""
    for n, trace in enumerate(traces, start=1):
        t = snake_keys(trace)
        if not t.get("id") or not isinstance(t.get("observations"), list):
            raise DataError(f"{label}: trace {n}: a Langfuse trace needs id and observations")
        tid = str(t["id"])
        start = parse_time(t.get("timestamp"))
        latency = t.get("latency")
        end = start + timedelta(seconds=float(latency)) if start and isinstance(latency, int | float) else None
        yield Span(
            trace_id=tid,
            span_id=tid,
            name=str(t.get("name") or ""),
            kind="chain",
            start=start,
            end=end,
            input=as_text(t.get("input"), last_user=True),
            output=as_text(t.get("output"), answer=True),
            metadata=metadata_of(t.get("metadata")),
            session_id=str(t["session_id"]) if t.get("session_id") else None,
        )
        for m, obs in enumerate(t["observations"], start=1):
            if not isinstance(obs, Mapping):
                raise DataError(f"{label}: trace {n}: observation {m} is not an object")
            yield observation_span(obs, f"{label}: trace {n}: observation {m}", trace_id=tid)
