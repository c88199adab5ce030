"""The embedded judge's reason cap, paired: the quick start's 30 judgements with and without it.

Each round judges the quick start's example (examples/begin: records.jsonl and attribution.yaml) twice into
fresh stores with the embedded local judge — once as greval judges today (each reason capped at
``LOCAL_REASON_CHARS`` through the schema's maxLength), once with the cap taken off (the judge of before
2026-11-29) — in alternating order. Printed per variant: model calls, verdicts ok and cut off (``truncated``),
wall seconds and the CPU seconds of the judge's server (a child of this process, reaped when each run ends);
then the median of the paired ratios and the load.

    python scripts/bench_reason_cap.py [--rounds 3]
"""

from __future__ import annotations

import argparse
import os
import resource
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

import greval
from greval.llm.config import LOCAL_REASON_CHARS, JudgeConfig
from greval.paths import examples_dir

EXAMPLE = examples_dir() / "begin"


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def judge_once(cfg: JudgeConfig, example: Path) -> dict[str, float]:
    """The example's records judged into a fresh store: calls, ok, truncated, wall, the server's CPU."""
    store = Path(tempfile.mkdtemp(prefix="greval-cap-")) / "s.sqlite"
    cpu, t0 = _children_cpu(), time.monotonic()
    res = greval.evaluate(
        str(example / "records.jsonl"), [str(example / "attribution.yaml")], judge=cfg, store=str(store), quiet=True
    )
    wall, cpu = time.monotonic() - t0, _children_cpu() - cpu
    with sqlite3.connect(store) as db:
        ok = db.execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0]
        cut = db.execute("SELECT COUNT(*) FROM verdicts WHERE error_kind='truncated'").fetchone()[0]
    return {"calls": res.run.calls, "ok": ok, "truncated": cut, "wall": wall, "cpu": cpu}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--example", type=Path, default=EXAMPLE, help="a folder with records.jsonl, attribution.yaml")
    args = parser.parse_args()
    capped = JudgeConfig.parse("local")
    uncapped = capped.model_copy(update={"reason_chars": None})
    variants = {f"cap {LOCAL_REASON_CHARS} chars": capped, "no cap": uncapped}
    got: dict[str, list[dict[str, float]]] = {name: [] for name in variants}
    print(f"load before: {os.getloadavg()[0]:.1f}")
    for r in range(args.rounds):
        order = list(variants) if r % 2 == 0 else list(reversed(variants))
        for name in order:
            one = judge_once(variants[name], args.example)
            got[name].append(one)
            print(f"round {r + 1} · {name}: " + ", ".join(f"{k} {v:.1f}" for k, v in one.items()), flush=True)
    print(f"load after: {os.getloadavg()[0]:.1f}")
    a, b = got[f"cap {LOCAL_REASON_CHARS} chars"], got["no cap"]
    for key in ("calls", "truncated", "wall", "cpu"):
        ratios = [x[key] / y[key] for x, y in zip(a, b, strict=True) if y[key]]
        median = f"{statistics.median(ratios):.2f}×" if ratios else "—"
        print(
            f"{key}: capped {[round(x[key], 1) for x in a]}, uncapped {[round(y[key], 1) for y in b]}; "
            f"median paired ratio {median}"
        )


if __name__ == "__main__":
    main()
