"""The FastAPI app of ``greval serve``: greval's JSON API (``/v1/...``), LangServe routes per spec
(``/judges/<name>/...``), health and Prometheus metrics, behind one guard (API keys; the body read whole within
its size and time limits, its JSON checked before any route parses it; per-key concurrency limits; JSON errors
without tracebacks; one JSON access-log line per request). The connections' own limits (a header deadline, a
cap) are :mod:`greval.serve.connections`'.

Every judging route goes through :class:`greval.serve.service.JudgeService`: the store and cache ``greval run``
uses, in-flight sharing, new verdicts stored as they arrive.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import ipaddress
import json
import logging
import re
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from itertools import accumulate
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, RedirectResponse, Response
from pydantic import BaseModel, ConfigDict, Field
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.errors import DataError, GrevalError, StoreUnavailable, UserError, option
from greval.judge.schemas import input_model, record_fields
from greval.llm.config import JudgeConfig
from greval.llm.retry import JudgeUnavailable, redact
from greval.report.explorer.served import ServedReport
from greval.runner.options import RunOptions
from greval.serve.metrics import Metrics
from greval.serve.service import JudgeService, ServedVerdict
from greval.spec import BaseSpec, Spec
from greval.spec.verdict import verdict_models
from greval.store.backend import RECONNECT_WAIT_S

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

access_log = logging.getLogger("greval.serve.access")
error_log = logging.getLogger("greval.serve")

#: Routes anyone may call, keys or not (a load balancer's health check).
OPEN_PATHS = frozenset({"/healthz"})


class ServeSettings(BaseModel):
    """How the server guards itself (none of it changes a verdict)."""

    model_config = ConfigDict(frozen=True)

    api_keys: tuple[str, ...] = Field((), description="Accepted API keys; empty: no key asked (localhost only).")
    max_body: int = Field(1 << 20, ge=1, description="Largest request body in bytes (413 beyond).")
    max_records: int = Field(1000, ge=1, description="Records per request at most (413 beyond).")
    requests_per_key: int = Field(64, ge=1, description="Judging requests in flight per API key (429 beyond).")
    header_timeout: float = Field(
        10.0, gt=0, description="Seconds a connection has to send a request's headers (then it is closed)."
    )
    body_timeout: float = Field(
        30.0, gt=0, description="Seconds a request's whole body has to arrive after its headers (408 beyond)."
    )
    max_connections: int = Field(
        256, ge=1, description="Open connections per server process (a request on one more: 503, closed)."
    )
    store_wait: float = Field(
        RECONNECT_WAIT_S,
        ge=0,
        description="Seconds a request waits for a PostgreSQL store that stopped answering (then 503; the next "
        "request tries it again).",
    )
    drain_timeout: float | None = Field(
        None, description="Seconds shutdown waits for judgements in flight to be stored (None: as long as it takes)."
    )


def is_local(host: str) -> bool:
    """Whether binding ``host`` keeps the server to this machine."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_binding(host: str, keys: Sequence[str]) -> None:
    """Refuse to listen beyond localhost without API keys (one line says how to fix it)."""
    if not keys and not is_local(host):
        raise UserError(
            f"{option('host')} {host} listens beyond this machine: give API keys ({option('api_key')} KEY or "
            "GREVAL_SERVE_KEYS=K1,K2), or bind 127.0.0.1"
        )


def key_id(key: str) -> str:
    """A key as logs and metrics may name it: a short hash, never the key."""
    return hashlib.sha256(key.encode()).hexdigest()[:8]


#: A refusal sent before the request's body was read ends the connection: the body still on its way is not
#: read (a client could otherwise keep the connection busy sending it).
CLOSE = {"Connection": "close"}


class ServeError(GrevalError):
    """A request greval refuses or cannot answer: status, kind, message, the field at fault, extra headers."""

    def __init__(
        self, status: int, kind: str, message: str, field: str | None = None, headers: dict[str, str] | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.field = status, kind, message, field
        self.headers = headers or {}

    def response(self) -> JSONResponse:
        body: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return JSONResponse({"error": body}, status_code=self.status, headers=self.headers)


def _error(status: int, kind: str, message: str, field: str | None = None) -> JSONResponse:
    return ServeError(status, kind, message, field).response()


async def _send_json(send: Send, response: JSONResponse, scope: Scope) -> None:
    async def no_body() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    await response(scope, no_body, send)


#: What a request body's JSON may hold, checked before any route parses it (so that every route answers 400,
#: not a parser's RecursionError or ValueError as a 500): nesting depth (Python's parser recurses per level) and
#: the digits of one number (Python refuses to read an integer of more than 4,300 digits).
MAX_JSON_DEPTH = 100
MAX_NUMBER_DIGITS = 4300
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"')
_DIGITS = bytes(b if b in b"0123456789" else 32 for b in range(256)).replace(b"123456789", b"000000000")
_RUN = b"0" * (MAX_NUMBER_DIGITS + 1)
_NOT_BRACKETS = bytes(b for b in range(256) if b not in b"[]{}")
_NESTING = [1 if b in b"[{" else -1 if b in b"]}" else 0 for b in range(256)]


def _long_number(text: bytes) -> bool:
    return _RUN in text.translate(_DIGITS)


def _depth(text: bytes) -> int:
    return max(accumulate(map(_NESTING.__getitem__, text.translate(None, _NOT_BRACKETS))), default=0)


def json_problem(body: bytes) -> str | None:
    """Why ``body`` is JSON no route may parse (not UTF-8, nested too deep, a number too long), or None.

    A scan, not a parse; a body that is merely malformed is left to the route (a 422). First over the whole body,
    its strings included (a bound, about as costly as parsing the body); only when that bound is over a limit,
    again with the strings blanked out (a few times slower), so that a bracket or a digit inside a string
    counts for nothing."""
    try:
        body.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 (byte {exc.start})"
    if not _long_number(body) and _depth(body) <= MAX_JSON_DEPTH:
        return None
    bare = _STRING.sub(b'""', body)
    if _long_number(bare):
        return f"a number of more than {MAX_NUMBER_DIGITS} digits"
    if _depth(bare) > MAX_JSON_DEPTH:
        return f"JSON nested deeper than {MAX_JSON_DEPTH} levels"
    return None


def _replay(body: bytes, receive: Receive) -> Receive:
    """The body the guard read, handed to the route as one message; then the connection's own events (the
    disconnect a streaming route listens for)."""
    given = False

    async def replay() -> Message:
        nonlocal given
        if given:
            return await receive()
        given = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


def log_access(scope: Scope, route: str, status: int, seconds: float, key: str | None, kind: str | None) -> None:
    """The access log's one JSON line for a request (keys named by their hash)."""
    line = {
        "ts": round(time.time(), 3),
        "method": scope["method"],
        "path": scope["path"],
        "route": route,
        "status": status,
        "ms": round(seconds * 1000, 2),
        "key": key,
        "client": (scope.get("client") or (None,))[0],
    }
    access_log.info(json.dumps({**line, **({"error": kind} if kind else {})}))


class Guard:
    """Pure ASGI middleware around every route: keys, the body (read whole, within its size and time limits,
    its JSON checked), per-key limits, JSON errors, metrics, access log."""

    def __init__(self, app: ASGIApp, settings: ServeSettings, metrics: Metrics) -> None:
        self.app = app
        self.settings = settings
        self.metrics = metrics
        self.keys = [k.encode() for k in settings.api_keys]
        self.busy: dict[str, int] = {}

    def _key(self, scope: Scope) -> str | None:
        """The API key the request sends (Authorization: Bearer, X-API-Key, or the playground's cookie)."""
        headers: dict[str, str] = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        auth = headers.get("authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        if "x-api-key" in headers:
            return headers["x-api-key"].strip()
        for part in headers.get("cookie", "").split(";"):
            name, _, value = part.strip().partition("=")
            if name == "greval_api_key":
                return value
        return None

    def _valid(self, key: str | None) -> bool:
        if key is None:
            return False
        given = key.encode()
        return any(hmac.compare_digest(given, k) for k in self.keys)  # every key compared: no early exit

    def _caller(self, scope: Scope) -> str | None:
        """The hash of the request's valid key (None when no key is asked); a 401 without one."""
        if not self.keys or scope["path"] in OPEN_PATHS:
            return None
        key = self._key(scope)
        if key is None or not self._valid(key):
            message = "missing or wrong API key: send Authorization: Bearer KEY"
            raise ServeError(401, "unauthorized", message, None, {"WWW-Authenticate": "Bearer", **CLOSE})
        return key_id(key)

    def _too_large(self) -> ServeError:
        return ServeError(
            413,
            "body_too_large",
            f"request body over {self.settings.max_body} bytes (the server's {option('max_body')})",
            "body",
            CLOSE,
        )

    async def _body(self, scope: Scope, receive: Receive) -> bytes:
        """The whole request body: at most ``max_body`` bytes (413), complete within ``body_timeout`` seconds of
        the headers (408: a client sending it a byte at a time holds nothing for long), its JSON readable (400)."""
        length = dict(scope.get("headers", [])).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.settings.max_body:
            raise self._too_large()
        chunks: list[bytes] = []
        size, more = 0, True
        try:
            async with asyncio.timeout(self.settings.body_timeout):
                while more:
                    message = await receive()
                    if message["type"] != "http.request":
                        raise ServeError(400, "incomplete_body", "the client left before its body was complete", "body")
                    chunks.append(message.get("body", b""))
                    size, more = size + len(chunks[-1]), message.get("more_body", False)
                    if size > self.settings.max_body:
                        raise self._too_large()
        except TimeoutError:
            within = f"{self.settings.body_timeout:g} s (the server's {option('body_timeout')})"
            late = f"request body not complete within {within}"
            raise ServeError(408, "body_timeout", late, "body", CLOSE) from None
        body = b"".join(chunks)
        problem = json_problem(body) if body else None
        if problem is not None:
            raise ServeError(400, "invalid_json", f"request body: {problem}", "body")
        return body

    def _hold(self, scope: Scope, who: str | None) -> str | None:
        """Count a judging request (POST) against its key's (or client's) requests in flight; a 429 beyond."""
        if scope["method"] != "POST":
            return None
        holder = who or (scope.get("client") or ("?",))[0]
        if self.busy.get(holder, 0) >= self.settings.requests_per_key:
            message = f"more than {self.settings.requests_per_key} judging requests in flight for this key"
            raise ServeError(429, "too_many_requests", message, None, {"Retry-After": "1"})
        self.busy[holder] = self.busy.get(holder, 0) + 1
        return holder

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [0]
        who: str | None = None
        holder: str | None = None
        state = scope.setdefault("state", {})

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            who = self._caller(scope)
            body = await self._body(scope, receive)
            holder = self._hold(scope, who)
            await self.app(scope, _replay(body, receive), sending)
        except ServeError as exc:  # the guard's own refusals
            state["error_kind"] = exc.kind
            if not status[0]:
                await _send_json(sending, exc.response(), scope)
        except Exception as exc:  # no traceback, no secret: one redacted line in the log, a JSON 500 out
            state["error_kind"] = "internal"
            method, path = scope["method"], scope["path"]
            error_log.error("internal error on %s %s: %s", method, path, redact(f"{type(exc).__name__}: {exc}"))
            if not status[0]:
                await _send_json(sending, _error(500, "internal", "internal error (see the server's log)"), scope)
        finally:
            if holder is not None:
                self.busy[holder] -= 1
                if not self.busy[holder]:
                    del self.busy[holder]
            self._record(scope, status[0], time.perf_counter() - started, who)

    def _record(self, scope: Scope, status: int, seconds: float, who: str | None) -> None:
        """Metrics and the access log line of a finished request."""
        # The route's template (a bounded set): a request refused before routing, or to no route, is "unrouted".
        route = getattr(scope.get("route"), "path", None) or "unrouted"
        self.metrics.observe(scope["method"], route, status, seconds)
        kind = scope["state"].get("error_kind") or (f"http_{status}" if status >= 400 else None)
        if kind:
            self.metrics.error(kind)
        log_access(scope, route, status, seconds, who, kind)


# ------------------------------------------------------------------------------------------- models
class JudgeRequest(BaseModel):
    """``POST /v1/judge``: one or more specs over one or more records (fields as in a dataset row)."""

    spec: str | list[str] = Field(description="A served spec's name, or several.")
    records: list[dict[str, Any]] = Field(description="Records: objects of fields (question, answer, chunks, …).")


class RecordVerdicts(BaseModel):
    id: str
    hash: str = Field(description="The record's content hash.")
    cached: bool = Field(description="Every verdict of this record came from the store (no model call).")
    verdicts: dict[str, ServedVerdict]


class JudgeResponse(BaseModel):
    results: list[RecordVerdicts]
    calls: int = Field(description="Model calls this request made.")


def _field_of(row: dict[str, Any], message: str, index: int | None) -> str:
    """The field a DataError is about (chunks / triples / conversation / the id), for the error's ``field``."""
    prefix = "records" if index is None else f"records[{index}]"
    if " conversation" in message and "conversation" in row:
        return f"{prefix}.conversation"
    for name in ("chunks", "triples", "chunk", "triple"):
        if f" {name}" in message and name.rstrip("s") + "s" in row:
            return f"{prefix}.{name.rstrip('s')}s"
    if "id column" in message or "ids" in message:
        return f"{prefix}.id"
    if "field '" in message:
        return f"{prefix}.{message.split(chr(39))[1]}"
    return prefix


def to_record(row: Any, index: int | None = None) -> Record:
    """A request's record as a Record (normalised and hashed as ``greval run`` does), or a 422 naming it."""
    where = "input" if index is None else f"records[{index}]"
    try:
        fields = record_fields(row)
    except TypeError:
        raise ServeError(422, "invalid_record", f"{where}: a record must be an object of fields", where) from None
    except ValueError as exc:
        field = f"{where}.{str(exc).split(':', 1)[0]}"
        raise ServeError(422, "invalid_record", f"{where}: {exc}", field) from None
    try:
        return Record.from_mapping(fields, where=where)
    except DataError as exc:
        raise ServeError(422, "invalid_record", str(exc), _field_of(fields, str(exc), index)) from None


def invalid_response(exc: RequestValidationError) -> JSONResponse:
    """A request its route refused (422), naming the first field at fault. LangServe's routes raise their
    "Invalid JSON body" as a bare string; FastAPI's JSON error carries the position in ``loc``."""
    errors: list[dict[str, Any]] = [
        e if isinstance(e, dict) else {"loc": ("body",), "msg": str(e), "type": "invalid"} for e in exc.errors()
    ]
    first: dict[str, Any] = errors[0] if errors else {"loc": (), "msg": "invalid request"}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    field = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or "body"
    message = f"{field}: {first.get('msg')}"
    if first.get("type") == "json_invalid":
        field = "body"
        at = f" at character {loc[0]}" if loc else ""
        why = (first.get("ctx") or {}).get("error", "decode error")
        message = f"body: not JSON ({why}{at})"
    detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in errors]
    body = {"kind": "invalid_request", "message": message, "field": field}
    return JSONResponse({"error": body, "detail": detail}, status_code=422)


def _judge_failure(exc: Exception) -> ServeError:
    if isinstance(exc, StoreUnavailable):  # asked again, the service opens the store again (JudgeService)
        return ServeError(503, "store_unavailable", redact(str(exc)))
    if isinstance(exc, JudgeUnavailable):
        return ServeError(503, f"judge_{exc.kind.value}", redact(str(exc)))
    if isinstance(exc, UserError):
        return ServeError(503, "judge_unavailable", redact(str(exc)))
    raise exc


# ---------------------------------------------------------------------------------------------- app
def create_app(
    specs: Sequence[BaseSpec],
    store_path: str | Path,
    judge_config: JudgeConfig,
    options: RunOptions | None = None,
    settings: ServeSettings | None = None,
    *,
    model: Any = None,
    langserve: bool = True,
) -> FastAPI:
    """The served app: ``specs`` (dependencies included) judged by ``judge_config`` into the store at
    ``store_path``. ``options``: as ``greval run``'s (concurrency, method, retries). ``model``: a chat model
    to use instead of building one from the config (tests)."""
    settings = settings or ServeSettings()
    service = JudgeService(specs, store_path, judge_config, options, model=model, store_wait=settings.store_wait)
    metrics = Metrics()
    models = {s.name: input_model(s, service.closure([s.name])[:-1], closed=True) for s in service.specs}
    ui = ServedReport(store_path)
    app = FastAPI(
        title="greval serve",
        description="LLM-judge metrics over HTTP, sharing greval's verdict store and cache.",
        lifespan=_lifespan(service, ui, settings),
    )
    app.state.service = service
    app.state.metrics = metrics
    _add_error_handlers(app)
    app.state.ui = ui
    _add_ui_routes(app, ui)
    _add_operations_routes(app, service, metrics)
    _add_v1_routes(app, service, models, settings, langserve)
    if langserve:
        add_judge_routes(app, service, models, settings)
    app.add_middleware(Guard, settings=settings, metrics=metrics)
    return app


def _lifespan(
    service: JudgeService, ui: ServedReport, settings: ServeSettings
) -> Callable[[FastAPI], AbstractAsyncContextManager[None]]:
    """The app's life: the store opened and the judge warmed first; at the end the judgements in flight
    drained, the store closed and a report build under way ended."""

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        service.open()
        problem = service.warm()
        if problem is not None:
            error_log.warning("the judge is not ready (judging requests will answer 503): %s", problem)
        try:
            yield
        finally:
            # uvicorn has let the requests in flight finish; judgements whose client went away are stored too.
            await service.drain(settings.drain_timeout)
            service.close()
            await run_in_threadpool(ui.close)  # ends the report build under way, if any

    return lifespan


def _add_error_handlers(app: FastAPI) -> None:
    """Every error as greval's JSON error, its kind kept for the access log."""

    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError) -> JSONResponse:
        request.state.error_kind = exc.kind
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        request.state.error_kind = "invalid_request"
        return invalid_response(exc)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
        request.state.error_kind = kind
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail, default=str)
        return JSONResponse({"error": {"kind": kind, "message": detail}}, status_code=exc.status_code)


def _add_ui_routes(app: FastAPI, ui: ServedReport) -> None:
    @app.get("/ui", include_in_schema=False)
    async def ui_root() -> RedirectResponse:
        return RedirectResponse("/ui/")

    @app.get("/ui/{path:path}", include_in_schema=False)
    async def ui_file(request: Request, path: str) -> Response:
        """The store's report and record explorer (greval.report.explorer.served), as `greval report` writes
        them: the last build at once, the next one built in the background when the store changed."""
        # the route's pattern ends in `$`, which also matches before a final newline: "/ui/\n" is not "/ui/"
        whole = request.scope["path"] == "/ui/" + path
        found = await run_in_threadpool(ui.file, path) if whole else None
        if found is None:
            shown = path if len(path) <= 100 else path[:100] + "…"
            raise ServeError(404, "not_found", f"no file {shown!r} in the report", "path")
        headers = {"Cache-Control": "no-cache", **found.headers}
        return Response(found.body, status_code=found.status, media_type=found.media_type, headers=headers)


def _add_operations_routes(app: FastAPI, service: JudgeService, metrics: Metrics) -> None:
    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "inflight": service.inflight}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["operations"])
    async def prometheus() -> PlainTextResponse:
        text = metrics.render(service.stats, service.inflight)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")


def _known(service: JudgeService, names: Sequence[str]) -> None:
    """A 404 for a spec the server does not serve."""
    for name in names:
        if name not in service.by_name:
            raise ServeError(
                404, "unknown_spec", f"no served spec {name!r} (served: {', '.join(service.by_name)})", "spec"
            )


def _add_v1_routes(
    app: FastAPI,
    service: JudgeService,
    models: dict[str, type[BaseModel]],
    settings: ServeSettings,
    langserve: bool,
) -> None:
    """greval's own API: judge records, the served specs, a record's stored verdicts."""

    @app.post("/v1/judge", response_model=JudgeResponse, tags=["greval"])
    async def judge(body: JudgeRequest) -> JudgeResponse:
        return await _judge(service, settings, body)

    @app.get("/v1/specs", tags=["greval"])
    async def list_specs() -> list[dict[str, Any]]:
        return [
            {
                "name": s.name,
                "kind": s.kind,
                "description": s.description,
                "hash": s.hash,
                "key": service.keys[s.name],
                "each": s.each,
                "depends_on": s.depends_on,
                "route": f"/judges/{s.name}" if langserve else None,
            }
            for s in service.specs
        ]

    @app.get("/v1/specs/{name}", tags=["greval"])
    async def show_spec(name: str) -> dict[str, Any]:
        _known(service, [name])
        return _spec_page(service, models, name)

    @app.get("/v1/results", tags=["greval"])
    async def results(record_id: str, spec: str | None = None) -> dict[str, Any]:
        names = [spec] if spec else [s.name for s in service.specs]
        _known(service, names)
        try:
            stored = service.stored(names, record_id)
        except StoreUnavailable as exc:
            raise _judge_failure(exc) from None
        return {"record_id": record_id, "verdicts": [v.model_dump(mode="json") for v in stored]}


async def _judge(service: JudgeService, settings: ServeSettings, body: JudgeRequest) -> JudgeResponse:
    """``POST /v1/judge``: the records judged (the store first) by each named spec."""
    names = [body.spec] if isinstance(body.spec, str) else list(body.spec)
    if not names:
        raise ServeError(422, "invalid_request", "spec: name at least one spec", "spec")
    _known(service, names)
    if len(body.records) > settings.max_records:
        raise ServeError(
            413,
            "too_many_records",
            f"{len(body.records)} records: at most {settings.max_records} per request (the server's "
            f"{option('max_records')})",
            "records",
        )
    records = [to_record(r, i) for i, r in enumerate(body.records)]
    try:
        got = await service.judge(names, records)
    except Exception as exc:
        raise _judge_failure(exc) from None
    results = [
        RecordVerdicts(id=r.id, hash=r.hash, cached=all(v.cached for v in g.values()), verdicts=g)
        for r, g in zip(records, got, strict=True)
    ]
    calls = sum(v.calls for g in got for v in g.values())
    return JudgeResponse(results=results, calls=calls)


def _spec_page(service: JudgeService, models: dict[str, type[BaseModel]], name: str) -> dict[str, Any]:
    """``GET /v1/specs/{name}``: the spec, its keys and judge, and the schemas of what it reads and answers."""
    s = service.by_name[name]
    answer: dict[str, Any] | None = None
    if isinstance(s, Spec):
        answer = verdict_models(s)[0].model_json_schema()
    return {
        "name": s.name,
        "kind": s.kind,
        "hash": s.hash,
        "key": service.keys[s.name],
        "judge_key": service.cfgs[s.name].key,
        "judge": service.cfgs[s.name].label,
        "spec": s.model_dump(mode="json"),
        "input_schema": models[name].model_json_schema(),
        "verdict_schema": ServedVerdict.model_json_schema(),
        "answer_schema": answer,
    }


def add_judge_routes(
    app: FastAPI, service: JudgeService, models: dict[str, type[BaseModel]], settings: ServeSettings
) -> None:
    """LangServe routes per spec at ``/judges/<name>``: invoke, batch, stream, input / output schema and the
    playground, each answering through the service (the store first, as ``/v1/judge``)."""
    from langserve import add_routes

    for s in service.specs:
        add_routes(
            app,
            served_runnable(service, s.name, models[s.name], settings.max_records),
            path=f"/judges/{s.name}",
            disabled_endpoints=["config_hashes", "stream_events"],
        )


def served_runnable(service: JudgeService, name: str, model_in: type[BaseModel], max_inputs: int) -> Any:
    """A spec as a runnable answering through the service: record in (``model_in``), :class:`ServedVerdict`
    out. ``abatch`` refuses more than ``max_inputs`` records at once."""
    from langchain_core.runnables import RunnableLambda

    async def ajudge(inp: Any) -> ServedVerdict:
        record = to_record(inp)
        try:
            return (await service.judge([name], [record]))[0][name]
        except Exception as exc:
            raise _judge_failure(exc) from None

    def judge_blocking(inp: Any) -> ServedVerdict:
        return run_sync(ajudge(inp))

    class Capped(RunnableLambda[Any, ServedVerdict]):
        async def abatch(self, inputs: list[Any], *args: Any, **kwargs: Any) -> list[ServedVerdict]:
            if len(inputs) > max_inputs:
                raise ServeError(
                    413, "too_many_records", f"{len(inputs)} inputs: at most {max_inputs} per batch", "inputs"
                )
            return await super().abatch(inputs, *args, **kwargs)

    return Capped(judge_blocking, afunc=ajudge, name=f"greval:{name}").with_types(
        input_type=model_in, output_type=ServedVerdict
    )
