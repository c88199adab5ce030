"""Self-contained HTML (PNG charts embedded as base64), Markdown and JSON renderings of an AgreementReport.

The HTML needs the frame too, for the per-item disagreement gallery (sortable; shows optional `reason` /
`comment` columns next to the judge and human answers). Rendering never recomputes statistics.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
from scipy.stats import rankdata

from greval.agreement.models import AgreementReport, Estimate
from greval.agreement.prepare import prepare

GALLERY_LIMIT = 500


def _f(x: float | None, d: int = 3) -> str:
    return "—" if x is None else f"{x:.{d}f}"


def _ci(e: Estimate, d: int = 3) -> str:
    return "" if e.ci_low is None or e.ci_high is None else f"[{e.ci_low:.{d}f}, {e.ci_high:.{d}f}]"


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return '<img alt="chart" src="data:image/png;base64,' + base64.b64encode(buf.getvalue()).decode() + '">'


def _charts(report: AgreementReport, frame: pd.DataFrame) -> list[str]:
    """Confusion heatmap, judge-vs-human distributions, per-label reliability (or a scatter for values)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out: list[str] = []
    cat = report.categorical
    if cat is not None and cat.labels:
        cm = np.array(cat.confusion.counts, dtype=float)
        fig, ax = plt.subplots(figsize=(1.2 + 0.7 * cm.shape[1], 1.0 + 0.6 * cm.shape[0]))
        ax.imshow(cm, cmap="Blues")
        ax.set_xticks(range(cm.shape[1]), cat.confusion.judge_labels, rotation=30, ha="right")
        ax.set_yticks(range(cm.shape[0]), cat.confusion.labels)
        ax.set_xlabel("judge")
        ax.set_ylabel("human")
        for (r, c), v in np.ndenumerate(cm):
            ax.text(c, r, f"{int(v)}", ha="center", va="center", color="white" if v > cm.max() / 2 else "black")
        ax.set_title("confusion")
        out.append(_png(fig))
        fig, ax = plt.subplots(figsize=(4.5, 3))
        x = np.arange(len(cat.labels))
        ax.bar(x - 0.2, [b.human_share for b in cat.bias.per_label], 0.4, label="human")
        ax.bar(x + 0.2, [b.judge_share for b in cat.bias.per_label], 0.4, label="judge")
        ax.set_xticks(x, cat.labels, rotation=30, ha="right")
        ax.set_ylabel("share of items")
        ax.set_title("label distributions")
        ax.legend()
        out.append(_png(fig))
        rows = [r for r in cat.per_label if r.label in cat.labels]
        fig, ax = plt.subplots(figsize=(4.5, 3))
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r.precision for r in rows], 0.4, label="precision")
        ax.bar(x + 0.2, [r.recall for r in rows], 0.4, label="recall")
        ax.set_xticks(x, [r.label for r in rows], rotation=30, ha="right")
        ax.set_ylim(0, 1)
        ax.set_title("per-label reliability")
        ax.legend()
        out.append(_png(fig))
    elif report.value is not None:
        prep = prepare(frame, report.scale, report.options)
        if len(prep.hv):
            fig, ax = plt.subplots(figsize=(4.5, 3))
            ax.hist([prep.hv, prep.jv], bins=20, label=["human", "judge"])
            ax.set_title("score distributions")
            ax.legend()
            out.append(_png(fig))
            fig, ax = plt.subplots(figsize=(4, 4))
            ax.scatter(prep.hv, prep.jv, s=8, alpha=0.5)
            ax.set_xlabel("human")
            ax.set_ylabel("judge")
            ax.set_title("judge vs human")
            out.append(_png(fig))
    return out


def _table(headers: Sequence[str], rows: Sequence[Sequence[str]], cls: str = "") -> str:
    head = "".join(f"<th>{html.escape(h)}</th>" for h in headers)
    body = "".join("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _headline_rows(report: AgreementReport) -> list[list[str]]:
    rows = [[k, _f(e.value), _ci(e), str(e.n), e.note or ""] for k, e in report.metrics.items()]
    if report.categorical is not None:
        b = report.categorical.bias
        for name, est in (
            ("disagreement_rate", b.disagreement_rate),
            ("judge_above_rate", b.judge_above_rate),
            ("judge_below_rate", b.judge_below_rate),
            ("mean_signed_steps", b.mean_signed_steps),
            ("mean_signed_score", b.mean_signed_score),
        ):
            if est is not None:
                rows.append([name, _f(est.value), _ci(est), str(est.n), est.note or ""])
    return rows


def gallery(report: AgreementReport, frame: pd.DataFrame, extra: Sequence[str] = ("reason", "comment")) -> pd.DataFrame:
    """Items where the judge departs from people.

    Categorical: every disagreement. Values: by |judge − human| when the scale has bounds (both sides on
    one scale), else by the gap between percentile ranks (judge and people may use different scales).
    """
    prep = prepare(frame, report.scale, report.options)
    cols = [c for c in extra if c in frame.columns]
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
"""


def render_html(
    report: AgreementReport,
    frame: pd.DataFrame,
    title: str = "Judge–human agreement",
    extra: Sequence[str] = ("reason", "comment"),
) -> str:
    """One self-contained HTML page: headline, charts, classification report, slices, ceiling, gallery."""
    c = report.counts
    parts = [f"<h1>{html.escape(title)}</h1>"]
    parts.append(
        f"<p>{c.items_compared} items compared of {c.items} ({c.rows} rows; "
        f"{c.items_missing_human} without human, "
        f"{c.items_invalid_judge} invalid judge answers [{html.escape(report.options.invalid)}], "
        f"{c.items_dropped_invalid} dropped, {c.items_tied_majority} tied majority).</p>"
    )
    parts.append("<h2>Headline</h2>" + _table(["metric", "value", "CI", "n", "note"], _headline_rows(report)))
    parts.append('<div class="charts">' + "".join(_charts(report, frame)) + "</div>")
    cat = report.categorical
    if cat is not None:
        parts.append(
            "<h2>Classification report</h2>"
            + _table(
                ["label", "precision", "recall", "f1", "support"],
                [[r.label, _f(r.precision), _f(r.recall), _f(r.f1), str(r.support)] for r in cat.per_label],
            )
        )
        if cat.prevalence is not None:
            p = cat.prevalence
            parts.append(
                f"<h2>Prevalence ({html.escape(p.method)})</h2>"
                + _table(
                    ["label", "judge", "human", "corrected", "CI"],
                    [
                        [
                            lab,
                            _f(p.observed[i]),
                            _f(p.human[i]),
                            _f(p.corrected[i].value),
                            _ci(p.corrected[i]),
                        ]
                        for i, lab in enumerate(p.labels)
                    ],
                )
            )
    if report.value is not None:
        v = report.value
        parts.append(
            "<h2>Scores</h2>"
            + _table(
                ["side", "count", "mean", "median", "std", "min", "max"],
                [
                    [s, str(d.count), _f(d.mean), _f(d.median), _f(d.std), _f(d.min), _f(d.max)]
                    for s, d in (("judge", v.judge), ("human", v.human))
                ],
            )
        )
    if report.ceiling is not None:
        ce = report.ceiling
        parts.append(
            "<h2>Human ceiling</h2>"
            + _table(
                ["figure", "value", "CI", "n"],
                [
                    [
                        f"human–human mean {ce.metric}",
                        _f(ce.human_pairwise_mean.value),
                        _ci(ce.human_pairwise_mean),
                        str(ce.human_pairwise_mean.n),
                    ],
                    [
                        f"judge–human mean {ce.metric}",
                        _f(ce.judge_pairwise_mean.value),
                        _ci(ce.judge_pairwise_mean),
                        str(ce.judge_pairwise_mean.n),
                    ],
                    [
                        f"α {ce.alpha_level} (humans)",
                        _f(ce.human_alpha.value),
                        _ci(ce.human_alpha),
                        str(ce.human_alpha.n),
                    ],
                    [
                        f"α {ce.alpha_level} (humans + judge)",
                        _f(ce.alpha_with_judge.value),
                        _ci(ce.alpha_with_judge),
                        str(ce.alpha_with_judge.n),
                    ],
                ],
            )
        )
    for col, sub in report.slices.items():
        names = list(next(iter(sub.values())).metrics) if sub else []
        rows = [
            [val, str(r.counts.items_compared)] + [f"{_f(r.metrics[m].value)} {_ci(r.metrics[m])}" for m in names]
            for val, r in sub.items()
        ]
        parts.append(f"<h2>By {html.escape(col)}</h2>" + _table([col, "n", *names], rows, "sortable"))
    g = gallery(report, frame, extra)
    parts.append(f"<h2>Disagreements ({len(g)} shown, click a column to sort)</h2>")
    parts.append(_table(list(g.columns), [[str(x) for x in row] for row in g.itertuples(index=False)], "sortable"))
    parts.append("".join(f'<p class="note">{html.escape(n)}</p>' for n in report.notes))
    return (
        f'<!doctype html><html><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{CSS}</style></head><body>{''.join(parts)}<script>{SORT_JS}</script></body></html>"
    )


def render_markdown(report: AgreementReport, decimals: int = 3) -> str:
    """A short Markdown summary: counts, headline table, notes."""
    d = decimals
    c = report.counts
    lines = [
        f"**{c.items_compared} items compared** of {c.items} ({c.items_missing_human} without human, "
        f"{c.items_invalid_judge} invalid judge answers, policy `{report.options.invalid}`)",
        "",
        "| metric | value | CI | n | note |",
        "|---|---|---|---|---|",
    ]
    for name, value, ci, n, note in _headline_rows(report):
        e = report.metrics.get(name)
        if e is not None:
            value, ci = _f(e.value, d), _ci(e, d)
        lines.append(f"| {name} | {value} | {ci} | {n} | {note} |")
    if report.ceiling is not None:
        ce = report.ceiling
        lines += [
            "",
            f"Human ceiling: human–human mean {ce.metric} {_f(ce.human_pairwise_mean.value, d)} "
            f"{_ci(ce.human_pairwise_mean, d)}, judge–human {_f(ce.judge_pairwise_mean.value, d)} "
            f"{_ci(ce.judge_pairwise_mean, d)}",
        ]
    lines += [""] + [f"- {n}" for n in report.notes]
    return "\n".join(lines) + "\n"
