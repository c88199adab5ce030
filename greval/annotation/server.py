"""Manage the embedded Argilla server: its own venv, start/stop in the background, status.

argilla-server 2.8.0 pins pydantic 2.9, fastapi 0.115, httpx 0.27 and typer 0.9, so it lives in a
virtual environment of its own under ``data_dir()/argilla/venv`` and runs as a separate process
(``annotation/serve.py``) with SQLite, an in-process Redis stand-in and greval's search engine.
Nothing here imports argilla_server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from greval.paths import annotation_dir, data_dir

ARGILLA_SERVER_VERSION = "2.8.0"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6900
STATE_FILE = "server.json"
PID_FILE = "server.pid"
LOG_FILE = "server.log"
CREDENTIALS_FILE = "credentials.json"
_MARKER = ".greval-requirements.sha256"


class AnnotationServerError(Exception):
    """A problem the user can act on; the CLI prints the message as one line, without a traceback."""


class PortInUseError(AnnotationServerError):
    """The requested port is taken by another program."""


@dataclass(frozen=True)
class ServerInfo:
    """How to reach a running server. ``repr`` hides the password and API key so logs stay clean."""

    url: str
    username: str
    password: str = field(repr=False)
    api_key: str = field(repr=False)
    pid: int
    data_dir: Path
    workspace: str = "argilla"


@dataclass(frozen=True)
class ServerStatus:
    running: bool
    url: str | None
    pid: int | None
    data_dir: Path


# --------------------------------------------------------------------------- paths


def argilla_home() -> Path:
    return data_dir() / "argilla"


def venv_dir() -> Path:
    return argilla_home() / "venv"


def default_data_dir() -> Path:
    return argilla_home() / "data"


def venv_python(venv: Path | None = None) -> Path:
    venv = venv or venv_dir()
    if os.name == "nt":
        return venv / "Scripts" / "python.exe"
    return venv / "bin" / "python"


def requirements_file() -> Path:
    return annotation_dir() / "requirements.txt"


def serve_script() -> Path:
    return annotation_dir() / "serve.py"


def _resolve_data_dir(path: Path | str | None) -> Path:
    return Path(path).expanduser().resolve() if path else default_data_dir()


# --------------------------------------------------------------------------- venv


def _requirements_hash() -> str:
    return hashlib.sha256(requirements_file().read_bytes()).hexdigest()


def venv_ready(venv: Path | None = None) -> bool:
    """True if the venv exists and was installed from the current requirements file."""
    venv = venv or venv_dir()
    marker = venv / _MARKER
    return venv_python(venv).exists() and marker.exists() and marker.read_text().strip() == _requirements_hash()


def _run(cmd: list[str], on_line: Callable[[str], None] | None) -> None:
    """Run a setup command; with ``on_line`` its output is streamed line by line, else to the terminal."""
    try:
        if on_line is None:
            subprocess.run(cmd, check=True)
            return
        with subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1) as proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                on_line(line.rstrip("\n"))
            if proc.wait() != 0:
                raise subprocess.CalledProcessError(proc.returncode, cmd)
    except (OSError, subprocess.CalledProcessError) as exc:
        raise AnnotationServerError(f"setting up the Argilla environment failed: {exc}") from None


def ensure_venv(on_line: Callable[[str], None] | None = None, *, force: bool = False, venv: Path | None = None) -> Path:
    """Create the Argilla venv and install the pinned requirements, unless already done; returns its python.

    ``on_line`` receives pip's output line by line; without it pip writes to the terminal (progress bars).
    """
    venv = venv or venv_dir()
    if venv_ready(venv) and not force:
        return venv_python(venv)
    venv.parent.mkdir(parents=True, exist_ok=True)
    with _venv_lock(venv):
        # Another process (a parallel test session, a second `up`) may have finished it meanwhile.
        if venv_ready(venv) and not force:
            return venv_python(venv)
        return _install_venv(venv, on_line)


@contextlib.contextmanager
def _venv_lock(venv: Path) -> Iterator[None]:
    """Serialize venv creation between processes; a no-op where fcntl is missing (Windows)."""
    try:
        import fcntl
    except ImportError:
        yield
        return
    with open(venv.parent / f"{venv.name}.lock", "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _install_venv(venv: Path, on_line: Callable[[str], None] | None) -> Path:
    say = on_line or (lambda s: print(s, file=sys.stderr, flush=True))
    if not venv_python(venv).exists():
        say(f"Creating the Argilla server environment in {venv} ...")
        _run([sys.executable, "-m", "venv", str(venv)], on_line)
    say(f"Installing argilla-server {ARGILLA_SERVER_VERSION} and its pinned dependencies (about a minute) ...")
    _run(
        [
            str(venv_python(venv)),
            "-m",
            "pip",
            "install",
            "--disable-pip-version-check",
            "-r",
            str(requirements_file()),
        ],
        on_line,
    )
    (venv / _MARKER).write_text(_requirements_hash())
    say("Argilla server environment ready.")
    return venv_python(venv)


# --------------------------------------------------------------------------- process state


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _pid_alive(pid: int) -> bool:
    """True if ``pid`` is our serve.py process (guards against a reused pid after a crash)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    cmdline = Path(f"/proc/{pid}/cmdline")
    if cmdline.exists():
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            return False
        if not text.strip():  # zombie
            return False
        return "serve.py" in text
    return True


def _running_pid(data: Path) -> int | None:
    pid_text = (data / PID_FILE).read_text().strip() if (data / PID_FILE).exists() else ""
    if pid_text.isdigit() and _pid_alive(int(pid_text)):
        return int(pid_text)
    return None


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in {"0.0.0.0", ""} else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def read_credentials(data: Path | str | None = None) -> dict[str, str]:
    """The owner's credentials: stored by serve.py on first start, overridden by GREVAL_ARGILLA_* env."""
    stored = {k: str(v) for k, v in _read_json(_resolve_data_dir(data) / CREDENTIALS_FILE).items()}
    for key in ("username", "password", "api_key", "workspace"):
        env = os.environ.get(f"GREVAL_ARGILLA_{key.upper()}")
        if env and key not in stored:
            stored[key] = env
    return stored


def port_free(host: str, port: int) -> bool:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = DEFAULT_HOST) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def healthy(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(f"{url}/api/v1/status", timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _log_tail(log: Path, lines: int = 8) -> str:
    try:
        tail = log.read_text(errors="replace").splitlines()[-lines:]
    except OSError:
        return ""
    return " | ".join(line.strip() for line in tail if line.strip())


# --------------------------------------------------------------------------- start / stop / status


def status(data: Path | str | None = None) -> ServerStatus:
    """Whether a server runs for this data directory, and where."""
    d = _resolve_data_dir(data)
    pid = _running_pid(d)
    state = _read_json(d / STATE_FILE)
    url = str(state["url"]) if pid and "url" in state else None
    return ServerStatus(running=pid is not None, url=url, pid=pid, data_dir=d)


def _info(d: Path, url: str, pid: int) -> ServerInfo:
    creds = read_credentials(d)
    return ServerInfo(
        url=url,
        username=creds.get("username", ""),
        password=creds.get("password", ""),
        api_key=creds.get("api_key", ""),
        pid=pid,
        data_dir=d,
        workspace=creds.get("workspace", "argilla"),
    )


def start(
    port: int = DEFAULT_PORT,
    data: Path | str | None = None,
    host: str = DEFAULT_HOST,
    *,
    timeout: float = 180.0,
    on_line: Callable[[str], None] | None = None,
) -> ServerInfo:
    """Start the server in the background (venv created first if missing) and wait until it is healthy.

    If a server already runs for ``data`` it is reused. Raises PortInUseError if the port is taken.
    """
    d = _resolve_data_dir(data)
    d.mkdir(parents=True, exist_ok=True)
    current = status(d)
    if current.running and current.url and current.pid and healthy(current.url):
        return _info(d, current.url, current.pid)
    if not port_free(host, port):
        raise PortInUseError(
            f"port {port} on {host} is already in use; choose another with --port or stop what is using it"
        )
    python = ensure_venv(on_line)
    url = _url(host, port)
    log = d / LOG_FILE
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # greval's own environment must not leak into the server's interpreter.
    for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(var, None)
    with open(log, "ab") as log_fh:
        proc = subprocess.Popen(
            [str(python), str(serve_script()), "--data-dir", str(d), "--host", host, "--port", str(port)],
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(d),
            start_new_session=True,
        )
    (d / PID_FILE).write_text(f"{proc.pid}\n")
    (d / STATE_FILE).write_text(json.dumps({"pid": proc.pid, "url": url, "host": host, "port": port}))
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _cleanup_state(d)
            raise AnnotationServerError(
                f"the Argilla server exited during start (code {proc.returncode}); see {log}: {_log_tail(log, 3)}"
            )
        if healthy(url, timeout=1.0):
            return _info(d, url, proc.pid)
        time.sleep(0.25)
    _terminate(proc.pid)
    _cleanup_state(d)
    raise AnnotationServerError(f"the Argilla server did not become healthy within {timeout:.0f}s; see {log}")


def _cleanup_state(d: Path) -> None:
    for name in (PID_FILE, STATE_FILE):
        with contextlib.suppress(FileNotFoundError):
            (d / name).unlink()


def _terminate(pid: int, timeout: float = 20.0) -> None:
    """SIGTERM, then SIGKILL if it does not exit in time; reaps the child if it is ours."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, os.WNOHANG)
        if not _pid_alive(pid):
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.kill(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def stop(data: Path | str | None = None, timeout: float = 20.0) -> bool:
    """Stop the server of this data directory; returns False if none was running."""
    d = _resolve_data_dir(data)
    pid = _running_pid(d)
    if pid is None:
        _cleanup_state(d)
        return False
    _terminate(pid, timeout)
    _cleanup_state(d)
    return True


@contextlib.contextmanager
def running_server(
    port: int | None = None,
    data: Path | str | None = None,
    host: str = DEFAULT_HOST,
    *,
    keep: bool = False,
) -> Iterator[ServerInfo]:
    """A server for the duration of a block (tests): free port and a temporary data dir by default.

    Pytest: ``@pytest.fixture(scope="module")`` around ``with running_server() as info: yield info``.
    """
    with contextlib.ExitStack() as stack:
        if data is None:
            data = stack.enter_context(tempfile.TemporaryDirectory(prefix="greval-argilla-"))
        info = start(port or free_port(host), data, host)
        try:
            yield info
        finally:
            if not keep:
                stop(info.data_dir)
