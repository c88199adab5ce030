"""A chat-completions request on the wire, over aiohttp, without the openai SDK: what the judge greval builds
for an OpenAI-compatible server (:class:`greval.llm.openai_chat.OpenAICall`) sends.

**Why not the SDK.** Importing the openai SDK costs a fresh process ~0.5 s of CPU before its first call, and
each call through it (its httpx transport, request options, response model) ~1.2 ms of client CPU; aiohttp
sends the same request for ~0.2 ms (``scripts/bench_run.py`` and ``scripts/bench_startup.py`` measure both).
At 128 requests in flight on two cores that CPU, not the server, is what limits a run.

**The same request.** The JSON body is the one ``ChatOpenAI`` sends (tests compare them on the wire), with the
headers that mean something to a server: the key, ``OpenAI-Organization`` and ``OpenAI-Project`` (from
``OPENAI_ORG_ID`` / ``OPENAI_ORGANIZATION`` and ``OPENAI_PROJECT_ID``, as the SDK reads them), the base URL from
``OPENAI_BASE_URL`` when none is given. Not sent: the SDK's telemetry headers (``X-Stainless-*``); the
``User-Agent`` is greval's. A setting only the SDK understands sends calls through the SDK instead
(:func:`greval.llm.openai_chat.sdk_reason`). The proxy comes from the environment (``HTTPS_PROXY``, ``NO_PROXY``
…) as for the SDK's httpx client, read once per judge: aiohttp's own ``trust_env`` reads it, and ``~/.netrc``, in
a worker thread for every request (two thread hops a call, and a netrc entry for the host would clash with the
key's header). https is verified against the system's certificates and certifi's.

**Errors need nothing imported.** A refusal is an :class:`HTTPStatusError` carrying the status, the error object
and the response headers (``Retry-After``), which is all :mod:`greval.llm.retry` classifies by; a timeout is a
``TimeoutError`` and a connection failure a ``ConnectionError``. Describing a failure (``describe_error``) gives
the text the SDK's path gives (tests compare them).

**One session per judge and event loop.** A connection belongs to the event loop that opened it; each loop gets
its own session (and pool) for a judge, closed with the loop (``asyncio.run``'s and greval's background loop's
``shutdown_asyncgens``) or when the run that built the judge ends (:func:`close`).
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import ipaddress
import json
import os
import ssl
import urllib.parse
import urllib.request
import weakref
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp

from greval import __version__
from greval.errors import GrevalError
from greval.llm.loops import PerLoop

__all__ = ["DEFAULT_BASE_URL", "Endpoint", "HTTPStatusError", "close", "post_chat"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"
#: Seconds an idle pooled connection is kept: under the 5 s after which llama.cpp's and uvicorn's servers close
#: an idle connection, so a request never goes out on one the server has just closed.
KEEPALIVE_S = 4.0
#: At most this many connections per session (the SDK's httpx pool allows 1,000 as well).
MAX_CONNECTIONS = 1000
# Request options a payload may carry besides the body (ChatOpenAI's ``extra_*`` keyword arguments).
_OPTIONS = ("extra_headers", "extra_query", "extra_body", "timeout")


class HTTPStatusError(GrevalError):
    """The server answered with an error status: ``status_code``, ``body`` (the error object, or the text when the
    answer was not JSON) and ``response.headers``, where :mod:`greval.llm.retry` looks for them."""

    def __init__(self, status: int, raw: bytes, headers: Mapping[str, str]) -> None:
        text = raw.decode("utf-8", "replace").strip()
        try:
            parsed: Any = json.loads(text)
        except ValueError:
            parsed, message = text, text or f"Error code: {status}"
        else:
            message = f"Error code: {status} - {parsed}"
        super().__init__(message)
        self.status_code = status
        self.body = parsed.get("error", parsed) if isinstance(parsed, dict) else parsed
        self.response = _Response(status, headers)


@dataclass(frozen=True)
class _Response:
    status_code: int
    headers: Mapping[str, str]


@dataclass(frozen=True)
class Endpoint:
    """Where and how a judge's requests go: the chat-completions URL, the headers, the timeout (seconds)."""

    url: str
    headers: Mapping[str, str] = field(repr=False)  # the key: never in a repr
    timeout: float = 120.0
    # the proxy the environment names for the URL, with its credentials: aiohttp's keyword arguments
    proxy: Mapping[str, Any] = field(default_factory=dict, repr=False)

    @classmethod
    def of(cls, base_url: str | None, api_key: str, timeout: float) -> Endpoint:
        base = (base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL).rstrip("/")
        headers = {
            "Accept": "application/json",
            "Content-Type": "application/json",
            "User-Agent": f"greval/{__version__}",
            "Authorization": f"Bearer {api_key}",
        }
        organization = os.getenv("OPENAI_ORG_ID") or os.getenv("OPENAI_ORGANIZATION")
        if organization:
            headers["OpenAI-Organization"] = organization
        project = os.getenv("OPENAI_PROJECT_ID")
        if project:
            headers["OpenAI-Project"] = project
        url = base + "/chat/completions"
        return cls(url, headers, timeout, _env_proxy(url))


def _env_proxy(url: str) -> dict[str, Any]:
    """The proxy the environment names for ``url`` (``HTTPS_PROXY`` / ``HTTP_PROXY`` / ``ALL_PROXY`` in either
    case, not for a host ``NO_PROXY`` exempts), as aiohttp's keyword arguments. Never for this machine's own
    address (the embedded judge, a server on localhost): no proxy elsewhere could reach it."""
    parts = urllib.parse.urlsplit(url)
    if _loopback(parts.hostname) or (parts.hostname and urllib.request.proxy_bypass(parts.hostname)):
        return {}
    proxies = urllib.request.getproxies()
    proxy = proxies.get(parts.scheme) or proxies.get("all")
    if not proxy:
        return {}
    address = urllib.parse.urlsplit(proxy)
    if address.username is None:
        return {"proxy": proxy}
    bare = address._replace(netloc=address.netloc.rpartition("@")[2])
    user, password = urllib.parse.unquote(address.username), urllib.parse.unquote(address.password or "")
    credentials = base64.b64encode(f"{user}:{password}".encode()).decode()
    return {"proxy": urllib.parse.urlunsplit(bare), "proxy_headers": {"Proxy-Authorization": f"Basic {credentials}"}}


def _loopback(host: str | None) -> bool:
    if not host:
        return False
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


# A loop's sessions, by id of the judge they were opened for (with a weak reference to it, so a new judge at a
# recycled id never gets another judge's session, key included).
_Sessions = dict[int, tuple["weakref.ref[Any]", aiohttp.ClientSession]]


#: Seconds a session's close may take. aiohttp's close waits until every connection's transport says it is
#: closed; a run's end (or an interrupted run's cleanup) never waits on that longer.
CLOSE_S = 5.0


async def _closed(session: aiohttp.ClientSession) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(session.close(), CLOSE_S)


async def _close_all(sessions: _Sessions) -> None:
    for _, session in list(sessions.values()):
        await _closed(session)
    sessions.clear()


_SESSIONS: PerLoop[_Sessions] = PerLoop(dict, _close_all)


def _ssl_context() -> ssl.SSLContext:
    """The system's trusted certificates and certifi's (the SDK's httpx trusts certifi's only; a minimal
    system may have none of its own)."""
    context = ssl.create_default_context()
    try:
        import certifi
    except ImportError:  # pragma: no cover - certifi comes with httpx, a dependency of langchain-openai
        return context
    context.load_verify_locations(certifi.where())
    return context


def _new_session(endpoint: Endpoint) -> aiohttp.ClientSession:
    """A session for ``endpoint``. TLS is always verified: an https URL against the system's and certifi's
    certificates; an http one (a local server) makes no context of its own (~0.03 s), and would verify with
    aiohttp's default context if it ever met https."""
    https = endpoint.url.startswith("https:")
    connector = aiohttp.TCPConnector(
        limit=MAX_CONNECTIONS, keepalive_timeout=KEEPALIVE_S, ssl=_ssl_context() if https else True
    )
    timeout = aiohttp.ClientTimeout(total=None, sock_connect=endpoint.timeout, sock_read=endpoint.timeout)
    return aiohttp.ClientSession(connector=connector, timeout=timeout, headers=endpoint.headers)


async def _session(owner: Any, endpoint: Endpoint) -> aiohttp.ClientSession:
    """``owner``'s session on the running loop (opened on first use)."""
    sessions = await _SESSIONS.get()
    held = sessions.get(id(owner))
    if held is not None and held[0]() is owner and not held[1].closed:
        return held[1]
    if held is not None:
        await _closed(held[1])
    session = _new_session(endpoint)
    sessions[id(owner)] = (weakref.ref(owner), session)
    return session


async def close(owner: Any) -> None:
    """Close ``owner``'s session on the running loop, and its connections (a run's end); the next call opens a
    new one."""
    sessions = _SESSIONS.current()
    held = sessions.pop(id(owner), None) if sessions is not None else None
    if held is not None:
        await _closed(held[1])


async def post_chat(owner: Any, endpoint: Endpoint, payload: Mapping[str, Any]) -> dict[str, Any]:
    """POST ``payload`` (a chat-completions request; ChatOpenAI's ``extra_*`` and ``timeout`` options split off
    as the SDK splits them) and return the answer's JSON object."""
    body = {k: v for k, v in payload.items() if k not in _OPTIONS}
    body.update(payload.get("extra_body") or {})
    options: dict[str, Any] = dict(endpoint.proxy)
    if payload.get("extra_headers"):
        options["headers"] = dict(payload["extra_headers"])
    if payload.get("extra_query"):
        options["params"] = dict(payload["extra_query"])
    if "timeout" in payload:
        seconds = payload["timeout"]
        options["timeout"] = aiohttp.ClientTimeout(total=None, sock_connect=seconds, sock_read=seconds)
    data = json.dumps(body, ensure_ascii=False, separators=(",", ":"), allow_nan=False).encode()
    session = await _session(owner, endpoint)
    try:
        # No redirect is followed, as the SDK follows none: a 3xx is an error like any answer that is not 2xx.
        async with session.post(endpoint.url, data=data, allow_redirects=False, **options) as response:
            raw = await response.read()
            if response.status >= 300:
                raise HTTPStatusError(response.status, raw, response.headers)
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        raise TimeoutError(f"Request timed out ({type(exc).__name__})") from None
    except aiohttp.ClientError as exc:
        raise ConnectionError(f"Connection error: {exc or type(exc).__name__}") from None
    answer = json.loads(raw)
    if not isinstance(answer, dict):
        raise ValueError(f"the server's answer is not a JSON object: {raw[:200]!r}")
    return answer
