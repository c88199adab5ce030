"""Self-contained HTML (PNG charts embedded as base64), Markdown and JSON renderings of an AgreementReport.

The HTML needs the frame too, for the per-item disagreement gallery (sortable; shows optional `reason` /
`comment` columns next to the judge and human answers). Rendering never recomputes statistics.

Both renderings follow the same rules: a missing value (None, NaN, pandas NA / NaT) is an empty cell, never the
text "None" / "nan"; signed distances ("steps", mean_signed_steps ...) appear only for ordered scales; and every
note the report carries (headline estimates, prevalence, ceiling, slices, report notes) is shown.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from greval.agreement.design import report_name
from greval.agreement.models import (
    AgreementReport,
    AgreementScale,
    CalibrationReport,
    CategoricalReport,
    Ceiling,
    ConsistencyReport,
    DesignReport,
    GroupFigures,
    Prevalence,
    ReviewerRow,
    ReviewersReport,
)
from greval.agreement.prepare import Prepared, is_null, prepare
from greval.agreement.stats import rankdata
from greval.agreement.threshold import judge_from_score
from greval.dataset.frame import Frame
from greval.report.format import best_first, fmt_ci, fmt_corrected, fmt_number, fmt_value_ci
from greval.report.palette import HEAT_HIGH, HEAT_LOW, ink, mix
from greval.report.plots import pyplot

if TYPE_CHECKING:
    import pandas as pd

GALLERY_LIMIT = 500
# Headline rows that only mean something when the labels have an order (judge above/below, signed distance).
ORDERED_ONLY = ("judge_above_rate", "judge_below_rate", "mean_signed_steps", "mean_signed_score")


def _missing(x: object) -> bool:
    """None, NaN, pandas NA / NaT, numpy NaT: a value that is not there."""
    if is_null(x):
        return True
    if isinstance(x, float | np.floating):
        return bool(np.isnan(x))
    if isinstance(x, np.datetime64 | np.timedelta64):
        return bool(np.isnat(x))
    return False


def _cell(x: object) -> str:
    """The text of one table cell: empty for a missing value, never "None" / "nan" / "<NA>" / "NaT"."""
    return "" if _missing(x) else str(x)


def _ordered(scale: AgreementScale) -> bool:
    """Positions on the scale mean something: a value scale, or labels declared low → high."""
    return scale.kind == "value" or scale.ordered


def _png(fig: Any, alt: str = "chart") -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt = pyplot()

    plt.close(fig)
    return (
        f'<img alt="{html.escape(alt)}" src="data:image/png;base64,' + base64.b64encode(buf.getvalue()).decode() + '">'
    )


RELIABILITY_ALT = "reliability diagram"


def reliability_diagram(cal: CalibrationReport) -> str:
    """The reliability diagram as an embedded PNG: each non-empty bin's accuracy (with its Wilson interval)
    at its mean confidence, its row count written above it, the bins' ranges as light bars, and the
    diagonal a calibrated judge would sit on."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(4.5, 4.2))
    ax.plot([0, 1], [0, 1], color="#888", linestyle="--", linewidth=1, label="calibrated")
    used = [b for b in cal.bins if b.count and b.accuracy is not None and b.mean_confidence is not None]
    for b in used:
        assert b.accuracy is not None
        ax.bar((b.low + b.high) / 2, b.accuracy, width=b.high - b.low, color="#4c72b0", alpha=0.25, edgecolor="#4c72b0")
    if used:
        x = np.array([b.mean_confidence for b in used], dtype=float)
        y = np.array([b.accuracy for b in used], dtype=float)
        lo = np.array([b.ci_low if b.ci_low is not None else a for b, a in zip(used, y, strict=True)], dtype=float)
        hi = np.array([b.ci_high if b.ci_high is not None else a for b, a in zip(used, y, strict=True)], dtype=float)
        ax.errorbar(
            x,
            y,
            yerr=[np.clip(y - lo, 0, None), np.clip(hi - y, 0, None)],
            fmt="o",
            color="#c44e52",
            capsize=3,
            label="people agree",
        )
        for xi, yi, b in zip(x, hi, used, strict=True):
            ax.annotate(f"n={b.count}", (xi, min(yi + 0.02, 1.02)), ha="center", va="bottom", fontsize=7)
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1.08)
    ax.set_xlabel("judge confidence")
    ax.set_ylabel("share of rows where the human agrees")
    ece = fmt_number(cal.ece.value)
    ax.set_title(f"reliability (ECE {ece})")
    ax.legend(loc="upper left", fontsize=8)
    return _png(fig, RELIABILITY_ALT)


CALIBRATION_HEADER = ["confidence", "rows", "weight", "mean confidence", "accuracy", "CI"]


def calibration_rows(cal: CalibrationReport, d: int = 3) -> list[list[str]]:
    """One row per non-empty bin (every renderer): range, rows, weight, mean confidence, accuracy, Wilson CI."""
    rows = []
    for i, b in enumerate(cal.bins):
        if not b.count:
            continue
        close = "]" if i == len(cal.bins) - 1 else ")"
        rows.append(
            [
                f"[{b.low:.2f}, {b.high:.2f}{close}",
                str(b.count),
                fmt_number(b.weight, 1),
                fmt_number(b.mean_confidence, d),
                fmt_number(b.accuracy, d),
                fmt_ci(b, d),
            ]
        )
    return rows


def calibration_figures(cal: CalibrationReport, d: int = 3) -> str:
    """ECE with its CI, the ECE a calibrated judge would show, MCE and Brier, in one line (every renderer)."""
    parts = [f"ECE {fmt_value_ci(cal.ece, d)}"]
    if cal.ece_if_calibrated is not None:
        parts.append(f"a calibrated judge: ECE ≤ {fmt_number(cal.ece_if_calibrated, d)} (95 %)")
    parts.append(f"MCE {fmt_number(cal.mce.value, d)}")
    parts.append(f"Brier {fmt_value_ci(cal.brier, d)}")
    parts.append(f"accuracy {fmt_number(cal.accuracy, d)} vs mean confidence {fmt_number(cal.mean_confidence, d)}")
    how = f"{cal.n} rows" + (", weighted 1/π" if cal.weighted else "")
    if cal.resample_unit:
        how += f"; CIs resample {cal.resample_unit}"
    return "; ".join(parts) + f" ({how})"


def calibration_notes(cal: CalibrationReport) -> list[str]:
    """Everything the calibration report says beside its figures: its notes and undefined figures' notes."""
    out = list(cal.notes)
    out += [e.note for e in (cal.ece, cal.mce, cal.brier) if e.note]
    return list(dict.fromkeys(out))


CALIBRATION_TITLE = "Is the judge's confidence calibrated?"


#: Where a chart's legend goes: beside the axes, never over a bar (bbox_inches="tight" keeps it in the image).
LEGEND = {"loc": "upper left", "bbox_to_anchor": (1.02, 1.0), "borderaxespad": 0.0, "fontsize": 8}


def distribution_figure(cat: CategoricalReport) -> Any:
    """Each label's share of the items, people's and the judge's side by side (the legend beside the axes)."""
    plt = pyplot()

    fig, ax = plt.subplots(figsize=(4.5, 3))
    x = np.arange(len(cat.labels))
    ax.bar(x - 0.2, [b.human_share for b in cat.bias.per_label], 0.4, label="human")
    ax.bar(x + 0.2, [b.judge_share for b in cat.bias.per_label], 0.4, label="judge")
    ax.set_xticks(x, cat.labels, rotation=30, ha="right")
    ax.set_ylabel("share of items")
    ax.set_title("label distributions")
    ax.legend(**LEGEND)
    return fig


def reliability_figure(cat: CategoricalReport) -> Any:
    """Each label's precision and recall (the legend beside the axes)."""
    plt = pyplot()

    rows = [r for r in cat.per_label if r.label in cat.labels]
    fig, ax = plt.subplots(figsize=(4.5, 3))
    x = np.arange(len(rows))
    ax.bar(x - 0.2, [r.precision for r in rows], 0.4, label="precision")
    ax.bar(x + 0.2, [r.recall for r in rows], 0.4, label="recall")
    ax.set_xticks(x, [r.label for r in rows], rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.set_title("per-label reliability")
    ax.legend(**LEGEND)
    return fig


CellHref = Callable[[str, str], str]
"""Where a confusion cell's records are: (people's label, the judge's) → an address (the record explorer's)."""


def confusion_table(cat: CategoricalReport, cell_href: CellHref | None = None) -> str:
    """The confusion matrix as a heatmap table: rows people's labels, columns the judge's, each cell shaded by
    its count (greval.report.palette: white for none to dark blue for the most) with the count written in the
    colour that contrasts more (WCAG, :func:`greval.report.palette.ink`); with ``cell_href``, a count opens its
    records (an invalid-answer column has none to open)."""

    cm = cat.confusion
    top = max((v for row in cm.counts for v in row), default=0) or 1
    head = "".join(f'<th scope="col">{html.escape(j)}</th>' for j in cm.judge_labels)
    rows = []
    for h, row in zip(cm.labels, cm.counts, strict=True):
        cells = []
        for j, n in zip(cm.judge_labels, row, strict=True):
            bg = mix(HEAT_LOW, HEAT_HIGH, n / top)
            text: str = str(n)
            if cell_href is not None and n and j in cat.labels:
                text = f'<a href="{html.escape(cell_href(h, j))}">{n}</a>'
            title = html.escape(f"people {h}, judge {j}: {n}")
            cells.append(f'<td style="background:{bg};color:{ink(bg)}" title="{title}">{text}</td>')
        rows.append(f'<tr><th scope="row">{html.escape(h)}</th>{"".join(cells)}</tr>')
    how = " A count opens its records in the record explorer." if cell_href is not None else ""
    return (
        '<div class="confusion" id="confusion"><p class="note">Confusion: rows people\'s label, columns the '
        f"judge's.{how}</p>"
        f'<table class="heatmap"><thead><tr><th>human \\ judge</th>{head}</tr></thead><tbody>{"".join(rows)}'
        "</tbody></table></div>"
    )


def _charts(report: AgreementReport, frame: Frame | pd.DataFrame) -> list[str]:
    """Judge-vs-human label distributions and per-label reliability (the confusion matrix is a table:
    :func:`confusion_table`), or, for values, the score distributions and a scatter."""
    plt = pyplot()

    out: list[str] = []
    cat = report.categorical
    if cat is not None and cat.labels:
        out.append(_png(distribution_figure(cat), "label distributions"))
        out.append(_png(reliability_figure(cat), "per-label reliability"))
    elif report.value is not None:
        prep, _ = _prepared(report, frame)
        if len(prep.hv):
            fig, ax = plt.subplots(figsize=(4.5, 3))
            ax.hist([prep.hv, prep.jv], bins=20, label=["human", "judge"])
            ax.set_title("score distributions")
            ax.legend(**LEGEND)
            out.append(_png(fig))
            fig, ax = plt.subplots(figsize=(4, 4))
            ax.scatter(prep.hv, prep.jv, s=8, alpha=0.5)
            ax.set_xlabel("human")
            ax.set_ylabel("judge")
            ax.set_title("judge vs human")
            out.append(_png(fig))
    return out


def _table(headers: Sequence[object], rows: Sequence[Sequence[object]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(_cell(h))}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(_cell(c))}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _md_cell(x: object) -> str:
    return _cell(x).replace("|", "\\|").replace("\n", " ")


def _md_table(headers: Sequence[object], rows: Sequence[Sequence[object]]) -> list[str]:
    return [
        "| " + " | ".join(_md_cell(h) for h in headers) + " |",
        "|" + "---|" * len(headers),
        *("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows),
    ]


def _notes_html(notes: Sequence[str]) -> str:
    return "".join(f'<p class="note">{html.escape(n)}</p>' for n in notes)


def _headline_rows(report: AgreementReport, d: int = 3) -> list[list[str]]:
    rows = [[k, fmt_number(e.value, d), fmt_ci(e, d), str(e.n), _cell(e.note)] for k, e in report.metrics.items()]
    if report.categorical is not None:
        b = report.categorical.bias
        for name, est in (
            ("disagreement_rate", b.disagreement_rate),
            ("judge_above_rate", b.judge_above_rate),
            ("judge_below_rate", b.judge_below_rate),
            ("mean_signed_steps", b.mean_signed_steps),
            ("mean_signed_score", b.mean_signed_score),
        ):
            if est is not None and (name not in ORDERED_ONLY or _ordered(report.scale)):
                rows.append([name, fmt_number(est.value, d), fmt_ci(est, d), str(est.n), _cell(est.note)])
    return rows


def prevalence_notes(p: Prevalence) -> list[str]:
    """What to say under the prevalence table: the correction's own note (clipping ...) and the notes on the
    corrected shares. When the correction is undefined, its explanation is on every share (the CLI prints
    the first); a note on only some labels is prefixed with them."""
    out = [p.note] if p.note else []
    notes = [e.note for e in p.corrected]
    for n in dict.fromkeys(x for x in notes if x):
        labels = [lab for lab, x in zip(p.labels, notes, strict=True) if x == n]
        out.append(n if len(labels) == len(p.labels) else f"{', '.join(labels)}: {n}")
    return list(dict.fromkeys(out))


def _prevalence_title(p: Prevalence) -> str:
    return f"Prevalence ({p.method}; {p.n_judged} judged, {p.n_labelled} labelled)"


#: The two shares beside the corrected one, named with what each is over (the terminal's table says the same).
JUDGE_SHARE, HUMAN_SHARE = "judge (all judged)", "human (labelled)"
#: The prevalence table's columns (the agreement page; a store report's index writes the same corrected cells).
PREVALENCE_HEAD = ["label", JUDGE_SHARE, HUMAN_SHARE, "corrected [CI]", "note"]


def prevalence_rows(p: Prevalence, d: int = 3) -> list[list[str]]:
    """One row per label: the judge's share, people's, the corrected share with its CI ("undefined" when it is:
    greval.report.format.fmt_corrected, what the index writes too) and, in the row, what the reader must know
    of it (a judge no better than chance, a clipped correction, resamples where it is undefined)."""
    rows = []
    for i, lab in enumerate(p.labels):
        e = p.corrected[i]
        note = "; ".join(dict.fromkeys(n for n in (p.note, e.note) if n))
        rows.append([lab, fmt_number(p.observed[i], d), fmt_number(p.human[i], d), fmt_corrected(e.value, e, d), note])
    return rows


def _ceiling_rows(ce: Ceiling, d: int = 3) -> list[list[str]]:
    return [
        [label, fmt_number(e.value, d), fmt_ci(e, d), str(e.n), _cell(e.note)]
        for label, e in (
            (f"human–human mean {ce.metric}", ce.human_pairwise_mean),
            (f"judge–human mean {ce.metric}", ce.judge_pairwise_mean),
            (f"α {ce.alpha_level} (humans)", ce.human_alpha),
            (f"α {ce.alpha_level} (humans + judge)", ce.alpha_with_judge),
        )
    ]


def _pair_notes(ce: Ceiling) -> list[str]:
    """Why some annotator pairs have no value (they are left out of the means), one line per reason."""
    by_note: dict[str, list[str]] = {}
    for p in [*ce.human_pairs, *ce.judge_pairs]:
        if p.note:
            by_note.setdefault(p.note, []).append(f"{p.a}–{p.b}")
    return [f"{note} (pairs: {', '.join(pairs)})" for note, pairs in by_note.items()]


#: How the reviewers table names the judge's row (every compared item).
JUDGE_ROW = "judge (every item)"


def reviewers_title(rev: ReviewersReport) -> str:
    """The reviewers table's title: the gold and how many items it settles."""
    c = rev.counts
    extra = "".join(
        f", {n} {what}" for n, what in ((c.adjudicated, "adjudicated"), (c.without_gold, "without a gold")) if n
    )
    return f"Reviewers against the gold: {rev.gold.describe()} ({c.with_gold} items with a gold, {c.tied} tied{extra})"


def _timed(rev: ReviewersReport) -> bool:
    """Whether any reviewer's answers had times (the labels-per-hour column is shown only then)."""
    return any(r.labels_per_hour is not None for r in rev.rows)


def reviewers_header(rev: ReviewersReport) -> list[str]:
    """The reviewers table's columns: the pairwise figure for the reviewer and the judge on the reviewer's
    items, their paired difference, then the reviewer's other figures and labels per hour (when timed)."""
    m = rev.metric
    others = [f for f in rev.figures if f != m]
    head = ["reviewer", "n", f"{m} [CI]", f"judge {m}, same items [CI]", "judge − reviewer [CI]", "judge is", *others]
    return head + (["labels/h"] if _timed(rev) else [])


def reviewer_rows(rev: ReviewersReport, d: int = 3) -> list[list[str]]:
    """One row per reviewer, then the judge's over every compared item (the headline's figures)."""
    timed = _timed(rev)
    return [_reviewer_cells(rev, r, d) + ([_per_hour(r)] if timed else []) for r in rev.rows]


def _per_hour(r: ReviewerRow) -> str:
    return "" if r.labels_per_hour is None else fmt_number(r.labels_per_hour.value, 1)


def _reviewer_cells(rev: ReviewersReport, r: ReviewerRow, d: int) -> list[str]:
    m = rev.metric
    others = [fmt_value_ci(r.figures[f], d) if f in r.figures else "" for f in rev.figures if f != m]
    if r.role == "judge":
        return [JUDGE_ROW, str(r.n), fmt_value_ci(r.figures[m], d), "", "", "", *others]
    judge = fmt_value_ci(r.judge[m], d) if m in r.judge else ""
    diff = fmt_value_ci(r.difference[m], d) if m in r.difference else ""
    return [r.name, str(r.n), fmt_value_ci(r.figures[m], d), judge, diff, r.judge_vs or "", *others]


def reviewer_sentences(rev: ReviewersReport, d: int = 3) -> list[str]:
    """The sentence a team wants, per reviewer: does the judge agree with the gold as well as they do?"""
    words = {"better": "better than", "as well": "as well as", "worse": "less well than"}
    out = []
    for r in rev.rows:
        diff = r.difference.get(rev.metric)
        if r.judge_vs is None or diff is None:
            continue
        out.append(
            f"The judge agrees with the gold {words[r.judge_vs]} {r.name} does: judge − {r.name} {rev.metric} "
            f"{fmt_value_ci(diff, d)} on their {r.n} items"
            + (" (the CI spans 0)" if r.judge_vs == "as well" else "")
            + "."
        )
    return out


def pair_rows(rev: ReviewersReport, d: int = 3) -> list[list[str]]:
    """Each pair of people: their agreement on the items both labelled (the ceiling's pairs), with its CI."""
    return [[p.a, p.b, str(p.estimate.n), fmt_value_ci(p.estimate, d), _cell(p.estimate.note)] for p in rev.pairs]


def pair_matrix(rev: ReviewersReport, d: int = 3) -> tuple[list[str], list[list[str]]]:
    """The pairs as a matrix (each person against each other, "value [CI] (n)"), for the page."""
    names = list(dict.fromkeys(n for p in rev.pairs for n in (p.a, p.b)))
    cell = {}
    for p in rev.pairs:
        cell[p.a, p.b] = cell[p.b, p.a] = f"{fmt_value_ci(p.estimate, d)} (n = {p.estimate.n})"
    return names, [[a, *(cell.get((a, b), "") for b in names)] for a in names]


def _reviewer_confusions(rev: ReviewersReport) -> str:
    """Each reviewer's labels against the gold (counts), and what the label model learned of them."""
    parts = []
    for r in rev.rows:
        if r.confusion is None:
            continue
        head = ["gold \\ " + r.name, *r.confusion.judge_labels]
        body = [[lab, *map(str, row)] for lab, row in zip(r.confusion.labels, r.confusion.counts, strict=True)]
        parts.append(f"<h3>{html.escape(r.name)} against the gold (counts)</h3>" + _table(head, body))
        if r.model_confusion is not None:
            model = [
                [lab, *(fmt_number(p) for p in row)] for lab, row in zip(rev.labels, r.model_confusion, strict=True)
            ]
            competence = "" if r.competence is None else f"; competence {fmt_number(r.competence)}"
            parts.append(
                f"<p>{html.escape(rev.gold.method)}: P({html.escape(r.name)}'s label | true label){competence}</p>"
                + _table(["true \\ said", *rev.labels], model)
            )
    return "".join(parts)


def _reviewers_html(rev: ReviewersReport) -> str:
    names, matrix = pair_matrix(rev)
    return (
        f"<h2>{html.escape(reviewers_title(rev))}</h2>"
        + _table(reviewers_header(rev), reviewer_rows(rev))
        + "".join(f"<p>{html.escape(s)}</p>" for s in reviewer_sentences(rev))
        + (
            f"<h3>People with each other ({html.escape(rev.metric)})</h3>" + _table(["", *names], matrix)
            if rev.pairs
            else ""
        )
        + _reviewer_confusions(rev)
        + _notes_html(rev.notes)
    )


RecordHref = Callable[[str], str]
"""Where one record's page is: record id → an address (the record explorer's)."""

#: Disagreement examples the reviewers page shows, at most.
DISAGREEMENT_EXAMPLES = 12


def disagreements(rev: ReviewersReport, frame: Frame | pd.DataFrame) -> tuple[list[str], list[list[str]], int]:
    """(header, rows, how many in all) of the items whose reviewers gave different answers, in the frame's order
    (at most :data:`DISAGREEMENT_EXAMPLES` rows): the record, each reviewer's answer, the gold, the judge's."""
    table = Frame.of(frame).to_pandas()
    people = [r.name for r in rev.rows if r.role == "annotator"]
    gold = {g.item: g for g in rev.gold_labels}
    rows: list[list[str]] = []
    found = 0
    for item, grp in table.groupby("item", sort=False):
        said = {str(a): _cell(h) for a, h in zip(grp["annotator"], grp["human"], strict=True) if not is_null(h)}
        if len(set(said.values())) < 2:
            continue
        found += 1
        if len(rows) < DISAGREEMENT_EXAMPLES:
            g = gold.get(str(item))
            shown = "" if g is None else g.label if g.label is not None else "tie: " + " / ".join(g.tied)
            first = grp.iloc[0]
            rows.append([_cell(first["record_id"]), *(said.get(p, "") for p in people), shown, _cell(first["judge"])])
    return ["record", *people, "gold", "judge"], rows, found


def _disagreements_html(rev: ReviewersReport, frame: Frame | pd.DataFrame, record_href: RecordHref | None) -> str:
    head, rows, found = disagreements(rev, frame)
    body = [
        [f'<a href="{html.escape(record_href(r[0]))}">{html.escape(r[0])}</a>' if record_href else html.escape(r[0])]
        + [html.escape(c) for c in r[1:]]
        for r in rows
    ]
    how = " A record opens its page in the record explorer." if record_href is not None else ""
    cells = "".join("<tr>" + "".join(f"<td>{c}</td>" for c in r) + "</tr>" for r in body)
    heads = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    return (
        f"<h2>Disagreements between reviewers ({len(rows)} of {found} shown)</h2>"
        f'<p class="note">Items whose reviewers gave different answers, in the labels\' order.{how}</p>'
        f'<table class="sortable"><thead><tr>{heads}</tr></thead><tbody>{cells}</tbody></table>'
    )


def render_reviewers_html(
    report: AgreementReport, frame: Frame | pd.DataFrame, title: str, record_href: RecordHref | None = None
) -> str:
    """The reviewers page: each person against the gold with the judge beside them, people with each other
    pair by pair (the ceiling's matrix), their confusions, and examples of their disagreements linked to the
    records' pages (``record_href``). One self-contained HTML page; ``report`` must carry a gold."""
    rev = report.reviewers
    if rev is None:
        raise ValueError("the reviewers page needs an agreement report computed with a gold")
    parts = [f"<h1>{html.escape(title)}</h1>", _reviewers_html(rev), _disagreements_html(rev, frame, record_href)]
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS}</style></head><body>{''.join(parts)}<script>{SORT_JS}</script></body></html>"
    )


def _slice_rows(
    report: AgreementReport, sub: dict[str, AgreementReport], d: int = 3
) -> tuple[list[str], list[list[str]]]:
    """Metric names and one row per slice value: n, each metric with its CI, and the notes behind them."""
    names = list(next(iter(sub.values())).metrics) if sub else []
    weighted = slice_design_names(report, sub)
    rows = []
    for val, r in sub.items():
        figures = [r.metrics.get(m) for m in names]
        notes = [f"{m}: {e.note}" for m, e in zip(names, figures, strict=True) if e is not None and e.note]
        notes += [n for n in r.notes if n not in report.notes]
        rows.append(
            [
                val,
                str(r.counts.items_compared),
                *("" if e is None else fmt_value_ci(e, d) for e in figures),
                *slice_design_cells(r, weighted, d),
                "; ".join(notes),
            ]
        )
    return names + [f"{n} (1/π)" for n in weighted], rows


def slice_design_names(report: AgreementReport, sub: dict[str, AgreementReport]) -> list[str]:
    """The design-weighted figures shown per slice when the items were not a simple random sample: a slice
    is a domain of the same design, its items weighted as in the whole."""
    if not any(r.design is not None for r in sub.values()):
        return []
    return ["accuracy", "kappa"] if report.scale.kind == "categorical" else ["mean_human", "mae"]


def slice_design_cells(r: AgreementReport, names: list[str], d: int = 3) -> list[str]:
    """One slice's design-weighted figures with their CIs; where its items all weigh the same, its plain
    figures are the design's own and are shown."""
    found = {e.name: e for e in r.design.estimates} if r.design is not None else {}
    cells = []
    for name in names:
        e = found.get(name)
        if e is not None:
            cells.append(f"{fmt_number(e.weighted, d)} {fmt_ci(e, d)}".strip())
            continue
        plain = r.metrics.get(report_name(name)) if r.design is None else None
        cells.append("" if plain is None else fmt_value_ci(plain, d))
    return cells


def _prepared(report: AgreementReport, frame: Frame | pd.DataFrame) -> tuple[Prepared, Frame]:
    """The compared items as the report saw them: with the judge's labels from its score when a threshold
    made them (and only the evaluated rows)."""
    if report.threshold is not None:
        frame = judge_from_score(frame, report.threshold, report.options)
    table = Frame.of(frame)
    return prepare(table, report.scale, report.options, _gold_values(report)), table


def _gold_values(report: AgreementReport) -> dict[str, float | None] | None:
    """The gold the report compared the judge with, as prepare reads it (None: people's consensus)."""
    rev = report.reviewers
    if rev is None:
        return None
    labels = report.scale.labels or []
    categorical = report.scale.kind == "categorical"

    def value(label: str | None) -> float | None:
        return None if label is None else float(labels.index(label)) if categorical else float(label)

    return {g.item: value(g.label) for g in rev.gold_labels}


def _group_rows(groups: Sequence[GroupFigures], d: int = 3) -> tuple[list[str], list[list[str]]]:
    """Per-group protocol: one row per group with each figure the headline averages (and their notes)."""
    names = list(dict.fromkeys(m for g in groups for m in g.metrics))
    rows = []
    for g in groups:
        notes = [f"{m}: {e.note}" for m, e in g.metrics.items() if e.note]
        rows.append([g.group, str(g.n), *(fmt_number(g.metrics[m].value, d) if m in g.metrics else "" for m in names)])
        rows[-1].append("; ".join(notes))
    return names, rows


def _method_lines(report: AgreementReport) -> list[str]:
    """How the figures were made: the resampling unit and the threshold that turned scores into labels."""
    out = []
    b = report.bootstrap
    if b is not None:
        out.append(f"Bootstrap: {b.resamples} resamples of {b.unit} ({b.n_units}), seed {b.seed}.")
    th = report.threshold
    if th is not None:
        op = ">" if th.rule == "gt" else "≥"
        how = f" (chosen by {th.chosen_by} on {th.select_on})" if th.chosen_by else ""
        out.append(f"Judge labels: {th.pos_label} when score {op} {th.threshold:g}, else {th.neg_label}{how}.")
    return out


def gallery(
    report: AgreementReport, frame: Frame | pd.DataFrame, extra: Sequence[str] = ("reason", "comment")
) -> pd.DataFrame:
    """Items where the judge departs from people.

    Categorical: every disagreement. Values: by |judge − human| when the scale has bounds (both sides on
    one scale), else by the gap between percentile ranks (judge and people may use different scales).
    """
    import pandas as pd

    prep, table = _prepared(report, frame)
    frame = table.to_pandas()
    cols = [c for c in extra if c in frame.columns]
    if not prep.has_judge:
        return pd.DataFrame({"item": [], "human": [], "judge": []})
    first = frame.assign(item=frame["item"].astype(str)).groupby("item", sort=False).first()
    if report.scale.kind == "categorical":
        labels = list(report.scale.labels or [])
        judge_names = [*labels, "<invalid>"]
        data = pd.DataFrame(
            {
                "item": prep.items,
                "human": [labels[c] for c in prep.h],
                "judge": [judge_names[c] for c in prep.j_nom],
            }
        )
        data = data[data["human"] != data["judge"]]
        if _ordered(report.scale):  # unordered labels: positions are arbitrary, a distance would be junk
            data["steps"] = [
                "" if j >= len(labels) else str(j - h)
                for h, j in zip(prep.h[data.index], prep.j_nom[data.index], strict=True)
            ]
    else:
        data = pd.DataFrame({"item": prep.items, "human": prep.hv, "judge": prep.jv})
        data["error"] = data["judge"] - data["human"]
        n = max(len(data), 1)
        # Scale-free disagreement (what Spearman sees): gap between the item's percentile ranks.
        data["rank_gap"] = (rankdata(prep.jv) - rankdata(prep.hv)) / n if len(data) else []
        same_scale = report.scale.min is not None or report.scale.max is not None
        key = data["error"] if same_scale else data["rank_gap"]
        data = data.reindex(key.abs().sort_values(ascending=False, kind="stable").index)
        data = data[data["error"] != 0]
    for c in cols:
        data[c] = [first[c].get(i, "") for i in data["item"]]
    return data.head(GALLERY_LIMIT).reset_index(drop=True)


SORT_JS = """
document.querySelectorAll('table.sortable th').forEach((th, i) => th.addEventListener('click', () => {
  const tb = th.closest('table').tBodies[0], rows = Array.from(tb.rows), asc = th.dataset.asc !== '1';
  th.dataset.asc = asc ? '1' : '0';
  const key = r => { const t = r.cells[i].innerText, n = parseFloat(t); return isNaN(n) ? t : n; };
  rows.sort((a, b) => { const x = key(a), y = key(b);
    return (x > y ? 1 : x < y ? -1 : 0) * (asc ? 1 : -1); });
  rows.forEach(r => tb.appendChild(r));
}));
"""

CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1100px;color:#222}
table{border-collapse:collapse;margin:1em 0;font-size:14px}td,th{border:1px solid #ddd;padding:3px 8px}
th{background:#f3f3f3;cursor:pointer}td{vertical-align:top}.charts img{margin:0 1em 1em 0}
.note{color:#666;font-size:13px}
table.heatmap td{text-align:center;min-width:4.5em;padding:10px 8px;font-size:15px;font-variant-numeric:tabular-nums}
table.heatmap a{color:inherit;font-weight:600}table.heatmap th{cursor:default}
"""


def design_rows(design: DesignReport, d: int = 3) -> list[list[str]]:
    """The design-weighted figures as table rows: figure, weighted, CI, as if random, note (every renderer)."""
    return [
        [e.name, fmt_number(e.weighted, d), fmt_ci(e, d), fmt_number(e.unweighted, d), e.note or ""]
        for e in design.estimates
    ]


DESIGN_HEADER = ["figure", "weighted (1/π)", "CI", "as if random", "note"]


def _html_sections(report: AgreementReport) -> list[str]:
    """The page's sections between the charts and the slices: classification report and prevalence, scores,
    human ceiling, design-weighted figures, calibration (each when the report has it)."""
    parts: list[str] = []
    cat = report.categorical
    if cat is not None:
        parts.append(
            "<h2>Classification report</h2>"
            + _table(
                ["label", "precision", "recall", "f1", "support"],
                [
                    [r.label, fmt_number(r.precision), fmt_number(r.recall), fmt_number(r.f1), str(r.support)]
                    for r in cat.per_label
                ],
            )
        )
        if cat.prevalence is not None:
            p = cat.prevalence
            parts.append(f"<h2>{html.escape(_prevalence_title(p))}</h2>" + _table(PREVALENCE_HEAD, prevalence_rows(p)))
    if report.value is not None:
        v = report.value
        parts.append(
            "<h2>Scores</h2>"
            + _table(
                ["side", "count", "mean", "median", "std", "min", "max"],
                [
                    [
                        s,
                        str(d.count),
                        fmt_number(d.mean),
                        fmt_number(d.median),
                        fmt_number(d.std),
                        fmt_number(d.min),
                        fmt_number(d.max),
                    ]
                    for s, d in (("judge", v.judge), ("human", v.human))
                ],
            )
        )
    if report.ceiling is not None:
        ce = report.ceiling
        parts.append(
            f"<h2>Human ceiling ({ce.n_annotators} annotators, {ce.n_items_multi} items with ≥2)</h2>"
            + _table(["figure", "value", "CI", "n", "note"], _ceiling_rows(ce))
            + _notes_html(_pair_notes(ce))
        )
    if report.reviewers is not None:
        parts.append(_reviewers_html(report.reviewers))
    if report.design is not None:
        parts.append(
            f"<h2>Design-weighted: over every judged item ({report.design.resamples} stratified resamples)</h2>"
            + _table(DESIGN_HEADER, design_rows(report.design))
            + _notes_html(report.design.notes)
        )
    cal = report.calibration
    if cal is not None:
        parts.append(
            f"<h2>{html.escape(CALIBRATION_TITLE)}</h2>"
            + f'<p class="calibration">{html.escape(calibration_figures(cal))}</p>'
            + ('<div class="charts">' + reliability_diagram(cal) + "</div>" if cal.n else "")
            + _table(CALIBRATION_HEADER, calibration_rows(cal))
            + _notes_html(calibration_notes(cal))
        )
    return parts


def render_html(
    report: AgreementReport,
    frame: Frame | pd.DataFrame,
    title: str = "Judge–human agreement",
    extra: Sequence[str] = ("reason", "comment"),
    cell_href: CellHref | None = None,
    reviewers_href: str | None = None,
) -> str:
    """One self-contained HTML page: headline, confusion heatmap, charts, classification report, slices,
    ceiling, gallery; ordered labels best first. ``cell_href``: where each confusion count's records are (a
    store report's pages link them to its record explorer); ``reviewers_href``: the reviewers page's address."""
    report = best_first(report)
    c = report.counts
    parts = [f"<h1>{html.escape(title)}</h1>"]
    if reviewers_href is not None:
        parts.append(
            f'<p><a href="{html.escape(reviewers_href)}">Reviewers</a>: each person against the gold, people '
            "with each other pair by pair, and their disagreements.</p>"
        )
    parts.append(
        f"<p>{c.items_compared} items compared of {c.items} ({c.rows} rows; "
        f"{c.items_missing_human} without human, "
        f"{c.items_invalid_judge} invalid judge answers [{html.escape(report.options.invalid)}], "
        f"{c.items_dropped_invalid} dropped, {c.items_tied_majority} tied majority).</p>"
    )
    parts.extend(f"<p>{html.escape(line)}</p>" for line in _method_lines(report))
    parts.append("<h2>Headline</h2>" + _table(["metric", "value", "CI", "n", "note"], _headline_rows(report)))
    if report.per_group:
        names, rows = _group_rows(report.per_group)
        parts.append(
            f"<h2>Per group ({len(rows)}; the headline is their unweighted mean)</h2>"
            + _table(["group", "n", *names, "note"], rows, "sortable")
        )
    if report.categorical is not None and report.categorical.labels:
        parts.append(confusion_table(report.categorical, cell_href))
    parts.append('<div class="charts">' + "".join(_charts(report, frame)) + "</div>")
    parts += _html_sections(report)
    for col, sub in report.slices.items():
        names, rows = _slice_rows(report, sub)
        parts.append(f"<h2>By {html.escape(col)}</h2>" + _table([col, "n", *names, "note"], rows, "sortable"))
    g = gallery(report, frame, extra)
    parts.append(f"<h2>Disagreements ({len(g)} shown, click a column to sort)</h2>")
    parts.append(_table(list(g.columns), list(g.itertuples(index=False)), "sortable"))
    parts.append(_notes_html(report.notes))
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS}</style></head><body>{''.join(parts)}<script>{SORT_JS}</script></body></html>"
    )


def render_markdown(report: AgreementReport, decimals: int = 3) -> str:
    """A short Markdown summary: counts, headline table, ceiling, then every note (prevalence, ceiling,
    slices, report)."""
    report = best_first(report)
    d = decimals
    c = report.counts
    lines = [
        f"**{c.items_compared} items compared** of {c.items} ({c.items_missing_human} without human, "
        f"{c.items_invalid_judge} invalid judge answers, policy `{report.options.invalid}`)",
        "",
        *[f"{line}  " for line in _method_lines(report)],
        "",
        *_md_table(["metric", "value", "CI", "n", "note"], _headline_rows(report, d)),
    ]
    if report.per_group:
        names, rows = _group_rows(report.per_group, d)
        lines += ["", f"Per group ({len(rows)}; the headline is their unweighted mean):", ""]
        lines += _md_table(["group", "n", *names, "note"], rows)
    notes: list[str] = []
    cat = report.categorical
    if cat is not None and cat.prevalence is not None:
        notes += [f"prevalence: {n}" for n in prevalence_notes(cat.prevalence)]
    if report.ceiling is not None:
        ce = report.ceiling
        lines += [
            "",
            f"Human ceiling: human–human mean {ce.metric} {fmt_value_ci(ce.human_pairwise_mean, d)}, "
            f"judge–human {fmt_value_ci(ce.judge_pairwise_mean, d)}",
        ]
        notes += [f"ceiling, {figure}: {note}" for figure, *_, note in _ceiling_rows(ce, d) if note]
        notes += [f"ceiling: {n}" for n in _pair_notes(ce)]
    rev = report.reviewers
    if rev is not None:
        lines += ["", f"{reviewers_title(rev)}:", "", *_md_table(reviewers_header(rev), reviewer_rows(rev, d))]
        lines += ["", *(f"{line}  " for line in reviewer_sentences(rev, d))]
        if rev.pairs:
            lines += ["", *_md_table(["a", "b", "n", rev.metric, "note"], pair_rows(rev, d))]
        notes += [f"reviewers: {n}" for n in rev.notes]
    if report.design is not None:
        lines += ["", "Design-weighted (1/π), over every judged item:", ""]
        lines += _md_table(DESIGN_HEADER, design_rows(report.design, d))
        notes += [f"design: {n}" for n in report.design.notes]
    cal = report.calibration
    if cal is not None:
        lines += ["", f"{CALIBRATION_TITLE} {calibration_figures(cal, d)}", ""]
        if cal.n:
            lines += _md_table(CALIBRATION_HEADER, calibration_rows(cal, d))
        notes += [f"calibration: {n}" for n in calibration_notes(cal)]
    for col, sub in report.slices.items():
        _, rows = _slice_rows(report, sub, d)
        notes += [f"by {col} = {row[0]}: {row[-1]}" for row in rows if row[-1]]
    notes += report.notes
    lines += [""] + [f"- {n}" for n in notes]
    return "\n".join(lines) + "\n"


def render_consistency_markdown(report: ConsistencyReport, decimals: int = 3) -> str:
    """The judge-vs-itself summary (--pair-by): counts, figures, per-group values, confusion, notes."""
    d = decimals
    c = report.counts
    a, b = report.runs
    lines = [
        f"**{c.items_paired} items paired** of {c.items} by `{report.column}` ({a} vs {b}; {c.items_one_run_only} "
        f"in one run only, {c.items_one_invalid} with one invalid answer, {c.items_both_invalid} with two, counted "
        f"as `{report.options.invalid_pairs}`)",
        "",
        *_md_table(
            ["metric", "value", "CI", "n", "note"],
            [[k, fmt_number(e.value, d), fmt_ci(e, d), str(e.n), _cell(e.note)] for k, e in report.metrics.items()],
        ),
    ]
    if report.per_group:
        names, rows = _group_rows(report.per_group, d)
        lines += ["", "Per group:", "", *_md_table(["group", "n", *names, "note"], rows)]
    cm = report.confusion
    lines += ["", f"Confusion (rows {a}, columns {b}):", ""]
    lines += _md_table(
        [f"{a} \\ {b}", *cm.judge_labels], [[lab, *row] for lab, row in zip(cm.labels, cm.counts, strict=True)]
    )
    lines += [""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"
