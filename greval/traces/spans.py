"""The one shape every tracing tool's export is read into: a :class:`Span` (a Phoenix span, a LangSmith run, a
Langfuse observation) with its kind, text in and out, retrieved documents and token counts — plus the small
readers the format modules share (dotted keys to nested values, text out of messages, timestamps)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any, Literal

__all__ = [
    "NO_METADATA",
    "SESSION_KEYS",
    "Document",
    "Span",
    "SpanKind",
    "as_int",
    "as_text",
    "documents_from",
    "looks_like_documents",
    "maybe_json",
    "message_text",
    "metadata_of",
    "nest",
    "parse_time",
    "session_from",
    "snake_keys",
    "tool_call_id",
    "tool_calls_in",
    "tool_output",
]

SpanKind = Literal["chain", "retriever", "llm", "tool", "other"]


#: A step's metadata when it has none (one shared empty mapping, not a dict per step).
NO_METADATA: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True, slots=True)
class Document:
    """One retrieved document: becomes a chunk ``{id, text, score, metadata, span_id, position}``.
    ``position``: its index in the step's documents (Phoenix document annotations)."""

    text: str
    position: int
    id: str | None = None
    score: float | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class Span:
    """One step of a trace, whatever tool recorded it. Slotted, not a pydantic model: a 200,000-step trace is
    held whole before it becomes a row, and the readers give each field its type (a model took ~1.7 kB and a
    validation per step).

    ``input`` / ``output``: the step's text in and out (a question, an answer); ``documents``: what a retriever
    step returned (or a chain step passed on in its outputs); ``session_id``: the conversation the trace
    belongs to (traces sharing one become one conversation)."""

    trace_id: str
    span_id: str
    parent_id: str | None = None
    name: str = ""
    kind: SpanKind = "other"
    start: datetime | None = None
    end: datetime | None = None
    input: str | None = None
    output: str | None = None
    documents: tuple[Document, ...] = ()
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    total_tokens: int | None = None
    metadata: Mapping[str, Any] = field(default_factory=lambda: NO_METADATA)
    error: str | None = None
    session_id: str | None = None
    #: An LLM step's tool calls ``{name, arguments, id?}`` and the tools it was offered (definitions); a tool
    #: step's arguments as recorded and the id of the call it answers: an agent's trajectory (greval.traces.assemble).
    tool_calls: tuple[dict[str, Any], ...] = ()
    tools: tuple[Any, ...] = ()
    arguments: Any = None
    call_id: str | None = None

    @property
    def seconds(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max(0.0, (self.end - self.start).total_seconds())


#: Metadata keys that name a trace's conversation (LangSmith groups a thread's traces by any of them).
SESSION_KEYS = ("session_id", "thread_id", "conversation_id")


def session_from(meta: Mapping[str, Any]) -> str | None:
    """The conversation a trace's metadata names (:data:`SESSION_KEYS`), or None."""
    for key in SESSION_KEYS:
        value = meta.get(key)
        if value is not None and str(value).strip():
            return str(value)
    return None


def maybe_json(value: Any) -> Any:
    """JSON text (an object or array) parsed; anything else as it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    return value


def _numbered(node: dict[str, Any]) -> bool:
    """Whether a level's keys are all 0, 1, 2 … (OpenInference's ``retrieval.documents.0.…``): a list."""
    first = next(iter(node), None)
    return isinstance(first, str) and first.isdigit() and all(isinstance(k, str) and k.isdigit() for k in node)


_PLAIN = (str, int, float, bool, type(None))


def _nested(value: Any) -> Any:
    if isinstance(value, Mapping):
        return _nest(value)
    if hasattr(value, "tolist"):  # numpy arrays from Parquet
        value = value.tolist()
    if isinstance(value, list | tuple):
        return [_nest(v) if isinstance(v, Mapping) else v for v in value]
    return value


@functools.lru_cache(maxsize=8192)
def _path(key: str) -> tuple[tuple[str, ...], str]:
    """A dotted key's levels and last part (an export repeats the same few keys on every span)."""
    *levels, last = key.split(".")
    return tuple(levels), last


def _nest(flat: Mapping[str, Any]) -> dict[str, Any] | list[Any]:
    """:func:`nest`, where a level numbered at the top is a list too. Each level a dotted key makes is made a
    list once, after its keys are all in (children first); nested values come back already done, so nothing is
    walked twice (walking the whole result again at every depth made deep attributes quadratic)."""
    out: dict[str, Any] = {}
    made: list[tuple[dict[str, Any], str, dict[str, Any]]] = []  # (parent, key, level) as dotted keys made them
    for key, value in flat.items():
        if type(value) not in _PLAIN:
            value = _nested(value)
        levels, last = _path(key if type(key) is str else str(key))
        cur = out
        for part in levels:
            nxt = cur.get(part)
            if type(nxt) is not dict:
                nxt = cur[part] = {}
                made.append((cur, part, nxt))
            cur = nxt
        old = cur.get(last)
        if type(old) is dict and isinstance(value, dict):
            old.update(value)
        else:
            cur[last] = value
    for parent, part, level in reversed(made):
        if parent.get(part) is level and _numbered(level):
            parent[part] = [level[k] for k in sorted(level, key=int)]
    return [out[k] for k in sorted(out, key=int)] if _numbered(out) else out


def nest(flat: Mapping[str, Any]) -> dict[str, Any]:
    """Dotted keys to nested values, inside nested values too: ``{"a.b": 1, "c": [{"d.e": 2}]}`` →
    ``{"a": {"b": 1}, "c": [{"d": {"e": 2}}]}``; numbered levels (``retrieval.documents.0.…``) become lists.
    Phoenix writes attributes flat (REST), nested (OTLP JSON) or half-way (a span dataframe's
    ``attributes.retrieval.documents`` column)."""
    result = _nest(flat)
    return result if isinstance(result, dict) else {}


_MESSAGE_KEYS = ("content", "text", "page_content")
_QUESTION_KEYS = ("question", "query", "input", "user_input", "prompt", "prompts")
_ANSWER_KEYS = ("answer", "output", "result", "response", "text")
#: An object's fields read as a step's text, in order: an input's question first; an output's answer first (a
#: retrieval chain's outputs hold its ``input`` beside its ``answer``).
_TEXT_KEYS = _QUESTION_KEYS + _ANSWER_KEYS
_OUTPUT_KEYS = _ANSWER_KEYS + _QUESTION_KEYS


def _unwrap(message: Any) -> Any:
    """OpenInference wraps each message: ``llm.input_messages.0.message.content``."""
    inner = message.get("message") if isinstance(message, Mapping) else None
    return inner if isinstance(inner, Mapping) and not any(k in message for k in _MESSAGE_KEYS) else message


def _message_text(message: Any) -> str | None:
    """The text of one chat message: a string, ``{content}``, LangChain's ``{kwargs: {content}}`` or parts."""
    message = _unwrap(message)
    if isinstance(message, str):
        return message
    if not isinstance(message, Mapping):
        return None
    inner = message.get("kwargs") if isinstance(message.get("kwargs"), Mapping) else message
    assert isinstance(inner, Mapping)
    content = next((inner[k] for k in _MESSAGE_KEYS if k in inner), None)
    if isinstance(content, list):  # content parts: [{"type": "text", "text": …}]
        parts = [p.get("text") if isinstance(p, Mapping) else p for p in content]
        content = "".join(p for p in parts if isinstance(p, str))
    return content if isinstance(content, str) else None


def _role(message: Any) -> str:
    message = _unwrap(message)
    if not isinstance(message, Mapping):
        return ""
    inner = message.get("kwargs") if isinstance(message.get("kwargs"), Mapping) else message
    assert isinstance(inner, Mapping)
    role = inner.get("role") or inner.get("type") or ""
    ids = message.get("id")
    if not role and isinstance(ids, list) and ids:  # LangChain's serialised class path
        role = str(ids[-1])
    return str(role).lower()


_USER_ROLES = frozenset(("user", "human", "humanmessage"))


def as_text(value: Any, *, last_user: bool = False, answer: bool = False) -> str | None:
    """A step's input or output as text: a string as is; from an object its question / answer / … field (its
    answer first when ``answer``: an output); from chat messages the last user message (``last_user``) or the
    last message; ``None`` when none is found."""
    value = maybe_json(value)
    if value is None:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        flat = [m for v in value for m in (v if isinstance(v, list) else [v])]
        if last_user:
            users = [m for m in reversed(flat) if _role(m) in _USER_ROLES]
            if users:
                return next((t for t in map(_message_text, users) if t), None)
        return next((t for t in map(_message_text, reversed(flat)) if t), None)
    if isinstance(value, Mapping):
        for key in _OUTPUT_KEYS if answer else _TEXT_KEYS:
            if key in value:
                found = as_text(value[key], last_user=last_user, answer=answer)
                if found:
                    return found
        for key in ("messages", "generations", "choices"):
            if key in value:
                found = as_text(value[key], last_user=last_user, answer=answer)
                if found:
                    return found
        if "message" in value:
            return _message_text(value["message"])
        if len(value) == 1:
            only = next(iter(value.values()))
            return only if isinstance(only, str) else None
    return None


def parse_time(value: Any) -> datetime | None:
    """ISO 8601 text (``Z`` or an offset; Langfuse's ``2024-05-29 13:46:19.963000``), epoch seconds or
    milliseconds, or a datetime / pandas Timestamp; naive times are UTC."""
    if value is None or (isinstance(value, float) and value != value):
        return None
    if hasattr(value, "to_pydatetime"):
        value = value.to_pydatetime()
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if isinstance(value, int | float) and not isinstance(value, bool):
        seconds = value / 1000 if value > 1e11 else value
        return datetime.fromtimestamp(seconds, tz=UTC)
    if isinstance(value, str) and value.strip():
        try:
            parsed = datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
        except ValueError:
            return None
        return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)
    return None


_CAMEL = re.compile(r"(?<=[a-z0-9])([A-Z])")


@functools.lru_cache(maxsize=4096)
def _snake(key: str) -> str:
    return _CAMEL.sub(r"_\1", key).lower()


def snake_keys(row: Mapping[str, Any]) -> dict[str, Any]:
    """Top-level keys in snake_case (Langfuse's API and UI write ``traceId``, its blob export ``trace_id``);
    each key spelt once (an export repeats the same few keys on every row)."""
    return {_snake(str(k)): v for k, v in row.items()}


def as_int(value: Any) -> int | None:
    """A token count: an int, a float count (pandas' NaN-able columns) or numeric text; else None."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        return None if value != value else int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, str) and value.strip().isdigit():
        return int(value)
    return None


_DOC_TEXT = ("page_content", "content", "text", "pageContent")
_DOC_IDS = ("id", "doc_id", "document_id", "chunk_id")
_DOC_SCORES = ("score", "relevance_score", "similarity")


def _doc_id(doc: Mapping[str, Any], meta: Mapping[str, Any]) -> str | None:
    for source in (doc, meta):
        for key in _DOC_IDS:
            if source.get(key) is not None and str(source[key]).strip():
                return str(source[key])
    return None


#: Where a step's outputs hold its documents: a retriever's ``documents``; a chain's ``context``
#: (``create_retrieval_chain``), ``source_documents`` (``RetrievalQA``), a graph state's ``documents`` / ``docs``;
#: ``output`` (a traced function's list, which LangSmith wraps as ``{"output": [...]}``).
_DOC_KEYS = ("documents", "docs", "context", "source_documents", "output")
#: The text keys of a LangChain Document (Python, JS): what makes a chain step's output items documents.
_PAGE = ("page_content", "pageContent")


def documents_from(value: Any, *, strict: bool = False) -> tuple[Document, ...]:
    """Retrieved documents as LangChain-style tools record them: a list (or ``{"documents": [...]}`` and the
    other :data:`_DOC_KEYS`) of ``{page_content | content | text, metadata, id?}`` or LangChain's serialised
    Document (``{lc, id, kwargs}``); ids and scores also read from the metadata. Items without text are left
    out. ``strict`` (a chain step's outputs, where a list of ``{content}`` is more often chat messages): only
    items with a Document's ``page_content`` count."""
    value = maybe_json(value)
    if isinstance(value, Mapping):
        value = next((value[k] for k in _DOC_KEYS if k in value), None)
        value = maybe_json(value)
    if not isinstance(value, list):
        return ()
    out = []
    for position, item in enumerate(value):
        item = maybe_json(item)
        if isinstance(item, Mapping) and isinstance(item.get("kwargs"), Mapping):  # LangChain's serialised form
            item = item["kwargs"]
        if not isinstance(item, Mapping):
            continue
        text = next((item[k] for k in (_PAGE if strict else _DOC_TEXT) if isinstance(item.get(k), str)), None)
        if text is None:
            continue
        meta = maybe_json(item.get("metadata"))
        meta = dict(meta) if isinstance(meta, Mapping) else {}
        score = next((x for x in (item.get(k, meta.get(k)) for k in _DOC_SCORES) if isinstance(x, int | float)), None)
        out.append(Document(id=_doc_id(item, meta), text=text, score=score, metadata=meta, position=position))
    return tuple(out)


def metadata_of(value: Any) -> Mapping[str, Any]:
    """A step's metadata (JSON text parsed) as a dict, or the shared empty mapping."""
    value = maybe_json(value)
    return dict(value) if isinstance(value, Mapping) and value else NO_METADATA


def looks_like_documents(value: Any) -> bool:
    """Whether an output is a list of retrieved documents (a retriever step recorded as a plain span)."""
    return bool(documents_from(value))


def _call_of(raw: Any) -> dict[str, Any] | None:
    """One tool call as ``{name, arguments, id?}``: OpenAI's ``{id, function: {name, arguments}}``, LangChain's
    ``{name, args, id}``, OpenInference's ``{tool_call: {id, function: {name, arguments}}}``."""
    raw = maybe_json(raw)
    if isinstance(raw, Mapping) and isinstance(raw.get("tool_call"), Mapping):
        raw = raw["tool_call"]
    if not isinstance(raw, Mapping):
        return None
    fn = raw.get("function")
    body = fn if isinstance(fn, Mapping) else raw
    name = body.get("name")
    if not isinstance(name, str) or not name.strip():
        return None
    args = next((body[k] for k in ("arguments", "args", "input") if k in body), None)
    call: dict[str, Any] = {"name": name, "arguments": args}
    if raw.get("id") not in (None, ""):
        call["id"] = str(raw["id"])
    return call


_CALL_PLACES = ("message", "kwargs", "generations", "choices", "messages", "output", "outputs")


def tool_calls_in(value: Any, depth: int = 0) -> tuple[dict[str, Any], ...]:
    """The tool calls an LLM step's output asks for, wherever the tracing tool put them: a message's
    ``tool_calls`` (also LangChain's ``additional_kwargs.tool_calls``), inside ``generations`` / ``choices`` /
    ``messages`` / ``kwargs`` / ``message``, or OpenInference's output messages."""
    value = maybe_json(value)
    if depth > 6 or value is None:
        return ()
    if isinstance(value, list):
        return tuple(c for v in value for c in tool_calls_in(v, depth + 1))
    if not isinstance(value, Mapping):
        return ()
    inner = value.get("kwargs") if isinstance(value.get("kwargs"), Mapping) else value
    assert isinstance(inner, Mapping)
    for holder in (inner, inner.get("additional_kwargs")):
        raw = maybe_json(holder.get("tool_calls")) if isinstance(holder, Mapping) else None
        if isinstance(raw, list) and raw:
            return tuple(c for c in map(_call_of, raw) if c is not None)
    return tuple(c for k in _CALL_PLACES if k in inner and k != "kwargs" for c in tool_calls_in(inner[k], depth + 1))


def tool_output(value: Any) -> str | None:
    """What a tool step returned, as text: a string as it is, a LangChain ToolMessage's content, ``{"output":
    …}`` unwrapped, anything else as JSON."""
    value = maybe_json(value)
    if isinstance(value, Mapping) and set(value) == {"output"}:
        value = maybe_json(value["output"])
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, Mapping) and (isinstance(value.get("kwargs"), Mapping) or "content" in value):
        text = _message_text(value)
        if text is not None:
            return text
    return json.dumps(value, ensure_ascii=False, default=str)


def tool_call_id(value: Any) -> str | None:
    """The id of the call a tool step answers, when its output (a ToolMessage) names it."""
    value = maybe_json(value)
    if isinstance(value, Mapping) and set(value) == {"output"}:
        value = maybe_json(value["output"])
    inner = value.get("kwargs", value) if isinstance(value, Mapping) else None
    found = inner.get("tool_call_id") if isinstance(inner, Mapping) else None
    return str(found) if found not in (None, "") else None


def message_text(value: Any) -> str | None:
    """The text of one chat message given whole (``{"role": "assistant", "content": …}``: an LLM step's output
    as Langfuse records it), or None."""
    return _message_text(maybe_json(value))
