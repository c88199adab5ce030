"""What the row cache (greval.dataset.rowcache) spares a re-run: a dataset file's rows read to their (id, content
hash), as a run plans them, by a full read (every row parsed, normalised and hashed) and from the cache (the file's
bytes digested to recognise it, then the ids and hashes read from the entry), paired in each round in alternating
order, in this process. The rows of both must be the same (the script stops if not).

The full read is what a no-op re-run of an unchanged file did before the cache (issue 46: 41 s for 1M rows, most
of it this); the rest of such a re-run (asking the store what is done) is the same either way and is measured
end to end by scripts/bench_million.py (``--steps rerun``).

    python scripts/bench_rowcache.py --records 1000000
    python scripts/bench_rowcache.py --data /work/bench1m-perf/data-1000000.jsonl --rounds 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from greval.dataset.records import DataFile  # noqa: E402
from greval.dataset.rowcache import RowCache, identify  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))
from bench_million import write_data  # noqa: E402


def load() -> str:
    return "load " + " ".join(f"{x:.2f}" for x in os.getloadavg())


def timed(read: DataFile) -> tuple[float, float, list[tuple[str, str]]]:
    """(wall s, CPU s, the rows' (id, hash)) of one read through."""
    wall, cpu = time.perf_counter(), time.process_time()
    rows = [(r.id, r.hash) for r in read]
    return time.perf_counter() - wall, time.process_time() - cpu, rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--records", type=int, default=1_000_000)
    ap.add_argument("--data", type=Path, default=None, help="a JSON Lines file to read (else one is written)")
    ap.add_argument("--rounds", type=int, default=3)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="greval-rowcache-") as tmp:
        data = a.data
        if data is None:
            data = Path(tmp) / f"data-{a.records}.jsonl"
            write_data(data, a.records)
        cache = RowCache(Path(tmp) / "cache")
        print(f"{data} ({data.stat().st_size / 1e6:.0f} MB), cpus {os.cpu_count()}, {load()}", flush=True)
        t = time.perf_counter()
        identify(data)
        print(f"  the file's sha256 alone: {time.perf_counter() - t:.2f} s", flush=True)
        wall, cpu, first = timed(DataFile(data, cache=cache))
        print(f"  first read (full, the entry written): {wall:.1f} s wall {cpu:.1f} s CPU, {len(first):,} rows")
        got: dict[str, list[tuple[float, float]]] = {"full": [], "cached": []}
        for r in range(a.rounds):
            order = ["full", "cached"] if r % 2 == 0 else ["cached", "full"]
            for way in order:
                before = load()
                wall, cpu, rows = timed(DataFile(data, cache=None if way == "full" else cache))
                if rows != first:
                    raise SystemExit(f"{way} read gave other rows than the first read")
                got[way].append((wall, cpu))
                print(f"    round {r + 1} {way:<6} {wall:6.2f} s wall {cpu:6.2f} s CPU  ({before})", flush=True)
        for way, xs in got.items():
            print(
                f"  {way:<6} median of {a.rounds}: {statistics.median(w for w, _ in xs):6.2f} s wall "
                f"{statistics.median(c for _, c in xs):6.2f} s CPU"
            )
        for i, what in enumerate(("wall", "CPU")):
            ratios = [c[i] / f[i] for c, f in zip(got["cached"], got["full"], strict=True)]
            shown = ", ".join(f"{x:.3f}" for x in ratios)
            print(f"  cached ÷ full ({what}), per round: {shown}; median {statistics.median(ratios):.3f}")
    print(f"done, {load()}")


if __name__ == "__main__":
    main()
