"""A PostgreSQL store's connection (psycopg 3), which takes the store's SQL as written for SQLite.

Its own module, imported only when a store is a ``postgresql://`` URL (:class:`greval.store.connection.
Connection`): psycopg, an optional extra (``greval[postgres]``), is imported at its top, once, and a SQLite
store never loads it.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
import psycopg.errors

from greval.errors import StoreUnavailable, UserError, first_line
from greval.store.backend import RECONNECT_WAIT_S, Dialect, Rows, display

#: SQLSTATEs of a server going away: admin_shutdown, crash_shutdown, cannot_connect_now.
_SERVER_GONE = frozenset({"57P01", "57P02", "57P03"})


@functools.lru_cache(maxsize=1024)
def _pg_sql(sql: str) -> str:
    """The store's SQL in psycopg's parameter style: ``?`` -> ``%s`` (and a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


def _text_safe(params: Sequence[Any]) -> tuple[Any, ...]:
    """PostgreSQL's text cannot hold NUL (``\\x00``), which a judge's answer may contain: it is stored as
    U+FFFD, the replacement character, instead of the whole write failing (SQLite keeps it as it is)."""
    return tuple(p.replace("\x00", "\ufffd") if isinstance(p, str) and "\x00" in p else p for p in params)


def _not_pipeline_exit(record: logging.LogRecord) -> bool:
    """psycopg's warning when a pipeline cut off by a lost connection cannot be ended: the store already
    handles the lost connection (it waits for the server, then says so in one line), so it is not printed."""
    return not record.getMessage().startswith("error ignored terminating")


class PgConnection:
    """A psycopg 3 connection (autocommit; transactions begin explicitly, as sqlite3's with
    ``isolation_level=None``) that takes the store's SQL as written for SQLite.

    A server that goes away is waited for: a statement outside a transaction (a read, or the ``BEGIN`` of
    one) is run again once :meth:`recover` has connected again; a transaction cut off is run again whole by
    its caller (``StoreFile._write``: every write of the store is an idempotent upsert keyed by content).
    Past ``wait_s`` the store is unavailable: ``gone`` makes the error, and every later use raises it at once
    (a run's error path then ends in one line, not a wait per step)."""

    dialect: Dialect = "postgresql"

    def __init__(self, url: str, wait_s: float = RECONNECT_WAIT_S) -> None:
        logging.getLogger("psycopg").addFilter(_not_pipeline_exit)
        self._url = url
        self.wait_s = wait_s
        self._in_tx = False
        self._piped = False
        self._cursors = 0  # server-side cursors opened: each gets a name of its own
        #: The error to raise once the server stayed away past the wait (arguments: the last failure, seconds
        #: waited); the store sets it to say what it holds.
        self.gone: Callable[[BaseException, float], Exception] = lambda exc, waited: StoreUnavailable(
            f"{display(url)}: PostgreSQL gave no answer for {waited:.0f} s ({first_line(exc)})"
        )
        self.down: Exception | None = None
        try:
            self._conn = psycopg.connect(url, autocommit=True, connect_timeout=15)
        except psycopg.Error as exc:
            reason = first_line(exc)
            raise UserError(f"{display(url)}: cannot connect to PostgreSQL ({reason})") from None

    def execute(self, sql: str, parameters: Sequence[Any] = (), /) -> Any:
        if self.down is not None:
            raise self.down
        if self._in_tx:
            if sql in ("COMMIT", "ROLLBACK"):
                self._in_tx = False
                if sql == "ROLLBACK" and self._conn.closed:
                    return None  # the transaction went with the connection
            return self._run(sql, parameters)
        since = None
        while True:
            try:
                cur = self._run(sql, parameters)
            except Exception as exc:
                if not self.lost(exc) or self._piped:  # in a pipeline: its block is what runs again
                    raise
                since = since or time.monotonic()
                self.recover(exc, since)
                continue
            self._in_tx = sql == "BEGIN"
            return cur

    def _run(self, sql: str, parameters: Sequence[Any]) -> Any:
        cur = self._conn.cursor()
        cur.execute(_pg_sql(sql), _text_safe(parameters) or None)
        return cur

    def stream(self, sql: str, parameters: Sequence[Any] = (), size: int = 5000) -> Rows:
        """The rows of a read, ``size`` at a time, through a server-side (named) cursor: a plain cursor would
        fetch the whole result into this process before the first row. A cursor lives in a transaction: one
        is begun for it, unless the caller's is open."""
        own = not self._in_tx
        if own:
            self.execute("BEGIN")
        self._cursors += 1
        try:
            with self._conn.cursor(name=f"greval_stream_{self._cursors}") as cur:
                cur.execute(_pg_sql(sql), _text_safe(parameters) or None)
                while rows := cur.fetchmany(size):
                    yield from rows
        except BaseException:
            if own:
                self.execute("ROLLBACK")
            raise
        if own:
            self.execute("COMMIT")

    def executemany(self, sql: str, parameters: Iterable[Sequence[Any]], /) -> Any:
        if self.down is not None:
            raise self.down
        cur = self._conn.cursor()
        rows = [_text_safe(p) for p in parameters]
        if rows:
            cur.executemany(_pg_sql(sql), rows)
        return cur

    def lost(self, exc: BaseException) -> bool:
        """Whether ``exc`` means the server went away (the connection closed or cut under us, the server
        shutting down or refusing connections) rather than a statement's own error."""
        if not isinstance(exc, psycopg.OperationalError):
            return False
        state = exc.sqlstate
        # No SQLSTATE: the client's own error (the connection is closed / lost, the server closed it);
        # 08…: connection exceptions; 57P01-03: the server shutting down, crashed, or not accepting yet.
        return state is None or state.startswith("08") or state in _SERVER_GONE or self._conn.closed

    def recover(self, exc: BaseException, since: float) -> None:
        """After the connection was lost (``exc``, first at ``since``, a monotonic time): connect again,
        trying until ``wait_s`` after ``since``. Returns once connected; else raises :attr:`gone`'s error,
        which every later use raises too."""
        if self.down is not None:
            raise self.down
        self._in_tx = False
        self._conn.close()
        deadline = since + self.wait_s
        pause = 0.1
        last: BaseException = exc
        try:
            while True:
                left = deadline - time.monotonic()
                try:
                    self._conn = psycopg.connect(self._url, autocommit=True, connect_timeout=max(2, int(min(15, left))))
                    return
                except psycopg.Error as err:
                    last = err
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                time.sleep(min(pause, left))  # the last try at the deadline itself
                pause = min(pause * 2, 2.0)
        except KeyboardInterrupt:
            # Ctrl-C while waiting: given up now, so that what runs on the way out does not wait again.
            self.down = self.gone(last, time.monotonic() - since)
            raise
        self.down = self.gone(last, time.monotonic() - since)
        raise self.down

    @contextmanager
    def pipeline(self) -> Iterator[None]:
        """Send the statements of a block without waiting for each one's answer (libpq's pipeline mode): a
        transaction of many small writes then costs about one round trip, not one per statement. A read
        inside waits for its own answer only."""
        with self._conn.pipeline():
            self._piped = True
            try:
                yield
            finally:
                self._piped = False

    def close(self) -> None:
        self._conn.close()  # a connection already lost closes quietly

    @staticmethod
    def transient(exc: BaseException) -> bool:
        """A PostgreSQL error that a retry of the whole transaction resolves: a deadlock between two writers
        (each holding a row the other wants) or a serialization failure. SQLite serialises writers instead."""
        return isinstance(exc, psycopg.errors.DeadlockDetected | psycopg.errors.SerializationFailure)
