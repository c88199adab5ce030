"""The reports as compact rich tables on a terminal: an agreement report (:func:`print_report`), the judge
against itself (:func:`print_consistency`), versions side by side (:func:`print_comparison`), the store
report (:func:`print_store_report`) and a review's status (:func:`print_review_status`). The cells are the
ones the files show (greval.report.tables, greval.report.agreement's row functions, greval.report.format's
numbers). The store report's tables (and the store's figures behind them) are imported where that report is
printed, so printing an agreement report does not load the store.

Every function prints to the console it is given. Notes may name option fields (greval.errors.option);
``names`` says how to write them (the CLI passes its flag table; by default they stay as fields)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from greval.agreement.models import (
    AgreementReport,
    CalibrationReport,
    Ceiling,
    ComparisonReport,
    ConsistencyReport,
    DesignReport,
    GroupFigures,
    Prevalence,
    ReviewersReport,
    ValueReport,
)
from greval.errors import option, render_options
from greval.report.agreement import (
    CALIBRATION_HEADER,
    CALIBRATION_TITLE,
    DESIGN_HEADER,
    HUMAN_SHARE,
    JUDGE_SHARE,
    calibration_figures,
    calibration_notes,
    calibration_rows,
    design_rows,
    pair_rows,
    prevalence_notes,
    reviewer_rows,
    reviewer_sentences,
    reviewers_header,
    reviewers_title,
    slice_design_cells,
    slice_design_names,
)
from greval.report.compare import AGREE_HEAD, CHANGE_HEAD, agreement_rows, change_rows
from greval.report.format import best_first, fmt_ci, fmt_number, fmt_value_ci
from greval.report.layout import print_table, say, wrap_plain
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

if TYPE_CHECKING:
    from greval.flows.review import ReviewStatus
    from greval.report.compare import Comparison
    from greval.report.models import StoreReport

HEADLINE_SLICE = {
    "categorical": ("accuracy", "cohen_kappa", "quadratic_kappa", "f1", "roc_auc", "pr_auc"),
    "value": ("pearson", "spearman", "kendall", "mae"),
}
GROUPS_PRINTED = 50
GROUP_NAME_WIDTH = 40

#: How option fields named in notes are written (the CLI: its flags).
Names = Mapping[str, str]


def _text(text: str, names: Names | None) -> str:
    """A note for the terminal: its option fields as ``names`` writes them, escaped (never read as markup)."""
    return escape(render_options(text, names or {}))


# ------------------------------------------------------------------------------------------------ agreement
def _group_table(title: str, groups: list[GroupFigures], keys: list[str], d: int) -> Table:
    """Per-group values (per-group protocol): the figures the headline averages."""
    t = Table(title=title, title_justify="left")
    t.add_column("group")
    t.add_column("n", justify="right")
    for k in keys:
        t.add_column(k, justify="right")
    for g in groups[:GROUPS_PRINTED]:
        name = g.group if len(g.group) <= GROUP_NAME_WIDTH else g.group[: GROUP_NAME_WIDTH - 1].rstrip() + "…"
        name = " ".join(name.split())  # a group id may be a whole text (e.g. a dialogue); the JSON keeps it whole
        t.add_row(
            escape(name), str(g.n), *[fmt_number(g.metrics[k].value if k in g.metrics else None, d) for k in keys]
        )
    if len(groups) > GROUPS_PRINTED:
        t.add_row(f"… {len(groups) - GROUPS_PRINTED} more (the JSON report has all)", "", *[""] * len(keys))
    return t


def _headline(report: AgreementReport, d: int, title: str) -> Table:
    t = Table(title=title, title_justify="left")
    t.add_column("metric", no_wrap=True)
    t.add_column("value", justify="right", no_wrap=True)
    t.add_column("CI", no_wrap=True)
    t.add_column("n", justify="right", no_wrap=True)
    t.add_column("note", overflow="fold")
    rows = dict(report.metrics)
    if report.categorical is not None:
        b = report.categorical.bias
        rows["disagreement_rate"] = b.disagreement_rate
        for name, est in (
            ("judge_above_rate", b.judge_above_rate),
            ("judge_below_rate", b.judge_below_rate),
            ("mean_signed_steps", b.mean_signed_steps),
            ("mean_signed_score", b.mean_signed_score),
        ):
            if est is not None:
                rows[name] = est
    for name, e in rows.items():
        t.add_row(name, fmt_number(e.value, d), fmt_ci(e, d), str(e.n), escape(e.note or ""))
    return t


def _counts(console: Console, report: AgreementReport, prefix: str, names: Names | None) -> None:
    """What was compared, what was left out and why, and the threshold that made labels of scores."""
    c = report.counts
    say(
        f"[bold]{prefix}{c.items_compared} items compared[/] of {c.items} ({c.rows} rows; "
        f"{c.items_missing_human} without human, {c.items_invalid_judge} invalid judge "
        f"({escape(report.options.invalid)}), {c.items_dropped_invalid} dropped, "
        f"{c.items_tied_majority} tied majority)",
        console,
        hang=2,
    )
    if c.rows_missing_judge or c.rows_missing_human:
        missing = _text(f"null, empty or {option('missing_values')}", names)
        say(
            f"  missing answers ({missing}): {c.rows_missing_judge} judge row(s), {c.rows_missing_human} human row(s)",
            console,
            hang=4,
        )
    th = report.threshold
    if th is not None:
        op = ">" if th.rule == "gt" else "≥"
        how = f", chosen by {th.chosen_by} on {th.select_on}" if th.chosen_by else ""
        say(f"  threshold: {escape(th.pos_label)} when score {op} {th.threshold:g}{escape(how)}", console, hang=4)


def _categorical(console: Console, report: AgreementReport, d: int) -> None:
    """Per-label precision / recall, the confusion matrix and the corrected prevalence."""
    cat = report.categorical
    if cat is None:
        return
    t = Table(title="classification report (human = truth)", title_justify="left")
    for col in ("label", "precision", "recall", "f1", "support"):
        t.add_column(col, justify="left" if col == "label" else "right")
    for r in cat.per_label:
        t.add_row(r.label, fmt_number(r.precision, d), fmt_number(r.recall, d), fmt_number(r.f1, d), str(r.support))
    print_table(t, console)
    cm = Table(title="confusion (rows human, columns judge)", title_justify="left")
    cm.add_column("human \\ judge")
    for lab in cat.confusion.judge_labels:
        cm.add_column(lab, justify="right")
    for lab, row in zip(cat.confusion.labels, cat.confusion.counts, strict=True):
        cm.add_row(lab, *[str(v) for v in row])
    print_table(cm, console)
    if cat.prevalence is not None:
        _prevalence(console, cat.prevalence, d)


def _prevalence(console: Console, p: Prevalence, d: int) -> None:
    pt = Table(title=f"prevalence ({p.method}; {p.n_judged} judged, {p.n_labelled} labelled)", title_justify="left")
    for col in ("label", JUDGE_SHARE, HUMAN_SHARE, "corrected", "CI"):
        pt.add_column(col, justify="left" if col == "label" else "right")
    for i, lab in enumerate(p.labels):
        e = p.corrected[i]
        corrected = "undefined" if e.value is None else fmt_number(e.value, d)
        pt.add_row(lab, fmt_number(p.observed[i], d), fmt_number(p.human[i], d), corrected, fmt_ci(e, d))
    print_table(pt, console)
    for note in prevalence_notes(p):  # the notes the pages show (the HTML in the table's rows)
        say(f"  prevalence: {note}", console, hang=4)


def _value(console: Console, v: ValueReport, d: int) -> None:
    t = Table(title="scores", title_justify="left")
    for col in ("side", "count", "mean", "median", "std", "min", "max"):
        t.add_column(col, justify="left" if col == "side" else "right")
    for side, s in (("judge", v.judge), ("human", v.human)):
        stats = (s.mean, s.median, s.std, s.min, s.max)
        t.add_row(side, str(s.count), *(fmt_number(x, d) for x in stats))
    print_table(t, console)


def _ceiling(console: Console, ceil: Ceiling, d: int) -> None:
    t = Table(
        title=f"ceiling: human–human vs judge–human ({ceil.n_annotators} annotators, "
        f"{ceil.n_items_multi} items with ≥2)",
        title_justify="left",
    )
    for col in ("figure", "value", "CI", "n"):
        t.add_column(col, justify="left" if col == "figure" else "right")
    for label, e in (
        (f"human–human mean {ceil.metric}", ceil.human_pairwise_mean),
        (f"judge–human mean {ceil.metric}", ceil.judge_pairwise_mean),
        (f"α {ceil.alpha_level} (humans)", ceil.human_alpha),
        (f"α {ceil.alpha_level} (humans + judge)", ceil.alpha_with_judge),
    ):
        t.add_row(label, fmt_number(e.value, d), fmt_ci(e, d), str(e.n))
    print_table(t, console)


def _reviewers(console: Console, rev: ReviewersReport, d: int, names: Names | None) -> None:
    """Each reviewer against the gold with the judge beside them, the sentence per reviewer, and the pairs."""
    t = Table(title=reviewers_title(rev), title_justify="left")
    for n, col in enumerate(reviewers_header(rev)):
        t.add_column(col, justify="left" if n == 0 else "right")
    for cells in reviewer_rows(rev, d):
        t.add_row(*[escape(cell) for cell in cells])
    print_table(t, console)
    for line in reviewer_sentences(rev, d):
        say(f"  {escape(line)}", console, hang=4)
    if rev.pairs:
        p = Table(title=f"people with each other ({rev.metric}, every item both labelled)", title_justify="left")
        for col in ("a", "b", "n", rev.metric, "note"):
            p.add_column(col, justify="right" if col in ("n", rev.metric) else "left")
        for cells in pair_rows(rev, d):
            p.add_row(*[escape(cell) for cell in cells])
        print_table(p, console)
    for note in rev.notes:
        say(f"  reviewers: {_text(note, names)}", console, hang=4)


def _design(console: Console, design: DesignReport, d: int, names: Names | None) -> None:
    t = Table(
        title=f"design-weighted (1/π; {design.resamples} stratified resamples): over every judged item",
        title_justify="left",
    )
    for col in DESIGN_HEADER:
        t.add_column(col, justify="left" if col in (DESIGN_HEADER[0], DESIGN_HEADER[-1]) else "right")
    for cells in design_rows(design, d):
        t.add_row(*[escape(cell) for cell in cells])
    print_table(t, console)
    for note in design.notes:
        say(f"  design: {_text(note, names)}", console, hang=4)


def _calibration(console: Console, cal: CalibrationReport, d: int, names: Names | None) -> None:
    say(f"[bold]{CALIBRATION_TITLE}[/] {escape(calibration_figures(cal, d))}", console, hang=2)
    t = Table(title="reliability (confidence bins; human = truth)", title_justify="left")
    for col in CALIBRATION_HEADER:
        t.add_column(col, justify="left" if col in (CALIBRATION_HEADER[0], CALIBRATION_HEADER[-1]) else "right")
    for cells in calibration_rows(cal, d):
        t.add_row(*[escape(cell) for cell in cells])
    print_table(t, console)
    for note in calibration_notes(cal):
        say(f"  calibration: {_text(note, names)}", console, hang=4)


def _slices(console: Console, report: AgreementReport, d: int) -> None:
    for col, parts in report.slices.items():
        keys = [k for k in HEADLINE_SLICE[report.scale.kind] if k in next(iter(parts.values())).metrics]
        weighted = slice_design_names(report, parts)
        t = Table(title=f"by {col}", title_justify="left")
        t.add_column(col)
        t.add_column("n", justify="right")
        for k in [*keys, *(f"{n} (1/π)" for n in weighted)]:
            t.add_column(k, justify="right")
        for value, sub in parts.items():
            cells = [fmt_value_ci(sub.metrics[k], d) for k in keys]
            t.add_row(value, str(sub.counts.items_compared), *cells, *slice_design_cells(sub, weighted, d))
        print_table(t, console)


def print_report(
    console: Console, report: AgreementReport, d: int, name: str = "", *, names: Names | None = None
) -> None:
    """Print a report as compact rich tables (reusable by other commands, e.g. `greval spec try`); ordered labels
    best first, a κ where people gave one label said undefined."""
    report = best_first(report)
    prefix = f"{name}: " if name else ""
    _counts(console, report, prefix, names)
    print_table(_headline(report, d, f"{prefix}judge vs human"), console)
    if report.per_group:
        keys = [k for k in HEADLINE_SLICE[report.scale.kind] if k in report.metrics]
        title = f"per group ({len(report.per_group)}; the headline is their unweighted mean)"
        print_table(_group_table(title, report.per_group, keys, d), console)
    _categorical(console, report, d)
    if report.value is not None:
        _value(console, report.value, d)
    if report.ceiling is not None:
        _ceiling(console, report.ceiling, d)
    if report.reviewers is not None:
        _reviewers(console, report.reviewers, d, names)
    if report.design is not None:
        _design(console, report.design, d, names)
    if report.calibration is not None:
        _calibration(console, report.calibration, d, names)
    _slices(console, report, d)
    for note in report.notes:
        say(f"  note: {_text(note, names)}", console, hang=4)


def print_consistency(console: Console, rep: ConsistencyReport, d: int, *, names: Names | None = None) -> None:
    """Print the judge's agreement with itself across two runs of it."""
    c = rep.counts
    a, b = rep.runs
    console.print(
        f"[bold]{c.items_paired} items paired[/] of {c.items} ({c.rows} rows; {c.items_one_run_only} in one run "
        f"only, {c.items_one_invalid} with one invalid answer, {c.items_both_invalid} with two "
        f"{escape('[' + rep.options.invalid_pairs + ']')})"
    )
    t = Table(title=f"judge vs itself: {escape(rep.column)} = {escape(a)} vs {escape(b)}", title_justify="left")
    for col in ("metric", "value", "CI", "n", "note"):
        t.add_column(col, justify="right" if col in ("value", "n") else "left")
    for metric, e in rep.metrics.items():
        t.add_row(metric, fmt_number(e.value, d), fmt_ci(e, d), str(e.n), escape(e.note or ""))
    print_table(t, console)
    if rep.per_group:
        print_table(_group_table("per group", rep.per_group, list(rep.metrics), d), console)
    cm = Table(title=f"confusion (rows {escape(a)}, columns {escape(b)})", title_justify="left")
    cm.add_column(f"{escape(a)} \\ {escape(b)}")
    for lab in rep.confusion.judge_labels:
        cm.add_column(escape(lab), justify="right")
    for lab, row in zip(rep.confusion.labels, rep.confusion.counts, strict=True):
        cm.add_row(escape(lab), *[str(v) for v in row])
    print_table(cm, console)
    for note in rep.notes:
        say(f"  note: {_text(note, names)}", console, hang=4)


def print_comparison(console: Console, comp: ComparisonReport, d: int, *, names: Names | None = None) -> None:
    """Print each version's report, then the paired differences."""
    for version, rep in comp.reports.items():
        print_report(console, rep, d, version, names=names)
    t = Table(title=f"paired differences on {comp.common_items} common items", title_justify="left")
    for col in ("metric", "b − a", "difference", "CI", "beyond CI"):
        t.add_column(col, justify="left" if col in ("metric", "b − a") else "right")
    for diff in comp.differences:
        e = diff.estimate
        beyond = "" if diff.beyond_ci is None else ("yes" if diff.beyond_ci else "no")
        t.add_row(diff.metric, f"{diff.b} − {diff.a}", fmt_number(e.value, d), fmt_ci(e, d), beyond)
    print_table(t, console)
    for note in comp.notes:
        say(f"  note: {_text(note, names)}", console, hang=4)


# --------------------------------------------------------------------------------------------- store report
def _table(console: Console, title: str, head: Sequence[str], rows: Sequence[Sequence[str]]) -> None:
    table = Table(title=escape(title))
    for col in head:
        table.add_column(escape(col))
    for r in rows:
        table.add_row(*(escape(c) for c in r))
    print_table(table, console)


#: The Metrics table's columns on a terminal (tables.METRICS_HEAD without kind and distribution).
TERMINAL_METRICS = (
    "metric",
    "judge",
    "records",
    "not scored",
    "dataset score or label shares (95% CI)",
    "pooling",
    "judge–human agreement",
)


def print_metrics(console: Console, rep: StoreReport, store: str) -> None:
    """The metrics table: each metric's records, what was not scored, its dataset score with CI (or its label
    shares with CIs), pooling and the judge–human agreement with its statistic named."""

    wanted = [METRICS_HEAD.index(c) for c in TERMINAL_METRICS]
    rows = [[metrics_cells(m, rep)[i] for i in wanted] for m in rep.metrics]
    head, rows = drop_empty(TERMINAL_METRICS, rows, keys=3)
    table = Table(title=f"greval report — {store}")
    for col in head:
        table.add_column(col)
    for r in rows:
        table.add_row(*(escape(c) for c in r))
    print_table(table, console)


def print_stats(console: Console, rep: StoreReport) -> None:
    """The record-score statistics, the label shares, the prevalence-corrected shares and the system × group
    tables (each only with something to show; a metric without record scores is said in one line)."""

    rows = [[r[0], *r[2:]] for r in stats_rows(rep)]
    if rows:
        _table(console, "record scores", ("metric", *STATS_HEAD), rows)
    for line in unscored_lines(rep):
        say(escape(line), console, hang=2)
    by_system = system_stats_rows(rep)
    if by_system:
        _table(console, f"record scores by {rep.system_column}", ("metric", "system", *STATS_HEAD), by_system)
    for m in rep.metrics:
        if m.shares is not None and m.shares.n:
            shares = [cells for _, cells in shares_rows(m, rep)]
            _table(console, f"{rep.label(m.key)}: label shares (95% CI)", shares_head(m), shares)
    facts = fact_rows(rep)
    if facts:
        what = "item counts (FActScore*: precision = positive / all, recall = positive / (positive + unsupported))"
        _table(console, what, FACT_HEAD, facts)
    head, corrected = drop_empty(CORRECTED_HEAD, corrected_rows(rep), keys=2)
    if corrected:
        _table(console, "prevalence-corrected system scores (judge → corrected)", head, corrected)
    for g in rep.groups:
        ghead, cells = drop_empty(group_head(g), group_cells(g), keys=3)
        if cells:
            _table(console, f"{rep.label(g.key)}: system × {g.column}", ghead, cells)


def print_labels(console: Console, rep: StoreReport) -> None:
    """The human-label count lines, as plain text."""

    for line in label_lines(rep):
        for part in wrap_plain(line, console.width, hang="  "):
            console.print(part, markup=False, highlight=False, emoji=False, soft_wrap=True)


def print_notes(console: Console, notes: Sequence[str], names: Names | None = None) -> None:
    """Every note, one line each."""
    for note in notes:
        console.print(f"[yellow]note:[/] {_text(note, names)}", highlight=False)


def print_store_report(console: Console, rep: StoreReport, store: str) -> None:
    """The store report's tables on a terminal: the metrics table, the statistics and the label lines (its
    notes: :func:`print_notes`, where warnings go)."""
    print_metrics(console, rep, store)
    print_stats(console, rep)
    print_labels(console, rep)
    if rep.experiments:
        table = Table(*EXPERIMENTS_HEAD, title="Experiments (no figure above counts them)")
        for row in experiment_cells(rep):
            table.add_row(*row)
        print_table(table, console)


# ------------------------------------------------------------------------------------------------- review
def _review_estimates(out: Console, err: Console, st: ReviewStatus) -> None:
    """The design-weighted estimates (or, without a design, the plain headline) and the human ceiling."""
    design = st.report.design if st.report is not None else None
    if design is not None:
        table = Table("figure", "weighted", "95% CI", "unweighted", "judge over all items", title="Estimates")
        for e in design.estimates:
            if e.name.startswith(("precision[", "recall[", "f1[")):
                continue  # per-label detail: the agreement report of the review's dataset has it
            ci = f"[{fmt_number(e.ci_low)}, {fmt_number(e.ci_high)}]" if e.ci_low is not None else "—"
            own = fmt_number(st.judge_over_all[e.name]) if e.name in st.judge_over_all else ""
            table.add_row(e.name, fmt_number(e.weighted), ci, fmt_number(e.unweighted), own)
        print_table(table, out)
        legend = (
            "prevalence[X]: the estimated share of X over every judged item by people's labels"
            if any(e.name.startswith("prevalence[") for e in design.estimates)
            else "mean_human: people's estimated mean score over every judged item"
        )
        err.print(f"{legend}; beside it, the judge's own over all items", highlight=False, soft_wrap=True)
    elif st.report is not None:
        for name in ("accuracy", "cohen_kappa"):
            m = st.report.metrics.get(name)
            if m is not None:
                ci = f" [{fmt_number(m.ci_low)}, {fmt_number(m.ci_high)}]" if m.ci_low is not None else ""
                out.print(f"{name}: {fmt_number(m.value)}{ci}", highlight=False)
    ceiling = st.report.ceiling if st.report is not None else None
    if ceiling is not None:
        h, j = ceiling.human_pairwise_mean, ceiling.judge_pairwise_mean
        out.print(
            f"human ceiling ({ceiling.metric}, unweighted): people with each other {fmt_number(h.value)}, "
            f"judge with people {fmt_number(j.value)} ({ceiling.n_items_multi} items with ≥2 people)",
            highlight=False,
            soft_wrap=True,
        )


def print_review_status(out: Console, err: Console, st: ReviewStatus, names: Names | None = None) -> None:
    """Where a review stands (greval.flows.review.review_status): labels so far, the design, the estimates, the
    stopping advice on ``out``; what was pulled, the legend and the notes on ``err``."""
    out.print(
        f"Review of {st.spec!r} (judge {st.judge}) in dataset {st.dataset!r}: {st.rounds} round(s); "
        f"{st.labelled_units} of {sum(c.selected for c in st.strata.values())} selected items labelled "
        f"({st.labels} answers), out of {st.population} judged items.",
        highlight=False,
        soft_wrap=True,
    )
    if st.pulled is not None:
        err.print(
            f"pulled: {st.pulled.submitted} submitted, {st.pulled.pending} records without a submitted answer",
            highlight=False,
        )
    strata = Table("selection", "selected", "labelled", "inclusion probability", title="Design")
    for name, c in st.strata.items():
        strata.add_row(name, str(c.selected), str(c.labelled), fmt_number(c.probability))
    print_table(strata, out)
    _review_estimates(out, err, st)
    if st.advice is not None:
        out.print(render_options(st.advice.line, names or {}), highlight=False, soft_wrap=True)
    for note in st.notes:
        err.print(f"note: {render_options(note, names or {})}", highlight=False, soft_wrap=True)


def print_store_comparison(console: Console, comp: Comparison) -> None:
    """``greval report --compare``'s tables (greval.report.compare.Comparison): paired differences of the
    dataset scores with the changed verdicts, and agreement's where people labelled."""

    _table(console, f"A = {comp.a}  ·  B = {comp.b} ({comp.kind})", CHANGE_HEAD, change_rows(comp))
    agree = agreement_rows(comp)
    for m in comp.metrics:
        if m.note:
            console.print(f"note: {m.metric}: {m.note}", highlight=False, soft_wrap=True)
    if agree:
        _table(
            console, "agreement with people (B − A: paired by record or question, else independent)", AGREE_HEAD, agree
        )
