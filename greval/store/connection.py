"""One connection to a store: opening (and migrating) it, transactions, and chunked lookups.

The store's parts (:mod:`~greval.store.labels`, :mod:`~greval.store.annotation`, :mod:`~greval.store.lookups`
and :class:`~greval.store.store.Store` itself) are methods on top of this. A store is a SQLite file (the
default) or a PostgreSQL database (``postgresql://…``); :mod:`greval.store.backend` keeps what differs.
"""

from __future__ import annotations

import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import Any, Self, TypeVar

from greval.errors import UserError
from greval.paths import private_file
from greval.store import schema
from greval.store.backend import DB, Dialect, PgConnection, dialect_of, display, transient

T = TypeVar("T")

# Any constant: the advisory lock that serialises creating and migrating a PostgreSQL store's tables (two
# workers opening a new database at once would otherwise race on CREATE TABLE IF NOT EXISTS).
_SCHEMA_LOCK = 0x67726576


class StoreFile:
    """A greval store. Safe to share between processes (SQLite WAL) and machines (PostgreSQL); one
    connection per object.

    ``migrate``: bring an older schema up to this greval's. By default a SQLite file is migrated when opened
    (it has one user at a time); a shared PostgreSQL store is migrated only when asked (``greval store
    migrate``), so that one newer client does not lock older ones out of a database they all use. ``False``:
    open it as it is (to read its version).

    A new SQLite file is created readable by its owner only (0600; SQLite gives its ``-wal`` and ``-shm``
    the main file's mode) and the directories greval makes for it 0700; an existing file keeps its mode."""

    def __init__(self, path: str | Path, *, migrate: bool | None = None) -> None:
        self.dialect: Dialect = dialect_of(path)
        #: How to name the store in messages and logs (a URL's password masked).
        self.name = display(path)
        self.ref = str(path)
        self._lock = threading.RLock()
        self.db: DB
        if self.dialect == "postgresql":
            self.path: Path | None = None
            self.db = PgConnection(str(path))
            self._open_pg(migrate)
            return
        self.path = Path(path)
        if self.ref != ":memory:":
            try:  # what a store holds (every record's text and verdict) is for its owner's eyes only
                private_file(self.path)
            except OSError as exc:
                raise UserError(f"{self.path}: cannot create the store ({exc.strerror or exc})") from None
        try:
            # The async runner works in greval's background loop thread (see greval._sync); access is
            # serialised by self._lock, so the connection may cross threads.
            db = sqlite3.connect(str(self.path), timeout=30.0, isolation_level=None, check_same_thread=False)
            self.db = db
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(schema.ddl("sqlite"))
        except sqlite3.DatabaseError as exc:
            raise UserError(f"{self.path}: not a greval store ({exc})") from None
        version = schema.stored_version(self.db)
        if version is None:
            schema.set_version(self.db)
        elif version > schema.SCHEMA_VERSION:
            raise UserError(f"{self.path}: written by a newer greval (schema {version}); upgrade greval")
        elif version < schema.SCHEMA_VERSION and migrate is not False:
            with self._tx() as tx:
                schema.migrate(tx)

    def _open_pg(self, migrate: bool | None) -> None:
        """Create the tables of a new database, or check (and if asked, migrate) an existing one's schema."""
        with self._tx() as db:
            db.execute("SELECT pg_advisory_xact_lock(?)", (_SCHEMA_LOCK,))
            exists = db.execute("SELECT to_regclass('meta') IS NOT NULL").fetchone()[0]
            version = schema.stored_version(db) if exists else None
            if version is None:
                for stmt in schema.statements(schema.ddl("postgresql")):
                    db.execute(stmt)
                schema.set_version(db)
            elif version > schema.SCHEMA_VERSION:
                raise UserError(f"{self.name}: written by a newer greval (schema {version}); upgrade greval")
            elif version < schema.SCHEMA_VERSION and migrate is not False:
                if migrate is None:
                    raise UserError(
                        f"{self.name}: schema {version}, this greval needs {schema.SCHEMA_VERSION}; "
                        f"run `greval store migrate --store URL` once (every client of this database then needs "
                        f"this greval or newer)"
                    )
                schema.migrate(db, self.dialect)

    @property
    def version(self) -> int | None:
        """The schema version this store holds now."""
        with self._lock:
            return schema.stored_version(self.db)

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @contextmanager
    def _tx(self) -> Iterator[DB]:
        """One transaction. On SQLite it takes the write lock at once (BEGIN IMMEDIATE: writers are
        serialised, so a read-then-write inside sees no other writer); on PostgreSQL rows are locked as they
        are written (and ``FOR UPDATE`` where a read decides a write)."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE" if self.dialect == "sqlite" else "BEGIN")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def _write(self, fn: Callable[[DB], T]) -> T:
        """Run ``fn`` in one transaction, again from the start when PostgreSQL aborted it for a deadlock with
        another writer (two runs storing the same records in different orders): all of it or nothing."""
        for attempt in range(8):
            try:
                with self._lock, self._pipelined(), self._tx() as db:
                    return fn(db)
            except Exception as exc:
                if attempt == 7 or not transient(exc):
                    raise
                time.sleep(random.uniform(0.005, 0.05) * (attempt + 1))
        raise AssertionError("unreachable")

    def _pipelined(self) -> AbstractContextManager[Any]:
        return self.db.pipeline() if isinstance(self.db, PgConnection) else nullcontext()

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self._lock:
            rows: list[tuple[Any, ...]] = self.db.execute(sql, tuple(params)).fetchall()
            return rows

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
            cur = self.db.execute(sql, tuple(params))
            cols = [c[0] for c in cur.description]
            return [dict(zip(cols, r, strict=True)) for r in cur.fetchall()]

    def json_field(self, column: str, key: str) -> str:
        """SQL for one top-level field of a JSON text column, as JSON text on PostgreSQL (the caller parses
        it: :meth:`json_value`) and as a value on SQLite."""
        if self.dialect == "postgresql":
            return f"(({column})::json -> '{key}')::text"
        return f"json_extract({column}, '$.{key}')"

    def json_value(self, value: Any) -> Any:
        """The value of a :meth:`json_field` column as Python."""
        if self.dialect == "postgresql" and isinstance(value, str):
            import json

            return json.loads(value)
        return value
