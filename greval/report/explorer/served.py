"""The report and record explorer of a store as ``greval serve`` shows them under ``/ui``: the files ``greval
report`` writes, built off the request path.

A request is answered at once from the last build; its HTML pages say when that build was made and whether a
newer one is under way. While someone views /ui, a background thread looks at the store (at most every
CHECK_EVERY seconds) and, when it changed, has a child process build the next report: one build at a time, at the
lowest CPU priority, never sooner after the last than that one took (at most half the time is spent building).
Judging requests share no lock, no interpreter and no memory with a build: before, each view rebuilt the report
inside the request, behind one lock (views of 16–181 s under judging traffic, the run 3× slower, the server's
memory 110 → 327 MB).
"""

from __future__ import annotations

import contextlib
import html
import json
import math
import mimetypes
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greval.errors import first_line
from greval.llm.retry import redact
from greval.report.store_report import build, write
from greval.store.backend import display
from greval.store.store import Store

#: Seconds between two looks at the store while /ui is viewed.
CHECK_EVERY = 5.0
#: Bootstrap resamples of the served report (the CLI's default is 1000; a page built on request stays quick).
RESAMPLES = 500
#: Seconds a build waits after the last one ended, at least (and at least as long as that one took).
MIN_GAP = 5.0
#: Seconds before a build that failed is tried again on a store that has not changed since.
RETRY_AFTER = 60.0
#: What the build process runs (``python -c``): the job comes as JSON on its standard input.
BUILD_CODE = "from greval.report.explorer.served import child; child()"
#: Longest request path (characters) and path part (bytes, a file name's limit) that can name a report file.
MAX_PATH = 1024
MAX_PART = 255
#: greval's own source folder, put on the build process's path when it is not there already.
_ROOT = str(Path(__file__).resolve().parents[3])
_BOOT = "import sys; sys.path[:0] = [p for p in sys.argv[1:2] if p not in sys.path]; "
_BAD_CHARACTER = re.compile(r"[\x00-\x1f\x7f\\\ufffd]")  # \ufffd: what was not UTF-8 in the address
#: What may come before a page's content (its head, the body tag): the note goes after it.
_HEAD = re.compile(
    r"\s*(?:<!doctype[^>]*>|<html[^>]*>|<head[^>]*>|</head>|<meta[^>]*>|<link[^>]*>|<base[^>]*>"
    r"|<title[^>]*>.*?</title>|<style[^>]*>.*?</style>|<body[^>]*>)",
    re.IGNORECASE | re.DOTALL,
)
_NOTE_STYLE = (
    "font:14px/1.4 system-ui,sans-serif;background:#fff3cd;color:#3d2e00;border:1px solid #c9a227;"
    "border-radius:4px;padding:.4rem .75rem;margin:.5rem 0"
)


@dataclass(frozen=True)
class Build:
    """A finished build: its folder, the store's activity it was built from, when it started (wall clock: the
    store as of then) and how many seconds it took."""

    folder: Path
    stamp: Any
    at: float
    seconds: float


@dataclass(frozen=True)
class Answer:
    """What a /ui request gets: the body, its media type, the status and extra headers."""

    body: bytes
    media_type: str
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


def report_path(path: str) -> str | None:
    """``path`` (a request's, under /ui/) as a path inside the report folder, or None when no report file can
    have it: too long, absolute, a control character, backslash or byte that was not UTF-8, a ``..`` part or
    one longer than a file name."""
    if len(path) > MAX_PATH or _BAD_CHARACTER.search(path) or path.startswith("/"):
        return None
    parts = [p for p in path.split("/") if p not in ("", ".")]
    if any(p == ".." or len(p.encode("utf-8", "replace")) > MAX_PART for p in parts):
        return None
    return "/".join(parts)


def read_file(folder: Path, rel: str) -> tuple[bytes, str] | None:
    """The bytes and media type of ``rel`` inside ``folder`` (a folder: its index.html); None when there is no
    such file, or the path leaves the folder or cannot be a file's."""
    try:
        root = folder.resolve()
        target = (root / (rel or "index.html")).resolve()
        if target.is_dir():
            target = target / "index.html"
        if not target.is_relative_to(root) or not target.is_file():
            return None
        body = target.read_bytes()
    except (OSError, ValueError):
        return None
    kind = mimetypes.guess_type(target.name)[0] or "application/octet-stream"
    if kind.startswith("text/") or kind.endswith("javascript"):
        kind += "; charset=utf-8"
    return body, kind


def with_note(page: bytes, note: str) -> bytes:
    """``page`` (HTML) with ``note`` as its first paragraph, after its head and body tag."""
    text = page.decode("utf-8", "replace")
    at = 0
    while m := _HEAD.match(text, at):
        at = m.end()
    shown = f'<p id="greval-served" role="status" style="{_NOTE_STYLE}">{html.escape(note)}</p>'
    return (text[:at] + shown + text[at:]).encode("utf-8")


def _clock(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(at))


def _ago(seconds: float) -> str:
    s = max(0, round(seconds))
    return f"{s} s ago" if s < 120 else f"{s // 60} min ago" if s < 7200 else f"{s // 3600} h ago"


class ServedReport:
    """One store's report folder, built in the background; ``file(path)`` answers a request under /ui."""

    def __init__(self, store_path: str | Path, system_column: str = "system") -> None:
        self.store_path = store_path
        self.system_column = system_column
        self._cond = threading.Condition()
        self._build: Build | None = None
        self._retired: list[Path] = []  # superseded folders, removed a build later (a request may read one)
        self._building: float | None = None  # when the build under way started (wall clock)
        self._changed = False  # the store differed from the build when last looked at
        self._failure: str | None = None
        self._failed: Any = None  # the store's activity when the last build failed
        self._retry = -math.inf  # monotonic clock: when that build may be tried again all the same
        # the monotonic clock's time of the last request, of the last look at the store, and before which no
        # build starts
        self._viewed = self._looked = self._ready = -math.inf
        self._proc: subprocess.Popen[bytes] | None = None
        self._thread: threading.Thread | None = None
        self._closed = False

    # ------------------------------------------------------------------------------------ requests
    def file(self, path: str) -> Answer | None:
        """What /ui/``path`` answers from the last build (None: a 404); before the first build, a page that
        says it is being built and reloads itself (503)."""
        rel = report_path(path)
        if rel is None:
            return None
        with self._cond:
            self._viewed = time.monotonic()
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._work, name="greval-ui-build", daemon=True)
                self._thread.start()
            self._cond.notify_all()
            build = self._build
            note = self._note() if build is not None else self._not_yet()
        if build is None:
            return self._waiting(note)
        found = read_file(build.folder, rel)
        if found is None:
            return None
        body, kind = found
        if kind.startswith("text/html"):
            body = with_note(body, note)
        return Answer(body, kind)

    def _note(self) -> str:
        """What the pages say of the build they show and the next one (the lock held)."""
        now, parts = time.time(), []
        if self._build is not None:
            parts.append(f"Report of the store as of {_clock(self._build.at)} ({_ago(now - self._build.at)}).")
        if self._building is not None:
            started = _ago(now - self._building)
            parts.append(f"A newer one is being built (started {started}): reload the page once it is done.")
        elif self._changed and self._failure is None:
            due = max(self._looked + CHECK_EVERY, self._ready) - time.monotonic()
            parts.append(f"The store has changed since: a newer one is built in {max(0, math.ceil(due))} s.")
        if self._failure is not None:
            parts.append(f"The last build failed: {self._failure}")
        return " ".join(parts) or "The report is being built."

    def _not_yet(self) -> str:
        """Why there is no report yet (the lock held)."""
        if self._building is None and self._failure is not None:
            return f"It cannot be built yet: {self._failure.rstrip('.')}."
        started = f" (started {_ago(time.time() - self._building)})" if self._building is not None else ""
        return f"It is being built{started}."

    def _waiting(self, note: str) -> Answer:
        body = (
            '<!doctype html><html lang=en><meta charset=utf-8><meta http-equiv="refresh" content="2">'
            "<title>greval report: being built</title><h1>greval report</h1>"
            f"<p>No report of this store yet. {html.escape(note)} This page reloads itself until it is ready.</p>"
        )
        return Answer(body.encode("utf-8"), "text/html; charset=utf-8", 503, {"Retry-After": "2"})

    # ------------------------------------------------------------------------------------ builds
    def _due(self) -> float:
        """Seconds until the next look at the store (inf: nobody viewed /ui since the last one)."""
        if self._viewed <= self._looked:
            return math.inf
        return max(self._looked + CHECK_EVERY, self._ready) - time.monotonic()

    def _work(self) -> None:
        """The background thread: look at the store when due, build when it changed, until closed."""
        while True:
            with self._cond:
                while not self._closed and (wait := self._due()) > 0:
                    self._cond.wait(None if wait == math.inf else wait)
                if self._closed:
                    return
                self._looked = time.monotonic()
            self._step()

    def _step(self) -> None:
        """One look at the store, and a build when it changed since the last build."""
        try:
            with Store(self.store_path) as st:
                stamp = st.activity()
        except Exception as exc:  # the store gone: the pages say so and the last build stays
            self._ended(None, None, time.time(), 0.0, _redact(first_line(exc)))
            return
        with self._cond:
            self._changed = self._build is None or stamp != self._build.stamp
            again = stamp != self._failed or time.monotonic() >= self._retry  # else it would fail as it did
            if not self._changed or not again or self._closed:
                return
            self._building = at = time.time()
        started = time.monotonic()
        folder, problem = self._run()
        self._ended(folder, stamp, at, time.monotonic() - started, problem)

    def _run(self) -> tuple[Path, str | None]:
        """Build the report into a new folder in a child process; the folder, and why it failed (or None)."""
        folder = Path(tempfile.mkdtemp(prefix="greval-ui-"))
        job = {"store": str(self.store_path), "system": self.system_column, "resamples": RESAMPLES}
        argv = [sys.executable, "-c", _BOOT + BUILD_CODE, _ROOT]
        with self._cond:
            if self._closed:
                return folder, "the server stopped"
            try:
                self._proc = proc = subprocess.Popen(
                    argv, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
                )
            except OSError as exc:
                return folder, f"cannot start the build process: {exc.strerror or exc}"
        try:
            _, err = proc.communicate(json.dumps({**job, "folder": str(folder)}).encode())
        finally:
            with self._cond:
                self._proc = None
        if proc.returncode == 0:
            return folder, None
        lines = err.decode("utf-8", "replace").strip().splitlines()
        return folder, _redact(lines[-1][:300] if lines else f"the build process ended with {proc.returncode}")

    def _ended(self, folder: Path | None, stamp: Any, at: float, seconds: float, problem: str | None) -> None:
        """A build (or a look at the store) ended: its folder becomes the one served, or its failure is shown."""
        with self._cond:
            self._building = None
            self._ready = time.monotonic() + max(MIN_GAP, seconds)
            if folder is not None and problem is None and not self._closed:
                if self._build is not None:
                    self._retired.append(self._build.folder)
                self._build, self._changed, self._failure = Build(folder, stamp, at, seconds), False, None
                self._failed = None
                gone, self._retired = self._retired[:-1], self._retired[-1:]
            else:
                if not self._closed:
                    self._failure, self._failed, self._retry = problem, stamp, time.monotonic() + RETRY_AFTER
                gone = [folder] if folder is not None else []
        for old in gone:
            shutil.rmtree(old, ignore_errors=True)

    def close(self) -> None:
        """Stop: the build under way ended, the background thread joined, every folder removed."""
        with self._cond:
            self._closed = True
            proc, thread = self._proc, self._thread
            self._cond.notify_all()
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
        if thread is not None:
            thread.join(30)
        with self._cond:
            folders = [*self._retired, *([self._build.folder] if self._build else [])]
            self._build, self._retired = None, []
        for folder in folders:
            shutil.rmtree(folder, ignore_errors=True)


def _redact(line: str) -> str:

    return redact(line)


def child() -> None:
    """The build process (:data:`BUILD_CODE`): its job (store, system column, resamples, folder) read as JSON
    from standard input, the report's files written into the folder; a failure is one line on standard error
    (the store's password masked) and exit status 1. It runs at the lowest CPU priority (nice 19)."""
    job = json.loads(sys.stdin.read())
    with contextlib.suppress(OSError, AttributeError):
        os.nice(19)  # the lowest: judging requests come first, a page may show an older build meanwhile
    try:
        folder = Path(job["folder"])
        rep = build(job["store"], (), job["system"], job["resamples"], folder)
        write(rep, folder)
    except Exception as exc:
        line = first_line(exc).replace(job["store"], display(job["store"]))
        print(_redact(line), file=sys.stderr)
        sys.exit(1)
