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

from greval.agreement.models import AgreementScale
from greval.agreement.prepare.answers import in_bounds, label_text, value_of
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


@dataclass(frozen=True)
class LabelColumns:
    """Which columns of a label file hold what: the record id and the label always; the item id (for a spec
    that labels each item), the annotator (else every row is one named person's) and a comment when given."""

    record_id: str
    label: str
    item_id: str | None = None
    annotator: str | None = None
    comment: str | None = None

    def named(self) -> list[tuple[str, str | None]]:
        """(option field, column) of each: what a message about a column names."""
        return [
            ("record_id_col", self.record_id),
            ("label_col", self.label),
            ("item_id_col", self.item_id),
            ("annotator_col", self.annotator),
            ("comment_col", self.comment),
        ]


def _check_columns(path: Path, rows: list[dict[str, Any]], columns: LabelColumns, spec: Spec) -> None:
    """Every column given is in the file, and a spec that labels each item has its item column."""
    cols = list(rows[0])
    for name, col in columns.named():
        if col is not None and col not in cols:
            raise AnnotationError(f"{option(name)} {col!r}: no such column in {path.name} (has: {_few(cols, 12)})")
    if spec.each and columns.item_id is None:
        raise AnnotationError(f"spec {spec.name!r} labels each of the {spec.each}: give {option('item_id_col')} COL")


def _records_of(store: Store, spec_key: str, rows: list[dict[str, Any]], column: str) -> dict[str, Record]:
    """The stored record each row names (record id -> record); a row naming none is an error."""
    recs = _resolve_records(store, spec_key, {v for r in rows if (v := _cell(r[column])) is not None})
    missing_ids = [i for i in (_cell(r[column]) for r in rows) if i is None or i not in recs]
    if missing_ids:
        raise AnnotationError(
            f"{len(missing_ids)} row(s) name records not in {store.name}: {_few(str(i) for i in missing_ids)}"
        )
    return recs


def _answer(cell: Any, spec: Spec) -> tuple[str | None, float | None] | None:
    """A label cell on the spec's scale: (label, None) on a categorical one, (None, value) on a value one (a
    whole number in min..max, as Argilla's rating question takes it); None when it is not on the scale. Read
    as the agreement stage reads an answer (``agreement.prepare.answers``): 2, 2.0 and "2" are one label."""
    text = label_text(cell, {})
    scale = spec.scale
    if isinstance(scale, CategoricalScale):
        return (text, None) if text is not None and text in scale.names else None
    values = AgreementScale(kind="value", min=scale.min, max=scale.max)
    value = value_of(text, values)
    if value is None or not value.is_integer() or not in_bounds(value, values):
        return None
    return None, value


def _scale_words(spec: Spec) -> str:
    scale = spec.scale
    return ", ".join(scale.names) if isinstance(scale, CategoricalScale) else f"integers {scale.min}-{scale.max}"


@dataclass(frozen=True)
class _Reading:
    """How the rows become human labels: the spec, the records they name, who answered, the dataset."""

    spec: Spec
    columns: LabelColumns
    recs: Mapping[str, Record]
    annotator_name: str | None
    dataset: str


def _read_labels(rows: list[dict[str, Any]], how: _Reading) -> list[dict[str, Any]]:
    """The rows as ``human_labels`` rows; an item its record lacks or a label off the scale is an error
    naming them all."""
    spec, columns = how.spec, how.columns
    out: list[dict[str, Any]] = []
    bad_labels: list[str] = []
    bad_items: list[str] = []
    for r in rows:
        rec = how.recs[str(_cell(r[columns.record_id]))]
        item_id = ""
        if spec.each and columns.item_id:
            item_id = _cell(r[columns.item_id]) or ""
            if item_id not in {str(it.get("id")) for it in rec.items(spec.each)}:
                bad_items.append(f"{rec.id}/{item_id or '?'}")
                continue
        answer = _answer(r[columns.label], spec)
        if answer is None:
            bad_labels.append(str(_cell(r[columns.label])))
            continue
        annotator = how.annotator_name if how.annotator_name is not None else _cell(r[str(columns.annotator)])
        if not annotator:
            raise AnnotationError(f"record {rec.id}: empty annotator in column {columns.annotator!r}")
        out.append(
            {
                "spec_name": spec.name,
                "dataset": how.dataset,
                "record_hash": rec.hash,
                "item_id": item_id,
                "annotator": annotator,
                "record_id": rec.id,
                "spec_hash": spec.hash,
                "label": answer[0],
                "value": answer[1],
                "comment": _cell(r[columns.comment]) if columns.comment else None,
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
        raise AnnotationError(
            f"{len(bad_labels)} label(s) not on the scale of {spec.name!r} ({_scale_words(spec)}): {_few(bad_labels)}"
        )
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
    columns = LabelColumns(record_id_col, label_col, item_id_col, annotator_col, comment_col)
    version, spec = store.reader_spec(spec_name)
    rows = read_rows(path, limits)
    if not rows:
        raise AnnotationError(f"{path}: no rows")
    _check_columns(path, rows, columns, spec)
    label_dataset = (dataset or spec.name) if conn is not None else "import"
    recs = _records_of(store, version.spec_key, rows, columns.record_id)
    out = _read_labels(rows, _Reading(spec, columns, recs, annotator_name, label_dataset))
    stored = store.put_human_labels(out)
    result = ImportResult(
        rows=len(rows), stored=stored, annotators=dict(Counter(r["annotator"] for r in out)), dataset=label_dataset
    )
    if conn is not None:
        result.to_argilla = _import_to_argilla(store, conn, version.spec_key, spec, out, recs, label_dataset, workspace)
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
