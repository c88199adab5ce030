"""`greval agreement FILE ...`: judge-vs-human agreement from a file, printed as compact rich tables.

User mistakes (missing column, unknown label, bad flag) exit 2 with one line on stderr, no traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click
import pandas as pd
from pydantic import ValidationError
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from greval.agreement.agreement import compute_agreement
from greval.agreement.comparison import compare_agreement
from greval.agreement.consistency import compute_consistency
from greval.agreement.models import (
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    ComparisonReport,
    ConsistencyReport,
    GroupFigures,
)
from greval.agreement.prepare import CONFIDENCE_COLUMN
from greval.agreement.tables import read_table, select, to_agreement_frame
from greval.cli.common import fail, print_table, read_limit_options, say, store_option
from greval.dataset.limits import ReadLimits
from greval.errors import UserError
from greval.report.agreement import (
    CALIBRATION_HEADER,
    CALIBRATION_TITLE,
    DESIGN_HEADER,
    calibration_figures,
    calibration_notes,
    calibration_rows,
    design_rows,
    prevalence_notes,
    render_consistency_markdown,
    render_html,
    render_markdown,
    slice_design_cells,
    slice_design_names,
)
from greval.report.format import fmt_ci, fmt_number

HEADLINE_SLICE = {
    "categorical": ("accuracy", "cohen_kappa", "quadratic_kappa", "f1", "roc_auc", "pr_auc"),
    "value": ("pearson", "spearman", "kendall", "mae"),
}
GROUPS_PRINTED = 50
GROUP_NAME_WIDTH = 40


def _group_table(title: str, groups: list[GroupFigures], keys: list[str], d: int) -> Table:
    """Per-group values (per-group protocol): the figures the headline averages."""
    t = Table(title=title, title_justify="left")
    t.add_column("group")
    t.add_column("n", justify="right")
    for k in keys:
        t.add_column(k, justify="right")
    for g in groups[:GROUPS_PRINTED]:
        name = g.group if len(g.group) <= GROUP_NAME_WIDTH else g.group[: GROUP_NAME_WIDTH - 1].rstrip() + "…"
        name = " ".join(name.split())  # a group id may be a whole text (e.g. a dialogue); --json keeps it whole
        t.add_row(
            escape(name), str(g.n), *[fmt_number(g.metrics[k].value if k in g.metrics else None, d) for k in keys]
        )
    if len(groups) > GROUPS_PRINTED:
        t.add_row(f"… {len(groups) - GROUPS_PRINTED} more (--json has all)", "", *[""] * len(keys))
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


def print_report(console: Console, report: AgreementReport, d: int, name: str = "") -> None:
    """Print a report as compact rich tables (reusable by other commands, e.g. `greval spec try`)."""
    c = report.counts
    prefix = f"{name}: " if name else ""
    say(
        f"[bold]{prefix}{c.items_compared} items compared[/] of {c.items} ({c.rows} rows; "
        f"{c.items_missing_human} without human, {c.items_invalid_judge} invalid judge "
        f"({escape(report.options.invalid)}), {c.items_dropped_invalid} dropped, "
        f"{c.items_tied_majority} tied majority)",
        console,
        hang=2,
    )
    if c.rows_missing_judge or c.rows_missing_human:
        say(
            f"  missing answers (null, empty or --missing-values): {c.rows_missing_judge} judge row(s), "
            f"{c.rows_missing_human} human row(s)",
            console,
            hang=4,
        )
    th = report.threshold
    if th is not None:
        op = ">" if th.rule == "gt" else "≥"
        how = f", chosen by {th.chosen_by} on {th.select_on}" if th.chosen_by else ""
        say(f"  threshold: {escape(th.pos_label)} when score {op} {th.threshold:g}{escape(how)}", console, hang=4)
    print_table(_headline(report, d, f"{prefix}judge vs human"), console)
    if report.per_group:
        keys = [k for k in HEADLINE_SLICE[report.scale.kind] if k in report.metrics]
        title = f"per group ({len(report.per_group)}; the headline is their unweighted mean)"
        print_table(_group_table(title, report.per_group, keys, d), console)
    cat = report.categorical
    if cat is not None:
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
        p = cat.prevalence
        if p is not None:
            pt = Table(
                title=f"prevalence ({p.method}; {p.n_judged} judged, {p.n_labelled} labelled)",
                title_justify="left",
            )
            for col in ("label", "judge", "human", "corrected", "CI"):
                pt.add_column(col, justify="left" if col == "label" else "right")
            for i, lab in enumerate(p.labels):
                e = p.corrected[i]
                pt.add_row(
                    lab, fmt_number(p.observed[i], d), fmt_number(p.human[i], d), fmt_number(e.value, d), fmt_ci(e, d)
                )
            print_table(pt, console)
            for note in prevalence_notes(p):  # the same notes the HTML and Markdown pages show
                say(f"  prevalence: {note}", console, hang=4)
    if report.value is not None:
        v = report.value
        t = Table(title="scores", title_justify="left")
        for col in ("side", "count", "mean", "median", "std", "min", "max"):
            t.add_column(col, justify="left" if col == "side" else "right")
        for side, s in (("judge", v.judge), ("human", v.human)):
            t.add_row(
                side,
                str(s.count),
                fmt_number(s.mean, d),
                fmt_number(s.median, d),
                fmt_number(s.std, d),
                fmt_number(s.min, d),
                fmt_number(s.max, d),
            )
        print_table(t, console)
    ceil = report.ceiling
    if ceil is not None:
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
    if report.design is not None:
        t = Table(
            title=f"design-weighted (1/π; {report.design.resamples} stratified resamples): over every judged item",
            title_justify="left",
        )
        for col in DESIGN_HEADER:
            t.add_column(col, justify="left" if col in (DESIGN_HEADER[0], DESIGN_HEADER[-1]) else "right")
        for cells in design_rows(report.design, d):
            t.add_row(*[escape(cell) for cell in cells])
        print_table(t, console)
        for note in report.design.notes:
            say(f"  design: {escape(note)}", console, hang=4)
    cal = report.calibration
    if cal is not None:
        say(f"[bold]{CALIBRATION_TITLE}[/] {escape(calibration_figures(cal, d))}", console, hang=2)
        t = Table(title="reliability (confidence bins; human = truth)", title_justify="left")
        for col in CALIBRATION_HEADER:
            t.add_column(col, justify="left" if col in (CALIBRATION_HEADER[0], CALIBRATION_HEADER[-1]) else "right")
        for cells in calibration_rows(cal, d):
            t.add_row(*[escape(cell) for cell in cells])
        print_table(t, console)
        for note in calibration_notes(cal):
            say(f"  calibration: {escape(note)}", console, hang=4)
    for col, parts in report.slices.items():
        keys = [k for k in HEADLINE_SLICE[report.scale.kind] if k in next(iter(parts.values())).metrics]
        weighted = slice_design_names(report, parts)
        t = Table(title=f"by {col}", title_justify="left")
        t.add_column(col)
        t.add_column("n", justify="right")
        for k in [*keys, *(f"{n} (1/π)" for n in weighted)]:
            t.add_column(k, justify="right")
        for value, sub in parts.items():
            cells = [f"{fmt_number(sub.metrics[k].value, d)} {fmt_ci(sub.metrics[k], d)}".strip() for k in keys]
            t.add_row(value, str(sub.counts.items_compared), *cells, *slice_design_cells(sub, weighted, d))
        print_table(t, console)
    for note in report.notes:
        say(f"  note: {escape(note)}", console, hang=4)


def print_consistency(console: Console, rep: ConsistencyReport, d: int) -> None:
    """Print the judge's agreement with itself across two runs (--pair-by)."""
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
    for name, e in rep.metrics.items():
        t.add_row(name, fmt_number(e.value, d), fmt_ci(e, d), str(e.n), escape(e.note or ""))
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
        say(f"  note: {escape(note)}", console, hang=4)


def print_comparison(console: Console, comp: ComparisonReport, d: int) -> None:
    """Print each version's report, then the paired differences."""
    for name, rep in comp.reports.items():
        print_report(console, rep, d, name)
    t = Table(title=f"paired differences on {comp.common_items} common items", title_justify="left")
    for col in ("metric", "b − a", "difference", "CI", "beyond CI"):
        t.add_column(col, justify="left" if col in ("metric", "b − a") else "right")
    for diff in comp.differences:
        e = diff.estimate
        beyond = "" if diff.beyond_ci is None else ("yes" if diff.beyond_ci else "no")
        t.add_row(diff.metric, f"{diff.b} − {diff.a}", fmt_number(e.value, d), fmt_ci(e, d), beyond)
    print_table(t, console)
    for note in comp.notes:
        say(f"  note: {escape(note)}", console, hang=4)


def _parse_map(pairs: tuple[str, ...]) -> dict[str, str]:
    out: dict[str, str] = {}
    for p in pairs:
        if "=" not in p:
            raise UserError(f'--map {p!r}: expected FROM=TO, e.g. --map "2=0"')
        a, b = p.split("=", 1)
        out[a.strip()] = b.strip()
    return out


@click.command("agreement")
@click.argument("file", required=False, type=click.Path(dir_okay=False, path_type=Path))
@store_option(
    default=None,
    must_exist=True,
    env=False,
    help="Read judge verdicts and pulled / imported human labels from a greval store instead of FILE.",
)
@click.option(
    "--spec",
    "spec_refs",
    multiple=True,
    help="with --store: metric NAME, or NAME@HASH for one version; repeat to compare side by side",
)
@click.option(
    "--dataset",
    "datasets",
    multiple=True,
    help="with --store: which human-label datasets to compare with (an Argilla dataset's name, or 'import' "
    "for imported labels); repeatable; default: all. Needed when one person labelled the same items in "
    "several datasets (e.g. a --blind copy and the one with suggestions)",
)
@click.option(
    "--level",
    type=click.Choice(["item", "record"]),
    default="item",
    show_default=True,
    help="with --store, chunk/triple metrics: per item, or on the aggregated record score",
)
@click.option(
    "--judge",
    "judges",
    multiple=True,
    help="judge column (dots select nested fields); repeat to compare versions side by side. "
    "With --store: which judge's verdicts (default: the one with most)",
)
@click.option(
    "--version",
    "version_col",
    default=None,
    help="column naming the judge version of each row (rows per item and version): compare the versions",
)
@click.option("--human", default=None, help="human label column (FILE mode)")
@click.option(
    "--annotator",
    default=None,
    help="annotator id column (enables the human–human ceiling). Without it, several rows for one --item are "
    "read as anonymous annotators (#1, #2 … in file order), with a note",
)
@click.option("--item", default=None, help="item id column (default: one item per row)")
@click.option(
    "--group",
    default=None,
    help="cluster column (source document, or the item when one item appears under several conditions): the "
    "bootstrap resamples whole groups; with --protocol per-group, the groups to average over",
)
@click.option("--slice", "slices", multiple=True, help="report per value of this column (repeatable)")
@click.option("--kind", type=click.Choice(["categorical", "value"]), default="categorical", show_default=True)
@click.option("--labels", default=None, help="comma-separated labels in the spec's order (low → high if ordered)")
@click.option("--ordered", is_flag=True, help="labels are ordered: weighted κ, ordinal α, signed bias")
@click.option("--min", "vmin", type=float, default=None, help="value scale minimum")
@click.option("--max", "vmax", type=float, default=None, help="value scale maximum")
@click.option("--map", "maps", multiple=True, help='relabel raw answers on both sides, e.g. --map "2=0"')
@click.option(
    "--missing-values",
    "missing_values",
    multiple=True,
    help="answers that mean 'no answer' (repeatable or comma list, exact text), e.g. --missing-values NA,n/a. "
    "Default: only an empty cell or a JSON/Parquet null; 'NA', 'None', 'null', 'N/A', 'nan' are labels otherwise",
)
@click.option(
    "--invalid",
    default="as-wrong",
    show_default=True,
    help="a missing / unparseable judge answer: as-wrong (never matches; an <invalid> confusion column), drop "
    "(the item leaves both sides), opposite (two labels: the label people did not choose, counted as that "
    "label), or label:X (counts as X). See docs/agreement.md for how each moves accuracy and macro F1",
)
@click.option(
    "--pos-label",
    default=None,
    help="the positive label: adds its precision, recall and F1 (vs the rest) to the headline; needed by --score",
)
@click.option(
    "--score",
    "score_col",
    default=None,
    help="column with the judge's raw score or probability for --pos-label: adds ROC-AUC and PR-AUC (average "
    "precision) with CIs; without --judge, labels come from --threshold / --choose-threshold (or only AUCs)",
)
@click.option(
    "--confidence",
    "confidence_col",
    default=None,
    help="column with the judge's confidence in its answer (0..1): adds a calibration report (reliability "
    "diagram, ECE, Brier). Default: a column named judge_confidence, when the file has one",
)
@click.option(
    "--calibration-bins",
    type=click.IntRange(1, 100),
    default=10,
    show_default=True,
    help="equal-width confidence bins of the calibration report",
)
@click.option(
    "--threshold",
    type=float,
    default=None,
    help="with --score: the judge says --pos-label when its score passes T (see --threshold-rule), else the "
    "other label",
)
@click.option(
    "--threshold-rule",
    type=click.Choice(["gt", "ge"]),
    default="ge",
    show_default=True,
    help="gt: positive when score > T; ge: when score ≥ T (papers differ: say which yours used)",
)
@click.option(
    "--choose-threshold",
    type=click.Choice(["max-f1", "max-balanced-accuracy", "youden"]),
    default=None,
    help="with --score and --select-on: choose T on the selection rows (grid: their distinct scores; ties → the "
    "lowest T) and evaluate on the other rows",
)
@click.option(
    "--select-on",
    default=None,
    metavar="COL=VALUE",
    help="rows that choose the threshold, e.g. split=dev; every other row is evaluated",
)
@click.option(
    "--pair-by",
    "pair_by",
    default=None,
    help="column naming two runs of the judge per item (e.g. order = original / swapped, or seed): report "
    "how often the two runs agree (consistency) and κ, instead of agreement with people (no --human)",
)
@click.option(
    "--invalid-pairs",
    type=click.Choice(["agree", "disagree"]),
    default="disagree",
    show_default=True,
    help="with --pair-by: whether an item whose two answers are both invalid counts as consistent",
)
@click.option(
    "--protocol",
    type=click.Choice(["pooled", "per-group"]),
    default="pooled",
    show_default=True,
    help="per-group (needs --group): every headline figure inside each group, then the unweighted mean over "
    "the groups ('Average' in papers); per-group values are listed; the bootstrap resamples items within groups",
)
@click.option(
    "--bootstrap",
    "resamples",
    type=click.IntRange(min=0),
    default=1000,
    show_default=True,
    help="resamples for the CIs (0: none); the report says what was resampled: rows, items, groups, or items "
    "within groups",
)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option(
    "--json",
    "json_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write the full report as JSON (full precision)",
)
@click.option(
    "--html",
    "html_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write a self-contained HTML report (one --judge)",
)
@click.option(
    "--markdown",
    "md_out",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    help="write a Markdown summary (one --judge)",
)
@click.option("--reason", "reason_col", default=None, help="column shown as 'reason' in the HTML gallery")
@click.option("--comment", "comment_col", default=None, help="column shown as 'comment' in the HTML gallery")
@click.option(
    "--decimals",
    type=click.IntRange(0, 15),
    default=6,
    show_default=True,
    help="decimals printed (JSON keeps full precision)",
)
@read_limit_options
def agreement(
    file: Path | None,
    store: str | None,
    spec_refs: tuple[str, ...],
    datasets: tuple[str, ...],
    level: str,
    judges: tuple[str, ...],
    version_col: str | None,
    human: str | None,
    annotator: str | None,
    item: str | None,
    group: str | None,
    slices: tuple[str, ...],
    kind: str,
    labels: str | None,
    ordered: bool,
    vmin: float | None,
    vmax: float | None,
    maps: tuple[str, ...],
    missing_values: tuple[str, ...],
    invalid: str,
    pos_label: str | None,
    score_col: str | None,
    confidence_col: str | None,
    calibration_bins: int,
    threshold: float | None,
    threshold_rule: str,
    choose_threshold: str | None,
    select_on: str | None,
    pair_by: str | None,
    invalid_pairs: str,
    protocol: str,
    resamples: int,
    seed: int,
    json_out: Path | None,
    html_out: Path | None,
    md_out: Path | None,
    reason_col: str | None,
    comment_col: str | None,
    decimals: int,
    limits: ReadLimits,
) -> None:
    """Agreement between an LLM judge and human labels in FILE (csv/tsv/jsonl/json/parquet, .gz ok),
    or in a greval store (--store S --spec NAME).

    \b
      greval agreement --store greval.sqlite --spec answer_alignment --html agreement.html
      greval agreement --store s.sqlite --spec faithfulness@1a2b3c4d5e6f --spec faithfulness@9f8e7d6c5b4a
      greval agreement --store s.sqlite --spec answer_alignment --dataset answer_alignment-blind
      greval agreement data.csv --judge judge_label --human human_label --annotator annotator --item id
    """
    console = Console() if sys.stdout.isatty() else Console(width=160)
    if store is not None:
        _from_store(
            console,
            store,
            spec_refs,
            datasets,
            judges,
            level,
            invalid,
            resamples,
            seed,
            slices,
            _parse_map(maps),
            calibration_bins,
            json_out,
            html_out,
            md_out,
            decimals,
        )
        return
    try:
        if datasets:
            raise UserError("--dataset selects human labels in a store: use it with --store")
        if file is None or not (judges or score_col) or (human is None and pair_by is None):
            raise UserError("give FILE with --judge COL (or --score COL) and --human COL, or --store S --spec NAME")
        scale = AgreementScale(
            kind=kind,
            labels=[x.strip() for x in labels.split(",") if x.strip()] if labels else None,
            ordered=ordered,
            min=vmin,
            max=vmax,
        )
        options = AgreementOptions(
            invalid=invalid,
            protocol=protocol,
            bootstrap=resamples,
            seed=seed,
            slices=list(slices),
            mapping=_parse_map(maps),
            missing_values=_split_list(missing_values),
            pos_label=pos_label,
            threshold=threshold,
            threshold_rule=threshold_rule,
            choose_threshold=choose_threshold,
            select_on=select_on,
            invalid_pairs=invalid_pairs,
            calibration_bins=calibration_bins,
        )
        raw = read_table(file, as_text=True, limits=limits)
        if pair_by is not None:
            result_c = _pair_mode(raw, judges, human, item, group, pair_by, scale, options, version_col, html_out)
            print_consistency(console, result_c, decimals)
            if md_out is not None:
                md_out.write_text(render_consistency_markdown(result_c, decimals), encoding="utf-8")
                console.print(f"wrote {md_out}")
            if json_out is not None:
                json_out.write_text(result_c.model_dump_json(indent=2), encoding="utf-8")
                console.print(f"wrote {json_out}")
            return
        if annotator and not item:
            click.echo("note: --annotator without --item: every row is its own item, so no human ceiling", err=True)
        if score_col and len(judges) > 1:
            raise UserError("--score goes with one --judge (or none)")
        extra = [select_on.partition("=")[0]] if select_on else []
        frames: dict[str, pd.DataFrame] = {}
        for j in judges or (None,):
            f = to_agreement_frame(
                raw, j, human, item=item, annotator=annotator, group=group, slices=slices, extra=extra, score=score_col
            )
            confidence = confidence_col or (CONFIDENCE_COLUMN if CONFIDENCE_COLUMN in raw.columns else None)
            for name, col in (("reason", reason_col), ("comment", comment_col), (CONFIDENCE_COLUMN, confidence)):
                if col:
                    f[name] = select(raw, col).to_numpy()
            if version_col is None:
                frames[j or score_col or "score"] = f
                continue
            if len(judges) > 1:
                raise UserError("--version splits one --judge column; give --judge once")
            versions = select(raw, version_col).astype(str).to_numpy()
            frames = {v: f[versions == v].reset_index(drop=True) for v in sorted(set(versions))}
        if (html_out or md_out) and len(frames) > 1:
            raise UserError("--html/--markdown work with one judge version")
        if len(frames) == 1 and version_col is not None:
            raise UserError(f"--version {version_col}: only one version in the file")
        result: AgreementReport | ComparisonReport
        if len(frames) == 1:
            frame = next(iter(frames.values()))
            result = compute_agreement(frame, scale, options)
            print_report(console, result, decimals)
            if html_out is not None:
                who = judges[0] if judges else score_col
                html_out.write_text(render_html(result, frame, title=f"{file.name}: {who} vs {human}"))
                console.print(f"wrote {html_out}")
            if md_out is not None:
                md_out.write_text(render_markdown(result, decimals), encoding="utf-8")
                console.print(f"wrote {md_out}")
        else:
            result = compare_agreement(frames, scale, options)
            print_comparison(console, result, decimals)
    except UserError as exc:
        fail(exc)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        msg = str(first["msg"]).removeprefix("Value error, ")
        fail(f"{where + ': ' if where else ''}{msg}")
    if json_out is not None:
        json_out.write_text(result.model_dump_json(indent=2), encoding="utf-8")
        console.print(f"wrote {json_out}")


def _split_list(values: tuple[str, ...]) -> list[str]:
    """Repeatable or comma-separated: ("NA,n/a", "-") → ["NA", "n/a", "-"]."""
    return [x.strip() for v in values for x in v.split(",") if x.strip()]


def _pair_mode(
    raw: pd.DataFrame,
    judges: tuple[str, ...],
    human: str | None,
    item: str | None,
    group: str | None,
    pair_by: str,
    scale: AgreementScale,
    options: AgreementOptions,
    version_col: str | None,
    html_out: Path | None,
) -> ConsistencyReport:
    """--pair-by: one judge column, two runs per item, compared with each other (no humans)."""
    if human is not None:
        raise UserError(
            "--pair-by compares the judge's two runs with each other; drop --human (or use --version "
            f"{pair_by} to compare each run with people)"
        )
    if len(judges) != 1 or version_col is not None:
        raise UserError("--pair-by takes one --judge column (the runs are rows, named by the --pair-by column)")
    if item is None:
        raise UserError("--pair-by needs --item: the id that pairs the two runs' rows")
    if html_out is not None:
        raise UserError("--pair-by writes --json and --markdown, not --html")
    frame = to_agreement_frame(raw, judges[0], None, item=item, group=group)
    frame["run"] = select(raw, pair_by).to_numpy()
    return compute_consistency(frame, scale, options, column=pair_by)


def frame_from_file(
    file: str | Path,
    judge: str,
    human: str,
    item: str | None = None,
    annotator: str | None = None,
    group: str | None = None,
) -> pd.DataFrame:
    """Convenience for Python callers: read a file and map its columns like the CLI does."""
    return to_agreement_frame(read_table(file), judge, human, item=item, annotator=annotator, group=group)


def _from_store(
    console: Console,
    store_path: str,
    spec_refs: tuple[str, ...],
    datasets: tuple[str, ...],
    judges: tuple[str, ...],
    level: str,
    invalid: str,
    resamples: int,
    seed: int,
    slices: tuple[str, ...],
    mapping: dict[str, str],
    calibration_bins: int,
    json_out: Path | None,
    html_out: Path | None,
    md_out: Path | None,
    decimals: int,
) -> None:
    """Agreement of stored judge verdicts with stored human labels, per metric or metric version."""
    from greval.agreement.from_store import store_frame
    from greval.store.store import Store

    try:
        if not spec_refs:
            raise UserError("--store needs --spec NAME (the metric whose verdicts people labelled)")
        frames: dict[str, pd.DataFrame] = {}
        scale: AgreementScale | None = None
        with Store(store_path) as st:
            for ref in spec_refs:
                name, _, version = ref.partition("@")
                frame, sc, sel = store_frame(
                    st,
                    name,
                    judges[0] if judges else None,
                    "record" if level == "record" else "item",
                    version or None,
                    datasets=datasets,
                )
                if scale is not None and sc != scale:
                    raise UserError(f"{ref}: a different scale than {spec_refs[0]}; compare versions of one scale")
                scale = sc
                frames[f"{sel.spec}@{sel.spec_hash}"] = frame
                console.print(
                    f"{escape(sel.spec)}@{sel.spec_hash}: human labels from dataset(s) "
                    f"{escape(', '.join(sel.datasets))}" + ("" if datasets else " (all; choose with --dataset)"),
                    highlight=False,
                )
        assert scale is not None
        auto = [c for c in ("system",) if all(c in f.columns and f[c].notna().any() for f in frames.values())]
        options = AgreementOptions(
            invalid=invalid,
            bootstrap=resamples,
            seed=seed,
            mapping=mapping,
            slices=list(slices) or auto,
            calibration_bins=calibration_bins,
        )
        if len(frames) == 1:
            ((title, frame),) = frames.items()
            report = compute_agreement(frame, scale, options)
            print_report(console, report, decimals, title)
            if html_out is not None:
                html_out.write_text(render_html(report, frame, title=f"{title}: judge vs people"), encoding="utf-8")
                console.print(f"wrote {html_out}")
            if md_out is not None:
                md_out.write_text(render_markdown(report, decimals), encoding="utf-8")
                console.print(f"wrote {md_out}")
            result: AgreementReport | ComparisonReport = report
        else:
            if html_out or md_out:
                raise UserError("--html/--markdown work with one --spec")
            result = compare_agreement(frames, scale, options)
            print_comparison(console, result, decimals)
    except UserError as exc:
        fail(exc)
    if json_out is not None:
        json_out.write_text(result.model_dump_json(indent=2), encoding="utf-8")
        console.print(f"wrote {json_out}")
