"""``greval report``: what a store says, as files people open — an HTML index, per-metric agreement pages,
JSON and Markdown summaries — and a compact table in the terminal.

For every metric: how many verdicts, failures, the mean score with a bootstrap CI, and the distribution of the
record scores (:class:`ScoreStats`: median, spread, percentiles, failure and skip rates — one function for metric,
system and group rows); per system (any grouping column of the records) side by side with the efficiency columns
records carry (tokens, LLM calls, latency); with ``group_column``, a system × group table per metric; for judge
metrics with human labels, the judge-vs-human agreement report and each system's prevalence-corrected label
shares beside the judge's raw shares. Figures: greval.report.plots. Pure reads: no model call.
"""

from __future__ import annotations

import html
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field
from scipy.stats import bootstrap

from greval.errors import UserError
from greval.report.format import fmt_ci, fmt_number
from greval.spec import CategoricalScale, Spec
from greval.store.results import (
    MetricFigures,
    dataset_score,
    figures_from_rows,
    item_rows,
    metric_notes,
    not_scored,
    record_rows,
)
from greval.store.store import Store

if TYPE_CHECKING:
    pass

#: Record fields treated as the evaluated system's efficiency figures when present.
EFFICIENCY = ("llm_calls", "prompt_tokens", "output_tokens", "tokens", "latency", "latency_s", "completion_time")


class MeanCI(BaseModel):
    n: int
    mean: float | None
    std: float | None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None


class ScoreStats(BaseModel):
    """The distribution of a set of record scores, and how many records were not scored and why.

    ``n``: scored records (ok and partial with a score); rates are over ``records`` (every outcome). std is the
    sample std (ddof=1); percentiles use numpy's default (linear interpolation between order statistics)."""

    records: int = Field(description="Record ids with an outcome (ok + partial + failed + skipped).")
    n: int
    mean: MeanCI
    median: float | None = None
    std: float | None = None
    min: float | None = None
    max: float | None = None
    p5: float | None = None
    p25: float | None = None
    p75: float | None = None
    p95: float | None = None
    failed: int = 0
    skipped: int = 0
    failure_rate: float | None = None
    skip_rate: float | None = None


#: The percentiles ScoreStats carries (numpy's linear method).
PERCENTILES = (5, 25, 75, 95)


def score_stats(
    scores: Sequence[float], records: int | None = None, failed: int = 0, skipped: int = 0, seed: int = 0
) -> ScoreStats:
    """Statistics of record scores (the one definition for metric, system and group rows).

    ``records``: how many record ids had an outcome (default: the scores' count); ``failed``/``skipped``:
    how many of them failed or were skipped. Pure."""
    x = np.asarray([v for v in scores if v is not None and not math.isnan(v)], dtype=float)
    total = len(x) if records is None else records
    out = ScoreStats(
        records=total,
        n=len(x),
        mean=mean_ci(x.tolist(), seed=seed),
        failed=failed,
        skipped=skipped,
        failure_rate=failed / total if total else None,
        skip_rate=skipped / total if total else None,
    )
    if len(x):
        p5, p25, p75, p95 = (float(v) for v in np.percentile(x, PERCENTILES))
        out.median, out.min, out.max = float(np.median(x)), float(x.min()), float(x.max())
        out.p5, out.p25, out.p75, out.p95 = p5, p25, p75, p95
        out.std = float(np.std(x, ddof=1)) if len(x) > 1 else None
    return out


def rows_stats(rows: Sequence[dict[str, Any]], seed: int = 0) -> ScoreStats:
    """:func:`score_stats` of record rows (their statuses give the failure and skip counts)."""
    return score_stats(
        _scores(rows),
        records=len(rows),
        failed=sum(1 for r in rows if r["status"] == "error"),
        skipped=sum(1 for r in rows if r["status"] == "skipped"),
        seed=seed,
    )


class SystemRow(BaseModel):
    metric: str
    system: str
    score: MeanCI
    stats: ScoreStats | None = None
    judged: int = Field(description="Record ids of this system with an outcome (any status).")
    failed: int
    skipped: int = 0
    failure_rate: float
    efficiency: dict[str, float] = Field(default_factory=dict)


class LabelSource(BaseModel):
    """Human labels of a metric from one place: an Argilla dataset (``source`` "argilla"), or a file
    (``source`` "import", or "import:FILE" when the file's name is known; ``dataset`` "import" when the
    labels went to the store only, else the Argilla dataset they were also given to)."""

    dataset: str
    source: str
    submitted: int
    other: int = Field(0, description="Draft and discarded answers (not compared with the judge).")


class GroupCell(BaseModel):
    """One (system, group) cell of a metric's system × group table."""

    system: str
    group: str
    score: MeanCI = Field(description="The cell's dataset score (the metric's aggregate) with its CI.")
    stats: ScoreStats
    efficiency: dict[str, float] = Field(default_factory=dict)


class GroupTable(BaseModel):
    """A metric's record scores by system × the values of a group column (e.g. method × film)."""

    metric: str
    judge: str
    column: str
    systems: list[str]
    groups: list[str]
    cells: list[GroupCell]
    missing_group: int = Field(0, description="Record rows with no value in the group column: in no cell.")
    missing_system: int = Field(0, description="Record rows with a group value but no system value: in no cell.")

    def notes(self) -> list[str]:
        """What is not in the table, in words (printed, and on every rendering)."""
        out = []
        if self.missing_group:
            out.append(
                f"{self.metric}: {self.missing_group} record(s) have no value in '{self.column}': not in the "
                "system × group table"
            )
        if self.missing_system:
            out.append(
                f"{self.metric}: {self.missing_system} record(s) with a '{self.column}' value have no system: "
                "not in the system × group table"
            )
        return out


class CorrectedShare(BaseModel):
    """One label's share among a system's judge verdicts, raw and corrected for the judge's measured errors."""

    label: str
    raw: float = Field(description="Share of the judge's valid verdicts with this label.")
    corrected: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    note: str | None = None


class CorrectedSystem(BaseModel):
    """A system's label prevalence, as the judge reports it and corrected (greval.agreement's Prevalence)."""

    metric: str
    system: str = Field(description="A system, or 'all' for every record of the metric.")
    method: str
    n_judged: int = Field(description="Verdicts (items) with a valid judge label: the raw shares' n.")
    n_labelled: int = Field(description="Items with a human label: where the judge's error rates come from.")
    shares: list[CorrectedShare]
    raw_score: float | None = Field(None, description="Σ raw share × label score (the judge's mean label score).")
    corrected_score: float | None = Field(None, description="Σ corrected share × label score (no CI).")
    note: str | None = None


class MetricRow(BaseModel):
    metric: str
    kind: str
    spec_hash: str
    judge: str
    figures: MetricFigures
    score: MeanCI
    stats: ScoreStats | None = None
    histogram: dict[str, int] = Field(
        default_factory=dict, description="Record scores in 10 equal bins (metrics without a distribution)."
    )
    corrected: list[CorrectedSystem] = Field(default_factory=list)
    agreement: dict[str, Any] | None = None
    agreement_page: str | None = None
    labels: list[LabelSource] = Field(default_factory=list)

    @property
    def records(self) -> int:
        return self.figures.records

    @property
    def failed(self) -> int:
        return self.figures.failed

    @property
    def distribution(self) -> dict[str, int]:
        return self.figures.distribution


class StoreReport(BaseModel):
    store: str
    metrics: list[MetricRow]
    systems: list[SystemRow]
    system_column: str | None
    group_column: str | None = None
    groups: list[GroupTable] = Field(default_factory=list)

    def notes(self) -> list[str]:
        """Every note of the report, once (the same list on every rendering)."""
        found = [n for m in self.metrics for n in metric_notes(m.figures)]
        found += [n for g in self.groups for n in g.notes()]
        found += [f"{m.metric} ({c.system}): {c.note}" for m in self.metrics for c in m.corrected if c.note]
        return list(dict.fromkeys(found))


def mean_ci(values: Sequence[float], seed: int = 0, resamples: int = 2000) -> MeanCI:
    """Mean, std and a percentile bootstrap CI (scipy); defined, documented results for n < 2."""
    x = np.asarray([v for v in values if v is not None and not math.isnan(v)], dtype=float)
    if len(x) == 0:
        return MeanCI(n=0, mean=None, std=None, note="no scores")
    if len(x) == 1:
        return MeanCI(n=1, mean=float(x[0]), std=None, note="one score: no spread, no CI")
    std = float(np.std(x, ddof=1))
    if std == 0:
        return MeanCI(
            n=len(x), mean=float(x.mean()), std=0.0, ci_low=float(x[0]), ci_high=float(x[0]), note="all scores equal"
        )
    res = bootstrap((x,), np.mean, n_resamples=resamples, method="percentile", random_state=seed)
    return MeanCI(
        n=len(x),
        mean=float(x.mean()),
        std=std,
        ci_low=float(res.confidence_interval.low),
        ci_high=float(res.confidence_interval.high),
    )


def score_ci(rows: Sequence[dict[str, Any]], pooling: str, seed: int = 0, resamples: int = 2000) -> MeanCI:
    """A metric's dataset score (:func:`greval.store.results.dataset_score`, the figure every command shows)
    with a percentile bootstrap CI over records. Micro: records are resampled with their units, and each
    resample's score is Σ score·units / Σ units (a ratio estimator; the record is the sampling unit, since a
    record's items are judged together). Macro: :func:`mean_ci` of the record scores. The rows are taken in
    record-id order, so the CI does not depend on the order the store returns them in (verdicts written
    concurrently are stored in the order they finished)."""
    rows = sorted(rows, key=lambda r: (str(r.get("record_id", "")), str(r.get("record_hash", ""))))
    score, _, n, units = dataset_score(rows, pooling)
    scored = _scored(rows)
    if pooling != "micro" or all(r["units"] == 1 for r in scored):
        # macro, or one unit per record (micro = macro): the mean itself from dataset_score, so that it is the
        # same float everywhere
        return mean_ci(_scores(rows), seed, resamples).model_copy(update={"mean": score})
    used = [r for r in scored if r["units"] > 0]
    x = np.asarray([float(r["score"]) for r in used])
    w = np.asarray([float(r["units"]) for r in used])
    std = float(np.std(x, ddof=1)) if len(x) > 1 else None
    pooled = f"pooled over {units:g} items (micro)"
    if score is None or len(x) == 0:
        return MeanCI(n=n, mean=score, std=None, note="no items to pool")
    if len(x) == 1:
        return MeanCI(n=n, mean=score, std=None, note=f"{pooled}; one record: no CI")
    if np.all(x == x[0]):
        return MeanCI(n=n, mean=score, std=0.0, ci_low=score, ci_high=score, note=f"{pooled}; all scores equal")

    def ratio(num: np.ndarray, den: np.ndarray, axis: int = -1) -> np.ndarray:
        return np.asarray(num.sum(axis=axis) / den.sum(axis=axis))

    res = bootstrap(
        (x * w, w), ratio, paired=True, vectorized=True, n_resamples=resamples, method="percentile", random_state=seed
    )
    return MeanCI(
        n=n,
        mean=score,
        std=std,
        ci_low=float(res.confidence_interval.low),
        ci_high=float(res.confidence_interval.high),
        note=pooled,
    )


def build(
    store_path: str | Path,
    specs: Sequence[str] = (),
    system_column: str | None = "system",
    bootstrap_resamples: int = 1000,
    out_dir: Path | None = None,
    group_column: str | None = None,
) -> StoreReport:
    """Compute the report (and, with ``out_dir``, write the per-metric agreement pages); ``group_column``: a
    record field to cross with the systems (one system × group table per metric)."""
    with Store(store_path) as st:
        items = item_rows(st)
        if not items:
            raise UserError(f"{store_path}: no verdicts yet; run `greval run` first")
        if specs:
            unknown = sorted(set(specs) - {r["spec"] for r in items})
            if unknown:
                raise UserError(f"no verdicts for {', '.join(unknown)} in {store_path}")
            items = [r for r in items if r["spec"] in specs]
        spec_objs = {key: st.any_spec(key) for key in dict.fromkeys(r["spec_key"] for r in items)}
        recs = record_rows(items, spec_objs)
        data = {r.hash: r.data for r in st.records()}
        for rec in recs:
            value = data.get(rec["record_hash"], {}).get(system_column) if system_column else None
            rec["system"] = None if value is None else str(value)
            gval = data.get(rec["record_hash"], {}).get(group_column) if group_column else None
            rec["group"] = None if gval is None or gval == "" else str(gval)
        metrics: list[MetricRow] = []
        systems: list[SystemRow] = []
        groups: list[GroupTable] = []
        for fig in figures_from_rows(items, spec_objs):
            spec = spec_objs[fig.spec_key]
            grp = [r for r in recs if r["spec_key"] == fig.spec_key and r["judge_key"] == fig.judge_key]
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
                row.histogram = histogram(_scores(grp))
            if isinstance(spec, Spec):
                row.agreement, row.agreement_page = _agreement(st, spec, fig.judge, bootstrap_resamples, out_dir)
                row.labels = label_sources(st, spec.name)
                if row.agreement is not None and isinstance(spec.scale, CategoricalScale):
                    row.corrected = corrected_systems(st, spec, fig, items, grp, bootstrap_resamples)
            metrics.append(row)
            if group_column:
                groups.append(group_table(fig, grp, group_column, data))
            by_system: dict[str, list[dict[str, Any]]] = {}
            for r in grp:
                if r["system"] is not None:
                    by_system.setdefault(r["system"], []).append(r)
            for system, sg in sorted(by_system.items()):
                eff = efficiency(sg, data)
                failed = sum(1 for r in sg if r["status"] == "error")
                systems.append(
                    SystemRow(
                        metric=fig.spec,
                        system=system,
                        score=score_ci(sg, fig.aggregate),
                        judged=len(sg),
                        failed=failed,
                        skipped=sum(1 for r in sg if r["status"] == "skipped"),
                        failure_rate=failed / len(sg),
                        efficiency=eff,
                        stats=rows_stats(sg),
                    )
                )
    return StoreReport(
        store=str(store_path),
        metrics=metrics,
        systems=systems,
        system_column=system_column if systems else None,
        group_column=group_column,
        groups=groups,
    )


def efficiency(rows: Sequence[dict[str, Any]], data: dict[str, dict[str, Any]]) -> dict[str, float]:
    """The mean of each EFFICIENCY field over the records of ``rows`` that carry it as a number."""
    eff: dict[str, float] = {}
    for col in EFFICIENCY:
        vals = [data.get(r["record_hash"], {}).get(col) for r in rows]
        nums = [float(v) for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]
        if nums:
            eff[col] = float(np.mean(nums))
    return eff


def histogram(scores: Sequence[float], bins: int = 10) -> dict[str, int]:
    """Record scores in ``bins`` equal bins over [0, 1] when every score is in it, else over [min, max]
    (numpy.histogram: each bin holds its lower edge, the last also its upper edge); keys "low–high"."""
    x = np.asarray(scores, dtype=float)
    if not len(x):
        return {}
    lo, hi = (0.0, 1.0) if x.min() >= 0 and x.max() <= 1 else (float(x.min()), float(x.max()))
    if hi == lo:
        hi = lo + 1.0
    counts, edges = np.histogram(x, bins=bins, range=(lo, hi))
    return {f"{edges[i]:.3g}–{edges[i + 1]:.3g}": int(c) for i, c in enumerate(counts)}


def group_table(
    fig: MetricFigures, rows: Sequence[dict[str, Any]], column: str, data: dict[str, dict[str, Any]]
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


def corrected_systems(
    st: Store,
    spec: Spec,
    fig: MetricFigures,
    items: Sequence[dict[str, Any]],
    recs: Sequence[dict[str, Any]],
    resamples: int,
) -> list[CorrectedSystem]:
    """Each system's (and all records') label prevalence corrected for the judge's error rates: greval.agreement
    computes it (``compute_agreement``'s Prevalence, Rogan–Gladen or confusion inversion, with its bootstrap CI);
    here the agreement frame of the labelled items is completed with every other ok verdict of the metric, so the
    raw shares are over all the judge's verdicts and the error rates over the labelled ones (per system: the
    system's own labelled items)."""
    import pandas as pd

    from greval.agreement.agreement import MISSING_SLICE, compute_agreement
    from greval.agreement.from_store import store_frame
    from greval.agreement.models import AgreementOptions, AgreementReport

    frame, scale, sel = store_frame(st, spec.name, fig.judge)
    if sel.spec_key != fig.spec_key:
        return []  # the labels belong to the latest version; this row is an older one
    frame = frame.drop(columns=[c for c in ("stratum", "probability", "selected") if c in frame.columns])
    frame.attrs.clear()
    system_of = {r["record_id"]: r["system"] for r in recs}
    seen = set(frame["item"])
    extra = []
    for r in items:
        if r["spec_key"] != fig.spec_key or r["judge_key"] != fig.judge_key or r["status"] != "ok":
            continue
        if (r["item_id"] != "") != (spec.each is not None):
            continue
        item = str(r["record_id"]) + (f"/{r['item_id']}" if r["item_id"] else "")
        if item not in seen:
            seen.add(item)
            extra.append({"item": item, "judge": r["label"], "human": None, "group": str(r["record_id"])})
    full = pd.concat([frame, pd.DataFrame(extra, columns=["item", "judge", "human", "group"])], ignore_index=True)
    full["record_id"] = full["group"]
    full["system"] = full["group"].map(system_of).astype("string")
    has_systems = bool(full["system"].notna().any())
    options = AgreementOptions(bootstrap=resamples, seed=0, slices=["system"] if has_systems else [])
    rep = compute_agreement(full, scale, options)
    scores = (spec.scale.scores() if isinstance(spec.scale, CategoricalScale) else None) or {}
    parts: list[tuple[str, AgreementReport]] = [("all", rep)]
    parts += [(name, sub) for name, sub in rep.slices.get("system", {}).items() if name != MISSING_SLICE]
    out = []
    for name, sub in parts:
        prev = sub.categorical.prevalence if sub.categorical is not None else None
        if prev is None:
            continue
        shares = [
            CorrectedShare(label=lab, raw=q, corrected=e.value, ci_low=e.ci_low, ci_high=e.ci_high, note=e.note)
            for lab, q, e in zip(prev.labels, prev.observed, prev.corrected, strict=True)
        ]
        scored = bool(scores) and all(s.label in scores for s in shares)
        out.append(
            CorrectedSystem(
                metric=fig.spec,
                system=name,
                method=prev.method,
                n_judged=prev.n_judged,
                n_labelled=prev.n_labelled,
                shares=shares,
                raw_score=math.fsum(s.raw * scores[s.label] for s in shares) if scored and prev.n_judged else None,
                corrected_score=(
                    math.fsum((s.corrected or 0.0) * scores[s.label] for s in shares)
                    if scored and all(s.corrected is not None for s in shares)
                    else None
                ),
                note=prev.note or next((s.note for s in shares if s.note), None),
            )
        )
    return out


def _scored(rows: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    return [r for r in rows if r["status"] in ("ok", "partial") and r["score"] is not None]


def _scores(rows: Sequence[dict[str, Any]]) -> list[float]:
    """The record scores a metric's mean is taken over (the same rows as MetricFigures.mean_score)."""
    return [float(r["score"]) for r in rows if r["status"] in ("ok", "partial") and r["score"] is not None]


def _agreement(
    st: Store, spec: Spec, judge: str, resamples: int, out_dir: Path | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The judge-vs-human headline for a metric with human labels (None when nobody labelled it)."""
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
    page = None
    if out_dir is not None:
        page = f"{spec.name}.agreement.html"
        title = f"{spec.name} ({spec.hash}): {sel.judge} vs people"
        (out_dir / page).write_text(render_html(rep, frame, title=title), encoding="utf-8")
        (out_dir / f"{spec.name}.agreement.md").write_text(render_markdown(rep), encoding="utf-8")
        (out_dir / f"{spec.name}.agreement.json").write_text(rep.model_dump_json(indent=2), encoding="utf-8")
    return head, page


def label_sources(st: Store, spec_name: str) -> list[LabelSource]:
    """Where a metric's human labels came from: one entry per (dataset, source), imports first."""
    rows = st.label_source_counts(spec_name)
    found = [
        LabelSource(dataset=r["dataset"], source=r["source"], submitted=r["submitted"], other=r["other"]) for r in rows
    ]
    return sorted(found, key=lambda s: (not s.source.startswith("import"), s.source != "argilla", s.dataset, s.source))


# ------------------------------------------------------------------------------------------ rendering
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


_CSS = """body{font-family:system-ui,sans-serif;margin:2rem;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th{background:#f3f3f3}img{max-width:100%;height:auto}td:first-child,th:first-child{text-align:left}.note{color:#666;font-size:.9em}"""


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
    """One row per (metric, system): raw judge mean label score and the corrected one, then per label the raw
    share → the corrected share [CI]."""
    out = []
    for m in rep.metrics:
        for c in m.corrected:
            shares = "; ".join(
                f"{s.label}: {s.raw:.3f} → {fmt_number(s.corrected)}"
                + (f" {fmt_ci(s)}" if s.corrected is not None and fmt_ci(s) else "")
                for s in c.shares
            )
            out.append(
                [
                    m.metric,
                    c.system,
                    str(c.n_judged),
                    str(c.n_labelled),
                    fmt_number(c.raw_score),
                    fmt_number(c.corrected_score),
                    shares,
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
            [m.metric, str(fc.records), counts, fmt_number(p.precision), fmt_number(p.recall), fmt_number(p.f1), macro]
        )
    return out


def _html_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    th = "".join(f"<th>{html.escape(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _md_table(head: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    def cell(c: str) -> str:
        return c.replace("|", r"\|")

    lines = ["| " + " | ".join(cell(h) for h in head) + " |", "|" + "---|" * len(head)]
    return lines + ["| " + " | ".join(cell(c) for c in r) + " |" for r in rows]


def stats_rows(rep: StoreReport) -> list[list[str]]:
    """metric, judge and the stats cells of every metric."""
    return [[m.metric, m.judge, *stats_cells(m.stats)] for m in rep.metrics if m.stats is not None]


def system_stats_rows(rep: StoreReport) -> list[list[str]]:
    """metric, system and the stats cells of every system row."""
    return [[s.metric, s.system, *stats_cells(s.stats)] for s in rep.systems if s.stats is not None]


def render_index(rep: StoreReport) -> str:
    from greval.report import plots

    rows = []
    for m in rep.metrics:
        link = f'<a href="{html.escape(m.agreement_page)}">agreement</a>' if m.agreement_page else "—"
        kappa = (m.agreement or {}).get("cohen_kappa") or (m.agreement or {}).get("spearman")
        agree = f"{fmt_number(kappa['value'])} {link}" if kappa else link
        dist = ", ".join(f"{html.escape(k)}: {v}" for k, v in m.distribution.items())
        rows.append(
            f"<tr><td>{html.escape(m.metric)}</td><td>{html.escape(m.kind)}</td>"
            f"<td>{html.escape(m.judge)}</td><td>{m.records}</td><td>{not_scored(m.figures.model_dump())}</td>"
            f"<td>{fmt_number(m.score.mean)}</td><td>{fmt_ci(m.score)}</td>"
            f"<td>{html.escape(pooling_text(m.figures))}</td><td>{dist}</td><td>{agree}</td></tr>"
        )
    parts = [
        f"<h1>greval report</h1><p class=note>store {html.escape(rep.store)}</p>",
        "<h2>Metrics</h2><table><tr><th>metric</th><th>kind</th><th>judge</th><th>records</th><th>not scored</th>"
        "<th>dataset score</th><th>95% CI</th><th>pooling</th><th>distribution</th><th>judge–human κ / ρ</th></tr>"
        + "".join(rows)
        + "</table>"
        + (
            "<h3>Item counts (FActScore*)</h3><p class=note>precision = positive / all items, recall = positive / "
            "(positive + unsupported), F1 their harmonic mean; pooled over every record's items, and (macro) the "
            "mean of the records' own.</p>" + _html_table(FACT_HEAD, facts)
            if (facts := fact_rows(rep))
            else ""
        ),
        "<h2 id=overview>Overview</h2>" + plots.overview_figure(rep),
        "<h2 id=stats>Record scores per metric</h2>"
        + _html_table(("metric", *STATS_HEAD), [[r[0], *r[2:]] for r in stats_rows(rep)]),
    ]
    labels = label_lines(rep)
    if labels:
        parts.append("<h2>Human labels</h2>" + "".join(f"<p>{html.escape(line)}</p>" for line in labels))
    corrected = corrected_rows(rep)
    if corrected:
        parts.append(
            "<h2>Prevalence-corrected system scores</h2><p class=note>The judge's label shares over all its "
            "verdicts, and corrected for its error rates measured on the human-labelled items "
            "(greval.agreement's prevalence correction; CI: bootstrap). Mean: Σ share × label score.</p>"
            + _html_table(CORRECTED_HEAD, corrected)
        )
    if rep.systems:
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
        parts.append(
            f"<h2>Systems by {html.escape(rep.system_column or '')}</h2>"
            + plots.system_chart(rep)
            + "<table><tr><th>metric</th><th>system</th><th>n</th><th>score</th><th>std</th><th>95% CI</th>"
            f"<th>failure rate</th>{head}</tr>"
            + "".join(srows)
            + "</table>"
            + "<h3>Record scores per system</h3>"
            + _html_table(("metric", "system", *STATS_HEAD), system_stats_rows(rep))
        )
    for g in rep.groups:
        parts.append(
            f"<h2 id=group-{html.escape(g.metric)}>{html.escape(g.metric)}: system × {html.escape(g.column)}</h2>"
            + plots.group_heatmap(g)
            + _html_table(group_head(g), group_cells(g))
            + "".join(f"<p class=note>{html.escape(n)}</p>" for n in g.notes())
        )
    parts.append("<h2>Per metric</h2>")
    for m in rep.metrics:
        boxes = plots.system_boxes_figure(m.metric, [s for s in rep.systems if s.metric == m.metric])
        parts.append(f"<h3>{html.escape(m.metric)}</h3>" + plots.distribution_figure(m) + boxes)
    parts.append("".join(f"<p class=note>{html.escape(n)}</p>" for n in rep.notes()))
    parts.append(
        "<p class=note>CIs: percentile bootstrap over records (scipy), 2000 resamples, seed 0; a pooled (micro) "
        "score resamples records with their items. Percentiles: "
        "numpy's linear interpolation; std: sample (ddof 1); failed / skipped: shares of the records.</p>"
    )
    return f"<!doctype html><meta charset=utf-8><title>greval report</title><style>{_CSS}</style>" + "".join(parts)


def render_markdown(rep: StoreReport, overview: str | None = None) -> str:
    """The report as Markdown; ``overview``: the overview PNG's file name, linked when given."""
    lines = [
        "# greval report",
        "",
        f"store `{rep.store}`",
        "",
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
        lines += ["", "### Item counts (FActScore*)", "", *_md_table(FACT_HEAD, facts)]
    notes = rep.notes()
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    if overview:
        lines += ["", f"![overview]({overview})"]
    lines += ["", "## Record scores per metric", "", *_md_table(("metric", "judge", *STATS_HEAD), stats_rows(rep))]
    for m in rep.metrics:
        if m.distribution or m.histogram:
            what = "verdicts by label / value" if m.distribution else "records by score bin"
            counts = m.distribution or m.histogram
            lines += ["", f"{m.metric} — {what}: " + ", ".join(f"{k}: {v}" for k, v in counts.items())]
    labels = label_lines(rep)
    if labels:
        lines += ["", "## Human labels", ""] + [f"- {line}" for line in labels]
    if rep.systems:
        lines += [
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
        lines += ["", "### Record scores per system", ""]
        lines += _md_table(("metric", "system", *STATS_HEAD), system_stats_rows(rep))
    corrected = corrected_rows(rep)
    if corrected:
        lines += ["", "## Prevalence-corrected system scores", "", *_md_table(CORRECTED_HEAD, corrected)]
    for g in rep.groups:
        lines += ["", f"## {g.metric}: system × {g.column}", "", *_md_table(group_head(g), group_cells(g))]
    return "\n".join(lines) + "\n"


def write(rep: StoreReport, out_dir: Path) -> None:
    """The report's files (``build`` with the same ``out_dir`` wrote the agreement pages)."""
    from greval.report.plots import overview_png

    (out_dir / "index.html").write_text(render_index(rep), encoding="utf-8")
    (out_dir / "report.json").write_text(rep.model_dump_json(indent=2), encoding="utf-8")
    (out_dir / "overview.png").write_bytes(overview_png(rep))
    (out_dir / "report.md").write_text(render_markdown(rep, overview="overview.png"), encoding="utf-8")
