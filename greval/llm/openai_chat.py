"""The judge greval builds for an OpenAI-compatible server, called without LangChain until something needs it.

Importing LangChain's chat-model stack costs a fresh process ~0.6 s of CPU (langchain-openai, langchain-core's
language models and runnables, and langsmith's run trees, which come with langchain-core's tracers), before
a judging run's first call. A judge built from a :class:`greval.llm.config.JudgeConfig` for ``openai`` or the
embedded local judge is therefore an :class:`OpenAIChat`: the settings :func:`greval.llm.config.make_chat_model`
builds a ``ChatOpenAI`` with, and that ``ChatOpenAI`` only once something needs it.

:class:`OpenAICall` sends a JSON-schema or JSON-mode request (what a judge sends unless it falls back to tool
calling) as ``ChatOpenAI`` would — the same body, built here as its ``_get_request_payload`` builds it for these
settings, sent over aiohttp without the openai SDK (:mod:`greval.llm.wire`: a sixth of the SDK's CPU per call,
none of its import), or through the SDK client ``ChatOpenAI`` would build when a setting only the SDK applies is
configured (:func:`sdk_reason`; :mod:`greval.llm.sdk`) — and reads the answer into a :class:`DirectReply` with
what greval reads of LangChain's ``AIMessage``. Tests hold both to LangChain's own request and message. The call
goes through LangChain's ``ChatOpenAI`` instead (:meth:`OpenAICall.langchain`) whenever anything could make
LangChain's behaviour differ (:func:`native_reason`, :func:`langchain_may_listen`):

* LangChain or langsmith is loaded in the process, or LangChain tracing is configured in the environment, and
  a callback handler, tracer or LLM cache would apply to the call (asked of LangChain itself);
* the model is one ``ChatOpenAI`` adapts requests for (o-series and gpt-5 and later: roles, temperature, the
  Responses API; codex);
* ``OPENAI_PROXY``, ``OPENAI_API_BASE`` or the LangSmith gateway is configured (settings only ChatOpenAI reads);
* ``direct=False``; an answer that is not one plain assistant message (tool calls, an error body) is read by
  LangChain's own code.

A refused request raises :class:`greval.llm.wire.HTTPStatusError` (status, error object, headers), which
greval classifies and describes as it does the SDK's and LangChain's errors, with neither imported.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypedDict

from pydantic import SecretStr

from greval.llm.retry import register_secret

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from greval.llm.call import ModelCall
    from greval.llm.wire import Endpoint

__all__ = [
    "Caller",
    "ChatReply",
    "DirectReply",
    "Message",
    "OpenAICall",
    "OpenAIChat",
    "langchain_may_listen",
    "native_reason",
]


class Message(TypedDict):
    """One chat message as greval builds it (OpenAI's shape; LangChain's classes only on its path)."""

    role: Literal["system", "user", "assistant"]
    content: str


class ChatReply(Protocol):
    """What greval reads of a model's answer: LangChain's ``AIMessage`` and :class:`DirectReply` both have it."""

    @property
    def content(self) -> str | list[str | dict[Any, Any]]: ...

    @property
    def tool_calls(self) -> Sequence[Mapping[str, Any]]: ...

    @property
    def invalid_tool_calls(self) -> Sequence[Mapping[str, Any]]: ...

    @property
    def usage_metadata(self) -> Mapping[str, Any] | None: ...

    @property
    def response_metadata(self) -> Mapping[str, Any]: ...


@dataclass(frozen=True)
class DirectReply:
    """A plain assistant answer read without LangChain: the fields of ``AIMessage`` greval reads, with the
    values LangChain gives them (``usage_metadata``: input, output and total tokens)."""

    content: str
    usage_metadata: dict[str, Any] | None
    response_metadata: dict[str, Any]
    tool_calls: list[dict[str, Any]] = field(default_factory=list)
    invalid_tool_calls: list[dict[str, Any]] = field(default_factory=list)


class Caller(Protocol):
    """How a judge calls its model for one structured-output method: messages in, the answer out."""

    reason: str | None

    @property
    def direct(self) -> bool: ...

    async def __call__(self, messages: Sequence[Message]) -> Any: ...


@dataclass(frozen=True, eq=False)
class OpenAIChat:
    """An OpenAI-compatible chat model as greval builds it (:func:`greval.llm.config.openai_chat`): the settings
    of its ``ChatOpenAI`` (:meth:`langchain`, built on first use), no LangChain until then."""

    model: str
    api_key: SecretStr
    base_url: str | None = None
    timeout: float = 120.0
    temperature: float | None = None
    max_completion_tokens: int | None = None
    seed: int | None = None
    # a cap on each reason's length, sent as its schema's maxLength (the embedded judge: greval.judge.judge)
    reason_chars: int | None = None
    # what is built from the settings, once: "langchain" (the ChatOpenAI)
    _built: dict[str, Any] = field(default_factory=dict, init=False, repr=False)

    def __post_init__(self) -> None:
        register_secret(self.api_key.get_secret_value())

    def chat_openai_kwargs(self) -> dict[str, Any]:
        """The keyword arguments of the ``ChatOpenAI`` these settings describe."""
        kwargs: dict[str, Any] = {
            "model": self.model,
            "api_key": self.api_key,
            "base_url": self.base_url,
            "timeout": self.timeout,
            "max_retries": 0,  # greval retries itself, with backoff that honours Retry-After
        }
        if self.temperature is not None:
            kwargs["temperature"] = self.temperature
        if self.max_completion_tokens is not None:
            kwargs["max_completion_tokens"] = self.max_completion_tokens
        if self.seed is not None:
            kwargs["seed"] = self.seed
        return kwargs

    def langchain(self) -> BaseChatModel:
        """LangChain's ``ChatOpenAI`` for these settings (imports LangChain; built once)."""
        model = self._built.get("langchain")
        if model is None:
            from langchain_openai import ChatOpenAI

            model = self._built["langchain"] = ChatOpenAI(**self.chat_openai_kwargs())
        return model

    def sdk_client(self, http_client: Any) -> Any:
        """The ``openai.AsyncOpenAI`` client ``ChatOpenAI`` builds for these settings (its ``root_async_client``:
        key, organisation, base URL, timeout, no retries), on ``http_client``; imports the SDK."""
        import openai

        return openai.AsyncOpenAI(
            api_key=self.api_key.get_secret_value(),
            organization=os.getenv("OPENAI_ORG_ID") or os.getenv("OPENAI_ORGANIZATION"),
            base_url=self.base_url,
            timeout=self.timeout,
            default_headers=None,
            default_query=None,
            max_retries=0,
            http_client=http_client,
        )

    def endpoint(self) -> Endpoint:
        """Where this judge's direct requests go, with which headers (built once; imports aiohttp)."""
        endpoint = self._built.get("endpoint")
        if endpoint is None:
            from greval.llm.wire import Endpoint

            endpoint = self._built["endpoint"] = Endpoint.of(
                self.base_url, self.api_key.get_secret_value(), self.timeout
            )
        return endpoint

    async def aclose(self) -> None:
        """Close the connections this judge's direct calls opened on the running loop (a run's end; the judge
        can still be called: it opens new ones). Nothing is imported for a judge that never called."""
        wire, sdk = sys.modules.get("greval.llm.wire"), sys.modules.get("greval.llm.sdk")
        if wire is not None:
            await wire.close(self)
        if sdk is not None:
            await sdk.close_built(self)

    def payload(self, messages: Sequence[Message], kwargs: Mapping[str, Any]) -> dict[str, Any]:
        """The request ``ChatOpenAI._get_request_payload`` builds for these settings, the bound ``kwargs``
        and plain text messages (for a model :func:`native_reason` lets through)."""
        payload: dict[str, Any] = {"model": self.model, "stream": False}
        if self.seed is not None:
            payload["seed"] = self.seed
        if self.temperature is not None:
            payload["temperature"] = self.temperature
        if self.max_completion_tokens is not None:
            payload["max_completion_tokens"] = self.max_completion_tokens
        payload.update(kwargs)
        payload["messages"] = [{"content": m["content"], "role": m["role"]} for m in messages]
        return payload


if TYPE_CHECKING:
    #: What greval judges with: a LangChain chat model, or the OpenAI-compatible judge greval builds.
    ChatModel: TypeAlias = BaseChatModel | OpenAIChat

# Models ChatOpenAI adapts requests for: o-series (system -> developer role, o1's temperature), gpt-5 and later
# (temperature dropped, some only on the Responses API); codex models use the Responses API.
_ADAPTED_MODELS = re.compile(r"(o\d|gpt-([5-9]|\d\d))", re.IGNORECASE)
# Environment variables only ChatOpenAI reads (the SDK does not): a proxy, the old base-URL name.
_LANGCHAIN_ENV = ("OPENAI_PROXY", "OPENAI_API_BASE")
# Environment variables only the openai SDK reads (greval.llm.wire reads the base URL, organisation and project).
_SDK_ONLY_ENV = ("OPENAI_CUSTOM_HEADERS",)
# What tracing instrumentations wrap on the SDK's async client (wrapt / functools set ``__wrapped__``):
# OpenInference wraps ``request``.
_TRACED_METHODS = ("request", "post")
# The environment variables that switch LangChain tracing on without any code (langsmith's `TRACING_V2` /
# `TRACING` in either namespace, and LangChain's old v1 tracer).
_TRACING_ENV = ("LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING", "LANGCHAIN_TRACING")
_TRACING_ENV_V1 = ("LANGCHAIN_HANDLER",)


def native_reason(chat: OpenAIChat) -> str | None:
    """Why calls of ``chat`` must go through LangChain's ``ChatOpenAI`` (None: the request built here is
    the one it sends)."""
    if _ADAPTED_MODELS.match(chat.model) or "codex" in chat.model.lower():
        return f"ChatOpenAI adapts requests for {chat.model} (roles, temperature or the Responses API)"
    for name in _LANGCHAIN_ENV:
        if os.environ.get(name) is not None:
            return f"{name} is set (a setting of LangChain's ChatOpenAI)"
    if any(name.startswith("LANGSMITH_GATEWAY") for name in os.environ):
        return "the LangSmith gateway is configured"
    return None


def sdk_reason() -> str | None:
    """Why a direct call must go through the openai SDK's client rather than greval's own (greval.llm.wire): a
    setting only the SDK applies, or the SDK instrumented for tracing (OpenInference, OpenTelemetry …), whose spans
    the calls would otherwise not get. None: greval's request is the SDK's. Asked at every call (microseconds):
    instrumentation may begin after the judge is built."""
    for name in _SDK_ONLY_ENV:
        if os.environ.get(name) is not None:
            return f"{name} is set (a setting of the openai SDK)"
    openai = sys.modules.get("openai")  # not imported: nothing can have instrumented it
    client = getattr(openai, "AsyncOpenAI", None)
    if any(hasattr(getattr(client, name, None), "__wrapped__") for name in _TRACED_METHODS):
        return "the openai SDK is instrumented (its calls are traced)"
    return None


def tracing_configured() -> bool:
    """Whether the environment switches LangChain tracing on (as langsmith and langchain-core read it)."""
    return any((os.environ.get(n) or "").strip() for n in (*_TRACING_ENV, *_TRACING_ENV_V1))


def langchain_may_listen(traced_env: bool) -> bool:
    """Whether a LangChain callback handler, tracer or cache could apply to a call at all: only once LangChain
    or langsmith is loaded in the process (a parent run, a handler, a hook, a cache, a traced function) or
    tracing is configured in the environment (``traced_env``: :func:`tracing_configured`)."""
    return traced_env or "langchain_core" in sys.modules or "langsmith" in sys.modules


class OpenAICall:
    """One structured-output request of an :class:`OpenAIChat` (the keyword arguments a judge binds:
    ``extra_body``, log-probabilities), sent without LangChain unless something needs it (module docstring)."""

    def __init__(self, chat: OpenAIChat, kwargs: Mapping[str, Any], *, direct: bool = True) -> None:
        self.chat = chat
        self.kwargs = dict(kwargs)
        self.reason: str | None = native_reason(chat) if direct else "direct calls are switched off"
        self._allow_direct = direct
        self._traced_env = tracing_configured()
        self._langchain: ModelCall | None = None

    @property
    def direct(self) -> bool:
        return self.reason is None

    def langchain(self) -> ModelCall:
        """The same request through LangChain's ``ChatOpenAI`` (:class:`greval.llm.call.ModelCall`: still
        direct when nothing listens); LangChain imported and the model built on first use."""
        if self._langchain is None:
            from greval.llm.call import ModelCall

            self._langchain = ModelCall(self.chat.langchain().bind(**self.kwargs), direct=self._allow_direct)
        return self._langchain

    def _listened(self) -> bool:
        if not langchain_may_listen(self._traced_env):
            return False
        from greval.llm.listeners import default_listening

        return default_listening() is not None

    async def __call__(self, messages: Sequence[Message]) -> Any:
        if self.reason is not None or self._listened():
            return await self.langchain()(messages)
        payload = self.chat.payload(messages, self.kwargs)
        if sdk_reason() is not None:
            return reply_of(await self._through_sdk(payload), self.chat)
        from greval.llm import wire  # aiohttp: imported by the first call

        answer = await wire.post_chat(self.chat, self.chat.endpoint(), payload)
        return reply_of(answer, self.chat)

    async def _through_sdk(self, payload: dict[str, Any]) -> Any:
        """The request through the openai SDK's client (a setting only the SDK applies: greval.llm.wire), its
        errors raised as ChatOpenAI raises them."""
        from greval.llm import sdk

        try:
            client = await sdk.loop_built(self.chat, self.chat.sdk_client, self.chat.timeout)
            return await sdk.send(client, payload)
        except Exception as exc:
            _raise_as_langchain(exc)
            raise


def _raise_as_langchain(exc: Exception) -> None:
    import openai

    if isinstance(exc, openai.APIError):
        from greval.llm.call import raise_as_langchain

        raise_as_langchain(exc)


def _plain(message: Any) -> bool:
    """An assistant message with text only (what a JSON-schema or JSON-mode answer is)."""
    return (
        isinstance(message, dict)
        and message.get("role") == "assistant"
        and not any(message.get(k) for k in ("tool_calls", "function_call", "audio"))
    )


def reply_of(response: Any, chat: OpenAIChat) -> ChatReply:
    """The answer as ``ChatOpenAI`` reads it (``_create_chat_result`` and ``BaseChatModel``'s metadata merge),
    for one plain assistant message; anything else is read by LangChain's own code."""
    data = (
        response
        if isinstance(response, dict)
        else response.model_dump(exclude={"choices": {"__all__": {"message": {"parsed"}}}}, warnings=False)
    )
    choices = data.get("choices")
    if data.get("error") or not isinstance(choices, list) or len(choices) != 1 or not _plain(choices[0]["message"]):
        from greval.llm.call import chat_result_message

        reply: ChatReply = chat_result_message(chat.langchain(), response)
        return reply
    choice, usage = choices[0], data.get("usage")
    meta: dict[str, Any] = {
        "token_usage": usage,
        "model_provider": "openai",
        "model_name": data.get("model", chat.model),
        "system_fingerprint": data.get("system_fingerprint"),
    }
    if "id" in data:
        meta["id"] = data["id"]
    if data.get("service_tier"):
        meta["service_tier"] = data["service_tier"]
    meta["finish_reason"] = choice.get("finish_reason")
    meta["logprobs"] = choice.get("logprobs")
    return DirectReply(choice["message"].get("content", "") or "", _usage(usage) if usage else None, meta)


def _usage(usage: Mapping[str, Any]) -> dict[str, Any]:
    """LangChain's ``usage_metadata`` of an OpenAI ``usage`` object: the token counts, and the details it keeps
    (cached prompt tokens as ``input_token_details.cache_read``, audio and reasoning tokens) where given."""
    tokens_in = usage.get("prompt_tokens") or 0
    tokens_out = usage.get("completion_tokens") or 0
    out: dict[str, Any] = {
        "input_tokens": tokens_in,
        "output_tokens": tokens_out,
        "total_tokens": usage.get("total_tokens") or tokens_in + tokens_out,
    }
    prompt = usage.get("prompt_tokens_details") or {}
    completion = usage.get("completion_tokens_details") or {}
    details_in = {
        k: v
        for k, v in (("audio", prompt.get("audio_tokens")), ("cache_read", prompt.get("cached_tokens")))
        if v is not None
    }
    details_out = {
        k: v
        for k, v in (("audio", completion.get("audio_tokens")), ("reasoning", completion.get("reasoning_tokens")))
        if v is not None
    }
    if details_in:
        out["input_token_details"] = details_in
    if details_out:
        out["output_token_details"] = details_out
    return out
