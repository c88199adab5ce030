"""The FastAPI app of ``greval serve``: greval's JSON API (``/v1/...``), LangServe routes per spec
(``/judges/<name>/...``), health and Prometheus metrics, behind one guard (API keys, body and per-key
concurrency limits, JSON errors without tracebacks, one JSON access-log line per request).

Every judging route goes through :class:`greval.serve.service.JudgeService`: the store and cache ``greval run``
uses, in-flight sharing, new verdicts stored as they arrive.
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, MutableMapping, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.exceptions import HTTPException as StarletteHTTPException

from greval.dataset.records import Record
from greval.errors import DataError, UserError, option
from greval.judge.schemas import input_model, record_fields
from greval.llm.config import JudgeConfig
from greval.llm.retry import JudgeUnavailable, redact
from greval.runner import RunOptions
from greval.serve.metrics import Metrics
from greval.serve.service import JudgeService, ServedVerdict
from greval.spec import BaseSpec, Spec

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


class ServeError(Exception):
    """A request greval refuses or cannot answer: status, kind, message and the field at fault."""

    def __init__(self, status: int, kind: str, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.kind, self.message, self.field = status, kind, message, field

    def response(self) -> JSONResponse:
        body: dict[str, Any] = {"kind": self.kind, "message": self.message}
        if self.field is not None:
            body["field"] = self.field
        return JSONResponse({"error": body}, status_code=self.status)


class _BodyTooLarge(Exception):
    pass


def _error(status: int, kind: str, message: str, field: str | None = None) -> JSONResponse:
    return ServeError(status, kind, message, field).response()


async def _send_json(send: Send, response: JSONResponse, scope: Scope) -> None:
    async def no_body() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    await response(scope, no_body, send)


class Guard:
    """Pure ASGI middleware around every route: keys, limits, JSON errors, metrics, access log."""

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

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        status = [0]
        method, path = scope["method"], scope["path"]
        who: str | None = None
        holder: str | None = None
        state = scope.setdefault("state", {})

        async def sending(message: Message) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            if self.keys and path not in OPEN_PATHS:
                key = self._key(scope)
                if not self._valid(key):
                    state["error_kind"] = "unauthorized"
                    resp = _error(401, "unauthorized", "missing or wrong API key: send Authorization: Bearer KEY")
                    resp.headers["WWW-Authenticate"] = "Bearer"
                    await _send_json(sending, resp, scope)
                    return
                assert key is not None
                who = key_id(key)
            headers = dict(scope.get("headers", []))
            length = headers.get(b"content-length")
            limit = self.settings.max_body
            if length is not None and length.isdigit() and int(length) > limit:
                state["error_kind"] = "body_too_large"
                await _send_json(sending, self._too_large(), scope)
                return
            if method == "POST":
                holder = who or (scope.get("client") or ("?",))[0]
                if self.busy.get(holder, 0) >= self.settings.requests_per_key:
                    holder = None
                    state["error_kind"] = "too_many_requests"
                    resp = _error(
                        429,
                        "too_many_requests",
                        f"more than {self.settings.requests_per_key} judging requests in flight for this key",
                    )
                    resp.headers["Retry-After"] = "1"
                    await _send_json(sending, resp, scope)
                    return
                self.busy[holder] = self.busy.get(holder, 0) + 1
            seen = [0]

            async def counted() -> Message:
                message = await receive()
                if message["type"] == "http.request":
                    seen[0] += len(message.get("body", b""))
                    if seen[0] > limit:
                        state["body_too_large"] = True  # FastAPI turns a failed body read into a 400
                        raise _BodyTooLarge()
                return message

            await self.app(scope, counted, sending)
        except _BodyTooLarge:
            state["error_kind"] = "body_too_large"
            if not status[0]:
                await _send_json(sending, self._too_large(), scope)
        except Exception as exc:  # no traceback, no secret: one redacted line in the log, a JSON 500 out
            state["error_kind"] = "internal"
            error_log.error("internal error on %s %s: %s", method, path, redact(f"{type(exc).__name__}: {exc}"))
            if not status[0]:
                await _send_json(sending, _error(500, "internal", "internal error (see the server's log)"), scope)
        finally:
            if holder is not None:
                self.busy[holder] -= 1
                if not self.busy[holder]:
                    del self.busy[holder]
            seconds = time.perf_counter() - started
            # The route's template (a bounded set): a request refused before routing, or to no route, is "unrouted".
            route = getattr(scope.get("route"), "path", None) or "unrouted"
            self.metrics.observe(method, route, status[0], seconds)
            kind = state.get("error_kind") or (f"http_{status[0]}" if status[0] >= 400 else None)
            if kind:
                self.metrics.error(kind)
            access_log.info(
                json.dumps(
                    {
                        "ts": round(time.time(), 3),
                        "method": method,
                        "path": path,
                        "route": route,
                        "status": status[0],
                        "ms": round(seconds * 1000, 2),
                        "key": who,
                        "client": (scope.get("client") or (None,))[0],
                        **({"error": kind} if kind else {}),
                    }
                )
            )

    def _too_large(self) -> JSONResponse:
        return too_large(self.settings.max_body)


def too_large(limit: int) -> JSONResponse:
    text = f"request body over {limit} bytes (the server's {option('max_body')})"
    return _error(413, "body_too_large", text, field="body")


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
    """The field a DataError is about (chunks / triples / the id), for the error's ``field``."""
    prefix = "records" if index is None else f"records[{index}]"
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


def _judge_failure(exc: Exception) -> ServeError:
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
    service = JudgeService(specs, store_path, judge_config, options, model=model)
    metrics = Metrics()
    models = {s.name: input_model(s, service.closure([s.name])[:-1], closed=True) for s in service.specs}

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

    app = FastAPI(
        title="greval serve",
        description="LLM-judge metrics over HTTP, sharing greval's verdict store and cache.",
        lifespan=lifespan,
    )
    app.state.service = service
    app.state.metrics = metrics

    @app.exception_handler(ServeError)
    async def serve_error(request: Request, exc: ServeError) -> JSONResponse:
        request.state.error_kind = exc.kind
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = exc.errors()
        first = errors[0] if errors else {"loc": (), "msg": "invalid request"}
        loc = [str(p) for p in first.get("loc", ()) if p != "body"]
        field = "".join(f"[{p}]" if p.isdigit() else f".{p}" for p in loc).lstrip(".") or "body"
        request.state.error_kind = "invalid_request"
        detail = [{"loc": list(e.get("loc", ())), "msg": e.get("msg"), "type": e.get("type")} for e in errors]
        body = {"kind": "invalid_request", "message": f"{field}: {first.get('msg')}", "field": field}
        return JSONResponse({"error": body, "detail": detail}, status_code=422)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        if getattr(request.state, "body_too_large", False):  # the body read stopped by the guard's limit
            request.state.error_kind = "body_too_large"
            return too_large(settings.max_body)
        kind = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code, f"http_{exc.status_code}")
        request.state.error_kind = kind
        detail = exc.detail if isinstance(exc.detail, str) else json.dumps(exc.detail, default=str)
        return JSONResponse({"error": {"kind": kind, "message": detail}}, status_code=exc.status_code)

    def known(names: Sequence[str]) -> None:
        for name in names:
            if name not in service.by_name:
                raise ServeError(
                    404, "unknown_spec", f"no served spec {name!r} (served: {', '.join(service.by_name)})", "spec"
                )

    @app.get("/healthz", tags=["operations"])
    async def healthz() -> dict[str, Any]:
        return {"status": "ok", "inflight": service.inflight}

    @app.get("/metrics", response_class=PlainTextResponse, tags=["operations"])
    async def prometheus() -> PlainTextResponse:
        text = metrics.render(service.stats, service.inflight)
        return PlainTextResponse(text, media_type="text/plain; version=0.0.4; charset=utf-8")

    @app.post("/v1/judge", response_model=JudgeResponse, tags=["greval"])
    async def judge(body: JudgeRequest) -> JudgeResponse:
        names = [body.spec] if isinstance(body.spec, str) else list(body.spec)
        if not names:
            raise ServeError(422, "invalid_request", "spec: name at least one spec", "spec")
        known(names)
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
        known([name])
        s = service.by_name[name]
        answer: dict[str, Any] | None = None
        if isinstance(s, Spec):
            from greval.judge.verdict import verdict_models

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

    @app.get("/v1/results", tags=["greval"])
    async def results(record_id: str, spec: str | None = None) -> dict[str, Any]:
        names = [spec] if spec else [s.name for s in service.specs]
        known(names)
        return {
            "record_id": record_id,
            "verdicts": [v.model_dump(mode="json") for v in service.stored(names, record_id)],
        }

    if langserve:
        add_judge_routes(app, service, models, settings)
    app.add_middleware(Guard, settings=settings, metrics=metrics)
    return app


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

    from greval._sync import run_sync

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
