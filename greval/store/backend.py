"""Where a store lives and how greval speaks to it: a SQLite file (the default) or a PostgreSQL database.

The store's SQL is written once, in the dialect both engines share (``INSERT … ON CONFLICT``, ``RETURNING``,
``?`` placeholders); what differs is kept here: how to connect, the placeholder style (psycopg's ``%s``),
the column types of the schema (:func:`greval.store.schema.ddl`), how a transaction that must not interleave
with another writer begins, and how to read one field of a JSON column. Hand-written SQL rather than
SQLAlchemy: the store is ~90 statements, already tuned on SQLite's hot path (scripts/bench_run.py), and the two
dialects differ in a handful of places that are easier to read here than behind a query builder.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Literal, Protocol
from urllib.parse import urlsplit, urlunsplit

from greval.errors import UserError, first_line

Dialect = Literal["sqlite", "postgresql"]

_URL_SCHEMES = ("postgresql://", "postgres://")

#: The environment variable every ``--store`` option falls back to.
STORE_ENV = "GREVAL_STORE"


class Cursor(Protocol):
    """What greval reads of a cursor (sqlite3's and psycopg's both have it)."""

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ..., /) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class DB(Protocol):
    """A connection as the store uses it: sqlite3's own, or :class:`PgConnection`."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Any, /) -> Any: ...

    def close(self) -> None: ...


def is_url(ref: str | Path) -> bool:
    """Whether a store reference names a PostgreSQL database (else it is a SQLite file's path)."""
    return isinstance(ref, str) and ref.startswith(_URL_SCHEMES)


def dialect_of(ref: str | Path) -> Dialect:
    return "postgresql" if is_url(ref) else "sqlite"


def display(ref: str | Path) -> str:
    """A store reference as it may be printed or logged: a URL's password is replaced by ``***``."""
    if not is_url(ref):
        return str(ref)
    parts = urlsplit(str(ref))
    netloc = parts.netloc
    if parts.password is not None:
        netloc = netloc.replace(f":{parts.password}@", ":***@", 1)
    query = re.sub(r"(?i)(password=)[^&]*", r"\1***", parts.query)
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def exists(ref: str | Path) -> bool:
    """Whether a store is there to read: a file that exists; a database URL is always taken to exist
    (connecting says whether it does)."""
    return is_url(ref) or Path(ref).is_file()


def default_ref(fallback: str = "greval.sqlite") -> str:
    """``$GREVAL_STORE`` if set, else ``fallback``."""
    return os.environ.get(STORE_ENV) or fallback


@functools.lru_cache(maxsize=1024)
def _pg_sql(sql: str) -> str:
    """The store's SQL in psycopg's parameter style: ``?`` -> ``%s`` (and a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _text_safe(params: Sequence[Any]) -> tuple[Any, ...]:
    """PostgreSQL's text cannot hold NUL (``\\x00``), which a judge's answer may contain: it is stored as
    U+FFFD, the replacement character, instead of the whole write failing (SQLite keeps it as it is)."""
    return tuple(p.replace("\x00", "\ufffd") if isinstance(p, str) and "\x00" in p else p for p in params)


class PgConnection:
    """A psycopg 3 connection (autocommit; transactions begin explicitly, as sqlite3's with
    ``isolation_level=None``) that takes the store's SQL as written for SQLite."""

    dialect: Dialect = "postgresql"

    def __init__(self, url: str) -> None:
        try:
            import psycopg
        except ImportError:
            raise UserError("a PostgreSQL store needs psycopg: pip install 'greval[postgres]'") from None
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=15)
        except psycopg.Error as exc:
            reason = first_line(exc)
            raise UserError(f"{display(url)}: cannot connect to PostgreSQL ({reason})") from None

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        cur = self._conn.cursor()
        cur.execute(_pg_sql(sql), _text_safe(parameters) or None)
        return cur

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any:
        cur = self._conn.cursor()
        rows = [_text_safe(p) for p in parameters]
        if rows:
            cur.executemany(_pg_sql(sql), rows)
        return cur

    def pipeline(self) -> AbstractContextManager[Any]:
        """Send the statements of a block without waiting for each one's answer (libpq's pipeline mode): a
        transaction of many small writes then costs about one round trip, not one per statement. A read
        inside waits for its own answer only."""
        return self._conn.pipeline()

    def close(self) -> None:
        self._conn.close()


def transient(exc: BaseException) -> bool:
    """A PostgreSQL error that a retry of the whole transaction resolves: a deadlock between two writers
    (each holding a row the other wants) or a serialization failure. SQLite serialises writers instead."""
    try:
        import psycopg.errors
    except ImportError:
        return False
    return isinstance(exc, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure)
