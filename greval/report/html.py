"""The store report as files: the HTML page (``index.html``, figures embedded, opens offline) and its Markdown
twin (``report.md``). Both are built from sections, each a function of the report's models alone (the cells
come from greval.report.tables, the figures from greval.report.plots), so a section reads the same numbers as
report.json and the terminal.

A section is a function of a :class:`Page` (the report, and how its notes write option fields). To add a
part of the page, write one and put it in :data:`INDEX_SECTIONS` (and, when it has a Markdown form,
:data:`MARKDOWN_SECTIONS`) where it should appear; the per-metric part of the page is :func:`metric_panel`,
one call per metric.
"""

from __future__ import annotations

import html
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from greval.errors import render_options
from greval.report import plots
from greval.report.format import fmt_ci, fmt_number
from greval.report.models import MetricRow, StoreReport
from greval.report.stats import CONFIDENCE, MEAN_RESAMPLES
from greval.report.tables import (
    CORRECTED_HEAD,
    FACT_HEAD,
    STATS_HEAD,
    corrected_rows,
    fact_rows,
    group_cells,
    group_head,
    label_lines,
    pooling_text,
    stats_rows,
    system_stats_rows,
)
from greval.store.results import not_scored

_CSS = """body{font-family:system-ui,sans-serif;margin:2rem;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th{background:#f3f3f3}img{max-width:100%;height:auto}td:first-child,th:first-child{text-align:left}.note{color:#666;font-size:.9em}"""


def html_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table of text cells, every cell escaped."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    """A Markdown table of text cells (a ``|`` inside a cell escaped)."""

    def cell(c: str) -> str:
        return c.replace("|", r"\|")

    lines = ["| " + " | ".join(cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]


@dataclass(frozen=True)
class Page:
    """What a section renders: the report, and how option fields named in its notes are written (``names``;
    the CLI passes its flag table, by default they stay as fields)."""

    rep: StoreReport
    names: Mapping[str, str] = field(default_factory=dict)

    def notes(self, notes: Sequence[str]) -> list[str]:
        return [render_options(n, self.names) for n in notes]


def _notes(notes: Sequence[str]) -> str:
    return "".join(f"<p class=note>{html.escape(n)}</p>" for n in notes)


# ------------------------------------------------------------------------------------------------ index.html
def _head(page: Page) -> str:
    return f"<h1>greval report</h1><p class=note>store {html.escape(page.rep.store)}</p>"


def _metric_row(m: MetricRow) -> str:
    link = f'<a href="{html.escape(m.agreement_page)}">agreement</a>' if m.agreement_page else "—"
    kappa = (m.agreement or {}).get("cohen_kappa") or (m.agreement or {}).get("spearman")
    agree = f"{fmt_number(kappa['value'])} {link}" if kappa else link
    dist = ", ".join(f"{html.escape(k)}: {v}" for k, v in m.distribution.items())
    return (
        f"<tr><td>{html.escape(m.metric)}</td><td>{html.escape(m.kind)}</td>"
        f"<td>{html.escape(m.judge)}</td><td>{m.records}</td><td>{not_scored(m.figures.model_dump())}</td>"
        f"<td>{fmt_number(m.score.mean)}</td><td>{fmt_ci(m.score)}</td>"
        f"<td>{html.escape(pooling_text(m.figures))}</td><td>{dist}</td><td>{agree}</td></tr>"
    )


def _metrics(page: Page) -> str:
    """The metrics table (dataset scores, pooling, judge–human agreement) and the FActScore* counts."""
    rep = page.rep
    facts = fact_rows(rep)
    return (
        "<h2>Metrics</h2><table><tr><th>metric</th><th>kind</th><th>judge</th><th>records</th><th>not scored</th>"
        "<th>dataset score</th><th>95% CI</th><th>pooling</th><th>distribution</th><th>judge–human κ / ρ</th></tr>"
        + "".join(_metric_row(m) for m in rep.metrics)
        + "</table>"
        + (
            "<h3>Item counts (FActScore*)</h3><p class=note>precision = positive / all items, recall = positive / "
            "(positive + unsupported), F1 their harmonic mean; pooled over every record's items, and (macro) the "
            "mean of the records' own.</p>" + html_table(FACT_HEAD, facts)
            if facts
            else ""
        )
    )


def _overview(page: Page) -> str:
    return "<h2 id=overview>Overview</h2>" + plots.overview_figure(page.rep)


def _stats(page: Page) -> str:
    rows = [[r[0], *r[2:]] for r in stats_rows(page.rep)]
    return "<h2 id=stats>Record scores per metric</h2>" + html_table(("metric", *STATS_HEAD), rows)


def _labels(page: Page) -> str:
    lines = label_lines(page.rep)
    return "<h2>Human labels</h2>" + "".join(f"<p>{html.escape(line)}</p>" for line in lines) if lines else ""


def _corrected(page: Page) -> str:
    rows = corrected_rows(page.rep)
    if not rows:
        return ""
    return (
        "<h2>Prevalence-corrected system scores</h2><p class=note>The judge's label shares over all its "
        "verdicts, and corrected for its error rates measured on the human-labelled items "
        "(greval.agreement's prevalence correction; CI: bootstrap). Mean: Σ share × label score.</p>"
        + html_table(CORRECTED_HEAD, rows)
    )


def _systems(page: Page) -> str:
    """The systems side by side: their chart, dataset scores with CIs, failure rates and efficiency means."""
    rep = page.rep
    if not rep.systems:
        return ""
    eff_cols = sorted({k for s in rep.systems for k in s.efficiency})
    srows = []
    for s in rep.systems:
        eff = "".join(f"<td>{fmt_number(s.efficiency.get(c), 1)}</td>" for c in eff_cols)
        srows.append(
            f"<tr><td>{html.escape(s.metric)}</td><td>{html.escape(s.system)}</td><td>{s.judged}</td>"
            f"<td>{fmt_number(s.score.mean)}</td><td>{fmt_number(s.score.std)}</td><td>{fmt_ci(s.score)}</td>"
            f"<td>{s.failure_rate:.1%}</td>{eff}</tr>"
        )
    head = "".join(f"<th>{html.escape(c)}</th>" for c in eff_cols)
    return (
        f"<h2>Systems by {html.escape(rep.system_column or '')}</h2>"
        + plots.system_chart(rep)
        + "<table><tr><th>metric</th><th>system</th><th>n</th><th>score</th><th>std</th><th>95% CI</th>"
        f"<th>failure rate</th>{head}</tr>"
        + "".join(srows)
        + "</table>"
        + "<h3>Record scores per system</h3>"
        + html_table(("metric", "system", *STATS_HEAD), system_stats_rows(rep))
    )


def _groups(page: Page) -> str:
    return "".join(
        f"<h2 id=group-{html.escape(g.metric)}>{html.escape(g.metric)}: system × {html.escape(g.column)}</h2>"
        + plots.group_heatmap(g)
        + html_table(group_head(g), group_cells(g))
        + _notes(g.notes())
        for g in page.rep.groups
    )


def metric_panel(m: MetricRow, rep: StoreReport) -> str:
    """One metric's part of the page: its distribution, and a box per system."""
    boxes = plots.system_boxes_figure(m.metric, [s for s in rep.systems if s.metric == m.metric])
    return f"<h3>{html.escape(m.metric)}</h3>" + plots.distribution_figure(m) + boxes


def _per_metric(page: Page) -> str:
    rep = page.rep
    return "<h2>Per metric</h2>" + "".join(metric_panel(m, rep) for m in rep.metrics)


def _footer(page: Page) -> str:
    """Every note of the report, then how its figures were computed."""
    return _notes(page.notes(page.rep.notes())) + (
        f"<p class=note>CIs: percentile bootstrap over records (greval.agreement.bootstrap), {MEAN_RESAMPLES} "
        f"resamples, seed 0, {CONFIDENCE:.0%}; a pooled (micro) score resamples records with their items. "
        "Percentiles: numpy's linear interpolation; std: sample (ddof 1); failed / skipped: shares of the "
        "records.</p>"
    )


#: The page, top to bottom.
INDEX_SECTIONS: tuple[Callable[[Page], str], ...] = (
    _head,
    _metrics,
    _overview,
    _stats,
    _labels,
    _corrected,
    _systems,
    _groups,
    _per_metric,
    _footer,
)


def render_index(rep: StoreReport, names: Mapping[str, str] | None = None) -> str:
    """index.html: every section of :data:`INDEX_SECTIONS`, in order (``names``: see :class:`Page`)."""
    page = Page(rep, names or {})
    body = "".join(section(page) for section in INDEX_SECTIONS)
    return f"<!doctype html><meta charset=utf-8><title>greval report</title><style>{_CSS}</style>" + body


# ------------------------------------------------------------------------------------------------- report.md
def _md_metrics(page: Page) -> list[str]:
    rep = page.rep
    lines = [
        "| metric | judge | records | not scored | dataset score | 95% CI | pooling |",
        "|---|---|---|---|---|---|---|",
    ]
    for m in rep.metrics:
        lines.append(
            f"| {m.metric} | {m.judge} | {m.records} | {not_scored(m.figures.model_dump()) or '—'} | "
            f"{fmt_number(m.score.mean)} | {fmt_ci(m.score)} | {pooling_text(m.figures)} |"
        )
    facts = fact_rows(rep)
    if facts:
        lines += ["", "### Item counts (FActScore*)", "", *md_table(FACT_HEAD, facts)]
    notes = page.notes(rep.notes())
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return lines


def _md_stats(page: Page) -> list[str]:
    rep = page.rep
    lines = ["", "## Record scores per metric", "", *md_table(("metric", "judge", *STATS_HEAD), stats_rows(rep))]
    for m in rep.metrics:
        if m.distribution or m.histogram:
            what = "verdicts by label / value" if m.distribution else "records by score bin"
            counts = m.distribution or m.histogram
            lines += ["", f"{m.metric} — {what}: " + ", ".join(f"{k}: {v}" for k, v in counts.items())]
    return lines


def _md_labels(page: Page) -> list[str]:
    labels = label_lines(page.rep)
    return ["", "## Human labels", ""] + [f"- {line}" for line in labels] if labels else []


def _md_systems(page: Page) -> list[str]:
    rep = page.rep
    if not rep.systems:
        return []
    lines = [
        "",
        f"## Systems by {rep.system_column}",
        "",
        "| metric | system | n | score | 95% CI | failure rate |",
        "|---|---|---|---|---|---|",
    ]
    for s in rep.systems:
        lines.append(
            f"| {s.metric} | {s.system} | {s.judged} | {fmt_number(s.score.mean)} | {fmt_ci(s.score)} | "
            f"{s.failure_rate:.1%} |"
        )
    stats = md_table(("metric", "system", *STATS_HEAD), system_stats_rows(rep))
    return [*lines, "", "### Record scores per system", "", *stats]


def _md_corrected(page: Page) -> list[str]:
    rows = corrected_rows(page.rep)
    return ["", "## Prevalence-corrected system scores", "", *md_table(CORRECTED_HEAD, rows)] if rows else []


def _md_groups(page: Page) -> list[str]:
    return [
        line
        for g in page.rep.groups
        for line in ["", f"## {g.metric}: system × {g.column}", "", *md_table(group_head(g), group_cells(g))]
    ]


#: report.md after its metrics table, notes and overview image, top to bottom.
MARKDOWN_SECTIONS: tuple[Callable[[Page], list[str]], ...] = (
    _md_stats,
    _md_labels,
    _md_systems,
    _md_corrected,
    _md_groups,
)


def render_markdown(rep: StoreReport, overview: str | None = None, names: Mapping[str, str] | None = None) -> str:
    """The report as Markdown; ``overview``: the overview PNG's file name, linked when given (``names``: see
    :class:`Page`)."""
    page = Page(rep, names or {})
    lines = ["# greval report", "", f"store `{rep.store}`", "", *_md_metrics(page)]
    if overview:
        lines += ["", f"![overview]({overview})"]
    for section in MARKDOWN_SECTIONS:
        lines += section(page)
    return "\n".join(lines) + "\n"
