"""``greval report``: the HTML / Markdown report of a store (greval.report.store_report)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from greval.cli.common import console, out, print_table, store_option, wrap_plain
from greval.report.format import fmt_ci, fmt_number
from greval.report.store_report import (
    CORRECTED_HEAD,
    FACT_HEAD,
    STATS_HEAD,
    StoreReport,
    build,
    corrected_rows,
    fact_rows,
    group_cells,
    group_head,
    label_lines,
    pooling_text,
    stats_rows,
    system_stats_rows,
    write,
)
from greval.store.backend import display
from greval.store.results import not_scored


def print_labels(rep: StoreReport) -> None:
    """The human-label count lines, as plain text on stdout (wrapped between words at its width)."""
    for line in label_lines(rep):
        for part in wrap_plain(line, out.width, hang="  "):
            click.echo(part)


def _table(title: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    from rich.table import Table

    table = Table(title=title)
    for col in head:
        table.add_column(col)
    for r in rows:
        table.add_row(*r)
    print_table(table)


def print_stats(rep: StoreReport) -> None:
    """The record-score statistics, the prevalence-corrected shares and the system × group tables."""
    _table("record scores", ("metric", *STATS_HEAD), [[r[0], *r[2:]] for r in stats_rows(rep)])
    if rep.systems:
        _table(f"record scores by {rep.system_column}", ("metric", "system", *STATS_HEAD), system_stats_rows(rep))
    facts = fact_rows(rep)
    if facts:
        _table("item counts (FActScore*: precision = positive / all, recall = positive / (positive + unsupported))",
               FACT_HEAD, facts)  # fmt: skip
    corrected = corrected_rows(rep)
    if corrected:
        _table("prevalence-corrected system scores (judge → corrected)", CORRECTED_HEAD, corrected)
    for g in rep.groups:
        _table(f"{g.metric}: system × {g.column}", group_head(g), group_cells(g))


@click.command("report")
@store_option(must_exist=True, help="The store to report on.")
@click.option("--spec", "specs", multiple=True, help="Only these metrics (repeatable).")
@click.option(
    "-o",
    "--output",
    default="greval-report",
    show_default=True,
    type=click.Path(file_okay=False),
    help="Directory for index.html, per-metric agreement pages, report.json and report.md.",
)
@click.option(
    "--system-column",
    default="system",
    show_default=True,
    help="Record field that names the system under test (compared side by side).",
)
@click.option(
    "--group-column",
    default=None,
    help="Record field to cross with the systems: a system × group table and heatmap per metric (e.g. film).",
)
@click.option(
    "--bootstrap",
    "resamples",
    type=int,
    default=1000,
    show_default=True,
    help="Bootstrap resamples for agreement CIs.",
)
def report_cmd(
    store: str, specs: Sequence[str], output: str, system_column: str, group_column: str | None, resamples: int
) -> None:
    """Write an HTML report of a store: metrics, systems side by side, judge-vs-human agreement.

    \b
    Opens offline anywhere (plots are embedded). Also writes report.json and report.md.
      greval report --store greval.sqlite -o report/
      greval report --store greval.sqlite --group-column film   # method × film tables
    """
    from rich.table import Table

    out_dir = Path(output)
    out_dir.mkdir(parents=True, exist_ok=True)
    rep = build(store, specs, system_column, resamples, out_dir, group_column=group_column)
    write(rep, out_dir)
    table = Table(title=f"greval report — {display(store)}")
    for col in ("metric", "judge", "records", "not scored", "score", "95% CI", "pooling", "judge–human"):
        table.add_column(col)
    for m in rep.metrics:
        k = (m.agreement or {}).get("cohen_kappa") or (m.agreement or {}).get("spearman")
        table.add_row(
            m.metric,
            m.judge,
            str(m.records),
            not_scored(m.figures.model_dump()) or "—",
            fmt_number(m.score.mean),
            fmt_ci(m.score),
            pooling_text(m.figures),
            "—" if not k else f"{fmt_number(k['value'])} (n={k['n']})",
        )
    print_table(table)
    print_stats(rep)
    print_labels(rep)
    for note in rep.notes():
        console.print(f"[yellow]note:[/] {note}", highlight=False)
    console.print(
        f"wrote {out_dir / 'index.html'} (+ report.json, report.md"
        + (", agreement pages" if any(m.agreement_page for m in rep.metrics) else "")
        + ")"
    )
