"""``greval report``: what a store says, as files people open — an HTML index, per-metric agreement pages,
JSON and Markdown summaries — and a compact table in the terminal.

For every metric: how many verdicts, failures, the mean score with a bootstrap CI; per system (any grouping
column of the records) side by side with the efficiency columns records carry (tokens, LLM calls, latency);
for judge metrics with human labels, the judge-vs-human agreement report. Pure reads: no model call.
"""

from __future__ import annotations

import base64
import html
import io
import math
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
from pydantic import BaseModel, Field
from scipy.stats import bootstrap

from greval.errors import UserError
from greval.report.format import fmt_ci, fmt_number
from greval.spec import Spec
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


class SystemRow(BaseModel):
    metric: str
    system: str
    score: MeanCI
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


class MetricRow(BaseModel):
    metric: str
    kind: str
    spec_hash: str
    judge: str
    figures: MetricFigures
    score: MeanCI
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
    record's items are judged together). Macro: :func:`mean_ci` of the record scores."""
    score, _, n, units = dataset_score(rows, pooling)
    if pooling != "micro":  # the mean itself from dataset_score, so that it is the same float everywhere
        return mean_ci(_scores(rows), seed, resamples).model_copy(update={"mean": score})
    used = [r for r in rows if r["status"] in ("ok", "partial") and r["score"] is not None and r["units"] > 0]
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
) -> StoreReport:
    """Compute the report (and, with ``out_dir``, write the per-metric agreement pages)."""
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
        metrics: list[MetricRow] = []
        systems: list[SystemRow] = []
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
            if isinstance(spec, Spec):
                row.agreement, row.agreement_page = _agreement(st, spec, fig.judge, bootstrap_resamples, out_dir)
                row.labels = label_sources(st, spec.name)
            metrics.append(row)
            by_system: dict[str, list[dict[str, Any]]] = {}
            for r in grp:
                if r["system"] is not None:
                    by_system.setdefault(r["system"], []).append(r)
            for system, sg in sorted(by_system.items()):
                eff: dict[str, float] = {}
                for col in EFFICIENCY:
                    vals = [data.get(r["record_hash"], {}).get(col) for r in sg]
                    nums = [float(v) for v in vals if isinstance(v, int | float)]
                    if nums:
                        eff[col] = float(np.mean(nums))
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
                    )
                )
    return StoreReport(
        store=str(store_path), metrics=metrics, systems=systems, system_column=system_column if systems else None
    )


def _scores(rows: Sequence[dict[str, Any]]) -> list[float]:
    """The record scores a metric's mean is taken over (the same rows as MetricFigures.mean_score)."""
    return [float(r["score"]) for r in rows if r["status"] in ("ok", "partial") and r["score"] is not None]


def _agreement(
    st: Store, spec: Spec, judge: str, resamples: int, out_dir: Path | None
) -> tuple[dict[str, Any] | None, str | None]:
    """The judge-vs-human headline for a metric with human labels (None when nobody labelled it)."""
    from greval.agreement.compute import compute_agreement
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


def _system_chart(rep: StoreReport) -> str:
    if not rep.systems:
        return ""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = sorted({s.metric for s in rep.systems})
    systems = sorted({s.system for s in rep.systems})
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(metrics) * len(systems) / 2 + 2), 3.6))
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        xs, ys, lo, hi = [], [], [], []
        for j, metric in enumerate(metrics):
            row = next((s for s in rep.systems if s.metric == metric and s.system == system), None)
            if row is None or row.score.mean is None:
                continue
            xs.append(j + i * width)
            ys.append(row.score.mean)
            lo.append(row.score.mean - (row.score.ci_low if row.score.ci_low is not None else row.score.mean))
            hi.append((row.score.ci_high if row.score.ci_high is not None else row.score.mean) - row.score.mean)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=system)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(metrics))], metrics, rotation=20, ha="right")
    ax.set_ylabel("mean score (95% CI)")
    ax.legend(title=rep.system_column, fontsize=8)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return '<img alt="systems" src="data:image/png;base64,' + base64.b64encode(buf.getvalue()).decode() + '">'


_CSS = """body{font-family:system-ui,sans-serif;margin:2rem;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{border:1px solid #ccc;padding:.3rem .6rem;text-align:right}
th{background:#f3f3f3}td:first-child,th:first-child{text-align:left}.note{color:#666;font-size:.9em}"""


def render_index(rep: StoreReport) -> str:
    rows = []
    for m in rep.metrics:
        link = f'<a href="{html.escape(m.agreement_page)}">agreement</a>' if m.agreement_page else "—"
        kappa = (m.agreement or {}).get("cohen_kappa") or (m.agreement or {}).get("spearman")
        agree = f"{fmt_number(kappa['value'])} {link}" if kappa else link
        dist = ", ".join(f"{html.escape(k)}: {v}" for k, v in m.distribution.items())
        rows.append(
            f"<tr><td>{html.escape(m.metric)}</td><td>{html.escape(m.kind)}</td>"
            f"<td>{html.escape(m.judge)}</td><td>{m.records}</td><td>{not_scored(m.figures.model_dump())}</td>"
            f"<td>{fmt_number(m.score.mean)}</td><td>{fmt_ci(m.score)}</td><td>{dist}</td><td>{agree}</td></tr>"
        )
    parts = [
        f"<h1>greval report</h1><p class=note>store {html.escape(rep.store)}</p>",
        "<h2>Metrics</h2><table><tr><th>metric</th><th>kind</th><th>judge</th><th>records</th><th>not scored</th>"
        "<th>mean score</th><th>95% CI</th><th>distribution</th><th>judge–human κ / ρ</th></tr>"
        + "".join(rows)
        + "</table>",
    ]
    labels = label_lines(rep)
    if labels:
        parts.append("<h2>Human labels</h2>" + "".join(f"<p>{html.escape(line)}</p>" for line in labels))
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
            + _system_chart(rep)
            + "<table><tr><th>metric</th><th>system</th><th>n</th><th>mean</th><th>std</th><th>95% CI</th>"
            f"<th>failure rate</th>{head}</tr>" + "".join(srows) + "</table>"
        )
    notes = [n for m in rep.metrics for n in metric_notes(m.figures)]
    parts.append("".join(f"<p class=note>{html.escape(n)}</p>" for n in notes))
    parts.append("<p class=note>CIs: percentile bootstrap of the mean (scipy), 2000 resamples, seed 0.</p>")
    return f"<!doctype html><meta charset=utf-8><title>greval report</title><style>{_CSS}</style>" + "".join(parts)


def render_markdown(rep: StoreReport) -> str:
    lines = [
        "# greval report",
        "",
        f"store `{rep.store}`",
        "",
        "| metric | judge | records | not scored | mean | 95% CI |",
        "|---|---|---|---|---|---|",
    ]
    for m in rep.metrics:
        lines.append(
            f"| {m.metric} | {m.judge} | {m.records} | {not_scored(m.figures.model_dump()) or '—'} | "
            f"{fmt_number(m.score.mean)} | {fmt_ci(m.score)} |"
        )
    notes = [n for m in rep.metrics for n in metric_notes(m.figures)]
    if notes:
        lines += [""] + [f"- {n}" for n in notes]
    labels = label_lines(rep)
    if labels:
        lines += ["", "## Human labels", ""] + [f"- {line}" for line in labels]
    if rep.systems:
        lines += [
            "",
            f"## Systems by {rep.system_column}",
            "",
            "| metric | system | n | mean | 95% CI | failure rate |",
            "|---|---|---|---|---|---|",
        ]
        for s in rep.systems:
            lines.append(
                f"| {s.metric} | {s.system} | {s.judged} | {fmt_number(s.score.mean)} | {fmt_ci(s.score)} | "
                f"{s.failure_rate:.1%} |"
            )
    return "\n".join(lines) + "\n"


def write(rep: StoreReport, out_dir: Path) -> None:
    """The report's files (``build`` with the same ``out_dir`` wrote the agreement pages)."""
    (out_dir / "index.html").write_text(render_index(rep), encoding="utf-8")
    (out_dir / "report.json").write_text(rep.model_dump_json(indent=2), encoding="utf-8")
    (out_dir / "report.md").write_text(render_markdown(rep), encoding="utf-8")
