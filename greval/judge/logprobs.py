"""A verdict's confidence from one call: the judge's token log-probabilities at the tokens that spell it.

Pure computation on OpenAI-shaped ``logprobs`` (``{"content": [{"token", "logprob", "bytes", "top_logprobs":
[...]}]}``, what an OpenAI-compatible server answers to ``logprobs: true``; LangChain keeps it in the answer
message's ``response_metadata["logprobs"]``) and the answer's JSON text. The tokens are joined (by their
``bytes`` when every token has them, else by their text) and must give back the answer's content exactly; the
JSON object in it is walked with character positions, so each verdict's ``label`` / ``value`` is found where
it is spelled — in a many-judge's answer by the ``id`` of the ``verdicts`` element it sits in. Whatever cannot
be aligned (no log-probabilities, another text, a value split over tokens, an id given twice) has no token
confidence: never a guess.

Definitions (:class:`TokenConfidence`):

* **categorical** — the probability the model gave to spelling the chosen label, given the text before it,
  ``p = exp(sum of the logprobs of the label's tokens up to the one that tells it from every other label)``
  (the chain rule; the tokens after it are forced by the label set, and a grammar-constrained server still
  reports their unconstrained probabilities — one verdict of the bundled example got 4e-18 when every token
  of "Not fully attributable" counted — so they count as certain),
  normalised over the other labels: ``p / (p + r)``, where ``r`` is the probability mass of the first token's
  ``top_logprobs`` candidates that start another label (and not the chosen one). Servers that constrain the
  answer with a grammar (llama-server's json_schema) report log-probabilities from *before* the constraint,
  so ``p`` alone also counts tokens the grammar forbids (measured: "No" 0.16 beside "Yes" 0.21 and an
  impossible "Is" 0.32); the normalisation keeps only the answers the judge could give (here 0.43). The
  other labels' later tokens are not seen and count as certain, so ``r`` is an upper bound and the figure
  errs low. Without ``top_logprobs`` it is ``p``. When a token also spells a neighbouring character (a
  closing quote merged into the label's last token), its probability counts whole. A label that is a prefix
  of another label (``yes`` / ``yes_but``) shares the probability of its tokens with the longer one.
* **value scale** — at the one token that spells the integer, the distribution over the integer candidates of
  its ``top_logprobs`` that lie on the scale (the chosen token's own logprob added when the list lacks it;
  candidates that differ only by whitespace added up), normalised over those valid values: the confidence is
  the chosen value's share, ``expected`` the mean and ``spread`` the standard deviation of that distribution
  (G-Eval's probability-weighted score). It is as wide as ``top_logprobs`` is long: ask for at least as many
  as the scale has values. A value spelled by more than one token has none.
"""

from __future__ import annotations

import json
import math
import re
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from greval.errors import option
from greval.spec import CategoricalScale, Spec
from greval.types import RECORD_ITEM

__all__ = [
    "LogprobRequest",
    "TokenConfidence",
    "aligned_tokens",
    "label_confidence",
    "token_confidences",
    "value_confidence",
    "value_distribution",
    "weighted_value",
]

_DECODER = json.JSONDecoder()
_INT = re.compile(r"-?\d+")
_VALUE_KEY = re.compile(r'"value"\s*:\s*')


@dataclass(frozen=True)
class TokenConfidence:
    """One verdict's token confidence (see the module docstring); ``chosen`` is the label or value it is for."""

    chosen: str | int
    confidence: float
    expected: float | None = None
    spread: float | None = None


@dataclass(frozen=True)
class Tokens:
    """The answer's tokens aligned with its text: ``starts[i]`` is where token ``i`` begins in ``text``."""

    text: str
    starts: list[int]
    entries: list[Mapping[str, Any]]

    def end(self, i: int) -> int:
        return self.starts[i + 1] if i + 1 < len(self.starts) else len(self.text)

    def covering(self, start: int, end: int) -> list[int]:
        """The tokens that overlap ``text[start:end]``."""
        return [i for i in range(len(self.starts)) if self.starts[i] < end and self.end(i) > start]


def aligned_tokens(logprobs: Any, content: str | None = None) -> Tokens | None:
    """The tokens of OpenAI-shaped ``logprobs`` with their character positions; None when there are none, an
    entry is malformed, or they do not spell ``content`` (when given) exactly."""
    entries = logprobs.get("content") if isinstance(logprobs, Mapping) else None
    if not isinstance(entries, list) or not entries:
        return None
    if not all(
        isinstance(e, Mapping) and isinstance(e.get("token"), str) and isinstance(e.get("logprob"), int | float)
        for e in entries
    ):
        return None
    starts: list[int] = []
    raw = [e.get("bytes") for e in entries]
    if all(isinstance(b, list) and all(isinstance(x, int) for x in b) for b in raw):
        # Bytes first: a character split over two tokens has no text of its own in either.
        whole = b""
        for b in raw:
            starts.append(len(whole.decode("utf-8", errors="ignore")))
            whole += bytes(b)
        text = whole.decode("utf-8", errors="replace")
    else:
        text = ""
        for e in entries:
            starts.append(len(text))
            text += str(e["token"])
    if content is not None and text != content:
        # Servers may strip what the model wrote around the JSON (llama-server drops a leading ```json
        # fence from the content but not from the tokens): the content must then occur once in the tokens.
        at = text.find(content) if content else -1
        if at < 0 or text.find(content, at + 1) >= 0:
            return None
        starts = [s - at for s in starts]
        text = text[at : at + len(content)]
    return Tokens(text=text, starts=starts, entries=entries)


def label_confidence(tokens: Tokens, start: int, end: int, labels: Sequence[str] = ()) -> float | None:
    """exp(sum of the logprobs of the tokens overlapping ``text[start:end]``): the chain-rule probability,
    normalised over the other ``labels`` the first token's ``top_logprobs`` start (see the module doc)."""
    cover = tokens.covering(start, end)
    if not cover or end <= start:
        return None
    chosen = tokens.text[start:end]
    deciding = []
    for i in cover:  # the tokens up to the one that tells the chosen label from every other
        deciding.append(i)
        spelled = tokens.text[start : min(end, tokens.end(i))]
        if labels and not any(label != chosen and label.startswith(spelled) for label in labels):
            break
    p = math.exp(sum(float(tokens.entries[i]["logprob"]) for i in deciding))
    first = tokens.entries[cover[0]]
    if not labels or not first.get("top_logprobs"):
        return p
    others = [label for label in labels if label != chosen]
    lead = tokens.text[tokens.starts[cover[0]] : start]  # what the first token spells before the label ('"')
    seen = {str(first["token"])}
    rivals = 0.0
    for cand in first.get("top_logprobs") or []:
        tok = str(cand.get("token", "")) if isinstance(cand, Mapping) else ""
        if tok in seen or not tok.startswith(lead) or not isinstance(cand.get("logprob"), int | float):
            continue
        seen.add(tok)
        part = tok[len(lead) :]

        def starts(label: str, part: str = part) -> bool:
            return bool(part) and (label.startswith(part) or part.startswith(label))

        if any(starts(label) for label in others) and not starts(chosen):
            rivals += math.exp(float(cand["logprob"]))
    return p / (p + rivals)


def value_distribution(entry: Mapping[str, Any], lo: int, hi: int) -> dict[int, float]:
    """Value -> probability among one token's candidates that spell an integer in [lo, hi] (not normalised;
    the chosen token counts even when ``top_logprobs`` leaves it out)."""
    cands = list(entry.get("top_logprobs") or [])
    chosen = str(entry.get("token", ""))
    if not any(str(c.get("token", "")) == chosen for c in cands):
        cands.append({"token": chosen, "logprob": entry.get("logprob", -math.inf)})
    probs: dict[int, float] = {}
    for c in cands:
        s = str(c.get("token", "")).strip()
        if _INT.fullmatch(s) and lo <= int(s) <= hi:
            probs[int(s)] = probs.get(int(s), 0.0) + math.exp(float(c.get("logprob", -math.inf)))
    return probs


def _moments(probs: Mapping[int, float]) -> tuple[float, float, float] | None:
    """(expected value, standard deviation, mass) of an unnormalised distribution over values."""
    mass = sum(probs.values())
    if mass <= 0:
        return None
    mean = sum(v * p for v, p in probs.items()) / mass
    var = sum(p * (v - mean) ** 2 for v, p in probs.items()) / mass
    return mean, math.sqrt(max(var, 0.0)), mass


def value_confidence(tokens: Tokens, start: int, end: int, lo: int, hi: int) -> TokenConfidence | None:
    """The chosen integer's share of the valid candidates at the one token that spells ``text[start:end]``,
    with the distribution's expected value and spread."""
    cover = tokens.covering(start, end)
    if len(cover) != 1:
        return None
    entry = tokens.entries[cover[0]]
    digits = tokens.text[start:end]
    if str(entry["token"]).strip() != digits or not _INT.fullmatch(digits):
        return None
    probs = value_distribution(entry, lo, hi)
    moments = _moments(probs)
    chosen = int(digits)
    if moments is None or chosen not in probs:
        return None
    mean, spread, mass = moments
    return TokenConfidence(chosen=chosen, confidence=probs[chosen] / mass, expected=mean, spread=spread)


def weighted_value(logprobs: Any, lo: int, hi: int) -> tuple[float, float] | None:
    """(probability-weighted value, probability mass on valid values) at the first token after the answer's
    first ``"value":`` key, from OpenAI-style ``logprobs.content``; None when the token or candidates are
    missing (``greval reliability``'s G-Eval score on record-level value scales)."""
    tokens = aligned_tokens(logprobs)
    if tokens is None:
        return None
    m = _VALUE_KEY.search(tokens.text)
    if m is None:
        return None
    for i, entry in enumerate(tokens.entries):
        if tokens.end(i) > m.end() and str(entry["token"]).strip():
            moments = _moments(value_distribution(entry, lo, hi))
            return None if moments is None else (moments[0], moments[2])
    return None


# ------------------------------------------------------------------------------ the answer's JSON
Field = tuple[Any, int, int]  # (value, start, end) in the text


def _skip(text: str, i: int) -> int:
    """The position of the first non-whitespace character at or after ``i``."""
    while i < len(text) and text[i] in " \t\n\r":
        i += 1
    return i


def _object(text: str, i: int) -> tuple[dict[str, Field], int]:
    """The fields of the JSON object at ``text[i] == "{"``, with their values' positions (raises ValueError
    or IndexError on anything else)."""
    if text[i] != "{":
        raise ValueError("not an object")
    i = _skip(text, i + 1)
    fields: dict[str, Field] = {}
    if text[i] == "}":
        return fields, i + 1
    while True:
        if text[i] != '"':
            raise ValueError("a key expected")
        key, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if text[i] != ":":
            raise ValueError("':' expected")
        i = _skip(text, i + 1)
        if text[i] == "{":
            value, end = _object(text, i)
        else:
            value, end = _DECODER.raw_decode(text, i)
        if key in fields:
            raise ValueError(f"{key!r} given twice")
        fields[key] = (value, i, end)
        i = _skip(text, end)
        if text[i] == ",":
            i = _skip(text, i + 1)
        elif text[i] == "}":
            return fields, i + 1
        else:
            raise ValueError("',' or '}' expected")


def _elements(text: str, start: int) -> list[dict[str, Field]]:
    """The objects of the JSON array at ``text[start] == "["`` (other elements are skipped)."""
    if text[start] != "[":
        raise ValueError("not an array")
    out: list[dict[str, Field]] = []
    i = _skip(text, start + 1)
    while text[i] != "]":
        if text[i] == "{":
            fields, i = _object(text, i)
            out.append(fields)
        else:
            _, i = _DECODER.raw_decode(text, i)
        i = _skip(text, i)
        if text[i] == ",":
            i = _skip(text, i + 1)
    return out


def _verdict_confidence(spec: Spec, tokens: Tokens, fields: Mapping[str, Field]) -> TokenConfidence | None:
    scale = spec.scale
    if isinstance(scale, CategoricalScale):
        got = fields.get("label")
        if got is None or not isinstance(got[0], str):
            return None
        conf = label_confidence(tokens, got[1] + 1, got[2] - 1, scale.names)  # inside the quotes
        return None if conf is None else TokenConfidence(chosen=got[0], confidence=conf)
    got = fields.get("value")
    if got is None or not isinstance(got[0], int) or isinstance(got[0], bool):
        return None
    return value_confidence(tokens, got[1], got[2], scale.min, scale.max)


def token_confidences(
    spec: Spec, logprobs: Any, content: str | None, item_ids: Sequence[str] | None = None
) -> dict[str, TokenConfidence]:
    """Item id (:data:`RECORD_ITEM` for a record judge) -> the token confidence of its verdict in this answer;
    a verdict that cannot be aligned is left out. ``content``: the answer's text, which the tokens must spell."""
    tokens = aligned_tokens(logprobs, content)
    if tokens is None:
        return {}
    start = tokens.text.find("{")
    try:
        fields, _ = _object(tokens.text, start) if start >= 0 else ({}, 0)
        if spec.each is None:
            conf = _verdict_confidence(spec, tokens, fields)
            return {} if conf is None else {RECORD_ITEM: conf}
        verdicts = fields.get("verdicts")
        elements = _elements(tokens.text, verdicts[1]) if verdicts is not None else []
    except (ValueError, IndexError):
        return {}
    out: dict[str, TokenConfidence] = {}
    seen: set[str] = set()
    wanted = None if item_ids is None else set(item_ids)
    for element in elements:
        raw = element.get("id")
        if raw is None:
            continue
        iid = str(raw[0])
        if wanted is not None and iid not in wanted:
            continue
        if iid in seen:  # given twice: which verdict the tokens belong to is unknown
            out.pop(iid, None)
            continue
        seen.add(iid)
        conf = _verdict_confidence(spec, tokens, element)
        if conf is not None:
            out[iid] = conf
    return out


# ------------------------------------------------------------------------------ asking for them
class LogprobRequest:
    """Token log-probabilities asked of the judge, shared by every judge of a run: ``top`` alternatives per
    token, and what came of it (refused by the provider, answers without them), said once in :meth:`notes`."""

    def __init__(self, top: int = 10) -> None:
        self.top = max(0, min(20, top))
        self.refused: str | None = None  # why they are no longer asked for (the provider's 400, the model kind)
        self.answers = 0
        self.without: dict[str, int] = {}  # method -> answers that came back without usable log-probabilities
        self._lock = threading.Lock()

    @property
    def active(self) -> bool:
        return self.refused is None

    def refuse(self, why: str) -> None:
        with self._lock:
            if self.refused is None:
                self.refused = why

    def count(self, method: str, usable: bool) -> None:
        with self._lock:
            self.answers += 1
            if not usable:
                self.without[method] = self.without.get(method, 0) + 1

    def notes(self) -> list[str]:
        """What the run summary says about the token confidences (nothing when every answer had them)."""
        out = []
        if self.refused is not None:
            out.append(f"token log-probabilities not asked for the rest of the run: {self.refused}")
        missing = sum(self.without.values())
        if missing:
            tools = self.without.get("function_calling", 0)
            why = (
                f" ({tools} by function calling, whose arguments get no log-probabilities: use {option('method')} "
                "json_schema)"
                if tools
                else " (the server returned none, or they do not spell the answer)"
            )
            out.append(
                f"{missing} of {self.answers} answer(s) without token log-probabilities: no token_confidence{why}"
            )
        return out
