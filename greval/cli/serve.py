"""``greval serve``: metrics over HTTP, sharing the verdict store and cache of ``greval run``."""

from __future__ import annotations

import json
import logging
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import click

from greval.cli.bundle import gathered
from greval.cli.bundles import RunFlags
from greval.cli.common import call_options, console, judge_options, notice, store_option, store_wait_option
from greval.store.backend import display

if TYPE_CHECKING:
    from fastapi import FastAPI

    from greval.llm.config import JudgeChoice
    from greval.serve.app import ServeSettings
    from greval.spec import BaseSpec

#: The environment variable a worker process reads its configuration from (``--workers`` > 1).
SETTINGS_ENV = "GREVAL_SERVE_CONFIG"


@dataclass(frozen=True)
class ServeFlags:
    """Where the server listens and how it guards itself (:class:`greval.serve.app.ServeSettings`), its worker
    processes and routes. The API keys are left out of the bundle's repr."""

    host: str
    port: int
    api_keys: Sequence[str] = field(repr=False)
    max_body: int
    max_records: int
    requests_per_key: int
    header_timeout: float
    body_timeout: float
    max_connections: int
    store_wait: float
    workers: int
    no_playground: bool

    def keys(self) -> list[str]:
        """The accepted API keys: --api-key's, then GREVAL_SERVE_KEYS's."""
        env = os.environ.get("GREVAL_SERVE_KEYS", "")
        return [*self.api_keys, *(k.strip() for k in env.split(",") if k.strip())]

    def settings(self, keys: Sequence[str]) -> ServeSettings:
        from greval.serve.app import ServeSettings

        return ServeSettings(
            api_keys=tuple(keys),
            max_body=self.max_body,
            max_records=self.max_records,
            requests_per_key=self.requests_per_key,
            header_timeout=self.header_timeout,
            body_timeout=self.body_timeout,
            max_connections=self.max_connections,
            store_wait=self.store_wait,
        )


@click.command("serve")
@click.option(
    "-s",
    "--spec",
    "spec_refs",
    multiple=True,
    help="Spec file or predefined metric name; repeat for several (dependencies are added) [every predefined "
    "judge metric].",
)
@store_option(help="Verdicts, shared with `greval run` (created if missing).")
@judge_options
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (beyond localhost: keys needed).")
@click.option("--port", type=int, default=8000, show_default=True)
@click.option(
    "--api-key",
    "api_keys",
    multiple=True,
    help="Accepted API key (repeatable; also GREVAL_SERVE_KEYS=K1,K2). Required on every route but /healthz.",
)
@click.option("--max-body", type=int, default=1 << 20, show_default=True, help="Largest request body (bytes).")
@click.option("--max-records", type=int, default=1000, show_default=True, help="Records per request at most.")
@click.option(
    "--requests-per-key", type=int, default=64, show_default=True, help="Judging requests in flight per API key."
)
@click.option(
    "--header-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=10.0,
    show_default=True,
    help="Seconds a connection has to send a request's headers (then 408, closed).",
)
@click.option(
    "--body-timeout",
    type=click.FloatRange(min=0, min_open=True),
    default=30.0,
    show_default=True,
    help="Seconds a request's whole body has to arrive after its headers (then 408, closed).",
)
@click.option(
    "--max-connections",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    help="Open connections per worker process (a request on one more: 503, closed).",
)
@store_wait_option("before a request is answered 503 store_unavailable; the next request opens it again.")
@click.option("-c", "--concurrency", type=int, default=8, show_default=True, help="Model calls in flight at most.")
@call_options
@click.option(
    "--workers",
    type=int,
    default=1,
    show_default=True,
    help="Server processes (uvicorn workers); they share the store (SQLite WAL) and its claims, each has its own "
    "in-flight sharing, limiter and /metrics.",
)
@click.option("--no-playground", is_flag=True, help="No LangServe routes (/judges/...): greval's /v1 API only.")
@gathered("serving", ServeFlags)
@gathered("run", RunFlags)
def serve_cmd(spec_refs: Sequence[str], store: str, judge: JudgeChoice, serving: ServeFlags, run: RunFlags) -> None:
    """Serve metrics over HTTP: greval's JSON API and LangServe routes per spec, sharing the store of `greval run`.

    \b
    A verdict already in the store (same spec version, judge and record content) is answered with no model
    call; a new one is stored as it arrives; concurrent requests for the same judgement make one call.
    Routes: POST /v1/judge, GET /v1/specs[/NAME], GET /v1/results, /judges/NAME/{invoke,batch,stream,
    input_schema,output_schema,playground/}, /healthz, /metrics. See docs/serving.md.

    \b
    Examples:
      greval serve -s answer_alignment -s chunk_evaluation --judge openai:gpt-4o-mini
      GREVAL_SERVE_KEYS=k1,k2 greval serve --host 0.0.0.0 --workers 2 --store /var/lib/greval/greval.sqlite
    """
    _check_extra()
    from greval.flows.run import choose_judge
    from greval.llm.local import serve_judge
    from greval.serve.app import check_binding

    keys = serving.keys()
    check_binding(serving.host, keys)
    specs = _served_specs(spec_refs)
    needs_judge = any(s.needs_model for s in specs)
    _, cfg = choose_judge(specs, judge, notice)
    options = run.options()
    settings = serving.settings(keys)
    _access_log()
    with serve_judge(cfg, console.print, needed=needs_judge) as live:
        config = {
            "specs": list(spec_refs) or [s.name for s in specs],
            "store": store,
            # base_url, timeout and identity_override are excluded from a config's dump (not its identity)
            "judge": {
                **live.model_dump(mode="json"),
                "base_url": live.base_url,
                "timeout": live.timeout,
                "identity_override": live.identity_override,
            },
            "options": options.model_dump(mode="json"),
            "settings": settings.model_dump(mode="json"),
            "langserve": not serving.no_playground,
        }
        console.print(
            f"serving {', '.join(s.name for s in specs)} with judge {live.label} on http://{serving.host}:"
            f"{serving.port} (store {display(store)}{', API keys required' if keys else ''}; docs at /docs)",
            highlight=False,
        )
        _run_server(serving, config, settings)


def _check_extra() -> None:
    """The serve extra installed, or one line saying how to install it."""
    import importlib.util

    from greval.errors import UserError

    missing = [m for m in ("fastapi", "uvicorn", "langserve", "sse_starlette") if importlib.util.find_spec(m) is None]
    if missing:
        raise UserError(
            f"greval serve needs the serve extra ({', '.join(missing)} missing): pip install 'greval[serve]'"
        )


def _served_specs(spec_refs: Sequence[str]) -> list[BaseSpec]:
    """The specs asked for (with their dependencies), else every predefined judge metric."""
    from greval.spec import bundled_specs, resolve_specs
    from greval.spec.model import Spec

    if spec_refs:
        return resolve_specs(spec_refs)
    every = resolve_specs(list(bundled_specs()), with_dependencies=False)
    return resolve_specs([s.name for s in every if isinstance(s, Spec)])


def _run_server(serving: ServeFlags, config: dict[str, Any], settings: ServeSettings) -> None:
    """uvicorn's graceful shutdown: on SIGTERM / Ctrl-C it stops accepting, lets the requests in flight finish,
    then the app's lifespan drains the judgements still running and closes the store. ``http``: uvicorn's h11
    protocol with a header deadline and a connection cap (greval.serve.connections)."""
    import uvicorn

    from greval.serve.connections import protocol

    server = {
        "host": serving.host,
        "port": serving.port,
        "access_log": False,
        "lifespan": "on",
        "http": protocol(settings),
    }
    if serving.workers > 1:
        os.environ[SETTINGS_ENV] = json.dumps(config)
        uvicorn.run("greval.cli.serve:app_from_env", factory=True, workers=serving.workers, **server)
    else:
        uvicorn.run(_app(config), **server)


def _access_log() -> None:
    """One JSON line per request on stderr (greval.serve.access); nothing else of ours is logged there."""
    log = logging.getLogger("greval.serve.access")
    if not log.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        log.propagate = False


def _app(config: dict[str, Any]) -> FastAPI:
    from greval.llm.config import JudgeConfig
    from greval.runner.options import RunOptions
    from greval.serve.app import ServeSettings, create_app
    from greval.spec import resolve_specs

    return create_app(
        resolve_specs([str(r) for r in config["specs"]]),
        str(config["store"]),
        JudgeConfig.model_validate(config["judge"]),
        RunOptions.model_validate(config["options"]),
        ServeSettings.model_validate(config["settings"]),
        langserve=bool(config["langserve"]),
    )


def app_from_env() -> FastAPI:
    """A worker's app (``--workers`` > 1): the configuration the parent wrote to the environment."""
    _access_log()
    return _app(json.loads(os.environ[SETTINGS_ENV]))
