"""A real Arize Phoenix server for tests and the docs' screenshot: its own virtual environment, a temp SQLite dir.

``arize-phoenix`` (the server) pins many dependencies of its own (FastAPI, SQLAlchemy, grpc, …), so — like the
embedded Argilla server — it lives in a virtual environment of its own under ``data_dir()/phoenix/venv``, made
once (``python -m greval.testing.phoenix setup``; scripts/setup.sh runs it) and reused. greval itself talks to
Phoenix only through ``arize-phoenix-client`` (the ``[phoenix]`` extra). :class:`PhoenixServer` starts
``phoenix serve`` on 127.0.0.1 on free ports with its SQLite database in a temp dir, and stops and deletes it all
on exit.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Self

from greval.paths import data_dir

#: The server release the tests run (pinned: its REST API and UI are what the tests and docs describe).
PHOENIX_VERSION = "20.26.1"
_MARKER = ".greval-phoenix-version"


def venv_dir() -> Path:
    return data_dir() / "phoenix" / "venv"


def venv_ready(venv: Path | None = None) -> bool:
    venv = venv or venv_dir()
    marker = venv / _MARKER
    return (venv / "bin" / "phoenix").exists() and marker.exists() and marker.read_text().strip() == PHOENIX_VERSION


def ensure_venv(venv: Path | None = None) -> Path:
    """Create the server's venv with ``arize-phoenix`` unless done already (a file lock serialises two
    sessions); returns its ``phoenix`` command. pip's output goes to ``setup.log`` beside the venv."""
    venv = venv or venv_dir()
    if venv_ready(venv):
        return venv / "bin" / "phoenix"
    venv.parent.mkdir(parents=True, exist_ok=True)
    import fcntl

    with open(venv.parent / "venv.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not venv_ready(venv):
            log = venv.parent / "setup.log"
            with open(log, "w") as fh:
                for cmd in (
                    [sys.executable, "-m", "venv", "--clear", str(venv)],
                    [str(venv / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                     f"arize-phoenix=={PHOENIX_VERSION}"],
                ):  # fmt: skip
                    if subprocess.run(cmd, stdout=fh, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL).returncode:
                        raise RuntimeError(f"setting up the Phoenix server's environment failed; see {log}")
            (venv / _MARKER).write_text(PHOENIX_VERSION)
    return venv / "bin" / "phoenix"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PhoenixServer:
    """``with PhoenixServer() as px: px.url`` — a throwaway Phoenix server (HTTP UI + REST + OTLP/HTTP at
    ``/v1/traces``, gRPC on another free port), no telemetry, nothing fetched from outside. No auth, unless
    ``admin_key`` is given: then Phoenix's own authentication is on and that key (its admin secret) is the one
    bearer token it takes before any API key is made."""

    def __init__(self, startup_timeout: float = 120.0, admin_key: str | None = None) -> None:
        self.admin_key = admin_key
        self.command = ensure_venv()
        self.port = _free_port()
        self.grpc_port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.root = Path(tempfile.mkdtemp(prefix="greval-phoenix-"))
        self.timeout = startup_timeout
        self._proc: subprocess.Popen[bytes] | None = None

    def start(self) -> Self:
        env = {k: v for k, v in os.environ.items() if not k.startswith("PHOENIX_") and k != "PYTHONPATH"}
        env.update(
            PHOENIX_WORKING_DIR=str(self.root),
            PHOENIX_HOST="127.0.0.1",
            PHOENIX_PORT=str(self.port),
            PHOENIX_GRPC_PORT=str(self.grpc_port),
            PHOENIX_TELEMETRY_ENABLED="false",
            PHOENIX_ALLOW_EXTERNAL_RESOURCES="false",
        )
        if self.admin_key is not None:  # the JWT signing secret: random, this server's alone
            env.update(
                PHOENIX_ENABLE_AUTH="true", PHOENIX_SECRET=secrets.token_hex(32), PHOENIX_ADMIN_SECRET=self.admin_key
            )
        with open(self.root / "server.log", "wb") as log:
            self._proc = subprocess.Popen(
                [str(self.command), "serve"], stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, cwd=self.root, start_new_session=True,
            )  # fmt: skip
        deadline = time.monotonic() + self.timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                tail = (self.root / "server.log").read_text(errors="replace")[-1500:]
                raise RuntimeError(f"phoenix serve exited ({self._proc.returncode}): {tail}")
            with contextlib.suppress(OSError), urllib.request.urlopen(f"{self.url}/healthz", timeout=2) as resp:
                if resp.status == 200:
                    return self
            time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"phoenix serve did not answer within {self.timeout:.0f} s")

    def stop(self) -> None:
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(timeout=5)  # a throwaway server: its directory goes next
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait()
        shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


def main(argv: list[str] | None = None) -> None:
    """``python -m greval.testing.phoenix setup``: make the server's venv (once; what scripts/setup.sh runs)."""
    args = sys.argv[1:] if argv is None else argv
    if args != ["setup"]:
        sys.exit("usage: python -m greval.testing.phoenix setup")
    t0 = time.monotonic()
    path = ensure_venv()
    print(f"Phoenix server {PHOENIX_VERSION} ready: {path} ({time.monotonic() - t0:.0f} s)")


if __name__ == "__main__":
    main()
