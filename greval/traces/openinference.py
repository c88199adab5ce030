"""OpenInference spans (what Arize Phoenix stores) → :class:`~greval.traces.spans.Span`.

One reader for the three shapes Phoenix hands spans out in: its REST API's spans (``context.trace_id``,
``span_kind``, ``attributes`` with dotted keys: ``client.spans.get_spans``, and a JSONL export of them), a span
dataframe written to Parquet / JSONL (``context.span_id`` and ``attributes.*`` columns:
``client.spans.get_spans_dataframe``), and nested attributes as OTLP JSON writes them. Attributes follow the
OpenInference semantic conventions: ``openinference.span.kind``, ``input.value`` / ``output.value``,
``retrieval.documents.N.document.{id,content,score,metadata}``, ``llm.token_count.{prompt,completion,total}``,
``metadata``, ``session.id`` (the conversation a trace belongs to); an agent's LLM spans' tool calls
(``llm.output_messages.N.message.tool_calls.M.tool_call.{id,function.name,function.arguments}``) and offered
tools (``llm.tools``), and its TOOL spans (``tool.name``, ``tool.id``, ``input.value`` / ``output.value``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from greval.errors import DataError
from greval.traces.spans import (
    Document,
    Span,
    SpanKind,
    as_int,
    as_text,
    maybe_json,
    metadata_of,
    nest,
    parse_time,
    tool_calls_in,
    tool_output,
)

__all__ = ["is_span_row", "span_from_row"]

_KINDS: dict[str, SpanKind] = {
    "CHAIN": "chain", "AGENT": "chain", "RETRIEVER": "retriever", "LLM": "llm", "TOOL": "tool",
}  # fmt: skip


def _context(row: Mapping[str, Any]) -> Any:
    """The span's ``context`` (REST spans: an object; a span dataframe: ``context.span_id`` columns)."""
    ctx = row.get("context")
    if isinstance(ctx, Mapping):
        return ctx
    return nest({k: v for k, v in row.items() if str(k).startswith("context.")}).get("context")


def is_span_row(row: Mapping[str, Any]) -> bool:
    """Whether a row has the shape of a Phoenix span (REST or dataframe)."""
    context = _context(row)
    has_ids = isinstance(context, Mapping) and "span_id" in context and "trace_id" in context
    return has_ids and ("span_kind" in row or "attributes" in row or any(str(k).startswith("attributes.") for k in row))


#: The attributes greval reads (the first part of their dotted names), and for an LLM / a retriever span the
#: parts under ``llm`` / ``retrieval`` it reads: only these are nested, not the whole of a span's attributes
#: (an LLM span's invocation parameters and tool schemas are most of them).
_READ = frozenset(("input", "output", "openinference", "metadata", "session"))
_READ_BY_KIND: dict[SpanKind, frozenset[str]] = {
    "llm": frozenset(("llm.input_messages", "llm.output_messages", "llm.token_count", "llm.tools")),
    "retriever": frozenset(("retrieval.documents",)),
    "tool": frozenset(("tool.name", "tool.id")),
}


def _flat_attributes(row: Mapping[str, Any]) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    attrs = maybe_json(row.get("attributes"))
    if isinstance(attrs, Mapping):
        flat.update(attrs)
    for key, value in row.items():
        if str(key).startswith("attributes."):
            flat[str(key).removeprefix("attributes.")] = value
    return flat


def _kind_of(row: Mapping[str, Any], flat: Mapping[str, Any]) -> SpanKind:
    name = row.get("span_kind") or flat.get("openinference.span.kind")
    if name is None:
        name = _dig(flat, "openinference", "span", "kind")
    return _KINDS.get(str(name or "").upper(), "other")


@functools.lru_cache(maxsize=8192)
def _read(key: str, kind: SpanKind) -> bool:
    """Whether greval reads the attribute ``key`` (flat, or the first level of nested ones) of a ``kind`` span."""
    head, _, rest = key.partition(".")
    if head in _READ:
        return True
    deeper = _READ_BY_KIND.get(kind, frozenset())
    return f"{head}.{rest.split('.', 1)[0]}" in deeper if rest else any(d.startswith(f"{head}.") for d in deeper)


def _attributes(flat: Mapping[str, Any], kind: SpanKind) -> dict[str, Any]:
    """The attributes greval reads for a span of ``kind``, nested (:data:`_READ`)."""
    picked: dict[str, Any] = {}
    for key, value in flat.items():
        name = key if type(key) is str else str(key)
        if _absent(value) or not _read(name, kind):
            continue
        if "." not in name and isinstance(value, Mapping) and name not in _READ:  # nested (OTLP JSON): parts read
            value = {k: v for k, v in value.items() if _read(f"{name}.{k}", kind)}
        picked[name] = value
    return nest(picked)


def _dig(node: Any, *keys: str) -> Any:
    """``node[k1][k2]…``, or None where a level is missing or not an object."""
    for key in keys:
        node = node.get(key) if isinstance(node, Mapping) else None
    return node


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, float) and value != value)


def _documents(attrs: Mapping[str, Any]) -> tuple[Document, ...]:
    retrieval = attrs.get("retrieval")
    docs = retrieval.get("documents") if isinstance(retrieval, Mapping) else None
    out = []
    for position, item in enumerate(docs if isinstance(docs, list) else []):
        doc = item.get("document", item) if isinstance(item, Mapping) else None
        if not isinstance(doc, Mapping) or _absent(doc.get("content")):
            continue
        meta = maybe_json(doc.get("metadata"))
        score = doc.get("score")
        out.append(
            Document(
                id=None if _absent(doc.get("id")) else str(doc["id"]),
                text=str(doc["content"]),
                score=float(score) if isinstance(score, int | float) and not _absent(score) else None,
                metadata=dict(meta) if isinstance(meta, Mapping) else {},
                position=position,
            )
        )
    return tuple(out)


def _value(attrs: Mapping[str, Any], key: str) -> str | None:
    node = attrs.get(key)
    return as_text(node.get("value"), answer=key == "output") if isinstance(node, Mapping) else None


def _tool_parts(kind: SpanKind, attrs: Mapping[str, Any], llm: Mapping[str, Any]) -> dict[str, Any]:
    """An LLM span's tool calls and offered tools (``llm.tools.N.tool.json_schema``); a TOOL span's arguments
    (``input.value`` as recorded), its result (``output.value``), tool name and call id (``tool.name``,
    ``tool.id``)."""
    if kind == "llm":
        tools = llm.get("tools")
        offered = [t.get("tool", t) if isinstance(t, Mapping) else t for t in tools] if isinstance(tools, list) else []
        return {
            "tool_calls": tool_calls_in(llm.get("output_messages")),
            "tools": tuple(maybe_json(t.get("json_schema", t)) if isinstance(t, Mapping) else t for t in offered),
        }
    if kind != "tool":
        return {}
    tool = attrs.get("tool") if isinstance(attrs.get("tool"), Mapping) else {}
    assert isinstance(tool, Mapping)
    given, out = (_dig(attrs, key, "value") for key in ("input", "output"))
    parts: dict[str, Any] = {"arguments": given, "output": tool_output(out)}
    if not _absent(tool.get("name")):
        parts["name"] = str(tool["name"])
    if not _absent(tool.get("id")):
        parts["call_id"] = str(tool["id"])
    return parts


def span_from_row(row: Mapping[str, Any], where: str) -> Span:
    """One Phoenix span; a DataError naming ``where`` when it has no trace or span id."""
    ctx = _context(row)
    if not isinstance(ctx, Mapping) or _absent(ctx.get("trace_id")) or _absent(ctx.get("span_id")):
        raise DataError(f"{where}: a Phoenix span needs context.trace_id and context.span_id")
    flat = _flat_attributes(row)
    kind = _kind_of(row, flat)
    attrs = _attributes(flat, kind)
    found = _dig(attrs, "llm")
    llm: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    found = _dig(llm, "token_count")
    tokens: Mapping[str, Any] = found if isinstance(found, Mapping) else {}
    out_text = _value(attrs, "output")
    if kind == "llm":  # the output is often the provider's whole response: prefer the output messages
        out_text = as_text(llm.get("output_messages")) or out_text
    status = str(row.get("status_code") or "")
    parent = row.get("parent_id")
    session = _dig(attrs, "session", "id")
    tool = _tool_parts(kind, attrs, llm)
    return Span(
        trace_id=str(ctx["trace_id"]),
        span_id=str(ctx["span_id"]),
        parent_id=None if _absent(parent) or parent == "" else str(parent),
        name=tool.pop("name", None) or str(row.get("name") or ""),
        kind=kind,
        start=parse_time(row.get("start_time")),
        end=parse_time(row.get("end_time")),
        input=as_text(llm.get("input_messages"), last_user=True) if kind == "llm" else _value(attrs, "input"),
        output=tool.pop("output") if kind == "tool" else out_text,
        documents=_documents(attrs) if kind == "retriever" else (),
        prompt_tokens=as_int(tokens.get("prompt")),
        completion_tokens=as_int(tokens.get("completion")),
        total_tokens=as_int(tokens.get("total")),
        metadata=metadata_of(attrs.get("metadata")),
        error=str(row.get("status_message") or "") or None if status == "ERROR" else None,
        session_id=None if _absent(session) or not str(session).strip() else str(session),
        **tool,
    )
