"""Benchmark `greval run` against the physical limit and against a plain `openai` SDK loop.

A local OpenAI-compatible server (greval.testing.openai_server, a separate process) answers every request
a fixed latency after it arrives. greval judges N records with a "many" metric (k chunks each, one call per
record). The limit is requests × latency ÷ concurrency; we print achieved throughput ÷ that limit and the
client's CPU milliseconds per judge call. The baseline replays the very same request bodies (captured
from the server's log) with one `openai.AsyncOpenAI` client and a semaphore, in the same process, right
after each greval pass. Rounds repeat both; the summary line gives the medians (CPU per call varies by
±20 % between passes on a shared 2-core machine, so one pass proves little).

    python scripts/bench_run.py                        # the issue's settings: 16, 64 and 128 @ 200 ms, 64 @ 1 s
    python scripts/bench_run.py --settings 32:0.5 --waves 10 --rounds 1
    python scripts/bench_run.py --settings 64:0.2 --breakdown --no-layers   # where greval's CPU goes, by layer

``--breakdown`` runs one more greval pass and one more SDK pass per setting under cProfile (timed by the loop
  thread's CPU clock, not the wall clock: the machine is shared) and charges each
layer the cumulative CPU of its entry points (request build, HTTP, parse/validate, store, limiter, progress,
…; see LAYERS): profiled figures are inflated by the profiler, their shares are what to read. The start-up
line is the wall time from entering ``arun`` to greval's first model call, for a store that already exists
(earlier verdicts, the same specs and judge) and a dataset of new records.
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import pstats
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
from greval.llm.openai_chat import OpenAICall
from greval.runner.driver import arun
from greval.runner.options import RunOptions
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


PROGRESS: list[int] = [0]


def progress(done: int, total: int, errors: int) -> None:
    """The runner's progress hook, as cheap as a hook can be (the CLI's bar redraws on its own timer)."""
    PROGRESS[0] = done


#: CPU seconds of the worker processes of the last run with workers (their ShardReports' cpu_s).
WORKER_CPU: list[float] = [0.0]


def _count_worker_cpu() -> None:
    """Add the worker processes' CPU to a pass's: each worker says its own in its report (workers are forked by
    greval's forking server, not by this process, so this process's rusage never sees them)."""
    from greval.scale import processes

    add = processes.add_reports

    def counted(job: Any, reports: Any) -> Any:
        reports = list(reports)
        WORKER_CPU[0] = sum(r.cpu_s for r in reports)
        return add(job, reports)

    processes.add_reports = counted  # type: ignore[assignment]


async def greval_pass(
    srv: OpenAIServer, n: int, k: int, conc: int, tag: str, prof: cProfile.Profile | None = None, workers: int = 1
) -> tuple[float, float, int]:
    """One whole ``arun`` (in ``workers`` processes): wall seconds, client CPU seconds (the workers' included),
    calls."""
    specs = resolve_specs(["chunk_evaluation"])
    cfg = JudgeConfig.parse("openai:bench-model", base_url=srv.base_url, timeout=60)
    data = records(n, k, tag)  # reading the dataset is not part of the calls being measured
    opts = RunOptions(concurrency=conc, workers=workers)
    WORKER_CPU[0] = 0.0
    with tempfile.TemporaryDirectory() as d, Store(Path(d) / "bench.sqlite") as st:
        c0, t0 = cpu(), time.perf_counter()
        if prof is not None:
            prof.enable()
        try:
            summary = await arun(specs, data, st, cfg, options=opts, progress=progress)
        finally:
            if prof is not None:
                prof.disable()
        wall, used = time.perf_counter() - t0, cpu() - c0 + WORKER_CPU[0]
    if summary.failed:
        raise SystemExit(f"greval run had {summary.failed} failures; the benchmark is void")
    if summary.workers != workers:
        raise SystemExit(f"greval judged in {summary.workers} process(es), not {workers}; the benchmark is void")
    return wall, used, summary.calls


def server_cpu(srv: OpenAIServer) -> float:
    """CPU seconds the test server's process has used (Linux /proc; 0 elsewhere)."""
    try:
        fields = Path(f"/proc/{srv._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


async def startup_pass(srv: OpenAIServer, n: int, k: int, conc: int) -> tuple[float, float]:
    """Milliseconds from entering ``arun`` to greval's first model call, and to the run's end, for a store that
    already exists (it holds an earlier run's verdicts, specs and judge) and ``n`` records it has not seen."""
    specs = resolve_specs(["chunk_evaluation"])
    cfg = JudgeConfig.parse("openai:bench-model", base_url=srv.base_url, timeout=60)
    first: list[float] = []
    original = OpenAICall.__call__  # how a run calls its OpenAI-compatible judge

    async def spy(self: OpenAICall, messages: Any) -> Any:
        if not first:
            first.append(time.perf_counter())
        return await original(self, messages)

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.sqlite"
        with Store(path) as st:
            await arun(specs, records(n, k, "earlier"), st, cfg, options=RunOptions(concurrency=conc))
        data = records(n, k, "startup")
        with Store(path) as st:
            OpenAICall.__call__ = spy  # type: ignore[method-assign]
            try:
                t0 = time.perf_counter()
                await arun(specs, data, st, cfg, options=RunOptions(concurrency=conc))
                end = time.perf_counter()
            finally:
                OpenAICall.__call__ = original  # type: ignore[method-assign]
    return 1000 * (first[0] - t0), 1000 * (end - t0)


COLD = """
import json, sys, time
from pathlib import Path
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import resolve_specs
from greval.store.store import Store
base_url, path, n, k = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
data = [Record.from_mapping({"id": f"cold-{i}", "question": f"Cold question {i}?",
        "chunks": [f"Passage {j} of {i}: " + "lorem ipsum " * 20 for j in range(k)]}) for i in range(n)]
first = []
def hook(event, args):
    if event == "socket.connect" and not first:
        first.append(time.perf_counter())
sys.addaudithook(hook)
specs = resolve_specs(["chunk_evaluation"])
cfg = JudgeConfig.parse("openai:bench-model", base_url=base_url, timeout=60)
with Store(Path(path)) as st:
    t0 = time.perf_counter()
    run(specs, data, st, cfg, options=RunOptions(concurrency=64))
print(json.dumps(1000 * (first[0] - t0)))
"""


def cold_startup(srv: OpenAIServer, n: int, k: int) -> float:
    """:func:`startup_pass` in a fresh process, as ``greval run`` starts: the judge stack (the SDK)
    is not imported yet when ``arun`` is entered. The first request is the run's first connection."""
    import json
    import subprocess

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "bench.sqlite"
        specs = resolve_specs(["chunk_evaluation"])
        cfg = JudgeConfig.parse("openai:bench-model", base_url=srv.base_url, timeout=60)
        with Store(path) as st:
            run_sync(arun(specs, records(n, k, "earlier"), st, cfg, options=RunOptions(concurrency=64)))
        root = str(Path(__file__).resolve().parents[1])
        env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
        out = subprocess.run(
            [sys.executable, "-c", COLD, srv.base_url, str(path), str(n), str(k)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    return float(json.loads(out.stdout.strip().splitlines()[-1]))


#: Layer -> its entry points (a file's path ending, a function name): a layer is charged their cumulative
#: CPU under cProfile. The entry points of one layer never call each other, and no two layers nest.
LAYERS: dict[str, list[tuple[str, str]]] = {
    "request build": [
        ("greval/judge/judge.py", "messages"),
        ("langchain_openai/chat_models/base.py", "_get_request_payload"),
        ("greval/llm/openai_chat.py", "payload"),
    ],
    "callback check": [("greval/llm/call.py", "_listening"), ("greval/llm/openai_chat.py", "_listened")],
    "HTTP (SDK post)": [
        ("greval/llm/sdk.py", "send"),
        ("greval/llm/call.py", "_client"),
        ("greval/llm/sdk.py", "loop_built"),
    ],
    "response → message": [
        ("langchain_openai/chat_models/base.py", "_create_chat_result"),
        ("greval/llm/openai_chat.py", "reply_of"),
    ],
    "parse/validate": [
        ("greval/judge/parse.py", "json_payload"),
        ("greval/judge/judge.py", "validate"),
        ("greval/judge/parse.py", "to_verdict"),
        ("greval/judge/outcome.py", "begin"),
        ("greval/judge/judge.py", "add_token_confidence"),
    ],
    "store: verdicts (queue, group commit)": [
        ("greval/store/store.py", "put_result"),
        ("greval/store/store.py", "flush"),
    ],
    "store: claims": [
        ("greval/store/store.py", "claim"),
        ("greval/store/store.py", "claim_many"),
        ("greval/store/store.py", "release_claims"),
    ],
    "store: reads (pending, result)": [("greval/store/store.py", "pending"), ("greval/store/store.py", "result")],
    "limiter": [
        ("greval/llm/limiter.py", "__aenter__"),
        ("greval/llm/limiter.py", "__aexit__"),
        ("greval/llm/limiter.py", "on_success"),
    ],
    "progress": [("scripts/bench_run.py", "progress")],
    "run start/end": [
        ("greval/runner/plan.py", "plan_work"),
        ("greval/runner/driver.py", "_summarise"),
        ("greval/store/store.py", "link_snapshot"),
        ("greval/store/store.py", "finish_run"),
        ("greval/store/store.py", "start_run"),
        ("greval/store/store.py", "put_specs"),
        ("greval/judge/evaluators.py", "make_evaluator"),
    ],
    "SDK create (baseline)": [("openai/resources/chat/completions/completions.py", "create")],
}


def by_layer(prof: cProfile.Profile, calls: int) -> dict[str, float]:
    """CPU ms per call of each layer (cumulative time of its entry points) and of everything profiled."""
    stats: Any = pstats.Stats(prof).stats
    out = dict.fromkeys(LAYERS, 0.0)
    total = 0.0
    for (path, _, func), (_, _, tottime, cumtime, _) in stats.items():
        total += tottime
        for layer, entries in LAYERS.items():
            if any(func == name and path.endswith(tail) for tail, name in entries):
                out[layer] += cumtime
    out = {k: 1000 * v / calls for k, v in out.items()}
    out["rest (event loop, tasks, runner)"] = 1000 * total / calls - sum(out.values())
    out["total (profiled)"] = 1000 * total / calls
    return out


async def baseline_pass(
    srv: OpenAIServer, bodies: list[dict[str, Any]], conc: int, prof: cProfile.Profile | None = None
) -> tuple[float, float, int]:
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
    if prof is not None:
        prof.enable()
    try:
        await asyncio.gather(*(one(b) for b in bodies))
    finally:
        if prof is not None:
            prof.disable()
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


def bench_setting(srv: OpenAIServer, setting: str, args: argparse.Namespace) -> None:
    """One CONCURRENCY:LATENCY setting: paired rounds of greval (once per worker count asked) and the SDK."""
    conc_s, lat_s = setting.split(":")
    conc, lat = int(conc_s), float(lat_s)
    n = args.calls or conc * args.waves
    limit = n * lat / conc
    srv.configure(latency=lat)
    for w in args.workers:  # warm imports, pools, caches (and the workers' forking server)
        run_sync(greval_pass(srv, conc, args.chunks, conc, f"warm{conc}-{w}", workers=w))
    names = [f"greval×{w}" if len(args.workers) > 1 or w > 1 else "greval" for w in args.workers]
    rows: dict[str, list[tuple[float, float]]] = {name: [] for name in [*names, "openai"]}
    served: list[float] = []  # the test server's CPU ms per call, every pass
    for rnd in range(1, args.rounds + 1):
        load = os.getloadavg()[0]
        srv.reset()
        for name, w in zip(names, args.workers, strict=True):
            s0 = server_cpu(srv)
            wall, used, calls = run_sync(greval_pass(srv, n, args.chunks, conc, f"run{conc}-{w}-{rnd}", workers=w))
            served.append(1000 * (server_cpu(srv) - s0) / calls)
            rows[name].append((limit / wall, 1000 * used / calls))
            _row(setting, rnd, name, calls, wall, limit, used, load)
        # The server keeps the last 10,000 request bodies: a longer pass replays those, against their own limit.
        bodies = [{k: v for k, v in b.items() if k not in ("stream",)} for b in srv.requests()[-n:]]
        s0 = server_cpu(srv)
        wall, used, calls = run_sync(baseline_pass(srv, bodies, conc))
        served.append(1000 * (server_cpu(srv) - s0) / calls)
        own_limit = calls * lat / conc
        rows["openai"].append((own_limit / wall, 1000 * used / calls))
        _row(setting, rnd, "openai", calls, wall, own_limit, used, load)
    one_at_a_time = run_sync(floor_pass(srv, bodies[0], max(5, int(8 / lat))))
    print(
        f"{setting:>9} {'':>6}  an SDK call took {statistics.median(BASELINE_CALL_MS[-args.rounds :]):.1f} ms "
        f"on average (median of rounds) for a latency of {1000 * lat:.0f} ms, and {one_at_a_time:.1f} ms "
        f"one at a time: the machine's own overhead (ceiling {1000 * lat / one_at_a_time:.3f} of the limit "
        "with no call competing)"
    )
    _summary(setting, rows, statistics.median(served), conc / lat)
    if args.breakdown:
        breakdown(srv, setting, n, conc, args.chunks)


def _row(setting: str, rnd: int, name: str, calls: int, wall: float, limit: float, used: float, load: float) -> None:
    print(
        f"{setting:>9} {rnd:>6} {name:>9} {calls:>6} {wall:7.2f} {limit:8.2f} {limit / wall:8.3f} "
        f"{1000 * used / calls:12.2f} {load:6.2f}"
    )


def _summary(setting: str, rows: dict[str, list[tuple[float, float]]], served_ms: float, rate: float) -> None:
    """Medians, the paired ratios against the SDK (and against one process), and what two cores allow."""
    sdk = rows["openai"]
    first = next(iter(rows))
    for name, got in rows.items():
        if name == "openai":
            continue
        speed = [g[0] / b[0] for g, b in zip(got, sdk, strict=True)]
        ratios = [g[1] / b[1] for g, b in zip(got, sdk, strict=True)]
        print(
            f"{setting:>9} {'median':>6}  {name} ÷ limit {statistics.median(r[0] for r in got):.3f} (SDK "
            f"{statistics.median(r[0] for r in sdk):.3f}); CPU/call {statistics.median(r[1] for r in got):.2f} ms "
            f"vs SDK {statistics.median(r[1] for r in sdk):.2f} ms"
        )
        print(
            f"{setting:>9} {'paired':>6}  throughput {name} ÷ SDK per round {', '.join(f'{r:.3f}' for r in speed)}"
            f" → median {statistics.median(speed):.3f}; CPU/call ÷ SDK per round "
            f"{', '.join(f'{r:.2f}' for r in ratios)} → median {statistics.median(ratios):.2f}×"
        )
        if name != first:
            gain = [g[0] / b[0] for g, b in zip(got, rows[first], strict=True)]
            print(
                f"{setting:>9} {'paired':>6}  throughput {name} ÷ {first} per round "
                f"{', '.join(f'{r:.3f}' for r in gain)} → median {statistics.median(gain):.3f}"
            )
    client = min(statistics.median(r[1] for r in got) for got in rows.values())
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    ceiling = 1000 * cores / (client + served_ms) / rate
    print(
        f"{setting:>9} {'cores':>6}  the test server used {served_ms:.2f} ms of CPU per call: with the cheapest client "
        f"here ({client:.2f} ms/call), {cores} idle cores allow at most {min(ceiling, 1):.3f} of the limit "
        f"({rate:.0f} calls/s asked)"
    )


def breakdown(srv: OpenAIServer, setting: str, n: int, conc: int, chunks: int) -> None:
    """Per-layer CPU of one profiled greval pass and one profiled SDK pass (this process only)."""
    srv.reset()
    g_prof, b_prof = cProfile.Profile(time.thread_time), cProfile.Profile(time.thread_time)
    run_sync(greval_pass(srv, n, chunks, conc, f"prof{conc}", g_prof))
    bodies = [{k: v for k, v in b.items() if k not in ("stream",)} for b in srv.requests()]
    run_sync(baseline_pass(srv, bodies, conc, b_prof))
    g_layers, b_layers = by_layer(g_prof, n), by_layer(b_prof, n)
    print(f"{setting:>9} CPU ms per call by layer, one pass each under cProfile (inflated: read shares)")
    print(f"{'':>12}{'layer':40s} {'greval':>7} {'SDK loop':>9}")
    for layer, ms in g_layers.items():
        sdk = b_layers[layer]
        if ms or sdk:
            print(f"{'':>12}{layer:40s} {ms:7.3f} {sdk:9.3f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument(
        "--settings", nargs="+", default=["16:0.2", "64:0.2", "128:0.2", "64:1.0"], help="CONCURRENCY:LATENCY pairs"
    )
    ap.add_argument("--waves", type=int, default=25, help="Calls per pass = waves × concurrency")
    ap.add_argument("--calls", type=int, default=0, help="Calls per pass (overrides --waves)")
    ap.add_argument("--rounds", type=int, default=3, help="greval + SDK passes per setting")
    ap.add_argument("--chunks", type=int, default=5, help="Chunks per record (one call judges them all)")
    ap.add_argument(
        "--workers",
        type=int,
        nargs="+",
        default=[1],
        help="greval passes per round, one per worker-process count (RunOptions.workers), e.g. --workers 1 2",
    )
    ap.add_argument("--no-layers", action="store_true", help="Skip the per-layer CPU breakdown at zero latency")
    ap.add_argument("--breakdown", action="store_true", help="Per-layer CPU of one profiled pass per setting")
    ap.add_argument("--no-startup", action="store_true", help="Skip the start-up measurement")
    args = ap.parse_args()
    os.environ.setdefault("OPENAI_API_KEY", "bench")
    _count_worker_cpu()
    print(f"load average {' '.join(f'{x:.2f}' for x in os.getloadavg())}, {os.cpu_count()} CPUs")
    header = f"{'setting':>9} {'round':>6} {'client':>9} {'calls':>6} {'wall s':>7} {'limit s':>8} {'÷ limit':>8}"
    print(header + f" {'CPU ms/call':>12} {'load':>6}")
    with OpenAIServer() as srv:
        if not args.no_startup:
            startup(srv, args.chunks)
        for setting in args.settings:
            bench_setting(srv, setting, args)
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


def startup(srv: OpenAIServer, chunks: int) -> None:
    """The start of a run: to the first model call in this process (store exists), and in a fresh one."""
    srv.configure(latency=0.2)
    run_sync(greval_pass(srv, 16, chunks, 16, "warm-startup"))
    firsts = [run_sync(startup_pass(srv, 200, chunks, 64)) for _ in range(3)]
    print(
        "start-up, store exists, 200 new records, 64 in flight: first model call "
        f"{statistics.median(f for f, _ in firsts):.1f} ms after entering arun "
        f"(rounds: {', '.join(f'{f:.1f}' for f, _ in firsts)}; target ≤ 50 ms)"
    )
    colds = [cold_startup(srv, 200, chunks) for _ in range(3)]
    print(
        "start-up in a fresh process (the judge stack imported inside arun, as `greval run` does): first "
        f"request {statistics.median(colds):.0f} ms after entering arun "
        f"(rounds: {', '.join(f'{c:.0f}' for c in colds)})"
    )


if __name__ == "__main__":
    main()
