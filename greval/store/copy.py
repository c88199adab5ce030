"""Moving a store between backends (SQLite file <-> PostgreSQL database), row for row.

Every table is copied with its rows in storage order (so "oldest first" reads the same on both sides), in one
transaction on the destination: a copy is whole or absent. Rows whose key the destination already holds are
kept as the destination has them (content-addressed keys: the same key is the same judgement), and counted
apart, so copying into a non-empty store merges and says what it merged. Claims (leases of running judgements,
tied to a live process) and the schema's own version are not data and are not copied.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from contextlib import closing
from pathlib import Path

from pydantic import BaseModel

from greval.errors import UserError, first_line
from greval.store import schema
from greval.store.connection import StoreFile

_SKIP = ("meta", "claims")
_CHUNK = 5000


class TableCopy(BaseModel):
    """One table's copy: rows read from the source, rows the destination gained, rows it already had."""

    table: str
    source_rows: int
    copied: int
    already_there: int


def _order(st: StoreFile, table: schema.Table) -> str:
    """Storage order: SQLite's rowid (PostgreSQL's rowid column), else the key (SQLite's WITHOUT ROWID)."""
    return "rowid" if table.rowid or st.dialect == "postgresql" else ", ".join(table.key)


def copy_store(src: str | Path, dst: str | Path, progress: Callable[[str, int], None] | None = None) -> list[TableCopy]:
    """Copy every verdict, judgement, record, run, snapshot, human label and Argilla push log of ``src``
    into ``dst`` (created if new). ``progress(table, rows)`` is told as rows go."""
    if str(src) == str(dst):
        raise UserError("copy: the source and the destination are the same store")
    out: list[TableCopy] = []
    with StoreFile(src) as a, StoreFile(dst) as b:

        def fill(db: object) -> None:
            out.clear()  # a transaction PostgreSQL aborted (deadlock) is run again from the start
            for table, spec in schema.tables().items():
                if table in _SKIP:
                    continue
                cols = spec.columns
                names = ", ".join(cols)
                before = int(b.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
                total = 0
                insert = f"INSERT INTO {table} ({names}) VALUES ({','.join('?' * len(cols))}) ON CONFLICT DO NOTHING"
                # Read as it is written (a PostgreSQL source through a server-side cursor): memory holds a chunk.
                read = a.stream(f"SELECT {names} FROM {table} ORDER BY {_order(a, spec)}", (), _CHUNK)
                with closing(read) as source:
                    while rows := list(itertools.islice(source, _CHUNK)):
                        try:
                            b.db.executemany(insert, rows)
                        except Exception as exc:  # a value the destination cannot hold: name the table
                            raise UserError(f"copy: {table}: {b.name} refused a row ({first_line(exc)})") from None
                        total += len(rows)
                        if progress is not None:
                            progress(table, len(rows))
                after = int(b.db.execute(f"SELECT COUNT(*) FROM {table}").fetchone()[0])
                out.append(
                    TableCopy(
                        table=table, source_rows=total, copied=after - before, already_there=total - (after - before)
                    )
                )

        b._write(fill)
    return out


def table_counts(ref: str | Path) -> dict[str, int]:
    """Rows per table of a store (``greval store info``)."""
    with StoreFile(ref) as st:
        return {
            t: int(st.db.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0]) for t in schema.tables() if t != "meta"
        }
