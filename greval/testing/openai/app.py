"""The test server over HTTP (aiohttp): ``/v1/chat/completions``, ``/v1/models`` and the ``/_admin`` API.

The admin API: ``POST /_admin/script`` appends rules (see `rules`), ``/_admin/reset`` clears rules, stats and the
request log, ``/_admin/config`` changes knobs; ``GET /_admin/stats`` and ``/_admin/requests`` (``?meta=1``: the
headers and query instead of the bodies; ``?limit=``) read them. The only module of the server that imports aiohttp.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import re
import socket
import sys
import threading
import time
from typing import Any, Final

from greval.testing.openai import missing_aiohttp
from greval.testing.openai.logprobs import choice_logprobs
from greval.testing.openai.protocol import (
    Answer,
    ChatRequest,
    classify,
    completion,
    error_body,
    fault_body,
    item_ids,
    output_text,
    prompt_text,
    refusal,
    stream_payload,
)
from greval.testing.openai.rules import FINISH, LOGPROBS_MODES, ServerConfig, State, count, parse_rule

try:
    from aiohttp import web
except ModuleNotFoundError as exc:  # one clear line rather than a bare "No module named 'aiohttp'"
    raise missing_aiohttp(exc) from None

__all__ = ["build_app", "serve"]

_STATE_KEY: Final = web.AppKey("greval_openai_state", State)


def _error(status: int, message: str, err_type: str, *, param: str | None = None) -> web.Response:
    return web.json_response(error_body(message, err_type, param=param), status=status)


# ------------------------------------------------------------------------------------------- chat completions
async def _chat_completions(request: web.Request) -> web.StreamResponse:
    state = request.app[_STATE_KEY]
    epoch = state.epoch
    state.total += 1
    state.in_flight += 1
    state.max_in_flight = max(state.max_in_flight, state.in_flight)
    status = 500
    try:
        response = await _answer(request, state)
        status = response.status
        return response
    finally:
        state.in_flight -= 1
        if state.epoch == epoch:
            count(state.by_status, str(status))


async def _answer(request: web.Request, state: State) -> web.StreamResponse:
    # Latency is counted from the moment the handler starts, and the answer is built inside that window:
    # a "200 ms model" then answers in 200 ms, not 200 ms plus this server's own Python work. Benchmarks
    # compare clients against requests × latency ÷ concurrency, so the server must not add to it.
    arrived = time.perf_counter()
    try:
        body = await request.json(loads=json.loads)
    except ValueError:
        return _error(400, "Request body is not valid JSON", "invalid_request_error")
    if not isinstance(body, dict) or not isinstance(body.get("messages"), list):
        return _error(400, "'messages' is a required property", "invalid_request_error", param="messages")
    state.log.append(body)
    state.meta_log.append({"headers": {k.lower(): v for k, v in request.headers.items()}, "query": dict(request.query)})
    prompt = prompt_text(body["messages"])
    req = classify(body, prompt)
    count(state.by_mode, req.mode)
    refused = refusal(body, state.config)
    if refused is not None:
        return web.json_response(refused, status=400)
    digest = hashlib.blake2b(prompt.encode(), digest_size=16).digest()
    action = state.action_for(prompt, digest)
    kind = action.get("type")
    latency = float(action.get("seconds", 0.0)) if kind in ("latency", "timeout") else state.config.latency
    if kind == "fault":
        response: web.StreamResponse = _fault(request, body, action)
    else:
        answer = _build_answer(state, body, req, prompt, digest, action)
        if body.get("stream"):
            await _wait(arrived, latency)
            return await _stream(request, answer)
        response = web.json_response(completion(answer, _logprobs(state.config, body, answer)))
    await _wait(arrived, latency)
    return response


async def _wait(arrived: float, latency: float) -> None:
    """Sleep what is left of the answer's latency since the request arrived."""
    remaining = latency - (time.perf_counter() - arrived)
    if remaining > 0:
        await asyncio.sleep(remaining)


def _fault(request: web.Request, body: dict[str, Any], action: dict[str, Any]) -> web.Response:
    headers = {}
    if action.get("retry_after") is not None:
        headers["Retry-After"] = f"{action['retry_after']:g}"
    status = int(action.get("status", 500))
    fault = fault_body(status, action, request.headers.get("Authorization", ""), body)
    return web.json_response(fault, status=status, headers=headers)


def _build_answer(
    state: State, body: dict[str, Any], req: ChatRequest, prompt: str, digest: bytes, action: dict[str, Any]
) -> Answer:
    """Each choice's text (the rule's action applied) and the completion's id."""
    kind = action.get("type")
    ids = item_ids(prompt)
    if ids is not None and kind == "drop_ids":
        dropped = {str(i) for i in action.get("ids") or []}
        ids = [i for i in ids if i not in dropped]
    elif ids is not None and kind == "extra_ids":
        ids = ids + [str(i) for i in action.get("ids") or [] if str(i) not in ids]
    n = max(1, int(body.get("n") or 1))
    seed = state.config.seed
    outputs = [output_text(req, kind, action, prompt, seed, i, ids) for i in range(n)]
    state.completion_counter += 1
    completion_id = f"chatcmpl-{digest.hex()[:12]}{state.completion_counter:08d}"
    cached = state.cached_words(prompt.split()) if state.config.prefix_cache else 0
    return Answer(body, req, outputs, completion_id, prompt, FINISH.get(str(kind)), cached)


def _logprobs(config: ServerConfig, body: dict[str, Any], answer: Answer) -> list[dict[str, Any]] | None:
    """Each choice's log-probabilities when the request asks for them and the knob is ``on``, else None."""
    if body.get("logprobs") is not True or config.logprobs != "on":
        return None
    top = max(0, min(20, int(body.get("top_logprobs") or 0)))
    return [choice_logprobs(answer, i, seed=config.seed, top=top) for i in range(len(answer.outputs))]


async def _stream(request: web.Request, answer: Answer) -> web.StreamResponse:
    response = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    await response.prepare(request)
    await response.write(stream_payload(answer))
    await response.write_eof()
    return response


async def _models(request: web.Request) -> web.Response:
    return web.json_response(
        {
            "object": "list",
            "data": [{"id": "greval-test", "object": "model", "created": 0, "owned_by": "greval"}],
        }
    )


# ------------------------------------------------------------------------------------------- the admin API
async def _admin_script(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    payload = await request.json()
    raw_rules = payload.get("rules") if isinstance(payload, dict) else payload
    if not isinstance(raw_rules, list):
        return _error(400, "expected a list of rules or {'rules': [...]}", "invalid_request_error")
    try:
        parsed = [parse_rule(len(state.rules) + i, raw) for i, raw in enumerate(raw_rules)]
    except (ValueError, TypeError, re.error) as exc:
        return _error(400, str(exc), "invalid_request_error")
    state.rules.extend(parsed)
    return web.json_response({"rules": len(state.rules)})


async def _admin_reset(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    state.rules.clear()
    state.log.clear()
    state.meta_log.clear()
    state.prefixes.clear()
    state.reset_stats()
    return web.json_response({"ok": True})


async def _admin_config(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    payload = await request.json()
    if not isinstance(payload, dict):
        return _error(400, "expected an object", "invalid_request_error")
    config = state.config
    if payload.get("latency") is not None:
        config.latency = float(payload["latency"])
    if payload.get("json_schema") is not None:
        config.json_schema = bool(payload["json_schema"])
    if payload.get("tools") is not None:
        config.tools = bool(payload["tools"])
    if payload.get("seed") is not None:
        config.seed = int(payload["seed"])
    if payload.get("logprobs") is not None:
        if payload["logprobs"] not in LOGPROBS_MODES:
            return _error(400, f"logprobs must be one of {list(LOGPROBS_MODES)}", "invalid_request_error")
        config.logprobs = str(payload["logprobs"])
    if payload.get("prefix_cache") is not None:
        config.prefix_cache = bool(payload["prefix_cache"])
        state.prefixes.clear()
    return web.json_response(
        {
            "latency": config.latency,
            "json_schema": config.json_schema,
            "tools": config.tools,
            "seed": config.seed,
            "logprobs": config.logprobs,
            "prefix_cache": config.prefix_cache,
        }
    )


async def _admin_stats(request: web.Request) -> web.Response:
    return web.json_response(request.app[_STATE_KEY].stats())


async def _admin_requests(request: web.Request) -> web.Response:
    state = request.app[_STATE_KEY]
    log = state.meta_log if request.query.get("meta") else state.log
    limit = int(request.query.get("limit", str(len(log))))
    entries = list(log)[-limit:] if limit > 0 else []
    return web.json_response(entries)


def build_app(config: ServerConfig | None = None) -> web.Application:
    """The aiohttp app; exposed so a benchmark can also run it in-process if it wants to."""
    app = web.Application(client_max_size=64 * 1024 * 1024)
    app[_STATE_KEY] = State(config or ServerConfig())
    app.router.add_post("/v1/chat/completions", _chat_completions)
    app.router.add_get("/v1/models", _models)
    app.router.add_post("/_admin/script", _admin_script)
    app.router.add_post("/_admin/reset", _admin_reset)
    app.router.add_post("/_admin/config", _admin_config)
    app.router.add_get("/_admin/stats", _admin_stats)
    app.router.add_get("/_admin/requests", _admin_requests)
    return app


# ------------------------------------------------------------------------------------------- serving
async def serve(host: str, port: int, config: ServerConfig, *, watch_stdin: bool = False) -> None:
    """Listen on ``host:port`` (0: any free port), print ``READY http://HOST:PORT/v1``, serve until cancelled
    (or, with ``watch_stdin``, until stdin reaches EOF)."""
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(1024)
    sock.setblocking(False)
    runner = web.AppRunner(build_app(config), access_log=None, handle_signals=False)
    await runner.setup()
    await web.SockSite(runner, sock, backlog=1024).start()
    actual = sock.getsockname()[1]
    shown = f"[{host}]" if ":" in host else host
    sys.stdout.write(f"READY http://{shown}:{actual}/v1\n")
    sys.stdout.flush()
    stop = asyncio.Event()
    if watch_stdin:
        # The parent holds our stdin open; EOF means it is gone (even if it crashed), so exit
        # instead of lingering as an orphan holding a port.
        loop = asyncio.get_running_loop()

        def wait_for_eof() -> None:
            sys.stdin.buffer.read()
            loop.call_soon_threadsafe(stop.set)

        threading.Thread(target=wait_for_eof, name="stdin-watch", daemon=True).start()
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
