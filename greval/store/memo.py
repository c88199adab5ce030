"""What a no-op re-run need not work out again, kept in a SQLite store and never trusted past a change.

A re-run of a finished job on an unchanged dataset asks the store what is left to judge for every record, and
tallies every verdict of its records for its summary: both grow with the store (of a 1M-record no-op re-run,
~10 s of planning and ~20 s of tallying; scripts/bench_million.py). Two memos let it skip them:

* ``settled``: a plan chunk (its distinct contents, by digest) that had nothing left to judge for a (spec
  version, judge). Only a *lost* verdict makes a judged record pending again (a verdict or judgement deleted,
  a verdict rewritten to a status that is not final, a successful judgement rewritten as failed): a new verdict
  never does. A marker is valid while the pair has lost nothing since it was written.
* ``figures``: a run's figures for one (snapshot, spec version, judge), valid while nothing about that pair's
  verdicts, judgements or experiment marks has been written since.

Validity is read from two counters per (spec key, judge key) that SQLite triggers move (greval.store.schema's
``MEMO_DDL``) in the transaction of the write itself, so no path — this greval's code, an older greval's, SQL typed
by hand — changes a verdict without moving them. A memo is stored with the counter read *before* its computation
began, and only if that counter has not moved when it is written (checked inside the writing transaction): a write
that raced the computation leaves no memo rather than a stale one. The memos are a cache of the one definition: a
test compares each with its computation afresh.

A PostgreSQL store keeps none: a counter row that every writer updates would serialise concurrent runs on its
lock until they commit (and rows locked in different orders could deadlock them). Its re-runs plan and tally
in full, as before.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Literal, NamedTuple

from greval.store.connection import StoreFile

if TYPE_CHECKING:
    from greval.store.backend import DB

__all__ = ["Generation", "MemoKind", "Memos", "digest"]

#: A memo's kind, and the counter that says whether it still holds.
MemoKind = Literal["settled", "figures"]
_COUNTER: dict[MemoKind, str] = {"settled": "losses", "figures": "writes"}


class Generation(NamedTuple):
    """A (spec key, judge key)'s counters: its writes, and the writes that lost a verdict."""

    writes: int
    losses: int


def digest(parts: Iterable[str]) -> str:
    """A memo key made of many strings (e.g. a chunk's content hashes, in order)."""
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\n")
    return h.hexdigest()[:32]


class Memos(StoreFile):
    """Reads and writes of the memos (see the module doc)."""

    def generation(self, spec_key: str, judge_key: str) -> Generation | None:
        """The pair's counters now (None: this store keeps no memo)."""
        if self.dialect != "sqlite":
            return None
        rows = self._rows(
            "SELECT writes, losses FROM memo_generations WHERE spec_key=? AND judge_key=?", (spec_key, judge_key)
        )
        return Generation(*rows[0]) if rows else Generation(0, 0)

    def recall(
        self, spec_key: str, judge_key: str, kind: MemoKind, keys: Sequence[str], seen: Generation
    ) -> dict[str, str | None]:
        """The memos of these keys that still hold at ``seen`` (the pair's counters, read now)."""
        if self.dialect != "sqlite" or not keys:
            return {}
        marks = ",".join("?" * len(keys))
        rows = self._rows(
            "SELECT key, value FROM memo WHERE spec_key=? AND judge_key=? AND kind=? AND generation=?"
            f" AND key IN ({marks})",
            (spec_key, judge_key, kind, getattr(seen, _COUNTER[kind]), *keys),
        )
        return {k: v for k, v in rows}

    def remember(
        self, spec_key: str, judge_key: str, kind: MemoKind, entries: Mapping[str, str | None], before: Generation
    ) -> bool:
        """Store memos computed from what the store held at ``before`` (the pair's counters read before the
        computation began): only if the counter of this kind has not moved since (False: it has; nothing is
        stored). The kind's memos of older generations, which can never hold again, are dropped."""
        if self.dialect != "sqlite" or not entries:
            return False
        counter = _COUNTER[kind]
        at = getattr(before, counter)

        def write(db: DB) -> bool:
            row = db.execute(
                f"SELECT {counter} FROM memo_generations WHERE spec_key=? AND judge_key=?", (spec_key, judge_key)
            ).fetchone()
            if (row[0] if row else 0) != at:
                return False
            db.execute(
                "DELETE FROM memo WHERE spec_key=? AND judge_key=? AND kind=? AND generation<>?",
                (spec_key, judge_key, kind, at),
            )
            db.executemany(
                "INSERT INTO memo (spec_key, judge_key, kind, key, generation, value) VALUES (?,?,?,?,?,?)"
                " ON CONFLICT (spec_key, judge_key, kind, key) DO UPDATE SET generation=excluded.generation,"
                " value=excluded.value",
                [(spec_key, judge_key, kind, k, at, v) for k, v in entries.items()],
            )
            return True

        return self._write(write)
