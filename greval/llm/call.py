"""Calling a bound LangChain chat model, skipping LangChain's per-call machinery when nothing is listening to it.

``ChatOpenAI.ainvoke`` spends more client CPU around the HTTP request than the openai SDK spends on it:
it sets up a callback manager and run ids for tracers, checks the LLM cache, asks the SDK for the raw
response and then hops to a thread pool to turn it into an ``AIMessage``. On 2 cores at 64 requests in
flight, that CPU is what caps a judging run (``scripts/bench_run.py`` prints the breakdown).

For an OpenAI-compatible model with nothing attached to it — no callback handler, tracer, cache, rate
limiter, streaming or Responses API — :class:`ModelCall` sends the very request LangChain would build
(the model's own ``_get_request_payload``) with the model's own SDK client, and turns the answer into the
message LangChain would return (the model's own ``_create_chat_result``), in the event loop. The request
goes out without the SDK's parameter transform (:func:`greval.llm.sdk.send`). The moment anything is attached
(a ``callbacks`` config, LangSmith tracing, ``get_openai_callback()``, a cache …), or the model is not a plain
``BaseChatOpenAI``, the call goes through ``ainvoke`` as usual. ``direct=False`` always takes the LangChain
path. Tests check both paths send the same request and get the same message. Both paths call through a copy
of the model's SDK client made for the running event loop (:func:`greval.llm.sdk.loop_client`); a model given
its own ``http_async_client`` (or a proxy) keeps using it as is.

This is the LangChain side of greval's calls: a judge built by greval for an OpenAI-compatible server calls
without LangChain until something needs it (:mod:`greval.llm.openai_chat`), and then through this.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import openai
from langchain_core.globals import get_llm_cache
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage
from langchain_core.runnables import Runnable, RunnableBinding
from langchain_openai.chat_models import base as lc_openai

from greval.llm.listeners import listening
from greval.llm.openai_chat import Message
from greval.llm.sdk import loop_client, send

__all__ = ["ModelCall", "chat_result_message", "direct_reason", "to_langchain"]


def _openai_parts() -> tuple[type[Any], Callable[..., Any] | None, Callable[..., Any] | None] | None:
    return (
        lc_openai.BaseChatOpenAI,
        getattr(lc_openai, "_handle_openai_bad_request", None),
        getattr(lc_openai, "_handle_openai_api_error", None),
    )


def direct_reason(model: BaseChatModel) -> str | None:
    """Why ``model`` must go through LangChain's ``ainvoke`` (``None``: the direct call is equivalent)."""
    parts = _openai_parts()
    if parts is None or not isinstance(model, parts[0]):
        return "not an OpenAI-compatible LangChain model"
    base = parts[0]
    for name in ("_agenerate", "_get_request_payload", "_create_chat_result"):
        if not hasattr(model, name):
            return f"this langchain-openai has no {name}"
    if type(model)._agenerate is not base._agenerate:
        return f"{type(model).__name__} overrides _agenerate"
    if getattr(model, "streaming", False):
        return "the model streams"
    if getattr(model, "rate_limiter", None) is not None:
        return "the model has a rate limiter"
    if getattr(model, "include_response_headers", False):
        return "the model returns response headers"
    if getattr(model, "output_version", None) not in (None, "v0"):
        return f"output_version={model.output_version!r}"
    if model.cache not in (None, False):
        return "the model has a cache"
    if model.cache is None and get_llm_cache() is not None:
        return "a global LLM cache is set"
    return None


def _listening(model: BaseChatModel) -> bool:
    """Whether LangChain would attach any callback handler to this call (tracing, callbacks, hooks)."""
    return listening(model.callbacks, model.verbose, model.tags, model.metadata)


_ROLES: dict[str, type[BaseMessage]] = {"system": SystemMessage, "user": HumanMessage, "assistant": AIMessage}


def to_langchain(messages: Sequence[Message | BaseMessage]) -> list[BaseMessage]:
    """greval's messages (role and text) as LangChain's, the classes greval built them as before."""
    return [m if isinstance(m, BaseMessage) else _ROLES[m["role"]](m["content"]) for m in messages]


def raise_as_langchain(exc: openai.APIError) -> None:
    """Raise an SDK error as LangChain's ChatOpenAI raises it: its own classes for a context overflow, a refused
    structured-output method … (what greval.llm.retry classifies). Call it in the ``except`` block that caught
    ``exc``: LangChain's handler ends in a bare ``raise`` for errors it does not wrap."""
    parts = _openai_parts()
    on_bad_request, on_api_error = (parts[1], parts[2]) if parts else (None, None)
    if isinstance(exc, openai.BadRequestError):
        if on_bad_request is not None:
            on_bad_request(exc)
    elif on_api_error is not None:
        on_api_error(exc)


def chat_result_message(model: Any, response: Any) -> AIMessage:
    """The message ``ainvoke`` returns for an SDK response: the model's own ``_create_chat_result``, and the
    metadata merge ``BaseChatModel._agenerate_with_cache`` does (finish reason, logprobs, model name)."""
    result = model._create_chat_result(response)
    generation = result.generations[0]
    message = generation.message
    if not isinstance(message, AIMessage):  # pragma: no cover - chat completions always answer so
        raise TypeError(f"expected an AIMessage, got {type(message).__name__}")
    info = {k: v for k, v in (generation.generation_info or {}).items() if k != "lc_gateway_metadata"}
    outer = result.llm_output if len(result.generations) == 1 and result.llm_output else {}
    message.response_metadata = {**outer, **info, **message.response_metadata}
    return message


def _own_client(model: Any) -> bool:
    """Whether the model's SDK client can be copied per loop (not when the user gave an HTTP client)."""
    return getattr(model, "root_async_client", None) is not None and getattr(model, "http_async_client", 1) is None


class ModelCall:
    """One bound chat model (``model.bind(...)`` / ``bind_tools``), called with a message list."""

    def __init__(self, bound: Runnable[Any, Any], *, direct: bool = True) -> None:
        self.bound = bound
        model = bound.bound if isinstance(bound, RunnableBinding) else bound
        kwargs: Mapping[str, Any] = bound.kwargs if isinstance(bound, RunnableBinding) else {}
        self.model: BaseChatModel | None = model if isinstance(model, BaseChatModel) else None
        self.kwargs = dict(kwargs)
        plain_binding = not isinstance(bound, RunnableBinding) or (
            not bound.config and not bound.config_factories and not bound.custom_input_type
        )
        self.reason: str | None
        if not direct:
            self.reason = "direct calls are switched off"
        elif self.model is None or not plain_binding:
            self.reason = "not a plain bound chat model"
        else:
            self.reason = direct_reason(self.model)
        parts = _openai_parts()
        self._per_loop = self.model is not None and parts is not None and isinstance(self.model, parts[0])
        self._loop_bound: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Runnable[Any, Any]] = (
            weakref.WeakKeyDictionary()
        )

    @property
    def direct(self) -> bool:
        return self.reason is None

    async def _client(self) -> Any:
        """The SDK client to call with in the running loop."""
        model: Any = self.model
        if self._per_loop and _own_client(model):
            return await loop_client(model.root_async_client)
        return model.root_async_client

    async def _langchain(self, messages: list[BaseMessage]) -> Any:
        """``bound.ainvoke``, with the model's SDK client swapped for the running loop's copy."""
        model: Any = self.model
        if not self._per_loop or not _own_client(model):
            return await self.bound.ainvoke(messages)
        loop = asyncio.get_running_loop()
        bound = self._loop_bound.get(loop)
        if bound is None:
            client = await loop_client(model.root_async_client)
            copy = model.model_copy(update={"root_async_client": client, "async_client": client.chat.completions})
            bound = self.bound.model_copy(update={"bound": copy}) if isinstance(self.bound, RunnableBinding) else copy
            self._loop_bound[loop] = bound
        return await bound.ainvoke(messages)

    async def __call__(self, messages: Sequence[Message | BaseMessage]) -> Any:
        lc_messages = to_langchain(messages)
        if self.reason is not None or self.model is None or _listening(self.model):
            return await self._langchain(lc_messages)
        model: Any = self.model  # the BaseChatOpenAI internals below are not part of BaseChatModel's type
        payload: dict[str, Any] = model._get_request_payload(lc_messages, **self.kwargs)
        if "response_format" in payload or model._use_responses_api(payload):
            # LangChain takes its `.parse()` or Responses-API branch for these: keep its behaviour exactly.
            self.reason = "the request needs LangChain's parse or Responses API branch"
            return await self._langchain(lc_messages)
        try:
            response = await send(await self._client(), payload)
        except openai.APIError as exc:
            raise_as_langchain(exc)
            raise
        return chat_result_message(model, response)
