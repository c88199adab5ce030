"""A million records on one machine: a first run, a no-op re-run, an export and the store's size per verdict.

Each step is a ``greval`` command in a process of its own, measured by the kernel (``os.wait4``: wall time,
user + system CPU, peak RSS), as a user runs it:

* ``run``: ``greval run DATA -s answer_alignment -c 64`` into a new SQLite store, against the local
  OpenAI-compatible test server at 0 ms latency (CPU-bound: the client and the server share the machine;
  the server's CPU during the run is printed beside it);
* ``rerun``: the same command again on the finished store (nothing to judge: no model call), after one re-run
  of each version not counted (the file in the page cache, the row cache's entry written: greval.dataset.rowcache;
  greval's data directory is the work folder's ``home``);
* ``export``: ``greval results export`` of the store to CSV (item level);
* ``plan``: the first run until it has stored its first verdicts (every row planned, judging begun), then
  stopped (SIGINT): its peak RSS and CPU then, what a first run of N rows holds before it judges (a 1M-record
  first run costs ~40 min of CPU on this machine; its plan is where the memory that grows with N is);
* ``size``: the store's bytes per verdict (after ``VACUUM``: page count × page size ÷ verdicts; the file and
  its WAL as the run left them are printed too) and the largest tables and indexes (SQLite's dbstat).

``--baseline DIR`` runs every step with the greval of another checkout as well (e.g. ``git worktree add
/tmp/base COMMIT``), on its own store made by its own first run from the same data file: the two are paired
in each round, in alternating order, and the script prints each round, the medians and the median of the
per-round ratios (this ÷ baseline), with the load average before each step. The data file is written once
(``--records`` rows like scripts/bench_scale.py's, ~330 bytes of JSON each).

    python scripts/bench_million.py --records 100000 --baseline /tmp/base
    python scripts/bench_million.py --records 1000000 --run-rounds 1 --rounds 3
    python scripts/bench_million.py --records 20000 --steps run,rerun --keep /tmp/bench  # keep the stores
    python scripts/bench_million.py --records 1000000 --steps plan --baseline /tmp/base
    python scripts/bench_million.py --records 1000000 --steps run --run-rounds 1 --keep /tmp/m --resume
    python scripts/bench_million.py --records 1000000 --steps rerun --keep /tmp/m --baseline /tmp/base --shared-store

A first run stopped (SIGINT to its ``greval run``) and continued with ``--resume`` is one first run in segments:
its CPU is the sum of theirs, its peak RSS the largest (each segment plans every row again).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from greval.testing.openai_server import OpenAIServer  # noqa: E402

SPEC = "answer_alignment"


@dataclass(frozen=True)
class Cost:
    """What one process took, as the kernel counted it."""

    wall: float
    cpu: float
    rss_mb: float

    def __str__(self) -> str:
        return f"{self.wall:7.1f} s wall {self.cpu:7.1f} s CPU {self.rss_mb:7.0f} MB peak"


def write_data(path: Path, n: int) -> None:
    """``n`` rows of a RAG system's output, each with an expected answer (what answer_alignment reads)."""
    with path.open("w", encoding="utf-8") as f:
        for i in range(n):
            row = {
                "id": f"m-{i}",
                "question": f"What does passage {i} of the benchmark say?",
                "answer": f"Passage {i} says the river floods in spring, " + "and more " * (i % 7),
                "expected_answer": f"The river of passage {i} floods every spring.",
                "chunks": [f"Passage {i}: the river floods in spring."],
            }
            f.write(json.dumps(row) + "\n")


def measure(cmd: list[str], src: Path, log: Path) -> Cost:
    """Run ``python -m greval CMD`` with the greval of ``src``; its cost (it must succeed). greval's data directory
    is the work folder's ``home`` (the row cache's entries land there, not in the user's)."""
    env = {**os.environ, "PYTHONPATH": str(src), "OPENAI_API_KEY": "sk-bench", "PYTHONUNBUFFERED": "1"}
    env["GREVAL_HOME"] = str(log.parent / "home")
    with log.open("w") as out:
        started = time.perf_counter()
        # In the log's directory: `python -m` puts the working directory first on sys.path, before PYTHONPATH.
        proc = subprocess.Popen(
            [sys.executable, "-m", "greval", *cmd], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent
        )
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - started
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode != 0:
        raise SystemExit(f"`greval {' '.join(cmd)}` ({src}) exited {proc.returncode}:\n{log.read_text()[-3000:]}")
    return Cost(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def server_cpu(srv: OpenAIServer) -> float:
    """CPU seconds the test server's process has used (0 when /proc cannot say)."""
    try:
        fields = Path(f"/proc/{srv._proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def planned(cmd: list[str], src: Path, store: Path, log: Path) -> Cost:
    """Run ``greval CMD`` until ``store`` holds a verdict, then stop it (SIGINT): its cost up to then (peak RSS
    and CPU read from /proc just before the signal)."""
    env = {**os.environ, "PYTHONPATH": str(src), "OPENAI_API_KEY": "sk-bench", "PYTHONUNBUFFERED": "1"}
    with log.open("w") as out:
        started = time.perf_counter()
        proc = subprocess.Popen(
            [sys.executable, "-m", "greval", *cmd], stdout=out, stderr=subprocess.STDOUT, env=env, cwd=log.parent
        )
        while proc.poll() is None and not _verdicts(store):
            time.sleep(0.5)
        wall = time.perf_counter() - started
        status = Path(f"/proc/{proc.pid}/status").read_text()
        peak = next(int(line.split()[1]) for line in status.splitlines() if line.startswith("VmHWM:"))
        fields = Path(f"/proc/{proc.pid}/stat").read_text().rsplit(")", 1)[1].split()
        cpu = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        proc.send_signal(signal.SIGINT)
        proc.wait()
    return Cost(wall, cpu, peak / 1024)


def _verdicts(store: Path) -> int:
    """Verdicts in a store being written (0 while it cannot be read yet)."""
    try:
        db = sqlite3.connect(f"file:{store}?mode=ro", uri=True, timeout=1)
        try:
            return int(db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0])
        finally:
            db.close()
    except sqlite3.Error:
        return 0


def load() -> str:
    return f"load {os.getloadavg()[0]:.2f}"


def run_cmd(data: Path, store: Path, url: str) -> list[str]:
    judge = ["--judge", "openai:judge-test", "--base-url", url, "-c", "64", "--quiet"]
    return ["run", str(data), "-s", SPEC, "--store", str(store), *judge]


def size(store: Path) -> tuple[float, float, list[tuple[str, float]]]:
    """(bytes per verdict as the run left the file and its WAL, after VACUUM, the largest parts after VACUUM)."""
    as_left = sum(p.stat().st_size for p in (store, Path(f"{store}-wal")) if p.exists())
    db = sqlite3.connect(store)
    try:
        [(verdicts,)] = db.execute("SELECT COUNT(*) FROM verdicts").fetchall()
        db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        db.execute("VACUUM")
        [(pages, page)] = db.execute("SELECT * FROM pragma_page_count, pragma_page_size").fetchall()
        parts = db.execute("SELECT name, SUM(pgsize) FROM dbstat GROUP BY name ORDER BY 2 DESC LIMIT 8").fetchall()
    finally:
        db.close()
    return as_left / verdicts, pages * page / verdicts, [(name, n / verdicts) for name, n in parts]


def report(step: str, costs: dict[str, list[Cost]]) -> None:
    """Medians per version and, with a baseline, the median of the per-round ratios."""
    for version, got in costs.items():
        med = Cost(*(statistics.median(getattr(c, f) for c in got) for f in ("wall", "cpu", "rss_mb")))
        print(f"{step:>7} {version:<8} median of {len(got)}: {med}", flush=True)
    if costs.get("this") and costs.get("baseline"):
        for field in ("wall", "cpu", "rss_mb"):
            pairs = zip(costs["this"], costs["baseline"], strict=True)
            ratios = [getattr(a, field) / getattr(b, field) for a, b in pairs]
            shown = ", ".join(f"{r:.2f}" for r in ratios)
            print(f"{step:>7} this ÷ baseline {field}: median {statistics.median(ratios):.2f} ({shown})", flush=True)


def _plan_step(rounds: int, versions: dict[str, Path], work: Path, data: Path, url: str) -> None:
    """The ``plan`` step: each version's first run on a new store, stopped once judging has begun."""
    costs: dict[str, list[Cost]] = {v: [] for v in versions}
    for r in range(rounds):
        for v in list(versions) if r % 2 == 0 else list(versions)[::-1]:
            store = work / f"{v}-plan.sqlite"
            for p in work.glob(f"{store.name}*"):
                p.unlink()
            before = load()
            cost = planned(run_cmd(data, store, url), versions[v], store, work / f"{v}-plan.log")
            costs[v].append(cost)
            print(f"    plan round {r + 1} {v:<8} {cost}  ({before})", flush=True)
    report("plan", costs)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=100_000)
    ap.add_argument("--rounds", type=int, default=3, help="rounds of the re-run and the export")
    ap.add_argument("--run-rounds", type=int, default=3, help="rounds of the first run (each on a new store)")
    ap.add_argument("--baseline", type=Path, default=None, help="a checkout of the greval to pair against")
    ap.add_argument("--steps", default="run,rerun,export,size")
    ap.add_argument("--keep", type=Path, default=None, help="work here and keep the stores (default: a temp dir)")
    ap.add_argument("--only", choices=["this", "baseline"], default=None, help="run one version's steps alone")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="the run step continues the store --keep holds (a first run stopped with Ctrl-C) instead of a new one",
    )
    ap.add_argument(
        "--shared-store",
        action="store_true",
        help="with --baseline: the baseline's re-runs and exports read this version's store (one first run, "
        "both versions on the same file: a pairing that leaves the store's layout out of the ratio)",
    )
    args = ap.parse_args()
    steps = set(args.steps.split(","))
    versions = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    versions = {v: src for v, src in versions.items() if args.only in (None, v)}
    work = args.keep or Path(tempfile.mkdtemp(prefix="greval-million-"))
    work.mkdir(parents=True, exist_ok=True)
    data = work / f"data-{args.records}.jsonl"
    if not data.exists():
        write_data(data, args.records)
    print(f"{args.records:,} records ({data.stat().st_size / 1e6:.0f} MB), cpus {os.cpu_count()}, {load()}")
    stores = {v: work / f"{'this' if args.shared_store else v}-{args.records}.sqlite" for v in versions}
    if args.shared_store and "run" in steps and len(versions) > 1:
        ap.error("--shared-store pairs the re-runs and exports on one store: make it with a run step alone first")
    try:
        with OpenAIServer(latency=0.0) as srv:
            order = list(versions)
            costs: dict[str, list[Cost]] = {v: [] for v in versions}
            for r in range(args.run_rounds if "run" in steps else 0):
                for v in order if r % 2 == 0 else order[::-1]:
                    for p in work.glob(f"{stores[v].name}*") if not args.resume else ():
                        p.unlink()
                    before, server = load(), server_cpu(srv)
                    cost = measure(run_cmd(data, stores[v], srv.base_url), versions[v], work / f"{v}-run.log")
                    costs[v].append(cost)
                    used = (server_cpu(srv) - server) / cost.wall
                    print(f"    run round {r + 1} {v:<8} {cost}  ({before}; server {used:.0%} of a core)", flush=True)
            if any(costs.values()):
                report("run", costs)
            if "plan" in steps:
                _plan_step(args.rounds, versions, work, data, srv.base_url)
            for step, cmd in (
                ("rerun", lambda v: run_cmd(data, stores[v], srv.base_url)),
                ("export", lambda v: ["results", "export", "--store", str(stores[v]), "-o", str(work / f"{v}.csv")]),
            ):
                if step not in steps:
                    continue
                costs = {v: [] for v in versions}
                for v in order if step == "rerun" else ():
                    # unmeasured: the file in the page cache for both, the row cache's entry written (this)
                    before = load()
                    cost = measure(cmd(v), versions[v], work / f"{v}-{step}.log")
                    print(f"    {step} warm-up {v:<8} {cost}  ({before}; not counted)", flush=True)
                for r in range(args.rounds):
                    for v in order if r % 2 == 0 else order[::-1]:
                        before = load()
                        cost = measure(cmd(v), versions[v], work / f"{v}-{step}.log")
                        costs[v].append(cost)
                        print(f"    {step} round {r + 1} {v:<8} {cost}  ({before})", flush=True)
                report(step, costs)
        if "size" in steps:
            for v, store in stores.items():
                left, packed, parts = size(store)
                top = ", ".join(f"{name} {b:.0f}" for name, b in parts)
                print(f"   size {v:<8} {packed:,.0f} B/verdict after VACUUM ({left:,.0f} as the run left it); {top}")
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"done, {load()}")


if __name__ == "__main__":
    main()
