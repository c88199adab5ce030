"""Pull human answers from Argilla into the store's ``human_labels``.

Answers are keyed (spec name, dataset, record id, record hash, item id, annotator): ``dataset`` is the
Argilla dataset an answer came from (``import`` for labels imported without Argilla), and an answer on a
record shared by several ids is stored once per id. Two datasets of one spec (a blind copy beside the one
with suggestions) therefore never overwrite each other.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from greval.annotation import dataset as ds
from greval.annotation.argilla import Connection, ensure_dataset, iter_records, usernames
from greval.spec import CategoricalScale, Spec
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
    unnamed: dict[str, int] = field(default_factory=dict)  # Argilla user id -> answers skipped (no username)


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


_Unit = tuple[str, str, list[str]]
"""(record hash, item id, the record ids the Argilla record names) of one labelled unit."""


def _unit_of(rec: Mapping[str, Any], known: Mapping[str, tuple[str, str, str]]) -> _Unit | None:
    """The unit an Argilla record labels: from its metadata, else from the push that made it (``known``);
    None for a record greval did not push."""
    meta = rec.get("metadata") or {}
    if "record_hash" in meta:
        item = str(meta.get("item_id", "-"))
        return (str(meta["record_hash"]), "" if item == "-" else item, _meta_ids(meta.get("record_id")))
    if rec.get("external_id") in known:
        h, i, rid = known[rec["external_id"]]
        return (h, i, _meta_ids(meta.get("record_id")) or [rid])
    return None


@dataclass
class _Reading:
    """The answers read so far, and what the pull counts while reading them."""

    answers: list[tuple[_Unit, dict[str, Any]]] = field(default_factory=list)
    counts: Counter[str] = field(default_factory=Counter)  # responses by status
    per_user: Counter[str] = field(default_factory=Counter)  # submitted responses by annotator
    records: int = 0
    pending: int = 0
    unknown: int = 0
    unnamed: Counter[str] = field(default_factory=Counter)  # answers of users the key cannot name, by user id


def _read_record(
    reading: _Reading, rec: Mapping[str, Any], unit: _Unit, spec: Spec, dataset: str, users: Mapping[str, str]
) -> None:
    """One Argilla record's responses as ``human_labels`` rows (without their record id), counted."""
    meta = rec.get("metadata") or {}
    categorical = isinstance(spec.scale, CategoricalScale)
    responses = rec.get("responses") or []
    if not any(r["status"] == "submitted" for r in responses):
        reading.pending += 1
    for r in responses:
        status = str(r["status"])
        reading.counts[status] += 1
        annotator = users.get(str(r["user_id"]))
        if annotator is None:
            # Stored under its id, the answer would become a second reviewer once an owner's key names the
            # user: skipped and counted instead (the CLI names the user and the count).
            reading.unnamed[str(r["user_id"])] += 1
            continue
        values = r.get("values") or {}
        answer = (values.get(ds.QUESTION) or {}).get("value")
        comment = (values.get(ds.COMMENT) or {}).get("value")
        if status == "submitted":
            reading.per_user[annotator] += 1
        row = {
            "spec_name": spec.name,
            "dataset": dataset,
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
        }
        reading.answers.append((unit, row))


def _rows_per_id(
    answers: list[tuple[_Unit, dict[str, Any]]],
    store_ids: Mapping[str, list[str]],
    before: Mapping[tuple[str, str, str, str], tuple[Any, ...]],
) -> tuple[list[dict[str, Any]], int]:
    """Each answer's row once per record id that has its content, and how many answers are new or changed."""
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
    return rows, changed


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
    reading = _Reading()
    for rec in iter_records(conn, handle.id, "responses"):
        reading.records += 1
        unit = _unit_of(rec, known)
        if unit is None:
            reading.unknown += 1
            continue
        _read_record(reading, rec, unit, spec, name, users)
    store_ids = store.record_ids({u[0] for u, _ in reading.answers})
    rows, changed = _rows_per_id(reading.answers, store_ids, before)
    stored = store.put_human_labels(rows)
    counts = reading.counts
    return PullResult(
        dataset=name,
        records=reading.records,
        submitted=counts["submitted"],
        discarded=counts["discarded"],
        drafts=counts["draft"],
        pending=reading.pending,
        stored=stored,
        changed=changed,
        by_annotator=dict(reading.per_user),
        unknown=reading.unknown,
        answers=len(reading.answers),
        unnamed=dict(reading.unnamed),
    )
