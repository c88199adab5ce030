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
from greval.report.explorer import links
from greval.report.format import fmt_ci, fmt_number
from greval.report.models import MetricRow, StoreReport
from greval.report.stats import LEVEL
from greval.report.tables import (
    CORRECTED_HEAD,
    EXPERIMENTS_HEAD,
    FACT_HEAD,
    METRICS_HEAD,
    STATS_HEAD,
    corrected_rows,
    drop_empty,
    experiment_cells,
    fact_rows,
    group_cells,
    group_head,
    label_lines,
    metrics_cells,
    shares_head,
    shares_rows,
    stats_rows,
    system_stats_rows,
    unscored_lines,
)

_CSS = """:root{color-scheme:light dark;--fg:#1b1b1b;--bg:#fff;--muted:#5f5f5f;--line:#ccc;--head:#f1f1f1;
--link:#0057a3}
@media (prefers-color-scheme:dark){:root{--fg:#e8e8e8;--bg:#161616;--muted:#a8a8a8;--line:#444;--head:#262626;
--link:#7ab8ff}img{background:#fff}}
body{font-family:system-ui,sans-serif;margin:2rem auto;max-width:1200px;padding:0 1rem;color:var(--fg);
background:var(--bg)}a{color:var(--link)}
table{border-collapse:collapse;margin:1rem 0;display:block;overflow-x:auto;max-width:100%}
td,th{border:1px solid var(--line);padding:.3rem .6rem;text-align:right}th{background:var(--head)}
img{max-width:100%;height:auto}td:first-child,th:first-child{text-align:left}.note,.omitted{color:var(--muted);
font-size:.9em}.panels{display:grid;grid-template-columns:repeat(auto-fill,minmax(min(100%,420px),1fr));gap:1rem}
figure{margin:0}figcaption{font-size:.85em;color:var(--muted)}.explore{font-weight:600}"""


def html_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A table of text cells, every cell escaped."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def linked_table(head: Sequence[str], rows: Sequence[tuple[str, Sequence[str]]]) -> str:
    """A table of text cells whose first cell links to ``href`` (the explorer's filtered records); escaped."""
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join(
        f'<tr><td><a href="{html.escape(link)}">{html.escape(r[0])}</a></td>'
        + "".join(f"<td>{html.escape(c)}</td>" for c in r[1:])
        + "</tr>"
        for link, r in rows
    )
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
    the CLI passes its flag table, by default they stay as fields); ``explorer``: whether the record explorer
    is beside the page (figures and rows link to their records there)."""

    rep: StoreReport
    names: Mapping[str, str] = field(default_factory=dict)
    explorer: bool = True

    def notes(self, notes: Sequence[str]) -> list[str]:
        return [render_options(n, self.names) for n in notes]

    def index_of(self, metric: MetricRow) -> int:
        return next(i for i, m in enumerate(self.rep.metrics) if m is metric)

    def href(self, metric: MetricRow, filters: Mapping[str, str] | None = None) -> str:
        """The explorer's address of the metric's records (filtered), '' without an explorer."""
        return links.href(self.index_of(metric), filters) if self.explorer else ""


def _notes(notes: Sequence[str]) -> str:
    return "".join(f"<p class=note>{html.escape(n)}</p>" for n in notes)


def _omitted(lines: Sequence[str]) -> str:
    return "".join(f"<p class=omitted>{html.escape(line)}</p>" for line in lines)


def _a(href: str, text: str) -> str:
    """A link (escaped), or the text alone when there is nowhere to go."""
    return f'<a href="{html.escape(href)}">{html.escape(text)}</a>' if href else html.escape(text)


# ------------------------------------------------------------------------------------------------ index.html
def _head(page: Page) -> str:
    explore = (
        f'<p class=explore><a href="{links.FOLDER}/index.html">Explore the records →</a> every verdict, its '
        "reason and what the judge read, filtered from any figure</p>"
        if page.explorer
        else ""
    )
    return f"<h1>greval report</h1><p class=note>store {html.escape(page.rep.store)}</p>{explore}"


def _metrics(page: Page) -> str:
    """The metrics table (dataset scores or label shares, pooling, judge–human agreement), FActScore* counts."""
    rep = page.rep
    head, rows = drop_empty(METRICS_HEAD, [metrics_cells(m, rep) for m in rep.metrics], keys=4)
    agree = [_a(m.agreement_page, "agreement page") if m.agreement_page else "" for m in rep.metrics]
    body = "".join(
        "<tr>"
        + f"<td>{_a(page.href(m), r[0])}</td>"
        + "".join(f"<td>{html.escape(c)}</td>" for c in r[1:])
        + (f"<td>{a}</td>" if any(agree) else "")
        + "</tr>"
        for m, r, a in zip(rep.metrics, rows, agree, strict=True)
    )
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head) + ("<th>pages</th>" if any(agree) else "")
    facts = fact_rows(rep)
    return f"<h2>Metrics</h2><table><tr>{th}</tr>{body}</table>" + (
        "<h3>Item counts (FActScore*)</h3><p class=note>precision = positive / all items, recall = positive / "
        "(positive + unsupported), F1 their harmonic mean; pooled over every record's items, and (macro) the "
        "mean of the records' own.</p>" + html_table(FACT_HEAD, facts)
        if facts
        else ""
    )


def _panel(page: Page, panel: plots.Panel) -> str:
    """One overview panel: its figure, and links to the records of what it shows."""
    metric = page.rep.metrics[0] if len(page.rep.metrics) == 1 else None
    shown = [(text, page.href(metric, f)) for text, f in panel.links] if metric is not None and page.explorer else []
    caption = " · ".join(_a(h, t) for t, h in shown)
    return (
        f'<figure class=panel data-panel="{html.escape(panel.key)}" data-points={panel.points}>'
        + plots.img(plots.panel_png(panel), panel.title)
        + (f"<figcaption>records: {caption}</figcaption>" if caption else "")
        + "</figure>"
    )


def _overview(page: Page) -> str:
    panels, omitted = plots.overview(page.rep)
    left_out = [f"left out: {o.title} — {o.why}" for o in omitted]
    return (
        "<h2 id=overview>Overview</h2><div class=panels>"
        + "".join(_panel(page, p) for p in panels)
        + "</div>"
        + _omitted(left_out)
    )


def _stats(page: Page) -> str:
    rows = [[r[0], *r[2:]] for r in stats_rows(page.rep)]
    table = html_table(("metric", *STATS_HEAD), rows) if rows else ""
    return "<h2 id=stats>Record scores per metric</h2>" + table + _omitted(unscored_lines(page.rep))


def _shares(page: Page) -> str:
    """Each categorical judge metric's label shares with CIs: all records, each system, each cell."""
    parts = []
    for m in page.rep.metrics:
        if m.shares is None or not m.shares.n:
            continue
        rows = shares_rows(m, page.rep)
        parts.append(
            f"<h3>{html.escape(page.rep.label(m.key))}</h3>"
            + linked_table(shares_head(m), [(page.href(m, f), cells) for f, cells in rows])
        )
    if not parts:
        return ""
    return (
        "<h2 id=shares>Label shares (95% CI)</h2><p class=note>Each label's share of the judge's verdicts, with a "
        "percentile bootstrap CI over records; a row opens its records in the explorer.</p>" + "".join(parts)
    )


def _labels(page: Page) -> str:
    lines = label_lines(page.rep)
    return "<h2>Human labels</h2>" + "".join(f"<p>{html.escape(line)}</p>" for line in lines) if lines else ""


def _corrected(page: Page) -> str:
    head, rows = drop_empty(CORRECTED_HEAD, corrected_rows(page.rep), keys=2)
    if not rows:
        return ""
    return (
        "<h2>Prevalence-corrected system scores</h2><p class=note>The judge's label shares over all its "
        "verdicts, and corrected for its error rates measured on the human-labelled items "
        "(greval.agreement's prevalence correction; CI: bootstrap; the agreement page's prevalence is the "
        "'all' row). Mean: Σ share × label score.</p>" + html_table(head, rows)
    )


def _systems(page: Page) -> str:
    """The systems side by side: their chart, dataset scores with CIs, failure rates and efficiency means (metrics
    described by their label shares are in the label-share tables)."""
    rep = page.rep
    rows = [s for s in rep.systems if s.score.mean is not None]
    if not rows:
        return ""
    eff_cols = sorted({k for s in rows for k in s.efficiency})
    head = ["metric", "system", "n", "score", "std", "95% CI", "failure rate", *eff_cols]
    cells = [
        (
            page.href(rep.row(s.key), {"system": s.system}),
            [
                rep.label(s.key),
                s.system,
                str(s.judged),
                fmt_number(s.score.mean),
                fmt_number(s.score.std),
                fmt_ci(s.score),
                f"{s.failure_rate:.1%}",
                *(fmt_number(s.efficiency.get(c), 1) for c in eff_cols),
            ],
        )
        for s in rows
    ]
    scored = {s.key for s in rows}
    by_range = plots.ranges([m for m in rep.metrics if m.key in scored])
    charts = "".join(plots.system_chart(rep, [m.key for m in ms]) for ms in by_range.values())
    stats = system_stats_rows(rep)
    return (
        f"<h2>Systems (record field '{html.escape(rep.system_column or '')}')</h2>"
        + charts
        + linked_table(head, cells)
        + ("<h3>Record scores per system</h3>" + html_table(("metric", "system", *STATS_HEAD), stats) if stats else "")
    )


def _groups(page: Page) -> str:
    parts = []
    for g in page.rep.groups:
        m, name = page.rep.row(g.key), page.rep.label(g.key)
        label = m.shares.shares[0].label if m.by_shares and m.shares is not None else None
        head, rows = drop_empty(group_head(g), group_cells(g), keys=3)
        parts.append(
            f'<h2 id="group-{html.escape(name)}">{html.escape(name)}: system × {html.escape(g.column)}</h2>'
            + plots.group_heatmap(g, label)
            + (html_table(head, rows) if not m.by_shares else "<p class=note>label shares per cell: above</p>")
            + _notes(g.notes())
        )
    return "".join(parts)


def metric_panel(m: MetricRow, page: Page) -> str:
    """One metric's part of the page: its distribution (bars linked to their records), and a box per system."""
    boxes = plots.system_boxes_figure(page.rep.label(m.key), [s for s in page.rep.systems if s.key == m.key])
    counts, what = plots.distribution_counts(m)
    key = "bin" if not m.distribution else "label" if m.shares is not None else "value"
    bars = " · ".join(_a(page.href(m, {key: k}), f"{k} ({v})") for k, v in counts.items() if v)
    return (
        f"<h3>{html.escape(page.rep.label(m.key))}</h3>"
        + plots.distribution_figure(m)
        + (f"<p class=note>{html.escape(what)} by bar: {bars}</p>" if bars else "")
        + boxes
    )


def _per_metric(page: Page) -> str:
    return "<h2>Per metric</h2>" + "".join(metric_panel(m, page) for m in page.rep.metrics)


EXPERIMENTS_NOTE = (
    "Runs that tried something (align candidates, spec try, side runs of a comparison): stored and paid once, "
    "never what a reader reads by default, so no figure above counts them. Promote a version "
    "(greval spec promote NAME@HASH) to make it the metric's production version."
)


def _experiments(page: Page) -> str:
    rows = experiment_cells(page.rep)
    if not rows:
        return ""
    return f"<h2 id=experiments>Experiments</h2><p class=note>{html.escape(EXPERIMENTS_NOTE)}</p>" + html_table(
        EXPERIMENTS_HEAD, rows
    )


def _md_experiments(page: Page) -> list[str]:
    rows = experiment_cells(page.rep)
    return ["", "## Experiments", "", EXPERIMENTS_NOTE, "", *md_table(EXPERIMENTS_HEAD, rows)] if rows else []


def _footer(page: Page) -> str:
    """Every note of the report, then how its figures were computed."""
    return _notes(page.notes(page.rep.notes())) + (
        f"<p class=note>CIs: percentile bootstrap over records (greval.agreement.bootstrap), {page.rep.bootstrap} "
        f"resamples (every CI of this report and of its agreement pages), seed 0, {LEVEL:.0%}; a pooled "
        "(micro) score and a per-item metric's label shares resample records with their items. Percentiles: "
        "numpy's linear interpolation; std: sample (ddof 1); failed / skipped: shares of the records.</p>"
    )


#: The page, top to bottom.
INDEX_SECTIONS: tuple[Callable[[Page], str], ...] = (
    _head,
    _metrics,
    _overview,
    _stats,
    _shares,
    _labels,
    _corrected,
    _systems,
    _groups,
    _per_metric,
    _experiments,
    _footer,
)


def render_index(rep: StoreReport, names: Mapping[str, str] | None = None, explorer: bool = True) -> str:
    """index.html: every section of :data:`INDEX_SECTIONS`, in order (``names``: see :class:`Page`)."""
    page = Page(rep, names or {}, explorer)
    body = "".join(section(page) for section in INDEX_SECTIONS)
    return (
        '<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content="width=device-width, '
        f'initial-scale=1"><title>greval report</title><style>{_CSS}</style>' + body
    )


# ------------------------------------------------------------------------------------------------- report.md
def _md_metrics(page: Page) -> list[str]:
    rep = page.rep
    head, rows = drop_empty(METRICS_HEAD, [metrics_cells(m, rep) for m in rep.metrics], keys=4)
    lines = md_table(head, rows)
    facts = fact_rows(rep)
    if facts:
        lines += ["", "### Item counts (FActScore*)", "", *md_table(FACT_HEAD, facts)]
    notes = page.notes(rep.notes())
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    return lines


def _md_stats(page: Page) -> list[str]:
    rep = page.rep
    rows = stats_rows(rep)
    lines = ["", "## Record scores per metric", ""]
    lines += md_table(("metric", "judge", *STATS_HEAD), rows) if rows else []
    lines += [f"- {line}" for line in unscored_lines(rep)]
    for m in rep.metrics:
        counts, _ = plots.distribution_counts(m)
        if counts and sum(counts.values()):
            what = "verdicts by label / value" if m.distribution else "records by score bin"
            lines += ["", f"{rep.label(m.key)} — {what}: " + ", ".join(f"{k}: {v}" for k, v in counts.items())]
    return lines


def _md_shares(page: Page) -> list[str]:
    lines = []
    for m in page.rep.metrics:
        if m.shares is not None and m.shares.n:
            rows = [cells for _, cells in shares_rows(m, page.rep)]
            lines += ["", f"### {page.rep.label(m.key)}", "", *md_table(shares_head(m), rows)]
    return ["", "## Label shares (95% CI)", *lines] if lines else []


def _md_labels(page: Page) -> list[str]:
    labels = label_lines(page.rep)
    return ["", "## Human labels", ""] + [f"- {line}" for line in labels] if labels else []


def _md_systems(page: Page) -> list[str]:
    rep = page.rep
    rows = [
        [rep.label(s.key), s.system, str(s.judged), fmt_number(s.score.mean), fmt_ci(s.score), f"{s.failure_rate:.1%}"]
        for s in rep.systems
        if s.score.mean is not None
    ]
    if not rows:
        return []
    head = ("metric", "system", "n", "score", "95% CI", "failure rate")
    lines = ["", f"## Systems (record field '{rep.system_column}')", "", *md_table(head, rows)]
    stats = system_stats_rows(rep)
    if stats:
        lines += ["", "### Record scores per system", "", *md_table(("metric", "system", *STATS_HEAD), stats)]
    return lines


def _md_corrected(page: Page) -> list[str]:
    head, rows = drop_empty(CORRECTED_HEAD, corrected_rows(page.rep), keys=2)
    return ["", "## Prevalence-corrected system scores", "", *md_table(head, rows)] if rows else []


def _md_groups(page: Page) -> list[str]:
    out = []
    for g in page.rep.groups:
        head, rows = drop_empty(group_head(g), group_cells(g), keys=3)
        if rows:
            out += ["", f"## {page.rep.label(g.key)}: system × {g.column}", "", *md_table(head, rows)]
    return out


#: report.md after its metrics table, notes and overview image, top to bottom.
MARKDOWN_SECTIONS: tuple[Callable[[Page], list[str]], ...] = (
    _md_stats,
    _md_shares,
    _md_labels,
    _md_systems,
    _md_corrected,
    _md_groups,
    _md_experiments,
)


def render_markdown(rep: StoreReport, overview: str | None = None, names: Mapping[str, str] | None = None) -> str:
    """The report as Markdown; ``overview``: the overview PNG's file name, linked when given (``names``: see
    :class:`Page`); the panels left out are listed with why."""
    page = Page(rep, names or {}, explorer=False)
    lines = ["# greval report", "", f"store `{rep.store}`", "", *_md_metrics(page)]
    if overview:
        lines += ["", f"![overview]({overview})"]
    lines += [f"- left out: {o.title} — {o.why}" for o in plots.overview(rep)[1]]
    for section in MARKDOWN_SECTIONS:
        lines += section(page)
    return "\n".join(lines) + "\n"
