"""One connection to a store: opening (and migrating) it, transactions, and chunked lookups.

The store's parts (:mod:`~greval.store.labels`, :mod:`~greval.store.annotation`, :mod:`~greval.store.lookups`
and :class:`~greval.store.store.Store` itself) are methods on top of this. A store is a SQLite file (the
default) or a PostgreSQL database (``postgresql://…``); :mod:`greval.store.backend` keeps what differs.
"""

from __future__ import annotations

import json
import random
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self, TypeVar

from greval.errors import Remedy, StoreUnavailable, UserError, first_line
from greval.paths import private_file
from greval.store import schema
from greval.store.backend import DB, RECONNECT_WAIT_S, Dialect, Rows, dialect_of, display

if TYPE_CHECKING:
    from greval.store.postgres import PgConnection

T = TypeVar("T")

# Any constant: the advisory lock that serialises creating and migrating a PostgreSQL store's tables (two
# workers opening a new database at once would otherwise race on CREATE TABLE IF NOT EXISTS).
_SCHEMA_LOCK = 0x67726576

#: How long opening a SQLite store waits for another process that holds it (SQLite's busy timeout too).
SQLITE_BUSY_S = 30.0


#: SQLite's primary result codes of a file that cannot be used (not of a statement's error, such as a missing
#: column): BUSY and LOCKED (past the busy timeout), READONLY, IOERR, CORRUPT, FULL, CANTOPEN, NOTADB.
_SQLITE_GONE = frozenset({5, 6, 8, 10, 11, 13, 14, 26})


def _connect_pg(url: str, wait_s: float) -> PgConnection:
    """A PostgreSQL connection; psycopg (an optional extra) loads here, for a ``postgresql://`` store only."""
    try:
        from greval.store.postgres import PgConnection
    except ImportError:
        raise UserError("a PostgreSQL store needs psycopg: pip install 'greval[postgres]'") from None
    return PgConnection(url, wait_s)


def _file_id(path: Path | None) -> tuple[int, int] | None:
    """A file's (device, inode): the same file as long as it is not deleted or replaced (None: no file)."""
    try:
        st = path.stat() if path is not None else None
    except OSError:
        return None
    return None if st is None else (st.st_dev, st.st_ino)


def _open_sqlite(path: Path) -> sqlite3.Connection:
    """Connect, switch to WAL and create the tables, waiting while another process does the same.

    Two processes opening one new file at once (pytest-xdist workers sharing a store) can meet SQLite's
    ``database is locked`` without its busy handler being called (the journal-mode switch, a lock upgrade
    that would deadlock); that is a wait, not a broken file, so the whole opening is tried again."""
    deadline = time.monotonic() + SQLITE_BUSY_S
    while True:
        db: sqlite3.Connection | None = None
        try:
            # The async runner works in greval's background loop thread (see greval._sync); access is
            # serialised by StoreFile._lock, so the connection may cross threads.
            db = sqlite3.connect(str(path), timeout=SQLITE_BUSY_S, isolation_level=None, check_same_thread=False)
            db.execute("PRAGMA journal_mode=WAL")
            db.execute("PRAGMA synchronous=NORMAL")
            db.execute("PRAGMA foreign_keys=ON")
            db.executescript(schema.ddl("sqlite"))
            db.executescript(schema.MEMO_DDL)
            return db
        except sqlite3.OperationalError as exc:
            if db is not None:
                db.close()
            if "locked" not in str(exc) and "busy" not in str(exc):
                raise UserError(f"{path}: not a greval store ({exc})") from None
            if time.monotonic() > deadline:
                raise UserError(f"{path}: held by another process for {SQLITE_BUSY_S:.0f} s ({exc})") from None
            time.sleep(0.05)
        except sqlite3.DatabaseError as exc:
            if db is not None:
                db.close()
            raise UserError(f"{path}: not a greval store ({exc})") from None


class StoreFile:
    """A greval store. Safe to share between processes (SQLite WAL) and machines (PostgreSQL); one
    connection per object.

    ``migrate``: bring an older schema up to this greval's. By default a SQLite file is migrated when opened
    (it has one user at a time); a shared PostgreSQL store is migrated only when asked (``greval store
    migrate``), so that one newer client does not lock older ones out of a database they all use. ``False``:
    open it as it is (to read its version).

    A new SQLite file is created readable by its owner only (0600; SQLite gives its ``-wal`` and ``-shm``
    the main file's mode) and the directories greval makes for it 0700; an existing file keeps its mode.

    ``wait_s``: how long an operation waits for a PostgreSQL server that went away before the store is
    :class:`~greval.errors.StoreUnavailable` (a SQLite file that cannot be written is at once: its own busy
    timeout has waited already). Writes are run again whole once the server is back (:meth:`_write`)."""

    def __init__(self, path: str | Path, *, migrate: bool | None = None, wait_s: float = RECONNECT_WAIT_S) -> None:
        self.dialect: Dialect = dialect_of(path)
        #: How to name the store in messages and logs (a URL's password masked).
        self.name = display(path)
        self.ref = str(path)
        self._lock = threading.RLock()
        self._down: StoreUnavailable | None = None
        self._file: tuple[int, int] | None = None  # a SQLite file's identity (_file_id)
        self.db: DB
        #: The PostgreSQL connection (None: a SQLite store), which waits for a server that went away.
        self.pg: PgConnection | None = None
        if self.dialect == "postgresql":
            self.path: Path | None = None
            self.db = self.pg = _connect_pg(str(path), wait_s)
            self.pg.gone = self._unavailable
            self._open_pg(migrate)
            return
        self.path = Path(path)
        if self.ref != ":memory:":
            try:  # what a store holds (every record's text and verdict) is for its owner's eyes only
                private_file(self.path)
            except OSError as exc:
                raise UserError(f"{self.path}: cannot create the store ({exc.strerror or exc})") from None
        self.db = _open_sqlite(self.path)
        self._file = _file_id(self.path)
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
                        f"{self.name}: schema {version}, this greval needs {schema.SCHEMA_VERSION}",
                        remedy=Remedy(
                            "store migrate",
                            {"store": "URL"},
                            "once (every client of this database then needs this greval or newer)",
                        ),
                    )
                schema.migrate(db, self.dialect)

    @property
    def unavailable(self) -> StoreUnavailable | None:
        """Why this connection gave the store up (every later transaction raises it), else None: a long-lived
        caller (``greval serve``) opens the store again instead of failing until restarted."""
        return self._down

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
    def _begin(self) -> Iterator[DB]:
        """One transaction. On SQLite it takes the write lock at once (BEGIN IMMEDIATE: writers are
        serialised, so a read-then-write inside sees no other writer); on PostgreSQL rows are locked as they
        are written (and ``FOR UPDATE`` where a read decides a write)."""
        if self._down is not None:
            raise self._down
        if self.dialect == "sqlite" and self._file is not None and _file_id(self.path) != self._file:
            # SQLite goes on writing to a file deleted (or replaced) under it, and loses it all when closed.
            gone = FileNotFoundError("the file was deleted or replaced while in use; what it held goes with it")
            raise self._unavailable(gone, None, note=False)
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE" if self.dialect == "sqlite" else "BEGIN")
            try:
                yield self.db
            except BaseException as exc:
                try:
                    self.db.execute("ROLLBACK")
                except Exception:
                    if not self._lost(exc):  # the store gone: nothing left to roll back, the first error says why
                        raise
                raise
            self.db.execute("COMMIT")

    @contextmanager
    def _tx(self) -> Iterator[DB]:
        """:meth:`_begin`, for a block that cannot be run again: a store lost inside it is unavailable at once
        (what can be run again is written with :meth:`_write`, which waits for the server)."""
        try:
            with self._begin() as db:
                yield db
        except Exception as exc:
            if not self._lost(exc):
                raise
            raise self._unavailable(exc, None) from None

    def _write(self, fn: Callable[[DB], T]) -> T:
        """Run ``fn`` in one transaction, again from the start when PostgreSQL aborted it for a deadlock with
        another writer (two runs storing the same records in different orders), or when the connection was
        lost (once the server is back, within the wait): all of it or nothing. Run again after a commit whose
        answer was lost, it must change nothing more: every write of the store is an upsert keyed by content
        (a claim already ours is ours; a partial judgement is merged once: ``Store._write_result``)."""
        attempt = 0
        since: float | None = None
        while True:
            try:
                with self._lock, self._pipelined(), self._begin() as db:
                    return fn(db)
            except Exception as exc:
                if self._lost(exc):
                    since = since or time.monotonic()
                    self._recover(exc, since)
                    continue
                attempt += 1
                if attempt == 8 or self.pg is None or not self.pg.transient(exc):
                    raise
                time.sleep(random.uniform(0.005, 0.05) * attempt)

    def _lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` is the store going away rather than a statement's error: PostgreSQL's connection
        closed under us; SQLite's file not writable (disk full, locked past the busy timeout, I/O error, a
        read-only or removed file)."""
        if isinstance(exc, StoreUnavailable):
            return False
        if self.pg is not None:
            return self.pg.lost(exc)
        code = getattr(exc, "sqlite_errorcode", None)
        return isinstance(exc, sqlite3.DatabaseError) and code is not None and (code & 0xFF) in _SQLITE_GONE

    def _recover(self, exc: BaseException, since: float) -> None:
        """Wait for a PostgreSQL server to come back (returns once connected again); else, and at once for
        SQLite, the store is unavailable."""
        if self.pg is not None:
            self.pg.recover(exc, since)
            return
        raise self._unavailable(exc, None) from None

    def _unavailable(self, exc: BaseException, waited: float | None, *, note: bool = True) -> StoreUnavailable:
        """The error of a store given up (``waited``: seconds waited for PostgreSQL), saying what it holds of
        this process's work (``note``); every later transaction raises it at once."""
        if self._down is None:
            why = f"no answer for {waited:.0f} s: " if waited is not None else ""
            held = self._lost_note() if note else ""
            self._down = StoreUnavailable(f"{self.name}: the store is unavailable ({why}{first_line(exc)}){held}")
        return self._down

    def _lost_note(self) -> str:
        """What the unavailable store holds of this process's work, to say with the error (a Store says)."""
        return ""

    def _pipelined(self) -> AbstractContextManager[Any]:
        return self.pg.pipeline() if self.pg is not None else nullcontext()

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

    def stream(self, sql: str, params: Sequence[Any] = (), size: int = 5000) -> Rows:
        """The rows of a large read, fetched ``size`` at a time (SQLite steps through its result; PostgreSQL
        reads through a server-side cursor), so that memory does not grow with the store. The connection is
        held until the rows are read (or the iterator closed)."""
        with self._lock:
            try:
                if self.pg is not None:
                    yield from self.pg.stream(sql, params, size)
                    return
                cur = self.db.execute(sql, tuple(params))
                while rows := cur.fetchmany(size):
                    yield from rows
            except Exception as exc:
                if not self._lost(exc):
                    raise
                raise self._unavailable(exc, None) from None

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
            return json.loads(value)
        return value
