"""Prometheus text exposition (format 0.0.4) of what one server process did, written by hand: a handful of
counters and one histogram do not need a client library. With ``--workers N`` each worker counts its own
requests (scrape each, or sum them)."""

from __future__ import annotations

import bisect
import threading

from greval.serve.service import ServiceStats

#: Request latency buckets (seconds): a warm lookup is milliseconds, a judgement seconds.
BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)


def _esc(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def _labels(**labels: str) -> str:
    return "{" + ",".join(f'{k}="{_esc(v)}"' for k, v in labels.items()) + "}"


class Metrics:
    """Requests by route and status, their latency by route, and HTTP errors by kind."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.requests: dict[tuple[str, str, int], int] = {}
        self.errors: dict[str, int] = {}
        self.latency: dict[str, list[int]] = {}  # route -> count per bucket (+Inf last)
        self.latency_sum: dict[str, float] = {}

    def observe(self, method: str, route: str, status: int, seconds: float) -> None:
        with self._lock:
            key = (method, route, status)
            self.requests[key] = self.requests.get(key, 0) + 1
            counts = self.latency.setdefault(route, [0] * (len(BUCKETS) + 1))
            counts[bisect.bisect_left(BUCKETS, seconds)] += 1
            self.latency_sum[route] = self.latency_sum.get(route, 0.0) + seconds

    def error(self, kind: str) -> None:
        with self._lock:
            self.errors[kind] = self.errors.get(kind, 0) + 1

    def render(self, stats: ServiceStats, inflight: int) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, text: str) -> None:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")

        with self._lock:
            family("greval_serve_requests_total", "counter", "HTTP requests by method, route and status.")
            for (method, route, status), n in sorted(self.requests.items()):
                lines.append(
                    f"greval_serve_requests_total{_labels(method=method, route=route, status=str(status))} {n}"
                )
            family("greval_serve_request_duration_seconds", "histogram", "Request latency by route.")
            for route, counts in sorted(self.latency.items()):
                running = 0
                for bound, n in zip((*BUCKETS, float("inf")), counts, strict=True):
                    running += n
                    le = "+Inf" if bound == float("inf") else repr(bound)
                    lines.append(f"greval_serve_request_duration_seconds_bucket{_labels(route=route, le=le)} {running}")
                lines.append(
                    f"greval_serve_request_duration_seconds_sum{_labels(route=route)} {self.latency_sum[route]}"
                )
                lines.append(f"greval_serve_request_duration_seconds_count{_labels(route=route)} {running}")
            errors = dict(self.errors)
        for kind, n in stats.errors.items():
            errors[kind] = errors.get(kind, 0) + n
        family("greval_serve_errors_total", "counter", "Errors by kind: HTTP errors and judgements that failed.")
        for kind, n in sorted(errors.items()):
            lines.append(f"greval_serve_errors_total{_labels(kind=kind)} {n}")
        for name, counter, text in (
            ("greval_serve_cache_hits_total", stats.cache_hits, "Judgements answered from the store (no call)."),
            ("greval_serve_judgements_total", stats.judged, "Judgements made and stored by this process."),
            ("greval_serve_shared_total", stats.shared, "Requests that waited for a judgement already in flight."),
            ("greval_serve_judge_calls_total", stats.model_calls, "Judge model calls made by this process."),
        ):
            family(name, "counter", text)
            for spec, n in sorted(counter.items()):
                lines.append(f"{name}{_labels(spec=spec)} {n}")
        family("greval_serve_inflight_judgements", "gauge", "Judgements being made now.")
        lines.append(f"greval_serve_inflight_judgements {inflight}")
        return "\n".join(lines) + "\n"
