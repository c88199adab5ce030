"""Pull human answers from Argilla into the store's ``human_labels``.

Answers are keyed (spec name, dataset, record id, record hash, item id, annotator): ``dataset`` is the
Argilla dataset an answer came from (``import`` for labels imported without Argilla), and an answer on a
record shared by several ids is stored once per id. Two datasets of one spec (a blind copy beside the one
with suggestions) therefore never overwrite each other.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from greval.annotation import dataset as ds
from greval.annotation.argilla import Connection, ensure_dataset, iter_records, usernames
from greval.spec import CategoricalScale
from greval.store.store import Store


@dataclass
class PullResult:
    dataset: str
    records: int
    submitted: int
    discarded: int
    drafts: int
    pending: int
    stored: int
    changed: int  # answers new or different since the last pull of this dataset (counted once per answer)
    by_annotator: dict[str, int] = field(default_factory=dict)
    unknown: int = 0
    answers: int = 0  # responses read; ``stored`` counts rows, one per record id an answer stands for


def _epoch(ts: str | None) -> float | None:
    if not ts:
        return None
    dt = datetime.fromisoformat(ts)
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _meta_ids(value: Any) -> list[str]:
    """The record ids in a record's ``record_id`` metadata (one id, or a list of them)."""
    if isinstance(value, list):
        return [str(v) for v in value if str(v)]
    return [str(value)] if value is not None and str(value) else []


def pull(
    store: Store,
    conn: Connection,
    spec_name: str,
    *,
    dataset: str | None = None,
    workspace: str | None = None,
) -> PullResult:
    """Fetch every annotator's answers into ``human_labels`` (submitted, discarded and draft, with status).

    Rows are keyed by this dataset's name, and written once per record id that has the answered content
    (every id the store knows for it; else the ids the record itself names). What other datasets of the
    spec hold is neither compared with nor touched."""
    _, spec = store.reader_spec(spec_name)
    name = dataset or spec.name
    handle = ensure_dataset(conn, spec, name, workspace, create=False)
    users = usernames(conn)
    known = {r["argilla_id"]: (r["record_hash"], r["item_id"], r["record_id"]) for r in store.selected_units(spec.name)}
    before = {
        (r["record_id"], r["record_hash"], r["item_id"], r["annotator"]): (
            r["label"],
            r["value"],
            r["comment"],
            r["status"],
        )
        for r in store.human_labels(spec.name, dataset=name)
    }
    categorical = isinstance(spec.scale, CategoricalScale)
    answers: list[tuple[tuple[str, str, list[str]], dict[str, Any]]] = []
    counts: Counter[str] = Counter()
    per_user: Counter[str] = Counter()
    n_records = pending = unknown = 0
    for rec in iter_records(conn, handle.id, "responses"):
        n_records += 1
        meta = rec.get("metadata") or {}
        unit: tuple[str, str, list[str]]
        if "record_hash" in meta:
            item = str(meta.get("item_id", "-"))
            unit = (str(meta["record_hash"]), "" if item == "-" else item, _meta_ids(meta.get("record_id")))
        elif rec.get("external_id") in known:
            h, i, rid = known[rec["external_id"]]
            unit = (h, i, _meta_ids(meta.get("record_id")) or [rid])
        else:
            unknown += 1
            continue
        responses = rec.get("responses") or []
        if not any(r["status"] == "submitted" for r in responses):
            pending += 1
        for r in responses:
            status = str(r["status"])
            counts[status] += 1
            values = r.get("values") or {}
            answer = (values.get(ds.QUESTION) or {}).get("value")
            comment = (values.get(ds.COMMENT) or {}).get("value")
            annotator = users.get(str(r["user_id"]), str(r["user_id"]))
            if status == "submitted":
                per_user[annotator] += 1
            answers.append(
                (
                    unit,
                    {
                        "spec_name": spec.name,
                        "dataset": name,
                        "record_hash": unit[0],
                        "item_id": unit[1],
                        "annotator": annotator,
                        "spec_hash": meta.get("spec_hash", spec.hash),
                        "label": str(answer) if categorical and answer is not None else None,
                        "value": float(answer) if not categorical and answer is not None else None,
                        "comment": comment or None,
                        "status": status,
                        "source": "argilla",
                        "answered_at": _epoch(r.get("updated_at")),
                    },
                )
            )
    store_ids = store.record_ids({u[0] for u, _ in answers})
    rows: list[dict[str, Any]] = []
    changed = 0
    for (rhash, item_id, meta_ids), answer_row in answers:
        ids = list(dict.fromkeys(store_ids.get(rhash) or meta_ids or [rhash[:16]]))
        mine = [{**answer_row, "record_id": rid} for rid in ids]
        rows += mine
        # An answer is new when no row of it was stored before, changed when a stored row differs now (counted
        # once, however many ids it has; a row added for another id of the same content is neither): a pull
        # after 5 first answers said "0 changed".
        now = (answer_row["label"], answer_row["value"], answer_row["comment"], answer_row["status"])
        had = [before[k] for r in mine if (k := (r["record_id"], rhash, item_id, r["annotator"])) in before]
        if not had or any(old != now for old in had):
            changed += 1
    stored = store.put_human_labels(rows)
    return PullResult(
        dataset=name,
        records=n_records,
        submitted=counts["submitted"],
        discarded=counts["discarded"],
        drafts=counts["draft"],
        pending=pending,
        stored=stored,
        changed=changed,
        by_annotator=dict(per_user),
        unknown=unknown,
        answers=len(answers),
    )
