"""``greval report``: what a store says, as files people open — an HTML index, per-metric agreement pages,
JSON and Markdown summaries — and a compact table in the terminal.

For every metric: how many verdicts, failures, the mean score with a bootstrap CI, and the distribution of the
record scores (:class:`ScoreStats`: median, spread, percentiles, failure and skip rates — one function for metric,
system and group rows); per system (any grouping column of the records) side by side with the efficiency columns
records carry (tokens, LLM calls, latency); with ``group_column``, a system × group table per metric; for judge
metrics with human labels, the judge-vs-human agreement report and each system's prevalence-corrected label
shares beside the judge's raw shares. Pure reads: no model call.

This module builds the report (:func:`build`) and writes its files (:func:`write`). The models are in
greval.report.models, the statistics in greval.report.stats, the renderings in greval.report.html (files),
greval.report.terminal and greval.report.plots (figures).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from greval.agreement.agreement import compute_agreement
from greval.agreement.bootstrap import Resampling
from greval.agreement.models import AgreementOptions, AgreementScale, GoldChoice
from greval.errors import DataError, Remedy, UserError
from greval.paths import write_private
from greval.report import agreement as agreement_pages
from greval.report.explorer.links import href
from greval.report.format import with_names
from greval.report.html import render_index, render_markdown
from greval.report.models import (
    ExperimentRow,
    GroupCell,
    GroupTable,
    LabelSource,
    MetricRow,
    StoreReport,
    SystemRow,
)
from greval.report.plots import overview_png
from greval.report.stats import (
    RESAMPLES,
    Corrected,
    efficiency,
    histogram,
    label_shares,
    prevalence_corrected,
    record_scores,
    rows_stats,
    score_ci,
    score_range,
)
from greval.report.stats import score_stats as score_stats  # named here by docs before issue 30
from greval.spec import BaseSpec, CategoricalScale, Spec
from greval.store.results import MetricFigures, figures_from_rows, item_rows, record_rows
from greval.store.store import Store

if TYPE_CHECKING:
    import pandas as pd

    from greval.report.agreement import CellHref

#: Record data by record hash: where the system, group and efficiency fields are read from.
RecordData = dict[str, dict[str, Any]]


def build(
    store_path: str | Path,
    specs: Sequence[str] = (),
    system_column: str | None = "system",
    bootstrap_resamples: int = RESAMPLES,
    out_dir: Path | None = None,
    group_column: str | None = None,
    names: Mapping[str, str] | None = None,
    all_versions: bool = False,
    experiments: bool = False,
) -> StoreReport:
    """Compute the report (and, with ``out_dir``, write the per-metric agreement pages); ``group_column``: a
    record field to cross with the systems (one system × group table per metric); ``names``: how the agreement
    pages write option fields named in notes (greval.report.format.with_names; the CLI passes its flags). Each
    metric's production version, or (``all_versions``) every version but those only experiments judged.
    ``bootstrap_resamples``: of every CI of the report and its pages (seed 0). ``experiments``: list the
    store's experiment runs under their own heading (off by default: a default report reads what every default
    reader reads, the same before and after an align)."""
    boot = Resampling(resamples=bootstrap_resamples)
    with Store(store_path) as st:
        items, data, found = metric_groups(
            st, store_path, specs, system_column, group_column, all_versions=all_versions
        )
        metrics: list[MetricRow] = []
        systems: list[SystemRow] = []
        groups: list[GroupTable] = []
        figs = [fig for fig, _, _ in found]
        pages = None if out_dir is None else Pages(out_dir, names or {}, page_stems(figs), explorer_numbers(figs))
        for fig, spec, grp in found:
            metrics.append(metric_row(st, fig, spec, items, grp, boot, pages))
            labels = share_labels(spec)
            if group_column:
                groups.append(group_table(fig, grp, group_column, data, labels, boot))
            systems += system_rows(fig, grp, data, labels, boot)
        tried = experiment_rows(st.runs(), specs) if experiments else []
    return StoreReport(
        store=str(store_path),
        metrics=metrics,
        systems=systems,
        system_column=system_column if systems else None,
        group_column=group_column,
        system_field=system_column,
        groups=groups,
        all_versions=all_versions,
        bootstrap=bootstrap_resamples,
        experiments=tried,
    )


def experiment_rows(runs: Sequence[Mapping[str, Any]], specs: Sequence[str] = ()) -> list[ExperimentRow]:
    """The experiment runs among ``runs`` (of ``specs`` when given), oldest first, each with the scores its own
    stored summary holds (the figures its run printed: greval.store.results, one definition)."""
    out: list[ExperimentRow] = []
    for run in runs:
        names = json.loads(run["specs"] or "[]")
        if run.get("kind") != "experiment" or (specs and not set(specs) & set(names)):
            continue
        summ = json.loads(run["summary"] or "{}")
        scores = {f"{m['spec']}@{(m.get('spec_key') or '')[:8]}": m.get("mean_score") for m in summ.get("metrics", [])}
        out.append(
            ExperimentRow(
                run_id=run["run_id"],
                started_at=run["started_at"],
                status=run["status"],
                purpose=run.get("purpose") or "side run",
                records=summ.get("records"),
                scores=scores,
            )
        )
    return out


MetricGroup = tuple[MetricFigures, BaseSpec, list[dict[str, Any]]]


def metric_groups(
    st: Store,
    store_path: str | Path,
    specs: Sequence[str],
    system_column: str | None,
    group_column: str | None,
    *,
    all_versions: bool = False,
) -> tuple[list[dict[str, Any]], RecordData, list[MetricGroup]]:
    """The store's item rows, its records' data, and each metric's (figures, spec, record rows tagged with their
    system and group) in report order: what the report and the record explorer both read."""
    items = _items(st, store_path, specs, all_versions)
    spec_objs = {key: st.any_spec(key) for key in dict.fromkeys(r["spec_key"] for r in items)}
    data: RecordData = {r.hash: r.data for r in st.records()}
    recs = tag_rows(record_rows(items, spec_objs), data, system_column, group_column)
    found: list[MetricGroup] = []
    for fig in figures_from_rows(items, spec_objs):
        grp = [r for r in recs if r["spec_key"] == fig.spec_key and r["judge_key"] == fig.judge_key]
        found.append((fig, spec_objs[fig.spec_key], grp))
    return items, data, found


def share_labels(spec: BaseSpec) -> list[str] | None:
    """The labels a metric's shares are counted over (a categorical judge metric's, in the spec's order), or
    None for a metric without labels."""
    if isinstance(spec, Spec) and isinstance(spec.scale, CategoricalScale):
        return spec.scale.names
    return None


def _items(st: Store, store_path: str | Path, specs: Sequence[str], all_versions: bool) -> list[dict[str, Any]]:
    """The store's item rows (each metric's production version, or every version), of ``specs`` only when given
    (each must have verdicts)."""
    items = item_rows(st, all_versions=all_versions)
    if not items:
        raise UserError(f"{store_path}: no verdicts yet", remedy=Remedy("run", why="first"))
    if specs:
        unknown = sorted(set(specs) - {r["spec"] for r in items})
        if unknown:
            raise UserError(f"no verdicts for {', '.join(unknown)} in {store_path}")
        items = [r for r in items if r["spec"] in specs]
    return items


def tag_rows(
    recs: list[dict[str, Any]], data: RecordData, system_column: str | None, group_column: str | None
) -> list[dict[str, Any]]:
    """Record rows with their ``system`` and ``group`` (the records' values of those fields as text, or None)."""
    for rec in recs:
        value = data.get(rec["record_hash"], {}).get(system_column) if system_column else None
        rec["system"] = None if value is None else str(value)
        gval = data.get(rec["record_hash"], {}).get(group_column) if group_column else None
        rec["group"] = None if gval is None or gval == "" else str(gval)
    return recs


def metric_row(
    st: Store,
    fig: MetricFigures,
    spec: BaseSpec,
    items: Sequence[dict[str, Any]],
    grp: Sequence[dict[str, Any]],
    resampling: Resampling,
    pages: Pages | None,
) -> MetricRow:
    """A metric's row: its figures, dataset score, record-score statistics and, when people labelled it, the
    agreement headline (and page) and the prevalence-corrected shares."""
    row = MetricRow(
        metric=fig.spec,
        kind=spec.kind,
        spec_hash=fig.spec_hash,
        judge=fig.judge,
        figures=fig,
        score=score_ci(grp, fig.aggregate, resampling),
    )
    row.stats = rows_stats(grp, resampling)
    row.scale_range = score_range(spec, row.stats)
    labels = share_labels(spec)
    if labels is not None:
        row.shares = label_shares(grp, labels, resampling)
    if not fig.distribution:
        row.histogram = histogram(record_scores(grp))
    if isinstance(spec, Spec):
        stem = None if pages is None else pages.stems.get((fig.spec_key, fig.judge_key), spec.name)
        labelled = bool(st.submitted_label_count(spec.name))
        corrected = Corrected()
        if labelled and isinstance(spec.scale, CategoricalScale):
            corrected = prevalence_corrected(st, spec, fig, items, grp, resampling)
        row.corrected = corrected.systems
        row.agreement, row.agreement_page = _agreement(st, spec, fig.judge, resampling, pages, stem, corrected)
        row.labels = label_sources(st, spec.name)
    return row


def system_rows(
    fig: MetricFigures,
    rows: Sequence[dict[str, Any]],
    data: RecordData,
    labels: Sequence[str] | None = None,
    resampling: Resampling | None = None,
) -> list[SystemRow]:
    """One row per system of a metric's record rows (rows with no system are in none); ``labels``: a categorical
    metric's, for each system's label shares; ``resampling``: of every CI."""
    by_system: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        if r["system"] is not None:
            by_system.setdefault(r["system"], []).append(r)
    out = []
    for system, sg in sorted(by_system.items()):
        failed = sum(1 for r in sg if r["status"] == "error")
        out.append(
            SystemRow(
                metric=fig.spec,
                spec_hash=fig.spec_hash,
                judge=fig.judge,
                system=system,
                score=score_ci(sg, fig.aggregate, resampling),
                judged=len(sg),
                failed=failed,
                skipped=sum(1 for r in sg if r["status"] == "skipped"),
                failure_rate=failed / len(sg),
                efficiency=efficiency(sg, data),
                stats=rows_stats(sg, resampling),
                shares=None if labels is None else label_shares(sg, labels, resampling),
            )
        )
    return out


def group_table(
    fig: MetricFigures,
    rows: Sequence[dict[str, Any]],
    column: str,
    data: RecordData,
    labels: Sequence[str] | None = None,
    resampling: Resampling | None = None,
) -> GroupTable:
    """One metric's record rows by (system, group value): stats and mean efficiency per cell. Rows with no
    group value (or, when systems are known, no system value) are counted, not dropped silently. Without any
    system value at all, every row is system 'all'."""
    any_system = any(r["system"] is not None for r in rows)
    cells: dict[tuple[str, str], list[dict[str, Any]]] = {}
    missing_group = missing_system = 0
    for r in rows:
        if r["group"] is None:
            missing_group += 1
            continue
        system = r["system"] if any_system else "all"
        if system is None:
            missing_system += 1
            continue
        cells.setdefault((system, r["group"]), []).append(r)
    keys = sorted(cells)
    return GroupTable(
        metric=fig.spec,
        spec_hash=fig.spec_hash,
        judge=fig.judge,
        column=column,
        systems=sorted({k[0] for k in keys}),
        groups=sorted({k[1] for k in keys}),
        cells=[
            GroupCell(
                system=s,
                group=g,
                score=score_ci(cells[s, g], fig.aggregate, resampling),
                stats=rows_stats(cells[s, g], resampling),
                efficiency=efficiency(cells[s, g], data),
                shares=None if labels is None else label_shares(cells[s, g], labels, resampling),
            )
            for s, g in keys
        ],
        missing_group=missing_group,
        missing_system=missing_system,
    )


@dataclass(frozen=True)
class Pages:
    """Where the agreement pages go, how their notes write option fields, and each metric row's file stem."""

    out_dir: Path
    names: Mapping[str, str]
    stems: Mapping[tuple[str, str], str]  # (spec key, judge key) -> NAME, NAME@HASH8, NAME@HASH8@JUDGEKEY8 ...
    #: (spec key, judge key) -> the row's metric number in the record explorer write() puts beside the pages
    numbers: Mapping[tuple[str, str], int] = field(default_factory=dict)

    def cell_href(self, key: tuple[str, str]) -> CellHref | None:
        """Where a confusion count of the row's agreement page opens: the explorer's records where people said
        the row's label and the judge the column's (None: the row is not in the explorer)."""

        number = self.numbers.get(key)
        if number is None:
            return None
        return lambda human, judge: href(number, {"human": human, "label": judge})

    def record_href(self, key: tuple[str, str]) -> agreement_pages.RecordHref | None:
        """Where a record of the row opens: its page in the explorer, by record id (None: not in the explorer)."""

        number = self.numbers.get(key)
        if number is None:
            return None
        return lambda record_id: href(number, {"record": f"id:{record_id}"})


def explorer_numbers(figs: Sequence[MetricFigures]) -> dict[tuple[str, str], int]:
    """Each metric row's number in the record explorer (its place in the report: write_explorer keeps it)."""
    return {(f.spec_key, f.judge_key): i for i, f in enumerate(figs)}


def page_stems(figs: Sequence[MetricFigures]) -> dict[tuple[str, str], str]:
    """Each metric row's agreement-page name (without .agreement.html): the metric's name when the report holds
    one version of it (the links people kept still work), NAME@HASH8 when several, and @JUDGEKEY8 more when one
    version has several judges — so no page overwrites another."""
    out = {}
    for f in figs:
        same = [g for g in figs if g.spec == f.spec]
        stem = f.spec + (f"@{f.spec_hash[:8]}" if len({g.spec_hash for g in same}) > 1 else "")
        if len({g.judge_key for g in same if g.spec_hash == f.spec_hash}) > 1:
            stem += f"@{f.judge_key[:8]}"
        out[f.spec_key, f.judge_key] = stem
    return out


def _agreement(
    st: Store,
    spec: Spec,
    judge: str,
    resampling: Resampling,
    pages: Pages | None,
    stem: str | None,
    corrected: Corrected | None = None,
) -> tuple[dict[str, Any] | None, str | None]:
    """The judge-vs-human headline for a metric with human labels (None when nobody labelled it), and its page
    (the HTML, Markdown and JSON of the agreement report, ``stem``.agreement.*) when ``pages`` says where. The
    page's prevalence is the index's (``corrected.whole``: over every verdict of the row, not only the labelled
    ones): one corrected share, shown on both pages."""
    from greval.agreement.from_store import store_frame, with_judged_prevalence

    if not st.submitted_label_count(spec.name):
        return None, None
    frame, scale, sel = store_frame(st, spec.name, judge, version=spec.hash)
    slices = ["system"] if "system" in frame.columns and frame["system"].notna().any() else []
    rep = compute_agreement(frame, scale, AgreementOptions(**resampling.model_dump(), slices=slices))
    if corrected is not None and corrected.judged is not None:
        rep = with_judged_prevalence(rep, corrected.judged)
    head = {
        k: {"value": e.value, "ci": [e.ci_low, e.ci_high], "n": e.n, "note": e.note} for k, e in rep.metrics.items()
    }
    if pages is None or stem is None:
        return head, None
    page, shown = f"{stem}.agreement.html", with_names(rep, pages.names)
    title = f"{spec.name} ({spec.hash}): {sel.judge} vs people"
    links = pages.cell_href((sel.spec_key, sel.judge_key))
    team = _reviewers_page(frame, scale, resampling, pages, stem, (sel.spec_key, sel.judge_key), title)
    html_page = agreement_pages.render_html(shown, frame, title=title, cell_href=links, reviewers_href=team)
    write_private(pages.out_dir / page, html_page)
    write_private(pages.out_dir / f"{stem}.agreement.md", agreement_pages.render_markdown(shown))
    write_private(pages.out_dir / f"{stem}.agreement.json", rep.model_dump_json(indent=2))
    return head, page


def _reviewers_page(
    frame: pd.DataFrame,
    scale: AgreementScale,
    resampling: Resampling,
    pages: Pages,
    stem: str,
    key: tuple[str, str],
    title: str,
) -> str | None:
    """``stem``.reviewers.html when two or more people labelled some item: each against people's majority
    (``greval agreement --gold majority``, the same computation), pair by pair, and their disagreements linked
    to the records' explorer pages; None (no page) otherwise, or when the answers cannot be read as labels."""
    shared = frame.dropna(subset=["human"]).groupby("item")["annotator"].nunique()
    if not (shared >= 2).any():
        return None
    options = AgreementOptions(**resampling.model_dump())
    try:
        rep = compute_agreement(frame, scale, options, gold=GoldChoice(method="majority"))
    except DataError:  # e.g. a value scale with more distinct values than a label model reads as categories
        return None
    name = f"{stem}.reviewers.html"
    html_page = agreement_pages.render_reviewers_html(
        with_names(rep, pages.names), frame, f"{title}: reviewers", pages.record_href(key)
    )
    write_private(pages.out_dir / name, html_page)
    return name


def label_sources(st: Store, spec_name: str) -> list[LabelSource]:
    """Where a metric's human labels came from: one entry per (dataset, source), imports first."""
    rows = st.label_source_counts(spec_name)
    found = [
        LabelSource(dataset=r["dataset"], source=r["source"], submitted=r["submitted"], other=r["other"]) for r in rows
    ]
    return sorted(found, key=lambda s: (not s.source.startswith("import"), s.source != "argilla", s.dataset, s.source))


def write(rep: StoreReport, out_dir: Path, names: Mapping[str, str] | None = None, explorer: bool = True) -> None:
    """The report's files (``build`` with the same ``out_dir`` wrote the agreement pages); ``names``: how the
    notes write option fields (greval.report.html.Page); ``explorer``: the record explorer beside index.html
    (explorer/, greval.report.explorer)."""

    write_private(out_dir / "index.html", render_index(rep, names, explorer))
    write_private(out_dir / "report.json", rep.model_dump_json(indent=2))
    write_private(out_dir / "overview.png", overview_png(rep))
    write_private(out_dir / "report.md", render_markdown(rep, "overview.png", names))
    if explorer:
        from greval.report.explorer.write import write_explorer

        write_explorer(rep, out_dir)  # the agreement pages' confusion counts link into it (Pages.cell_href)
