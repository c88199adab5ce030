"""Benchmark greval's start-up: CPU seconds of six everyday commands, against ``python -c pass``.

Each command runs ``--runs`` times (5 by default) as a child process of this interpreter; its CPU time is
the children's user + system time (``resource.getrusage(RUSAGE_CHILDREN)``) before and after, so the
figure does not depend on how loaded the machine is as much as wall time does. Printed: the median per
command, its ratio to ``python -c pass`` measured in the same run, the issue's target where it has one, and
the machine's load average before and after.

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
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GREVAL = [sys.executable, "-m", "greval"]

#: Issue 15's targets, in CPU seconds; issue 17's for `annotate status` / `down` ("well under a second").
TARGETS = {
    "greval --help": 0.4,
    "greval spec validate FILE": 0.8,
    "greval annotate status --data-dir D": 0.5,
    "greval annotate down --data-dir D": 0.5,
}

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
        cpu: dict[str, list[float]] = {name: [] for name in commands}
        for _ in range(args.runs):  # interleaved, so a burst of load hits every command alike
            for name, cmd in commands.items():
                cpu[name].append(cpu_seconds(cmd, work))
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
    print("load average (1, 5, 15 min): before " + ", ".join(f"{x:.2f}" for x in load_before), end="")
    print("; after " + ", ".join(f"{x:.2f}" for x in load_after))


if __name__ == "__main__":
    main()
