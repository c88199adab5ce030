"""Benchmark `greval serve` against `greval run`: throughput on the same records, and the latency a warm
(cached) request adds.

A local OpenAI-compatible server (greval.testing.openai_server, its own process) answers every request a fixed
latency (200 ms) after it arrives. One round judges N fresh records (chunk_evaluation, k chunks, one call per
record) twice, each into a fresh store with the same model concurrency:

* run:   ``greval.runner.arun`` in this process (what ``greval run`` does);
* serve: ``greval serve`` as its own process (uvicorn, access log on), fed by an httpx client in this process
  sending ``POST /v1/judge`` requests of ``--per-request`` records, ``--clients`` at a time.

The ratio serve ÷ run throughput is printed per round and as the median of the rounds. Then, against the
served store (every verdict cached), ``--warm`` requests of one record each, one at a time: their latency as
the client sees it (p50 / p99), beside the same client's ``GET /healthz`` (the HTTP floor), so the difference is
what greval adds to a cached lookup.

    python scripts/bench_serve.py                       # 1,000 records at 200 ms, 3 rounds, 1 record a request
    python scripts/bench_serve.py --per-request 100 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx

from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.runner.driver import arun
from greval.runner.options import RunOptions
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

SPEC = "chunk_evaluation"
KEY = "sk-bench-not-a-real-key-000000"


def rows(n: int, k: int, tag: str) -> list[dict[str, Any]]:
    return [
        {
            "id": f"{tag}-{i}",
            "question": f"Which of these passages explain item {i} of batch {tag}?",
            "chunks": [f"Passage {j} about item {i}: " + "lorem ipsum dolor sit amet " * 12 for j in range(k)],
        }
        for i in range(n)
    ]


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


async def run_pass(srv: OpenAIServer, data: list[dict[str, Any]], conc: int, store: Path) -> float:
    cfg = JudgeConfig.parse("openai:judge-test", base_url=srv.base_url, timeout=60)
    records = [Record.from_mapping(r) for r in data]
    with Store(store) as st:
        t0 = time.perf_counter()
        summary = await arun(resolve_specs([SPEC]), records, st, cfg, options=RunOptions(concurrency=conc))
        seconds = time.perf_counter() - t0
    assert summary.calls == len(data), summary.calls
    return len(data) / seconds


class Served:
    """`greval serve` in its own process, on a free port."""

    def __init__(self, srv: OpenAIServer, store: Path, conc: int, log: Path, src: Path | None = None) -> None:
        """``src``: the greval source tree the server runs (default: this checkout's)."""
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        env = {**os.environ, "OPENAI_API_KEY": KEY, "PYTHONPATH": str(src or Path(__file__).resolve().parents[1])}
        cmd = [sys.executable, "-m", "greval", "serve", "-s", SPEC, "--store", str(store), "-c", str(conc)]
        cmd += ["--judge", "openai:judge-test", "--base-url", srv.base_url, "--port", str(self.port)]
        cmd += ["--max-records", "100000", "--max-body", str(1 << 28), "--requests-per-key", "100000"]
        self.log = open(log, "w")  # noqa: SIM115 - closed in stop()
        # run from the source tree: `python -m` puts the working directory before PYTHONPATH
        self.proc = subprocess.Popen(cmd, env=env, stdout=self.log, stderr=self.log, cwd=env["PYTHONPATH"])
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{self.url}/healthz").status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            if self.proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"greval serve did not start; see {log}")
            time.sleep(0.1)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(30)
        self.log.close()


async def serve_pass(url: str, data: list[dict[str, Any]], per_request: int, clients: int) -> float:
    batches = [data[i : i + per_request] for i in range(0, len(data), per_request)]
    it = iter(batches)
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:

        async def client() -> None:
            for batch in it:
                r = await http.post("/v1/judge", json={"spec": SPEC, "records": batch})
                r.raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(min(clients, len(batches)))))
        return len(data) / (time.perf_counter() - t0)


async def warm_pass(url: str, data: list[dict[str, Any]], n: int) -> tuple[list[float], list[float]]:
    """Latency (ms) of cached single-record requests and of /healthz, alternating, one at a time."""
    judge_ms: list[float] = []
    health_ms: list[float] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as http:
        for i in range(n + 20):
            t0 = time.perf_counter()
            r = await http.post("/v1/judge", json={"spec": SPEC, "records": [data[i % len(data)]]})
            t1 = time.perf_counter()
            assert r.json()["calls"] == 0 and r.json()["results"][0]["cached"], r.text[:300]
            await http.get("/healthz")
            t2 = time.perf_counter()
            if i >= 20:  # warm-up: connections, first imports
                judge_ms.append(1000 * (t1 - t0))
                health_ms.append(1000 * (t2 - t1))
    return judge_ms, health_ms


def pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q * (len(s) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1000)
    ap.add_argument("--chunks", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per judge call")
    ap.add_argument("--concurrency", type=int, default=16, help="model calls in flight (run and serve alike)")
    ap.add_argument("--per-request", type=int, default=1, help="records per POST /v1/judge")
    ap.add_argument("--clients", type=int, default=64, help="requests in flight from the client")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--warm", type=int, default=300, help="cached single-record requests timed")
    args = ap.parse_args()
    ratios: list[float] = []
    with OpenAIServer() as srv, tempfile.TemporaryDirectory() as tmp:
        srv.configure(latency=args.latency)
        print(
            f"{args.records} records ({SPEC}, {args.chunks} chunks), judge latency {1000 * args.latency:.0f} ms, "
            f"{args.concurrency} calls in flight; serve: {args.per_request} record(s) a request, "
            f"{args.clients} requests in flight; load average before: {os.getloadavg()[0]:.2f}"
        )
        # This process imports the judge stack on its first run; a served process builds it at start-up (not
        # timed). Warm this side up too, so round 1 compares judging with judging.
        asyncio.run(run_pass(srv, rows(16, args.chunks, "warm-up"), args.concurrency, Path(tmp) / "warm-up.sqlite"))
        served_store = Path(tmp) / "serve-0.sqlite"
        served_data: list[dict[str, Any]] = []
        for r in range(args.rounds):
            data = rows(args.records, args.chunks, f"round{r}")
            run_tp = asyncio.run(run_pass(srv, data, args.concurrency, Path(tmp) / f"run-{r}.sqlite"))
            store = Path(tmp) / f"serve-{r}.sqlite"
            served = Served(srv, store, args.concurrency, Path(tmp) / f"serve-{r}.log")
            try:
                serve_tp = asyncio.run(serve_pass(served.url, data, args.per_request, args.clients))
            finally:
                served.stop()
            ratios.append(serve_tp / run_tp)
            print(
                f"round {r + 1}: run {run_tp:.1f} records/s, serve {serve_tp:.1f} records/s, "
                f"ratio {serve_tp / run_tp:.3f} (limit {args.concurrency / args.latency:.0f}/s)"
            )
            if r == 0:
                served_store, served_data = store, data
        served = Served(srv, served_store, args.concurrency, Path(tmp) / "serve-warm.log")
        try:
            judge_ms, health_ms = asyncio.run(warm_pass(served.url, served_data, args.warm))
        finally:
            served.stop()
        added = [j - h for j, h in zip(judge_ms, health_ms, strict=True)]
        print(f"serve ÷ run throughput: median {statistics.median(ratios):.3f} over {len(ratios)} paired rounds")
        print(
            f"warm /v1/judge (1 record, cached): p50 {pct(judge_ms, 0.5):.2f} ms, p99 {pct(judge_ms, 0.99):.2f} ms; "
            f"GET /healthz: p50 {pct(health_ms, 0.5):.2f} ms, p99 {pct(health_ms, 0.99):.2f} ms; "
            f"added by the lookup (each request less the /healthz right after it): p50 {pct(added, 0.5):.2f} ms, "
            f"p99 {pct(added, 0.99):.2f} ms"
        )
        print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
