"""Benchmark ``greval run --engine ray``: 1 vs 2 Ray workers on this machine, and the store's write rate.

Three workloads, each judged by ``arun`` with ``RunOptions(engine="ray", shards=N)`` on one private local Ray
cluster (greval's own ``connect``; started once, its workers warmed by a first round that is not counted):

* ``judge``: one model call per record against the local OpenAI-compatible test server at 0 ms latency, so the
  client's CPU is the limit (~3 ms a call in one process). The server is a separate process on the same two
  cores: its CPU is measured and printed, since every CPU second it takes is one the workers do not get.
* ``rouge``: the ROUGE computed metric (pure Python, no model).
* ``embedding``: the embedding-similarity computed metric (all-MiniLM-L6-v2 from its package, loaded once per
  worker process; Ray gives each 1-CPU task OMP_NUM_THREADS=1, so one worker is one core).

Each round runs 1 worker then 2 (the order alternates between rounds) on new records and a new store; the
ratio printed is the median over rounds of (records/s with 2) ÷ (records/s with 1), beside the load average.
The wall time counted is ``arun``'s (planning, the tasks, the summary from the store), not the cluster's start.

Then the store's write rate: verdicts/s written by ``Store.put_result(defer=True)`` and committed in groups of
``runner.GROUP_MAX``, as a run writes them, into ``--store-url`` (default: a new SQLite file; a
``postgresql://`` URL works as well).

    python scripts/bench_scale.py                                  # every workload, 3 rounds
    python scripts/bench_scale.py --workloads judge --rounds 5 --records 800
    python scripts/bench_scale.py --workloads none --store-url postgresql:///greval_bench
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.runner.judging import GROUP_MAX
from greval.runner.options import RunOptions
from greval.scale.ray_engine import connect, ray_module
from greval.spec import resolve_specs
from greval.store.store import Store, spec_keys
from greval.testing.openai_server import OpenAIServer
from greval.types import CallLog, ItemVerdict, JudgeResult

WORKLOADS = {"judge": "answer_alignment", "rouge": "rouge_l", "embedding": "answer_similarity"}


def ticks(pid: int) -> float:
    """CPU seconds (user + system) of one process, from /proc (0 when it cannot be read)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def server_pid() -> int | None:
    """The test server: this process's child running greval.testing.openai_server."""
    me = str(os.getpid())
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            stat = (proc / "stat").read_text().rsplit(")", 1)[1].split()
            cmd = (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if stat[1] == me and b"openai_server" in cmd:
            return int(proc.name)
    return None


def records(n: int, tag: str) -> list[Record]:
    return [
        Record.from_mapping(
            {
                "id": f"{tag}-{i}",
                "question": f"What does passage {i} of batch {tag} say?",
                "answer": f"Passage {i} of {tag} says the river floods in spring, " + "and more " * (i % 7),
                "expected_answer": f"The river of passage {i} floods every spring ({tag}).",
                "chunks": [f"Passage {i}: the river floods in spring."],
            }
        )
        for i in range(n)
    ]


def one_pass(workload: str, shards: int, n: int, cfg: JudgeConfig, concurrency: int, tmp: Path, tag: str) -> float:
    """Records per second of one ``arun`` with ``shards`` Ray workers, on new records and a new store."""
    specs = resolve_specs([WORKLOADS[workload]])
    opts = RunOptions(engine="ray", shards=shards, concurrency=concurrency)
    with Store(tmp / f"{tag}.sqlite") as st:
        started = time.perf_counter()
        summary = run(specs, records(n, tag), st, cfg, options=opts)
        took = time.perf_counter() - started
    if summary.failed:
        raise SystemExit(f"{workload}: {summary.failed} failed judgements; the figures would mean nothing")
    return n / took


def bench(workload: str, args: argparse.Namespace, cfg: JudgeConfig, tmp: Path, srv: int | None) -> None:
    n = args.records if workload == "judge" else args.computed_records
    one_pass(workload, 2, min(n, 64), cfg, args.concurrency, tmp, f"{workload}-warm")  # workers up, imports done
    ratios, rates = [], {1: [], 2: []}  # type: ignore[var-annotated]
    for r in range(args.rounds):
        order = (1, 2) if r % 2 == 0 else (2, 1)
        got = {}
        for shards in order:
            before = ticks(srv) if srv else 0.0
            wall = time.perf_counter()
            got[shards] = one_pass(workload, shards, n, cfg, args.concurrency, tmp, f"{workload}-{r}-{shards}")
            wall = time.perf_counter() - wall
            server = (ticks(srv) - before) / wall if srv and workload == "judge" else None
            rates[shards].append(got[shards])
            load = os.getloadavg()[0]
            extra = f", test server {server:.0%} of a core" if server is not None else ""
            rate = f"{got[shards]:.0f} records/s{extra}, load {load:.2f}"
            print(f"  {workload} round {r + 1}, {shards} worker(s): {rate}", flush=True)
        ratios.append(got[2] / got[1])
    print(
        f"{workload}: 1 worker {statistics.median(rates[1]):.0f}/s, 2 workers {statistics.median(rates[2]):.0f}/s, "
        f"ratio {statistics.median(ratios):.2f}x (median of {len(ratios)} paired rounds: "
        f"{', '.join(f'{x:.2f}' for x in ratios)}), load {os.getloadavg()[0]:.2f}",
        flush=True,
    )


def write_rate(url: str, n: int) -> float:
    """Verdicts per second written as a run writes them (deferred, committed every GROUP_MAX)."""
    specs = resolve_specs(["answer_alignment"])
    key = spec_keys(specs)["answer_alignment"]
    cfg = JudgeConfig.parse("openai:bench-writes")
    recs = records(n, f"w{time.time_ns()}")
    results = [
        JudgeResult(
            spec="answer_alignment",
            spec_hash=specs[0].hash,
            verdicts=[ItemVerdict(label="Correct", score=1.0, reason="The answer matches the expected one.")],
            calls=[CallLog(method="json_schema", items=[""], tokens_in=300, tokens_out=20, latency_ms=1.0, attempts=1)],
        )
        for _ in recs
    ]
    with Store(url) as st:
        st.put_specs(specs, {"answer_alignment": key})
        st.put_judge(cfg)
        started = time.perf_counter()
        for rec, res in zip(recs, results, strict=True):
            st.put_result(None, key, cfg, rec, res, False, defer=True)
            if st.queued >= GROUP_MAX:
                st.flush()
        st.flush()
        return n / (time.perf_counter() - started)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    ap.add_argument("--workloads", default="judge,rouge,embedding", help="comma-separated, or 'none'")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--records", type=int, default=600, help="records of the judge workload")
    ap.add_argument("--computed-records", type=int, default=1500, help="records of the computed workloads")
    ap.add_argument("--concurrency", type=int, default=32, help="global; divided among the workers")
    ap.add_argument("--store-url", default=None, help="store for the write rate [a new SQLite file]")
    ap.add_argument("--writes", type=int, default=5000, help="verdicts written for the write rate")
    args = ap.parse_args()
    wanted = [w for w in args.workloads.split(",") if w and w != "none"]
    print(f"cpus {os.cpu_count()}, load {os.getloadavg()[0]:.2f}", flush=True)
    with tempfile.TemporaryDirectory() as d, OpenAIServer() as srv:
        tmp = Path(d)
        os.environ.setdefault("OPENAI_API_KEY", "sk-bench")  # before the cluster starts: its workers inherit it
        if wanted:
            connect(None)
        cfg = JudgeConfig.parse("openai:judge-test", base_url=srv.base_url, timeout=60)
        pid = server_pid()
        for w in wanted:
            bench(w, args, cfg, tmp, pid)
        url = args.store_url or str(tmp / "writes.sqlite")
        rate = write_rate(url, args.writes)
        shown = "SQLite" if args.store_url is None else Store(url).name
        print(f"store write rate ({shown}): {rate:.0f} verdicts/s (groups of {GROUP_MAX})", flush=True)
        if wanted:
            ray_module().shutdown()


if __name__ == "__main__":
    main()
