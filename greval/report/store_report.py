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

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from greval.errors import Remedy, UserError
from greval.report.format import with_names
from greval.report.models import (
    GroupCell,
    GroupTable,
    LabelSource,
    MetricRow,
    StoreReport,
    SystemRow,
)
from greval.report.stats import corrected_systems, efficiency, histogram, record_scores, rows_stats, score_ci
from greval.report.stats import score_stats as score_stats  # named here by docs before issue 30
from greval.spec import BaseSpec, CategoricalScale, Spec
from greval.store.results import MetricFigures, figures_from_rows, item_rows, record_rows
from greval.store.store import Store

#: Record data by record hash: where the system, group and efficiency fields are read from.
RecordData = dict[str, dict[str, Any]]


def build(
    store_path: str | Path,
    specs: Sequence[str] = (),
    system_column: str | None = "system",
    bootstrap_resamples: int = 1000,
    out_dir: Path | None = None,
    group_column: str | None = None,
    names: Mapping[str, str] | None = None,
) -> StoreReport:
    """Compute the report (and, with ``out_dir``, write the per-metric agreement pages); ``group_column``: a
    record field to cross with the systems (one system × group table per metric); ``names``: how the agreement
    pages write option fields named in notes (greval.report.format.with_names; the CLI passes its flags)."""
    with Store(store_path) as st:
        items = _items(st, store_path, specs)
        spec_objs = {key: st.any_spec(key) for key in dict.fromkeys(r["spec_key"] for r in items)}
        data: RecordData = {r.hash: r.data for r in st.records()}
        recs = _tagged(record_rows(items, spec_objs), data, system_column, group_column)
        metrics: list[MetricRow] = []
        systems: list[SystemRow] = []
        groups: list[GroupTable] = []
        pages = None if out_dir is None else Pages(out_dir, names or {})
        for fig in figures_from_rows(items, spec_objs):
            spec = spec_objs[fig.spec_key]
            grp = [r for r in recs if r["spec_key"] == fig.spec_key and r["judge_key"] == fig.judge_key]
            metrics.append(_metric_row(st, fig, spec, items, grp, bootstrap_resamples, pages))
            if group_column:
                groups.append(group_table(fig, grp, group_column, data))
            systems += system_rows(fig, grp, data)
    return StoreReport(
        store=str(store_path),
        metrics=metrics,
        systems=systems,
        system_column=system_column if systems else None,
        group_column=group_column,
        groups=groups,
    )


def _items(st: Store, store_path: str | Path, specs: Sequence[str]) -> list[dict[str, Any]]:
    """The store's item rows, of ``specs`` only when given (each must have verdicts)."""
    items = item_rows(st)
    if not items:
        raise UserError(f"{store_path}: no verdicts yet", remedy=Remedy("run", why="first"))
    if specs:
        unknown = sorted(set(specs) - {r["spec"] for r in items})
        if unknown:
            raise UserError(f"no verdicts for {', '.join(unknown)} in {store_path}")
        items = [r for r in items if r["spec"] in specs]
    return items


def _tagged(
    recs: list[dict[str, Any]], data: RecordData, system_column: str | None, group_column: str | None
) -> list[dict[str, Any]]:
    """Record rows with their ``system`` and ``group`` (the records' values of those fields as text, or None)."""
    for rec in recs:
        value = data.get(rec["record_hash"], {}).get(system_column) if system_column else None
        rec["system"] = None if value is None else str(value)
        gval = data.get(rec["record_hash"], {}).get(group_column) if group_column else None
        rec["group"] = None if gval is None or gval == "" else str(gval)
    return recs


def _metric_row(
    st: Store,
    fig: MetricFigures,
    spec: BaseSpec,
    items: Sequence[dict[str, Any]],
    grp: Sequence[dict[str, Any]],
    resamples: int,
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
        score=score_ci(grp, fig.aggregate),
    )
    row.stats = rows_stats(grp)
    if not fig.distribution:
        row.histogram = histogram(record_scores(grp))
    if isinstance(spec, Spec):
        row.agreement, row.agreement_page = _agreement(st, spec, fig.judge, resamples, pages)
        row.labels = label_sources(st, spec.name)
        if row.agreement is not None and isinstance(spec.scale, CategoricalScale):
            row.corrected = corrected_systems(st, spec, fig, items, grp, resamples)
    return row


def system_rows(fig: MetricFigures, rows: Sequence[dict[str, Any]], data: RecordData) -> list[SystemRow]:
    """One row per system of a metric's record rows (rows with no system are in none)."""
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
                system=system,
                score=score_ci(sg, fig.aggregate),
                judged=len(sg),
                failed=failed,
                skipped=sum(1 for r in sg if r["status"] == "skipped"),
                failure_rate=failed / len(sg),
                efficiency=efficiency(sg, data),
                stats=rows_stats(sg),
            )
        )
    return out


def group_table(fig: MetricFigures, rows: Sequence[dict[str, Any]], column: str, data: RecordData) -> GroupTable:
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
        judge=fig.judge,
        column=column,
        systems=sorted({k[0] for k in keys}),
        groups=sorted({k[1] for k in keys}),
        cells=[
            GroupCell(
                system=s,
                group=g,
                score=score_ci(cells[s, g], fig.aggregate),
                stats=rows_stats(cells[s, g]),
                efficiency=efficiency(cells[s, g], data),
            )
            for s, g in keys
        ],
        missing_group=missing_group,
        missing_system=missing_system,
    )


@dataclass(frozen=True)
class Pages:
    """Where the agreement pages go, and how their notes write option fields."""

    out_dir: Path
    names: Mapping[str, str]


def _agreement(
    st: Store, spec: Spec, judge: str, resamples: int, pages: Pages | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The judge-vs-human headline for a metric with human labels (None when nobody labelled it), and its page
    (the HTML, Markdown and JSON of the agreement report) when ``pages`` says where."""
    from greval.agreement.agreement import compute_agreement
    from greval.agreement.from_store import store_frame
    from greval.agreement.models import AgreementOptions
    from greval.report.agreement import render_html, render_markdown

    if not st.submitted_label_count(spec.name):
        return None, None
    frame, scale, sel = store_frame(st, spec.name, judge)
    slices = ["system"] if "system" in frame.columns and frame["system"].notna().any() else []
    rep = compute_agreement(frame, scale, AgreementOptions(bootstrap=resamples, seed=0, slices=slices))
    head = {k: {"value": e.value, "ci": [e.ci_low, e.ci_high], "n": e.n} for k, e in rep.metrics.items()}
    if pages is None:
        return head, None
    page, shown = f"{spec.name}.agreement.html", with_names(rep, pages.names)
    title = f"{spec.name} ({spec.hash}): {sel.judge} vs people"
    (pages.out_dir / page).write_text(render_html(shown, frame, title=title), encoding="utf-8")
    (pages.out_dir / f"{spec.name}.agreement.md").write_text(render_markdown(shown), encoding="utf-8")
    (pages.out_dir / f"{spec.name}.agreement.json").write_text(rep.model_dump_json(indent=2), encoding="utf-8")
    return head, page


def label_sources(st: Store, spec_name: str) -> list[LabelSource]:
    """Where a metric's human labels came from: one entry per (dataset, source), imports first."""
    rows = st.label_source_counts(spec_name)
    found = [
        LabelSource(dataset=r["dataset"], source=r["source"], submitted=r["submitted"], other=r["other"]) for r in rows
    ]
    return sorted(found, key=lambda s: (not s.source.startswith("import"), s.source != "argilla", s.dataset, s.source))


def write(rep: StoreReport, out_dir: Path, names: Mapping[str, str] | None = None) -> None:
    """The report's files (``build`` with the same ``out_dir`` wrote the agreement pages); ``names``: how the
    notes write option fields (greval.report.html.Page)."""
    from greval.report.html import render_index, render_markdown
    from greval.report.plots import overview_png

    (out_dir / "index.html").write_text(render_index(rep, names), encoding="utf-8")
    (out_dir / "report.json").write_text(rep.model_dump_json(indent=2), encoding="utf-8")
    (out_dir / "overview.png").write_bytes(overview_png(rep))
    (out_dir / "report.md").write_text(render_markdown(rep, "overview.png", names), encoding="utf-8")
