"""The store's write rate: verdicts per second into a SQLite file and into a PostgreSQL database.

What a run does when it stores a verdict (``Store.put_result`` with ``defer=True``, committed in groups of
64, as ``runner.GroupCommit`` does; each judgement also claimed first, as ``runner.settle`` does), with
``--writers`` processes writing disjoint judgements at once (2: the two workers of a scaled-out run on this
2-core machine). Each round writes fresh judgements into a fresh store; the median of ``--rounds`` is printed,
with the machine's load. PostgreSQL is a throwaway server started here (greval.testing.postgres), on a Unix
socket with fsync off (durability is not what is measured; a managed server over TCP adds its round trips).

    python scripts/bench_store.py [--n 4000] [--writers 1 2] [--rounds 3]
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import statistics
import tempfile
import time
from pathlib import Path

GROUP = 64


def _write(ref: str, start: int, n: int, barrier: object | None) -> float:
    """Claim and store ``n`` judgements of one three-item many-metric; seconds taken."""
    from greval.dataset.records import Record
    from greval.llm.config import JudgeConfig
    from greval.spec import resolve_specs
    from greval.store.store import Store
    from greval.types import ItemVerdict, JudgeResult

    cfg = JudgeConfig.parse("openai:bench-judge", base_url="http://127.0.0.1:9/v1")
    [spec] = resolve_specs(["chunk_evaluation"])
    recs = [
        Record.from_mapping({"id": f"r{i}", "question": f"q{i}?", "answer": f"a{i}.", "chunks": ["x", "y", "z"]})
        for i in range(start, start + n)
    ]
    result = JudgeResult(
        spec=spec.name,
        spec_hash=spec.hash,
        verdicts=[ItemVerdict(item_id=f"c{k}", status="ok", label="Relevant", reason="why " * 8) for k in (1, 2, 3)],
    )
    with Store(ref) as st:
        st.put_specs([spec], {spec.name: spec.hash})
        st.put_judge(cfg)
        if barrier is not None:
            barrier.wait()  # type: ignore[attr-defined]
        t0 = time.perf_counter()
        for i in range(0, n, GROUP):
            group = recs[i : i + GROUP]
            st.claim_many([(spec.hash, cfg.key, r.hash) for r in group])
            for r in group:
                st.put_result(None, spec.hash, cfg, r, result, defer=True)
            st.flush()
        return time.perf_counter() - t0


def _worker(ref: str, start: int, n: int, barrier: object, out: object) -> None:
    out.put(_write(ref, start, n, barrier))  # type: ignore[attr-defined]


def rate(ref: str, n: int, writers: int) -> float:
    """Verdicts per second (3 per judgement) with ``writers`` processes writing n judgements in all."""
    if writers == 1:
        return 3 * n / _write(ref, 0, n, None)
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(writers), ctx.Queue()
    each = n // writers
    procs = [ctx.Process(target=_worker, args=(ref, w * each, each, barrier, out)) for w in range(writers)]
    for p in procs:
        p.start()
    times = [out.get() for _ in procs]
    for p in procs:
        p.join()
    return 3 * each * writers / max(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=4000, help="judgements per round (3 verdicts each)")
    ap.add_argument("--writers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    from greval.testing.postgres import PostgresServer, binaries

    print(f"load before: {os.getloadavg()[0]:.2f}; {args.n} judgements x 3 verdicts per round, groups of {GROUP}")
    pg = PostgresServer().start() if binaries() is not None else None
    try:
        for writers in args.writers:
            for backend in ("sqlite", "postgresql"):
                if backend == "postgresql" and pg is None:
                    print("postgresql: not installed (apt-get install postgresql)")
                    continue
                rates = []
                for _ in range(args.rounds):
                    with tempfile.TemporaryDirectory() as d:
                        ref = str(Path(d) / "s.sqlite") if backend == "sqlite" else pg.database()  # type: ignore[union-attr]
                        rates.append(rate(ref, args.n, writers))
                print(
                    f"{backend:<10} writers {writers}: median {statistics.median(rates):8,.0f} verdicts/s"
                    f"  (rounds: {', '.join(f'{r:,.0f}' for r in rates)})"
                )
    finally:
        if pg is not None:
            pg.stop()
    print(f"load after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
