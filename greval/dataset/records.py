"""Datasets of RAG outputs: rows (read by :mod:`greval.dataset.tables`) → mapped columns → normalised chunks
and triples → a content hash → a Record.

Every record gets a content hash (what the store keys verdicts on, so an edited record is re-judged and an
unchanged one never is) and an id (from an id column, else the hash) that people and Argilla see.

:class:`DataFile` streams a dataset as :class:`HashedRow` s (normalised and hashed, not yet validated
Records): the runner asks the store about their hashes chunk by chunk and builds Records only for the rows
that still have work, so a finished job re-run holds no dataset in memory.
"""

from __future__ import annotations

import hashlib
import json
import math
import numbers
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict

from greval.dataset.compact import Pairs, Positions
from greval.dataset.limits import ReadLimits
from greval.dataset.tables import iter_rows
from greval.errors import DataError


class Record(BaseModel):
    """One RAG output to judge. ``data`` holds normalised fields: chunks as ``{id, text}``, triples as
    ``{id, subject, predicate, object}``, a conversation as ``{id, role, content}`` turns, a trajectory as
    ``{id, kind, turn, …}`` steps, everything else as read."""

    model_config = ConfigDict(frozen=True)

    id: str
    hash: str
    data: dict[str, Any]

    @classmethod
    def from_mapping(cls, row: Mapping[str, Any], id_field: str | None = None, where: str = "record") -> Record:
        """Normalise a plain mapping (one dataset row, already column-mapped) into a Record.

        The id comes from ``id_field`` (or an ``id`` column); it is not part of the content hash.
        """
        return hash_row(row, id_field, where).record()

    def items(self, field: str) -> list[dict[str, Any]]:
        """The chunks, triples or (``turns``) assistant turns of this record (empty when absent)."""
        return item_list(self.data, field)


class HashedRow(NamedTuple):
    """One dataset row, normalised and hashed but not yet a (validated) :class:`Record`: cheap to drop once
    the store says its work is done."""

    id: str
    hash: str
    data: dict[str, Any]

    def items(self, field: str) -> list[dict[str, Any]]:
        """The chunks, triples or assistant turns of this row (empty when absent), as :meth:`Record.items`."""
        return item_list(self.data, field)

    def record(self) -> Record:
        return Record(id=self.id, hash=self.hash, data=self.data)


def hash_row(row: Mapping[str, Any], id_field: str | None = None, where: str = "record") -> HashedRow:
    """A column-mapped row's id, normalised data and content hash (:meth:`Record.from_mapping` without the
    Record)."""
    id_key = id_field if id_field else ("id" if not _missing(row.get("id")) else None)
    data: dict[str, Any] = {}
    for key, value in row.items():
        plain = type(value) is str  # most fields: text, kept as it is unless blank (as _missing says)
        if key == id_key or (not value or value.isspace() if plain else _missing(value)):
            continue
        if key == "chunks":
            data[key] = normalise_chunks(value, where)
        elif key == "triples":
            data[key] = normalise_triples(value, where)
        elif key == CONVERSATION:
            data[key] = normalise_conversation(value, where)
        elif key in (TRAJECTORY, EXPECTED_TRAJECTORY) and not _plain_text(value):
            data[key] = normalise_trajectory(value, f"{where}: {key}")
        else:
            data[key] = value if plain or not hasattr(value, "tolist") else value.tolist()
    try:
        digest = content_hash(data)
    except UnicodeEncodeError:
        raise DataError(f"{where}: {_surrogate_field(data)}") from None
    except RecursionError:
        raise DataError(f"{where}: nested too deeply") from None
    if not id_key:
        return HashedRow(digest[:16], digest, data)
    rid = row.get(id_key)
    if _missing(rid):
        raise DataError(f"{where}: the id column {id_key!r} is empty")
    text = id_text(rid, f"{where}: the id {id_key!r}")
    if _SURROGATES.search(text):
        raise DataError(f"{where}: {_surrogate_field({id_key: text})}")
    return HashedRow(text, digest, data)


def whole_float(value: Any) -> bool:
    """A whole number held as a float (``1.0``): what pandas makes of a column of integers with a missing value."""
    if not isinstance(value, numbers.Real) or isinstance(value, numbers.Integral):
        return False
    number = float(value)
    # beyond 2**53 a float is not the integer it was written as
    return math.isfinite(number) and number.is_integer() and abs(number) <= 2**53


def id_text(value: Any, what: str) -> str:
    """A record's id as the text people, the store and Argilla see: a string as it is, a number as written,
    a whole number held as a float as the integer (``1.0`` → ``1``, said in a note: :func:`map_rows`). A value
    holding several values (a list, a tuple, a dict, bytes) is refused: its text (``"('a', 1)"``) would be an
    id the data never had."""
    if type(value) is str:
        return value
    if whole_float(value):
        return str(int(value))
    if isinstance(value, list | tuple | dict | set | frozenset | bytes | bytearray) or getattr(value, "ndim", False):
        shown = repr(value) if len(repr(value)) <= 40 else repr(value)[:39] + "…"
        raise DataError(
            f"{what} is a {type(value).__name__} ({shown}), not one value: give each record a text or number id"
        )
    return str(value)


_SURROGATES = re.compile("[\ud800-\udfff]")


def _surrogate_field(data: Mapping[str, Any]) -> str:
    """Which field holds a lone UTF-16 surrogate (JSON lets ``"\\ud800"`` through; it is not text).

    Such a record is rejected rather than repaired: replacing the character would change what is judged
    and hashed, and the store (JSON, SQLite) cannot write it as it is.
    """
    for key, value in data.items():
        blob = json.dumps([key, value], ensure_ascii=False, default=str)
        if _SURROGATES.search(blob):
            name = ascii(key) if _SURROGATES.search(key) else repr(key)
            return (
                f"field {name} holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), which is not text; "
                "rejected, not replaced: fix the escape in the file"
            )
    return "holds a lone UTF-16 surrogate escape (\\ud800-\\udfff), which is not text; fix the file"


def content_hash(data: Mapping[str, Any]) -> str:
    """sha256 of the canonical JSON form: key order and whitespace do not matter."""
    blob = json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()


def _missing(value: Any) -> bool:
    if value is None:
        return True
    if isinstance(value, float) and math.isnan(value):
        return True
    return isinstance(value, str) and value.strip() == ""


def _maybe_json(value: Any) -> Any:
    """CSV cells hold lists as JSON text; Parquet / pandas may hand over numpy arrays."""
    if isinstance(value, str) and value.lstrip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except (json.JSONDecodeError, RecursionError):
            return value
    if hasattr(value, "tolist"):
        return value.tolist()
    return value


def normalise_chunks(value: Any, where: str) -> list[dict[str, Any]]:
    """Chunks as strings or ``{id, text}`` (also ``chunk_id`` / ``content``); ids default to c1, c2, …"""
    value = _maybe_json(value)
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise DataError(f"{where}: chunks must be a list of strings or {{id, text}} objects")
    out: list[dict[str, Any]] = []
    for i, chunk in enumerate(value, start=1):
        chunk = _maybe_json(chunk)
        if isinstance(chunk, str):
            out.append({"id": f"c{i}", "text": chunk})
        elif isinstance(chunk, Mapping):
            text = next((chunk[k] for k in ("text", "content", "page_content") if k in chunk), None)
            if text is None:
                raise DataError(f"{where}: chunk {i} has no 'text' field")
            cid = next((chunk[k] for k in ("id", "chunk_id") if k in chunk and chunk[k] is not None), f"c{i}")
            extra = {k: v for k, v in chunk.items() if k not in ("id", "chunk_id", "text", "content", "page_content")}
            out.append({"id": str(cid), "text": str(text), **({"metadata": extra} if extra else {})})
        else:
            raise DataError(f"{where}: chunk {i} must be a string or an object, got {type(chunk).__name__}")
    _unique_ids(out, where, "chunk")
    return out


_TRIPLE_KEYS = (("subject", "predicate", "object"), ("head", "relation", "tail"), ("s", "p", "o"))


def normalise_triples(value: Any, where: str) -> list[dict[str, Any]]:
    """Triples as ``[s, p, o]`` or ``{subject, predicate, object}`` (also head/relation/tail); ids t1, t2, …"""
    value = _maybe_json(value)
    if not isinstance(value, list):
        raise DataError(f"{where}: triples must be a list of [subject, predicate, object] or objects")
    out: list[dict[str, Any]] = []
    for i, triple in enumerate(value, start=1):
        triple = _maybe_json(triple)
        if isinstance(triple, list | tuple) and len(triple) == 3:
            s, p, o = (str(x) for x in triple)
            out.append({"id": f"t{i}", "subject": s, "predicate": p, "object": o})
        elif isinstance(triple, Mapping):
            keys = next((k for k in _TRIPLE_KEYS if all(x in triple for x in k)), None)
            if keys is None:
                raise DataError(f"{where}: triple {i} needs subject, predicate and object")
            tid = triple.get("id") if triple.get("id") is not None else f"t{i}"
            out.append(
                {
                    "id": str(tid),
                    "subject": str(triple[keys[0]]),
                    "predicate": str(triple[keys[1]]),
                    "object": str(triple[keys[2]]),
                }
            )
        else:
            raise DataError(f"{where}: triple {i} must be [subject, predicate, object] or an object")
    _unique_ids(out, where, "triple")
    return out


#: The field holding a conversation, and the role of the turns judged one by one (``target: {each: turns}``,
#: whose spec names this field as its input: greval.spec.model.ITEM_SOURCES).
CONVERSATION = "conversation"
ASSISTANT = "assistant"
#: The roles a turn may name -> greval's: OpenAI's, with LangChain's, ShareGPT's and Gemini's names for them.
ROLES: dict[str, str] = {
    "user": "user", "human": "user",
    "assistant": ASSISTANT, "ai": ASSISTANT, "gpt": ASSISTANT, "bot": ASSISTANT, "model": ASSISTANT,
    "system": "system", "developer": "system",
    "tool": "tool", "function": "tool",
}  # fmt: skip


def item_list(data: Mapping[str, Any], field: str) -> list[dict[str, Any]]:
    """A record's items of one kind: its chunks or triples, for ``turns`` the assistant turns of its
    conversation, for ``steps`` the agent's own steps of its trajectory (empty when absent)."""
    if field == "turns":
        conv = data.get(CONVERSATION)
        return [t for t in conv if isinstance(t, dict) and t.get("role") == ASSISTANT] if isinstance(conv, list) else []
    if field == "steps":
        steps = data.get(TRAJECTORY)
        return (
            [s for s in steps if isinstance(s, dict) and s.get("kind") in AGENT_STEPS]
            if isinstance(steps, list)
            else []
        )
    value = data.get(field)
    return list(value) if isinstance(value, list) else []


def _turn_text(content: Any) -> str | None:
    """A turn's content as text: a string, or content parts (``[{type: text, text}]``) joined; other parts
    (an image) kept as their JSON."""
    content = _maybe_json(content) if not isinstance(content, str) else content
    if content is None or isinstance(content, str):
        return content
    parts = content if isinstance(content, list) else [content]
    out = []
    for part in parts:
        if isinstance(part, str):
            out.append(part)
        elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
            out.append(part["text"])
        else:
            out.append(json.dumps(part, ensure_ascii=False, default=str))
    return "\n".join(out)


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    """Tool calls as ``{name, arguments, id?}``: OpenAI's ``{id, function: {name, arguments}}`` or LangChain's
    ``{name, args, id}``."""
    value = _maybe_json(value)
    if not isinstance(value, list):
        raise DataError(f"{where}: tool_calls must be a list")
    out: list[dict[str, Any]] = []
    for j, call in enumerate(value, start=1):
        call = _maybe_json(call)
        fn = call.get("function") if isinstance(call, Mapping) else None
        body = fn if isinstance(fn, Mapping) else call
        if not isinstance(body, Mapping) or not body.get("name"):
            raise DataError(f"{where}: tool call {j} has no name")
        args = next((body[k] for k in ("arguments", "args", "input") if k in body), None)
        one: dict[str, Any] = {"name": str(body["name"]), "arguments": args if args is not None else {}}
        if isinstance(call, Mapping) and call.get("id") is not None:
            one["id"] = str(call["id"])
        out.append(one)
    return out


def normalise_conversation(value: Any, where: str) -> list[dict[str, Any]]:
    """A conversation: a list of turns ``{role, content}`` (also ``type`` / ``from`` and ``text`` / ``value``;
    roles user, assistant, system, tool and their aliases), in order. Tool calls are kept (``tool_calls`` as
    ``{name, arguments, id}``; a tool turn's ``tool_call_id`` and ``name``), other keys go to ``metadata``.
    Ids: the turn's own ``id``, else ``t<N>`` for the N-th turn (so an id names its turn number)."""
    value = _maybe_json(value)
    if not isinstance(value, list):
        raise DataError(f"{where}: conversation must be a list of {{role, content}} turns")
    out: list[dict[str, Any]] = []
    for n, turn in enumerate(value, start=1):
        here = f"{where}: conversation turn {n}"
        turn = _maybe_json(turn)
        if not isinstance(turn, Mapping):
            raise DataError(f"{here} must be an object with role and content, got {type(turn).__name__}")
        role_key = next((k for k in ("role", "type", "from") if turn.get(k) is not None), None)
        role = ROLES.get(str(turn[role_key]).strip().lower()) if role_key else None
        if role is None:
            shown = f"role {str(turn[role_key])[:40]!r}" if role_key else "no role"
            raise DataError(f"{here} has {shown}; use user, assistant, system or tool")
        text_key = next((k for k in ("content", "text", "value") if k in turn), None)
        text = _turn_text(turn[text_key]) if text_key else None
        calls = _tool_calls(turn["tool_calls"], here) if turn.get("tool_calls") not in (None, [], "") else []
        if not (text or "").strip() and not calls:
            raise DataError(f"{here} ({role}) has no content")
        id_key = next((k for k in ("id", "turn_id") if turn.get(k) is not None), None)
        one: dict[str, Any] = {"id": str(turn[id_key]) if id_key else f"t{n}", "role": role, "content": text or ""}
        if calls:
            one["tool_calls"] = calls
        for key in ("tool_call_id", "name"):
            if turn.get(key) is not None:
                one[key] = str(turn[key])
        used = {role_key, text_key, id_key, "tool_calls", "tool_call_id", "name"}
        extra = {k: v for k, v in turn.items() if k not in used and not _missing(v)}
        if extra:
            one["metadata"] = extra
        out.append(one)
    _unique_ids(out, where, "conversation turn")
    return out


# ------------------------------------------------------------------------------------ trajectories
#: The field holding what an agent did, and the reference trajectory the trajectory metrics compare it with.
TRAJECTORY = "trajectory"
EXPECTED_TRAJECTORY = "expected_trajectory"
#: What a step can be. The agent's own steps (its messages, tool calls and final answer) are what
#: ``target: {each: steps}`` judges; user and system messages and tool results are the context it acted in.
STEP_KINDS = ("user", "system", "assistant", "tool_call", "tool_result", "final_answer")
AGENT_STEPS = frozenset(("assistant", "tool_call", "final_answer"))
#: The names a plain step's ``kind`` (or ``type``) may give -> greval's.
STEP_ALIASES: dict[str, str] = {
    **{k: k for k in STEP_KINDS},
    "message": "assistant", "thought": "assistant", "reasoning": "assistant", "plan": "assistant",
    "tool_use": "tool_call", "action": "tool_call", "call": "tool_call", "function_call": "tool_call",
    "observation": "tool_result", "tool_output": "tool_result", "result": "tool_result",
    "final": "final_answer", "answer": "final_answer",
}  # fmt: skip
_STEP_TEXT = ("content", "text", "value", "output", "result", "observation")
_CALL_ARGS = ("arguments", "args", "input", "parameters")


def _plain_text(value: Any) -> bool:
    """Text that is not JSON (an agent's log written out): kept as it is, as any text field, for a judge to read
    (the trajectory metrics give such a record an error verdict)."""
    return isinstance(value, str) and value.lstrip()[:1] not in ("[", "{")


def call_arguments(raw: Any) -> tuple[Any, str | None]:
    """A tool call's arguments as JSON: text parsed (OpenAI sends them as a JSON string), objects kept; text
    that is not JSON is kept as it is, with why (the trajectory metrics give that record an error verdict or
    count the call invalid: a run never stops on it)."""
    raw = raw.tolist() if hasattr(raw, "tolist") else raw
    if raw is None or (isinstance(raw, str) and not raw.strip()):
        return {}, None
    if not isinstance(raw, str):
        return raw, None
    try:
        return json.loads(raw), None
    except json.JSONDecodeError as exc:
        return raw, f"not JSON ({exc.msg} at character {exc.pos})"
    except RecursionError:
        return raw, "not JSON (nested too deeply)"


def _call_step(body: Mapping[str, Any], here: str) -> dict[str, Any]:
    """A tool call ``{name, arguments}`` (also OpenAI's ``{function: {name, arguments}}``, LangChain's ``args``)."""
    fn = body.get("function")
    inner = fn if isinstance(fn, Mapping) else body
    name = next((inner[k] for k in ("name", "tool", "tool_name") if not _missing(inner.get(k))), None)
    if name is None:
        raise DataError(f"{here}: a tool call without a name")
    args: Any
    error: str | None
    if "arguments_error" in body:  # already normalised: the text is kept as it was
        args, error = body.get("arguments"), str(body["arguments_error"])
    else:
        args, error = call_arguments(next((inner[k] for k in _CALL_ARGS if k in inner), None))
    step: dict[str, Any] = {"kind": "tool_call", "name": str(name), "arguments": args}
    if error:
        step["arguments_error"] = error
    return step


def _message_steps(msg: Mapping[str, Any], role: str, here: str) -> list[dict[str, Any]]:
    """One chat message as steps: an assistant message as its text (when it has any) and its tool calls, a tool
    message as a tool result, a user or system message as itself."""
    text_key = next((k for k in ("content", "text", "value") if k in msg), None)
    text = (_turn_text(msg[text_key]) if text_key else None) or ""
    if role == "tool":
        step: dict[str, Any] = {"kind": "tool_result", "content": text}
        if not _missing(msg.get("name")):
            step["name"] = str(msg["name"])
        if not _missing(msg.get("tool_call_id")):
            step["call_id"] = str(msg["tool_call_id"])
        return [step]
    calls = _maybe_json(msg.get("tool_calls")) or []
    if isinstance(msg.get("function_call"), Mapping):  # OpenAI's older single function call
        calls = [*(calls if isinstance(calls, list) else [calls]), msg["function_call"]]
    if not isinstance(calls, list):
        raise DataError(f"{here}: tool_calls must be a list")
    steps = [{"kind": role, "content": text}] if text.strip() else []
    for j, call in enumerate(calls, start=1):
        call = _maybe_json(call)
        if not isinstance(call, Mapping):
            raise DataError(f"{here}: tool call {j} must be an object, got {type(call).__name__}")
        one = _call_step(call, f"{here}, tool call {j}")
        if not _missing(call.get("id")):
            one["call_id"] = str(call["id"])
        steps.append(one)
    if not steps:
        raise DataError(f"{here} ({role}) has no content and no tool call")
    return steps


def _plain_step(item: Mapping[str, Any], kind: str, here: str) -> dict[str, Any]:
    """A step given as one: ``{kind, content}``, ``{kind: tool_call, name, arguments}``, ``{kind: tool_result,
    name?, call_id?, content}``."""
    if kind == "tool_call":
        step = _call_step(item, here)
    else:
        text_key = next((k for k in _STEP_TEXT if k in item), None)
        value = _maybe_json(item[text_key]) if text_key and not isinstance(item[text_key], str) else None
        if text_key and isinstance(item[text_key], str):
            text: str | None = item[text_key]
        elif kind == "tool_result" and value is not None:  # what a tool returned, as JSON text
            text = json.dumps(value, ensure_ascii=False, default=str)
        else:
            text = _turn_text(value)
        if kind != "tool_result" and not (text or "").strip():
            raise DataError(f"{here} ({kind}) has no content")
        step = {"kind": kind, "content": text or ""}
        if kind == "tool_result" and not _missing(item.get("name")):
            step["name"] = str(item["name"])
    call_id = next((item[k] for k in ("call_id", "tool_call_id") if not _missing(item.get(k))), None)
    if call_id is not None:
        step["call_id"] = str(call_id)
    return step


def _what_item(item: Mapping[str, Any]) -> tuple[str, str | None]:
    """Whether a trajectory item is a chat message (and its role), a step (and its kind) or a bare tool call."""
    if not _missing(item.get("kind")):
        return "step", STEP_ALIASES.get(str(item["kind"]).strip().lower())
    if isinstance(item.get("function"), Mapping):
        return "call", "tool_call"
    for key in ("role", "type", "from"):
        if not _missing(item.get(key)):
            name = str(item[key]).strip().lower()
            if name in ROLES:
                return "message", ROLES[name]
            return "step", STEP_ALIASES.get(name)
    return ("call", "tool_call") if not _missing(item.get("name")) else ("step", None)


_STEP_KEYS = frozenset(
    ("id", "step_id", "kind", "type", "role", "from", "turn", "name", "tool", "tool_name", "function", "call_id",
     "tool_call_id", "tool_calls", "function_call", "arguments", "arguments_error", "metadata", *_STEP_TEXT,
     *_CALL_ARGS)
)  # fmt: skip


def _item_steps(item: Any, n: int, where: str) -> list[dict[str, Any]]:
    """One trajectory item (a message, a step or a bare tool call) as its steps, each with the item's turn."""
    here = f"{where}: item {n}"
    item = _maybe_json(item)
    if not isinstance(item, Mapping):
        raise DataError(f"{here} must be an object (a message, a step or a tool call), got {type(item).__name__}")
    what, kind = _what_item(item)
    if kind is None:
        raise DataError(
            f"{here} is neither a message (role user, assistant, system or tool), a step (kind "
            f"{', '.join(STEP_KINDS)}) nor a tool call (name, arguments)"
        )
    steps = _message_steps(item, kind, here) if what == "message" else [_plain_step(item, kind, here)]
    if what == "call" and not _missing(item.get("id")):
        steps[0]["call_id"] = str(item["id"])  # a bare tool call's own id is its call id
    turn = item.get("turn")
    for step in steps:
        step["turn"] = turn if isinstance(turn, int) and not isinstance(turn, bool) else n
    own = next((item[k] for k in ("id", "step_id") if not _missing(item.get(k))), None)
    if own is not None and what != "call" and len(steps) == 1:
        steps[0]["id"] = str(own)
    extra = dict(item["metadata"]) if isinstance(item.get("metadata"), Mapping) else {}
    extra |= {k: v for k, v in item.items() if k not in _STEP_KEYS and not _missing(v)}
    if extra:
        steps[0]["metadata"] = extra
    return steps


def normalise_trajectory(value: Any, where: str) -> list[dict[str, Any]]:
    """What an agent did, as ordered steps ``{id, kind, turn, …}`` (:data:`STEP_KINDS`), from an OpenAI-style
    message list (assistant ``tool_calls``, ``tool`` messages; LangChain's and ShareGPT's names too), a list of
    steps (``{kind, …}``), a list of bare tool calls (a reference), or ``{"messages": [...]}``.

    A tool call is ``{name, arguments, call_id?}`` (arguments parsed from JSON text; text that is not JSON is
    kept, with ``arguments_error``); a tool result ``{content, name?, call_id?}``; the others ``{content}``.
    ``turn`` is the number of the item a step came from (the calls of one assistant message share it). When the
    last step is an assistant message it is the ``final_answer``. Ids: the step's own ``id``, else ``s<N>`` for
    the N-th step; other keys go to ``metadata``. Normalising a normalised trajectory changes nothing."""
    value = _maybe_json(value)
    if isinstance(value, Mapping) and isinstance(value.get("messages"), list | str):
        value = _maybe_json(value["messages"])
    if not isinstance(value, list):
        raise DataError(f"{where} must be a list of messages, steps or tool calls")
    out: list[dict[str, Any]] = []
    for n, item in enumerate(value, start=1):
        out += _item_steps(item, n, where)
    if out and out[-1]["kind"] == "assistant":
        out[-1]["kind"] = "final_answer"
    named = {s["call_id"]: s["name"] for s in out if s["kind"] == "tool_call" and "call_id" in s}
    for i, step in enumerate(out, start=1):
        step.setdefault("id", f"s{i}")
        if step["kind"] == "tool_result" and "name" not in step and step.get("call_id") in named:
            step["name"] = named[step["call_id"]]  # OpenAI's tool messages name only the call
    out = [{"id": s.pop("id"), "kind": s.pop("kind"), **s} for s in out]  # id and kind first, as they read
    _unique_ids(out, where, "trajectory step")
    return out


def final_answer(steps: Sequence[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """A trajectory's final answer step (its last), or None when it has none."""
    return next((s for s in reversed(steps) if s.get("kind") == "final_answer"), None)


def _unique_ids(items: Sequence[Mapping[str, Any]], where: str, what: str) -> None:
    seen: set[str] = set()
    for item in items:
        if item["id"] in seen:
            raise DataError(f"{where}: two {what}s have the id {item['id']!r}; ids must be unique in a record")
        seen.add(item["id"])


# ------------------------------------------------------------------------------------------ reading
def _get(row: Mapping[str, Any], dotted: str) -> Any:
    if dotted in row:
        return row[dotted]
    cur: Any = row
    for part in dotted.split("."):
        if isinstance(cur, Mapping) and part in cur:
            cur = cur[part]
        else:
            return None
    return cur


def hashed_rows(
    path: str | Path,
    mapping: Mapping[str, str] | None = None,
    id_column: str | None = None,
    limit: int | None = None,
    notes: list[str] | None = None,
    limits: ReadLimits | None = None,
) -> Iterator[HashedRow]:
    """A dataset file's records as :class:`HashedRow` s, streamed in file order (one row in memory at a time
    for JSON Lines; see :func:`load_records` for ``mapping`` and the rest, :func:`map_rows` for what is done
    to each row; ``limits``: what reading the file may cost, :class:`ReadLimits`' defaults when None)."""
    p = Path(path)
    if not p.exists():
        raise DataError(f"{path}: no such file")
    if p.is_dir():
        raise DataError(f"{path}: is a directory, not a data file")
    yield from map_rows(iter_rows(p, limits), str(path), mapping, id_column, limit, notes)


def map_rows(
    rows: Iterable[Mapping[str, Any]],
    where: str,
    mapping: Mapping[str, str] | None = None,
    id_column: str | None = None,
    limit: int | None = None,
    notes: list[str] | None = None,
) -> Iterator[HashedRow]:
    """Rows (of a file, a DataFrame, a list …; ``where`` names them in messages) mapped, normalised and
    hashed, in order: the one path every dataset takes to the runner.

    Every row is mapped, normalised and hashed (a broken row is a DataError however far in it is); a row
    repeating an earlier one exactly is skipped, and ``notes`` gets the line saying so once the rows are read
    to their end. Ids (:func:`id_text`, :class:`_IdCheck`): a whole number held as a float is the integer, a
    record without an id among records with one is known by its content hash, each with a note; an id holding
    several values is refused."""
    mapping = dict(mapping or {})
    taken = set(mapping.values())
    read = Pairs()  # (id, hash) of each row yielded, compactly: ~100 bytes a row with its index, not ~270
    by_id = Positions(read.ids.__getitem__)  # id -> its row in `read` (ids compared exactly on a digest match)
    repeated: list[int] = []
    ids = _IdCheck(where, id_column)
    paths = _TrajectoryCheck(where)
    for n, row in enumerate(rows):
        if limit is not None and len(read) >= limit:
            break
        mapped = {k: v for k, v in row.items() if k not in taken}
        for field, column in mapping.items():
            value = _get(row, column)
            if value is None and n == 0 and column not in row:
                raise DataError(
                    f"{where}: column {column!r} (mapped to {field!r}) not found; columns: {', '.join(map(str, row))}"
                )
            mapped[field] = value
        if id_column and n == 0 and id_column not in mapped:
            raise DataError(f"{where}: id column {id_column!r} not found; columns: {', '.join(map(str, row))}")
        rec = hash_row(mapped, id_column, where=f"{where}: record {n + 1}")
        ids.check(mapped, n + 1, rec)
        paths.check(n + 1, rec)
        known = by_id.setdefault(rec.id, len(read))
        if known is not None:
            if read.hashes[known] != rec.hash:
                raise DataError(f"{where}: two different records have the id {rec.id!r}")
            repeated.append(n + 1)  # the same record twice: judged and listed once
            continue
        read.append(rec.id, rec.hash)
        yield rec
    if not read:
        raise DataError(f"{where}: no records")
    if notes is not None:
        notes += ids.notes() + paths.notes()
    if repeated and notes is not None:
        shown = ", ".join(map(str, repeated[:5])) + (f" … ({len(repeated)} in all)" if len(repeated) > 5 else "")
        notes.append(
            f"{where}: {len(repeated)} row(s) repeat an earlier row exactly (same id and content), "
            f"read once: rows {shown}"
        )


class _IdCheck:
    """What :func:`map_rows` says about a dataset's ids, once read: whole numbers held as floats (the integers are
    used) and records without an id among records with one (each known by its content hash, the id a dataset
    without ids gets throughout). A note says so; neither is refused — one record without an id would
    otherwise stop a large file — except where ``id_column`` names the column: an empty id is refused there
    (:func:`hash_row`)."""

    def __init__(self, where: str, id_column: str | None) -> None:
        self.where, self.column = where, id_column or "id"
        self.given = False  # some record has an id
        self.missing: list[tuple[int, str]] = []  # (record number, its content id) of the first few without
        self.unnamed = 0  # how many records have none
        self.floats: list[Any] = []  # the first few ids held as whole-number floats
        self.whole = 0  # how many

    def check(self, row: Mapping[str, Any], n: int, rec: HashedRow) -> None:
        value = row.get(self.column)
        if whole_float(value):
            self.whole += 1
            if len(self.floats) < 3:
                self.floats.append(value)
        if not _missing(value):
            self.given = True
        elif self.column == "id":
            self.unnamed += 1
            if len(self.missing) < 3:
                self.missing.append((n, rec.id))

    def notes(self) -> list[str]:
        out = []
        if self.whole:
            shown = ", ".join(f"{float(v)!r} → {int(v)}" for v in self.floats) + (" …" if self.whole > 3 else "")
            out.append(
                f"{self.where}: {self.whole} id(s) held as whole-number floats (as pandas stores a column of "
                f"integers with a missing value) were read as integers: {shown}"
            )
        if self.given and self.unnamed:
            shown = ", ".join(f"record {n} → {rid}" for n, rid in self.missing) + (" …" if self.unnamed > 3 else "")
            out.append(
                f"{self.where}: {self.unnamed} record(s) have no {self.column!r} while others have one: each is "
                f"known by its content hash instead ({shown}); give every record an id to choose them"
            )
        return out


class _TrajectoryCheck:
    """What :func:`map_rows` says about the trajectories it read, once read: those without a final answer (the
    agent stopped on a tool call or a tool result) and tool calls whose arguments are not JSON (kept as text).
    Neither stops a run: a judge reads such a trajectory as it is, and the trajectory metrics give the record an
    error verdict or count the call invalid, each saying why."""

    def __init__(self, where: str) -> None:
        self.where = where
        self.unfinished: list[str] = []  # "record N (id)" of each trajectory without a final answer
        self.bad_args: list[str] = []  # "record N step ID (tool): why" of each call whose arguments are not JSON

    def check(self, n: int, rec: HashedRow) -> None:
        steps = rec.data.get(TRAJECTORY)
        if not isinstance(steps, list) or not steps:
            return
        if final_answer(steps) is None:
            self.unfinished.append(f"record {n} ({rec.id})")
        for step in steps:
            if step.get("arguments_error"):
                self.bad_args.append(f"record {n} step {step['id']} ({step['name']}): {step['arguments_error']}")

    def notes(self) -> list[str]:
        out = []
        if self.unfinished:
            shown = ", ".join(self.unfinished[:3]) + (" …" if len(self.unfinished) > 3 else "")
            out.append(
                f"{self.where}: {len(self.unfinished)} trajectory(ies) end without a final answer (the last step is "
                f"not an assistant message): {shown}; judged as they are"
            )
        if self.bad_args:
            shown = "; ".join(self.bad_args[:3]) + (" …" if len(self.bad_args) > 3 else "")
            out.append(
                f"{self.where}: {len(self.bad_args)} tool call(s) have arguments that are not JSON, kept as text (the "
                f"trajectory metrics count such a call invalid or give its record an error verdict): {shown}"
            )
        return out


class DataFile:
    """A dataset file read lazily: each iteration reads it again and yields its :class:`HashedRow` s
    (:func:`hashed_rows`); ``notes`` holds what the last full read noticed (rows read once)."""

    def __init__(
        self,
        path: str | Path,
        mapping: Mapping[str, str] | None = None,
        id_column: str | None = None,
        limit: int | None = None,
        limits: ReadLimits | None = None,
    ) -> None:
        self.path = path
        self.mapping = dict(mapping or {})
        self.id_column = id_column
        self.limit = limit
        self.limits = limits
        self.notes: list[str] = []

    def __iter__(self) -> Iterator[HashedRow]:
        notes: list[str] = []
        yield from hashed_rows(self.path, self.mapping, self.id_column, self.limit, notes, self.limits)
        self.notes = notes


def load_records(
    path: str | Path,
    mapping: Mapping[str, str] | None = None,
    id_column: str | None = None,
    limit: int | None = None,
    notes: list[str] | None = None,
    limits: ReadLimits | None = None,
) -> list[Record]:
    """Read a dataset file into Records.

    ``mapping`` maps greval field names to the file's columns (dotted paths reach nested JSON), e.g.
    ``{"question": "query", "answer": "response.text"}``; unmapped columns keep their names. A row that
    repeats an earlier one exactly (same id, same content) is read once; ``notes`` receives a line saying so.
    ``limits``: what reading the file may cost (:class:`~greval.dataset.limits.ReadLimits`).
    """
    return [row.record() for row in hashed_rows(path, mapping, id_column, limit, notes, limits)]
