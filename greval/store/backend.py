"""Where a store lives and how greval speaks to it: a SQLite file (the default) or a PostgreSQL database.

The store's SQL is written once, in the dialect both engines share (``INSERT … ON CONFLICT``, ``RETURNING``,
``?`` placeholders); what differs is kept here and in :mod:`greval.store.postgres` (the PostgreSQL connection,
which alone imports psycopg): how to connect, the placeholder style (psycopg's ``%s``),
the column types of the schema (:func:`greval.store.schema.ddl`), how a transaction that must not interleave
with another writer begins, and how to read one field of a JSON column. Hand-written SQL rather than
SQLAlchemy: the store is ~90 statements, already tuned on SQLite's hot path (scripts/bench_run.py), and the two
dialects differ in a handful of places that are easier to read here than behind a query builder.
"""

from __future__ import annotations

import itertools
import os
import re
from collections.abc import Generator, Iterable, Iterator
from pathlib import Path
from typing import Any, Literal, Protocol, TypeVar
from urllib.parse import urlsplit, urlunsplit

Dialect = Literal["sqlite", "postgresql"]
T = TypeVar("T")

_URL_SCHEMES = ("postgresql://", "postgres://")

#: The environment variable every ``--store`` option falls back to.
STORE_ENV = "GREVAL_STORE"

#: How long an operation waits for a PostgreSQL server that went away (a restart, a failover, a network cut),
#: connecting again now and then, before the store is given up as unavailable (seconds).
RECONNECT_WAIT_S = 60.0


#: Rows read as they are consumed (closing it ends the read).
Rows = Generator[tuple[Any, ...], None, None]


class Cursor(Protocol):
    """What greval reads of a cursor (sqlite3's and psycopg's both have it)."""

    @property
    def description(self) -> Any: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def fetchmany(self, size: int = ..., /) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


class DB(Protocol):
    """A connection as the store uses it: sqlite3's own, or :class:`greval.store.postgres.PgConnection`."""

    def execute(self, sql: str, parameters: Any = ..., /) -> Any: ...

    def executemany(self, sql: str, parameters: Any, /) -> Any: ...

    def close(self) -> None: ...


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter): a large read or write a chunk at a time."""
    it = iter(items)
    while chunk := list(itertools.islice(it, size)):
        yield chunk


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
