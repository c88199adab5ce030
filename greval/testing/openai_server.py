"""A local OpenAI-compatible chat-completions server for greval's tests and benchmarks.

It is a real HTTP server (aiohttp), so tests exercise the same client stack as production
(``openai`` SDK, ``langchain-openai``, retries, timeouts) while answers stay deterministic
and free. It understands the three ways ``ChatOpenAI.with_structured_output`` asks for
structured output (``json_schema`` response format, function calling, JSON mode) and
fabricates schema-valid instances from a stable hash of the prompt, so answers differ
between items yet repeat exactly for the same request. Faults, latency and malformed
answers are injected through scripted rules posted to ``/_admin/script``.

Run it as ``python -m greval.testing.openai_server --port 0``; it prints one line
``READY http://HOST:PORT/v1`` once listening. :class:`OpenAIServer` wraps that subprocess.

Rules (first match with ``times`` left wins; ``match`` is a substring, or a regex with
``"regex": true``, of all message contents joined; ``probability`` draws are keyed by
seed, rule, prompt and attempt so they do not depend on request interleaving)::

    {"match": "c17", "times": 1, "action": {"type": "fault", "status": 429, "retry_after": 2}}
    actions: respond{content|text}, fault{status, retry_after, body, message, code, error_type, param,
             echo_auth}, timeout{seconds}, malformed, invalid, drop_ids{ids}, extra_ids{ids}, latency{seconds},
             length (the answer cut in half, finish_reason "length", as when max_tokens runs out),
             content_filter (no content, finish_reason "content_filter")

``respond.text`` is sent verbatim as the content, or as the tool-call arguments when the
request forces a tool.

Token log-probabilities (``"logprobs": true``, optional ``top_logprobs`` k) depend on the ``logprobs`` knob:
``"null"`` (the default, today's answers byte for byte: ``logprobs: null``, as a server that ignores the
parameter), ``"on"`` (OpenAI-shaped ``choices[i].logprobs.content``: the content cut into words, whitespace runs
and single punctuation characters, each with a deterministic log-probability; where the JSON answer spells an
enum value or a small integer range's value, the first token's ``top_logprobs`` list the other values' first
tokens, the chosen one with a probability drawn in [0.34, 0.99] per prompt, choice and position, so that
confidences vary across items; a tool-call answer has ``{"content": null, "refusal": null}``, as the arguments
get none; a streamed answer none), or ``"reject"`` (400 ``unsupported_parameter`` on ``param: "logprobs"``, as a
model that does not offer them).

``fault`` answers ``status`` with an OpenAI-style error body ``{"error": {"message", "type", "param",
"code"}}``: the defaults for the status (400 invalid request, 401 bad key, 403, 404 unknown model, 413,
429, 500, 503), each field overridable (``message``, ``code``, ``error_type``, ``param``), or ``body``, sent
verbatim as the JSON body. ``echo_auth: true`` appends the request's ``Authorization`` header to the error
message (the body's ``error.message``, else a top-level ``authorization`` field), as some proxies do;
``echo_auth: "token"`` echoes the credential alone, without its ``Bearer`` scheme::

    {"match": "Question 3", "action": {"type": "fault", "status": 400, "body": {"error": {
        "message": "This model's maximum context length is 8192 tokens …",
        "type": "invalid_request_error", "code": "context_length_exceeded"}}}}
    {"action": {"type": "fault", "status": 401, "echo_auth": true}}
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import hashlib
import json
import math
import os
import queue
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Final

from aiohttp import web

__all__ = ["OpenAIServer", "ServerConfig", "build_app", "generate_instance", "main", "tokenize"]

MAX_LOGGED_REQUESTS: Final = 10_000
_SCHEMA_CACHE_SIZE: Final = 512
_MAX_REF_DEPTH: Final = 12
_DEFAULT_ARRAY_LEN: Final = 2

_ITEM_IDS_RE: Final = re.compile(r"^[ \t]*Item ids:[ \t]*(.*?)[ \t]*$", re.MULTILINE)
_FENCE_RE: Final = re.compile(r"```(?:json|JSON)?[ \t]*\n(.*?)```", re.DOTALL)
_SENTENCE_FIELDS: Final = frozenset(
    {"reason", "reasoning", "rationale", "explanation", "justification", "feedback", "comment", "analysis"}
)
_WORD_TEXT: Final = (
    "alpha amber answer basis bright brief calm claim clear context cobalt coral delta direct "
    "echo exact fact faithful fern focus grounded harbor iris jade kernel linen lucid maple "
    "meadow nova ocean olive orbit pearl plain prism quartz quiet river sage signal silver "
    "simple solid source steady stone summit tidy topaz umber valid velvet vivid willow yonder "
    "zephyr zinc evidence passage record detail metric judge"
)
_WORDS: Final = tuple(_WORD_TEXT.split())
_SUBJECTS: Final = ("The answer", "The claim", "The response", "The statement", "This item", "The passage")
_VERDICTS: Final = (
    "is supported by the retrieved context",
    "is only partly grounded in the sources",
    "restates the key fact directly",
    "omits a detail the question asks for",
    "matches the reference closely",
    "adds information not found in the context",
    "answers the question without hedging",
    "follows from the cited passage",
)
_QUALIFIERS: Final = ("clearly", "mostly", "arguably", "plainly", "largely", "barely", "fully", "partly")


# --------------------------------------------------------------------------------------
# Schema compilation (cached) and deterministic instance generation
# --------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Node:
    """A JSON schema with `$ref`/`allOf` resolved, so generation never re-walks definitions."""

    kind: str  # const, enum, choice, object, array, string, integer, number, boolean, null, any
    const: Any = None
    options: tuple[Any, ...] = ()
    choices: tuple[_Node, ...] = ()
    props: tuple[tuple[str, _Node], ...] = ()
    required: tuple[str, ...] = ()
    items: _Node | None = None
    min_items: int = 0
    max_items: int | None = None
    lo: float | None = None
    hi: float | None = None
    lo_exclusive: bool = False
    hi_exclusive: bool = False
    min_len: int = 0
    max_len: int | None = None
    fmt: str | None = None

    @property
    def has_id(self) -> bool:
        return self.kind == "object" and any(name == "id" for name, _ in self.props)


def _lookup_ref(root: dict[str, Any], ref: str) -> dict[str, Any]:
    if not ref.startswith("#"):
        return {}
    node: Any = root
    for part in ref.lstrip("#").split("/"):
        if not part:
            continue
        part = part.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, dict) or part not in node:
            return {}
        node = node[part]
    return node if isinstance(node, dict) else {}


def _merge_all_of(schema: dict[str, Any], root: dict[str, Any]) -> dict[str, Any]:
    merged: dict[str, Any] = {k: v for k, v in schema.items() if k != "allOf"}
    for part in schema.get("allOf") or []:
        if not isinstance(part, dict):
            continue
        if "$ref" in part:
            part = {**_lookup_ref(root, str(part["$ref"])), **{k: v for k, v in part.items() if k != "$ref"}}
        part = _merge_all_of(part, root) if "allOf" in part else part
        for key, value in part.items():
            if key == "properties" and isinstance(value, dict):
                merged["properties"] = {**value, **merged.get("properties", {})}
            elif key == "required" and isinstance(value, list):
                merged["required"] = list(dict.fromkeys([*merged.get("required", []), *value]))
            else:
                merged.setdefault(key, value)
    return merged


def _compile(schema: Any, root: dict[str, Any], depth: int = 0) -> _Node:
    """Resolve a (sub)schema into a `_Node`; recursion through `$ref` stops at a fixed depth."""
    if not isinstance(schema, dict):
        return _Node("any")
    if "$ref" in schema:
        if depth >= _MAX_REF_DEPTH:
            return _Node("null")
        target = _lookup_ref(root, str(schema["$ref"]))
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        return _compile({**target, **extra}, root, depth + 1)
    if "allOf" in schema:
        return _compile(_merge_all_of(schema, root), root, depth + 1)
    if "const" in schema:
        return _Node("const", const=schema["const"])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return _Node("enum", options=tuple(schema["enum"]))
    for key in ("anyOf", "oneOf"):
        alternatives = schema.get(key)
        if isinstance(alternatives, list) and alternatives:
            compiled = [_compile(alt, root, depth + 1) for alt in alternatives]
            non_null = tuple(n for n in compiled if n.kind != "null")
            if not non_null:
                return _Node("null")
            return non_null[0] if len(non_null) == 1 else _Node("choice", choices=non_null)
    typ = schema.get("type")
    if isinstance(typ, list):
        types = [t for t in typ if t != "null"] or ["null"]
        if len(types) > 1:
            return _Node("choice", choices=tuple(_compile({**schema, "type": t}, root, depth + 1) for t in types))
        typ = types[0]
    if typ is None:
        if "properties" in schema:
            typ = "object"
        elif "items" in schema:
            typ = "array"
        else:
            return _Node("any")
    if typ == "object":
        raw_props = schema.get("properties") or {}
        props = tuple((str(name), _compile(sub, root, depth + 1)) for name, sub in raw_props.items())
        required = tuple(str(r) for r in schema.get("required") or [] if r in raw_props)
        return _Node("object", props=props, required=required)
    if typ == "array":
        items = schema.get("items")
        return _Node(
            "array",
            items=_compile(items, root, depth + 1) if isinstance(items, dict) else _Node("any"),
            min_items=int(schema.get("minItems", 0)),
            max_items=int(schema["maxItems"]) if "maxItems" in schema else None,
        )
    if typ in ("integer", "number"):
        lo, lo_ex = _bound(schema, "minimum", "exclusiveMinimum")
        hi, hi_ex = _bound(schema, "maximum", "exclusiveMaximum")
        return _Node(str(typ), lo=lo, hi=hi, lo_exclusive=lo_ex, hi_exclusive=hi_ex)
    if typ == "string":
        return _Node(
            "string",
            min_len=int(schema.get("minLength", 0)),
            max_len=int(schema["maxLength"]) if "maxLength" in schema else None,
            fmt=str(schema["format"]) if "format" in schema else None,
        )
    if typ in ("boolean", "null"):
        return _Node(str(typ))
    return _Node("any")


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float | None, bool]:
    ex = schema.get(exclusive)
    if isinstance(ex, int | float) and not isinstance(ex, bool):
        return float(ex), True
    inc = schema.get(inclusive)
    if isinstance(inc, int | float) and not isinstance(inc, bool):
        return float(inc), False
    return None, False


_schema_cache: dict[str, _Node] = {}


def compile_schema(schema: Any) -> _Node:
    """Compile once per distinct schema: the same judge schema arrives with every request."""
    key = json.dumps(schema, sort_keys=True, default=str)
    node = _schema_cache.get(key)
    if node is None:
        node = _compile(schema, schema if isinstance(schema, dict) else {})
        if len(_schema_cache) >= _SCHEMA_CACHE_SIZE:
            _schema_cache.pop(next(iter(_schema_cache)))
        _schema_cache[key] = node
    return node


class _Gen:
    """Generation context: every choice is a pure function of (prompt, seed, choice, path)."""

    __slots__ = ("base", "ids")

    def __init__(self, prompt: str, seed: int, choice: int, ids: list[str] | None) -> None:
        self.base = hashlib.blake2b(f"{seed}\x00{choice}\x00{prompt}".encode(), digest_size=16).digest()
        self.ids = ids

    def h(self, path: str) -> int:
        digest = hashlib.blake2b(self.base + path.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")

    def value(self, node: _Node, path: str, name: str) -> Any:
        kind = node.kind
        if kind == "const":
            return node.const
        if kind == "enum":
            return node.options[self.h(path) % len(node.options)]
        if kind == "choice":
            return self.value(node.choices[self.h(path + "|") % len(node.choices)], path, name)
        if kind == "object":
            return {key: self.value(sub, f"{path}.{key}", key) for key, sub in node.props}
        if kind == "array":
            return self._array(node, path, name)
        if kind == "string":
            return self._string(node, path, name)
        if kind == "integer":
            return self._integer(node, path)
        if kind == "number":
            return self._number(node, path)
        if kind == "boolean":
            return self.h(path) % 2 == 0
        if kind == "null":
            return None
        return self._words(path, 2)

    def _array(self, node: _Node, path: str, name: str) -> list[Any]:
        item = node.items or _Node("any")
        if item.has_id and self.ids is not None:
            id_node = next(sub for key, sub in item.props if key == "id")
            out = []
            for raw_id in self.ids:
                element = self.value(item, f"{path}[{raw_id}]", name)
                element["id"] = _coerce_id(raw_id, id_node)
                out.append(element)
            return out
        count = max(_DEFAULT_ARRAY_LEN, node.min_items)
        if node.max_items is not None:
            count = min(count, node.max_items)
        return [self.value(item, f"{path}[{i}]", name) for i in range(count)]

    def _words(self, path: str, n: int) -> str:
        h = self.h(path)
        words = []
        for _ in range(n):
            words.append(_WORDS[h % len(_WORDS)])
            h //= len(_WORDS)
        return " ".join(words)

    def _string(self, node: _Node, path: str, name: str) -> str:
        h = self.h(path)
        if node.fmt == "date-time":
            text = f"2024-{1 + h % 12:02d}-{1 + (h >> 8) % 28:02d}T12:00:00Z"
        elif node.fmt == "date":
            text = f"2024-{1 + h % 12:02d}-{1 + (h >> 8) % 28:02d}"
        elif name.lower() in _SENTENCE_FIELDS:
            text = (
                f"{_SUBJECTS[h % len(_SUBJECTS)]} {_QUALIFIERS[(h >> 8) % len(_QUALIFIERS)]} "
                f"{_VERDICTS[(h >> 16) % len(_VERDICTS)]}."
            )
        else:
            text = self._words(path, 2)
        if len(text) < node.min_len:
            text = (text + " ") * (node.min_len // max(1, len(text)) + 1)
        if node.max_len is not None:
            text = text[: node.max_len]
        return text

    def _integer(self, node: _Node, path: str) -> int:
        lo = None if node.lo is None else (math.floor(node.lo) + 1 if node.lo_exclusive else math.ceil(node.lo))
        hi = None if node.hi is None else (math.ceil(node.hi) - 1 if node.hi_exclusive else math.floor(node.hi))
        if lo is None and hi is None:
            lo, hi = 0, 10
        elif lo is None:
            lo = hi - 10  # type: ignore[operator]
        elif hi is None:
            hi = lo + 10
        assert lo is not None and hi is not None
        if hi < lo:
            return lo
        return lo + self.h(path) % (hi - lo + 1)

    def _number(self, node: _Node, path: str) -> float:
        lo, hi = node.lo, node.hi
        if lo is None and hi is None:
            lo, hi = 0.0, 1.0
        elif lo is None:
            lo = hi - 1.0  # type: ignore[operator]
        elif hi is None:
            hi = lo + 1.0
        assert lo is not None and hi is not None
        frac = (self.h(path) % 10_001) / 10_000
        value = round(lo + frac * (hi - lo), 3)
        span = hi - lo
        if node.lo_exclusive and value <= lo:
            value = lo + span / 4 if span > 0 else lo + 0.001
        if node.hi_exclusive and value >= hi:
            value = hi - span / 4 if span > 0 else hi - 0.001
        return min(max(value, lo), hi) if span >= 0 else value


def _coerce_id(raw: str, id_node: _Node) -> Any:
    if id_node.kind in ("integer", "number"):
        try:
            return int(raw)
        except ValueError:
            return raw
    return raw


def generate_instance(schema: Any, prompt: str, *, seed: int = 0, choice: int = 0, ids: list[str] | None = None) -> Any:
    """Deterministic, schema-valid instance for a prompt (public so benchmarks can predict answers)."""
    return _Gen(prompt, seed, choice, ids).value(compile_schema(schema), "$", "")


def _violate(node: _Node, value: Any) -> Any:
    """Turn a valid instance into valid JSON that breaks the schema (enum first, then `required`)."""

    def bad_enum(n: _Node, v: Any) -> bool:
        if n.kind == "object" and isinstance(v, dict):
            for key, sub in n.props:
                if key not in v:
                    continue
                if sub.kind in ("enum", "const"):
                    v[key] = "__not_allowed__"
                    return True
                if bad_enum(sub, v[key]):
                    return True
        if n.kind == "array" and isinstance(v, list) and n.items is not None:
            return any(bad_enum(n.items, element) for element in v)
        return False

    if bad_enum(node, value):
        return value
    if node.kind == "object" and isinstance(value, dict) and node.required:
        value.pop(node.required[0], None)
        return value
    if node.kind in ("integer", "number", "boolean"):
        return "not a number"
    if node.kind == "string":
        return 12345
    return ["not", "an", "object"]


def _malformed(text: str) -> str:
    """Truncate JSON mid-way and close it with the wrong bracket.

    A bare truncation is not enough: langchain's `parse_partial_json` repairs missing closing
    brackets, but it gives up on a mismatched one.
    """
    cut = text[: max(1, len(text) // 2)]
    stack: list[str] = []
    in_string = escaped = False
    for char in cut:
        if in_string:
            if escaped:
                escaped = False
            elif char == "\\":
                escaped = True
            elif char == '"':
                in_string = False
        elif char == '"':
            in_string = True
        elif char in "{[":
            stack.append("}" if char == "{" else "]")
        elif char in "}]" and stack:
            stack.pop()
    if escaped:
        cut = cut[:-1]
    if in_string:
        cut += '"'
    wrong = "]" if not stack or stack[-1] == "}" else "}"
    return cut + wrong


# --------------------------------------------------------------------------------------
# Server state: config, scripted rules, stats, request log
# --------------------------------------------------------------------------------------


@dataclass
class ServerConfig:
    """Knobs changeable at runtime via POST /_admin/config."""

    latency: float = 0.0
    json_schema: bool = True
    tools: bool = True
    seed: int = 0
    logprobs: str = "null"  # on | null | reject (see the module docstring)


LOGPROBS_MODES: Final = ("on", "null", "reject")


@dataclass
class _Rule:
    index: int
    match: str | None
    pattern: re.Pattern[str] | None
    times: int | None
    probability: float | None
    action: dict[str, Any]
    seen: dict[bytes, int] = field(default_factory=dict)

    def fires(self, text: str, digest: bytes, seed: int) -> bool:
        if self.times is not None and self.times <= 0:
            return False
        if self.pattern is not None:
            if not self.pattern.search(text):
                return False
        elif self.match is not None and self.match not in text:
            return False
        if self.probability is not None:
            # A draw keyed by (seed, rule, prompt, attempt) instead of one shared RNG stream, so
            # the outcome for an item does not depend on how concurrent requests interleave,
            # while a retry of the same prompt still gets a fresh draw.
            attempt = self.seen.get(digest, 0)
            self.seen[digest] = attempt + 1
            key = digest + f"|{seed}|{self.index}|{attempt}".encode()
            draw = int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64
            if draw >= self.probability:
                return False
        if self.times is not None:
            self.times -= 1
        return True


_ACTION_TYPES: Final = frozenset(
    {
        "respond",
        "fault",
        "timeout",
        "malformed",
        "invalid",
        "drop_ids",
        "extra_ids",
        "latency",
        "length",
        "content_filter",
    }
)
#: Actions that end the answer with another finish reason than "stop" / "tool_calls".
_FINISH: Final = {"length": "length", "content_filter": "content_filter"}


def _parse_rule(index: int, raw: Any) -> _Rule:
    if not isinstance(raw, dict):
        raise ValueError(f"rule {index} must be an object")
    action = raw.get("action")
    if not isinstance(action, dict) or action.get("type") not in _ACTION_TYPES:
        raise ValueError(f"rule {index}: action.type must be one of {sorted(_ACTION_TYPES)}")
    match = raw.get("match")
    if match is not None and not isinstance(match, str):
        raise ValueError(f"rule {index}: match must be a string or null")
    pattern = re.compile(match) if match is not None and raw.get("regex") else None
    times = raw.get("times")
    probability = raw.get("probability")
    return _Rule(
        index=index,
        match=match,
        pattern=pattern,
        times=None if times is None else int(times),
        probability=None if probability is None else float(probability),
        action=action,
    )


class _State:
    """All mutable server state; handlers mutate it only between awaits, so no locks are needed."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.rules: list[_Rule] = []
        self.log: deque[dict[str, Any]] = deque(maxlen=MAX_LOGGED_REQUESTS)
        # The headers and query string of each logged request, in the same order (lets tests compare two
        # clients' requests entirely, not only their bodies).
        self.meta_log: deque[dict[str, Any]] = deque(maxlen=MAX_LOGGED_REQUESTS)
        self.completion_counter = 0
        self.in_flight = 0
        self.epoch = 0
        self.reset_stats()

    def reset_stats(self) -> None:
        """Start a new epoch; requests still running from before do not leak into the new counts."""
        self.epoch += 1
        self.total = 0
        self.by_status: dict[str, int] = {}
        self.by_rule: dict[str, int] = {}
        self.by_mode: dict[str, int] = {}
        self.max_in_flight = self.in_flight

    def stats(self) -> dict[str, Any]:
        return {
            "total": self.total,
            "by_status": dict(self.by_status),
            "by_rule": dict(self.by_rule),
            "by_mode": dict(self.by_mode),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "rules_remaining": [r.times for r in self.rules],
        }


_STATE_KEY: Final = web.AppKey("greval_openai_state", _State)


def _count(counter: dict[str, int], key: str) -> None:
    counter[key] = counter.get(key, 0) + 1


# --------------------------------------------------------------------------------------
# Request understanding
# --------------------------------------------------------------------------------------


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return ""


def _prompt_text(messages: list[Any]) -> str:
    return "\n".join(_content_text(m.get("content")) for m in messages if isinstance(m, dict))


def _item_ids(prompt: str) -> list[str] | None:
    if "Item ids:" not in prompt:
        return None
    matches = _ITEM_IDS_RE.findall(prompt)
    if not matches:
        return None
    return [part.strip() for part in matches[-1].split(",") if part.strip()]


def _schema_from_fences(prompt: str) -> dict[str, Any] | None:
    """JSON mode sends no schema; greval puts it in the prompt, the last fenced block wins."""
    if "```" not in prompt:
        return None
    for block in reversed(_FENCE_RE.findall(prompt)):
        try:
            candidate = json.loads(block)
        except ValueError:
            continue
        if isinstance(candidate, dict) and isinstance(candidate.get("properties"), dict):
            return candidate
    return None


@dataclass
class _Request:
    mode: str  # json_schema | tools | json_object | text
    schema: Any
    tool_name: str | None


def _classify(body: dict[str, Any], prompt: str) -> _Request:
    fmt = body.get("response_format")
    fmt_type = fmt.get("type") if isinstance(fmt, dict) else None
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict) and isinstance(t.get("function"), dict)]
    choice = body.get("tool_choice")
    forced = isinstance(choice, dict) or choice == "required"
    if tools and choice != "none" and (forced or fmt_type not in ("json_schema", "json_object")):
        tool = tools[0]
        if isinstance(choice, dict):
            wanted = (choice.get("function") or {}).get("name")
            tool = next((t for t in tools if t["function"].get("name") == wanted), tools[0])
        function = tool["function"]
        return _Request("tools", function.get("parameters") or {}, str(function.get("name", "tool")))
    if fmt_type == "json_schema" and isinstance(fmt, dict):
        json_schema = fmt.get("json_schema") or {}
        return _Request("json_schema", json_schema.get("schema") or {}, None)
    if fmt_type == "json_object":
        return _Request("json_object", _schema_from_fences(prompt), None)
    return _Request("text", None, None)


def _error(
    status: int,
    message: str,
    err_type: str,
    *,
    param: str | None = None,
    code: str | None = None,
    headers: dict[str, str] | None = None,
) -> web.Response:
    body = {"error": {"message": message, "type": err_type, "param": param, "code": code}}
    return web.json_response(body, status=status, headers=headers)


_FAULT_KINDS: Final = {
    400: ("Invalid request (injected)", "invalid_request_error", None),
    401: ("Incorrect API key provided (injected)", "invalid_request_error", "invalid_api_key"),
    403: ("You are not allowed to sample from this model (injected)", "invalid_request_error", None),
    404: ("The model does not exist or you do not have access to it (injected)", "invalid_request_error", None),
    413: ("Request entity too large (injected)", "invalid_request_error", None),
    429: ("Rate limit reached (injected by greval test server)", "requests", "rate_limit_exceeded"),
    500: ("The server had an error while processing your request (injected)", "server_error", None),
    503: ("The engine is currently overloaded (injected)", "server_error", "service_unavailable"),
}


# --------------------------------------------------------------------------------------
# Handlers
# --------------------------------------------------------------------------------------


async def _chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[_STATE_KEY]
    epoch = state.epoch
    state.total += 1
    state.in_flight += 1
    state.max_in_flight = max(state.max_in_flight, state.in_flight)
    status = 500
    try:
        response = await _answer(request, state)
        status = response.status
        return response
    finally:
        state.in_flight -= 1
        if state.epoch == epoch:
            _count(state.by_status, str(status))


async def _answer(request: web.Request, state: _State) -> web.StreamResponse:
    # Latency is counted from the moment the handler starts, and the answer is built inside that window:
    # a "200 ms model" then answers in 200 ms, not 200 ms plus this server's own Python work. Benchmarks
    # compare clients against requests × latency ÷ concurrency, so the server must not add to it.
    arrived = time.perf_counter()
    try:
        body = await request.json(loads=json.loads)
    except ValueError:
        return _error(400, "Request body is not valid JSON", "invalid_request_error")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return _error(400, "'messages' is a required property", "invalid_request_error", param="messages")
    state.log.append(body)
    state.meta_log.append({"headers": {k.lower(): v for k, v in request.headers.items()}, "query": dict(request.query)})
    config = state.config
    prompt = _prompt_text(body["messages"])
    req = _classify(body, prompt)
    _count(state.by_mode, req.mode)

    fmt = body.get("response_format")
    if body.get("logprobs") and config.logprobs == "reject":
        return _error(
            400,
            "Unsupported parameter: 'logprobs' is not supported with this model.",
            "invalid_request_error",
            param="logprobs",
            code="unsupported_parameter",
        )
    if isinstance(fmt, dict) and fmt.get("type") == "json_schema" and not config.json_schema:
        return _error(
            400,
            "Invalid parameter: 'response_format' of type 'json_schema' is not supported with this model.",
            "invalid_request_error",
            param="response_format",
        )
    if body.get("tools") and not config.tools:
        return _error(
            400,
            "Invalid parameter: 'tools' is not supported with this model.",
            "invalid_request_error",
            param="tools",
        )

    digest = hashlib.blake2b(prompt.encode(), digest_size=16).digest()
    action: dict[str, Any] = {}
    for rule in state.rules:
        if rule.fires(prompt, digest, config.seed):
            _count(state.by_rule, str(rule.index))
            action = rule.action
            break
    kind = action.get("type")

    latency = config.latency
    if kind in ("latency", "timeout"):
        latency = float(action.get("seconds", 0.0))

    async def wait() -> None:
        remaining = latency - (time.perf_counter() - arrived)
        if remaining > 0:
            await asyncio.sleep(remaining)

    if kind == "fault":
        headers = {}
        if action.get("retry_after") is not None:
            headers["Retry-After"] = f"{action['retry_after']:g}"
        fault_status = int(action.get("status", 500))
        fault_body = _fault_body(fault_status, action, request.headers.get("Authorization", ""), body)
        await wait()
        return web.json_response(fault_body, status=fault_status, headers=headers)

    ids = _item_ids(prompt)
    if ids is not None and kind == "drop_ids":
        dropped = {str(i) for i in action.get("ids") or []}
        ids = [i for i in ids if i not in dropped]
    elif ids is not None and kind == "extra_ids":
        ids = ids + [str(i) for i in action.get("ids") or [] if str(i) not in ids]

    n = max(1, int(body.get("n") or 1))
    outputs = [_output_text(req, kind, action, prompt, config.seed, i, ids) for i in range(n)]
    state.completion_counter += 1
    completion_id = f"chatcmpl-{digest.hex()[:12]}{state.completion_counter:08d}"
    if body.get("stream"):
        await wait()
        return await _stream(request, body, req, outputs, completion_id, prompt, _FINISH.get(str(kind)))
    logprobs = None
    if body.get("logprobs") is True and config.logprobs == "on":
        top = max(0, min(20, int(body.get("top_logprobs") or 0)))
        logprobs = [
            _choice_logprobs(req, text, prompt, config.seed, i, top, _FINISH.get(str(kind)))
            for i, text in enumerate(outputs)
        ]
    completion = _completion(body, req, outputs, completion_id, prompt, _FINISH.get(str(kind)), logprobs)
    response = web.json_response(completion)
    await wait()
    return response


def _fault_body(status: int, action: dict[str, Any], authorization: str, request: dict[str, Any]) -> Any:
    """The JSON body of an injected error: ``action["body"]`` verbatim, or an OpenAI-style error object."""
    if "body" in action:
        fault: Any = json.loads(json.dumps(action["body"]))  # a copy: echoing must not change the rule
    else:
        message, err_type, code = _FAULT_KINDS.get(status, ("Injected fault", "server_error", None))
        if status == 404 and "message" not in action:
            message = f"The model `{request.get('model')}` does not exist or you do not have access to it."
        fault = {
            "error": {
                "message": action.get("message", message),
                "type": action.get("error_type", err_type),
                "param": action.get("param"),
                "code": action.get("code", code),
            }
        }
    echo = action.get("echo_auth")
    if echo:
        if echo == "token":  # the credential alone, without its scheme
            authorization = authorization.partition(" ")[2] or authorization
        error = fault.get("error") if isinstance(fault, dict) else None
        if isinstance(error, dict):
            error["message"] = f"{error.get('message', '')} (received Authorization: {authorization})".strip()
        elif isinstance(fault, dict):
            fault["authorization"] = authorization
    return fault


def _output_text(
    req: _Request,
    kind: Any,
    action: dict[str, Any],
    prompt: str,
    seed: int,
    choice: int,
    ids: list[str] | None,
) -> str:
    """The assistant text (or tool arguments) for one choice."""
    if kind == "respond":
        if "text" in action:
            return str(action["text"])
        if req.mode == "text" and isinstance(action.get("content"), str):
            return str(action["content"])
        return json.dumps(action.get("content"))
    if req.mode == "text":
        return "OK" if kind not in _FINISH else _finished(kind, "OK, a plain answer cut short")
    schema = req.schema
    if schema is None:  # JSON mode without a schema in the prompt
        value: Any = {}
        node = _Node("object")
    else:
        node = compile_schema(schema)
        value = _Gen(prompt, seed, choice, ids).value(node, "$", "")
    if kind == "invalid":
        value = _violate(node, value)
    text = json.dumps(value)
    if kind == "malformed":
        text = _malformed(text)
    return _finished(kind, text)


def _finished(kind: Any, text: str) -> str:
    """What is left of an answer that did not finish: half of it (length), nothing (content filter)."""
    if kind == "length":
        return text[: max(1, len(text) // 2)]
    return "" if kind == "content_filter" else text


# --------------------------------------------------------------------------------------
# Token log-probabilities
# --------------------------------------------------------------------------------------

_TOKEN_RE: Final = re.compile(r"\w+|\s+|[^\w\s]")
_MAX_RANGE: Final = 20  # integer ranges up to this many values get their alternatives listed


def tokenize(text: str) -> list[str]:
    """The test server's tokens: words, whitespace runs and single other characters (they join to ``text``)."""
    return _TOKEN_RE.findall(text)


def _leaves(node: _Node, value: Any, key: str, out: list[tuple[str, Any, tuple[Any, ...]]]) -> None:
    """The (key, value, alternatives) of every enum value and small-range integer, in serialised order."""
    if node.kind == "enum" and value in node.options:
        out.append((key, value, node.options))
    elif node.kind == "integer" and isinstance(value, int) and not isinstance(value, bool):
        if node.lo is not None and node.hi is not None and not node.lo_exclusive and not node.hi_exclusive:
            lo, hi = math.ceil(node.lo), math.floor(node.hi)
            if 0 < hi - lo + 1 <= _MAX_RANGE and lo <= value <= hi:
                out.append((key, value, tuple(range(lo, hi + 1))))
    elif node.kind == "object" and isinstance(value, dict):
        for name, sub in node.props:
            if name in value:
                _leaves(sub, value[name], name, out)
    elif node.kind == "array" and isinstance(value, list) and node.items is not None:
        for element in value:
            _leaves(node.items, element, key, out)


def _spelled(value: Any) -> str:
    """How a leaf's value reads in the JSON text, without a string's quotes."""
    text = json.dumps(value)
    return text[1:-1] if isinstance(value, str) else text


def _unit(key: bytes) -> float:
    return int.from_bytes(hashlib.blake2b(key, digest_size=8).digest(), "big") / 2**64


def _entry(token: str, logprob: float, top: list[tuple[str, float]]) -> dict[str, Any]:
    return {
        "token": token,
        "logprob": logprob,
        "bytes": list(token.encode()),
        "top_logprobs": [{"token": t, "logprob": lp, "bytes": list(t.encode())} for t, lp in top],
    }


def _choice_logprobs(
    req: _Request, text: str, prompt: str, seed: int, choice: int, top: int, finish_as: str | None
) -> dict[str, Any]:
    """``choices[i].logprobs`` for one answer: every content token with a deterministic log-probability, and
    the alternatives of the enum / integer values the schema offers at the token that starts each value."""
    if req.mode == "tools" or finish_as == "content_filter":
        return {"content": None, "refusal": None}  # tool-call arguments get no log-probabilities
    base = hashlib.blake2b(f"{seed}\x00{choice}\x00{prompt}".encode(), digest_size=16).digest()
    tokens = tokenize(text)
    starts: dict[int, int] = {}
    pos = 0
    for i, tok in enumerate(tokens):
        starts[pos] = i
        pos += len(tok)
    # The positions where a value of the schema is spelled: (first token index, last token index) -> its draw.
    special: dict[int, tuple[float, list[tuple[str, float]]]] = {}
    leaves: list[tuple[str, Any, tuple[Any, ...]]] = []
    if req.schema is not None:
        try:
            _leaves(compile_schema(req.schema), json.loads(text), "", leaves)
        except ValueError:
            leaves = []
    cursor = 0
    for n, (key, value, options) in enumerate(leaves):
        literal = json.dumps(value)
        found = text.find(f"{json.dumps(key)}: {literal}", cursor)
        if found < 0:
            continue
        start = found + len(json.dumps(key)) + 2 + (1 if isinstance(value, str) else 0)
        end = start + len(_spelled(value))
        cursor = end
        first = starts.get(start)
        if first is None:
            continue
        last = first
        while last + 1 < len(tokens) and sum(len(t) for t in tokens[first : last + 2]) <= end - start:
            last += 1
        u = _unit(base + f"|leaf{n}".encode())
        chosen = 0.34 + 0.65 * u
        others = [o for o in options if o != value]
        weights = [1 + int(_unit(base + f"|leaf{n}|{j}".encode()) * 100) for j in range(len(others))]
        spare = (1 - chosen) * 0.95  # the rest of the mass goes to tokens that spell no value at all
        probs = {value: chosen} | {o: spare * w / sum(weights) for o, w in zip(others, weights, strict=True)}
        by_first: dict[str, float] = {}
        for option, p in probs.items():
            head = tokenize(_spelled(option))[0] if _spelled(option) else ""
            by_first[head] = by_first.get(head, 0.0) + p
        p_first = by_first[tokens[first]]
        ranked = sorted(by_first.items(), key=lambda kv: -kv[1])[:top]
        special[first] = (math.log(p_first), [(t, math.log(p)) for t, p in ranked])
        if last > first:  # the rest of the value given its first token: the chain rule gives back `chosen`
            for i in range(first + 1, last):
                special[i] = (0.0, [(tokens[i], 0.0)][:top])
            lp = math.log(chosen / p_first)
            special[last] = (lp, [(tokens[last], lp)][:top])
    content = []
    for i, tok in enumerate(tokens):
        if i in special:
            lp, alts = special[i]
            content.append(_entry(tok, lp, alts))
            continue
        h = hashlib.blake2b(base + f"|tok{i}".encode(), digest_size=8).digest()
        p = 0.8 + 0.2 * int.from_bytes(h, "big") / 2**64
        alts = [(tok, math.log(p))]
        for j in range(1, top):
            word = _WORDS[(h[j % 8] + j) % len(_WORDS)]
            alt = word if word != tok else word.upper()
            alts.append((alt, math.log((1 - p) / top)))
        content.append(_entry(tok, math.log(p), alts[:top]))
    return {"content": content, "refusal": None}


def _usage(prompt: str, outputs: list[str]) -> dict[str, int]:
    prompt_tokens = len(prompt.split())
    completion_tokens = sum(len(o.replace('"', " ").split()) for o in outputs)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def _tool_call(req: _Request, completion_id: str, index: int, arguments: str) -> dict[str, Any]:
    return {
        "id": f"call_{completion_id[9:21]}{index}",
        "type": "function",
        "function": {"name": req.tool_name, "arguments": arguments},
    }


def _completion(
    body: dict[str, Any],
    req: _Request,
    outputs: list[str],
    completion_id: str,
    prompt: str,
    finish_as: str | None = None,
    logprobs: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    choices = []
    for i, text in enumerate(outputs):
        message: dict[str, Any]
        if finish_as == "content_filter":
            message = {"role": "assistant", "content": None, "refusal": None}
            finish = finish_as
        elif req.mode == "tools":
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [_tool_call(req, completion_id, i, text)],
                "refusal": None,
            }
            finish = "tool_calls"
        else:
            message = {"role": "assistant", "content": text, "refusal": None}
            finish = "stop"
        finish = finish_as or finish
        choices.append(
            {
                "index": i,
                "message": message,
                "logprobs": None if logprobs is None else logprobs[i],
                "finish_reason": finish,
            }
        )
    return {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": body.get("model") or "greval-test",
        "system_fingerprint": "greval-test",
        "choices": choices,
        "usage": _usage(prompt, outputs),
    }


async def _stream(
    request: web.Request,
    body: dict[str, Any],
    req: _Request,
    outputs: list[str],
    completion_id: str,
    prompt: str,
    finish_as: str | None = None,
) -> web.StreamResponse:
    """Server-sent events, one delta per choice: enough for clients that set ``stream=True``."""
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    base = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model") or "greval-test",
        "system_fingerprint": "greval-test",
    }
    chunks: list[dict[str, Any]] = []
    for i, text in enumerate(outputs):
        if req.mode == "tools":
            call = _tool_call(req, completion_id, i, text)
            delta: dict[str, Any] = {
                "role": "assistant",
                "content": None,
                "tool_calls": [{"index": 0, **call}],
            }
            finish = "tool_calls"
        else:
            delta = {"role": "assistant", "content": text}
            finish = "stop"
        finish = finish_as or finish
        chunks.append({**base, "choices": [{"index": i, "delta": delta, "logprobs": None, "finish_reason": None}]})
        chunks.append({**base, "choices": [{"index": i, "delta": {}, "logprobs": None, "finish_reason": finish}]})
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("include_usage"):
        chunks.append({**base, "choices": [], "usage": _usage(prompt, outputs)})
    payload = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    await response.write(payload.encode())
    await response.write_eof()
    return response


async def _models(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "object": "list",
            "data": [{"id": "greval-test", "object": "model", "created": 0, "owned_by": "greval"}],
        }
    )


async def _admin_script(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    payload = await request.json()
    raw_rules = payload.get("rules") if isinstance(payload, dict) else payload
    if not isinstance(raw_rules, list):
        return _error(400, "expected a list of rules or {'rules': [...]}", "invalid_request_error")
    try:
        parsed = [_parse_rule(len(state.rules) + i, raw) for i, raw in enumerate(raw_rules)]
    except (ValueError, TypeError, re.error) as exc:
        return _error(400, str(exc), "invalid_request_error")
    state.rules.extend(parsed)
    return web.json_response({"rules": len(state.rules)})


async def _admin_reset(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    state.rules.clear()
    state.log.clear()
    state.meta_log.clear()
    state.reset_stats()
    return web.json_response({"ok": True})


async def _admin_config(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    payload = await request.json()
    if not isinstance(payload, dict):
        return _error(400, "expected an object", "invalid_request_error")
    config = state.config
    if payload.get("latency") is not None:
        config.latency = float(payload["latency"])
    if payload.get("json_schema") is not None:
        config.json_schema = bool(payload["json_schema"])
    if payload.get("tools") is not None:
        config.tools = bool(payload["tools"])
    if payload.get("seed") is not None:
        config.seed = int(payload["seed"])
    if payload.get("logprobs") is not None:
        if payload["logprobs"] not in LOGPROBS_MODES:
            return _error(400, f"logprobs must be one of {list(LOGPROBS_MODES)}", "invalid_request_error")
        config.logprobs = str(payload["logprobs"])
    return web.json_response(
        {
            "latency": config.latency,
            "json_schema": config.json_schema,
            "tools": config.tools,
            "seed": config.seed,
            "logprobs": config.logprobs,
        }
    )


async def _admin_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[_STATE_KEY].stats())


async def _admin_requests(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    log = state.meta_log if request.query.get("meta") else state.log
    limit = int(request.query.get("limit", str(len(log))))
    entries = list(log)[-limit:] if limit > 0 else []
    return web.json_response(entries)


def build_app(config: ServerConfig | None = None) -> web.Application:
    """The aiohttp app; exposed so a benchmark can also run it in-process if it wants to."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_STATE_KEY] = _State(config or ServerConfig())
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/_admin/script", _admin_script)
    app.router.add_post("/_admin/reset", _admin_reset)
    app.router.add_post("/_admin/config", _admin_config)
    app.router.add_get("/_admin/stats", _admin_stats)
    app.router.add_get("/_admin/requests", _admin_requests)
    return app


async def _serve(host: str, port: int, config: ServerConfig, *, watch_stdin: bool = False) -> None:
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    runner = web.AppRunner(build_app(config), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, backlog=1024).start()
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    sys.stdout.write(f"READY http://{shown}:{actual}/v1\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    if watch_stdin:
        # The parent holds our stdin open; EOF means it is gone (even if it crashed), so exit
        # instead of lingering as an orphan holding a port.
        loop = asyncio.get_running_loop()

        def wait_for_eof() -> None:
            sys.stdin.buffer.read()
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=wait_for_eof, name="stdin-watch", daemon=True).start()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()


def main(argv: list[str] | None = None) -> None:
    """CLI entry point: ``python -m greval.testing.openai_server``."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--no-json-schema", action="store_true", help="reject response_format json_schema")
    parser.add_argument("--no-tools", action="store_true", help="reject requests that send tools")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--logprobs", choices=LOGPROBS_MODES, default="null", help="answer token log-probabilities when asked (on)"
    )
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="exit when stdin closes")
    args = parser.parse_args(argv)
    config = ServerConfig(
        latency=args.latency,
        json_schema=not args.no_json_schema,
        tools=not args.no_tools,
        seed=args.seed,
        logprobs=args.logprobs,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(args.host, args.port, config, watch_stdin=args.exit_on_stdin_eof))


# --------------------------------------------------------------------------------------
# Python handle: runs the server as a subprocess so it never shares the client's event loop/GIL
# --------------------------------------------------------------------------------------


class OpenAIServer:
    """Start the server in a subprocess and drive its admin API.

    A subprocess, not a thread: the client under test gets its own GIL and event loop, which is
    what benchmarks need to measure the client rather than the fake.
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        json_schema: bool = True,
        tools: bool = True,
        seed: int = 0,
        logprobs: str = "null",
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout: float = 30.0,
    ) -> None:
        cmd = [sys.executable, "-m", "greval.testing.openai_server", "--host", host, "--port", str(port)]
        cmd += ["--latency", str(latency), "--seed", str(seed), "--exit-on-stdin-eof"]
        if logprobs != "null":
            cmd += ["--logprobs", logprobs]
        if not json_schema:
            cmd.append("--no-json-schema")
        if not tools:
            cmd.append("--no-tools")
        env = dict(os.environ)
        repo_root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.PIPE, env=env, text=True)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.base_url = self._wait_ready(startup_timeout)
        self.root_url = self.base_url.removesuffix("/v1")

    def _wait_ready(self, timeout: float) -> str:
        lines: queue.Queue[str] = queue.Queue()
        stdout = self._proc.stdout
        assert stdout is not None

        def pump() -> None:
            # Keep draining stdout for the life of the process so it can never block on a full pipe.
            for line in stdout:
                lines.put(line)
            lines.put("")

        self._pump = threading.Thread(target=pump, name="openai-server-stdout", daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise TimeoutError(f"OpenAI test server did not print READY within {timeout}s")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line.startswith("READY "):
                return line.split(" ", 1)[1].strip()
            if line == "":
                code = self._proc.wait()
                raise RuntimeError(f"OpenAI test server exited with code {code} before READY")

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            self.root_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with self._opener.open(req, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise RuntimeError(f"admin {path} failed: HTTP {exc.code}: {detail}") from exc

    def script(self, rules: list[dict[str, Any]]) -> None:
        """Append rules; the first matching rule with `times` left decides each request."""
        self._call("POST", "/_admin/script", {"rules": rules})

    def reset(self) -> None:
        """Clear rules, stats and the request log (config is kept)."""
        self._call("POST", "/_admin/reset", {})

    def configure(
        self,
        *,
        latency: float | None = None,
        json_schema: bool | None = None,
        tools: bool | None = None,
        seed: int | None = None,
        logprobs: str | None = None,
    ) -> dict[str, Any]:
        """Change only the given knobs (``logprobs``: on, null or reject); returns the resulting config."""
        payload = {"latency": latency, "json_schema": json_schema, "tools": tools, "seed": seed, "logprobs": logprobs}
        result: dict[str, Any] = self._call("POST", "/_admin/config", payload)
        return result

    def stats(self) -> dict[str, Any]:
        """total, by_status, by_rule, by_mode, in_flight, max_in_flight, rules_remaining."""
        result: dict[str, Any] = self._call("GET", "/_admin/stats")
        return result

    def requests(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Recent chat-completion request bodies, oldest first (bounded to 10k)."""
        suffix = "" if limit is None else f"?limit={int(limit)}"
        result: list[dict[str, Any]] = self._call("GET", "/_admin/requests" + suffix)
        return result

    def request_meta(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The headers (lower-cased names) and query parameters of the logged requests, in the same order."""
        suffix = "?meta=1" + ("" if limit is None else f"&limit={int(limit)}")
        result: list[dict[str, Any]] = self._call("GET", "/_admin/requests" + suffix)
        return result

    def close(self) -> None:
        """Terminate the subprocess (kill if it does not exit promptly)."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()  # the server exits on stdin EOF
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=2)
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        pump = getattr(self, "_pump", None)
        if pump is not None:
            pump.join(timeout=2)
        if self._proc.stdout is not None and (pump is None or not pump.is_alive()):
            self._proc.stdout.close()

    def __enter__(self) -> OpenAIServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


if __name__ == "__main__":
    main()
