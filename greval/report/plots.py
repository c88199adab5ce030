"""The figures of ``greval report``, drawn from the report's own models (never from raw rows), so every figure
shows exactly the numbers the tables, report.json and report.md carry. Each figure is a PNG embedded in the HTML
as a data URI (the report opens offline anywhere).

The overview is a list of :class:`Panel` s (:func:`overview`), each drawn only when it has something to show;
a panel that would be empty is an :class:`Omitted` with one line saying why. A panel never puts scores of
different ranges on one axis (a 1–5 value and a 0–1 share): metrics are drawn in one panel per range
(:attr:`MetricRow.scale_range`). Colours: greval.report.palette (checked for colour-vision deficiencies).

matplotlib is imported inside the functions: importing this module costs nothing (tests/test_cli_startup.py).
Box plots are drawn from :class:`ScoreStats`: the box is p25–p75 with the median, the whiskers p5 and p95, and
the two dots the minimum and maximum.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import TYPE_CHECKING, Any

from greval.report.palette import CATEGORICAL, OUTCOME

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

    from greval.report.models import GroupTable, MetricKey, MetricRow, ScoreStats, Shares, StoreReport, SystemRow


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no window, no display needed): the one place greval's pages load
    matplotlib, on the first figure they draw."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _pyplot() -> Any:
    """pyplot with the report's colour cycle (greval.report.palette)."""
    from cycler import cycler

    plt = pyplot()

    plt.rcParams["axes.prop_cycle"] = cycler(color=list(CATEGORICAL))
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


def range_text(r: tuple[float, float] | None) -> str:
    """A score range as a title says it: "0–1", "1–5"."""
    return "" if r is None else f"{r[0]:g}–{r[1]:g}"


def _titled(ax: Axes, title: str) -> None:
    ax.set_title(title, fontsize=10)


def draw_boxes(ax: Axes, boxes: Sequence[tuple[str, ScoreStats]], title: str) -> None:
    """Box plots from stats (see the module doc); only boxes with a score (the caller checks there is one)."""
    drawn = [b for label, s in boxes if (b := _box(s, label)) is not None]
    ax.bxp(drawn, showfliers=True, flierprops={"marker": "o", "markersize": 3})
    _titled(ax, title)
    ax.set_ylabel("record score", fontsize=9)
    ax.tick_params(axis="x", labelrotation=20, labelsize=8)


def distribution_counts(row: MetricRow) -> tuple[dict[str, int], str]:
    """What a metric's distribution plot counts: its verdicts by label / value (judge metrics), else its records
    by score bin; and what they are."""
    if row.distribution:
        return row.distribution, "verdicts" if not row.figures.items else "items"
    return row.histogram, "records"


def draw_distribution(ax: Axes, row: MetricRow) -> None:
    """Judge metrics: the count of each label / value (ok verdicts); others: a histogram of record scores."""
    counts, what = distribution_counts(row)
    labels = list(counts)
    ax.bar(range(len(labels)), list(counts.values()), color=CATEGORICAL[0])
    for i, v in enumerate(counts.values()):
        ax.text(i, v, str(v), ha="center", va="bottom", fontsize=7)
    ax.set_xticks(range(len(labels)), labels, rotation=30 if len(labels) > 4 else 0, ha="right", fontsize=7)
    ax.set_ylabel(what, fontsize=9)
    _titled(ax, f"{row.metric}: {'label / value' if row.distribution else 'record score'} distribution")


def has_distribution(row: MetricRow) -> bool:
    counts, _ = distribution_counts(row)
    return bool(counts) and sum(counts.values()) > 0


def distribution_figure(row: MetricRow) -> str:
    """A metric's distribution plot, as an ``<img>`` ('' when it has nothing to count)."""
    if not has_distribution(row):
        return ""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.5, 3.0))
    draw_distribution(ax, row)
    return img(png(fig), f"{row.metric} distribution")


def system_boxes_figure(metric: str, systems: Sequence[SystemRow]) -> str:
    """A metric's record scores as one box per system, as an ``<img>`` ('' without systems or scores)."""
    boxes = [(s.system, s.stats) for s in systems if s.stats is not None and s.stats.n]
    if not boxes:
        return ""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.0 * len(boxes) + 2), 3.0))
    draw_boxes(ax, boxes, f"{metric}: record scores by system")
    return img(png(fig), f"{metric} box plot by system")


def _ci_error(value: float, low: float | None, high: float | None) -> tuple[float, float]:
    """Error-bar lengths below and above a value (0 where the CI end is undefined)."""
    return value - (low if low is not None else value), (high if high is not None else value) - value


def draw_system_means(ax: Axes, rep: StoreReport, metrics: Sequence[MetricKey], title: str) -> None:
    """Grouped bars: each metric's dataset score per system, with its bootstrap CI (metric rows of one range)."""
    rows = [s for s in rep.systems if s.key in metrics and s.score.mean is not None]
    systems = sorted({s.system for s in rows})
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        xs, ys, lo, hi = [], [], [], []
        for j, metric in enumerate(metrics):
            row = next((s for s in rows if s.key == metric and s.system == system), None)
            if row is None or row.score.mean is None:
                continue
            xs.append(j + i * width)
            ys.append(row.score.mean)
            down, up = _ci_error(row.score.mean, row.score.ci_low, row.score.ci_high)
            lo.append(down)
            hi.append(up)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=system)
    names = [rep.label(k) for k in metrics]
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(metrics))], names, rotation=20, ha="right")
    ax.set_ylabel("dataset score (95% CI)", fontsize=9)
    r = next((m.scale_range for m in rep.metrics if m.key in metrics), None)
    if r is not None:
        ax.set_ylim(min(r[0], 0.0), r[1] * 1.05 if r[1] > 0 else 1.0)
    _titled(ax, title)
    ax.legend(title=rep.system_column, fontsize=7, title_fontsize=8)


def draw_shares(ax: Axes, names: Sequence[str], shares: Sequence[Shares], title: str) -> None:
    """Grouped bars: each label's share (95% CI) for each of ``names`` (metrics, or one metric's systems)."""
    labels = list(dict.fromkeys(s.label for sh in shares for s in sh.shares))
    width = 0.8 / max(1, len(labels))
    for k, label in enumerate(labels):
        xs, ys, lo, hi = [], [], [], []
        for j, sh in enumerate(shares):
            one = next((s for s in sh.shares if s.label == label and s.share is not None), None)
            if one is None or one.share is None:
                continue
            xs.append(j + k * width)
            ys.append(one.share)
            down, up = _ci_error(one.share, one.ci_low, one.ci_high)
            lo.append(down)
            hi.append(up)
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=3, label=label, color=CATEGORICAL[k % len(CATEGORICAL)])
    ax.set_xticks([j + width * (len(labels) - 1) / 2 for j in range(len(names))], list(names), fontsize=8)
    ax.set_ylim(0, 1.05)
    ax.set_ylabel("share of verdicts (95% CI)", fontsize=9)
    ncol = min(len(labels), 3)
    ax.legend(fontsize=7, ncol=ncol, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    rows = -(-len(labels) // ncol)
    ax.set_title(title, fontsize=10, pad=6 + 12 * rows)


def system_chart(rep: StoreReport, metrics: Sequence[MetricKey]) -> str:
    """The dataset score of ``metrics`` (one range) per system, as an ``<img>``."""
    plt = _pyplot()
    systems = {s.system for s in rep.systems}
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * len(metrics) * len(systems) / 2 + 2), 3.6))
    draw_system_means(ax, rep, metrics, "")
    return img(png(fig), "dataset score by system")


def group_heatmap(table: GroupTable, label: str | None = None) -> str:
    """The dataset score per (system, group) cell — or, with ``label``, that label's share (a metric described by
    its label shares) — each cell annotated with it and n; as an ``<img>`` ('' when no cell has a value)."""
    import numpy as np

    grid = np.full((len(table.systems), len(table.groups)), np.nan)
    ns = np.zeros(grid.shape, dtype=int)
    for c in table.cells:
        i, j = table.systems.index(c.system), table.groups.index(c.group)
        ns[i, j] = c.stats.n if label is None else (c.shares.n if c.shares else 0)
        value = c.score.mean if label is None else _share_of(c.shares, label)
        if value is not None:
            grid[i, j] = value
    if not table.cells or np.isnan(grid).all():
        return ""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(max(4.0, 1.1 * len(table.groups) + 2.5), max(2.2, 0.6 * len(table.systems) + 1.4)))
    finite = grid[~np.isnan(grid)]
    lo, hi = float(finite.min()), float(finite.max())
    if lo >= 0 and hi <= 1:
        lo, hi = 0.0, 1.0
    im = ax.imshow(np.ma.masked_invalid(grid), cmap="cividis", vmin=lo, vmax=hi if hi > lo else lo + 1, aspect="auto")
    for i in range(grid.shape[0]):
        for j in range(grid.shape[1]):
            text = "—" if np.isnan(grid[i, j]) else f"{grid[i, j]:.2f}"
            dark = not np.isnan(grid[i, j]) and (grid[i, j] - lo) / ((hi - lo) or 1) < 0.6
            ax.text(j, i, f"{text}\nn={ns[i, j]}", ha="center", va="center", fontsize=8, color="w" if dark else "k")
    ax.set_xticks(range(len(table.groups)), table.groups, rotation=30, ha="right", fontsize=8)
    ax.set_yticks(range(len(table.systems)), table.systems, fontsize=8)
    ax.set_xlabel(table.column, fontsize=9)
    what = "dataset score" if label is None else f"share of {label!r}"
    _titled(ax, f"{table.metric}: {what} by system × {table.column}")
    fig.colorbar(im, ax=ax, fraction=0.04, pad=0.02)
    return img(png(fig), f"{table.metric} heatmap by system and {table.column}")


def _share_of(shares: Shares | None, label: str) -> float | None:
    return None if shares is None else next((s.share for s in shares.shares if s.label == label), None)


# ------------------------------------------------------------------------------------------------ the overview
@dataclass(frozen=True)
class Panel:
    """One overview panel with something to show: ``points`` is how many marks it draws (bars, boxes), never 0."""

    key: str
    title: str
    points: int
    draw: Callable[[Axes], None]
    links: list[tuple[str, dict[str, str]]] = field(default_factory=list)


@dataclass(frozen=True)
class Omitted:
    """A panel left out, and why, in one line."""

    title: str
    why: str


def ranges(rows: Sequence[MetricRow]) -> dict[tuple[float, float] | None, list[MetricRow]]:
    out: dict[tuple[float, float] | None, list[MetricRow]] = {}
    for m in rows:
        out.setdefault(m.scale_range, []).append(m)
    return out


def _ranged(title: str, r: tuple[float, float] | None, several: bool) -> str:
    return f"{title}, scale {range_text(r)}" if r is not None and several else title


def _no_score_why(rep: StoreReport) -> str:
    """Why no metric has a dataset score, naming the metrics described by their label shares."""
    shared = [m.metric for m in rep.metrics if m.by_shares]
    if shared:
        return f"{', '.join(shared)}: labels without scores, described by their label shares"
    return "no metric has a scored record"


def score_panels(rep: StoreReport) -> list[Panel | Omitted]:
    """Dataset score per metric (95% CI): one panel per score range."""
    title = "dataset score per metric (95% CI)"
    scored = [m for m in rep.metrics if m.score.mean is not None]
    if not scored:
        return [Omitted(title, _no_score_why(rep))]
    groups = ranges(scored)
    out: list[Panel | Omitted] = []
    for r, rows in groups.items():
        t = _ranged(title, r, len(groups) > 1)
        out.append(
            Panel(
                f"score-{range_text(r)}",
                t,
                len(rows),
                partial(_draw_means, rows=rows, names=[rep.label(m.key) for m in rows], title=t),
            )
        )
    return out


def _draw_means(ax: Axes, rows: Sequence[MetricRow], names: Sequence[str], title: str) -> None:
    ys = list(range(len(rows)))
    means = [m.score.mean or 0.0 for m in rows]
    errs = [_ci_error(mu, m.score.ci_low, m.score.ci_high) for mu, m in zip(means, rows, strict=True)]
    ax.barh(ys, means, xerr=[[e[0] for e in errs], [e[1] for e in errs]], capsize=3, color=CATEGORICAL[0])
    for y, mu, e in zip(ys, means, errs, strict=True):
        ax.text(mu + e[1], y, f"  {mu:.3f}", va="center", ha="left", fontsize=8)
    ax.set_yticks(ys, list(names), fontsize=8)
    ax.invert_yaxis()
    r = rows[0].scale_range
    if r is not None:
        ax.set_xlim(min(r[0], 0.0), r[1] * 1.15 if r[1] > 0 else 1.0)
    ax.set_xlabel("dataset score (the metric's aggregate)", fontsize=9)
    _titled(ax, title)


def system_score_panels(rep: StoreReport) -> list[Panel | Omitted]:
    """Dataset score by system (95% CI): one panel per score range, metrics with a score per system."""
    title = "dataset score by system (95% CI)"
    if not rep.systems:
        return [Omitted(title, f"no systems: no record has a '{rep.system_field or 'system'}' field")]
    scored = {s.key for s in rep.systems if s.score.mean is not None}
    rows = [m for m in rep.metrics if m.key in scored]
    if not rows:
        return [Omitted(title, _no_score_why(rep) + " (by system: see label shares by system)")]
    groups = ranges(rows)
    out: list[Panel | Omitted] = []
    for r, ms in groups.items():
        names = list(dict.fromkeys(m.key for m in ms))
        t = _ranged(title, r, len(groups) > 1)
        points = sum(1 for s in rep.systems if s.key in names and s.score.mean is not None)
        links = [(s, {"system": s}) for s in sorted({x.system for x in rep.systems})]
        out.append(
            Panel(
                f"systems-{range_text(r)}",
                t,
                points,
                partial(draw_system_means, rep=rep, metrics=names, title=t),
                links,
            )
        )
    return out


def box_panels(rep: StoreReport) -> list[Panel | Omitted]:
    """Record scores per metric (boxes): one panel per score range."""
    title = "record scores per metric"
    rows = [m for m in rep.metrics if m.stats is not None and m.stats.n]
    if not rows:
        return [Omitted(title, _no_score_why(rep))]
    groups = ranges(rows)
    out: list[Panel | Omitted] = []
    for r, ms in groups.items():
        boxes = [(rep.label(m.key), m.stats) for m in ms if m.stats is not None]
        t = _ranged(title, r, len(groups) > 1)
        out.append(Panel(f"boxes-{range_text(r)}", t, len(boxes), partial(draw_boxes, boxes=boxes, title=t)))
    return out


def outcome_panel(rep: StoreReport) -> list[Panel | Omitted]:
    """Each metric's records as shares ok / partial / failed / skipped."""
    title = "outcomes per metric"
    rows = [m for m in rep.metrics if m.figures.records]
    if not rows:
        return [Omitted(title, "no record has an outcome")]
    return [
        Panel(
            "outcomes", title, len(rows), lambda ax: _draw_outcomes(ax, rows, [rep.label(m.key) for m in rows], title)
        )
    ]


def _draw_outcomes(ax: Axes, rows: Sequence[MetricRow], names: Sequence[str], title: str) -> None:
    left = [0.0] * len(rows)
    for kind, color in OUTCOME.items():
        shares = [getattr(m.figures, kind) / m.figures.records for m in rows]
        ax.barh(range(len(rows)), shares, left=left, color=color, label=kind, edgecolor="white")
        for y, (x0, w) in enumerate(zip(left, shares, strict=True)):
            if w >= 0.12:
                ax.text(x0 + w / 2, y, f"{kind} {w:.0%}", ha="center", va="center", fontsize=7)
        left = [a + b for a, b in zip(left, shares, strict=True)]
    ax.set_yticks(range(len(rows)), list(names), fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set_xlabel("share of records", fontsize=9)
    ax.legend(fontsize=7, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0), frameon=False)
    ax.set_title(title, fontsize=10, pad=18)


def share_panel(rep: StoreReport) -> list[Panel | Omitted]:
    """Each categorical judge metric's label shares (95% CI): one bar per (metric, label), a colour per metric."""
    title = "label shares per metric (95% CI)"
    rows = [m for m in rep.metrics if m.shares is not None and m.shares.n]
    if not rows:
        return [Omitted(title, "no judge metric with labels")]
    points = sum(len(m.shares.shares) for m in rows if m.shares is not None)
    return [
        Panel(
            "shares",
            title,
            points,
            partial(_draw_metric_shares, rows=rows, names=[rep.label(m.key) for m in rows], title=title),
        )
    ]


def _draw_metric_shares(ax: Axes, rows: Sequence[MetricRow], names: Sequence[str], title: str) -> None:
    y, ticks, tick_names = 0.0, [], []
    for k, m in enumerate(rows):
        assert m.shares is not None
        for s in m.shares.shares:
            value = s.share or 0.0
            down, up = _ci_error(value, s.ci_low, s.ci_high)
            ax.barh(y, value, xerr=[[down], [up]], capsize=3, color=CATEGORICAL[k % len(CATEGORICAL)])
            ax.text(value + up, y, f"  {value:.3f}", va="center", ha="left", fontsize=7)
            ticks.append(y)
            tick_names.append(f"{names[k]}: {s.label}" if len(rows) > 1 else s.label)
            y += 1
        y += 0.6  # a gap between metrics
    ax.set_yticks(ticks, tick_names, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(0, 1.15)
    ax.set_xlabel("share of verdicts (95% CI)", fontsize=9)
    _titled(ax, title)


def system_share_panels(rep: StoreReport) -> list[Panel | Omitted]:
    """Label shares by system (95% CI), for each metric described by its label shares."""
    title = "label shares by system (95% CI)"
    metrics = [m for m in rep.metrics if m.by_shares]
    if not metrics:
        return []  # every categorical metric has a dataset score: by system above
    if not rep.systems:
        return [Omitted(title, f"no systems: no record has a '{rep.system_field or 'system'}' field")]
    out: list[Panel | Omitted] = []
    for m in metrics:
        rows = [s for s in rep.systems if s.key == m.key and s.shares is not None and s.shares.n]
        shares = [s.shares for s in rows if s.shares is not None]
        t = f"{rep.label(m.key)}: {title}"
        links = [(s.system, {"system": s.system}) for s in rows]
        draw = partial(draw_shares, names=[s.system for s in rows], shares=shares, title=t)
        out.append(Panel(f"system-shares-{rep.label(m.key)}", t, sum(len(s.shares) for s in shares), draw, links))
    return out


def efficiency_panel(rep: StoreReport) -> list[Panel | Omitted]:
    title = "efficiency by system (mean per record)"
    if not rep.systems or not any(s.efficiency for s in rep.systems):
        return [Omitted(title, "no efficiency fields (llm_calls, tokens, latency …) in the records")]
    # Efficiency belongs to the records, not the metric: per system, from the metric that judged most records.
    best: dict[str, SystemRow] = {}
    for s in rep.systems:
        if s.efficiency and (s.system not in best or s.judged > best[s.system].judged):
            best[s.system] = s
    points = sum(len(s.efficiency) for s in best.values())
    return [Panel("efficiency", title, points, lambda ax: _draw_efficiency(ax, rep, best, title))]


def _draw_efficiency(ax: Axes, rep: StoreReport, best: dict[str, SystemRow], title: str) -> None:
    systems = sorted(best)
    cols = sorted({c for s in best.values() for c in s.efficiency})
    width = 0.8 / max(1, len(systems))
    for i, system in enumerate(systems):
        for j, col in enumerate(cols):
            value = best[system].efficiency.get(col)
            if value is None:
                continue
            top = max(best[x].efficiency.get(col, 0.0) for x in systems) or 1.0
            color = CATEGORICAL[i % len(CATEGORICAL)]
            ax.bar(j + i * width, value / top, width, color=color, label=system if j == 0 else None)
            ax.text(j + i * width, value / top, f"{value:.3g}", ha="center", va="bottom", fontsize=7)
    ax.set_xticks([j + width * (len(systems) - 1) / 2 for j in range(len(cols))], cols, fontsize=8)
    ax.set_ylim(0, 1.2)
    ax.set_ylabel("relative to the largest system", fontsize=9)
    ax.legend(fontsize=7, title=rep.system_column, title_fontsize=8)
    _titled(ax, title)


#: The overview's panel builders, in order (docs/report.md explains each).
PANELS: tuple[Callable[[StoreReport], list[Panel | Omitted]], ...] = (
    score_panels,
    system_score_panels,
    share_panel,
    system_share_panels,
    box_panels,
    outcome_panel,
    efficiency_panel,
)


def overview(rep: StoreReport) -> tuple[list[Panel], list[Omitted]]:
    """The overview's panels with something to show, and those left out with why."""
    built = [p for make in PANELS for p in make(rep)]
    return [p for p in built if isinstance(p, Panel)], [p for p in built if isinstance(p, Omitted)]


def panel_png(panel: Panel) -> bytes:
    """One panel as its own PNG."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(5.4, 3.6))
    panel.draw(ax)
    fig.tight_layout()
    return png(fig)


def overview_png(rep: StoreReport) -> bytes:
    """Every panel with something to show in one figure, three to a row (report.md links it)."""
    panels, _ = overview(rep)
    plt = _pyplot()
    cols = max(1, min(3, len(panels)))
    rows = max(1, -(-len(panels) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5.4 * cols, 4.2 * rows), squeeze=False)
    flat = list(axes.ravel())
    for ax, panel in zip(flat, panels, strict=False):
        panel.draw(ax)
    for ax in flat[len(panels) :]:
        ax.remove()  # no empty axes: a grid's unused places are left blank
    fig.tight_layout()
    return png(fig)
