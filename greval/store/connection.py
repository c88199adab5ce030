"""One connection to a store file: opening (and migrating) it, transactions, and chunked lookups.

The store's parts (:mod:`~greval.store.labels`, :mod:`~greval.store.annotation`, :mod:`~greval.store.lookups`
and :class:`~greval.store.store.Store` itself) are methods on top of this.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from greval.errors import UserError
from greval.store import schema


class StoreFile:
    """A greval store file. Safe to open from several processes (SQLite WAL); one connection per object."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        if self.path.parent and not self.path.parent.exists():
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            # The async runner works in greval's background loop thread (see greval._sync); access is
            # serialised by self._lock, so the connection may cross threads.
            self.db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.db.execute("PRAGMA synchronous=NORMAL")
            self.db.execute("PRAGMA foreign_keys=ON")
            self.db.executescript(schema.DDL)
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{self.path}: not a greval store ({exc})") from None
        version = schema.stored_version(self.db)
        if version is None:
            schema.set_version(self.db)
        elif version > schema.SCHEMA_VERSION:
            raise UserError(f"{self.path}: written by a newer greval (schema {version}); upgrade greval")
        elif version < schema.SCHEMA_VERSION:
            with self._tx() as db:
                schema.migrate(db)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[sqlite3.Connection]:
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            return self.db.execute(sql, tuple(params)).fetchall()

    def _rows_for(self, sql: str, params: tuple[Any, ...], hashes: Sequence[str]) -> Iterator[tuple[Any, ...]]:
        """Rows of ``sql`` (a query on a table with a record_hash column) for the given records, asked 500
        records at a time (SQLite bounds the number of parameters)."""
        unique = list(dict.fromkeys(hashes))
        for i in range(0, len(unique), 500):
            chunk = unique[i : i + 500]
            with self._lock:
                rows = self.db.execute(
                    f"{sql} AND record_hash IN ({','.join('?' * len(chunk))})", (*params, *chunk)
                ).fetchall()
            yield from rows

    def query(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Any read, rows as dicts (for tests and one-off inspection: greval's stages call named methods)."""
        with self._lock:
            cur = self.db.execute(sql, params)
            cols = [c[0] for c in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]
