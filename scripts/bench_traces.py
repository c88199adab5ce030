"""One big trace imported: a root step with N children, written as a LangSmith runs export, a Langfuse
observations export and a Phoenix (OpenInference) span export, each read the way ``greval run FILE`` reads it
(``greval.traces.detect.open_data``, every record hashed) — issue 46's target: a 200,000-span trace in ≤ 30 s.

The children cycle through a retriever step (two documents with ids), an LLM call (chat messages in, a message
out, token counts), a tool step and a chain step, in the fields each tool's export writes (the shapes of
tests/fixtures/traces). Each import runs in a process of its own, measured by the kernel (``os.wait4``: wall time,
user + system CPU, peak RSS).

``--baseline DIR`` imports every file with the greval of another checkout too (e.g. ``git worktree add
/tmp/base COMMIT``): the two are paired in each round, in alternating order; the script prints each round, the
medians and the median of the per-round ratios (this ÷ baseline), with the load average before each import. An
import that takes longer than ``--timeout`` seconds is stopped and shown as ``> T s``.

    python scripts/bench_traces.py                                   # 200,000 children, 3 rounds
    python scripts/bench_traces.py --spans 20000,50000,200000 --baseline /tmp/base --timeout 120
    python scripts/bench_traces.py --formats langsmith --spans 200000 --profile   # cProfile's top 25 once
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, TextIO

ROOT = Path(__file__).resolve().parents[1]
FORMATS = ("langsmith", "langfuse", "phoenix")
T0 = datetime(2025, 5, 1, 10, 0, tzinfo=UTC)
KINDS = ("retriever", "llm", "tool", "chain")


@dataclass(frozen=True)
class Cost:
    """What one import took: ``read`` the reading itself (open_data to the last record hashed, in the process),
    and the process as the kernel counted it (wall time with Python's start-up and imports, user + system CPU,
    peak RSS). ``read`` and ``wall`` None: stopped at the timeout."""

    read: float | None
    wall: float | None
    cpu: float
    rss_mb: float
    records: int = 0

    def __str__(self) -> str:
        if self.read is None or self.wall is None:
            return f"timed out after {self.cpu:6.1f} s CPU {self.rss_mb:6.0f} MB peak"
        return (f"read {self.read:6.1f} s, process {self.wall:6.1f} s wall {self.cpu:6.1f} s CPU "
                f"{self.rss_mb:6.0f} MB peak, {self.records} record(s)")  # fmt: skip


# ------------------------------------------------------------------------------------------- the files
def _when(i: int) -> tuple[str, str]:
    start = T0 + timedelta(milliseconds=i)
    return start.isoformat(), (start + timedelta(microseconds=500)).isoformat()


def _question(i: int) -> str:
    return f"What does section {i % 97} of the handbook say about leave, and who approves it?"


def _messages(i: int) -> list[dict[str, str]]:
    context = " ".join(f"[d{i}-{k}] Passage {k} of section {i % 97}: staff take leave after approval." for k in (0, 1))
    return [
        {"role": "system", "content": f"Answer from the context only.\n{context}"},
        {"role": "user", "content": _question(i)},
    ]


def _docs(i: int) -> list[tuple[str, str, float]]:
    return [(f"d{i}-{k}", f"Passage {k} of section {i % 97}: staff take leave after approval.", 0.9 - k / 10)
            for k in (0, 1)]  # fmt: skip


def langsmith_rows(n: int) -> Iterator[dict[str, Any]]:
    """LangSmith runs (``list_runs`` / the bulk export's fields)."""
    tid = "00000000-0000-4000-8000-000000000000"
    start, _ = _when(0)
    yield {"id": tid, "trace_id": tid, "parent_run_id": None, "name": "agent", "run_type": "chain",
           "start_time": start, "end_time": (T0 + timedelta(seconds=600)).isoformat(),
           "inputs": {"question": _question(0)}, "outputs": {"answer": "Leave needs the team lead's approval."},
           "extra": {"metadata": {"ls_run_depth": 0, "app_version": "1.0"}}, "session_id": "project-1",
           "error": None, "status": "success", "tags": []}  # fmt: skip
    for i in range(n):
        kind = KINDS[i % 4]
        start, end = _when(i + 1)
        out: Any = {"output": f"step {i} done"}
        inputs: Any = {"input": f"step {i}"}
        row: dict[str, Any] = {}
        if kind == "retriever":
            inputs = {"query": _question(i)}
            out = {"documents": [{"page_content": text, "metadata": {"id": did, "score": score}, "type": "Document"}
                                 for did, text, score in _docs(i)]}  # fmt: skip
        elif kind == "llm":
            inputs = {"messages": [[{"lc": 1, "type": "constructor", "id": ["langchain", "schema", "messages",
                                    "SystemMessage" if m["role"] == "system" else "HumanMessage"],
                                    "kwargs": {"content": m["content"]}} for m in _messages(i)]]}  # fmt: skip
            out = {"generations": [[{"text": f"Answer {i}.", "message": {"kwargs": {"content": f"Answer {i}."}}}]]}
            row = {"prompt_tokens": 120, "completion_tokens": 8, "total_tokens": 128}
        yield {"id": f"00000000-0000-4000-8000-{i + 1:012d}", "trace_id": tid, "parent_run_id": tid,
               "name": f"{kind}-step", "run_type": kind, "start_time": start, "end_time": end, "inputs": inputs,
               "outputs": out, "extra": {"metadata": {"ls_run_depth": 1}}, "session_id": "project-1",
               "error": None, "status": "success", "tags": [], **row}  # fmt: skip


def langfuse_rows(n: int) -> Iterator[dict[str, Any]]:
    """Langfuse observations (the public API's / UI export's camelCase fields)."""
    tid = "lf-trace-0"
    types = {"retriever": "RETRIEVER", "llm": "GENERATION", "tool": "TOOL", "chain": "CHAIN"}
    start, _ = _when(0)
    yield {"id": f"{tid}-root", "traceId": tid, "type": "SPAN", "name": "agent", "parentObservationId": None,
           "startTime": start, "endTime": (T0 + timedelta(seconds=600)).isoformat(),
           "input": {"question": _question(0)}, "output": {"answer": "Leave needs the team lead's approval."},
           "metadata": {"app_version": "1.0"}, "level": "DEFAULT"}  # fmt: skip
    for i in range(n):
        kind = KINDS[i % 4]
        start, end = _when(i + 1)
        row: dict[str, Any] = {"input": f"step {i}", "output": f"step {i} done"}
        if kind == "retriever":
            row = {"input": _question(i), "output": [{"pageContent": text, "metadata": {"id": did, "score": score}}
                                                    for did, text, score in _docs(i)]}  # fmt: skip
        elif kind == "llm":
            row = {"input": _messages(i), "output": {"role": "assistant", "content": f"Answer {i}."},
                   "model": "gpt-4o-mini", "usageDetails": {"input": 120, "output": 8, "total": 128}}  # fmt: skip
        yield {"id": f"{tid}-{i}", "traceId": tid, "type": types[kind], "name": f"{kind}-step",
               "parentObservationId": f"{tid}-root", "startTime": start, "endTime": end, "metadata": {},
               "level": "DEFAULT", **row}  # fmt: skip


def phoenix_rows(n: int) -> Iterator[dict[str, Any]]:
    """Phoenix REST spans (``client.spans.get_spans``: ``context``, ``span_kind``, dotted ``attributes``)."""
    tid = "a7363034" * 4
    kinds = {"retriever": "RETRIEVER", "llm": "LLM", "tool": "TOOL", "chain": "CHAIN"}
    start, _ = _when(0)
    root = "75c87800" * 2
    yield {"id": "root", "name": "agent", "context": {"trace_id": tid, "span_id": root}, "span_kind": "CHAIN",
           "parent_id": None, "start_time": start, "end_time": (T0 + timedelta(seconds=600)).isoformat(),
           "status_code": "OK", "status_message": "", "events": [],
           "attributes": {"input.value": _question(0), "output.value": "Leave needs the team lead's approval.",
                          "metadata.app_version": "1.0", "openinference.span.kind": "CHAIN"}}  # fmt: skip
    for i in range(n):
        kind = KINDS[i % 4]
        start, end = _when(i + 1)
        attrs: dict[str, Any] = {"input.value": f"step {i}", "output.value": f"step {i} done"}
        if kind == "retriever":
            attrs = {"input.value": _question(i)}
            for k, (did, text, score) in enumerate(_docs(i)):
                attrs |= {f"retrieval.documents.{k}.document.id": did, f"retrieval.documents.{k}.document.content":
                          text, f"retrieval.documents.{k}.document.score": score}  # fmt: skip
        elif kind == "llm":
            attrs = {"llm.token_count.prompt": 120, "llm.token_count.completion": 8, "llm.token_count.total": 128,
                     "llm.output_messages.0.message.role": "assistant", "output.value": f"Answer {i}.",
                     "llm.output_messages.0.message.content": f"Answer {i}."}  # fmt: skip
            for k, m in enumerate(_messages(i)):
                attrs |= {f"llm.input_messages.{k}.message.role": m["role"],
                          f"llm.input_messages.{k}.message.content": m["content"]}  # fmt: skip
        attrs["openinference.span.kind"] = kinds[kind]
        yield {"id": f"s{i}", "name": f"{kind}-step", "context": {"trace_id": tid, "span_id": f"{i + 1:016x}"},
               "span_kind": kinds[kind], "parent_id": root, "start_time": start, "end_time": end,
               "status_code": "OK", "status_message": "", "events": [], "attributes": attrs}  # fmt: skip


WRITERS: dict[str, Callable[[int], Iterator[dict[str, Any]]]] = {
    "langsmith": langsmith_rows,
    "langfuse": langfuse_rows,
    "phoenix": phoenix_rows,
}


def write(path: Path, fmt: str, n: int) -> None:
    """One trace of ``n`` children (plus its root) as ``fmt``'s JSONL export."""
    with path.open("w", encoding="utf-8") as f:
        for row in WRITERS[fmt](n):
            f.write(json.dumps(row) + "\n")


# ------------------------------------------------------------------------------------------- one import
def import_once(path: str, out: TextIO) -> None:
    """Read ``path`` as ``greval run`` does (every record hashed); one JSON line: records, seconds, notes."""
    from greval.traces.detect import open_data

    start = time.perf_counter()
    rows = open_data(path, None, None, None)
    records = sum(1 for _ in rows)
    seconds = time.perf_counter() - start
    notes = getattr(rows, "notes", [])
    out.write(json.dumps({"records": records, "seconds": seconds, "notes": notes}) + "\n")


def measure(checkout: Path, path: Path, timeout: float) -> Cost:
    """One import in a process of its own with the greval of ``checkout``, stopped after ``timeout`` seconds."""
    env = {**os.environ, "PYTHONPATH": str(checkout)}
    code = (f"import sys; sys.path.insert(0, {str(ROOT / 'scripts')!r}); import bench_traces as b; "
            f"b.import_once({str(path)!r}, sys.stdout)")  # fmt: skip
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", code], stdout=out, stderr=err, env=env, cwd=checkout,
                                start_new_session=True)  # fmt: skip
        status, usage, wall = _wait(proc.pid, start, timeout)
        proc.returncode = status  # reaped by os.wait4
        cpu, rss = usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024
        if wall is None:
            return Cost(None, None, cpu, rss)
        out.seek(0)
        err.seek(0)
        if status != 0:
            raise SystemExit(f"import of {path} with {checkout} failed:\n{err.read()[-2000:]}")
        said = json.loads(out.read().splitlines()[-1])
    return Cost(said["seconds"], wall, cpu, rss, said["records"])


def _wait(pid: int, start: float, timeout: float) -> tuple[int, resource.struct_rusage, float | None]:
    """(exit status, the process's own rusage, wall seconds or None when it was stopped at the timeout)."""
    while True:
        done, status, usage = os.wait4(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status), usage, time.perf_counter() - start
        if time.perf_counter() - start > timeout:
            os.killpg(pid, signal.SIGKILL)
            _, status, usage = os.wait4(pid, 0)
            return -9, usage, None
        time.sleep(0.02)


# ------------------------------------------------------------------------------------------- the rounds
def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def profile(path: Path) -> None:
    """cProfile's top 25 (cumulative) of one import in this process, with this checkout."""
    import cProfile
    import pstats

    sys.path.insert(0, str(ROOT))
    prof = cProfile.Profile()
    prof.runcall(import_once, str(path), sys.stdout)
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)


def summary(costs: dict[str, list[Cost]], label: str, timeout: float) -> None:
    """Medians per version and, with a baseline, the median of the per-round ratios of the read time (a
    timed-out import counts as ``timeout``: its figure is then a lower bound, its ratio an upper one)."""
    for version, runs in costs.items():
        reads = [c.read if c.read is not None else timeout for c in runs]
        cut = " (timed out: ≥)" if any(c.read is None for c in runs) else ""
        print(f"  {label} {version:>8}: median read {statistics.median(reads):6.1f} s{cut}, "
              f"CPU {statistics.median(c.cpu for c in runs):6.1f} s, "
              f"peak {statistics.median(c.rss_mb for c in runs):6.0f} MB", flush=True)  # fmt: skip
    if "baseline" in costs:
        pairs = list(zip(costs["this"], costs["baseline"], strict=True))
        ratios = [(a.read or timeout) / (b.read or timeout) for a, b in pairs]
        bound = "≤ " if any(b.read is None for _, b in pairs) else ""
        shown = ", ".join(f"{r:.3f}" for r in ratios)
        rss = statistics.median(a.rss_mb / b.rss_mb for a, b in pairs)
        print(f"  {label} this ÷ baseline: read time median {bound}{statistics.median(ratios):.3f} ({shown}); "
              f"peak RSS median {rss:.2f}", flush=True)  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--spans", default="200000", help="children per trace, comma-separated sizes")
    ap.add_argument("--formats", default=",".join(FORMATS), help=f"of {', '.join(FORMATS)}")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--baseline", type=Path, default=None, help="a checkout of the greval to pair against")
    ap.add_argument("--timeout", type=float, default=600.0, help="seconds an import may take before it is stopped")
    ap.add_argument("--keep", type=Path, default=None, help="write the files here and keep them")
    ap.add_argument("--profile", action="store_true", help="profile one import of each file (this checkout)")
    args = ap.parse_args()
    sizes = [int(s) for s in args.spans.split(",")]
    formats = [f.strip() for f in args.formats.split(",")]
    versions = {"this": ROOT} | ({"baseline": args.baseline.resolve()} if args.baseline else {})
    print(f"{os.cpu_count()} CPUs, {load()}; {args.rounds} round(s); versions: "
          + ", ".join(f"{k} {v}" for k, v in versions.items()), flush=True)  # fmt: skip
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        for n in sizes:
            for fmt in formats:
                path = folder / f"{fmt}-{n}.jsonl"
                write(path, fmt, n)
                label = f"{fmt} {n + 1:,} spans ({path.stat().st_size / 1e6:.0f} MB)"
                if args.profile:
                    profile(path)
                    continue
                costs: dict[str, list[Cost]] = {k: [] for k in versions}
                for r in range(args.rounds):
                    order = list(versions) if r % 2 == 0 else list(reversed(versions))
                    for version in order:
                        before = load()
                        cost = measure(versions[version], path, args.timeout)
                        costs[version].append(cost)
                        print(f"  round {r + 1} {label} {version:>8}: {cost} ({before})", flush=True)
                summary(costs, label, args.timeout)


if __name__ == "__main__":
    main()
