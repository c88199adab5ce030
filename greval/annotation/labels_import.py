"""Import existing human labels from a table file into ``human_labels`` (checked against the spec's scale
and the stored records), optionally also into Argilla as submitted answers of the named annotators.
"""

from __future__ import annotations

import json
import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greval.annotation import dataset as ds
from greval.annotation.argilla import DEFAULT_BATCH, Connection, batches, bulk_upsert, ensure_dataset, ensure_user
from greval.annotation.errors import AnnotationError
from greval.dataset.limits import ReadLimits
from greval.dataset.records import Record
from greval.dataset.tables import read_rows
from greval.errors import option
from greval.spec import CategoricalScale, Spec
from greval.store.store import Store


@dataclass
class ImportResult:
    rows: int
    stored: int
    annotators: dict[str, int]
    to_argilla: int = 0
    dataset: str = "import"  # the human-label dataset the rows are stored under


def _few(values: Iterable[Any], k: int = 5) -> str:
    vals = list(dict.fromkeys(str(v) for v in values))
    return ", ".join(vals[:k]) + (f" … ({len(vals)} in all)" if len(vals) > k else "")


def _cell(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text or None


def _resolve_records(store: Store, spec_key: str, ids: set[str]) -> dict[str, Record]:
    """Record id -> the stored record version that has verdicts of this spec (else the newest version).

    Every (id, content) pair the store has seen counts (``record_ids``): an id whose content another id
    shares resolves to itself, and an edited record has one version per content."""
    judged = store.judged_hashes(spec_key)
    out: dict[str, Record] = {}
    for rec in store.records_with_ids(ids):
        prev = out.get(rec.id)
        if prev is None or prev.hash not in judged or rec.hash in judged:
            out[rec.id] = rec
    return out


def import_labels(
    store: Store,
    path: Path,
    spec_name: str,
    *,
    record_id_col: str,
    label_col: str,
    item_id_col: str | None = None,
    annotator_col: str | None = None,
    annotator_name: str | None = None,
    comment_col: str | None = None,
    conn: Connection | None = None,
    dataset: str | None = None,
    workspace: str | None = None,
    limits: ReadLimits | None = None,
) -> ImportResult:
    """Load human labels from a file into ``human_labels`` (source "import"), optionally into Argilla as
    submitted responses of the named annotator users (created when missing).

    Each row is stored for the record id it names. Its dataset is ``import``, or the Argilla dataset the
    answers also go to (``conn`` given), so a later pull of that dataset updates these rows."""
    if (annotator_col is None) == (annotator_name is None):
        raise AnnotationError(f"give exactly one of {option('annotator_col')} COL or {option('annotator_name')} NAME")
    version, spec = store.reader_spec(spec_name)
    spec_key = version.spec_key
    rows = read_rows(path, limits)
    if not rows:
        raise AnnotationError(f"{path}: no rows")
    cols = list(rows[0])
    for name, col in (
        ("record_id_col", record_id_col),
        ("label_col", label_col),
        ("item_id_col", item_id_col),
        ("annotator_col", annotator_col),
        ("comment_col", comment_col),
    ):
        if col is not None and col not in cols:
            raise AnnotationError(f"{option(name)} {col!r}: no such column in {path.name} (has: {_few(cols, 12)})")
    if spec.each and item_id_col is None:
        raise AnnotationError(f"spec {spec.name!r} labels each of the {spec.each}: give {option('item_id_col')} COL")
    label_dataset = (dataset or spec.name) if conn is not None else "import"
    ids = {v for r in rows if (v := _cell(r[record_id_col])) is not None}
    recs = _resolve_records(store, spec_key, ids)
    missing_ids = [i for i in (_cell(r[record_id_col]) for r in rows) if i is None or i not in recs]
    if missing_ids:
        raise AnnotationError(
            f"{len(missing_ids)} row(s) name records not in {store.name}: {_few(str(i) for i in missing_ids)}"
        )
    scale = spec.scale
    categorical = isinstance(scale, CategoricalScale)
    allowed_labels = scale.names if isinstance(scale, CategoricalScale) else []
    lo_hi = (scale.min, scale.max) if not isinstance(scale, CategoricalScale) else (0, 0)
    out: list[dict[str, Any]] = []
    bad_labels: list[str] = []
    bad_items: list[str] = []
    for r in rows:
        rec = recs[str(_cell(r[record_id_col]))]
        item_id = ""
        if spec.each and item_id_col:
            item_id = _cell(r[item_id_col]) or ""
            if item_id not in {str(it.get("id")) for it in rec.items(spec.each)}:
                bad_items.append(f"{rec.id}/{item_id or '?'}")
                continue
        raw = _cell(r[label_col])
        label: str | None = None
        value: float | None = None
        if categorical:
            if raw is None or raw not in allowed_labels:
                bad_labels.append(str(raw))
                continue
            label = raw
        else:
            try:
                num = float(raw) if raw is not None else math.nan
            except ValueError:
                num = math.nan
            lo, hi = lo_hi
            if math.isnan(num) or num != int(num) or not lo <= num <= hi:
                bad_labels.append(str(raw))
                continue
            value = float(int(num))
        annotator = annotator_name if annotator_name is not None else _cell(r[str(annotator_col)])
        if not annotator:
            raise AnnotationError(f"record {rec.id}: empty annotator in column {annotator_col!r}")
        out.append(
            {
                "spec_name": spec.name,
                "dataset": label_dataset,
                "record_hash": rec.hash,
                "item_id": item_id,
                "annotator": annotator,
                "record_id": rec.id,
                "spec_hash": spec.hash,
                "label": label,
                "value": value,
                "comment": _cell(r[comment_col]) if comment_col else None,
                "status": "submitted",
                "source": "import",
                "answered_at": None,
            }
        )
    if bad_items:
        raise AnnotationError(
            f"{len(bad_items)} row(s) name {spec.each} that their record does not have: {_few(bad_items)}"
        )
    if bad_labels:
        allowed = ", ".join(allowed_labels) if categorical else f"integers {lo_hi[0]}-{lo_hi[1]}"
        raise AnnotationError(
            f"{len(bad_labels)} label(s) not on the scale of {spec.name!r} ({allowed}): {_few(bad_labels)}"
        )
    stored = store.put_human_labels(out)
    result = ImportResult(
        rows=len(rows), stored=stored, annotators=dict(Counter(r["annotator"] for r in out)), dataset=label_dataset
    )
    if conn is not None:
        result.to_argilla = _import_to_argilla(store, conn, spec_key, spec, out, recs, label_dataset, workspace)
    return result


def _import_to_argilla(
    store: Store,
    conn: Connection,
    spec_key: str,
    spec: Spec,
    rows: Sequence[dict[str, Any]],
    recs: Mapping[str, Record],
    dataset: str,
    workspace: str | None,
) -> int:
    """Upsert the labelled units with their judge verdict (when any) and the imported answers.

    A unit is one Argilla record for every id with its content (as a push makes it), holding one answer
    per annotator: when a file gives one person two answers for ids sharing a content, the last row wins
    in Argilla (the store keeps both)."""
    handle = ensure_dataset(conn, spec, dataset, workspace)
    verdicts: Mapping[tuple[str, str], Mapping[str, Any]] = store.latest_unit_verdicts(spec_key)
    user_ids = {a: ensure_user(conn, a, handle.workspace) for a in sorted({r["annotator"] for r in rows})}
    by_unit: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_unit[(r["record_hash"], r["item_id"])].append(r)
    by_hash = {rec.hash: rec for rec in recs.values()}
    all_ids = store.record_ids(by_hash)
    items = []
    for (rhash, item_id), rows_of_unit in by_unit.items():
        answers = list({a["annotator"]: a for a in rows_of_unit}.values())
        v = verdicts.get((rhash, item_id), {})
        ident = json.loads(v.get("identity") or "{}")
        ref = ds.VerdictRef(
            record=by_hash[rhash],
            item_id=item_id,
            label=v.get("label"),
            value=v.get("value"),
            confidence=v.get("confidence"),
            reason=v.get("reason"),
            judge=v.get("judge") or "-",
            judge_model=str(ident.get("model", "-")),
            selection="import",
            record_ids=tuple(all_ids.get(rhash) or [by_hash[rhash].id]),
        )
        responses = []
        for a in answers:
            answer: str | int = a["label"] if a["label"] is not None else int(a["value"])
            values: dict[str, Any] = {ds.QUESTION: {"value": answer}}
            if a["comment"] and handle.comment_id:
                values[ds.COMMENT] = {"value": a["comment"]}
            responses.append({"values": values, "status": "submitted", "user_id": user_ids[a["annotator"]]})
        items.append(ds.record_payload(spec, ref, handle, blind=False, responses=responses))
    done = 0
    for batch in batches(items, DEFAULT_BATCH):
        bulk_upsert(conn, handle.id, batch, done, len(items))
        done += len(batch)
    return done
