"""A watch's share of verdicts for people: each window, once it has closed, sends a share of its judged units to
the review queue by the design ``greval review`` uses (:func:`greval.annotation.selection.review_round`: the
judge's most doubtful verdicts taken whole, a random control sample of the rest stratified by verdict), every unit
with its inclusion probability.

Each window is its own design over its own judged units (its strata are named by the window: ``2025-05-01T10:05:00Z
uncertain``, ``… control:Correct``), and the windows partition the stream, so the whole queue is one stratified
design: agreement weighted with these probabilities (``greval review status``, ``greval gate``, the watch's own
figures) stays unbiased over every judged unit. The selection is recorded in the store as a review push to the
watch's dataset (``SPEC-watch``) in the same transaction that marks the window routed (exactly once); units are
sent to Argilla when a connection is given, those not sent yet on every pass (so Argilla down delays, never loses).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field

from greval.annotation.selection import review_round
from greval.spec import BaseSpec, Spec
from greval.store.store import Store
from greval.store.watch import DONE
from greval.watch.windows import Scope, window_label

if TYPE_CHECKING:
    from greval.annotation.argilla import Connection

__all__ = ["Routing", "deliver", "designed", "route_window", "watch_dataset", "watch_push_id"]


class Routing(BaseModel):
    """How much of each window goes to people."""

    model_config = ConfigDict(frozen=True)

    share: float = Field(gt=0.0, le=1.0, description="Of each window's judged units, the share people label.")
    control_share: float = Field(0.2, ge=0.0, le=1.0, description="Of each window's batch, drawn at random.")
    seed: int = 0
    dataset: str | None = Field(None, description="The review's Argilla dataset (default: SPEC-watch).")
    workspace: str | None = None


def watch_dataset(spec_name: str, dataset: str | None) -> str:
    """The watch's review dataset: its own, apart from ``greval review``'s ``SPEC-review`` rounds."""
    return dataset or f"{spec_name}-watch"


def watch_push_id(watch_id: str, scope: Scope, dataset: str) -> str:
    """One push per watch, metric version, judge and dataset: every window's selection is added to it."""
    blob = f"watch|{watch_id}|{scope.spec_key}|{scope.judge_key}|{dataset}"
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def designed(units: int, share: float) -> int:
    """The units a window of ``units`` judged units sends to people: ``share`` of them, at least one."""
    return 0 if units == 0 else max(1, min(units, round(share * units)))


def route_window(store: Store, scope: Scope, spec: BaseSpec, start: float, routing: Routing) -> int | None:
    """Select the review units of a closed window's traces no batch has considered yet (its first batch, or its
    late arrivals: a batch of their own, its own design) and queue them; how many (None: not a judge metric, or
    another pass routed them first)."""
    if not isinstance(spec, Spec):
        return None
    from greval.annotation.dataset import argilla_id  # Argilla's client: imported when a window is routed
    from greval.annotation.push import unit_of

    rows = store.window_items(scope.watch_id, scope.metric, [start])
    batch = [r for r in rows if r["status"] in DONE and r["review_batch"] is None and r["record_hash"]]
    number = 1 + max((int(r["review_batch"]) for r in rows if r["review_batch"] is not None), default=0)
    cands = store.window_units(scope.spec_key, scope.judge_key, sorted({str(r["record_hash"]) for r in batch}))
    units = [unit_of(c) for c in cands]
    dataset = watch_dataset(spec.name, routing.dataset)
    push_id = watch_push_id(scope.watch_id, scope, dataset)
    before = store.push_params(push_id) or {}
    name = window_label(start) + ("" if number == 1 else f" late {number}")
    picks = review_round(units, {}, designed(len(units), routing.share), routing.control_share, routing.seed, number)
    ids = store.record_ids({p.unit.record_hash for p in picks})
    by_key = {(c.record_hash, c.item_id): c for c in cands}
    offset = int(before.get("selected", 0))
    chosen = [
        {
            "record_hash": p.unit.record_hash,
            "item_id": p.unit.item_id,
            "record_id": (ids.get(p.unit.record_hash) or [by_key[p.unit.key].record_id])[0],
            "argilla_id": argilla_id(spec.name, p.unit.record_hash, p.unit.item_id),
            "stratum": f"{name} {p.selection}",
            "probability": p.probability,
            "rank": offset + p.rank,
        }
        for p in picks
    ]
    params = {
        "round": int(before.get("round", 0)) + 1,
        "seed": routing.seed,
        "control_share": routing.control_share,
        "share": routing.share,
        "blind": False,
        "annotators_per_record": 1,
        "selected": offset + len(chosen),
        "watch": scope.watch_id,
    }
    push = {
        "push_id": push_id, "spec_name": spec.name, "spec_key": scope.spec_key, "spec_hash": spec.hash,
        "judge_key": scope.judge_key, "dataset": dataset, "workspace": routing.workspace, "strategy": "review",
        "params": params, "population": len(units),
    }  # fmt: skip
    window = (start, start + scope.seconds)
    queued = store.queue_review(
        scope.watch_id, scope.metric, window, (number, [r["trace_id"] for r in batch]), push, chosen
    )
    return len(chosen) if queued else None


def deliver(
    store: Store, conn: Connection, scope: Scope, spec: Spec, routing: Routing, judge_label: str, batch: int = 200
) -> int:
    """Send the queued units Argilla has not received yet (upserts: a unit sent twice is one record); how many."""
    from greval.annotation import dataset as ds
    from greval.annotation.argilla import bulk_upsert, ensure_dataset

    dataset = watch_dataset(spec.name, routing.dataset)
    push_id = watch_push_id(scope.watch_id, scope, dataset)
    sent = 0
    handle = None
    while units := store.unpushed_units(push_id, batch):
        handle = handle or ensure_dataset(conn, spec, dataset, routing.workspace)
        hashes = sorted({u["record_hash"] for u in units})
        verdicts = {(v.record_hash, v.item_id): v for v in store.window_units(scope.spec_key, scope.judge_key, hashes)}
        records = {r.hash: r for r in store.records(hashes)}
        ids = store.record_ids(hashes)
        items = [_payload(ds, spec, handle, u, verdicts, records, ids, judge_label) for u in units]
        bulk_upsert(conn, handle.id, [i for i in items if i is not None], sent, sent + len(units))
        sent += len(units)
        store.mark_pushed(
            push_id, [(u["record_hash"], u["item_id"]) for u in units], store.pushed_count(push_id) + len(units)
        )
    return sent


def _payload(
    ds: Any, spec: Spec, handle: Any, u: Mapping[str, Any], verdicts: Mapping[tuple[str, str], Any],
    records: Mapping[str, Any], ids: Mapping[str, Sequence[str]], judge_label: str,
) -> dict[str, Any] | None:  # fmt: skip
    v = verdicts.get((u["record_hash"], u["item_id"]))
    rec = records.get(u["record_hash"])
    if v is None or rec is None:
        return None
    ref = ds.VerdictRef(
        record=rec, item_id=v.item_id, label=v.label, value=v.value, confidence=v.best_confidence, reason=v.reason,
        judge=judge_label, judge_model=judge_label.split(":", 1)[-1], selection=u["stratum"],
        probability=u["probability"], record_ids=tuple(ids.get(u["record_hash"]) or [v.record_id]),
    )  # fmt: skip
    payload: dict[str, Any] = ds.record_payload(spec, ref, handle, blind=False)
    return payload
