"""Benchmark: greval's push / pull against a plain ``dataset.records.log`` of the same records.

Builds a store with N synthetic record-level verdicts (no model calls) and starts two argilla-server 2.8.0
processes at once: greval's embedded server as `greval annotate up` runs it (with greval's ingest patches,
argilla_server/ingest_patch.py) and the same server with ``--stock`` (argilla-server's own validation). Each
paired round times greval's push to the first and a plain SDK ``records.log`` of the same records to the
second (order alternating); then one update round; then an annotator answers every record and greval pulls
them. Prints records/s side by side and the median ratio.

    python scripts/bench_argilla_push.py [--n 1000] [--batch-size 500]
"""

from __future__ import annotations

import argparse
import contextlib
import logging
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


def all_properties_settings(spec: Spec, client: Any) -> Any:
    """greval's settings with every metadata value declared as a property, as greval pushed before issue 17."""
    settings = ds.build_settings(spec, client)
    for name in ds.EXTRA_METADATA:
        kind = rg.FloatMetadataProperty if name == "inclusion_probability" else rg.TermsMetadataProperty
        settings.metadata.add(kind(client=client, name=name, visible_for_annotators=False))
    return settings


def _warm(conn: Any, info: server.ServerInfo, spec: Spec, cfg: JudgeConfig, st: Store, spec_key: str) -> None:
    """Untimed: the server's first writes pay for caches and connections."""
    client = conn.client
    warm = rg.Dataset(
        name="bench-warmup-sdk", settings=ds.build_settings(spec, client), workspace=info.workspace, client=client
    ).create()
    wh = ensure_dataset(conn, spec, "bench-warmup-sdk", info.workspace)
    warm.records.log(sdk_records(spec, cfg, st, wh.fields, wh.metadata, spec_key)[:100])
    push(st, conn, spec.name, dataset="bench-warmup", strategy="random", n=100)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=DEFAULT_BATCH)
    ap.add_argument("--rounds", type=int, default=3, help="paired create rounds (alternating order), then one update")
    args = ap.parse_args()
    os.environ.setdefault("TQDM_DISABLE", "1")
    logging.getLogger("argilla.sdk").setLevel(logging.ERROR)  # "batch size normalized" on every log
    with contextlib.ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="greval-bench-"))
        store_path = Path(tmp) / "store.sqlite"
        spec, cfg, _ = build_store(store_path, args.n)
        # Two servers at once: greval's embedded server as `greval annotate up` starts it (ingest patches on),
        # and the same argilla-server 2.8.0 started with --stock (argilla-server's own record validation).
        info = stack.enter_context(server.running_server(data=Path(tmp) / "argilla"))
        stock = stack.enter_context(server.running_server(data=Path(tmp) / "argilla-stock", stock=True))
        st = stack.enter_context(Store(store_path))
        conn = connect(info.url, info.api_key, workspace=info.workspace)
        sconn = connect(stock.url, stock.api_key, workspace=stock.workspace)
        spec_key = spec_and_judge(st, spec.name)[0]
        _warm(conn, info, spec, cfg, st, spec_key)
        _warm(sconn, stock, spec, cfg, st, spec_key)
        # Each round creates a fresh dataset on each server (outside the timed region), then times greval's
        # push to the embedded server and a plain SDK log of the same records to the stock server; the order
        # alternates so that load from other processes on the machine does not favour one side.
        # A third side logs the same records with the SDK to a stock dataset that declares every metadata value
        # as a property (greval's settings before issue 17); it is shown, the ratio is against the second.
        rows: list[tuple[str, float, float, float]] = []
        sdk_recs: list[Any] = []
        sdk_ds: Any = None
        g_name = ""
        for r in range(args.rounds):
            g_name, s_name, a_name = f"bench-greval-{r}", f"bench-sdk-{r}", f"bench-sdk-all-{r}"
            sdk_ds = rg.Dataset(
                name=s_name,
                settings=ds.build_settings(spec, sconn.client),
                workspace=stock.workspace,
                client=sconn.client,
            ).create()
            all_ds = rg.Dataset(
                name=a_name,
                settings=all_properties_settings(spec, sconn.client),
                workspace=stock.workspace,
                client=sconn.client,
            ).create()
            handle = ensure_dataset(sconn, spec, s_name, stock.workspace)
            sdk_recs = sdk_records(spec, cfg, st, handle.fields, handle.metadata, spec_key)
            ensure_dataset(conn, spec, g_name, info.workspace)
            rates = {}
            order = ["greval", "sdk", "sdk-all"]
            for side in order[r % 3 :] + order[: r % 3]:
                t = time.perf_counter()
                if side == "greval":
                    res = push(st, conn, spec.name, dataset=g_name, batch_size=args.batch_size)
                    assert res.pushed == args.n
                elif side == "sdk":
                    sdk_ds.records.log(sdk_recs)
                else:
                    all_ds.records.log(sdk_recs)
                rates[side] = args.n / (time.perf_counter() - t)
            rows.append((f"create {r + 1}", rates["greval"], rates["sdk"], rates["sdk-all"]))
        t = time.perf_counter()
        push(st, conn, spec.name, dataset=g_name, batch_size=args.batch_size)
        g = time.perf_counter() - t
        t = time.perf_counter()
        sdk_ds.records.log(sdk_recs)
        sdk_time = time.perf_counter() - t
        t = time.perf_counter()
        all_ds.records.log(sdk_recs)
        rows.append(("update", args.n / g, args.n / sdk_time, args.n / (time.perf_counter() - t)))
        n_g = len(list(conn.client.datasets(g_name, workspace=info.workspace).records))
        n_s = len(list(sdk_ds.records))
        assert n_g == n_s == args.n, (n_g, n_s)
        sconn.close()

        # An annotator answers every record (one bulk upsert with responses), then greval pulls them.
        client = conn.client
        user = rg.User(username="bench-annotator", password="bench-pass-123", role="annotator", client=client).create()
        client.workspaces(info.workspace).add_user(user)
        gh = ensure_dataset(conn, spec, g_name, info.workspace)
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
        pulled = pull(st, conn, spec.name, dataset=g_name)
        p = time.perf_counter() - t
        assert pulled.submitted == args.n and pulled.stored == args.n
        t = time.perf_counter()
        again = pull(st, conn, spec.name, dataset=g_name)
        p2 = time.perf_counter() - t
        assert again.changed == 0
        conn.close()

    print(
        f"{args.n} records with suggestions, batch size {args.batch_size} (greval) / SDK default; "
        f"{len(ds.METADATA)} metadata properties + {len(ds.EXTRA_METADATA)} extra metadata values per record"
    )
    print("  greval: greval's push to the embedded server (ingest patches on)")
    print("  SDK:    dataset.records.log of the same records to the stock server, same dataset settings")
    print(f"  SDK-all: the same, all {len(ds.METADATA) + len(ds.EXTRA_METADATA)} values declared as properties")
    print(f"{'phase':<8} {'greval rec/s':>12} {'SDK rec/s':>10} {'ratio':>6} {'SDK-all rec/s':>14} {'ratio':>6}")
    for phase, g_rate, s_rate, a_rate in rows:
        print(f"{phase:<8} {g_rate:>12.0f} {s_rate:>10.0f} {g_rate / s_rate:>6.2f}", end=" ")
        print(f"{a_rate:>14.0f} {g_rate / a_rate:>6.2f}")
    creates = [g / s for name, g, s, _ in rows if name.startswith("create")]
    median = statistics.median(creates)
    creates_all = [g / a for name, g, _, a in rows if name.startswith("create")]
    print(
        f"median ratio greval/SDK of the {len(creates)} paired create rounds: {median:.2f} (target >= 2: "
        f"{'met' if median >= 2 else 'NOT met'}); greval/SDK-all: {statistics.median(creates_all):.2f}; "
        f"machine load: {os.getloadavg()[0]:.1f}"
    )
    pull_rate = args.n / p
    print(
        f"pull     {pull_rate:>28.0f} rec/s ({args.n} submitted answers; target >= 500: "
        f"{'met' if pull_rate >= 500 else 'NOT met'}); re-pull {args.n / p2:.0f} rec/s"
    )


if __name__ == "__main__":
    main()
