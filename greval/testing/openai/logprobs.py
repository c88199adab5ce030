"""Token log-probabilities for an answer, synthesised deterministically (``"logprobs": true``).

What a request with ``logprobs`` gets depends on the server's ``logprobs`` knob: ``"null"`` (the default, answers
byte for byte as a server that ignores the parameter: ``logprobs: null``), ``"on"`` (OpenAI-shaped
``choices[i].logprobs.content``: the content cut into words, whitespace runs and single punctuation characters,
each with a deterministic log-probability; where the JSON answer spells an enum value or a small integer range's
value, the first token's ``top_logprobs`` (optional ``top_logprobs`` k) list the other values' first tokens, the
chosen one with a probability drawn in [0.34, 0.99] per prompt, choice and position, so that confidences vary
across items; a tool-call answer has ``{"content": null, "refusal": null}``, as the arguments get none; a streamed
answer none), or ``"reject"`` (400 ``unsupported_parameter`` on ``param: "logprobs"``, as a model that does not
offer them).
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from typing import Any, Final

from greval.testing.openai.protocol import Answer
from greval.testing.openai.schema_gen import WORDS, Node, choice_key, compile_schema

__all__ = ["choice_logprobs", "tokenize"]

_TOKEN_RE: Final = re.compile(r"\w+|\s+|[^\w\s]")
_MAX_RANGE: Final = 20  # integer ranges up to this many values get their alternatives listed

#: A token's log-probability and its ``top_logprobs`` alternatives (token, log-probability).
_Scored = tuple[float, list[tuple[str, float]]]
#: An enum or small-range integer of the answer: (its key, its value, the values the schema allows).
_Leaf = tuple[str, Any, tuple[Any, ...]]


def tokenize(text: str) -> list[str]:
    """The test server's tokens: words, whitespace runs and single other characters (they join to ``text``)."""
    return _TOKEN_RE.findall(text)


def choice_logprobs(answer: Answer, choice: int, *, seed: int, top: int) -> dict[str, Any]:
    """``choices[i].logprobs`` for one answer: every content token with a deterministic log-probability, and
    the alternatives of the enum / integer values the schema offers at the token that starts each value."""
    if answer.req.mode == "tools" or answer.finish_as == "content_filter":
        return {"content": None, "refusal": None}  # tool-call arguments get no log-probabilities
    text = answer.outputs[choice]
    base = choice_key(answer.prompt, seed, choice)
    tokens = tokenize(text)
    special = _value_tokens(answer.req.schema, text, tokens, base, top)
    content = []
    for i, tok in enumerate(tokens):
        lp, alts = special[i] if i in special else _plain(base, i, tok, top)
        content.append(_entry(tok, lp, alts))
    return {"content": content, "refusal": None}


def _leaves(node: Node, value: Any, key: str, out: list[_Leaf]) -> None:
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


def _value_tokens(schema: Any, text: str, tokens: list[str], base: bytes, top: int) -> dict[int, _Scored]:
    """The tokens that spell a value of the schema (enum, small integer range), by index, with their scores."""
    leaves: list[_Leaf] = []
    if schema is not None:
        try:
            _leaves(compile_schema(schema), json.loads(text), "", leaves)
        except ValueError:
            leaves = []
    starts: dict[int, int] = {}
    pos = 0
    for i, tok in enumerate(tokens):
        starts[pos] = i
        pos += len(tok)
    special: dict[int, _Scored] = {}
    cursor = 0
    for n, (key, value, options) in enumerate(leaves):
        found = text.find(f"{json.dumps(key)}: {json.dumps(value)}", cursor)
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
        special.update(_leaf_scores(base + f"|leaf{n}".encode(), value, options, tokens[first : last + 1], first, top))
    return special


def _leaf_scores(
    key: bytes, value: Any, options: tuple[Any, ...], spelling: list[str], first: int, top: int
) -> dict[int, _Scored]:
    """The scores of the tokens that spell one value (from index ``first``): the first token's probability is the
    sum over the values it starts; the rest follow from it, so that together they give the value's draw."""
    chosen = 0.34 + 0.65 * _unit(key)
    others = [o for o in options if o != value]
    weights = [1 + int(_unit(key + f"|{j}".encode()) * 100) for j in range(len(others))]
    spare = (1 - chosen) * 0.95  # the rest of the mass goes to tokens that spell no value at all
    probs = {value: chosen} | {o: spare * w / sum(weights) for o, w in zip(others, weights, strict=True)}
    by_first: dict[str, float] = {}
    for option, p in probs.items():
        head = tokenize(_spelled(option))[0] if _spelled(option) else ""
        by_first[head] = by_first.get(head, 0.0) + p
    p_first = by_first[spelling[0]]
    ranked = sorted(by_first.items(), key=lambda kv: -kv[1])[:top]
    scores: dict[int, _Scored] = {first: (math.log(p_first), [(t, math.log(p)) for t, p in ranked])}
    last = first + len(spelling) - 1
    if last > first:  # the rest of the value given its first token: the chain rule gives back `chosen`
        for i in range(first + 1, last):
            scores[i] = (0.0, [(spelling[i - first], 0.0)][:top])
        lp = math.log(chosen / p_first)
        scores[last] = (lp, [(spelling[-1], lp)][:top])
    return scores


def _plain(base: bytes, index: int, tok: str, top: int) -> _Scored:
    """A token that spells no value: a probability in [0.8, 1), the alternatives words of the vocabulary."""
    h = hashlib.blake2b(base + f"|tok{index}".encode(), digest_size=8).digest()
    p = 0.8 + 0.2 * int.from_bytes(h, "big") / 2**64
    alts = [(tok, math.log(p))]
    for j in range(1, top):
        word = WORDS[(h[j % 8] + j) % len(WORDS)]
        alt = word if word != tok else word.upper()
        alts.append((alt, math.log((1 - p) / top)))
    return math.log(p), alts[:top]


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
