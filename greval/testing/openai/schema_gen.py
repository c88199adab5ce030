"""JSON Schema → deterministic instances: the test server's answers to a structured-output request.

A schema is compiled once (``$ref`` / ``allOf`` resolved, cached by its text) into a `Node` tree; an instance is
a pure function of (prompt, seed, choice, path), so answers differ between items yet repeat exactly for the same
request. `violate` turns a valid instance into valid JSON that breaks the schema (the ``invalid`` fault).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

__all__ = ["WORDS", "Node", "choice_key", "compile_schema", "generate_instance", "instance_of", "violate"]

_SCHEMA_CACHE_SIZE: Final = 512
_MAX_REF_DEPTH: Final = 12
_DEFAULT_ARRAY_LEN: Final = 2

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
#: The vocabulary of generated strings (and of the alternative tokens `logprobs` lists).
WORDS: Final = tuple(_WORD_TEXT.split())
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


@dataclass(frozen=True, slots=True)
class Node:
    """A JSON schema with `$ref`/`allOf` resolved, so generation never re-walks definitions."""

    kind: str  # const, enum, choice, object, array, string, integer, number, boolean, null, any
    const: Any = None
    options: tuple[Any, ...] = ()
    choices: tuple[Node, ...] = ()
    props: tuple[tuple[str, Node], ...] = ()
    required: tuple[str, ...] = ()
    items: Node | None = None
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


# ------------------------------------------------------------------------------------------- compiling
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


def _compile(schema: Any, root: dict[str, Any], depth: int = 0) -> Node:
    """Resolve a (sub)schema into a `Node`; recursion through `$ref` stops at a fixed depth."""
    if not isinstance(schema, dict):
        return Node("any")
    node = _compile_keyword(schema, root, depth)
    return _compile_typed(schema, root, depth) if node is None else node


def _compile_keyword(schema: dict[str, Any], root: dict[str, Any], depth: int) -> Node | None:
    """A schema that a keyword decides before its type: ``$ref``, ``allOf``, ``const``, ``enum``, ``anyOf`` /
    ``oneOf`` (in that order); None for any other."""
    if "$ref" in schema:
        if depth >= _MAX_REF_DEPTH:
            return Node("null")
        target = _lookup_ref(root, str(schema["$ref"]))
        extra = {k: v for k, v in schema.items() if k != "$ref"}
        return _compile({**target, **extra}, root, depth + 1)
    if "allOf" in schema:
        return _compile(_merge_all_of(schema, root), root, depth + 1)
    if "const" in schema:
        return Node("const", const=schema["const"])
    if isinstance(schema.get("enum"), list) and schema["enum"]:
        return Node("enum", options=tuple(schema["enum"]))
    for key in ("anyOf", "oneOf"):
        alternatives = schema.get(key)
        if isinstance(alternatives, list) and alternatives:
            return _compile_alternatives(alternatives, root, depth)
    return None


def _compile_typed(schema: dict[str, Any], root: dict[str, Any], depth: int) -> Node:
    """A schema by its ``type`` (a list of several non-null types is a choice), or the type its ``properties`` /
    ``items`` imply; anything else is ``any``."""
    typ = schema.get("type")
    if isinstance(typ, list):
        types = [t for t in typ if t != "null"] or ["null"]
        if len(types) > 1:
            return Node("choice", choices=tuple(_compile({**schema, "type": t}, root, depth + 1) for t in types))
        typ = types[0]
    if typ is None:
        typ = "object" if "properties" in schema else "array" if "items" in schema else None
    compile_typed = _BY_TYPE.get(typ) if isinstance(typ, str) else None
    return Node("any") if compile_typed is None else compile_typed(schema, root, depth)


def _compile_alternatives(alternatives: list[Any], root: dict[str, Any], depth: int) -> Node:
    """``anyOf`` / ``oneOf``: the non-null alternatives (``Optional[X]`` is X; only nulls is null)."""
    compiled = [_compile(alt, root, depth + 1) for alt in alternatives]
    non_null = tuple(n for n in compiled if n.kind != "null")
    if not non_null:
        return Node("null")
    return non_null[0] if len(non_null) == 1 else Node("choice", choices=non_null)


def _compile_object(schema: dict[str, Any], root: dict[str, Any], depth: int) -> Node:
    raw_props = schema.get("properties") or {}
    props = tuple((str(name), _compile(sub, root, depth + 1)) for name, sub in raw_props.items())
    required = tuple(str(r) for r in schema.get("required") or [] if r in raw_props)
    return Node("object", props=props, required=required)


def _compile_array(schema: dict[str, Any], root: dict[str, Any], depth: int) -> Node:
    items = schema.get("items")
    return Node(
        "array",
        items=_compile(items, root, depth + 1) if isinstance(items, dict) else Node("any"),
        min_items=int(schema.get("minItems", 0)),
        max_items=int(schema["maxItems"]) if "maxItems" in schema else None,
    )


def _compile_numeric(kind: str, schema: dict[str, Any]) -> Node:
    """``integer`` or ``number`` (``kind``: ``schema["type"]`` may be a list such as ``["integer", "null"]``)."""
    lo, lo_ex = _bound(schema, "minimum", "exclusiveMinimum")
    hi, hi_ex = _bound(schema, "maximum", "exclusiveMaximum")
    return Node(kind, lo=lo, hi=hi, lo_exclusive=lo_ex, hi_exclusive=hi_ex)


def _compile_string(schema: dict[str, Any]) -> Node:
    return Node(
        "string",
        min_len=int(schema.get("minLength", 0)),
        max_len=int(schema["maxLength"]) if "maxLength" in schema else None,
        fmt=str(schema["format"]) if "format" in schema else None,
    )


def _bound(schema: dict[str, Any], inclusive: str, exclusive: str) -> tuple[float | None, bool]:
    ex = schema.get(exclusive)
    if isinstance(ex, int | float) and not isinstance(ex, bool):
        return float(ex), True
    inc = schema.get(inclusive)
    if isinstance(inc, int | float) and not isinstance(inc, bool):
        return float(inc), False
    return None, False


#: The compiler of each JSON type (``type`` given, or implied by ``properties`` / ``items``).
_BY_TYPE: Final[dict[str, Callable[[dict[str, Any], dict[str, Any], int], Node]]] = {
    "object": _compile_object,
    "array": _compile_array,
    "integer": lambda schema, root, depth: _compile_numeric("integer", schema),
    "number": lambda schema, root, depth: _compile_numeric("number", schema),
    "string": lambda schema, root, depth: _compile_string(schema),
    "boolean": lambda schema, root, depth: Node("boolean"),
    "null": lambda schema, root, depth: Node("null"),
}

_schema_cache: dict[str, Node] = {}


def compile_schema(schema: Any) -> Node:
    """Compile once per distinct schema: the same judge schema arrives with every request."""
    key = json.dumps(schema, sort_keys=True, default=str)
    node = _schema_cache.get(key)
    if node is None:
        node = _compile(schema, schema if isinstance(schema, dict) else {})
        if len(_schema_cache) >= _SCHEMA_CACHE_SIZE:
            _schema_cache.pop(next(iter(_schema_cache)))
        _schema_cache[key] = node
    return node


# ------------------------------------------------------------------------------------------- generating
def choice_key(prompt: str, seed: int, choice: int) -> bytes:
    """The key every draw for one answer derives from: its instance's values and its tokens' log-probabilities."""
    return hashlib.blake2b(f"{seed}\x00{choice}\x00{prompt}".encode(), digest_size=16).digest()


class _Gen:
    """Generation context: every choice is a pure function of (prompt, seed, choice, path)."""

    __slots__ = ("base", "ids")

    def __init__(self, prompt: str, seed: int, choice: int, ids: list[str] | None) -> None:
        self.base = choice_key(prompt, seed, choice)
        self.ids = ids

    def h(self, path: str) -> int:
        digest = hashlib.blake2b(self.base + path.encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")

    def value(self, node: Node, path: str, name: str) -> Any:
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

    def _array(self, node: Node, path: str, name: str) -> list[Any]:
        item = node.items or Node("any")
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
            words.append(WORDS[h % len(WORDS)])
            h //= len(WORDS)
        return " ".join(words)

    def _string(self, node: Node, path: str, name: str) -> str:
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

    def _integer(self, node: Node, path: str) -> int:
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

    def _number(self, node: Node, path: str) -> float:
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


def _coerce_id(raw: str, id_node: Node) -> Any:
    if id_node.kind in ("integer", "number"):
        try:
            return int(raw)
        except ValueError:
            return raw
    return raw


def instance_of(node: Node, prompt: str, *, seed: int = 0, choice: int = 0, ids: list[str] | None = None) -> Any:
    """The instance of a compiled schema for one answer; array items with an ``id`` get one per item id."""
    return _Gen(prompt, seed, choice, ids).value(node, "$", "")


def generate_instance(schema: Any, prompt: str, *, seed: int = 0, choice: int = 0, ids: list[str] | None = None) -> Any:
    """Deterministic, schema-valid instance for a prompt (public so benchmarks can predict answers)."""
    return instance_of(compile_schema(schema), prompt, seed=seed, choice=choice, ids=ids)


def violate(node: Node, value: Any) -> Any:
    """Turn a valid instance into valid JSON that breaks the schema (enum first, then `required`)."""
    if _break_enum(node, value):
        return value
    if node.kind == "object" and isinstance(value, dict) and node.required:
        value.pop(node.required[0], None)
        return value
    if node.kind in ("integer", "number", "boolean"):
        return "not a number"
    if node.kind == "string":
        return 12345
    return ["not", "an", "object"]


def _break_enum(node: Node, value: Any) -> bool:
    """Put a value no enum / const allows in the first such field of ``value`` (in place); whether one was found."""
    if node.kind == "object" and isinstance(value, dict):
        for key, sub in node.props:
            if key not in value:
                continue
            if sub.kind in ("enum", "const"):
                value[key] = "__not_allowed__"
                return True
            if _break_enum(sub, value[key]):
                return True
    if node.kind == "array" and isinstance(value, list) and node.items is not None:
        return any(_break_enum(node.items, element) for element in value)
    return False
