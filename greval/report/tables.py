"""The store report's tables as text cells: one function per table gives its head and rows from the report's
models, and the HTML page, the Markdown file and the terminal print the same cells (greval.report.html,
greval.report.terminal), so a figure reads the same everywhere.
"""

from __future__ import annotations

import time
from collections.abc import Sequence

from greval.agreement.models import ONE_LABEL
from greval.report.format import fmt_ci, fmt_corrected, fmt_number
from greval.report.models import GroupTable, LabelShare, LabelSource, MetricRow, ScoreStats, Shares, StoreReport
from greval.store.results import MetricFigures, not_scored


def describe_labels(sources: Sequence[LabelSource]) -> str:
    """The count line of a metric's human labels ('' when there are none), e.g.
    "23 human labels — 20 imported from a file, 3 from Argilla dataset 'x'"."""
    parts = []
    for s in sources:
        if not s.submitted:
            continue
        kind, _, name = s.source.partition(":")
        if kind == "import":
            text = f"{s.submitted} imported from {name or 'a file'}"
            if s.dataset != "import":
                text += f" (also in Argilla dataset '{s.dataset}')"
        elif kind == "argilla":
            text = f"{s.submitted} from Argilla dataset '{s.dataset}'"
        else:
            text = f"{s.submitted} from {s.source} (dataset '{s.dataset}')"
        parts.append(text)
    total = sum(s.submitted for s in sources)
    other = sum(s.other for s in sources)
    if not total and not other:
        return ""
    line = f"{total} human label{'' if total == 1 else 's'}"
    if parts:
        line += " — " + ", ".join(parts)
    if other:
        line += f" ({other} draft or discarded answer{'' if other == 1 else 's'} not compared)"
    return line


def label_lines(rep: StoreReport) -> list[str]:
    """One line per metric with human labels: "metric: 23 human labels — …" (once per metric)."""
    lines: dict[str, str] = {}
    for m in rep.metrics:
        text = describe_labels(m.labels)
        if text and m.metric not in lines:
            lines[m.metric] = f"{m.metric}: {text}"
    return list(lines.values())


#: The columns of a stats table, after its label columns (HTML, Markdown and the terminal).
STATS_HEAD = (
    "n",
    "record mean",
    "95% CI",
    "median",
    "std",
    "min",
    "p5",
    "p25",
    "p75",
    "p95",
    "max",
    "failed",
    "skipped",
)


def stats_cells(s: ScoreStats) -> list[str]:
    """A ScoreStats as the STATS_HEAD cells (the same text on every rendering)."""

    def rate(x: float | None) -> str:
        return "—" if x is None else f"{x:.1%}"

    nums = [s.median, s.std, s.min, s.p5, s.p25, s.p75, s.p95, s.max]
    return [
        str(s.n),
        fmt_number(s.mean.mean),
        fmt_ci(s.mean),
        *(fmt_number(x) for x in nums),
        rate(s.failure_rate),
        rate(s.skip_rate),
    ]


def group_head(table: GroupTable) -> list[str]:
    """The columns of a system × group table."""
    eff = sorted({k for c in table.cells for k in c.efficiency})
    return ["system", table.column, "n", "score", "95% CI", "failed", "skipped", *eff]


def group_cells(table: GroupTable) -> list[list[str]]:
    """The rows of a system × group table (efficiency: the mean per record of the cell)."""
    eff = sorted({k for c in table.cells for k in c.efficiency})
    out = []
    for c in table.cells:
        st = stats_cells(c.stats)
        score = [fmt_number(c.score.mean), fmt_ci(c.score)]
        out.append(
            [c.system, c.group, st[0], *score, st[-2], st[-1]] + [fmt_number(c.efficiency.get(k), 2) for k in eff]
        )
    return out


def corrected_rows(rep: StoreReport) -> list[list[str]]:
    """One row per (metric, system): raw judge mean label score and the corrected one, per label the raw share →
    the corrected share [CI] (greval.report.format.fmt_corrected, as the agreement page writes it), and what the
    reader must know of them — a judge no better than chance, resamples where the correction is undefined — in
    the row itself."""
    out = []
    for m in rep.metrics:
        for c in m.corrected:
            shares = "; ".join(f"{s.label}: {s.raw:.3f} → {fmt_corrected(s.corrected, s)}" for s in c.shares)
            out.append(
                [
                    rep.label(m.key),
                    c.system,
                    str(c.n_judged),
                    str(c.n_labelled),
                    fmt_number(c.raw_score),
                    fmt_number(c.corrected_score),
                    shares,
                    c.note or "",
                ]
            )
    return out


CORRECTED_HEAD = (
    "metric",
    "system",
    "judged",
    "labelled",
    "judge mean",
    "corrected mean",
    "label: raw → corrected [CI]",
    "note",
)


def pooling_text(fig: MetricFigures) -> str:
    """How a metric's dataset score pools its records, in a few words ("—" for a record-level metric)."""
    if fig.aggregate == "macro":
        return f"macro: mean of {fig.scored} records"
    if fig.scored and fig.units != fig.scored:
        return f"micro: {fig.units:g} items pooled"
    return "—"


#: The columns of the FActScore* table (per-item metrics with `target.unsupported`).
FACT_HEAD = ("metric", "records", "label counts", "precision", "recall", "F1", "macro P / R / F1")


def fact_rows(rep: StoreReport) -> list[list[str]]:
    """One row per metric with FActScore*-style counts: pooled label counts, pooled P / R / F1 (micro) and
    the means of the records' own (macro)."""
    out = []
    for m in rep.metrics:
        fc = m.figures.fact_counts
        if fc is None:
            continue
        p = fc.pooled
        macro = " / ".join(fmt_number(x) for x in (fc.macro_precision, fc.macro_recall, fc.macro_f1))
        counts = ", ".join(f"{k}: {v}" for k, v in p.labels.items())
        out.append(
            [
                rep.label(m.key),
                str(fc.records),
                counts,
                fmt_number(p.precision),
                fmt_number(p.recall),
                fmt_number(p.f1),
                macro,
            ]
        )
    return out


def stats_rows(rep: StoreReport) -> list[list[str]]:
    """metric, judge and the stats cells of every metric."""
    return [
        [rep.label(m.key), m.judge, *stats_cells(m.stats)] for m in rep.metrics if m.stats is not None and m.stats.n
    ]


def system_stats_rows(rep: StoreReport) -> list[list[str]]:
    """metric, system and the stats cells of every system row."""
    return [
        [rep.label(s.key), s.system, *stats_cells(s.stats)] for s in rep.systems if s.stats is not None and s.stats.n
    ]


def unscored_lines(rep: StoreReport) -> list[str]:
    """One line per metric left out of the record-score tables, saying why."""
    out = []
    for m in rep.metrics:
        if m.stats is not None and m.stats.n:
            continue
        why = "its labels have no scores: see its label shares" if m.by_shares else "no record has a score"
        out.append(f"{m.metric}: no record scores — {why}")
    return out


# ------------------------------------------------------------------------------------------ adaptive cells
#: Cells that say nothing: a table or column of only these is left out (a row of only these too).
EMPTY = ("—", "")

#: How the report names each headline agreement statistic (every agreement cell names its statistic).
STATISTIC_NAMES = {"cohen_kappa": "Cohen's κ", "spearman": "Spearman ρ"}


def fmt_share(s: LabelShare) -> str:
    """A label's share and its CI: "0.500 [0.300, 0.667]" ("—" when undefined)."""
    return f"{fmt_number(s.share)} {fmt_ci(s)}".strip()


def shares_text(shares: Shares | None) -> str:
    """Every label's share in one cell: "yes 0.500 [0.300, 0.667]; no 0.500 […]" ('' without shares)."""
    if shares is None or not shares.n:
        return ""
    return "; ".join(f"{s.label} {fmt_share(s)}" for s in shares.shares)


def summary_cell(m: MetricRow) -> str:
    """A metric's headline in one cell: its dataset score with the CI, or — a metric described by its labels —
    each label's share with its CI."""
    if m.by_shares:
        return shares_text(m.shares)
    return f"{fmt_number(m.score.mean)} {fmt_ci(m.score)}".strip()


def agreement_cell(m: MetricRow) -> str:
    """The judge–human headline with the statistic named: "Cohen's κ 0.412 [0.2, 0.6] (n=30)" ('' without
    labels)."""
    for key, name in STATISTIC_NAMES.items():
        e = (m.agreement or {}).get(key)
        if e:
            if e["value"] is None and str(e.get("note") or "").startswith(ONE_LABEL):
                return f"{name} {ONE_LABEL} (n={e['n']})"
            lo, hi = e["ci"]
            ci = "" if lo is None or hi is None else f" [{lo:.3f}, {hi:.3f}]"
            return f"{name} {fmt_number(e['value'])}{ci} (n={e['n']})"
    return ""


def drop_empty(head: Sequence[str], rows: Sequence[Sequence[str]], keys: int = 1) -> tuple[list[str], list[list[str]]]:
    """A table without what says nothing: rows whose cells after the first ``keys`` are all empty ("—" or ''),
    then columns (after the first ``keys``) empty in every row left."""
    kept = [list(r) for r in rows if any(c not in EMPTY for c in r[keys:])]
    cols = [i for i in range(len(head)) if i < keys or any(r[i] not in EMPTY for r in kept)]
    return [head[i] for i in cols], [[r[i] for i in cols] for r in kept]


def shares_head(m: MetricRow) -> list[str]:
    """The columns of a metric's label-share table: where, n, each label's share [95% CI], failed."""
    labels = [s.label for s in m.shares.shares] if m.shares is not None else []
    unit = m.shares.unit if m.shares is not None else "records"
    return ["records", unit if unit == "items" else "verdicts", *(f"{lab} [95% CI]" for lab in labels), "failed"]


def shares_rows(m: MetricRow, rep: StoreReport) -> list[tuple[dict[str, str], list[str]]]:
    """A categorical metric's label shares with CIs for all its records, each system and each system × group
    cell: (the explorer filter of the row, its cells; the first cell names the records)."""

    def cells(shares: Shares | None, failed: int) -> list[str]:
        per = [fmt_share(s) for s in shares.shares] if shares is not None else []
        return [str(shares.n if shares is not None else 0), *per, str(failed)]

    out: list[tuple[dict[str, str], list[str]]] = [({}, ["all", *cells(m.shares, m.figures.failed)])]
    for s in rep.systems:
        if s.key == m.key:
            out.append(({"system": s.system}, [f"{rep.system_column} {s.system}", *cells(s.shares, s.failed)]))
    for g in rep.groups:
        if g.key != m.key:
            continue
        for c in g.cells:
            where = {"system": c.system, "group": c.group} if rep.systems else {"group": c.group}
            name = f"{c.system} × {g.column} {c.group}" if rep.systems else f"{g.column} {c.group}"
            out.append((where, [name, *cells(c.shares, c.stats.failed)]))
    return out


METRICS_HEAD = (
    "metric",
    "kind",
    "judge",
    "records",
    "not scored",
    "dataset score or label shares (95% CI)",
    "pooling",
    "distribution",
    "judge–human agreement",
)


def metrics_cells(m: MetricRow, rep: StoreReport) -> list[str]:
    """A metric's row of the Metrics table (the terminal's and report.md's too)."""
    dist = ", ".join(f"{k}: {v}" for k, v in m.distribution.items())
    return [
        rep.label(m.key),
        m.kind,
        m.judge,
        str(m.records),
        not_scored(m.figures.model_dump()),
        summary_cell(m),
        pooling_text(m.figures),
        dist,
        agreement_cell(m),
    ]


EXPERIMENTS_HEAD = ("run", "started", "status", "what it tried", "records", "scores (its own run's)")


def experiment_cells(rep: StoreReport) -> list[list[str]]:
    """One row per experiment run: what the HTML and Markdown reports both show under "Experiments"."""
    return [
        [
            e.run_id,
            time.strftime("%Y-%m-%d %H:%M", time.localtime(e.started_at)),
            e.status,
            e.purpose,
            "—" if e.records is None else str(e.records),
            ", ".join(f"{k}: {fmt_number(v)}" for k, v in e.scores.items()) or "—",
        ]
        for e in rep.experiments
    ]
