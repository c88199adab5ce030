"""Finding and building llama.cpp's ``llama-server``: once, from source, into greval's data folder.

The fallback engine (:mod:`greval.llm.local.engine`): the local judge runs on the ``xllamacpp`` wheel where pip
has one, and on this build elsewhere. It is built from the ``vendor/llama.cpp`` tree of the ``llama-cpp-python``
source package on PyPI, with a fixed portable x86-64 instruction set: a native build picks up instructions (AMX)
that some VMs report but do not enable, and crashes on the first request.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

from rich.console import Console

from greval.llm.local.common import LocalJudgeError, env_int, log_tail
from greval.paths import data_dir

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

#: What a first build costs (download, cmake, 206 compile steps with ninja -j2), measured on this project's
#: 2-core machines: 465 s beside the rest of scripts/setup.sh (2026-11-26), 34 min while other builds and tests
#: ran (issue 29).
BUILD_ESTIMATE = "about 8 min on 2 idle cores, up to 35 on a busy machine"

BINARY_NAME = "llama-server"
BUILD_INFO_NAME = "build.json"

ENV_SERVER = "GREVAL_LLAMA_SERVER"
ENV_BUILD_JOBS = "GREVAL_LLAMA_BUILD_JOBS"
ENV_SDIST = "GREVAL_LLAMA_SDIST"

_NINJA_STEP = re.compile(r"^\[(\d+)/(\d+)\]")


def llama_server_dir(version: str = LLAMA_CPP_PYTHON_VERSION) -> Path:
    """Where the build for ``version`` lives: ``data_dir()/llama.cpp/<version>``."""
    return data_dir() / "llama.cpp" / version


def env_override() -> Path | None:
    """``$GREVAL_LLAMA_SERVER``: a llama-server binary to use as it is (None: unset); a bad path is an error."""
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
    override = env_override()
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
        self._steps_started = time.monotonic()
        if enabled:
            self._console = Console(stderr=True)

    def phase(self, message: str) -> None:
        if self._console is not None:
            self._console.print(f"[bold]llama-server:[/bold] {message}", highlight=False)

    def start_steps(self) -> None:
        self._steps_started = time.monotonic()
        if self._console is None or not self._console.is_terminal:
            return
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            Progress,
            TextColumn,
            TimeElapsedColumn,
            TimeRemainingColumn,
        )

        self._progress = Progress(
            TextColumn("compiling"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("left"),
            TimeRemainingColumn(),
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
            line = _step_line(done, total, time.monotonic() - self._steps_started)
            self._console.print(f"llama-server: {line}", highlight=False)

    def stop_steps(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None


def say(message: str) -> None:
    """One line about llama-server on stderr (whole: a log keeps it as one line), as the build's lines begin."""
    print(f"llama-server: {message}", file=sys.stderr, flush=True)


def _step_line(done: int, total: int, elapsed: float) -> str:
    """A plain progress line of the compile (a log, a pipe, CI): steps, time so far, an estimate of the rest
    (at the pace so far: the steps differ in cost, so it is rough)."""
    pct = done * 100 // max(total, 1)
    left = "" if done in (0, total) else f", about {elapsed * (total - done) / done / 60:.0f} min left"
    return f"compiling {pct}% ({done}/{total} steps, {elapsed / 60:.0f} min so far{left})"


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
    return env_int(ENV_BUILD_JOBS, default=max(1, min(os.cpu_count() or 1, 2)), minimum=1)


def _fetch_sdist(version: str, dest: Path, log: IO[str], reporter: _Reporter) -> Path:
    """The llama-cpp-python sdist: ``$GREVAL_LLAMA_SDIST`` if set, else downloaded with pip."""
    preset = os.environ.get(ENV_SDIST, "").strip()
    if preset:
        path = Path(preset).expanduser()
        if not path.is_file():
            raise LocalJudgeError(f"{ENV_SDIST} points to a missing file: {path}")
        return path
    reporter.phase(f"downloading llama-cpp-python=={version} source from PyPI (77 MB)")
    # --no-binary names the one package whose source we want: with ":all:" pip also built the sdist's own
    # build dependencies (scikit-build-core, hatchling, hatch-vcs …) from source, in nested processes, only
    # to prepare its metadata: ~10 minutes of a cold first run. Their wheels take seconds.
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--no-binary", "llama-cpp-python",
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
        reporter.phase(f"not built yet: building it now, once ({BUILD_ESTIMATE})")
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
            tail = log_tail(failed_log)
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
            raise LocalJudgeError("the built llama-server does not run (asked for its version, it failed)")
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
