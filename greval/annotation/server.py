"""Manage the embedded Argilla server: its own venv, start/stop in the background, status.

argilla-server 2.8.0 pins pydantic 2.9, fastapi 0.115, httpx 0.27 and typer 0.9, so it lives in a
virtual environment of its own under ``data_dir()/argilla/venv`` and runs as a separate process
(``argilla_server/serve.py``) with SQLite, an in-process Redis stand-in and greval's search engine.
Nothing here imports argilla_server.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

if sys.platform != "win32":  # file locks; Windows has no fcntl, and there they are no-ops
    import fcntl

from greval.errors import GrevalError, Remedy, option
from greval.paths import argilla_server_dir, data_dir

ARGILLA_SERVER_VERSION = "2.8.0"
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 6900
STATE_FILE = "server.json"
PID_FILE = "server.pid"
LOG_FILE = "server.log"
CREDENTIALS_FILE = "credentials.json"
LOCK_FILE = "server.lock"
SETUP_LOG = "setup.log"
_MARKER = ".greval-requirements.sha256"

#: What creating the environment costs (pip installs ~95 pinned packages), measured on this project's 2-core
#: machines: 60 s with pip's cache warm (2026-11-26), about 10 min with an empty cache while other builds ran.
SETUP_ESTIMATE = "1–10 min: about 1 with pip's cache warm, up to 10 with an empty one on a busy machine"


class AnnotationServerError(GrevalError):
    """A problem the user can act on; the CLI prints the message as one line, without a traceback (and the
    ``remedy``, a greval command that would fix it, as a command line)."""

    def __init__(self, *args: object, remedy: Remedy | None = None) -> None:
        super().__init__(*args)
        self.remedy = remedy


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
    reused: bool = False  # True if the server was already running (started by an earlier or concurrent `up`)


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
    return argilla_server_dir() / "requirements.txt"


def serve_script() -> Path:
    return argilla_server_dir() / "serve.py"


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


def setup_log(venv: Path | None = None) -> Path:
    """The log of the last environment setup (pip's whole output), beside the venv in greval's data dir."""
    return (venv or venv_dir()).parent / SETUP_LOG


class _StepLine:
    """pip's progress: on a terminal one status line on stderr, rewritten in place with pip's latest step;
    elsewhere (a log, a pipe, CI) a line through ``say`` every tenth package downloaded and when installing
    starts, with the time so far."""

    def __init__(self, say: Callable[[str], None] | None = None) -> None:
        self.active = sys.stderr.isatty()
        self.width = max(20, shutil.get_terminal_size().columns - 1)
        self.shown = False
        self.say = say
        self.collected = 0
        self.started = time.monotonic()
        try:
            lines = requirements_file().read_text(encoding="utf-8").splitlines()
        except OSError:
            lines = []
        self.total = sum(1 for line in lines if line.strip() and not line.lstrip().startswith("#"))

    def pip_line(self, line: str) -> None:
        """One line of pip's output."""
        if line.startswith(("Collecting ", "Processing ")):  # from an index / from a local file
            self.collected += 1
        if self.active:
            if line.startswith(_STEPS):
                self.show(f"  {line.strip()}")
            return
        if self.say is None:
            return
        minutes = f"{(time.monotonic() - self.started) / 60:.0f} min so far"
        if line.startswith(("Collecting ", "Processing ")) and self.collected % 10 == 0:
            self.say(f"Argilla environment: {self.collected} of {self.total} packages downloaded ({minutes})")
        elif line.startswith("Installing collected packages"):
            count = len(line.partition(":")[2].split(","))
            self.say(f"Argilla environment: installing {count} packages ({minutes}) …")

    def show(self, text: str) -> None:
        if self.active:
            sys.stderr.write("\r" + text[: self.width].ljust(self.width))
            sys.stderr.flush()
            self.shown = True

    def clear(self) -> None:
        if self.shown:
            sys.stderr.write("\r" + " " * self.width + "\r")
            sys.stderr.flush()
            self.shown = False


_STEPS = ("Collecting ", "Downloading ", "Installing collected packages", "Successfully installed")


def _run(cmd: list[str], log: Path, step: _StepLine) -> None:
    """Run a setup command with its output appended to ``log``; pip's steps update the status line.

    On failure the error names the log and carries its last lines."""
    with open(log, "a", encoding="utf-8", errors="replace") as fh:
        fh.write(f"$ {' '.join(cmd)}\n")
        fh.flush()
        try:
            proc = subprocess.Popen(
                cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1
            )
        except OSError as exc:
            fh.write(f"cannot run {cmd[0]}: {exc}\n")
            raise AnnotationServerError(
                f"setting up the Argilla environment failed: cannot run {cmd[0]} ({exc.strerror or exc}); log: {log}"
            ) from None
        with proc:
            assert proc.stdout is not None
            for line in proc.stdout:
                fh.write(line)
                step.pip_line(line)
            code = proc.wait()
    if code != 0:
        tail = "\n".join(f"  {line}" for line in _tail_lines(log, 12))
        raise AnnotationServerError(
            f"setting up the Argilla environment failed ({Path(cmd[0]).name} {' '.join(cmd[1:3])} exited with "
            f"code {code}); the whole output is in {log}, its last lines:\n{tail}"
        )


def ensure_venv(on_line: Callable[[str], None] | None = None, *, force: bool = False, venv: Path | None = None) -> Path:
    """Create the Argilla venv and install the pinned requirements, unless already done; returns its python.

    pip's output goes to :func:`setup_log`; ``on_line`` receives the few progress messages (default: stderr),
    and on a terminal one status line shows pip's current step.
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
    if sys.platform == "win32":
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
    log = setup_log(venv)
    log.write_text("")  # this attempt's output only
    say(
        f"Setting up the Argilla server environment (argilla-server {ARGILLA_SERVER_VERSION}, once, "
        f"{SETUP_ESTIMATE}) in {venv}; log: {log}"
    )
    started = time.monotonic()
    step = _StepLine(say)
    try:
        if not venv_python(venv).exists():
            step.show("  creating the virtual environment")
            _run([sys.executable, "-m", "venv", str(venv)], log, step)
        step.show(f"  installing argilla-server {ARGILLA_SERVER_VERSION} and its pinned dependencies")
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
            log,
            step,
        )
    finally:
        step.clear()  # before any message: the error, or "ready"
    (venv / _MARKER).write_text(_requirements_hash())
    say(f"Argilla server environment ready ({time.monotonic() - started:.0f} s).")
    return venv_python(venv)


# --------------------------------------------------------------------------- process state


def _read_json(path: Path) -> dict[str, object]:
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def _pid_alive(pid: int, data: Path | None = None) -> bool:
    """True if ``pid`` is a serve.py process (of ``data`` if given): guards against a reused pid after a crash."""
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
        return "serve.py" in text and (data is None or _cwd_is(pid, data))
    return True


def _cwd_is(pid: int, data: Path) -> bool:
    """Whether ``pid`` runs in ``data`` (start() runs the server there); True if that cannot be told."""
    try:
        return os.path.samefile(f"/proc/{pid}/cwd", data)
    except OSError:
        return True


def _recorded_pid(data: Path) -> int | None:
    """The pid in the pid file, alive or not."""
    try:
        pid_text = (data / PID_FILE).read_text().strip()
    except OSError:
        return None
    return int(pid_text) if pid_text.isdigit() else None


def _running_pid(data: Path) -> int | None:
    pid = _recorded_pid(data)
    return pid if pid is not None and _pid_alive(pid, data) else None


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` atomically to a file only the owner can read (readers never see half a pid file)."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise


def _make_private(d: Path) -> None:
    """Create ``d`` (0700) and take group/other access away from everything in it.

    The database holds the owner's API key in plain text. Stores created by older greval versions
    (0755 directories, 0644 files) are fixed on the next start.
    """
    try:
        d.mkdir(mode=0o700, parents=True, exist_ok=True)
        os.chmod(d, 0o700)
    except OSError as exc:
        raise AnnotationServerError(f"cannot use {d} as the Argilla data directory: {exc.strerror or exc}") from None
    for root, dirs, files in os.walk(d):  # does not descend into symlinked directories
        for name, private in [*((n, 0o700) for n in dirs), *((n, 0o600) for n in files)]:
            path = Path(root) / name
            with contextlib.suppress(OSError):  # vanished meanwhile, or not ours
                mode = path.lstat().st_mode
                if stat.S_ISLNK(mode):
                    continue
                wanted = (stat.S_IMODE(mode) & 0o700) | private
                if stat.S_IMODE(mode) != wanted:
                    os.chmod(path, wanted)


@contextlib.contextmanager
def _data_lock(d: Path, wait: float | None, on_wait: Callable[[], None] | None = None) -> Iterator[bool]:
    """Hold an exclusive lock on ``d``'s lock file; yields whether it was acquired.

    ``wait`` is how long to try (None: until the holder lets go; it is released when its process
    exits, however that happens). ``on_wait`` runs once if the lock is busy. The lock file itself is
    never removed: removing it would let two processes hold "the" lock on different files. A no-op
    where fcntl is missing (Windows).
    """
    if sys.platform == "win32":
        yield True
        return
    try:
        fd = os.open(d / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o600)  # not inherited by the server process
    except OSError as exc:
        raise AnnotationServerError(f"cannot lock the Argilla data directory {d}: {exc.strerror or exc}") from None
    try:
        deadline = None if wait is None else time.monotonic() + wait
        acquired = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                acquired = True
                break
            except BlockingIOError:
                pass
            if deadline is not None and time.monotonic() >= deadline:
                break
            if on_wait is not None:
                on_wait()
                on_wait = None
            time.sleep(0.1)
        yield acquired
    finally:
        os.close(fd)  # releases the lock


def _forget(d: Path, pid: int | None) -> None:
    """Remove the pid and state files if they record ``pid`` (None: a pid that is no longer running).

    Call with the data directory's lock held: a concurrent `up` writes its own files under it.
    """
    recorded = _recorded_pid(d)
    state_pid = _read_json(d / STATE_FILE).get("pid")
    for name, owner in ((PID_FILE, recorded), (STATE_FILE, state_pid if isinstance(state_pid, int) else None)):
        if not (d / name).exists():
            continue
        mine = owner == pid if pid is not None else owner is None or not _pid_alive(owner, d)
        if mine:
            with contextlib.suppress(FileNotFoundError):
                (d / name).unlink()


def _url(host: str, port: int) -> str:
    shown = "127.0.0.1" if host in {"0.0.0.0", ""} else host
    if ":" in shown:
        shown = f"[{shown}]"
    return f"http://{shown}:{port}"


def credentials_file(data: Path | str | None = None) -> Path:
    """Where serve.py keeps the owner's login (0600, in the 0700 data directory)."""
    return _resolve_data_dir(data) / CREDENTIALS_FILE


def read_credentials(data: Path | str | None = None) -> dict[str, str]:
    """The owner's credentials: stored by serve.py on first start, overridden by GREVAL_ARGILLA_* env."""
    stored = {k: str(v) for k, v in _read_json(credentials_file(data)).items()}
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


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on TCP ``port`` (any address), from Linux's /proc/net tables."""
    inodes = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as fh:
            next(fh, None)  # the header
            for line in fh:
                fields = line.split()
                local, state, inode = fields[1], fields[3], fields[9]
                if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                    inodes.add(inode)
    return inodes


def _listening_pid(port: int) -> int | None:
    """The process holding a socket that listens on ``port``, if this user may see it (Linux /proc)."""
    targets = {f"socket:[{inode}]" for inode in _listening_inodes(port)}
    if not targets:
        return None
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        with contextlib.suppress(OSError):
            for fd in (proc / "fd").iterdir():
                with contextlib.suppress(OSError):
                    if os.readlink(fd) in targets:
                        return int(proc.name)
    return None


def port_holder(host: str, port: int) -> str | None:
    """Who holds ``port`` on ``host``, in words: greval's Argilla server (with its data directory) or the
    program (its command line, shortened, and pid); "another program" when it cannot be told; None when the
    port is free."""
    if port_free(host, port):
        return None
    pid = _listening_pid(port)
    if pid is None:
        return "another program (not one of this user's, or it cannot be told which)"
    try:
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")
    except OSError:
        return f"another program (pid {pid})"
    argv = [a for a in argv if a]
    if any(Path(a).name == "serve.py" for a in argv) and "--data-dir" in argv:
        data = argv[argv.index("--data-dir") + 1] if argv.index("--data-dir") + 1 < len(argv) else "?"
        return f"greval's Argilla server of another data directory, {data} (pid {pid})"
    command = " ".join([Path(argv[0]).name, *argv[1:]]) if argv else "?"
    return f"{command[:80]}{'…' if len(command) > 80 else ''} (pid {pid})"


def healthy(url: str, timeout: float = 2.0) -> bool:
    # Imported here: urllib.request brings http.client, email and ssl (~30 ms), which `greval annotate status`
    # and `down` need only when a server is running.

    try:
        with urllib.request.urlopen(f"{url}/api/v1/status", timeout=timeout) as resp:
            return bool(resp.status == 200)
    except (urllib.error.URLError, OSError, ValueError):
        return False


def _tail_lines(log: Path, lines: int = 8) -> list[str]:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]


def _log_tail(log: Path, lines: int = 8) -> str:
    return " | ".join(line.strip() for line in _tail_lines(log, lines))


# --------------------------------------------------------------------------- start / stop / status


def status(data: Path | str | None = None) -> ServerStatus:
    """Whether a server runs for this data directory, and where."""
    d = _resolve_data_dir(data)
    pid = _running_pid(d)
    state = _read_json(d / STATE_FILE)
    url = str(state["url"]) if pid and "url" in state else None
    return ServerStatus(running=pid is not None, url=url, pid=pid, data_dir=d)


def _info(d: Path, url: str, pid: int, *, reused: bool = False) -> ServerInfo:
    creds = read_credentials(d)
    return ServerInfo(
        url=url,
        username=creds.get("username", ""),
        password=creds.get("password", ""),
        api_key=creds.get("api_key", ""),
        pid=pid,
        data_dir=d,
        workspace=creds.get("workspace", "argilla"),
        reused=reused,
    )


def start(
    port: int = DEFAULT_PORT,
    data: Path | str | None = None,
    host: str = DEFAULT_HOST,
    *,
    timeout: float = 180.0,
    on_line: Callable[[str], None] | None = None,
    stock: bool = False,
) -> ServerInfo:
    """Start the server in the background (venv created first if missing) and wait until it is healthy.

    ``stock``: serve without greval's ingest patches (``argilla_server/ingest_patch.py``: parsed settings cached,
    no webhook events built when no webhook is enabled), as argilla-server ships; benchmarks compare the two.
    A reused server keeps the mode it was started in.

    If a server already runs for ``data`` it is reused (``reused=True``); if it is still starting,
    this waits for it. Concurrent calls for one data directory are serialized by a lock file in it:
    the first starts the server, the others wait and then reuse it. Raises PortInUseError if the
    port is taken. The data directory and everything in it is made private to the user (0700/0600).
    """
    d = _resolve_data_dir(data)
    _make_private(d)
    say = on_line or (lambda s: print(s, file=sys.stderr, flush=True))

    def waiting() -> None:
        say(f"Another `greval annotate up` is starting the Argilla server for {d}; waiting for it ...")

    with _data_lock(d, wait=None, on_wait=waiting):
        current = status(d)
        if current.running and current.pid:
            reused = _await_existing(d, current, timeout)
            if reused is not None:
                return reused
        return _spawn(d, port, host, timeout, on_line, stock=stock)


def _await_existing(d: Path, current: ServerStatus, timeout: float) -> ServerInfo | None:
    """Wait for an already running server to answer; None if it exited meanwhile (so start a new one)."""
    assert current.pid is not None
    deadline = time.monotonic() + timeout
    while current.url is not None and time.monotonic() < deadline:
        if healthy(current.url, timeout=1.0):
            return _info(d, current.url, current.pid, reused=True)
        if not _pid_alive(current.pid, d):
            _forget(d, current.pid)
            return None
        time.sleep(0.25)
    raise AnnotationServerError(
        f"an Argilla server (pid {current.pid}) runs for {d} but does not answer"
        + (f" at {current.url}" if current.url else ""),
        remedy=Remedy("annotate down", {"data_dir": str(d)} if d != default_data_dir() else {}, "to stop it"),
    )


def _spawn(
    d: Path, port: int, host: str, timeout: float, on_line: Callable[[str], None] | None, *, stock: bool = False
) -> ServerInfo:
    """Start serve.py and wait until it answers. The caller holds the data directory's lock."""
    holder = port_holder(host, port)
    if holder is not None:
        raise PortInUseError(
            f"port {port} on {host} is taken by {holder}; choose another with {option('port')} or stop it"
        )
    python = ensure_venv(on_line)
    url = _url(host, port)
    log = d / LOG_FILE
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    # greval's own environment must not leak into the server's interpreter.
    for var in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(var, None)
    log_fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(log_fd, "ab") as log_fh:
        proc = subprocess.Popen(
            [
                str(python),
                str(serve_script()),
                "--data-dir",
                str(d),
                "--host",
                host,
                "--port",
                str(port),
                *(["--stock"] if stock else []),
            ],
            stdin=subprocess.DEVNULL,
            stdout=log_fh,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=str(d),
            start_new_session=True,
            # Everything the server creates (database, journals, server_id.dat) is private to the user.
            umask=0o077 if os.name == "posix" else -1,
        )
    _write_private(d / STATE_FILE, json.dumps({"pid": proc.pid, "url": url, "host": host, "port": port}))
    _write_private(d / PID_FILE, f"{proc.pid}\n")
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            _forget(d, proc.pid)
            raise AnnotationServerError(
                f"the Argilla server exited during start (code {proc.returncode}); see {log}: {_log_tail(log, 3)}"
            )
        if healthy(url, timeout=1.0):
            return _info(d, url, proc.pid)
        time.sleep(0.25)
    _terminate(proc.pid)
    _forget(d, proc.pid)
    raise AnnotationServerError(f"the Argilla server did not become healthy within {timeout:.0f}s; see {log}")


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
    """Stop the server of this data directory; returns False if none was running.

    Also stops a server that a concurrent `up` is still starting. The pid and state files are
    removed only if they record the stopped server (or a dead one), and only under the data
    directory's lock, so a concurrent `up` never loses the files of the server it started.
    """
    d = _resolve_data_dir(data)
    if not d.is_dir():
        return False
    pid = _running_pid(d)
    if pid is not None:
        _terminate(pid, timeout)
    # A concurrent `up` holding the lock owns the state files (it removes them if its server dies).
    with contextlib.suppress(AnnotationServerError), _data_lock(d, wait=5.0 if pid else 0.0) as locked:
        if locked:
            _forget(d, pid)
    return pid is not None


@contextlib.contextmanager
def running_server(
    port: int | None = None,
    data: Path | str | None = None,
    host: str = DEFAULT_HOST,
    *,
    keep: bool = False,
    stock: bool = False,
) -> Iterator[ServerInfo]:
    """A server for the duration of a block (tests): free port and a temporary data dir by default.

    Pytest: ``@pytest.fixture(scope="module")`` around ``with running_server() as info: yield info``.
    """
    with contextlib.ExitStack() as stack:
        if data is None:
            data = stack.enter_context(tempfile.TemporaryDirectory(prefix="greval-argilla-"))
        info = start(port or free_port(host), data, host, stock=stock)
        try:
            yield info
        finally:
            if not keep:
                stop(info.data_dir)
