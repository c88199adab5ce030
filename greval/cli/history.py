"""``greval history NAME``: a metric's runs over time in a store (greval.report.history)."""

from __future__ import annotations

from pathlib import Path

import click
from rich.markup import escape
from rich.table import Table

from greval.cli.common import console, out, print_table, store_option


@click.command("history")
@click.argument("name")
@store_option(must_exist=True)
@click.option("--html", "html_out", type=click.Path(dir_okay=False), default=None, help="Write the trend page here.")
@click.option("--bootstrap", "resamples", type=int, default=1000, show_default=True, help="Resamples per interval.")
def history_cmd(name: str, store: str, html_out: str | None, resamples: int) -> None:
    """A metric's history: every run's score and agreement with CIs, its production versions, drops flagged.

    \b
    Every run of the metric (experiments aside), oldest first: its version (production or not), judge and
    dataset (its --dataset-name), the dataset score and the agreement with people on its records, each with its
    95% CI; a run whose interval lies wholly below the previous production run's is flagged as a drop. Then every
    change of the production version.
      greval history faithfulness --store greval.sqlite --html faithfulness.history.html
    """
    from greval.paths import write_private
    from greval.report.history import build_history
    from greval.report.history_page import history_rows, render_history
    from greval.store.store import Store

    with Store(store) as st:
        h = build_history(st, name, resamples=resamples)
    figure = next((p.agreement_figure for p in h.runs if p.agreement_figure), "agreement")
    table = Table(title=f"{name}: runs, oldest first")
    for col in ("#", "started", "version", "judge", "dataset", "records", "score [95% CI]", figure, "flag"):
        table.add_column(col)
    for row in history_rows(h):
        table.add_row(*(escape(c) for c in row))
    print_table(table, out)
    for p in h.promotions:
        why = f" — {p.note}" if p.note else ""
        out.print(f"production {p.spec_hash[:12]} from {_when(p.at)} ({p.source}){escape(why)}", highlight=False)
    for note in h.notes:
        console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    if html_out:
        write_private(Path(html_out), render_history(h))
        console.print(f"wrote {html_out}")


def _when(at: float) -> str:
    import time

    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))
