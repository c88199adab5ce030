"""greval's own chat-completions client (greval.llm.wire): what it sends and where, the SDK whenever a setting or a
tracer needs it, its failures classified as the SDK's are, and one session per event loop, closed with it.
(That the body and headers are ChatOpenAI's, and the answer read alike: tests/judge/test_openai_chat.py. That a
run imports no openai SDK: tests/test_cli_startup.py.)"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import gc
import shutil
import socket
import ssl
import subprocess
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import SecretStr

from greval._sync import run_sync
from greval.llm import wire
from greval.llm.call import ModelCall
from greval.llm.openai_chat import OpenAICall, OpenAIChat, sdk_reason
from greval.llm.retry import classify, describe_error
from greval.testing.openai_server import OpenAIServer
from greval.types import ErrorKind
from tests.conftest import TEST_KEY

MESSAGES: list[Any] = [{"role": "system", "content": "Answer in JSON."}, {"role": "user", "content": "2+2?"}]
JSON_MODE = {"response_format": {"type": "json_object"}}


def _chat(base_url: str | None, timeout: float = 10.0) -> OpenAIChat:
    return OpenAIChat(model="judge-test", api_key=SecretStr(TEST_KEY), base_url=base_url, timeout=timeout)


def _sent_by_sdk(headers: dict[str, str]) -> bool:
    return any(k.startswith("x-stainless") for k in headers)


def test_the_base_url_organisation_and_project_come_from_the_environment_as_the_sdk_reads_them(
    llm: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No base URL given: OPENAI_BASE_URL; OPENAI_ORG_ID and OPENAI_PROJECT_ID become the headers ChatOpenAI's SDK
    client sends — compared on the wire with it."""
    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    monkeypatch.setenv("OPENAI_ORG_ID", "org-greval-test")
    monkeypatch.setenv("OPENAI_PROJECT_ID", "proj-greval-test")
    chat = _chat(None)
    call = OpenAICall(chat, JSON_MODE)
    assert call.direct and sdk_reason() is None
    llm.reset()
    run_sync(ModelCall(chat.langchain().bind(**JSON_MODE))(MESSAGES))
    run_sync(call(MESSAGES))
    lc, direct = llm.request_meta(limit=2)
    assert _sent_by_sdk(lc["headers"]) and not _sent_by_sdk(direct["headers"])
    for name in ("openai-organization", "openai-project", "authorization", "content-type"):
        assert direct["headers"][name] == lc["headers"][name], name
    assert direct["headers"]["openai-organization"] == "org-greval-test"
    lc_body, direct_body = llm.requests(limit=2)
    assert direct_body == lc_body


def test_a_setting_only_the_sdk_applies_sends_the_call_through_it(
    llm: OpenAIServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_CUSTOM_HEADERS", "X-Team: evals")
    assert sdk_reason() == "OPENAI_CUSTOM_HEADERS is set (a setting of the openai SDK)"
    llm.reset()
    reply = run_sync(OpenAICall(_chat(llm.base_url), JSON_MODE)(MESSAGES))
    (meta,) = llm.request_meta(limit=1)
    assert _sent_by_sdk(meta["headers"]) and meta["headers"]["x-team"] == "evals"
    assert reply.response_metadata["finish_reason"] == "stop"


@pytest.fixture
def traced_sdk() -> Iterator[Any]:
    """The openai SDK instrumented by OpenInference, its spans kept in memory; uninstrumented afterwards (the
    instrumentation is process-wide)."""
    from openinference.instrumentation.openai import OpenAIInstrumentor
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    try:
        yield exporter
    finally:
        instrumentor.uninstrument()


def test_an_instrumented_sdk_gets_the_calls_so_that_they_are_traced(llm: OpenAIServer, traced_sdk: Any) -> None:
    """A user who traces the openai SDK (OpenInference here) still sees greval's judge calls as spans."""
    assert sdk_reason() == "the openai SDK is instrumented (its calls are traced)"
    llm.reset()
    run_sync(OpenAICall(_chat(llm.base_url), JSON_MODE)(MESSAGES))
    assert _sent_by_sdk(llm.request_meta(limit=1)[0]["headers"])
    spans = traced_sdk.get_finished_spans()
    assert [s.attributes.get("llm.model_name") for s in spans] == ["judge-test"]


def test_without_tracing_the_call_is_greval_s_own_again(llm: OpenAIServer) -> None:
    assert sdk_reason() is None
    llm.reset()
    run_sync(OpenAICall(_chat(llm.base_url), JSON_MODE)(MESSAGES))
    assert not _sent_by_sdk(llm.request_meta(limit=1)[0]["headers"])


def test_a_timeout_and_a_refused_connection_are_classified_as_the_sdk_s(llm: OpenAIServer) -> None:
    llm.configure(latency=3.0)
    with pytest.raises(TimeoutError) as slow:
        run_sync(OpenAICall(_chat(llm.base_url, timeout=0.5), JSON_MODE)(MESSAGES))
    assert classify(slow.value).kind is ErrorKind.TIMEOUT
    assert describe_error(slow.value).startswith("timeout: Request timed out")
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(ConnectionError) as refused:
        run_sync(OpenAICall(_chat(f"http://127.0.0.1:{port}/v1"), JSON_MODE)(MESSAGES))
    assert classify(refused.value).kind is ErrorKind.CONNECTION
    assert f"127.0.0.1:{port}" in describe_error(refused.value)


def test_an_error_status_keeps_its_body_and_retry_after() -> None:
    """What greval.llm.retry reads of a refusal: the status, the error object (or the text of a non-JSON
    answer), Retry-After — as the SDK's error carries them."""
    limited = wire.HTTPStatusError(
        429, b'{"error": {"message": "slow down", "code": "rate_limit_exceeded"}}', {"retry-after": "7"}
    )
    assert (classify(limited).kind, classify(limited).status, classify(limited).retry_after) == (
        ErrorKind.RATE_LIMITED,
        429,
        7.0,
    )
    assert describe_error(limited) == "rate_limited: HTTP 429: slow down"
    gateway = wire.HTTPStatusError(502, b"<html>Bad gateway</html>", {})
    assert classify(gateway).kind is ErrorKind.SERVER_ERROR
    assert describe_error(gateway) == "server_error: HTTP 502: <html>Bad gateway</html>"


def test_each_event_loop_gets_its_own_session_closed_with_the_loop(llm: OpenAIServer) -> None:
    """The background loop (run_sync) and two asyncio.run loops call the same judge: each on its own connections
    (a connection used from another loop fails), each loop's session closed when the loop shuts down — no
    'Unclosed client session' left for the garbage collector."""
    chat = _chat(llm.base_url)
    call = OpenAICall(chat, JSON_MODE)
    sessions: list[Any] = []

    async def once() -> None:
        await call(MESSAGES)
        held = wire._SESSIONS.current()
        assert held is not None
        sessions.append(held[id(chat)][1])

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_sync(once())
        asyncio.run(once())
        asyncio.run(once())
        gc.collect()
    assert len({id(s) for s in sessions}) == 3
    assert [s.closed for s in sessions] == [False, True, True]  # the background loop lives on
    assert not [w for w in caught if "Unclosed" in str(w.message)], [str(w.message) for w in caught]
    run_sync(chat.aclose())  # a run's end: the background loop's session too
    assert sessions[0].closed


def test_the_proxy_comes_from_the_environment_once(llm: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """HTTP_PROXY / NO_PROXY as the SDK's httpx client reads them. The test server stands in for the proxy: a
    request for a host that does not exist reaches it only through the proxy setting."""
    origin = llm.base_url.removesuffix("/v1")
    monkeypatch.setenv("HTTP_PROXY", origin)
    monkeypatch.delenv("http_proxy", raising=False)
    monkeypatch.setenv("NO_PROXY", "exempt.invalid")
    monkeypatch.delenv("no_proxy", raising=False)
    llm.reset()
    reply = run_sync(OpenAICall(_chat("http://judge.invalid/v1"), JSON_MODE)(MESSAGES))
    assert reply.response_metadata["finish_reason"] == "stop" and llm.stats()["total"] == 1
    assert wire.Endpoint.of("http://exempt.invalid/v1", "k", 1.0).proxy == {}
    for local in ("http://127.0.0.1:8080/v1", "http://localhost:8080/v1", "http://[::1]:8080/v1"):
        assert wire.Endpoint.of(local, "k", 1.0).proxy == {}, local  # the embedded judge: never through a proxy
    monkeypatch.setenv("HTTP_PROXY", "http://someone:p%40ss@proxy.invalid:3128")
    proxied = wire.Endpoint.of("http://judge.invalid/v1", "k", 1.0).proxy
    assert proxied["proxy"] == "http://proxy.invalid:3128"
    credentials = base64.b64decode(proxied["proxy_headers"]["Proxy-Authorization"].removeprefix("Basic "))
    assert credentials == b"someone:p@ss"


@pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command to make a certificate")
def test_https_is_verified(tmp_path: Path) -> None:
    """A TLS server with a self-signed certificate is refused (certificate verify failed), as a connection error
    greval classifies: the key is never sent to a server that cannot prove its name."""
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    make = ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1"]
    subprocess.run([*make, "-keyout", str(key), "-out", str(cert)], check=True, capture_output=True)
    server_side = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_side.load_cert_chain(cert, key)
    heard: list[bytes] = []

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(Exception):
            heard.append(await reader.read(1000))
        writer.close()

    async def attempt() -> BaseException:
        server = await asyncio.start_server(serve, "127.0.0.1", 0, ssl=server_side)
        port = server.sockets[0].getsockname()[1]
        chat = _chat(f"https://127.0.0.1:{port}/v1")
        try:
            await OpenAICall(chat, JSON_MODE)(MESSAGES)
        except Exception as exc:
            return exc
        finally:
            await chat.aclose()
            server.close()
        raise AssertionError("the self-signed server was trusted")

    refused = asyncio.run(attempt())
    assert isinstance(refused, ConnectionError) and classify(refused).kind is ErrorKind.CONNECTION
    assert "certificate verify failed" in str(refused)
    assert not [b for b in heard if b"Authorization" in b]
