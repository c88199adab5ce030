"""``greval spec promote`` and ``greval spec versions``: a metric's production version and the others, in a
store (greval.store.versions keeps them)."""

from __future__ import annotations

import time

import click
from rich.markup import escape
from rich.table import Table

from greval.cli.common import console, out, print_table, store_option


@click.command("promote")
@click.argument("ref", metavar="NAME@HASH")
@store_option(must_exist=True)
@click.option("--note", default=None, help="Why, kept with the promotion (shown by `greval history`).")
def spec_promote(ref: str, store: str, note: str | None) -> None:
    """Make a stored version of a metric its production version: what readers read by default.

    \b
    gate, agreement, report, results, annotate, review, serve and evaluate read the production version unless
    told otherwise (NAME@HASH, --all-versions). `greval spec versions NAME` lists the versions.
      greval spec promote faithfulness@1a2b3c4d --store greval.sqlite --note "aligned on 200 labels"
    """
    from greval.errors import UserError
    from greval.store.store import Store

    if "@" not in ref:
        raise UserError(f"{ref!r}: name the version to promote as NAME@HASH (`greval spec versions NAME` lists them)")
    with Store(store) as st:
        version = st.metric_version(ref)
        if version.production:
            console.print(f"{escape(version.ref)} is already the production version of {escape(version.name)}")
            return
        done = st.promote(version.name, version.spec_key, "promote", note=note)
        rows = {r.spec_key: r for r in st.version_rows(version.name)}
    verdicts = rows[done.spec_key].verdicts
    console.print(
        f"{escape(version.name)}: the production version is now {escape(done.spec_hash)} ({verdicts} verdict(s) "
        "stored); readers read it by default from now on",
        highlight=False,
    )


@click.command("versions")
@click.argument("name")
@store_option(must_exist=True)
def spec_versions(name: str, store: str) -> None:
    """List a metric's stored versions: production, experiments, verdicts, runs.

    \b
      greval spec versions faithfulness --store greval.sqlite
    """
    from greval.store.store import Store

    with Store(store) as st:
        rows = st.version_rows(name)
        promotions = st.promotions(name)
    table = Table(title=f"versions of {name}")
    for col in ("version", "key", "what", "verdicts", "runs", "last declared"):
        table.add_column(col)
    for r in rows:
        what = "production" if r.production else "experiment" if r.experiment else "—"
        when = time.strftime("%Y-%m-%d %H:%M", time.localtime(r.declared_at))
        table.add_row(r.spec_hash, r.spec_key, what, str(r.verdicts), str(r.runs), when)
    print_table(table, out)
    if promotions:
        last = promotions[-1]
        why = f" ({last.note})" if last.note else ""
        out.print(
            f"production since {time.strftime('%Y-%m-%d %H:%M', time.localtime(last.at))}: {last.spec_hash} "
            f"({last.source}){escape(why)}",
            highlight=False,
        )
