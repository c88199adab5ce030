"""``greval store``: a store's schema and contents, and moving a store between SQLite and PostgreSQL."""

from __future__ import annotations

import click

from greval.cli.common import StoreRef, console, print_table, store_option
from greval.cli.lazy import Lazy, LazyGroup
from greval.store.backend import display

STORE_COMMANDS: dict[str, Lazy] = {
    "copy": Lazy("greval.cli.store:store_copy", "Copy every verdict, label and run of store SRC into store DST."),
    "info": Lazy("greval.cli.store:store_info", "Which backend a store is on, its schema version and its rows."),
    "migrate": Lazy("greval.cli.store:store_migrate", "Bring a store's tables up to this greval's schema."),
}


@click.group("store", cls=LazyGroup, lazy=STORE_COMMANDS)
def store() -> None:
    """Inspect, migrate and copy stores (a SQLite file, or a PostgreSQL database shared by a team).

    \b
    A store is given as a path (greval.sqlite) or a URL (postgresql://USER@HOST:5432/DB?sslmode=verify-full);
    every --store option also reads GREVAL_STORE. Keep passwords out of URLs: libpq reads PGPASSWORD and
    ~/.pgpass.
    """


@click.command("info")
@store_option(must_exist=True)
def store_info(store: str) -> None:
    """Which backend a store is on, its schema version and its rows."""
    from rich.table import Table

    from greval.store.connection import StoreFile
    from greval.store.copy import table_counts

    with StoreFile(store, migrate=False) as st:
        version, dialect = st.version, st.dialect
    table = Table(title=f"{display(store)} — {dialect}, schema {version}")
    table.add_column("table")
    table.add_column("rows", justify="right")
    for name, n in table_counts(store).items():
        table.add_row(name, f"{n:,}")
    print_table(table)


@click.command("migrate")
@store_option(must_exist=True)
def store_migrate(store: str) -> None:
    """Bring a store's tables up to this greval's schema.

    A SQLite file is migrated whenever a newer greval opens it; a PostgreSQL store is shared, so it is
    migrated only by this command (once, by whoever upgrades greval first: older clients then refuse it and
    say so). Nothing the store holds is dropped.
    """
    from greval.store import schema
    from greval.store.connection import StoreFile

    with StoreFile(store, migrate=False) as st:
        before = st.version
    with StoreFile(store, migrate=True) as st:
        after = st.version
    if before == after:
        console.print(f"{display(store)}: schema {after}, up to date")
    else:
        console.print(f"{display(store)}: schema {before} → {after} (greval's is {schema.SCHEMA_VERSION})")


@click.command("copy")
@click.argument("src", type=StoreRef(must_exist=True))
@click.argument("dst", type=StoreRef())
def store_copy(src: str, dst: str) -> None:
    """Copy every verdict, label and run of store SRC into store DST.

    \b
    SRC and DST are each a SQLite path or a postgresql:// URL: move a local store to the team's database,
    or take a database's contents home as a file. DST is created if new. Rows keep their storage order; the
    copy is one transaction (whole or nothing). Rows DST already has (same key) are kept and counted, so
    copying into a non-empty store merges. Claims of running judgements are not copied.

    \b
      greval store copy greval.sqlite postgresql://greval@db.internal/evals
      greval store copy postgresql://greval@db.internal/evals backup.sqlite
    """
    from rich.progress import Progress, TextColumn, TimeElapsedColumn
    from rich.table import Table

    from greval.store.copy import copy_store

    with Progress(TextColumn("{task.description}"), TextColumn("{task.completed:,} rows"), TimeElapsedColumn(),
                  console=console, transient=True) as bar:  # fmt: skip
        task = bar.add_task("copying")

        def told(table: str, rows: int) -> None:
            bar.update(task, description=f"copying {table}", advance=rows)

        copied = copy_store(src, dst, told)
    table = Table(title=f"{display(src)} → {display(dst)}")
    for col in ("table", "rows in source", "copied", "already there"):
        table.add_column(col, justify="left" if col == "table" else "right")
    for c in copied:
        table.add_row(c.table, f"{c.source_rows:,}", f"{c.copied:,}", f"{c.already_there:,}")
    print_table(table)
