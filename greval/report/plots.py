"""The figures of ``greval report``, drawn from the report's own models (never from raw rows), so every figure
shows exactly the numbers the tables, report.json and report.md carry. Each figure is a PNG embedded in the HTML
as a data URI (the report opens offline anywhere).

matplotlib is imported inside the functions: importing this module costs nothing (tests/test_cli_startup.py).
Box plots are drawn from :class:`ScoreStats`: the box is p25–p75 with the median, the whiskers p5 and p95, and
the two dots the minimum and maximum.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from greval.report.models import GroupTable, MetricRow, ScoreStats, StoreReport, SystemRow


def _pyplot() -> Any:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def png(fig: Figure) -> bytes:
    """The figure as PNG bytes (and closed)."""
    plt = _pyplot()
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def img(data: bytes, alt: str) -> str:
    """An ``<img>`` with the PNG embedded."""
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{base64.b64encode(data).decode()}">'


def _empty(ax: Axes, title: str, why: str) -> None:
    """A panel with no data says so instead of showing empty axes."""
    ax.set_title(title, fontsize=10)
    ax.text(0.5, 0.5, why, ha="center", va="center", wrap=True, fontsize=9, color="#666", transform=ax.transAxes)
    ax.set_xticks([])
    ax.set_yticks([])


def _box(stats: ScoreStats, label: str) -> dict[str, Any] | None:
    if stats.n == 0 or stats.median is None:
        return None
    return {
        "label": label,
        "med": stats.median,
        "q1": stats.p25,
        "q3": stats.p75,
        "whislo": stats.p5,
        "whishi": stats.p95,
        "fliers": [stats.min, stats.max],
    }


def draw_boxes(ax: Axes, boxes: Sequence[tuple[str, ScoreStats]], title: str, why: str) -> None:
    """Box plots from stats (see the module doc); "why" when none has a score."""
    drawn = [b for label, s in boxes if (b := _box(s, label)) is not None]
    if not drawn:
        _empty(ax, title, why)
        return
    ax.bxp(drawn, showfliers=True, flierprops={"marker": "o", "markersize": 3})
    ax.set_title(title, fontsize=10)
    ax.set_ylabel("record score", fontsize=9)
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)


def draw_distribution(ax: Axes, row: MetricRow) -> None:
    """Judge metrics: the count of each label / value (ok verdicts); others: a histogram of record scores."""
    if row.distribution:
        counts, what = row.distribution, "verdicts"
    else:
        counts, what = row.histogram, "records"
    if not counts or not sum(counts.values()):
        _empty(ax, row.metric, "no scores to show")
        return
    labels = list(counts)
    ax.bar(range(len(labels)), list(counts.values()), color="#4c72b0")
    for i, v in enumerate(counts.values()):
        ax.text(i, v, str(v), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 4 else 0, ha="right", fontsize=7)
    ax.set_ylabel(what, fontsize=9)
    ax.set_title(f"{row.metric}: {'label / value' if row.distribution else 'record score'} distribution", fontsize=10)


def distribution_figure(row: MetricRow) -> str:
    """A metric's distribution plot, as an ``<img>``."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.0))
    draw_distribution(ax, row)
    return img(png(fig), f"{row.metric} distribution")


def system_boxes_figure(metric: str, systems: Sequence[SystemRow]) -> str:
    """A metric's record scores as one box per system, as an ``<img>`` ('' without systems)."""
    boxes = [(s.system, s.stats) for s in systems if s.stats is not None]
    if not boxes:
        return ""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.0 * len(boxes) + 2), 3.0))
    draw_boxes(ax, boxes, f"{metric}: record scores by system", "no scores")
    return img(png(fig), f"{metric} box plot by system")


def draw_system_means(ax: Axes, rep: StoreReport, title: str = "dataset score by system (95% CI)") -> None:
    """Grouped bars: each metric's mean record score per system, with its bootstrap CI."""
    if not rep.systems:
        _empty(ax, title, "no systems: the records have no system column")
        return
    metrics = sorted({s.metric for s in rep.systems})
    systems = sorted({s.system for s in rep.systems})
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        xs, ys, lo, hi = [], [], [], []
        for j, metric in enumerate(metrics):
            row = next((s for s in rep.systems if s.metric == metric and s.system == system), None)
            if row is None or row.score.mean is None:
                continue
            m = row.score.mean
            xs.append(j + i * width)
            ys.append(m)
            lo.append(m - (row.score.ci_low if row.score.ci_low is not None else m))
            hi.append((row.score.ci_high if row.score.ci_high is not None else m) - m)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=system)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(metrics))], metrics, rotation=20, ha="right")
    ax.set_ylabel("dataset score (95% CI)", fontsize=9)
    ax.set_title(title, fontsize=10)
    ax.legend(title=rep.system_column, fontsize=7, title_fontsize=8)


def system_chart(rep: StoreReport) -> str:
    """Every metric's mean per system, as an ``<img>`` ('' without systems)."""
    if not rep.systems:
        return ""
    plt = _pyplot()
    metrics = {s.metric for s in rep.systems}
    systems = {s.system for s in rep.systems}
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(metrics) * len(systems) / 2 + 2), 3.6))
    draw_system_means(ax, rep, title="")
    return img(png(fig), "systems")


def group_heatmap(table: GroupTable) -> str:
    """Mean record score per (system, group) cell, each cell annotated with its mean and n; as an ``<img>``."""
    if not table.cells:
        return ""
    import numpy as np

    plt = _pyplot()
    grid = np.full((len(table.systems), len(table.groups)), np.nan)
    ns = np.zeros(grid.shape, dtype=int)
    for c in table.cells:
        i, j = table.systems.index(c.system), table.groups.index(c.group)
        ns[i, j] = c.stats.n
        if c.score.mean is not None:
            grid[i, j] = c.score.mean
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(table.groups) + 2.5), max(2.2, 0.6 * len(table.systems) + 1.4)))
    finite = grid[~np.isnan(grid)]
    lo, hi = (float(finite.min()), float(finite.max())) if finite.size else (0.0, 1.0)
    if lo >= 0 and hi <= 1:
        lo, hi = 0.0, 1.0
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", vmin=lo, vmax=hi if hi > lo else lo + 1, aspect="auto")
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            text = "—" if np.isnan(grid[i, j]) else f"{grid[i, j]:.2f}"
            dark = not np.isnan(grid[i, j]) and (grid[i, j] - lo) / ((hi - lo) or 1) < 0.6
            ax.text(j, i, f"{text}\nn={ns[i, j]}", ha="center", va="center", fontsize=8, color="w" if dark else "k")
    ax.set_xticks(range(len(table.groups)), table.groups, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(table.systems)), table.systems, fontsize=8)
    ax.set_xlabel(table.column, fontsize=9)
    ax.set_title(f"{table.metric}: dataset score by system × {table.column}", fontsize=10)
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    return img(png(fig), f"{table.metric} heatmap by system and {table.column}")


#: The overview's six panels, in order (left to right, top to bottom); docs/report.md explains each.
PANELS = (
    "dataset score per metric (95% CI)",
    "dataset score by system (95% CI)",
    "record scores per metric",
    "outcomes per metric",
    "label distribution (judge metrics)",
    "efficiency by system",
)


def overview_png(rep: StoreReport) -> bytes:
    """The 2×3 overview figure (see PANELS); a panel without data says why instead of being empty."""
    plt = _pyplot()
    fig, axes = plt.subplots(2, 3, figsize=(16, 8.5))
    a = axes.ravel()
    _panel_means(a[0], rep)
    draw_system_means(a[1], rep, PANELS[1])
    draw_boxes(a[2], [(m.metric, m.stats) for m in rep.metrics if m.stats is not None], PANELS[2], "no scores")
    _panel_outcomes(a[3], rep)
    _panel_labels(a[4], rep)
    _panel_efficiency(a[5], rep)
    fig.tight_layout()
    return png(fig)


def overview_figure(rep: StoreReport) -> str:
    return img(overview_png(rep), "overview")


def _panel_means(ax: Axes, rep: StoreReport) -> None:
    rows = [m for m in rep.metrics if m.score.mean is not None]
    cis = [m.score for m in rows]
    if not rows:
        _empty(ax, PANELS[0], "no metric has a score")
        return
    ys = list(range(len(rows)))
    means = [c.mean or 0.0 for c in cis]
    lo = [mu - (c.ci_low if c.ci_low is not None else mu) for mu, c in zip(means, cis, strict=True)]
    hi = [(c.ci_high if c.ci_high is not None else mu) - mu for mu, c in zip(means, cis, strict=True)]
    ax.barh(ys, means, xerr=[lo, hi], capsize=3, color="#4c72b0")
    for y, mu, up in zip(ys, means, hi, strict=True):
        ax.text(mu + up, y, f"  {mu:.3f}", va="center", ha="left", fontsize=8)
    ax.set_yticks(ys, [m.metric for m in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("dataset score (the metric's aggregate)", fontsize=9)
    ax.set_title(PANELS[0], fontsize=10)


def _panel_outcomes(ax: Axes, rep: StoreReport) -> None:
    rows = [m for m in rep.metrics if m.figures.records]
    if not rows:
        _empty(ax, PANELS[3], "no records")
        return
    kinds = (("ok", "#55a868"), ("partial", "#dd8452"), ("failed", "#c44e52"), ("skipped", "#8c8c8c"))
    left = [0.0] * len(rows)
    for kind, color in kinds:
        shares = [getattr(m.figures, kind) / m.figures.records for m in rows]
        ax.barh(range(len(rows)), shares, left=left, color=color, label=kind)
        left = [a + b for a, b in zip(left, shares, strict=True)]
    ax.set_yticks(range(len(rows)), [m.metric for m in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of records", fontsize=9)
    ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.set_title(PANELS[3], fontsize=10, pad=18)


def _panel_labels(ax: Axes, rep: StoreReport) -> None:
    rows = [m for m in rep.metrics if m.distribution and sum(m.distribution.values())]
    if not rows:
        _empty(ax, PANELS[4], "no judge metric with labels or values (computed metrics: see panel 3)")
        return
    plt = _pyplot()
    cmap = plt.get_cmap("tab10")
    for y, m in enumerate(rows):
        total = sum(m.distribution.values())
        left = 0.0
        for k, (label, count) in enumerate(m.distribution.items()):
            share = count / total
            ax.barh(y, share, left=left, color=cmap(k % 10), edgecolor="white")
            if share >= 0.08:
                ax.text(left + share / 2, y, f"{label}\n{share:.0%}", ha="center", va="center", fontsize=6.5)
            left += share
    ax.set_yticks(range(len(rows)), [m.metric for m in rows], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of ok verdicts", fontsize=9)
    ax.set_title(PANELS[4], fontsize=10)


def _panel_efficiency(ax: Axes, rep: StoreReport) -> None:
    if not rep.systems or not any(s.efficiency for s in rep.systems):
        _empty(ax, PANELS[5], "no efficiency fields (llm_calls, tokens, latency…) in the records")
        return
    # Efficiency belongs to the records, not the metric: per system, from the metric that judged most records.
    best: dict[str, SystemRow] = {}
    for s in rep.systems:
        if s.efficiency and (s.system not in best or s.judged > best[s.system].judged):
            best[s.system] = s
    systems = sorted(best)
    cols = sorted({c for s in best.values() for c in s.efficiency})
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        for j, col in enumerate(cols):
            value = best[system].efficiency.get(col)
            if value is None:
                continue
            top = max(best[x].efficiency.get(col, 0.0) for x in systems) or 1.0
            ax.bar(j + i * width, value / top, width, color=f"C{i}", label=system if j == 0 else None)
            ax.text(j + i * width, value / top, f"{value:.3g}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(cols))], cols, fontsize=8)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("relative to the largest system", fontsize=9)
    ax.legend(fontsize=7, title=rep.system_column, title_fontsize=8)
    ax.set_title(PANELS[5] + " (mean per record)", fontsize=10)
