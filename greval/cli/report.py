"""``greval report``: the HTML / Markdown report of a store (greval.report.store_report), and its tables on the
terminal (greval.report.terminal)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import click

from greval.cli.common import console, out, store_option
from greval.cli.flags import FLAGS
from greval.paths import output_dir
from greval.report.store_report import build, write
from greval.report.terminal import print_notes, print_store_report
from greval.store.backend import display


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
    help="Bootstrap resamples of every CI of the report: scores, label shares, agreement, prevalence.",
)
@click.option(
    "--compare",
    nargs=2,
    default=None,
    metavar="A B",
    help="Compare two runs, spec versions (NAME@HASH), judges or systems (COLUMN=VALUE) record by record: "
    "changed verdicts first, paired differences with CIs, both verdicts side by side in the explorer.",
)
@click.option(
    "--all-versions",
    is_flag=True,
    help="Every version of each metric (experiments aside), not only its production version.",
)
@click.option(
    "--experiments",
    is_flag=True,
    help="Also list the store's experiment runs (align candidates, spec try, side runs) under their own heading, "
    "with the scores their runs printed; no other figure of the report counts them.",
)
def report_cmd(
    store: str,
    specs: Sequence[str],
    output: str,
    system_column: str,
    group_column: str | None,
    resamples: int,
    compare: tuple[str, str] | None,
    all_versions: bool,
    experiments: bool,
) -> None:
    """Write an HTML report of a store: metrics, systems side by side, judge-vs-human agreement.

    \b
    Opens offline anywhere (plots are embedded). Also writes report.json and report.md.
      greval report --store greval.sqlite -o report/
      greval report --store greval.sqlite --group-column film   # method × film tables
    """
    out_dir = Path(output)
    output_dir(out_dir)
    if compare:
        _compare(store, compare, out_dir, resamples, system_column)
        return
    rep = build(
        store,
        specs,
        system_column,
        resamples,
        out_dir,
        group_column=group_column,
        names=FLAGS,
        all_versions=all_versions,
        experiments=experiments,
    )
    write(rep, out_dir, FLAGS)
    print_store_report(out, rep, display(store))
    print_notes(console, [*rep.notes(), *_price_notes()], FLAGS)
    console.print(
        f"wrote {out_dir / 'index.html'} (+ report.json, report.md"
        + (", agreement pages" if any(m.agreement_page for m in rep.metrics) else "")
        + ")"
    )


def _compare(store: str, sides: tuple[str, str], out_dir: Path, resamples: int, system_column: str) -> None:
    """``--compare A B``: the comparison page, its JSON and explorer, and its tables on the terminal."""
    from greval.report.compare import build_comparison, write
    from greval.report.terminal import print_store_comparison

    built = build_comparison(store, sides[0], sides[1], resamples, system_column)
    write(built, out_dir)
    print_store_comparison(out, built.comparison)
    console.print(f"wrote {out_dir / 'index.html'} (+ comparison.json, explorer/)")


def _price_notes() -> list[str]:
    """The explorer's costs need the price table: one that cannot be read is said here, not only on the page."""
    from greval.report.explorer.write import pricing

    problem = pricing().problem
    return [f"the explorer shows no cost per record: {problem}"] if problem else []
