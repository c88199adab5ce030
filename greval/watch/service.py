"""What keeps ``greval watch --every`` running: its health, served as JSON on ``/healthz`` (127.0.0.1 only), the
back-off between tries at a source that fails, and the process's resident memory (what the health reports, so
that a long run's memory can be watched from outside)."""

from __future__ import annotations

import json
import os
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["Backoff", "Health", "HealthServer", "rss_mb"]


def rss_mb() -> float | None:
    """This process's resident memory now, in MB (Linux's /proc; None elsewhere)."""
    try:
        with open("/proc/self/statm", encoding="ascii") as fh:
            pages = int(fh.read().split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return pages * os.sysconf("SC_PAGE_SIZE") / 2**20


@dataclass
class Backoff:
    """Seconds to wait before the next try at a failing source: ``first``, doubled at each failure up to
    ``most``; back to ``first`` after a success."""

    first: float = 5.0
    most: float = 300.0
    failures: int = 0

    def next(self) -> float:
        self.failures += 1
        return float(min(self.most, self.first * 2 ** (self.failures - 1)))

    def reset(self) -> None:
        self.failures = 0


@dataclass
class Health:
    """The watch's state as ``/healthz`` reports it (shared with the server thread under a lock)."""

    source: str
    started: float = field(default_factory=time.time)
    passes: int = 0
    last_pass: float | None = None
    last_error: str | None = None
    retry_in: float | None = None
    traces: int = 0
    judged: int = 0
    alarms: int = 0
    stopping: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def passed(self, traces: int, judged: int, alarms: int) -> None:
        with self.lock:
            self.passes += 1
            self.last_pass = time.time()
            self.last_error = self.retry_in = None
            self.traces += traces
            self.judged += judged
            self.alarms = alarms

    def failed(self, line: str, retry_in: float) -> None:
        with self.lock:
            self.last_error, self.retry_in = line, retry_in

    def snapshot(self) -> tuple[int, dict[str, Any]]:
        """(HTTP status, body): 200 while the last pass went through, 503 while the source fails."""
        with self.lock:
            ok = self.last_error is None
            body = {
                "status": "ok" if ok else "failing",
                "source": self.source,
                "passes": self.passes,
                "last_pass": self.last_pass,
                "last_error": self.last_error,
                "retry_in_s": self.retry_in,
                "traces_read": self.traces,
                "judged": self.judged,
                "windows_in_alarm": self.alarms,
                "stopping": self.stopping,
                "uptime_s": round(time.time() - self.started, 1),
                "rss_mb": None if (mb := rss_mb()) is None else round(mb, 1),
            }
        return (200 if ok else 503), body


class HealthServer:
    """``GET /healthz`` on 127.0.0.1:``port`` (0: a free port, then :attr:`port`), served from a thread."""

    def __init__(self, health: Health, port: int) -> None:
        state = health

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # http.server's name
                if self.path.split("?")[0] not in ("/healthz", "/health"):
                    self.send_error(404)
                    return
                code, body = state.snapshot()
                data = json.dumps(body).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, format: str, *args: Any) -> None:  # http.server's names
                return  # no access log on stderr

        self._server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self._server.daemon_threads = True
        self.port = int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, name="greval-watch-health", daemon=True)

    def start(self) -> HealthServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
