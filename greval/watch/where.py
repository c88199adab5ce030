"""The sampling filter's small language: ``attributes.route == "search" and tokens < 2000``.

Parsed once into a tree and evaluated against each trace's fields; nothing is ever handed to Python's ``eval``.
What it has:

- **paths** into the trace: ``attributes.X`` (the root span's attributes; dotted keys such as
  ``attributes.llm.model_name`` are found whether the source writes them flat or nested), ``metadata.X`` (its
  metadata), ``name`` (the root span's name), ``hour`` (the hour the trace started, UTC, 0–23), and any field of
  the trace's record (``question``, ``answer``, ``tokens``, ``latency_s``, ``system`` …);
- **literals**: ``"text"`` or ``'text'``, numbers, ``true``, ``false``, ``null``, lists ``["a", "b"]``;
- **comparisons**: ``== != < <= > >=``, ``in`` / ``not in`` (a list, or a substring of a text),
  ``contains``, ``startswith``;
- ``and``, ``or``, ``not`` and parentheses.

A path the trace lacks is ``null``: ``==`` to a value is false, ``<`` and the like are false. A mistake is one
line naming the character where it is (:class:`WhereError`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from greval.errors import UserError

__all__ = ["Expr", "WhereError", "lookup", "parse_where"]

#: How long an expression may be, and how deep its parentheses and ``not`` may nest.
MAX_LENGTH = 2000
MAX_DEPTH = 40


class WhereError(UserError):
    """An expression that cannot be parsed (one line: what, where, the expression)."""


_TOKEN = re.compile(
    r"""\s*(?:
      (?P<string>"(?:[^"\\]|\\.)*"|'(?:[^'\\]|\\.)*')
    | (?P<number>-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)
    | (?P<op>==|!=|<=|>=|<|>|&&|\|\||!|\(|\)|\[|\]|,)
    | (?P<name>[A-Za-z_][\w-]*(?:\.(?:[A-Za-z_][\w-]*|\d+))*)
    )""",
    re.X,
)
_WORDS = {"and": "&&", "or": "||", "not": "!"}
_LITERALS: dict[str, Any] = {"true": True, "false": False, "null": None, "none": None}
_COMPARE = ("==", "!=", "<", "<=", ">", ">=", "in", "not in", "contains", "startswith")


@dataclass(frozen=True)
class Token:
    kind: str  # string | number | op | name | end
    text: str
    value: Any
    at: int


def _tokens(text: str) -> list[Token]:
    out: list[Token] = []
    pos = 0
    while pos < len(text):
        if text[pos:].strip() == "":
            break
        m = _TOKEN.match(text, pos)
        if m is None or m.end() == pos:
            at = len(text) - len(text[pos:].lstrip())
            raise _error(text, at, f"unexpected {text[at]!r}")
        kind = m.lastgroup or ""
        raw = m.group(kind)
        at = m.start(kind)
        if kind == "string":
            value: Any = re.sub(r"\\(.)", r"\1", raw[1:-1])
        elif kind == "number":
            value = float(raw) if any(c in raw for c in ".eE") else int(raw)
        elif kind == "name" and raw.lower() in _WORDS:
            kind, raw = "op", _WORDS[raw.lower()]
            value = raw
        elif kind == "name" and raw.lower() in _LITERALS:
            kind, value = "literal", _LITERALS[raw.lower()]
        else:
            value = raw
        out.append(Token(kind, raw, value, at))
        pos = m.end()
    out.append(Token("end", "", None, len(text)))
    return out


def _error(text: str, at: int, what: str) -> WhereError:
    return WhereError(f"where {text!r}: {what} at character {at + 1}")


# --------------------------------------------------------------------------------------------- the tree
@dataclass(frozen=True)
class Expr:
    """A parsed expression: call :meth:`matches` with a trace's fields."""

    op: str  # and | or | not | cmp | path | literal | list
    args: tuple[Any, ...]
    text: str = ""

    def matches(self, fields: Mapping[str, Any]) -> bool:
        return bool(self._value(fields))

    def _value(self, fields: Mapping[str, Any]) -> Any:
        if self.op == "literal":
            return self.args[0]
        if self.op == "path":
            return lookup(fields, self.args[0])
        if self.op == "list":
            return [a._value(fields) for a in self.args]
        if self.op == "not":
            return not self.args[0]._value(fields)
        if self.op == "and":
            return all(a._value(fields) for a in self.args)
        if self.op == "or":
            return any(a._value(fields) for a in self.args)
        left, how, right = self.args
        return _compare(left._value(fields), how, right._value(fields))


def _number(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool)


def _compare(a: Any, how: str, b: Any) -> bool:
    if how == "==":
        return bool(a == b)
    if how == "!=":
        return bool(a != b)
    if how in ("in", "not in"):
        found = (isinstance(b, list) or (isinstance(b, str) and isinstance(a, str))) and a in b
        return found if how == "in" else not found
    if how == "contains":
        return (isinstance(a, str) and isinstance(b, str) and b in a) or (isinstance(a, list) and b in a)
    if how == "startswith":
        return isinstance(a, str) and isinstance(b, str) and a.startswith(b)
    if not ((_number(a) and _number(b)) or (isinstance(a, str) and isinstance(b, str))):
        return False
    return bool({"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[how])


def lookup(fields: Mapping[str, Any], path: str) -> Any:
    """The value at a dotted ``path`` of nested mappings and lists, trying the longest dotted key first at each
    level (a source may keep ``llm.model_name`` as one flat key); None where it leads nowhere."""
    parts = path.split(".")
    node: Any = fields
    i = 0
    while i < len(parts):
        if isinstance(node, Mapping):
            for j in range(len(parts), i, -1):
                key = ".".join(parts[i:j])
                if key in node:
                    node, i = node[key], j
                    break
            else:
                return None
        elif isinstance(node, list) and parts[i].isdigit() and int(parts[i]) < len(node):
            node, i = node[int(parts[i])], i + 1
        else:
            return None
    return node


# ------------------------------------------------------------------------------------------ the parser
class _Parser:
    def __init__(self, text: str) -> None:
        self.text = text
        self.tokens = _tokens(text)
        self.i = 0
        self.depth = 0

    @property
    def tok(self) -> Token:
        return self.tokens[self.i]

    def take(self, *ops: str) -> Token | None:
        t = self.tok
        if t.kind == "op" and t.text in ops:
            self.i += 1
            return t
        return None

    def expect(self, op: str) -> None:
        if self.take(op) is None:
            raise _error(self.text, self.tok.at, f"expected {op!r}, found {self.tok.text or 'the end'!r}")

    def deeper(self) -> None:
        self.depth += 1
        if self.depth > MAX_DEPTH:
            raise _error(self.text, self.tok.at, f"nested more than {MAX_DEPTH} deep")

    def parse(self) -> Expr:
        expr = self.or_()
        if self.tok.kind != "end":
            raise _error(self.text, self.tok.at, f"unexpected {self.tok.text!r}")
        return expr

    def or_(self) -> Expr:
        parts = [self.and_()]
        while self.take("||"):
            parts.append(self.and_())
        return parts[0] if len(parts) == 1 else Expr("or", tuple(parts))

    def and_(self) -> Expr:
        parts = [self.not_()]
        while self.take("&&"):
            parts.append(self.not_())
        return parts[0] if len(parts) == 1 else Expr("and", tuple(parts))

    def not_(self) -> Expr:
        if self.take("!"):
            self.deeper()
            inner = self.not_()
            self.depth -= 1
            return Expr("not", (inner,))
        return self.comparison()

    def comparison(self) -> Expr:
        left = self.operand()
        how = self._operator()
        if how is None:
            return left
        return Expr("cmp", (left, how, self.operand()))

    def _operator(self) -> str | None:
        t = self.tok
        if t.kind == "op" and t.text in _COMPARE:
            self.i += 1
            return t.text
        if t.kind == "op" and t.text == "!" and self.tokens[self.i + 1].text == "in":
            self.i += 2
            return "not in"
        if t.kind == "name" and t.text in ("in", "contains", "startswith"):
            self.i += 1
            return t.text
        return None

    def operand(self) -> Expr:
        t = self.tok
        if t.kind in ("string", "number", "literal"):
            self.i += 1
            return Expr("literal", (t.value,))
        if t.kind == "name" and t.text not in ("in", "contains", "startswith"):
            self.i += 1
            return Expr("path", (t.text,))
        if self.take("("):
            self.deeper()
            inner = self.or_()
            self.expect(")")
            self.depth -= 1
            return inner
        if self.take("["):
            items: list[Expr] = []
            while not self.take("]"):
                if items:
                    self.expect(",")
                nxt = self.tok
                if nxt.kind not in ("string", "number", "literal"):
                    raise _error(self.text, nxt.at, "a list holds only texts, numbers, true, false or null")
                self.i += 1
                items.append(Expr("literal", (nxt.value,)))
            return Expr("list", tuple(items))
        raise _error(self.text, t.at, f"expected a value or a path, found {t.text or 'the end'!r}")


def parse_where(text: str) -> Expr:
    """``text`` parsed (a :class:`WhereError` naming the place of a mistake)."""
    if not text.strip():
        raise WhereError("where: the expression is empty")
    if len(text) > MAX_LENGTH:
        raise WhereError(f"where: the expression is {len(text)} characters long (at most {MAX_LENGTH})")
    expr = _Parser(text).parse()
    return Expr(expr.op, expr.args, text)
