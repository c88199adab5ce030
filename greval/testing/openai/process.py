"""The test server as a subprocess: `OpenAIServer` starts it and drives its admin API; `main` is its command.

The command is ``python -m greval.testing.openai_server`` (the name scripts look for among processes); aiohttp is
imported only by the server process.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

from greval.testing.openai import require_aiohttp
from greval.testing.openai.rules import LOGPROBS_MODES, ServerConfig

__all__ = ["COMMAND", "OpenAIServer", "main"]

#: The module ``python -m`` runs to start the server.
COMMAND = "greval.testing.openai_server"
_DESCRIPTION = "A local OpenAI-compatible chat-completions server for greval's tests and benchmarks."


def main(argv: list[str] | None = None) -> None:
    """CLI entry point: ``python -m greval.testing.openai_server`` (one line and exit 2 without aiohttp)."""
    parser = argparse.ArgumentParser(description=_DESCRIPTION)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--latency", type=float, default=0.0, help="seconds added to every answer")
    parser.add_argument("--no-json-schema", action="store_true", help="reject response_format json_schema")
    parser.add_argument("--no-tools", action="store_true", help="reject requests that send tools")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--logprobs", choices=LOGPROBS_MODES, default="null", help="answer token log-probabilities when asked (on)"
    )
    parser.add_argument(
        "--prefix-cache",
        action="store_true",
        help="report cached prompt tokens (the prefix shared with an earlier prompt)",
    )
    parser.add_argument("--exit-on-stdin-eof", action="store_true", help="exit when stdin closes")
    args = parser.parse_args(argv)
    try:
        require_aiohttp()
    except ModuleNotFoundError as exc:
        parser.exit(2, f"error: {exc}\n")
    from greval.testing.openai.app import serve

    config = ServerConfig(
        latency=args.latency,
        json_schema=not args.no_json_schema,
        tools=not args.no_tools,
        seed=args.seed,
        logprobs=args.logprobs,
        prefix_cache=args.prefix_cache,
    )
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(args.host, args.port, config, watch_stdin=args.exit_on_stdin_eof))


class OpenAIServer:
    """Start the server in a subprocess and drive its admin API.

    A subprocess, not a thread: the client under test gets its own GIL and event loop, which is
    what benchmarks need to measure the client rather than the fake.
    """

    def __init__(
        self,
        *,
        latency: float = 0.0,
        json_schema: bool = True,
        tools: bool = True,
        seed: int = 0,
        logprobs: str = "null",
        host: str = "127.0.0.1",
        port: int = 0,
        startup_timeout: float = 30.0,
    ) -> None:
        require_aiohttp()  # the install hint here, rather than a subprocess that dies before READY
        cmd = [sys.executable, "-m", COMMAND, "--host", host, "--port", str(port)]
        cmd += ["--latency", str(latency), "--seed", str(seed), "--exit-on-stdin-eof"]
        if logprobs != "null":
            cmd += ["--logprobs", logprobs]
        if not json_schema:
            cmd.append("--no-json-schema")
        if not tools:
            cmd.append("--no-tools")
        env = dict(os.environ)
        repo_root = str(Path(__file__).resolve().parents[3])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (repo_root, env.get("PYTHONPATH")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        self._proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stdin=subprocess.PIPE, env=env, text=True)
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self.base_url = self._wait_ready(startup_timeout)
        self.root_url = self.base_url.removesuffix("/v1")

    def _wait_ready(self, timeout: float) -> str:
        lines: queue.Queue[str] = queue.Queue()
        stdout = self._proc.stdout
        assert stdout is not None

        def pump() -> None:
            # Keep draining stdout for the life of the process so it can never block on a full pipe.
            for line in stdout:
                lines.put(line)
            lines.put("")

        self._pump = threading.Thread(target=pump, name="openai-server-stdout", daemon=True)
        self._pump.start()
        deadline = time.monotonic() + timeout
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                self.close()
                raise TimeoutError(f"OpenAI test server did not print READY within {timeout}s")
            try:
                line = lines.get(timeout=remaining)
            except queue.Empty:
                continue
            if line.startswith("READY "):
                return line.split(" ", 1)[1].strip()
            if line == "":
                code = self._proc.wait()
                raise RuntimeError(f"OpenAI test server exited with code {code} before READY")

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            self.root_url + path, data=data, method=method, headers={"Content-Type": "application/json"}
        )
        try:
            with self._opener.open(req, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise RuntimeError(f"admin {path} failed: HTTP {exc.code}: {detail}") from exc

    def script(self, rules: list[dict[str, Any]]) -> None:
        """Append rules; the first matching rule with `times` left decides each request."""
        self._call("POST", "/_admin/script", {"rules": rules})

    def reset(self) -> None:
        """Clear rules, stats and the request log (config is kept)."""
        self._call("POST", "/_admin/reset", {})

    def configure(
        self,
        *,
        latency: float | None = None,
        json_schema: bool | None = None,
        tools: bool | None = None,
        seed: int | None = None,
        logprobs: str | None = None,
        prefix_cache: bool | None = None,
    ) -> dict[str, Any]:
        """Change only the given knobs (``logprobs``: on, null or reject; ``prefix_cache``: report cached prompt
        tokens, see ``State.cached_words``); returns the resulting config."""
        payload = {"latency": latency, "json_schema": json_schema, "tools": tools, "seed": seed, "logprobs": logprobs}
        payload["prefix_cache"] = prefix_cache
        result: dict[str, Any] = self._call("POST", "/_admin/config", payload)
        return result

    def stats(self) -> dict[str, Any]:
        """total, by_status, by_rule, by_mode, in_flight, max_in_flight, rules_remaining."""
        result: dict[str, Any] = self._call("GET", "/_admin/stats")
        return result

    def requests(self, limit: int | None = None) -> list[dict[str, Any]]:
        """Recent chat-completion request bodies, oldest first (bounded to 10k)."""
        suffix = "" if limit is None else f"?limit={int(limit)}"
        result: list[dict[str, Any]] = self._call("GET", "/_admin/requests" + suffix)
        return result

    def request_meta(self, limit: int | None = None) -> list[dict[str, Any]]:
        """The headers (lower-cased names) and query parameters of the logged requests, in the same order."""
        suffix = "?meta=1" + ("" if limit is None else f"&limit={int(limit)}")
        result: list[dict[str, Any]] = self._call("GET", "/_admin/requests" + suffix)
        return result

    def close(self) -> None:
        """Terminate the subprocess (kill if it does not exit promptly)."""
        if self._proc.stdin is not None and not self._proc.stdin.closed:
            with contextlib.suppress(OSError):
                self._proc.stdin.close()  # the server exits on stdin EOF
            with contextlib.suppress(subprocess.TimeoutExpired):
                self._proc.wait(timeout=2)
        if self._proc.poll() is None:
            self._proc.terminate()
            try:
                self._proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._proc.kill()
                self._proc.wait(timeout=5)
        pump = getattr(self, "_pump", None)
        if pump is not None:
            pump.join(timeout=2)
        if self._proc.stdout is not None and (pump is None or not pump.is_alive()):
            self._proc.stdout.close()

    def __enter__(self) -> OpenAIServer:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
