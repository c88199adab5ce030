"""Benchmark: greval's push / pull against a plain ``dataset.records.log`` of the same records.

Builds a store with N synthetic record-level verdicts (no model calls), starts the embedded Argilla server,
then in one run: greval push (create), plain SDK log (create), greval push again (update), SDK log again
(update); answers every record as an annotator; times greval pull. Prints records/s side by side.

    python scripts/bench_argilla_push.py [--n 1000] [--batch-size 500]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import argilla as rg

from greval.annotation import dataset as ds
from greval.annotation import server
from greval.annotation.argilla import DEFAULT_BATCH, bulk_upsert, connect, ensure_dataset
from greval.annotation.pull import pull
from greval.annotation.push import candidates, push, spec_and_judge
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.spec import CategoricalScale, Spec, resolve_specs
from greval.store.store import Store, spec_keys
from greval.types import ItemVerdict, JudgeResult


def build_store(path: Path, n: int) -> tuple[Spec, JudgeConfig, list[Record]]:
    """A store with ``n`` answer_alignment verdicts, written directly (a benchmark of pushing, not judging)."""
    spec = resolve_specs(["answer_alignment"], with_dependencies=False)[0]
    assert isinstance(spec, Spec) and isinstance(spec.scale, CategoricalScale)
    labels = spec.scale.names
    cfg = JudgeConfig.parse("openai:bench-judge")
    keys = spec_keys([spec])
    records = [
        Record.from_mapping(
            {
                "id": f"b{i}",
                "question": f"Benchmark question {i}: what does the text say about topic {i % 37}?",
                "expected_answer": f"The expected answer {i} " + "with some detail " * 5,
                "answer": f"The system's answer {i} " + "explaining things at length " * 8,
                "system": "A" if i % 2 else "B",
            }
        )
        for i in range(n)
    ]
    with Store(path) as st:
        st.put_specs([spec], keys)
        st.put_judge(cfg)
        st.put_records(records)
        for i, rec in enumerate(records):
            verdict = ItemVerdict(
                label=labels[i % len(labels)],
                confidence=round(0.5 + (i % 50) / 100, 2),
                reason=f"Reasoning {i}: the answer matches the expected answer in most respects.",
            )
            st.put_result(
                None, keys[spec.name], cfg, rec, JudgeResult(spec=spec.name, spec_hash=spec.hash, verdicts=[verdict])
            )
    return spec, cfg, records


def sdk_records(
    spec: Spec, cfg: JudgeConfig, store: Store, known_fields: set[str], known_meta: set[str], spec_key: str
) -> list[Any]:
    """The same records as greval pushes, as SDK ``rg.Record`` objects (built outside the timed region)."""
    out = []
    cands = candidates(store, spec_key, cfg.key)
    recs = {r.hash: r for r in store.records({c.record_hash for c in cands})}
    for c in cands:
        ref = ds.VerdictRef(
            record=recs[c.record_hash],
            item_id=c.item_id,
            label=c.label,
            value=c.value,
            confidence=c.confidence,
            reason=c.reason,
            judge=cfg.label,
            judge_model=cfg.model,
        )
        out.append(
            rg.Record(
                id=ds.argilla_id(spec.name, c.record_hash, c.item_id),
                fields=ds.record_fields(spec, ref, blind=False, known=known_fields),
                metadata=ds.record_metadata(spec, ref, known=known_meta),
                suggestions=[
                    rg.Suggestion(
                        ds.QUESTION,
                        c.label,
                        score=c.confidence,
                        agent=ds.agent_name(cfg.label, spec.hash),
                        type="model",
                    )
                ],
            )
        )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
    ap.add_argument("--rounds", type=int, default=3, help="create rounds (alternating order), then one update")
    args = ap.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    with tempfile.TemporaryDirectory(prefix="greval-bench-") as tmp:
        store_path = Path(tmp) / "store.sqlite"
        spec, cfg, _ = build_store(store_path, args.n)
        with server.running_server(data=Path(tmp) / "argilla") as info, Store(store_path) as st:
            conn = connect(info.url, info.api_key, workspace=info.workspace)
            client = conn.client
            # Each round creates a fresh pair of datasets with identical settings (outside the timed region),
            # then times greval's push and a plain SDK log of the same records; the order alternates so that
            # load from other processes on the machine does not favour one side. A last round updates.
            rows: list[tuple[str, float, float]] = []
            spec_key = spec_and_judge(st, spec.name)[0]
            sdk_recs: list[Any] = []
            names: list[str] = []
            # Warm-up (untimed): the server's first writes pay for caches and connections.
            warm = rg.Dataset(
                name="bench-warmup-sdk",
                settings=ds.build_settings(spec, client),
                workspace=info.workspace,
                client=client,
            ).create()
            wh = ensure_dataset(conn, spec, "bench-warmup-sdk", info.workspace)
            warm.records.log(sdk_records(spec, cfg, st, wh.fields, wh.metadata, spec_key)[:100])
            push(st, conn, spec.name, dataset="bench-warmup", strategy="random", n=100)
            for r in range(args.rounds):
                g_name, s_name = f"bench-greval-{r}", f"bench-sdk-{r}"
                sdk_ds = rg.Dataset(
                    name=s_name, settings=ds.build_settings(spec, client), workspace=info.workspace, client=client
                ).create()
                handle = ensure_dataset(conn, spec, s_name, info.workspace)
                sdk_recs = sdk_records(spec, cfg, st, handle.fields, handle.metadata, spec_key)
                ensure_dataset(conn, spec, g_name, info.workspace)
                rates = {}
                for side in ("greval", "sdk") if r % 2 == 0 else ("sdk", "greval"):
                    t = time.perf_counter()
                    if side == "greval":
                        res = push(st, conn, spec.name, dataset=g_name, batch_size=args.batch_size)
                        assert res.pushed == args.n
                    else:
                        sdk_ds.records.log(sdk_recs)
                    rates[side] = args.n / (time.perf_counter() - t)
                rows.append((f"create {r + 1}", rates["greval"], rates["sdk"]))
                names = [g_name, s_name]
            t = time.perf_counter()
            push(st, conn, spec.name, dataset=names[0], batch_size=args.batch_size)
            g = time.perf_counter() - t
            t = time.perf_counter()
            sdk_ds.records.log(sdk_recs)
            rows.append(("update", args.n / g, args.n / (time.perf_counter() - t)))
            n_g = len(list(client.datasets(names[0], workspace=info.workspace).records))
            n_s = len(list(sdk_ds.records))
            assert n_g == n_s == args.n, (n_g, n_s)

            # An annotator answers every record (one bulk upsert with responses), then greval pulls them.
            user = rg.User(
                username="bench-annotator", password="bench-pass-123", role="annotator", client=client
            ).create()
            client.workspaces(info.workspace).add_user(user)
            gh = ensure_dataset(conn, spec, names[0], info.workspace)
            items = [
                {
                    "external_id": r.id,
                    "responses": [
                        {
                            "values": {ds.QUESTION: {"value": r.suggestions[ds.QUESTION].value}},
                            "status": "submitted",
                            "user_id": str(user.id),
                        }
                    ],
                }
                for r in sdk_recs
            ]
            for i in range(0, len(items), 500):
                bulk_upsert(conn, gh.id, items[i : i + 500])
            t = time.perf_counter()
            pulled = pull(st, conn, spec.name, dataset=names[0])
            p = time.perf_counter() - t
            assert pulled.submitted == args.n and pulled.stored == args.n
            t = time.perf_counter()
            again = pull(st, conn, spec.name, dataset=names[0])
            p2 = time.perf_counter() - t
            assert again.changed == 0
            conn.close()

    print(f"{args.n} records with suggestions, batch size {args.batch_size} (greval) / 256 (SDK default)")
    print(f"{'phase':<8} {'greval push rec/s':>18} {'SDK records.log rec/s':>22} {'ratio':>7}")
    for phase, g_rate, s_rate in rows:
        print(f"{phase:<8} {g_rate:>18.0f} {s_rate:>22.0f} {g_rate / s_rate:>7.2f}")
    ratios = [g / s for _, g, s in rows]
    print(f"median ratio greval/SDK: {statistics.median(ratios):.2f}  (machine load: {os.getloadavg()[0]:.1f})")
    print(f"pull     {args.n / p:>18.0f} rec/s ({args.n} submitted answers); re-pull {args.n / p2:.0f} rec/s")


if __name__ == "__main__":
    main()
