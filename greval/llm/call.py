"""Calling a bound chat model, skipping LangChain's per-call machinery when nothing is listening to it.

``ChatOpenAI.ainvoke`` spends more client CPU around the HTTP request than the openai SDK spends on it:
it sets up a callback manager and run ids for tracers, checks the LLM cache, asks the SDK for the raw
response and then hops to a thread pool to turn it into an ``AIMessage``. On 2 cores at 64 requests in
flight, that CPU is what caps a judging run (``scripts/bench_run.py`` prints the breakdown).

For an OpenAI-compatible model with nothing attached to it — no callback handler, tracer, cache, rate
limiter, streaming or Responses API — :class:`ModelCall` sends the very request LangChain would build
(the model's own ``_get_request_payload``) with the model's own SDK client, and turns the answer into the
message LangChain would return (the model's own ``_create_chat_result``), in the event loop. The request
goes out through the SDK client's ``post`` (what ``chat.completions.create`` itself ends with), without
``create``'s parameter transform: that walks every message against the SDK's TypedDict unions to apply
aliases and formats that chat-completion parameters do not have, and costs ~0.4 ms of CPU per call — as
much as the rest of greval's own work on a verdict. The
moment anything is attached (a ``callbacks`` config, LangSmith tracing, ``get_openai_callback()``, a
cache …), or the model is not a plain ``BaseChatOpenAI``, the call goes through ``ainvoke`` as usual.
``direct=False`` always takes the LangChain path. Tests check both paths send the same request and get
the same message.

**One connection pool per event loop.** An HTTP connection belongs to the event loop that opened it, and
langchain-openai shares one cached ``httpx`` client per base URL across the whole process: a judge used from
greval's background loop (``invoke``) and then under ``asyncio.run`` (``ainvoke``) reused a connection of
the first loop in the second ("… is bound to a different event loop"). Both paths therefore call through a
copy of the model's SDK client made for the running loop (same key, base URL, headers, timeout and retries;
its own connection pool), created lazily on the loop's first call and closed when ``asyncio.run`` shuts that
loop down. A model given its own ``http_async_client`` (or a proxy) keeps using it as is.
"""

from __future__ import annotations

import asyncio
import inspect
import weakref
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

import openai
import pydantic
from langchain_core.callbacks import AsyncCallbackManager
from langchain_core.globals import get_llm_cache
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable, RunnableBinding
from langchain_core.runnables.config import ensure_config
from langchain_openai.chat_models import base as lc_openai
from openai._models import construct_type
from openai.resources.chat.completions import AsyncCompletions
from openai.types.chat import ChatCompletion

__all__ = ["ModelCall", "direct_reason"]


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
    """Whether LangChain would attach any callback handler to this call (tracing, callbacks, hooks).

    Built exactly as ``BaseChatModel.agenerate`` builds it, from the current run's config (a parent
    runnable's callbacks reach us through a context variable) and the model's own callbacks.
    """
    config = ensure_config()
    manager = AsyncCallbackManager.configure(
        config.get("callbacks"),
        model.callbacks,
        model.verbose,
        config.get("tags"),
        model.tags,
        config.get("metadata"),
        model.metadata,
    )
    return bool(manager.handlers)


@dataclass
class _LoopClients:
    """What greval calls with in one event loop."""

    # id(an HTTP client the models share) -> (that client, this loop's own HTTP client, with its pool)
    pools: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    # a model's SDK client -> its copy for this loop (on this loop's HTTP client); held weakly: a model and
    # its client can go, the pool stays for the next model that shares it
    copies: weakref.WeakKeyDictionary[Any, Any] = field(default_factory=weakref.WeakKeyDictionary)
    closer: AsyncIterator[None] | None = None


_LOOP_CLIENTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _LoopClients] = weakref.WeakKeyDictionary()


async def _close_with_loop(state: _LoopClients) -> AsyncIterator[None]:
    """Suspended for the loop's lifetime; ``loop.shutdown_asyncgens()`` (asyncio.run does it) resumes it to
    close the loop's HTTP clients, and their connections, inside the loop they belong to."""
    try:
        yield
    finally:
        for _, http in list(state.pools.values()):
            await http.aclose()


def _own_client(model: Any) -> bool:
    """Whether the model's SDK client can be copied per loop (not when the user gave an HTTP client)."""
    return getattr(model, "root_async_client", None) is not None and getattr(model, "http_async_client", 1) is None


async def loop_client(root: Any) -> Any:
    """``root`` (an ``openai.AsyncOpenAI``), or rather its copy for the running event loop: same settings (key,
    base URL, headers, timeout, retries), on the loop's own HTTP client (see the module docstring)."""
    loop = asyncio.get_running_loop()
    state = _LOOP_CLIENTS.get(loop)
    if state is None:
        state = _LOOP_CLIENTS[loop] = _LoopClients()
    copy = state.copies.get(root)
    if copy is not None:
        return copy
    shared = root._client
    pool = state.pools.get(id(shared))
    if pool is None:
        pool = state.pools[id(shared)] = (shared, openai.DefaultAsyncHttpxClient(timeout=root.timeout))
    copy = state.copies[root] = root.copy(http_client=pool[1])
    if state.closer is None:
        state.closer = _close_with_loop(state)
        await anext(state.closer)  # registers it with the loop's async-generator shutdown
    return copy


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
        self._on_bad_request = parts[1] if parts else None
        self._on_api_error = parts[2] if parts else None
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

    async def __call__(self, messages: list[BaseMessage]) -> Any:
        if self.reason is not None or self.model is None or _listening(self.model):
            return await self._langchain(messages)
        model: Any = self.model  # the BaseChatOpenAI internals below are not part of BaseChatModel's type
        payload: dict[str, Any] = model._get_request_payload(messages, **self.kwargs)
        if "response_format" in payload or model._use_responses_api(payload):
            # LangChain takes its `.parse()` or Responses-API branch for these: keep its behaviour exactly.
            self.reason = "the request needs LangChain's parse or Responses API branch"
            return await self._langchain(messages)
        try:
            response = await self._send(await self._client(), payload)
        except openai.BadRequestError as exc:
            if self._on_bad_request is not None:
                self._on_bad_request(exc)
            raise
        except openai.APIError as exc:
            if self._on_api_error is not None:
                self._on_api_error(exc)
            raise
        result = model._create_chat_result(response)
        generation = result.generations[0]
        message = generation.message
        if not isinstance(message, AIMessage):  # pragma: no cover - chat completions always answer so
            raise TypeError(f"expected an AIMessage, got {type(message).__name__}")
        # The metadata merge `BaseChatModel._agenerate_with_cache` does (finish reason, logprobs, model name).
        info = {k: v for k, v in (generation.generation_info or {}).items() if k != "lc_gateway_metadata"}
        outer = result.llm_output if len(result.generations) == 1 and result.llm_output else {}
        message.response_metadata = {**outer, **info, **message.response_metadata}
        return message

    @staticmethod
    async def _send(client: Any, payload: dict[str, Any]) -> Any:
        """``client.chat.completions.create(**payload)`` minus its no-op parameter transform.

        ``create`` splits its keyword arguments into the JSON body and the request options
        (``extra_headers`` / ``extra_query`` / ``extra_body`` / ``timeout``) and posts them with the client's
        ``post``; this does the same split. Streaming and anything unexpected go through ``create``.
        """
        completions = client.chat.completions
        post = getattr(completions, "_post", None)
        if post is None or payload.get("stream") or not payload.keys() <= _CREATE_PARAMS:
            return await completions.create(**payload)
        body = {k: v for k, v in payload.items() if k not in _REQUEST_OPTIONS}
        # As create: a None option is left out, except timeout=None, which means "no timeout".
        options = {
            option: payload[key]
            for key, option in _REQUEST_OPTIONS.items()
            if key in payload and (payload[key] is not None or key == "timeout")
        }
        strict = getattr(client, "_strict_response_validation", False)
        cast_to = ChatCompletion if strict else _FastChatCompletion
        return await post("/chat/completions", body=body, options=options, cast_to=cast_to)


class _FastChatCompletion(ChatCompletion):
    """``cast_to`` of the direct call: the response as the very ``ChatCompletion`` the SDK returns, built faster.

    The SDK builds it with ``construct_type``, a recursive walk in Python: ~0.14 ms of CPU a call, as much as
    the rest of greval's parsing. A well-formed answer validates strictly in pydantic-core in ~6 µs to an
    equal model (same ``model_dump``); anything that does not (a lenient server's odd field) is built as the
    SDK builds it. The SDK calls ``build`` for a ``cast_to`` that has one; this class is never instantiated.
    """

    @classmethod
    def build(cls, *, response: Any, data: Any) -> ChatCompletion:
        try:
            return ChatCompletion.model_validate(data, strict=True)
        except pydantic.ValidationError:
            return cast(ChatCompletion, construct_type(type_=ChatCompletion, value=data))


# create()'s request options, by the name RequestOptions gives them.
_REQUEST_OPTIONS = {
    "extra_headers": "headers",
    "extra_query": "params",
    "extra_body": "extra_json",
    "timeout": "timeout",
}


def _create_params() -> frozenset[str]:
    return frozenset(inspect.signature(AsyncCompletions.create).parameters) - {"self"}


# Every keyword create() accepts: a payload with any other key goes through create (and its TypeError).
_CREATE_PARAMS = _create_params()
