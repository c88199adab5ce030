"""Benchmark `greval serve` judging while its /ui is viewed: /v1/judge throughput with a viewer on /ui against
the same without one, the viewer's wait per view, and the server's memory.

A local OpenAI-compatible server (greval.testing.openai_server, its own process) answers every judge call a
fixed latency (200 ms) after it arrives. Each round judges two sets of N fresh records (chunk_evaluation, one
call per record), each set by its own `greval serve` process into a fresh store, fed by an httpx client here
(``--clients`` requests of one record in flight, as scripts/bench_serve.py):

* quiet:  nobody views /ui;
* viewed: meanwhile a viewer opens the report as a person with the page open does, one view after the other,
  ``--view-every`` seconds apart: GET /ui/, /ui/explorer/index.html and /ui/explorer/data/meta.js (a view's
  wait is the three together).

The two passes alternate their order from round to round. Printed per round and as the median of the rounds:
records/s of each pass and the ratio viewed ÷ quiet (1.0: viewing costs judging nothing); the views' waits
(p50 / max) and how many found a report (200) or none yet (503); the server process's resident memory
(VmRSS: at its first sample, its peak, at the end) and the peak of the server with its children (a /ui build
runs in a child process). ``--src DIR`` runs the server from another greval source tree (e.g. a checkout of the
code before) with the same client, records and judge, for a before / after figure.

    python scripts/bench_serve_ui.py                          # 2,000 records, 3 rounds
    python scripts/bench_serve_ui.py --src /path/to/old/greval --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import httpx
from bench_serve import SPEC, Served, pct, rows

from greval.testing.openai_server import OpenAIServer

VIEW = ("/ui/", "/ui/explorer/index.html", "/ui/explorer/data/meta.js")


def _rss_kb(pid: int) -> int:
    """A process's resident memory (kB), 0 once it is gone."""
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out: list[int] = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            kids = [int(k) for k in (task / "children").read_text().split()]
        except OSError:
            continue
        out += kids
        for k in kids:
            out += _children(k)
    return out


@dataclass
class Memory:
    """The server's memory, sampled every 0.2 s in a thread while a pass runs."""

    pid: int
    server: list[int] = field(default_factory=list)
    tree: list[int] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)
    kids: dict[int, bytes] = field(default_factory=dict)  # child processes seen: the end of their command line

    def run(self) -> None:
        while not self.stop.wait(0.2):
            own = _rss_kb(self.pid)
            if own:
                kids = _children(self.pid)
                self.server.append(own)
                self.tree.append(own + sum(_rss_kb(c) for c in kids))
                for c in kids:
                    with contextlib.suppress(OSError):
                        command = Path(f"/proc/{c}/cmdline").read_bytes().replace(b"\0", b" ").strip()
                        if command:  # empty: it has just ended
                            self.kids.setdefault(c, command[-90:])

    def line(self) -> str:
        if not self.server:
            return "memory: no sample"
        mb = 1024
        return (
            f"server RSS {self.server[0] / mb:.0f} → peak {max(self.server) / mb:.0f} → end {self.server[-1] / mb:.0f} "
            f"MB; with its children peak {max(self.tree) / mb:.0f} MB ({len(self.kids)} children: "
            f"{sorted(set(k.decode(errors='replace') for k in self.kids.values()))})"
        )


async def viewer(url: str, every: float, done: asyncio.Event) -> tuple[list[float], list[float], dict[int, int]]:
    """Views of /ui one after the other until ``done``: each view's seconds, the seconds of as many GET /healthz
    right after it (what any request waits for on the server then: the floor), the statuses of its pages."""
    waits: list[float] = []
    floor: list[float] = []
    statuses: dict[int, int] = {}
    async with httpx.AsyncClient(base_url=url, timeout=900) as http:
        while not done.is_set():
            t0 = time.perf_counter()
            for path in VIEW:
                r = await http.get(path)
                statuses[r.status_code] = statuses.get(r.status_code, 0) + 1
            t1 = time.perf_counter()
            for _ in VIEW:
                await http.get("/healthz")
            waits.append(t1 - t0)
            floor.append(time.perf_counter() - t1)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), every)
    return waits, floor, statuses


async def judge_pass(url: str, data: list[dict[str, Any]], clients: int) -> tuple[float, int]:
    """scripts/bench_serve.py's pass (one record a request, ``clients`` in flight): records/s, and how many
    requests were sent again on a new connection because the server had closed the one they went on (an idle
    keep-alive connection closed as the request left: seen on this machine at load ~10, without /ui too)."""
    pending = iter(data)
    again = 0
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=900, limits=limits) as http:

        async def client() -> None:
            nonlocal again
            for record in pending:
                for attempt in range(3):
                    try:
                        r = await http.post("/v1/judge", json={"spec": SPEC, "records": [record]})
                        break
                    except (httpx.ReadError, httpx.RemoteProtocolError):
                        if attempt == 2:
                            raise
                        again += 1
                r.raise_for_status()

        t0 = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(min(clients, len(data)))))
        return len(data) / (time.perf_counter() - t0), again


async def one_pass(url: str, data: list[dict[str, Any]], clients: int, view_every: float | None) -> dict[str, Any]:
    """Judge ``data`` through ``url`` (records/s); with ``view_every``, a viewer on /ui meanwhile."""
    done = asyncio.Event()
    watch = asyncio.create_task(viewer(url, view_every, done)) if view_every is not None else None
    try:
        rate, again = await judge_pass(url, data, clients)
    finally:
        done.set()
    waits, floor, statuses = await watch if watch is not None else ([], [], {})
    return {"rate": rate, "again": again, "waits": waits, "floor": floor, "statuses": statuses}


def run_pass(args: argparse.Namespace, srv: OpenAIServer, tmp: Path, tag: str, viewed: bool) -> dict[str, Any]:
    data = rows(args.records, args.chunks, tag)
    served = Served(srv, tmp / f"{tag}.sqlite", args.concurrency, tmp / f"{tag}.log", src=args.src)
    memory = Memory(served.proc.pid)
    sampler = threading.Thread(target=memory.run, daemon=True)
    sampler.start()
    try:
        got = asyncio.run(one_pass(served.url, data, args.clients, args.view_every if viewed else None))
    finally:
        memory.stop.set()
        sampler.join()
        served.stop()
    got["memory"] = memory
    return got


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=2000, help="records (one a request) per pass")
    ap.add_argument("--chunks", type=int, default=3)
    ap.add_argument("--latency", type=float, default=0.2, help="seconds per judge call")
    ap.add_argument("--concurrency", type=int, default=16, help="model calls in flight in the server")
    ap.add_argument("--clients", type=int, default=64, help="judging requests in flight from the client")
    ap.add_argument("--view-every", type=float, default=1.0, help="seconds between the end of a view and the next")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--src", type=Path, default=None, help="greval source tree the server runs (default: this one)")
    args = ap.parse_args()
    src = args.src or Path(__file__).resolve().parents[1]
    print(
        f"{args.records} records a pass (chunk_evaluation, {args.chunks} chunks, one a request, {args.clients} in "
        f"flight), judge latency {1000 * args.latency:.0f} ms, {args.concurrency} calls in flight; server from "
        f"{src}; {os.cpu_count()} CPUs, load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}"
    )
    ratios: list[float] = []
    with OpenAIServer() as srv, tempfile.TemporaryDirectory() as tmp:
        srv.configure(latency=args.latency)
        for r in range(args.rounds):
            order = (False, True) if r % 2 == 0 else (True, False)
            got = {v: run_pass(args, srv, Path(tmp), f"round{r}-{'viewed' if v else 'quiet'}", v) for v in order}
            quiet, viewed = got[False], got[True]
            ratios.append(viewed["rate"] / quiet["rate"])
            waits, floor = viewed["waits"] or [float("nan")], viewed["floor"] or [float("nan")]
            print(
                f"round {r + 1} ({'quiet first' if r % 2 == 0 else 'viewed first'}): quiet {quiet['rate']:.1f} "
                f"records/s ({args.records / quiet['rate']:.1f} s), viewed {viewed['rate']:.1f} records/s "
                f"({args.records / viewed['rate']:.1f} s), ratio {ratios[-1]:.3f}"
            )
            print(
                f"  views: {len(viewed['waits'])}, wait p50 {pct(waits, 0.5):.2f} s, max {max(waits):.2f} s (3 GET "
                f"/healthz after each: p50 {pct(floor, 0.5):.2f} s, max {max(floor):.2f} s); statuses "
                f"{dict(sorted(viewed['statuses'].items()))}"
            )
            print(f"  quiet:  {quiet['memory'].line()}; requests sent again {quiet['again']}")
            print(f"  viewed: {viewed['memory'].line()}; requests sent again {viewed['again']}")
    print(f"viewed ÷ quiet throughput: median {statistics.median(ratios):.3f} over {len(ratios)} paired rounds")
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
