"""The openai SDK as greval's direct calls use it: one client per event loop, and a chat-completions request
sent without the SDK's per-call parameter transform.

Both direct paths use it: :class:`greval.llm.call.ModelCall` (a LangChain ``ChatOpenAI``, nothing listening)
and :class:`greval.llm.openai_chat.OpenAICall` (the judge greval builds, before LangChain is imported). Importing
this module imports the SDK (~0.4 s of CPU): its users import it when they first call.

**One connection pool per event loop.** An HTTP connection belongs to the event loop that opened it, and
langchain-openai shares one cached ``httpx`` client per base URL across the whole process: a judge used from
greval's background loop (``invoke``) and then under ``asyncio.run`` (``ainvoke``) reused a connection of
the first loop in the second ("… is bound to a different event loop"). Calls therefore go through a copy of
the SDK client made for the running loop (same key, base URL, headers, timeout and retries; its own connection
pool), created lazily on the loop's first call and closed when ``asyncio.run`` shuts that loop down (greval's
own background loop is shut down the same way at exit: greval._sync). A client greval builds for one run
(:func:`loop_built`) is closed by :func:`close_built` when the run ends: a notebook calling
``greval.evaluate`` again and again would otherwise keep every earlier run's connections open.

**No parameter transform.** The request goes out through the SDK client's ``post`` (what
``chat.completions.create`` itself ends with), without ``create``'s parameter transform: that walks every
message against the SDK's TypedDict unions to apply aliases and formats that chat-completion parameters do
not have, and costs ~0.4 ms of CPU per call — as much as the rest of greval's own work on a verdict.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import openai
import pydantic
from openai._models import construct_type
from openai.resources.chat.completions import AsyncCompletions
from openai.types.chat import ChatCompletion

from greval.llm.loops import PerLoop

__all__ = ["close_built", "loop_built", "loop_client", "send"]


@dataclass
class _LoopClients:
    """What greval calls with in one event loop."""

    # id(an HTTP client the models share) -> (that client, this loop's own HTTP client, with its pool)
    pools: dict[int, tuple[Any, Any]] = field(default_factory=dict)
    # a model's SDK client -> its copy for this loop (on this loop's HTTP client), or what loop_built built a
    # client for -> that client; held weakly: a model and its client can go, the pool stays for the next model
    # that shares it
    copies: weakref.WeakKeyDictionary[Any, Any] = field(default_factory=weakref.WeakKeyDictionary)
    # what loop_built built a client for -> the HTTP client it made for it (closed by close_built)
    built: weakref.WeakKeyDictionary[Any, Any] = field(default_factory=weakref.WeakKeyDictionary)


async def _close_pools(state: _LoopClients) -> None:
    """The loop's HTTP clients closed, and their connections, inside the loop they belong to."""
    for _, http in list(state.pools.values()):
        await http.aclose()


_CLIENTS: PerLoop[_LoopClients] = PerLoop(_LoopClients, _close_pools)


async def loop_client(root: Any) -> Any:
    """``root`` (an ``openai.AsyncOpenAI``), or rather its copy for the running event loop: same settings (key,
    base URL, headers, timeout, retries), on the loop's own HTTP client (see the module docstring)."""
    state = await _CLIENTS.get()
    copy = state.copies.get(root)
    if copy is not None:
        return copy
    shared = root._client
    pool = state.pools.get(id(shared))
    if pool is None:
        pool = state.pools[id(shared)] = (shared, openai.DefaultAsyncHttpxClient(timeout=root.timeout))
    copy = state.copies[root] = root.copy(http_client=pool[1])
    return copy


async def loop_built(key: Any, build: Callable[[Any], Any], timeout: float) -> Any:
    """The SDK client ``build(http_client)`` makes for the running event loop, on the loop's own HTTP client
    (one per ``key`` and loop): for a client greval builds itself, so that no default HTTP client, with its
    SSL context (~0.05 s of CPU), is made only to be replaced by the loop's."""
    state = await _CLIENTS.get()
    client = state.copies.get(key)
    if client is None:
        http = state.built[key] = openai.DefaultAsyncHttpxClient(timeout=timeout)
        state.pools[id(http)] = (http, http)
        client = state.copies[key] = build(http)
    return client


async def close_built(key: Any) -> None:
    """Close the HTTP client :func:`loop_built` made for ``key`` on the running loop, and its connections (the
    end of the run it was built for); the next call with ``key`` builds a new one."""
    state = _CLIENTS.current()
    http = state.built.pop(key, None) if state is not None else None
    if state is None or http is None:
        return
    state.copies.pop(key, None)
    state.pools.pop(id(http), None)
    await http.aclose()


async def send(client: Any, payload: dict[str, Any]) -> Any:
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
