"""The LLM judge: one spec bound to one chat model, called with retries, fallbacks and re-asks.

The prompt comes from :mod:`greval.judge.prompt`, the answer is checked by :mod:`greval.judge.parse` against
the verdict models of :mod:`greval.spec.verdict` (the reason before the verdict, so the model reasons first).
A "many" spec judges all chunks / triples of a record in one call and must return one verdict per item id:
whatever is missing or invalid is asked again, never dropped. Structured output uses JSON schema, else tool
calling, else JSON mode with the schema in the prompt, falling back automatically when a server rejects a
method. Every failure ends as error verdicts through one ladder (:func:`failure_of`, :func:`error_verdicts`).

With ``logprobs`` (a :class:`LogprobRequest`, or the number of alternatives per token) an OpenAI-compatible
judge is asked for token log-probabilities, and each verdict gets its ``token_confidence``
(:mod:`greval.judge.logprobs`). A provider that refuses the parameter (a 400 naming ``logprobs``) is asked
without it from then on, for the rest of the run; answers without log-probabilities (a tool call's arguments
have none) leave the confidence empty. Either is said once, in :meth:`LogprobRequest.notes`.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeGuard, Unpack

from greval.dataset.records import Record
from greval.judge.logprobs import token_confidences
from greval.judge.options import CallOptions, Options
from greval.judge.outcome import Failed, begin, error_verdicts, failure_of
from greval.judge.parse import (
    Answer,
    ParseError,
    combine_answers,
    json_payload,
    to_verdict,
    validate_items,
    validate_record,
)
from greval.judge.prompt import capped_reasons, example_messages, render_inputs, system_prompt, wire_schema
from greval.llm.config import register_model_secrets
from greval.llm.openai_chat import Caller, ChatReply, Message, OpenAICall, OpenAIChat
from greval.llm.retry import (
    CUT_OFF_HINT,
    CallFailed,
    CutOff,
    Filtered,
    JudgeUnavailable,
    UnsupportedMethod,
    call_with_retries,
    describe_error,
    finish_reason,
    redact,
)
from greval.spec import CategoricalScale, Spec
from greval.spec.verdict import check_examples, outputs_model, verdict_models
from greval.types import RECORD_ITEM, CallLog, ErrorKind, ItemVerdict, JudgeResult, Method

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel
    from langchain_core.runnables import Runnable
    from langchain_openai.chat_models.base import BaseChatOpenAI

    from greval.llm.openai_chat import ChatModel

# greval handles a refused structured-output method itself (it falls back and says so in the call log).
warnings.filterwarnings("ignore", message="This model does not support OpenAI's structured output")

METHODS: tuple[Method, ...] = ("json_schema", "function_calling", "json_mode")
TOOL_NAME = "submit_verdict"


# ------------------------------------------------------------------------------------------ logprobs
def logprobs_refused(exc: BaseException) -> bool:
    """Whether a failed call is the provider refusing the ``logprobs`` parameter (a 400 that names it)."""
    return isinstance(exc, CallFailed) and exc.status == 400 and "logprobs" in str(exc).lower()


# --------------------------------------------------------------------------------------------- prompt
class Prompt:
    """A judge spec's request apart from any model: the system message for a structured-output method, the
    few-shot turns (together the static part, the same bytes for every record) and a record's message. What
    :class:`Judge` sends, and what the record explorer shows: one definition of the messages."""

    def __init__(self, spec: Spec) -> None:
        self.spec = spec
        self.answer_model, self.item_model = verdict_models(spec)
        self.schema = wire_schema(self.answer_model)  # what the provider is sent (the prompt says the rest)
        self.examples = example_messages(spec)

    def system_text(self, method: Method) -> str:
        return system_prompt(self.spec, method, self.schema)

    def static(self, method: Method) -> list[Message]:
        """What every call of one method sends before the record: the system prompt and the few-shot turns."""
        return [{"role": "system", "content": self.system_text(method)}, *self.examples]

    def record_message(
        self, data: Mapping[str, Any], deps: Mapping[str, JudgeResult] | None, item_ids: Sequence[str] | None
    ) -> Message:
        """The record's message of a call (``item_ids``: the items a per-item judge asks about in that call)."""
        return {"role": "user", "content": render_inputs(self.spec, data, deps, item_ids)}


# --------------------------------------------------------------------------------------------- judge
class Judge:
    """One spec bound to one chat model. Shared by every call of a run (one HTTP client, one limiter)."""

    def __init__(
        self, spec: Spec, model: ChatModel, calls: CallOptions | None = None, **options: Unpack[Options]
    ) -> None:
        """``model``: a LangChain chat model, or the OpenAI-compatible judge greval builds (an
        :class:`~greval.llm.openai_chat.OpenAIChat`: no LangChain until a call needs it). ``calls``: how the model
        is called (a run's one bundle); ``options``: the same settings as keywords, over ``calls``
        (:meth:`CallOptions.of`)."""
        self.calls = calls = CallOptions.of(calls, **options)
        self.spec = spec
        self.spec_hash = spec.hash  # the version the verdict models below are built from
        self.direct = calls.direct
        self.model = model
        self.samples = calls.samples
        self.policy = calls.policy
        self.limiter = calls.limiter
        self.prompt = Prompt(spec)
        self.answer_model, self.item_model = self.prompt.answer_model, self.prompt.item_model
        self.schema = self.prompt.schema
        self._outputs_model = outputs_model(spec, self.answer_model)
        self.methods: list[Method] = list(METHODS) if calls.method == "auto" else [calls.method]
        self._method_index = 0
        self._bound: dict[str, Runnable[Any, Any]] = {}
        self._callers: dict[str, Caller] = {}
        self._systems: dict[str, Message] = {}
        check_examples(spec, self.answer_model)
        self._examples = self.prompt.examples
        # Not an asyncio.Lock: one judge serves any event loop (a sync call runs in greval's background loop,
        # an ``await`` in the caller's), and nothing is awaited while it is held.
        self._lock = threading.Lock()
        self.logprobs = calls.logprobs
        if self.logprobs is not None and not _openai_compatible(model):
            self.logprobs.refuse(f"{type(model).__name__} is not an OpenAI-compatible chat model")
        register_model_secrets(model)

    # --------------------------------------------------------------------------- construction
    @property
    def method(self) -> Method:
        return self.methods[min(self._method_index, len(self.methods) - 1)]

    @property
    def asks_logprobs(self) -> bool:
        """Whether calls ask for token log-probabilities now (not once the provider refused them)."""
        return self.logprobs is not None and self.logprobs.active

    @property
    def chat_model(self) -> BaseChatModel:
        """The LangChain chat model (for greval's own OpenAI-compatible judge, its ``ChatOpenAI``: built now)."""
        return self.model.langchain() if isinstance(self.model, OpenAIChat) else self.model

    def _key(self, method: Method) -> str:
        return f"{method}+logprobs" if self.asks_logprobs else method

    def _logprob_kwargs(self) -> dict[str, Any]:
        if self.logprobs is None or not self.asks_logprobs:
            return {}
        return {"logprobs": True} | ({"top_logprobs": self.logprobs.top} if self.logprobs.top else {})

    def _response_format(self, method: Method) -> dict[str, Any]:
        if method != "json_schema":
            return {"type": "json_object"}
        chars = self.model.reason_chars if isinstance(self.model, OpenAIChat) else None
        sent = capped_reasons(self.schema, chars) if chars else self.schema  # the prompt shows the schema uncapped
        schema = {"name": self.answer_model.__name__, "schema": sent, "strict": True}
        return {"type": "json_schema", "json_schema": schema}

    def _openai_kwargs(self, method: Method) -> dict[str, Any]:
        """What an OpenAI model is bound with for a JSON method. The same request on the wire as a
        ``response_format`` kwarg, but through extra_body: that kwarg makes langchain-openai take the SDK's
        `.parse()` path, which re-validates the whole schema and doubled the client CPU per call in
        scripts/bench_run.py. greval parses the answer itself."""
        return {"extra_body": {"response_format": self._response_format(method)}, **self._logprob_kwargs()}

    def bound(self, method: Method) -> Runnable[Any, Any]:
        """The LangChain chat model bound for one structured-output method (built once, then reused; once more
        without log-probabilities when the provider refuses them)."""
        key = self._key(method)
        if key not in self._bound:
            chat = self.chat_model
            if method == "function_calling":
                tool = {"type": "function", "function": {"name": TOOL_NAME, "parameters": self.schema}}
                self._bound[key] = chat.bind_tools([tool], tool_choice=TOOL_NAME, **self._logprob_kwargs())
            elif _is_openai(chat):
                self._bound[key] = chat.bind(**self._openai_kwargs(method))
            else:
                self._bound[key] = chat.bind(response_format=self._response_format(method), **self._logprob_kwargs())
        return self._bound[key]

    def caller(self, method: Method) -> Caller:
        """How one method's model is called: greval's own OpenAI-compatible judge without LangChain for a JSON
        method (greval.llm.openai_chat), a LangChain model directly when nothing listens (greval.llm.call)."""
        key = self._key(method)
        if key not in self._callers:
            if isinstance(self.model, OpenAIChat) and method != "function_calling":
                self._callers[key] = OpenAICall(self.model, self._openai_kwargs(method), direct=self.direct)
            else:
                from greval.llm.call import ModelCall

                self._callers[key] = ModelCall(self.bound(method), direct=self.direct)
        return self._callers[key]

    def messages(
        self,
        method: Method,
        data: Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None,
        item_ids: Sequence[str] | None,
    ) -> list[Message]:
        """The request for one call (subclasses word their own)."""
        return [self.system_message(method), *self._examples, self.prompt.record_message(data, deps, item_ids)]

    def system_text(self, method: Method) -> str:
        """The system prompt's text for one method (subclasses word their own)."""
        return self.prompt.system_text(method)

    def system_message(self, method: Method) -> Message:
        """The system prompt for one method, built once (subclasses change :meth:`system_text`)."""
        if method not in self._systems:
            self._systems[method] = {"role": "system", "content": self.system_text(method)}
        return self._systems[method]

    # --------------------------------------------------------------------------------- calling
    def _fall_back(self, failed: Method) -> bool:
        with self._lock:
            if self.method == failed and self._method_index < len(self.methods) - 1:
                self._method_index += 1
            return self.method != failed

    def _may_retry(self, exc: Exception, method: Method, asked_logprobs: bool) -> bool:
        """Whether a failed request is sent again: without log-probabilities when the provider refused them, with
        the next structured-output method when it refused this one. Raises when no method is left."""
        if self.logprobs is not None and asked_logprobs and logprobs_refused(exc):
            # Refused for every judge of the run (calls already in flight hear it too): ask without.
            self.logprobs.refuse(redact(str(exc)))
            return True
        if not isinstance(exc, UnsupportedMethod):
            return False
        if self._fall_back(method):
            return True
        # No structured-output method left: every call of this judge would fail the same way.
        tried = ", ".join(self.methods)
        raise JudgeUnavailable(
            f"the judge model accepts none of the structured-output methods ({tried}) — {exc}",
            ErrorKind.UNSUPPORTED,
        ) from None

    async def _send(
        self,
        data: Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None,
        item_ids: Sequence[str] | None,
        log: list[CallLog],
    ) -> tuple[ChatReply, CallLog, Method, bool]:
        """One answer from the model, with transport retries and method fallback: the reply, its entry in
        ``log`` (every request is logged, failed ones too), the method it was asked with and whether it asked
        for log-probabilities."""
        while True:
            method = self.method
            attempts = 0

            def count() -> None:
                nonlocal attempts
                attempts += 1

            messages = self.messages(method, data, deps, item_ids)
            asked_logprobs = self.asks_logprobs
            caller = self.caller(method)
            start = time.perf_counter()

            async def send(c: Caller = caller, m: list[Message] = messages) -> Any:
                return await c(m)

            try:
                msg: ChatReply = await call_with_retries(send, self.policy, self.limiter, count)
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
                if self._may_retry(exc, method, asked_logprobs):
                    continue
                raise
            usage = getattr(msg, "usage_metadata", None) or {}
            entry = CallLog(
                method=method,
                items=list(item_ids or []),
                latency_ms=(time.perf_counter() - start) * 1000,
                tokens_in=int(usage.get("input_tokens", 0) or 0),
                tokens_out=int(usage.get("output_tokens", 0) or 0),
                tokens_cached=int((usage.get("input_token_details") or {}).get("cache_read", 0) or 0),
                attempts=attempts,
            )
            log.append(entry)
            return msg, entry, method, asked_logprobs

    async def ask(
        self,
        data: Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None,
        item_ids: Sequence[str] | None,
        log: list[CallLog],
    ) -> Answer:
        """One request, with transport retries, method fallback and re-asking on unparsable answers."""
        last_error = "no answer"
        stopped: str | None = None
        tries = 0
        while tries < self.policy.parse_attempts:
            tries += 1
            msg, entry, method, asked_logprobs = await self._send(data, deps, item_ids, log)
            stopped = finish_reason(msg)
            if stopped == "content_filter":  # withheld, not garbled: asking again gets the same refusal
                filtered = Filtered("the provider's content filter withheld the answer (finish_reason=content_filter)")
                entry.error = describe_error(filtered)
                raise filtered
            try:
                payload, entry.raw = json_payload(msg, method)
                answer = self.validate(payload, item_ids)
            except ParseError as exc:
                last_error = redact(str(exc))
                entry.error = describe_error(exc)
                if not entry.raw:
                    entry.raw = str(msg.content)[:2000] if msg.content else json.dumps(msg.tool_calls)[:2000]
                # A cut-off answer is asked again too, even at temperature 0: asked once, 7 of the quick start's 30
                # answers stayed cut off; asked three times, 2 (the embedded model's batched slots are not bit-exact).
                continue
            if self.logprobs is not None and asked_logprobs:
                self.add_token_confidence(msg, method, answer, item_ids)
            return answer
        said = f"{tries} try" if tries == 1 else f"{tries} tries"
        if stopped == "length":  # say why: the answer did not fit max_tokens, it was not garbled
            raise CutOff(
                f"the answer was cut off at the token limit in {said} (finish_reason=length); "
                f"{CUT_OFF_HINT}. Last: {last_error}"
            )
        raise ParseError(f"unusable answer after {said}: {last_error}")

    def add_token_confidence(
        self, msg: ChatReply, method: Method, answer: Answer, item_ids: Sequence[str] | None
    ) -> None:
        """Each verdict's ``token_confidence`` from the answer's log-probabilities (None where they are missing
        or do not spell the verdict the answer was read as)."""
        assert self.logprobs is not None
        meta = getattr(msg, "response_metadata", None) or {}
        content = msg.content if isinstance(msg.content, str) else None
        found = token_confidences(self.spec, meta.get("logprobs"), content, item_ids) if content else {}
        self.logprobs.count(method, bool(found))
        for iid, verdict in answer["items"].items():
            conf = found.get(iid)
            chosen = verdict.get("label") if isinstance(self.spec.scale, CategoricalScale) else verdict.get("value")
            verdict["token_confidence"] = conf.confidence if conf is not None and conf.chosen == chosen else None

    def validate(self, payload: dict[str, Any], item_ids: Sequence[str] | None) -> Answer:
        """Check an answer (raises :class:`ParseError`). Many-judges keep each valid item and report the
        rest as missing, to be asked again. Subclasses check their own answer shapes."""
        if self.spec.each is None:
            return validate_record(self.spec, self.answer_model, payload)
        return validate_items(self.item_model, self._outputs_model, payload, item_ids)

    async def _sampled(
        self,
        data: Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None,
        item_ids: Sequence[str] | None,
        log: list[CallLog],
    ) -> Answer:
        """``samples`` independent answers combined: majority label (or value) with its agreement rate."""
        if self.samples == 1:
            return await self.ask(data, deps, item_ids, log)
        answers = await asyncio.gather(
            *(self.ask(data, deps, item_ids, log) for _ in range(self.samples)), return_exceptions=True
        )
        good = [a for a in answers if isinstance(a, dict)]
        if not good:
            first = next(a for a in answers if isinstance(a, BaseException))
            raise first
        return combine_answers(self.spec, good)

    # ------------------------------------------------------------------------------ the judgement
    async def ajudge(
        self,
        record: Record | Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None = None,
        only_items: Sequence[str] | None = None,
    ) -> JudgeResult:
        """Judge one record. Never raises for model trouble: failures come back as explicit error verdicts.

        ``only_items`` restricts a many-judge to some item ids (resuming a partly judged record).
        """
        rec, result, deps = begin(self.spec, record, deps, spec_hash=self.spec_hash)
        if deps is None:
            return result
        if self.spec.each is None:
            try:
                answer = await self._sampled(rec.data, deps, None, result.calls)
            except Exception as exc:
                result.verdicts = error_verdicts(failure_of(exc))
                return result
            result.outputs = answer["outputs"]
            result.verdicts = [to_verdict(self.spec, RECORD_ITEM, answer["items"][RECORD_ITEM])]
            return result
        ids = [it["id"] for it in rec.items(self.spec.each)]
        pending = [i for i in ids if only_items is None or i in set(only_items)]
        got: dict[str, ItemVerdict] = {}
        why = Failed(ErrorKind.INCOMPLETE, "")
        for _ in range(1 + self.policy.reask_rounds):
            if not pending:
                break
            try:
                answer = await self._sampled(rec.data, deps, pending, result.calls)
            except Exception as exc:
                why = failure_of(exc)
                break
            if answer["outputs"] and not result.outputs:
                result.outputs = answer["outputs"]
            for iid, v in answer["items"].items():
                got[iid] = to_verdict(self.spec, iid, v)
            pending = [i for i in pending if i not in got]
            notes = redact("; ".join(answer["notes"][:3])) or "the judge left it out"
            why = Failed(ErrorKind.INCOMPLETE, f"{ErrorKind.INCOMPLETE.value}: {notes}")
        text = f"{why.kind.value}: no verdict after {len(result.calls)} call(s): {why.detail}"
        got.update((v.item_id, v) for v in error_verdicts(why, pending, text))
        result.verdicts = [got[i] for i in ids if i in got]
        return result


def _openai_compatible(model: ChatModel) -> bool:
    """Whether the model speaks OpenAI's chat completions (so takes ``logprobs`` / ``top_logprobs``)."""
    return isinstance(model, OpenAIChat) or _langchain_openai(model)


def _is_openai(model: BaseChatModel) -> bool:
    return _langchain_openai(model) and not model.extra_body


def _langchain_openai(model: object) -> TypeGuard[BaseChatOpenAI]:
    """Whether ``model`` is LangChain's OpenAI chat model (langchain-openai imported here, where it is asked)."""
    from langchain_openai.chat_models.base import BaseChatOpenAI

    return isinstance(model, BaseChatOpenAI)
