"""Compile a spec into a LangChain judge whose output is a structured, checked verdict.

The prompt is built from the spec (description, instructions, steps, every range or label described, the
inputs); the chat model is bound to a pydantic verdict model generated from the scale, with the reason
before the verdict so the model reasons first. A "many" spec judges all chunks / triples of a record in one
call and must return one verdict per item id: the answer is checked item by item and whatever is missing or
invalid is asked again, never dropped. Structured output uses JSON schema, else tool calling, else JSON mode
with the schema in the prompt, falling back automatically when a server rejects a method.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import threading
import time
import warnings
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableLambda
from langchain_core.utils.function_calling import convert_to_openai_tool
from pydantic import BaseModel, ValidationError

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.errors import SpecError

# The verdict schema lives in greval.judge.verdict (``greval spec validate`` checks it without LangChain).
from greval.judge.verdict import _first_error as _first_error
from greval.judge.verdict import _output_fields as _output_fields
from greval.judge.verdict import _verdict_fields as _verdict_fields
from greval.judge.verdict import check_examples, outputs_model
from greval.judge.verdict import verdict_models as verdict_models
from greval.llm.call import ModelCall
from greval.llm.config import register_model_secrets
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.retry import (
    CUT_OFF_HINT,
    CutOff,
    ErrorKind,
    Filtered,
    JudgeError,
    JudgeUnavailable,
    RetryPolicy,
    UnsupportedMethod,
    call_with_retries,
    classify,
    describe_error,
    finish_reason,
    redact,
)
from greval.spec import BaseSpec, CategoricalScale, Spec, ValueScale

# The result models live in greval.types, which reading a store imports without LangChain; re-exported here.
from greval.types import MISSING_INPUT as MISSING_INPUT
from greval.types import CallLog as CallLog
from greval.types import ItemVerdict as ItemVerdict
from greval.types import JudgeResult as JudgeResult
from greval.types import not_applicable as not_applicable

# greval handles a refused structured-output method itself (it falls back and says so in the call log).
warnings.filterwarnings("ignore", message="This model does not support OpenAI's structured output")

Method = Literal["json_schema", "function_calling", "json_mode"]
METHODS: tuple[Method, ...] = ("json_schema", "function_calling", "json_mode")
TOOL_NAME = "submit_verdict"


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


def missing_inputs(spec: BaseSpec, data: Mapping[str, Any]) -> list[str]:
    """Required inputs the record lacks (absent, empty text or empty list)."""
    return [n for n in spec.required_inputs() if data.get(n) in (None, "", [])]


def begin(
    spec: BaseSpec, record: Record | Mapping[str, Any], deps: Mapping[str, JudgeResult] | None
) -> tuple[Record, JudgeResult, dict[str, JudgeResult] | None]:
    """What every evaluator checks before working: the record, an empty result, and the dependency verdicts
    to show. ``None`` for the latter means the judgement cannot run and ``result.error`` says why (a required
    input is absent — then it is skipped, see :func:`not_applicable` — or a dependency is missing or failed)."""
    rec = record if isinstance(record, Record) else Record.from_mapping(record)
    result = JudgeResult(spec=spec.name, spec_hash=spec.hash)
    missing = missing_inputs(spec, rec.data)
    if missing:
        result.error = f"{MISSING_INPUT}: " + ", ".join(missing)
        return rec, result, None
    given = dict(deps or {})
    for name in spec.depends_on:
        dep = given.get(name)
        if dep is None:
            result.error = f"needs the verdicts of {name!r}, which were not given"
            return rec, result, None
        if not dep.ok and not not_applicable(dep):
            result.error = f"depends on {name!r}, which failed for this record"
            return rec, result, None
    return rec, result, {k: given[k] for k in spec.depends_on if not not_applicable(given[k])}


class ParseError(JudgeError):
    """The model's answer is not JSON or does not fit the verdict schema."""

    kind = ErrorKind.UNPARSABLE


# -------------------------------------------------------------------------------------------- prompt
_TITLES = {
    "question": "Question",
    "expected_answer": "Expected answer",
    "answer": "Answer",
    "chunks": "Retrieved chunks",
    "triples": "Knowledge-graph triples",
    "source": "Source text",
}


def _title(name: str) -> str:
    return _TITLES.get(name, name.replace("_", " ").capitalize())


def describe_scale(spec: Spec) -> str:
    """The scale in words, every range or label with its description (shared with Argilla guidelines)."""
    if isinstance(spec.scale, ValueScale):
        s = spec.scale
        lines = [f"Give an integer value from {s.min} to {s.max}:"]
        lines += [f"- {r.text}: {r.description}" for r in s.ranges]
    else:
        lines = ["Choose exactly one label:"]
        lines += [f'- "{lab.name}": {lab.description}' for lab in spec.scale.labels]
        if spec.scale.ordered:
            lines.append("The labels are listed from best to worst.")
    return "\n".join(lines)


def system_prompt(spec: Spec, method: Method, schema: Mapping[str, Any]) -> str:
    """The judge's instructions; JSON mode also gets the answer's JSON schema."""
    noun = {"chunks": "retrieved chunk", "triples": "knowledge-graph triple"}.get(spec.each or "", "")
    parts = [
        "You are a careful, impartial evaluator of a retrieval-augmented question-answering system.",
        f"# Metric: {spec.name}\n{spec.description.strip()}",
    ]
    if spec.instructions:
        parts.append(f"# Instructions\n{spec.instructions.strip()}")
    parts.append("# Evaluation steps\n" + "\n".join(f"{i}. {s.strip()}" for i, s in enumerate(spec.steps, 1)))
    parts.append("# Scale\n" + describe_scale(spec))
    word = "label" if isinstance(spec.scale, CategoricalScale) else "value"
    if noun:
        out = (
            f"# Your answer\nJudge each {noun} separately. Return `verdicts`: one entry for every id listed "
            f"under 'Item ids', each id exactly once and no other ids, each with `id`, then `reason` (your "
            f"reasoning, written first), then `{word}`."
        )
    else:
        out = f"# Your answer\nWrite `reason` first (your reasoning, following the steps), then `{word}`."
    for name, o in spec.outputs.items():
        out += f"\nAlso fill `{name}` ({o.type}): {o.description}"
    parts.append(out)
    if method == "json_mode":
        parts.append(
            "Answer with one JSON object and nothing else, valid against this JSON schema:\n```json\n"
            + json.dumps(schema, ensure_ascii=False)
            + "\n```"
        )
    return "\n\n".join(parts)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def render_item(field: str, item: Mapping[str, Any]) -> str:
    if field == "triples":
        return f"[{item['id']}] ({item['subject']}; {item['predicate']}; {item['object']})"
    return f"[{item['id']}] {item.get('text', '')}"


def render_inputs(
    spec: Spec,
    data: Mapping[str, Any],
    deps: Mapping[str, JudgeResult] | None = None,
    item_ids: Sequence[str] | None = None,
) -> str:
    """The record as the judge sees it: declared inputs under headings, items with their ids."""
    parts: list[str] = []
    for name, inp in spec.inputs.items():
        value = data.get(name)
        if value is None or value == [] or value == "":
            continue
        head = f"## {_title(name)}" + (f" ({inp.description})" if inp.description else "")
        if name in ("chunks", "triples") and isinstance(value, list):
            items = value
            if name == spec.each and item_ids is not None:
                wanted = set(item_ids)
                items = [it for it in value if it["id"] in wanted]
            sep = "\n\n" if name == "chunks" else "\n"
            parts.append(head + "\n" + sep.join(render_item(name, it) for it in items))
        else:
            parts.append(head + "\n" + _text(value))
    for dep_name, res in (deps or {}).items():
        lines = [f"## Verdicts of the metric '{dep_name}'"]
        for v in res.verdicts:
            if v.status != "ok":
                continue
            verdict = v.label if v.label is not None else v.value
            who = f"[{v.item_id}] " if v.item_id else ""
            lines.append(f"- {who}{verdict}: {v.reason or ''}".rstrip())
        for key, val in res.outputs.items():
            lines.append(f"- {key}: {_text(val)}")
        parts.append("\n".join(lines))
    if spec.each is not None and item_ids is not None:
        parts.append("Item ids: " + ", ".join(item_ids))
    return "\n\n".join(parts)


# --------------------------------------------------------------------------------------------- parse
_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S)


def json_payload(msg: AIMessage, method: str) -> tuple[dict[str, Any], str]:
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


def _known(payload: Any, model: type[BaseModel]) -> Any:
    """Drop keys the model does not know: chatty models add fields; the schema forbids them, we forgive."""
    if not isinstance(payload, dict):
        return payload
    return {k: v for k, v in payload.items() if k in model.model_fields}


# --------------------------------------------------------------------------------------------- judge
class Judge:
    """One spec bound to one chat model. Shared by every call of a run (one HTTP client, one limiter)."""

    def __init__(
        self,
        spec: Spec,
        model: BaseChatModel,
        *,
        method: Method | Literal["auto"] = "auto",
        samples: int = 1,
        policy: RetryPolicy | None = None,
        limiter: AdaptiveLimiter | None = None,
        direct: bool = True,
    ) -> None:
        self.spec = spec
        self.direct = direct
        self.model = model
        self.samples = samples
        self.policy = policy or RetryPolicy()
        self.limiter = limiter
        self.answer_model, self.item_model = verdict_models(spec)
        self.schema = self.answer_model.model_json_schema()
        self._outputs_model = outputs_model(spec, self.answer_model)
        self.methods: list[Method] = list(METHODS) if method == "auto" else [method]
        self._method_index = 0
        self._bound: dict[str, Runnable[Any, Any]] = {}
        self._callers: dict[str, ModelCall] = {}
        self._systems: dict[str, SystemMessage] = {}
        self._examples = self._example_messages()
        # Not an asyncio.Lock: one judge serves any event loop (a sync call runs in greval's background loop,
        # an ``await`` in the caller's), and nothing is awaited while it is held.
        self._lock = threading.Lock()
        register_model_secrets(model)

    # --------------------------------------------------------------------------- construction
    def _example_messages(self) -> list[BaseMessage]:
        check_examples(self.spec, self.answer_model)
        msgs: list[BaseMessage] = []
        for ex in self.spec.examples:
            ids = [it["id"] for it in ex.inputs.get(self.spec.each, [])] if self.spec.each else None
            msgs.append(HumanMessage(render_inputs(self.spec, ex.inputs, None, ids)))
            msgs.append(AIMessage(json.dumps(ex.output, ensure_ascii=False)))
        return msgs

    @property
    def method(self) -> Method:
        return self.methods[min(self._method_index, len(self.methods) - 1)]

    def bound(self, method: Method) -> Runnable[Any, Any]:
        """The chat model bound for one structured-output method (built once, then reused)."""
        if method not in self._bound:
            tool = convert_to_openai_tool(self.answer_model)
            tool["function"]["name"] = TOOL_NAME
            fmt: dict[str, Any] = {"type": "json_object"}
            if method == "json_schema":
                fmt = {
                    "type": "json_schema",
                    "json_schema": {
                        "name": self.answer_model.__name__,
                        "schema": self.schema,
                        "strict": True,
                    },
                }
            if method == "function_calling":
                self._bound[method] = self.model.bind_tools([tool], tool_choice=TOOL_NAME)
            elif _is_openai(self.model):
                # Same request on the wire, but through extra_body: a `response_format` kwarg makes
                # langchain-openai take the SDK's `.parse()` path, which re-validates the whole schema and
                # doubled the client CPU per call in scripts/bench_run.py. greval parses the answer itself.
                self._bound[method] = self.model.bind(extra_body={"response_format": fmt})
            else:
                self._bound[method] = self.model.bind(response_format=fmt)
        return self._bound[method]

    def caller(self, method: Method) -> ModelCall:
        """How one method's bound model is called (directly when nothing listens; see greval.llm.call)."""
        if method not in self._callers:
            self._callers[method] = ModelCall(self.bound(method), direct=self.direct)
        return self._callers[method]

    def messages(
        self,
        method: Method,
        data: Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None,
        item_ids: Sequence[str] | None,
    ) -> list[BaseMessage]:
        human = HumanMessage(render_inputs(self.spec, data, deps, item_ids))
        return [self.system_message(method), *self._examples, human]

    def _system(self, method: Method) -> str:
        return system_prompt(self.spec, method, self.schema)

    def system_message(self, method: Method) -> SystemMessage:
        """The system prompt for one method, built once (subclasses change ``_system``)."""
        if method not in self._systems:
            self._systems[method] = SystemMessage(self._system(method))
        return self._systems[method]

    # --------------------------------------------------------------------------------- calling
    def _fall_back(self, failed: Method) -> bool:
        with self._lock:
            if self.method == failed and self._method_index < len(self.methods) - 1:
                self._method_index += 1
            return self.method != failed

    async def _call(
        self,
        data: Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None,
        item_ids: Sequence[str] | None,
        log: list[CallLog],
    ) -> dict[str, Any]:
        """One request, with transport retries, method fallback and re-asking on unparsable answers."""
        last_error = "no answer"
        stopped: str | None = None
        for _ in range(self.policy.parse_attempts):
            while True:
                method = self.method
                attempts = 0

                def count() -> None:
                    nonlocal attempts
                    attempts += 1

                messages = self.messages(method, data, deps, item_ids)
                caller = self.caller(method)
                start = time.perf_counter()

                async def send(c: ModelCall = caller, m: list[BaseMessage] = messages) -> Any:
                    return await c(m)

                try:
                    msg = await call_with_retries(send, self.policy, self.limiter, count)
                except Exception as exc:
                    # Every request is logged, failed ones too (with their attempts and the redacted error).
                    log.append(
                        CallLog(
                            method=method,
                            items=list(item_ids or []),
                            attempts=attempts,
                            latency_ms=(time.perf_counter() - start) * 1000,
                            error=describe_error(exc),
                        )
                    )
                    if not isinstance(exc, UnsupportedMethod):
                        raise
                    if self._fall_back(method):
                        continue
                    # No structured-output method left: every call of this judge would fail the same way.
                    tried = ", ".join(self.methods)
                    raise JudgeUnavailable(
                        f"the judge model accepts none of the structured-output methods ({tried}) — {exc}",
                        ErrorKind.UNSUPPORTED,
                    ) from None
                break
            usage = getattr(msg, "usage_metadata", None) or {}
            entry = CallLog(
                method=method,
                items=list(item_ids or []),
                latency_ms=(time.perf_counter() - start) * 1000,
                tokens_in=int(usage.get("input_tokens", 0) or 0),
                tokens_out=int(usage.get("output_tokens", 0) or 0),
                attempts=attempts,
            )
            log.append(entry)
            stopped = finish_reason(msg)
            if stopped == "content_filter":  # withheld, not garbled: asking again gets the same refusal
                filtered = Filtered("the provider's content filter withheld the answer (finish_reason=content_filter)")
                entry.error = describe_error(filtered)
                raise filtered
            try:
                payload, entry.raw = json_payload(msg, method)
                return self._validate(payload, item_ids)
            except ParseError as exc:
                last_error = redact(str(exc))
                entry.error = describe_error(exc)
                if not entry.raw:
                    entry.raw = str(msg.content)[:2000] if msg.content else json.dumps(msg.tool_calls)[:2000]
        tries = self.policy.parse_attempts
        if stopped == "length":  # say why: the answer did not fit max_tokens, it was not garbled
            raise CutOff(
                f"the answer was cut off at the token limit in {tries} tries (finish_reason=length); "
                f"{CUT_OFF_HINT}. Last: {last_error}"
            )
        raise ParseError(f"unusable answer after {tries} tries: {last_error}")

    def _validate(self, payload: dict[str, Any], item_ids: Sequence[str] | None) -> dict[str, Any]:
        """Check an answer. Many-judges: keep each valid item, report the rest as missing (asked again)."""
        if self.spec.each is None:
            try:
                one = self.answer_model.model_validate(_known(payload, self.answer_model)).model_dump()
            except ValidationError as exc:
                raise ParseError(_first_error(exc)) from None
            outputs = {k: one.pop(k) for k in self.spec.outputs}
            return {"items": {"": one}, "outputs": outputs, "notes": []}
        outputs = {}
        if self._outputs_model is not None:
            try:
                outputs = self._outputs_model.model_validate(_known(payload, self._outputs_model)).model_dump()
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
                v = self.item_model.model_validate(_known(entry, self.item_model)).model_dump()
            except ValidationError as exc:
                notes.append(f"invalid item verdict ({_first_error(exc)})")
                continue
            iid = v.pop("id")
            if iid not in wanted:
                notes.append(f"ignored verdict for unknown id {iid!r}")
                continue
            if iid in got and {k: got[iid][k] for k in got[iid] if k != "reason"} != {
                k: v[k] for k in v if k != "reason"
            }:
                conflicted.add(iid)
            got.setdefault(iid, v)
        for iid in conflicted:
            notes.append(f"conflicting verdicts for id {iid!r}: asked again")
            got.pop(iid)
        return {"items": got, "outputs": outputs, "notes": notes}

    async def _sampled(
        self,
        data: Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None,
        item_ids: Sequence[str] | None,
        log: list[CallLog],
    ) -> dict[str, Any]:
        """``samples`` independent answers combined: majority label (or mean value) with its agreement rate."""
        if self.samples == 1:
            return await self._call(data, deps, item_ids, log)
        answers = await asyncio.gather(
            *(self._call(data, deps, item_ids, log) for _ in range(self.samples)), return_exceptions=True
        )
        good = [a for a in answers if isinstance(a, dict)]
        if not good:
            first = next(a for a in answers if isinstance(a, BaseException))
            raise first
        combined: dict[str, dict[str, Any]] = {}
        for iid in {k for a in good for k in a["items"]}:
            votes = [a["items"][iid] for a in good if iid in a["items"]]
            combined[iid] = self._combine(votes)
        return {
            "items": combined,
            "outputs": good[0]["outputs"],
            "notes": [n for a in good for n in a["notes"]],
        }

    def _combine(self, votes: list[dict[str, Any]]) -> dict[str, Any]:
        if isinstance(self.spec.scale, CategoricalScale):
            counts = Counter(v["label"] for v in votes)
            order = {name: i for i, name in enumerate(self.spec.scale.names)}
            label, top = min(counts.items(), key=lambda kv: (-kv[1], order[kv[0]]))
            winner = next(v for v in votes if v["label"] == label)
            return {**winner, "confidence": top / len(votes), "samples": votes}
        values = [int(v["value"]) for v in votes]
        chosen = majority_value(values)
        winner = next(v for v in votes if int(v["value"]) == chosen)
        agree = sum(1 for x in values if x == chosen) / len(values)
        return {**winner, "value": chosen, "mean": sum(values) / len(values), "confidence": agree, "samples": votes}

    # ------------------------------------------------------------------------------ the judgement
    def _verdict(self, iid: str, v: dict[str, Any]) -> ItemVerdict:
        score: float | None
        if isinstance(self.spec.scale, CategoricalScale):
            scores = self.spec.scale.scores()
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
            samples=v.get("samples"),
        )

    async def ajudge(
        self,
        record: Record | Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None = None,
        only_items: Sequence[str] | None = None,
    ) -> JudgeResult:
        """Judge one record. Never raises for model trouble: failures come back as explicit error verdicts.

        ``only_items`` restricts a many-judge to some item ids (resuming a partly judged record).
        """
        rec, result, deps = begin(self.spec, record, deps)
        if deps is None:
            return result
        if self.spec.each is None:
            try:
                answer = await self._sampled(rec.data, deps, None, result.calls)
            except (SpecError, JudgeUnavailable):
                raise  # the spec or the judge itself is unusable: the run stops
            except Exception as exc:
                # About this judgement only (its prompt is too long, the answer is unusable, the server kept
                # failing …): an error verdict whose text starts with the kind, and the run goes on.
                result.verdicts = [ItemVerdict(status="error", error=describe_error(exc))]
                return result
            result.outputs = answer["outputs"]
            result.verdicts = [self._verdict("", answer["items"][""])]
            return result
        ids = [it["id"] for it in rec.items(self.spec.each)]
        pending = [i for i in ids if only_items is None or i in set(only_items)]
        got: dict[str, ItemVerdict] = {}
        kind, last_error = ErrorKind.INCOMPLETE, ""
        for _ in range(1 + self.policy.reask_rounds):
            if not pending:
                break
            try:
                answer = await self._sampled(rec.data, deps, pending, result.calls)
            except (SpecError, JudgeUnavailable):
                raise
            except Exception as exc:
                kind, last_error = classify(exc).kind, describe_error(exc).split(": ", 1)[-1]
                break
            if answer["outputs"] and not result.outputs:
                result.outputs = answer["outputs"]
            for iid, v in answer["items"].items():
                got[iid] = self._verdict(iid, v)
            pending = [i for i in pending if i not in got]
            last_error = redact("; ".join(answer["notes"][:3])) or "the judge left it out"
        for iid in pending:
            got[iid] = ItemVerdict(
                item_id=iid,
                status="error",
                error=f"{kind.value}: no verdict after {len(result.calls)} call(s): {last_error}",
            )
        result.verdicts = [got[i] for i in ids if i in got]
        return result

    # --------------------------------------------------------------------------- as a runnable
    async def _ainvoke(self, inp: Any) -> JudgeResult:
        record, deps = _unpack(inp)
        return await self.ajudge(record, deps)

    def _invoke(self, inp: Any) -> JudgeResult:
        return run_sync(self._ainvoke(inp))

    @property
    def runnable(self) -> Runnable[Any, JudgeResult]:
        return RunnableLambda(self._invoke, afunc=self._ainvoke, name=f"greval:{self.spec.name}")


def _is_openai(model: BaseChatModel) -> bool:
    try:
        from langchain_openai.chat_models.base import BaseChatOpenAI
    except ImportError:  # pragma: no cover - langchain-openai is a dependency
        return False
    return isinstance(model, BaseChatOpenAI) and not model.extra_body


def _unpack(inp: Any) -> tuple[Record | Mapping[str, Any], Mapping[str, JudgeResult] | None]:
    """Runnable input: a Record, a mapping of record fields, or ``{"record": ..., "depends_on": {...}}``."""
    if isinstance(inp, Record):
        return inp, None
    if isinstance(inp, Mapping) and "record" in inp:
        deps = {
            k: (v if isinstance(v, JudgeResult) else JudgeResult.model_validate(v))
            for k, v in (inp.get("depends_on") or {}).items()
        }
        return inp["record"], deps
    if isinstance(inp, Mapping):
        return inp, None
    raise TypeError("judge input must be a Record, a mapping of record fields, or {record, depends_on}")


def compile(
    spec: Spec,
    model: BaseChatModel,
    *,
    method: Method | Literal["auto"] = "auto",
    samples: int = 1,
    policy: RetryPolicy | None = None,
    limiter: AdaptiveLimiter | None = None,
    direct: bool = True,
) -> Runnable[Any, JudgeResult]:
    """Compile a spec into a LangChain runnable: record in, checked :class:`JudgeResult` out.

    ``direct=False`` sends every model call through ``ainvoke`` even when no callback, tracer or cache
    is attached (see :mod:`greval.llm.call`; the verdicts are the same, the client CPU is higher).
    """
    judge = Judge(spec, model, method=method, samples=samples, policy=policy, limiter=limiter, direct=direct)
    return judge.runnable
