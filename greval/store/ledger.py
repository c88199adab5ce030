"""The ledger of spent labels: each align decision taken on a test part, numbered per metric, and how it used
each human label — its test part, which search fold, a few-shot example of its winner. ``greval align`` reads it
to draw a new test part from labels no earlier decision read and that no version in use shows as an example,
and to count the decisions taken on one metric's labels (the family-wise chance of a false adoption)."""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from greval.store.connection import StoreFile

if TYPE_CHECKING:
    from greval.store.backend import DB

Use = Literal["test", "search", "example"]


class LabelUse(BaseModel):
    """How one decision used one labelled unit (``spec_key``: the version judged on it; for an example, the
    version that shows it)."""

    record_id: str
    record_hash: str
    item_id: str = ""
    use: Use
    fold: int | None = None
    spec_key: str


class DecisionRow(BaseModel):
    """One align decision taken on a test part."""

    spec_name: str
    number: int = Field(0, description="Its number among the metric's decisions (1, 2, …); set when recorded.")
    decision_id: str
    at: float = 0.0
    from_key: str
    to_key: str | None = None
    adopted: bool
    objective: str
    gain: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    seed: int
    reuse_test: bool = False
    evidence: dict[str, Any] = Field(default_factory=dict)


_COLUMNS = (
    "spec_name, number, decision_id, at, from_key, to_key, adopted, objective, gain, ci_low, ci_high, seed, "
    "reuse_test, evidence"
)


def _row(r: Sequence[Any]) -> DecisionRow:
    return DecisionRow(
        spec_name=r[0],
        number=int(r[1]),
        decision_id=r[2],
        at=float(r[3]),
        from_key=r[4],
        to_key=r[5],
        adopted=bool(r[6]),
        objective=r[7],
        gain=r[8],
        ci_low=r[9],
        ci_high=r[10],
        seed=int(r[11]),
        reuse_test=bool(r[12]),
        evidence=json.loads(r[13]),
    )


class Ledger(StoreFile):
    """Reads and writes of the ledger (see the module doc)."""

    def decisions(self, spec_name: str) -> list[DecisionRow]:
        """The metric's decisions, in their order."""
        rows = self._rows(f"SELECT {_COLUMNS} FROM decisions WHERE spec_name=? ORDER BY number", (spec_name,))
        return [_row(r) for r in rows]

    def decision(self, decision_id: str) -> DecisionRow | None:
        rows = self._rows(f"SELECT {_COLUMNS} FROM decisions WHERE decision_id=?", (decision_id,))
        return _row(rows[0]) if rows else None

    def decision_count(self, spec_name: str) -> int:
        return int(self._rows("SELECT COUNT(*) FROM decisions WHERE spec_name=?", (spec_name,))[0][0])

    def label_uses(self, decision_id: str) -> list[LabelUse]:
        rows = self._rows(
            "SELECT record_id, record_hash, item_id, use, fold, spec_key FROM label_uses WHERE decision_id=?"
            " ORDER BY use, record_id, item_id",
            (decision_id,),
        )
        return [
            LabelUse(record_id=a, record_hash=b, item_id=c, use=d, fold=None if e is None else int(e), spec_key=f)
            for a, b, c, d, e, f in rows
        ]

    def tested_hashes(self, spec_name: str) -> set[str]:
        """The record contents any decision on this metric read as its test part."""
        rows = self._rows("SELECT DISTINCT record_hash FROM label_uses WHERE spec_name=? AND use='test'", (spec_name,))
        return {str(h) for (h,) in rows}

    def example_hashes(self, spec_name: str, spec_hashes: Sequence[str]) -> set[str]:
        """The record contents a decision made few-shot examples of these versions (by spec hash: the same
        version under another key, judged with other dependencies, shows the same examples)."""
        if not spec_hashes:
            return set()
        marks = ",".join("?" * len(spec_hashes))
        rows = self._rows(
            "SELECT DISTINCT u.record_hash FROM label_uses u JOIN specs s ON s.spec_key = u.spec_key"
            f" WHERE u.spec_name=? AND u.use='example' AND s.spec_hash IN ({marks})",
            (spec_name, *spec_hashes),
        )
        return {str(h) for (h,) in rows}

    def record_decision(self, decision: DecisionRow, uses: Sequence[LabelUse]) -> DecisionRow:
        """Record a decision and its label uses in one transaction, numbered after the metric's last; a
        decision already recorded (the same id: a repeated run) is returned as it was, not counted again."""
        now = time.time()

        def write(db: DB) -> DecisionRow:
            if self.dialect == "postgresql":  # numbered after the last: two aligns of a metric take turns
                db.execute("SELECT pg_advisory_xact_lock(hashtext(?))", (f"greval decision {decision.spec_name}",))
            found = db.execute(f"SELECT {_COLUMNS} FROM decisions WHERE decision_id=?", (decision.decision_id,))
            row = found.fetchone()
            if row is not None:
                return _row(row)
            last = db.execute("SELECT MAX(number) FROM decisions WHERE spec_name=?", (decision.spec_name,))
            number = int(last.fetchone()[0] or 0) + 1
            d = decision.model_copy(update={"number": number, "at": now})
            db.execute(
                f"INSERT INTO decisions ({_COLUMNS}) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                (
                    d.spec_name,
                    d.number,
                    d.decision_id,
                    d.at,
                    d.from_key,
                    d.to_key,
                    int(d.adopted),
                    d.objective,
                    d.gain,
                    d.ci_low,
                    d.ci_high,
                    d.seed,
                    int(d.reuse_test),
                    json.dumps(d.evidence, sort_keys=True),
                ),
            )
            db.executemany(
                "INSERT INTO label_uses (spec_name, record_id, record_hash, item_id, decision_id, use, fold, spec_key,"
                " at) VALUES (?,?,?,?,?,?,?,?,?) ON CONFLICT DO NOTHING",
                [
                    (d.spec_name, u.record_id, u.record_hash, u.item_id, d.decision_id, u.use, u.fold, u.spec_key, now)
                    for u in uses
                ],
            )
            return d

        return self._write(write)


__all__ = ["DecisionRow", "LabelUse", "Ledger", "Use"]
