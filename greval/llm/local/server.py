"""The local judge's server process: start it on a free port, wait for ``/health``, stop it (also at exit).

The process is llama.cpp's server, from the xllamacpp wheel or a llama-server binary
(:mod:`greval.llm.local.engine`). It speaks the OpenAI chat API (json_schema response formats, ``n`` > 1,
logprobs, parallel slots), so the same judge code runs against it unchanged.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from greval.llm.gguf import model_identity, resolve_local_model
from greval.llm.local.common import LocalJudgeError, env_int, log_tail
from greval.llm.local.engine import Engine, Launch, ensure_engine, find_engine
from greval.paths import data_dir, rewrite_private

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

DEFAULT_CTX_SIZE = 4096
DEFAULT_PARALLEL = 2
ENV_THREADS = "GREVAL_LLAMA_THREADS"
ENV_PARALLEL = "GREVAL_LLAMA_PARALLEL"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _death_signal_hook() -> Callable[[], None] | None:
    """Linux: a pre-exec hook asking the kernel to SIGTERM llama-server if its parent dies.

    Stops orphaned servers after a crash or SIGKILL of Python. The signal fires when the *thread*
    that started the child exits, so it is only used from the main thread. libc is loaded here,
    before fork, so the child only makes one system call.
    """
    if not sys.platform.startswith("linux") or threading.current_thread() is not threading.main_thread():
        return None
    try:
        import ctypes

        prctl = ctypes.CDLL("libc.so.6", use_errno=True).prctl
    except (OSError, AttributeError):
        return None

    def hook() -> None:  # pragma: no cover - runs in the child between fork and exec
        prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG

    return hook


@dataclass(frozen=True)
class LocalJudgeInfo:
    """How to reach a running local judge. ``identity`` (not the port) is what caches should key on."""

    base_url: str
    model: str
    identity: str
    pid: int
    port: int
    model_path: Path
    log_path: Path
    threads: int
    parallel: int
    ctx_size: int
    engine: str = ""  # what runs the server (Engine.label): the wheel, a build, or $GREVAL_LLAMA_SERVER


class LocalJudgeServer:
    """A llama-server child process serving one GGUF model on 127.0.0.1.

    Use as a context manager (``with LocalJudgeServer() as judge: judge.base_url``) or via
    :func:`start_local_judge` + :meth:`stop`. ``ctx_size`` is per parallel slot, so each
    concurrent request gets that much context. ``binary`` (a llama-server) or ``engine`` choose what runs it
    (default: :func:`greval.llm.local.engine.find_engine`, building llama-server only where nothing else serves).
    """

    def __init__(
        self,
        model: Path | str | None = None,
        threads: int | None = None,
        parallel: int | None = None,
        ctx_size: int = DEFAULT_CTX_SIZE,
        port: int = 0,
        binary: Path | None = None,
        log_path: Path | None = None,
        startup_timeout: float = 120.0,
        extra_args: Sequence[str] = (),
        build: bool = True,
        engine: Engine | None = None,
    ) -> None:
        if isinstance(model, Path):
            self.model_path = resolve_local_model(f"gguf:{model}")
        else:
            self.model_path = resolve_local_model(model or "local")
        self.threads = threads if threads is not None else env_int(ENV_THREADS, default=os.cpu_count() or 1)
        self.parallel = parallel if parallel is not None else env_int(ENV_PARALLEL, default=DEFAULT_PARALLEL)
        if self.threads < 1 or self.parallel < 1 or ctx_size < 64:
            raise LocalJudgeError("threads and parallel must be at least 1, and ctx_size at least 64")
        self.ctx_size = ctx_size
        self.requested_port = port
        self._engine = Engine("binary", f"llama-server {binary}", Path(binary)) if binary is not None else engine
        self._build = build
        self._log_path = log_path
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None
        self._info: LocalJudgeInfo | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def _resolve_engine(self) -> Engine:
        if self._engine is not None:
            if self._engine.binary is not None and not self._engine.binary.is_file():
                raise LocalJudgeError(f"llama-server binary not found: {self._engine.binary}")
            return self._engine
        found = find_engine()
        if found is not None:
            return found
        if not self._build:
            raise LocalJudgeError("no local judge engine: pip install xllamacpp, or run `greval local-judge build`")
        return ensure_engine(progress=True)

    def start(self) -> LocalJudgeInfo:
        """Start the server and wait until ``/health`` says the model is loaded."""
        if self._info is not None:
            return self._info
        engine = self._resolve_engine()
        identity = model_identity(self.model_path)
        alias = self.model_path.stem
        attempts = 3 if self.requested_port == 0 else 1
        last_error: LocalJudgeError | None = None
        for _ in range(attempts):
            port = self.requested_port or _free_port()
            try:
                self._launch(engine, port, alias)
                self._wait_healthy(engine, port)
            except LocalJudgeError as exc:
                self.stop()
                last_error = exc
                # A free port can be taken between our probe and the server's bind: try another.
                if "bind" in str(exc).lower() or "address already in use" in str(exc).lower():
                    continue
                raise
            assert self._proc is not None
            self._info = LocalJudgeInfo(
                base_url=f"http://127.0.0.1:{port}/v1",
                model=alias,
                identity=identity,
                pid=self._proc.pid,
                port=port,
                model_path=self.model_path,
                log_path=self.log_path,
                threads=self.threads,
                parallel=self.parallel,
                ctx_size=self.ctx_size,
                engine=engine.label,
            )
            return self._info
        assert last_error is not None
        raise last_error

    @property
    def log_path(self) -> Path:
        """Where llama-server's output goes (one file per port unless given)."""
        if self._log_path is not None:
            return self._log_path
        return data_dir() / "logs" / f"llama-server-{self.requested_port or 'auto'}.log"

    def _launch(self, engine: Engine, port: int, alias: str) -> None:
        if self._log_path is None:
            self._log_path = data_dir() / "logs" / f"llama-server-{port}.log"
        launch = Launch(
            model=str(self.model_path),
            alias=alias,
            host="127.0.0.1",
            port=port,
            threads=self.threads,
            parallel=self.parallel,
            ctx_total=self.ctx_size * self.parallel,
        )
        cmd = engine.command(launch, self.extra_args)
        # Our explicit flags decide; stray LLAMA_ARG_* variables in the caller's shell should not.
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        # OpenMP threads spin while waiting by default; on a shared 2-core machine that makes each
        # token 20-50x slower (measured: 15 s vs 0.5 s for a short answer). Sleep instead.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self._log_handle = rewrite_private(self._log_path)  # prompts may show in it: the owner's only
        self._log_handle.write(("$ " + " ".join(cmd) + "\n").encode())
        self._log_handle.flush()
        self._proc = subprocess.Popen(
            cmd,
            stdin=subprocess.DEVNULL,
            stdout=self._log_handle,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,  # Ctrl-C goes to us; we stop the server ourselves
            preexec_fn=_death_signal_hook(),
        )
        _LIVE.add(self)

    def _wait_healthy(self, engine: Engine, port: int) -> None:
        assert self._proc is not None
        url = f"http://127.0.0.1:{port}/health"
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                raise LocalJudgeError(
                    f"the local judge's server ({engine.label}) exited with code {code} while starting. "
                    f"Log: {self.log_path}\n" + log_tail(self.log_path, 15).rstrip()
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    body = json.loads(response.read() or b"{}")
                    if response.status == 200 and body.get("status", "ok") == "ok":
                        return
            except urllib.error.HTTPError as exc:
                if exc.code != 503:  # 503 = still loading the model
                    raise LocalJudgeError(f"the local judge's server /health answered HTTP {exc.code}") from None
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.1)
        raise LocalJudgeError(
            f"the local judge's server ({engine.label}) did not become healthy within {self.startup_timeout:.0f} s. "
            f"Log: {self.log_path}"
        )

    def stop(self, timeout: float = 10.0) -> None:
        """Terminate llama-server, then kill it if it has not exited within ``timeout`` seconds."""
        proc, self._proc = self._proc, None
        self._info = None
        if proc is not None and proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        if self._log_handle is not None:
            self._log_handle.close()
            self._log_handle = None
        _LIVE.discard(self)

    def wait(self) -> int:
        """Block until llama-server exits (for ``serve`` in the foreground); returns its exit code."""
        if self._proc is None:
            raise LocalJudgeError("the local judge is not running")
        return self._proc.wait()

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    # -- convenience --------------------------------------------------------------------------------

    @property
    def info(self) -> LocalJudgeInfo:
        if self._info is None:
            raise LocalJudgeError("the local judge is not running: call start() or use it in a with block")
        return self._info

    @property
    def base_url(self) -> str:
        return self.info.base_url

    @property
    def model(self) -> str:
        return self.info.model

    @property
    def identity(self) -> str:
        return self.info.identity

    @property
    def pid(self) -> int:
        return self.info.pid

    def chat_model(self, **kwargs: Any) -> ChatOpenAI:
        """A ChatOpenAI pointed at this server (any keyword overrides the defaults)."""
        from langchain_openai import ChatOpenAI

        options: dict[str, Any] = {"base_url": self.base_url, "api_key": "local", "model": self.model}
        options.update(kwargs)
        return ChatOpenAI(**options)

    def __enter__(self) -> LocalJudgeServer:
        self.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = self._info.base_url if self._info else "stopped"
        return f"LocalJudgeServer({self.model_path.name}, {state})"


_LIVE: set[LocalJudgeServer] = set()


def _stop_all() -> None:
    """At interpreter exit, stop servers nobody stopped (a forgotten start_local_judge())."""
    for server in list(_LIVE):
        with contextlib.suppress(Exception):
            server.stop(timeout=5)


atexit.register(_stop_all)


def start_local_judge(
    model: Path | str | None = None,
    threads: int | None = None,
    parallel: int | None = None,
    ctx_size: int = DEFAULT_CTX_SIZE,
    port: int = 0,
    **kwargs: Any,
) -> LocalJudgeServer:
    """Start a local judge (building llama-server first only where no other engine serves) and return it running.

    The result carries ``base_url``, ``model``, ``identity`` and ``pid``; call ``stop()`` when
    done, or use it in a ``with`` block. ``threads``/``parallel`` default to
    ``$GREVAL_LLAMA_THREADS`` / ``$GREVAL_LLAMA_PARALLEL``, else all cores / 2 slots.
    """
    server = LocalJudgeServer(model, threads=threads, parallel=parallel, ctx_size=ctx_size, port=port, **kwargs)
    server.start()
    return server
