"""LangSmith exports → spans: runs (JSONL / JSON / Parquet, one run per row, as the SDK's ``list_runs`` and the
bulk export write them) and dataset examples (``inputs`` / ``outputs`` = reference outputs).

A run: ``id``, ``trace_id`` (the root run's id; without it, the first run of ``dotted_order`` or the run's
topmost ancestor), ``parent_run_id``, ``run_type`` (chain / retriever / llm / tool
/ …), ``inputs`` / ``outputs``, ``start_time`` / ``end_time``, ``prompt_tokens`` / ``completion_tokens`` /
``total_tokens``, ``extra.metadata`` (its ``thread_id`` / ``session_id`` / ``conversation_id`` names the thread a
trace belongs to), ``error``. An agent's LLM runs carry their tool calls in their outputs' AIMessage (its
``tool_calls``), its tool runs (``run_type: tool``) the arguments in their inputs and the result in their outputs.
A retriever run's outputs hold ``documents``
(``page_content``, ``metadata``, ``type: "Document"``); a chain run's outputs may pass LangChain Documents on
(a graph's retrieve node: ``documents``; ``create_retrieval_chain``: ``context``; ``RetrievalQA``:
``source_documents``; a traced function's list: ``output``), which are a trace's chunks when it has no retriever
run with documents. A dataset example becomes a trace of one root step
whose question is its input and whose ``expected_answer`` is its reference output.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from greval.errors import DataError
from greval.traces.spans import (
    NO_METADATA,
    Document,
    Span,
    SpanKind,
    as_int,
    as_text,
    documents_from,
    maybe_json,
    parse_time,
    session_from,
    tool_call_id,
    tool_calls_in,
    tool_output,
)

__all__ = ["example_spans", "is_example_row", "is_run_row", "run_spans"]

_KINDS: dict[str, SpanKind] = {"chain": "chain", "retriever": "retriever", "llm": "llm", "tool": "tool"}
#: LangSmith's own bookkeeping in a run's metadata, not the app's.
_INTERNAL = ("ls_", "langsmith", "langchain", "revision_id", "lc_")


def is_run_row(row: Mapping[str, Any]) -> bool:
    return "run_type" in row and ("id" in row or "run_id" in row)


def is_example_row(row: Mapping[str, Any]) -> bool:
    inputs = maybe_json(row.get("inputs"))
    return isinstance(inputs, Mapping) and "run_type" not in row and ("outputs" in row or "reference_outputs" in row)


def _metadata(row: Mapping[str, Any]) -> Mapping[str, Any]:
    extra = maybe_json(row.get("extra"))
    meta = extra.get("metadata") if isinstance(extra, Mapping) else None
    meta = maybe_json(meta if meta is not None else row.get("metadata"))
    if not isinstance(meta, Mapping):
        return NO_METADATA
    return {k: v for k, v in meta.items() if not str(k).lower().startswith(_INTERNAL)} or NO_METADATA


def _usage(row: Mapping[str, Any], outputs: Any) -> tuple[int | None, int | None, int | None]:
    prompt, completion, total = (as_int(row.get(k)) for k in ("prompt_tokens", "completion_tokens", "total_tokens"))
    if prompt is None and completion is None and total is None:  # a chat model's usage_metadata in its output
        gens = outputs.get("generations") if isinstance(outputs, Mapping) else None
        first = gens[0][0] if isinstance(gens, list) and gens and isinstance(gens[0], list) and gens[0] else None
        message = first.get("message") if isinstance(first, Mapping) else None
        kwargs = message.get("kwargs", message) if isinstance(message, Mapping) else None
        usage = kwargs.get("usage_metadata") if isinstance(kwargs, Mapping) else None
        if isinstance(usage, Mapping):
            prompt, completion, total = (
                as_int(usage.get(k)) for k in ("input_tokens", "output_tokens", "total_tokens")
            )
    return prompt, completion, total


def _trace_id(row: Mapping[str, Any], run_id: str, parent: str | None) -> str | None:
    """The trace a run belongs to: its ``trace_id``; a root run's own id; else the first run of its
    ``dotted_order`` (``<time>Z<root run id>.<time>Z<child id>…``); None when the row says none of these."""
    if row.get("trace_id"):
        return str(row["trace_id"])
    if not parent:
        return run_id
    dotted = row.get("dotted_order")
    root = str(dotted).split(".", 1)[0].partition("Z")[2] if dotted else ""
    return root or None


def _documents(kind: SpanKind, outputs: Any) -> tuple[Document, ...]:
    """A retriever's documents; a chain's too when its outputs pass them on (a graph's retrieve node, a
    retrieval chain's ``context`` / ``source_documents``): LangChain Documents only."""
    if kind == "retriever":
        return documents_from(outputs)
    return documents_from(outputs, strict=True) if kind == "chain" else ()


def _tool_parts(kind: SpanKind, row: Mapping[str, Any], inputs: Any, outputs: Any) -> dict[str, Any]:
    """An LLM run's tool calls (in its generations' AIMessage) and offered tools (``extra.invocation_params
    .tools``); a tool run's arguments (its inputs: ``{"input": …}`` unwrapped), result and call id."""
    if kind == "llm":
        extra = maybe_json(row.get("extra"))
        params = extra.get("invocation_params") if isinstance(extra, Mapping) else None
        tools = params.get("tools") if isinstance(params, Mapping) else None
        return {"tool_calls": tool_calls_in(outputs), "tools": tuple(tools) if isinstance(tools, list) else ()}
    if kind != "tool":
        return {}
    args = inputs.get("input") if isinstance(inputs, Mapping) and set(inputs) == {"input"} else inputs
    return {"arguments": args, "call_id": tool_call_id(outputs)}


def _output(kind: SpanKind, outputs: Any) -> str | None:
    if kind == "retriever":
        return None
    return tool_output(outputs) if kind == "tool" else as_text(outputs, answer=True)


def run_span(row: Mapping[str, Any], where: str) -> Span:
    """One LangSmith run as a span; a DataError naming ``where`` when it is not a run. A run whose trace the
    row does not say gets an empty ``trace_id`` (:func:`run_spans` finds it through its parents)."""
    run_id = row.get("id") or row.get("run_id")
    if not run_id or "run_type" not in row:
        raise DataError(f"{where}: not a LangSmith run (a run has id and run_type)")
    kind = _KINDS.get(str(row["run_type"]).lower(), "other")
    parent = str(row["parent_run_id"]) if row.get("parent_run_id") else None
    inputs, outputs = maybe_json(row.get("inputs")), maybe_json(row.get("outputs"))
    prompt, completion, total = _usage(row, outputs)
    meta = _metadata(row)
    return Span(
        trace_id=_trace_id(row, str(run_id), parent) or "",
        span_id=str(run_id),
        parent_id=parent,
        name=str(row.get("name") or ""),
        kind=kind,
        start=parse_time(row.get("start_time")),
        end=parse_time(row.get("end_time")),
        input=as_text(inputs, last_user=True),
        output=_output(kind, outputs),
        documents=_documents(kind, outputs),
        prompt_tokens=prompt,
        completion_tokens=completion,
        total_tokens=total,
        metadata=meta,
        error=str(row["error"]) if row.get("error") else None,
        session_id=session_from(meta),  # a thread: not the run's `session_id`, which is its project
        **_tool_parts(kind, row, inputs, outputs),
    )


def run_spans(rows: Iterable[Mapping[str, Any]], label: str) -> Iterator[Span]:
    """The runs as spans; runs whose rows name no trace (no ``trace_id`` nor ``dotted_order``) come last, in
    the trace of their topmost ancestor in the file (the root run's id is its trace's id)."""
    trace_of: dict[str, str] = {}
    unplaced: list[Span] = []
    for n, row in enumerate(rows, start=1):
        span = run_span(row, f"{label}: row {n}")
        if span.trace_id:
            trace_of[span.span_id] = span.trace_id
            yield span
        else:
            unplaced.append(span)
    parent_of = {s.span_id: s.parent_id for s in unplaced}
    for span in unplaced:
        top = span.span_id
        seen = {top}
        while top not in trace_of and parent_of.get(top) and parent_of[top] not in seen:
            top = str(parent_of[top])
            seen.add(top)
        span.trace_id = trace_of.get(top, top)
        yield span


def example_spans(rows: Iterable[Mapping[str, Any]], label: str) -> Iterator[Span]:
    """Dataset examples, each a trace of one step: input = the question, metadata = the reference output
    (``expected_answer``) and the example's metadata."""
    for n, row in enumerate(rows, start=1):
        inputs = maybe_json(row.get("inputs"))
        if not isinstance(inputs, Mapping):
            raise DataError(f"{label}: row {n}: a LangSmith example needs an 'inputs' object")
        ref = maybe_json(row.get("reference_outputs", row.get("outputs")))
        meta = dict(_metadata(row))
        expected = as_text(ref, answer=True)
        if expected:
            meta["expected_answer"] = expected
        eid = str(row.get("id") or row.get("example_id") or f"example-{n}")
        yield Span(trace_id=eid, span_id=eid, name="example", kind="chain", input=as_text(inputs), metadata=meta)
