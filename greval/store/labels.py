"""Human labels in the store: answers pulled from Argilla or imported, beside the verdicts they judge.

Keyed (spec name, dataset, record id, record hash, item id, annotator): ``dataset`` is the Argilla dataset an
answer came from (or ``import``), so two datasets of one spec (a blind copy, a copy with suggestions) never
overwrite each other.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterable
from typing import Any, TypedDict

from greval.store.connection import StoreFile


class HumanLabel(TypedDict):
    """One person's answer on one item of one record id."""

    dataset: str
    record_id: str
    record_hash: str
    item_id: str
    annotator: str
    label: str | None
    value: float | None
    comment: str | None
    status: str


class LabelSourceCount(TypedDict):
    """How many of a metric's answers came from one (dataset, source): submitted, and anything else."""

    dataset: str
    source: str
    submitted: int
    other: int


def _same(col: str) -> str:
    """SQL: the stored answer's ``col`` equals the incoming one, NULLs equal (SQLite's ``IS``, PostgreSQL's
    ``IS NOT DISTINCT FROM``, written so both read it)."""
    old, new = f"human_labels.{col}", f"excluded.{col}"
    return f"({old} = {new} OR ({old} IS NULL AND {new} IS NULL))"


_LABEL_COLS = ("dataset", "record_id", "record_hash", "item_id", "annotator", "label", "value", "comment", "status")


class HumanLabels(StoreFile):
    """The ``human_labels`` table."""

    def put_human_labels(self, rows: Iterable[dict[str, Any]]) -> int:
        """Upsert human answers (idempotent: a re-pull rewrites the same keys; a changed answer updates).

        Keyed (spec name, dataset, record id, record hash, item id, annotator): ``dataset`` is the Argilla
        dataset the answer came from (or ``import``), so two datasets of one spec never overwrite each other."""
        now = time.time()
        n = 0
        with self._tx() as db:
            for r in rows:
                db.execute(
                    "INSERT INTO human_labels (spec_name, dataset, record_id, record_hash, item_id, annotator,"
                    " spec_hash, label, value, comment, status, source, answered_at, updated_at)"
                    " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
                    " ON CONFLICT(spec_name, dataset, record_id, record_hash, item_id, annotator) DO UPDATE SET"
                    " label=excluded.label, value=excluded.value, comment=excluded.comment, status=excluded.status,"
                    " spec_hash=excluded.spec_hash, answered_at=excluded.answered_at,"
                    # An answer a pull finds unchanged keeps where it came from (an import sent to Argilla).
                    " source=CASE WHEN "
                    + _same("label")
                    + " AND "
                    + _same("value")
                    + " AND "
                    + _same("comment")
                    + " AND human_labels.status=excluded.status"
                    " THEN human_labels.source ELSE excluded.source END,"
                    " updated_at=excluded.updated_at",
                    (
                        r["spec_name"],
                        r.get("dataset", "import"),
                        r["record_id"],
                        r["record_hash"],
                        r.get("item_id", ""),
                        r["annotator"],
                        r.get("spec_hash"),
                        r.get("label"),
                        r.get("value"),
                        r.get("comment"),
                        r.get("status", "submitted"),
                        r.get("source", "import"),
                        r.get("answered_at"),
                        now,
                    ),
                )
                n += 1
        return n

    def human_labels(self, spec_name: str, *, dataset: str | None = None, submitted: bool = False) -> list[HumanLabel]:
        """A metric's answers (of one dataset; only submitted ones), in key order."""
        sql = f"SELECT {', '.join(_LABEL_COLS)} FROM human_labels WHERE spec_name=?"
        params: list[Any] = [spec_name]
        if dataset is not None:
            sql += " AND dataset=?"
            params.append(dataset)
        if submitted:
            sql += " AND status='submitted'"
        sql += " ORDER BY dataset, record_id, record_hash, item_id, annotator"
        return [
            HumanLabel(
                dataset=d, record_id=i, record_hash=h, item_id=it, annotator=a, label=lab, value=v, comment=c, status=st
            )
            for d, i, h, it, a, lab, v, c, st in self._rows(sql, params)
        ]

    def answer_times(self, spec_name: str) -> dict[tuple[str, str, str, str, str], float]:
        """When each submitted answer with a time was given (epoch seconds), keyed (dataset, record id, record
        hash, item id, annotator): a reviewer's labels per hour (greval.agreement.gold)."""
        rows = self._rows(
            "SELECT dataset, record_id, record_hash, item_id, annotator, answered_at FROM human_labels"
            " WHERE spec_name=? AND status='submitted' AND answered_at IS NOT NULL",
            (spec_name,),
        )
        return {(d, i, h, it, a): float(t) for d, i, h, it, a, t in rows}

    def submitted_label_count(self, spec_name: str) -> int:
        """How many submitted answers a metric has (every dataset)."""
        [(n,)] = self._rows("SELECT COUNT(*) FROM human_labels WHERE spec_name=? AND status='submitted'", (spec_name,))
        return int(n)

    def label_source_counts(self, spec_name: str) -> list[LabelSourceCount]:
        """A metric's answers counted by (dataset, source)."""
        rows = self._rows(
            "SELECT dataset, source, SUM(CASE WHEN status='submitted' THEN 1 ELSE 0 END),"
            " SUM(CASE WHEN status!='submitted' THEN 1 ELSE 0 END)"
            " FROM human_labels WHERE spec_name=? GROUP BY dataset, source ORDER BY dataset, source",
            (spec_name,),
        )
        return [LabelSourceCount(dataset=d, source=s, submitted=int(a), other=int(b)) for d, s, a, b in rows]

    def labelled_record_data(self, spec_name: str) -> dict[str, dict[str, Any]]:
        """Record hash -> the stored fields of every record a metric has human answers on."""
        rows = self._rows(
            "SELECT record_hash, data FROM records WHERE record_hash IN (SELECT DISTINCT record_hash FROM human_labels"
            " WHERE spec_name=?) ORDER BY record_hash",
            (spec_name,),
        )
        return {h: json.loads(d) for h, d in rows}
