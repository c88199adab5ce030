"""The model's answer → verdicts: JSON out of any reply shape, checked against the verdict models, item by
item for a many-judge (what is missing or invalid is reported, to be asked again), samples combined.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ValidationError

from greval.llm.openai_chat import ChatReply
from greval.llm.retry import JudgeError
from greval.spec import CategoricalScale, Spec
from greval.spec.verdict import first_error
from greval.types import RECORD_ITEM, ErrorKind, ItemVerdict

Answer = dict[str, Any]
"""A checked answer: ``{"items": {item id: verdict fields}, "outputs": {...}, "notes": [why items are missing]}``."""


class ParseError(JudgeError):
    """The model's answer is not JSON or does not fit the verdict schema."""

    kind = ErrorKind.UNPARSABLE


_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def json_payload(msg: ChatReply, method: str) -> tuple[dict[str, Any], str]:
    """The JSON object of an answer (tool-call arguments, or the content, fenced or wrapped in prose), and
    the raw text it came from."""
    if method == "function_calling" or (msg.tool_calls and not msg.content):
        if msg.tool_calls:
            args = msg.tool_calls[0]["args"]
            return dict(args), json.dumps(args, ensure_ascii=False)
        if msg.invalid_tool_calls:
            raw = str(msg.invalid_tool_calls[0].get("args") or "")
            raise ParseError(f"tool arguments are not valid JSON: {raw[:200]}")
    content = (
        msg.content
        if isinstance(msg.content, str)
        else "".join(b if isinstance(b, str) else str(b.get("text", "")) for b in msg.content)
    )
    text = content.strip()
    fenced = _FENCE.search(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        start, end = text.find("{"), text.rfind("}")
        try:
            data = json.loads(text[start : end + 1]) if 0 <= start < end else None
        except json.JSONDecodeError:
            data = None
        if data is None:
            raise ParseError(f"the answer is not JSON: {content[:200]!r}") from None
    if not isinstance(data, dict):
        raise ParseError("the answer is JSON but not an object")
    return data, content


def known(payload: Any, model: type[BaseModel]) -> Any:
    """Drop keys the model does not know: chatty models add fields; the schema forbids them, we forgive."""
    if not isinstance(payload, dict):
        return payload
    return {k: v for k, v in payload.items() if k in model.model_fields}


def validate_one(model: type[BaseModel], payload: Mapping[str, Any]) -> dict[str, Any]:
    """A whole answer checked against one model (raises :class:`ParseError` with the first problem)."""
    try:
        return model.model_validate(known(payload, model)).model_dump()
    except ValidationError as exc:
        raise ParseError(first_error(exc)) from None


def validate_record(spec: Spec, answer_model: type[BaseModel], payload: Mapping[str, Any]) -> Answer:
    """A record judge's answer: its verdict under :data:`RECORD_ITEM`, the extra outputs apart."""
    one = validate_one(answer_model, payload)
    outputs = {k: one.pop(k) for k in spec.outputs}
    return {"items": {RECORD_ITEM: one}, "outputs": outputs, "notes": []}


def validate_items(
    item_model: type[BaseModel],
    outputs_model: type[BaseModel] | None,
    payload: Mapping[str, Any],
    item_ids: Sequence[str] | None,
) -> Answer:
    """A many-judge's answer: each valid verdict of a wanted id kept, the rest left out with a note (asked
    again). Two different verdicts for one id are a conflict: neither is kept."""
    outputs = {}
    if outputs_model is not None:
        try:
            outputs = outputs_model.model_validate(known(payload, outputs_model)).model_dump()
        except ValidationError:
            outputs = {}  # the verdicts still count; the extra outputs are asked for with re-asked items
    raw_items = payload.get("verdicts")
    if not isinstance(raw_items, list):
        raise ParseError("the answer has no `verdicts` list")
    wanted = set(item_ids or [])
    got: dict[str, dict[str, Any]] = {}
    conflicted: set[str] = set()
    notes: list[str] = []
    for entry in raw_items:
        try:
            v = item_model.model_validate(known(entry, item_model)).model_dump()
        except ValidationError as exc:
            notes.append(f"invalid item verdict ({first_error(exc)})")
            continue
        iid = v.pop("id")
        if iid not in wanted:
            notes.append(f"ignored verdict for unknown id {iid!r}")
            continue
        if iid in got and {k: got[iid][k] for k in got[iid] if k != "reason"} != {k: v[k] for k in v if k != "reason"}:
            conflicted.add(iid)
        got.setdefault(iid, v)
    for iid in conflicted:
        notes.append(f"conflicting verdicts for id {iid!r}: asked again")
        got.pop(iid)
    return {"items": got, "outputs": outputs, "notes": notes}


def majority_value(values: Sequence[int]) -> int:
    """The majority verdict of several samples on a value scale: the most frequent value (the mode); among
    equally frequent values, the one nearest the samples' median; if two are equally near, the smaller.

    A mean rounded to an integer would invent values no sample gave (1 and 5 → 3) and Python's banker's
    rounding sends 2.5 to 2; the mode is what "majority" says."""
    counts = Counter(values)
    top = max(counts.values())
    tied = sorted(v for v, n in counts.items() if n == top)
    middle = statistics.median(values)
    return min(tied, key=lambda v: (abs(v - middle), v))


def mean_token_confidence(votes: Sequence[Mapping[str, Any]]) -> float | None:
    """The samples' token confidences averaged (over the samples that have one; None when none has): how
    sure the judge was of its verdicts, sample by sample, beside how often the samples agreed."""
    got = [float(v["token_confidence"]) for v in votes if v.get("token_confidence") is not None]
    return sum(got) / len(got) if got else None


def combine_votes(spec: Spec, votes: list[dict[str, Any]]) -> dict[str, Any]:
    """Several samples' verdicts on one item as one: the majority with its agreement rate (and the mean
    value on a value scale) and the mean token confidence; every sample is kept."""
    token = mean_token_confidence(votes)
    if isinstance(spec.scale, CategoricalScale):
        counts = Counter(v["label"] for v in votes)
        order = {name: i for i, name in enumerate(spec.scale.names)}
        label, top = min(counts.items(), key=lambda kv: (-kv[1], order[kv[0]]))
        winner = next(v for v in votes if v["label"] == label)
        return {**winner, "confidence": top / len(votes), "token_confidence": token, "samples": votes}
    values = [int(v["value"]) for v in votes]
    chosen = majority_value(values)
    winner = next(v for v in votes if int(v["value"]) == chosen)
    agree = sum(1 for x in values if x == chosen) / len(values)
    mean = sum(values) / len(values)
    return {**winner, "value": chosen, "mean": mean, "confidence": agree, "token_confidence": token, "samples": votes}


def combine_answers(spec: Spec, answers: Sequence[Answer]) -> Answer:
    """Independent answers to one request combined item by item (the first answer's outputs)."""
    combined: dict[str, dict[str, Any]] = {}
    for iid in {k for a in answers for k in a["items"]}:
        votes = [a["items"][iid] for a in answers if iid in a["items"]]
        combined[iid] = combine_votes(spec, votes)
    return {
        "items": combined,
        "outputs": answers[0]["outputs"],
        "notes": [n for a in answers for n in a["notes"]],
    }


def to_verdict(spec: Spec, iid: str, v: Mapping[str, Any]) -> ItemVerdict:
    """A checked verdict as an :class:`ItemVerdict` with its score (the value, or the label's score)."""
    score: float | None
    if isinstance(spec.scale, CategoricalScale):
        scores = spec.scale.scores()
        score = scores.get(v["label"]) if scores else None
        value = None
    else:
        value = int(v["value"])
        score = float(v.get("mean", value))
    return ItemVerdict(
        item_id=iid,
        label=v.get("label"),
        value=value,
        score=score,
        reason=v.get("reason"),
        confidence=v.get("confidence"),
        token_confidence=v.get("token_confidence"),
        samples=v.get("samples"),
    )
