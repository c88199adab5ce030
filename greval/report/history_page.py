"""The history page of a metric (``greval history NAME --html``, and ``NAME.history.html`` beside a report): its
score and its agreement with people per run, as a trend with CIs, each production period shaded, drops marked;
then every run and every promotion in a table. One HTML file with the chart embedded: it opens from disk, offline.
Renders a :class:`greval.report.history.History`; computes nothing."""

from __future__ import annotations

import html
import time
from collections.abc import Sequence

from greval.report.format import fmt_ci, fmt_number
from greval.report.history import History, RunPoint
from greval.report.html import _CSS, html_table
from greval.report.palette import CATEGORICAL, DISAGREE
from greval.report.plots import _pyplot, img, png


def _when(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(at))


def trend_png(h: History) -> bytes:
    """Score (and agreement, when people labelled) per run with CI bars; production periods shaded by version,
    drops ringed."""
    plt = _pyplot()
    panels = 2 if any(p.agreement is not None for p in h.runs) else 1
    fig, axes = plt.subplots(panels, 1, figsize=(8, 2.6 * panels), sharex=True, squeeze=False)
    versions = list(dict.fromkeys([*(p.spec_hash for p in h.periods), *(r.spec_hash for r in h.runs)]))
    colour = {v: CATEGORICAL[i % len(CATEGORICAL)] for i, v in enumerate(versions)}
    xs = list(range(len(h.runs)))
    for ax, which in zip(axes[:, 0], ("score", "agreement"), strict=False):
        _shade(ax, h)
        for x, p in zip(xs, h.runs, strict=True):
            value, low, high, drop = _figure(p, which)
            if value is None:
                continue
            err = [[value - low if low is not None else 0], [high - value if high is not None else 0]]
            ax.errorbar([x], [value], yerr=err, fmt="o", color=colour[p.spec_hash], capsize=3)
            if drop:
                ax.plot([x], [value], "o", ms=14, mfc="none", mec=DISAGREE, mew=2)
        figure = next((p.agreement_figure for p in h.runs if p.agreement_figure), "agreement")
        ax.set_ylabel("dataset score" if which == "score" else f"{figure} vs people")
        ax.grid(axis="y", alpha=0.3)
    axes[-1, 0].set_xticks(xs, [f"{i + 1}\n{p.spec_hash[:6]}" for i, p in enumerate(h.runs)], fontsize=8)
    axes[-1, 0].set_xlabel("run (oldest first) and its version; shaded: production periods; ringed: a drop")
    return png(fig)


def _shade(ax: object, h: History) -> None:
    """Shade the runs of each production period (by the run index range it covers)."""
    for i, p in enumerate(h.runs):
        if p.production:
            ax.axvspan(i - 0.5, i + 0.5, color="#9e9e9e", alpha=0.15, lw=0)  # type: ignore[attr-defined]


def _figure(p: RunPoint, which: str) -> tuple[float | None, float | None, float | None, bool]:
    if which == "score":
        return p.score.mean, p.score.ci_low, p.score.ci_high, p.score_drop
    a = p.agreement
    return (None, None, None, False) if a is None else (a.value, a.ci_low, a.ci_high, p.agreement_drop)


def _run_rows(h: History) -> list[list[str]]:
    rows = []
    for i, p in enumerate(h.runs, 1):
        drop = ", ".join(w for w, d in (("score", p.score_drop), ("agreement", p.agreement_drop)) if d)
        agreement = "—" if p.agreement is None else f"{fmt_number(p.agreement.value)} {fmt_ci(p.agreement)}".strip()
        rows.append(
            [
                str(i),
                html.escape(_when(p.at)),
                html.escape(p.run_id),
                html.escape(p.spec_hash[:12]) + (" <b>production</b>" if p.production else ""),
                html.escape(p.judge),
                html.escape(p.dataset_name or p.dataset),
                str(p.records),
                f"{fmt_number(p.score.mean)} {fmt_ci(p.score)}".strip(),
                html.escape(agreement) + (f" <span class=note>(n={p.agreement.n})</span>" if p.agreement else ""),
                f"<b class=drop>drop: {drop}</b>" if drop else "",
            ]
        )
    return rows


def _promotion_rows(h: History) -> list[list[str]]:
    return [
        [html.escape(_when(p.at)), html.escape(p.spec_hash[:12]), html.escape(p.source), html.escape(p.note or "")]
        for p in h.promotions
    ]


def render_history(h: History) -> str:
    """The page (see the module doc)."""
    figure = next((p.agreement_figure for p in h.runs if p.agreement_figure), "agreement")
    head = ["#", "started", "run", "version", "judge", "dataset", "records", "score [95% CI]", f"{figure} [95% CI]"]
    parts = [
        f"<h1>{html.escape(h.metric)}: history</h1>",
        "<p class=note>Every run of the metric (experiments aside), oldest first; each figure is the one its run "
        "summary, <code>greval gate</code> and <code>greval agreement</code> give on the run's records. A run is "
        "marked as a <b>drop</b> when its interval lies wholly below the previous production run's. "
        f"{h.resamples} bootstrap resamples per interval.</p>",
    ]
    if h.runs:
        parts.append(f"<figure>{img(trend_png(h), f'{h.metric}: score and agreement per run')}</figure>")
        parts.append(html_table([*head, "flag"], _run_rows(h)))
    parts.append("<h2>Production versions</h2>")
    parts.append(html_table(["since", "version", "how", "note"], _promotion_rows(h)))
    parts += [f"<p class=note>{html.escape(n)}</p>" for n in h.notes]
    style = _CSS + ".drop{color:#D55E00}"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,'
        f' initial-scale=1"><title>{html.escape(h.metric)}: history</title><style>{style}</style></head><body>'
        + "".join(parts)
        + "</body></html>"
    )


def history_rows(h: History) -> Sequence[Sequence[str]]:
    """The runs as terminal table cells (plain text)."""
    out = []
    for i, p in enumerate(h.runs, 1):
        drop = ", ".join(w for w, d in (("score", p.score_drop), ("agreement", p.agreement_drop)) if d)
        agreement = "—" if p.agreement is None else f"{fmt_number(p.agreement.value)} {fmt_ci(p.agreement)}".strip()
        out.append(
            [
                str(i),
                _when(p.at),
                p.spec_hash[:12] + (" (production)" if p.production else ""),
                p.judge,
                p.dataset_name or p.dataset,
                str(p.records),
                f"{fmt_number(p.score.mean)} {fmt_ci(p.score)}".strip(),
                agreement,
                f"drop: {drop}" if drop else "",
            ]
        )
    return out


__all__ = ["history_rows", "render_history", "trend_png"]
