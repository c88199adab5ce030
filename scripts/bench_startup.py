"""Benchmark greval's start-up: CPU seconds of six everyday commands, and of a judging run up to its first
model call, against ``python -c pass``.

Each command runs ``--runs`` times (5 by default) as a child process of this interpreter; its CPU time is
the children's user + system time (``resource.getrusage(RUSAGE_CHILDREN)``) before and after, so the
figure does not depend on how loaded the machine is as much as wall time does. Printed: the median per
command, its ratio to ``python -c pass`` measured in the same run, the issue's target where it has one, and
the machine's load average before and after.

``greval run: first model call`` is a fresh ``greval run`` (a new store each time) of ``chunk_evaluation``
against greval's local OpenAI-compatible test server: the child's own user + system CPU (``os.times()``)
and the wall time since it was started, at the moment it opens the connection for its first model request
(an audit hook on ``socket.connect`` to the server's port, which then ends the child). Issue 35's target:
≤ 1.0 s of CPU.

    python scripts/bench_startup.py [--runs 5]

The store and the agreement table are made in a temporary directory: a two-record store scored by a
computed metric (no model) and a six-row CSV of judge and human labels. ``annotate status`` / ``down`` run on
an Argilla data directory with no server (what they cost to start and read the pid / state files).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from greval.testing.openai_server import OpenAIServer

ROOT = Path(__file__).resolve().parents[1]
GREVAL = [sys.executable, "-m", "greval"]

#: Issue 15's targets, in CPU seconds; issue 17's for `annotate status` / `down` ("well under a second");
#: issue 35's for a judging run's first model call.
FIRST_CALL = "greval run: first model call"
TARGETS = {
    "greval --help": 0.4,
    "greval spec validate FILE": 0.8,
    "greval annotate status --data-dir D": 0.5,
    "greval annotate down --data-dir D": 0.5,
    FIRST_CALL: 1.0,
}

#: Runs greval's command line in the child, and ends it when it first connects to the test server's port:
#: its CPU (user + system) and the wall clock then, written as JSON to the file named by BENCH_OUT.
FIRST_CALL_PROBE = """
import json, os, sys, time
PORT, OUT = int(os.environ["BENCH_PORT"]), os.environ["BENCH_OUT"]

def first_call(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple) and args[1][1:2] == (PORT,):
        cpu = os.times()
        with open(OUT, "w") as out:
            json.dump({"cpu": cpu.user + cpu.system, "at": time.time()}, out)
        os._exit(0)

sys.addaudithook(first_call)
sys.argv = ["greval", *sys.argv[1:]]
from greval.__main__ import entry
entry()
"""

RECORDS = [
    {
        "id": "r1",
        "question": "What is the capital of France?",
        "answer": "Paris is the capital [1].",
        "chunks": [{"id": "c1", "text": "Paris is the capital of France."}],
    },
    {
        "id": "r2",
        "question": "What is the capital of Germany?",
        "answer": "Berlin.",
        "chunks": [{"id": "c1", "text": "Berlin is the capital of Germany."}],
    },
]
LABELS = "id,judge,human\n1,yes,yes\n2,no,yes\n3,no,no\n4,yes,yes\n5,no,no\n6,yes,no\n"


def cpu_seconds(cmd: Sequence[str], cwd: Path) -> float:
    """User + system CPU seconds of one run of ``cmd`` (which must succeed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({done.returncode}):\n{done.stderr}")
    return (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def first_call(srv: OpenAIServer, work: Path, data: Path, n: int) -> tuple[float, float]:
    """A fresh ``greval run``'s (CPU seconds, wall seconds) from its start to its first model request."""
    out, store = work / f"first-call-{n}.json", work / f"first-call-{n}.sqlite"
    port = srv.base_url.split("//", 1)[1].split("/", 1)[0].rsplit(":", 1)[1]
    judge = ["--judge", "openai:bench", "--base-url", srv.base_url, "--store", str(store), "--quiet"]
    cmd = [sys.executable, "-c", FIRST_CALL_PROBE, "run", str(data), "-s", "chunk_evaluation", *judge]
    env = {**os.environ, "BENCH_PORT": port, "BENCH_OUT": str(out)}
    started = time.time()
    done = subprocess.run(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode != 0 or not out.exists():
        raise SystemExit(f"greval run made no model call ({done.returncode}):\n{done.stderr}")
    got = json.loads(out.read_text(encoding="utf-8"))
    return got["cpu"], got["at"] - started


def make_inputs(work: Path) -> tuple[Path, Path]:
    """A small store (a computed metric over two records: no model call) and a small agreement table."""
    data = work / "records.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in RECORDS), encoding="utf-8")
    store = work / "bench.sqlite"
    cmd = [*GREVAL, "run", str(data), "-s", "citation_validity", "--store", str(store), "--quiet"]
    subprocess.run(cmd, cwd=work, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    labels = work / "labels.csv"
    labels.write_text(LABELS, encoding="utf-8")
    return store, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=5, help="Runs per command; the median is reported.")
    args = parser.parse_args()
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory(prefix="greval-bench-startup-") as tmp:
        work = Path(tmp)
        store, labels = make_inputs(work)
        spec_file = ROOT / "metric_specs" / "answer_alignment.yaml"
        argilla = work / "argilla-data"
        argilla.mkdir()
        commands: dict[str, list[str]] = {
            "python -c pass": [sys.executable, "-c", "pass"],
            "greval --help": [*GREVAL, "--help"],
            "greval spec validate FILE": [*GREVAL, "spec", "validate", str(spec_file)],
            "greval results runs --store S": [*GREVAL, "results", "runs", "--store", str(store)],
            "greval annotate status --data-dir D": [*GREVAL, "annotate", "status", "--data-dir", str(argilla)],
            "greval annotate down --data-dir D": [*GREVAL, "annotate", "down", "--data-dir", str(argilla)],
            "greval agreement CSV": [
                *GREVAL,
                "agreement",
                str(labels),
                "--judge",
                "judge",
                "--human",
                "human",
                "--bootstrap",
                "0",
            ],
        }
        cpu: dict[str, list[float]] = {name: [] for name in [*commands, FIRST_CALL]}
        wall: list[float] = []
        with OpenAIServer() as srv:
            for n in range(args.runs):  # interleaved, so a burst of load hits every command alike
                for name, cmd in commands.items():
                    cpu[name].append(cpu_seconds(cmd, work))
                seconds, waited = first_call(srv, work, work / "records.jsonl", n)
                cpu[FIRST_CALL].append(seconds)
                wall.append(waited)
    medians = {name: statistics.median(values) for name, values in cpu.items()}
    load_after = os.getloadavg()
    base = medians["python -c pass"]
    print(f"python {sys.version.split()[0]} ({sys.executable}); greval run as `{' '.join(GREVAL[1:])}`")
    print(f"median of {args.runs} runs, CPU seconds (user + sys of the child)")
    print(f"{'command':38} {'CPU s':>7} {'× pass':>7}  target")
    for name, value in medians.items():
        target = TARGETS.get(name)
        verdict = "" if target is None else f"≤ {target:.1f} s: {'met' if value <= target else 'NOT met'}"
        print(f"{name:38} {value:7.3f} {value / base:7.1f}  {verdict}")
    rounds = ", ".join(f"{c:.2f}" for c in cpu[FIRST_CALL])
    print(f"{FIRST_CALL}: CPU per round {rounds}; wall median {statistics.median(wall):.2f} s", end="")
    print(f" (python -c pass: {', '.join(f'{c:.3f}' for c in cpu['python -c pass'])})")
    print("load average (1, 5, 15 min): before " + ", ".join(f"{x:.2f}" for x in load_before), end="")
    print("; after " + ", ".join(f"{x:.2f}" for x in load_after))


if __name__ == "__main__":
    main()
