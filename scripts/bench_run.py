"""Benchmark `greval run` against the physical limit and against a plain `openai` SDK loop.

A local OpenAI-compatible server (greval.testing.openai_server, a separate process) answers every request
a fixed latency after it arrives. greval judges N records with a "many" metric (k chunks each, one call per
record). The limit is requests × latency ÷ concurrency; we print achieved throughput ÷ that limit and the
client's CPU milliseconds per judge call. The baseline replays the very same request bodies (captured
from the server's log) with one `openai.AsyncOpenAI` client and a semaphore, in the same process, right
after each greval pass. Rounds repeat both; the summary line gives the medians (CPU per call varies by
±20 % between passes on a shared 2-core machine, so one pass proves little).

    python scripts/bench_run.py                        # the issue's settings: 16 @ 200 ms, 64 @ 1 s
    python scripts/bench_run.py --settings 32:0.5 --waves 10 --rounds 1
"""

from __future__ import annotations

import argparse
import asyncio
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import openai

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.runner import RunOptions, arun
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer

BASELINE_CALL_MS: list[float] = []  # mean round trip of the SDK's calls, one entry per baseline pass


def cpu() -> float:
    """CPU seconds of this process (user + system), every thread included."""
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def records(n: int, k: int, tag: str) -> list[Record]:
    return [
        Record.from_mapping(
            {
                "id": f"{tag}-{i}",
                "question": f"Which of these passages explain item {i} of batch {tag}?",
                "chunks": [f"Passage {j} about item {i}: " + "lorem ipsum dolor sit amet " * 12 for j in range(k)],
            }
        )
        for i in range(n)
    ]


async def greval_pass(srv: OpenAIServer, n: int, k: int, conc: int, tag: str) -> tuple[float, float, int]:
    specs = resolve_specs(["chunk_evaluation"])
    cfg = JudgeConfig.parse("openai:bench-model", base_url=srv.base_url, timeout=60)
    data = records(n, k, tag)  # reading the dataset is not part of the calls being measured
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "bench.sqlite") as st:
        c0, t0 = cpu(), time.perf_counter()
        summary = await arun(specs, data, st, cfg, options=RunOptions(concurrency=conc))
        wall, used = time.perf_counter() - t0, cpu() - c0
    if summary.failed:
        raise SystemExit(f"greval run had {summary.failed} failures; the benchmark is void")
    return wall, used, summary.calls


async def baseline_pass(srv: OpenAIServer, bodies: list[dict[str, Any]], conc: int) -> tuple[float, float, int]:
    client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="bench", max_retries=0, timeout=60)
    sem = asyncio.Semaphore(conc)
    durations: list[float] = []

    async def one(body: dict[str, Any]) -> None:
        async with sem:
            start = time.perf_counter()
            resp = await client.chat.completions.create(**body)
            durations.append(time.perf_counter() - start)
            assert resp.choices[0].message.content

    c0, t0 = cpu(), time.perf_counter()
    await asyncio.gather(*(one(b) for b in bodies))
    wall, used = time.perf_counter() - t0, cpu() - c0
    await client.close()
    BASELINE_CALL_MS.append(1000 * statistics.mean(durations))
    return wall, used, len(bodies)


async def floor_pass(srv: OpenAIServer, body: dict[str, Any], calls: int) -> float:
    """Mean round trip (ms) of one SDK call at a time: the fixed cost of a call on this machine, with no
    other call competing for either process (the best any client could do per call)."""
    client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="bench", max_retries=0, timeout=60)
    durations = []
    for _ in range(calls):
        start = time.perf_counter()
        await client.chat.completions.create(**body)
        durations.append(time.perf_counter() - start)
    await client.close()
    return 1000 * statistics.mean(durations)


async def layers_pass(srv: OpenAIServer, n: int, k: int, conc: int, rounds: int) -> dict[str, float]:
    """CPU ms per call of each layer on the same request (median of interleaved rounds)."""
    from langchain_openai import ChatOpenAI

    from greval.judge.judge import Judge

    spec = resolve_specs(["chunk_evaluation"])[0]
    recs = records(n, k, "layers")
    judge = Judge(spec, ChatOpenAI(model="bench-model", base_url=srv.base_url, api_key="bench", max_retries=0))
    ids = [c["id"] for c in recs[0].data["chunks"]]
    msgs = judge.messages("json_schema", recs[0].data, None, ids)
    bound = judge.bound("json_schema")
    srv.reset()
    await bound.ainvoke(msgs)
    body = srv.requests()[-1]
    client = openai.AsyncOpenAI(base_url=srv.base_url, api_key="bench", max_retries=0, timeout=60)
    sem = asyncio.Semaphore(conc)

    async def timed(fn: Any) -> float:
        async def one(i: int) -> None:
            async with sem:
                await fn(i)

        c0 = cpu()
        await asyncio.gather(*(one(i) for i in range(n)))
        return 1000 * (cpu() - c0) / n

    via_langchain = Judge(spec, judge.model, direct=False)
    layers: dict[str, Any] = {
        "openai SDK create": lambda i: client.chat.completions.create(**body),
        "langchain ChatOpenAI.ainvoke": lambda i: bound.ainvoke(msgs),
        "greval Judge.ajudge (direct=False)": lambda i: via_langchain.ajudge(recs[i]),
        "greval Judge.ajudge": lambda i: judge.ajudge(recs[i]),
    }
    samples: dict[str, list[float]] = {name: [] for name in layers}
    for rnd in range(rounds + 1):  # round 0 warms every layer's connections and caches; not counted
        for name, fn in layers.items():
            ms = await timed(fn)
            if rnd:
                samples[name].append(ms)
    await client.close()
    return {name: statistics.median(v) for name, v in samples.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--settings", nargs="+", default=["16:0.2", "64:1.0"], help="CONCURRENCY:LATENCY pairs")
    ap.add_argument("--waves", type=int, default=25, help="Calls per pass = waves × concurrency")
    ap.add_argument("--calls", type=int, default=0, help="Calls per pass (overrides --waves)")
    ap.add_argument("--rounds", type=int, default=3, help="greval + SDK passes per setting")
    ap.add_argument("--chunks", type=int, default=5, help="Chunks per record (one call judges them all)")
    ap.add_argument("--no-layers", action="store_true", help="Skip the per-layer CPU breakdown")
    args = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    header = f"{'setting':>9} {'round':>6} {'client':>7} {'calls':>6} {'wall s':>7} {'limit s':>8} {'÷ limit':>8}"
    print(header + f" {'CPU ms/call':>12}")
    with OpenAIServer() as srv:
        for setting in args.settings:
            conc_s, lat_s = setting.split(":")
            conc, lat = int(conc_s), float(lat_s)
            n = args.calls or conc * args.waves
            limit = n * lat / conc
            srv.configure(latency=lat)
            run_sync(greval_pass(srv, conc, args.chunks, conc, f"warm{conc}"))  # warm imports, pools, caches
            rows: dict[str, list[tuple[float, float]]] = {"greval": [], "openai": []}
            for rnd in range(1, args.rounds + 1):
                srv.reset()
                g_wall, g_cpu, g_calls = run_sync(greval_pass(srv, n, args.chunks, conc, f"run{conc}-{rnd}"))
                bodies = [{k: v for k, v in b.items() if k not in ("stream",)} for b in srv.requests()]
                b_wall, b_cpu, b_calls = run_sync(baseline_pass(srv, bodies, conc))
                for name, wall, used, calls in (
                    ("greval", g_wall, g_cpu, g_calls),
                    ("openai", b_wall, b_cpu, b_calls),
                ):
                    rows[name].append((limit / wall, 1000 * used / calls))
                    print(
                        f"{setting:>9} {rnd:>6} {name:>7} {calls:>6} {wall:7.2f} {limit:8.2f} {limit / wall:8.3f} "
                        f"{1000 * used / calls:12.2f}"
                    )
            med = {k: (statistics.median(r[0] for r in v), statistics.median(r[1] for r in v)) for k, v in rows.items()}
            ratios = [g[1] / b[1] for g, b in zip(rows["greval"], rows["openai"], strict=True)]
            one_at_a_time = run_sync(floor_pass(srv, bodies[0], max(5, int(8 / lat))))
            print(
                f"{setting:>9} {'':>6}  an SDK call took {statistics.median(BASELINE_CALL_MS[-args.rounds :]):.1f} ms "
                f"on average (median of rounds) for a latency of {1000 * lat:.0f} ms, and {one_at_a_time:.1f} ms "
                f"one at a time: the machine's own overhead (ceiling {1000 * lat / one_at_a_time:.3f} of the limit "
                "with no call competing)"
            )
            print(
                f"{setting:>9} {'median':>6}  greval ÷ limit {med['greval'][0]:.3f} (SDK {med['openai'][0]:.3f}); "
                f"CPU/call {med['greval'][1]:.2f} ms vs SDK {med['openai'][1]:.2f} ms; "
                f"ratio per round {', '.join(f'{r:.2f}' for r in ratios)} → median {statistics.median(ratios):.2f}×"
            )
        if not args.no_layers:
            srv.configure(latency=0.0)
            layers = run_sync(layers_pass(srv, 400, args.chunks, 16, args.rounds))
            print(
                "\nCPU ms per call by layer (same request, zero latency, concurrency 16, 400 calls, "
                f"median of {args.rounds} rounds):"
            )
            base = layers["openai SDK create"]
            for name, ms in layers.items():
                print(f"  {name:36s} {ms:6.2f}  ({ms / base:.2f}x the SDK)")


if __name__ == "__main__":
    main()
