"""The page of a ``greval watch`` (``greval watch page``, or ``--page DIR`` after each pass): per metric, its
windows as a trend — the dataset score and the agreement with people with their CIs, the traces seen and judged,
what each window cost — windows in alarm ringed, then a table whose every window opens its records in the record
explorer written beside the page (filtered by the window). Renders the figures each pass stored
(:mod:`greval.watch.windows`); computes none. One folder that opens from disk, offline.
"""

from __future__ import annotations

import html
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from greval.agreement.bootstrap import Resampling
from greval.llm.prices import usd_text
from greval.paths import output_dir, write_private
from greval.report.explorer.data import Where, write_data
from greval.report.explorer.links import FOLDER, href
from greval.report.explorer.write import copy_static, metric_data, pricing
from greval.report.format import fmt_ci, fmt_number
from greval.report.html import _CSS, linked_table
from greval.report.palette import CATEGORICAL, DISAGREE
from greval.report.plots import _pyplot, img, png
from greval.report.store_report import metric_row
from greval.store.results import figures_from_rows, record_rows
from greval.store.store import Store
from greval.watch.windows import Scope, WindowFigures, judged_items

__all__ = ["trend_png", "windows_of", "write_page"]

#: Windows per metric the page shows (the latest).
LAST_WINDOWS = 48


def windows_of(st: Store, watch_id: str, last: int = LAST_WINDOWS) -> dict[str, list[WindowFigures]]:
    """Each metric's latest stored windows, oldest first."""
    out: dict[str, list[WindowFigures]] = {}
    for metric in st.watch_metrics(watch_id):
        rows = st.watch_windows(watch_id, metric, last=last)
        out[metric] = [WindowFigures.model_validate(r.figures) for r in rows if r.figures]
    return {m: w for m, w in out.items() if w}


def _bars(ax: Any, xs: Sequence[int], windows: Sequence[WindowFigures], which: str) -> None:
    values: list[tuple[float | None, float | None, float | None]] = []
    for w in windows:
        e = w.agreement if which == "agreement" else None
        if which == "score":
            values.append((w.score.mean, w.score.ci_low, w.score.ci_high))
        else:
            values.append((None, None, None) if e is None else (e.value, e.ci_low, e.ci_high))
    for x, (v, lo, hi), w in zip(xs, values, windows, strict=True):
        if v is None:
            continue
        err = [[v - lo if lo is not None else 0], [hi - v if hi is not None else 0]]
        ax.errorbar([x], [v], yerr=err, fmt="o", color=CATEGORICAL[0], capsize=3)
        if w.alarms:
            ax.plot([x], [v], "o", ms=14, mfc="none", mec=DISAGREE, mew=2)


def trend_png(metric: str, windows: Sequence[WindowFigures]) -> bytes:
    """Score and agreement per window with their CIs (alarms ringed), traces seen and judged, and the cost."""
    plt = _pyplot()
    agreement = any(w.agreement is not None for w in windows)
    panels = ["score", *(["agreement"] if agreement else []), "volume", "cost"]
    fig, axes = plt.subplots(len(panels), 1, figsize=(9, 1.9 * len(panels) + 0.6), sharex=True, squeeze=False)
    xs = list(range(len(windows)))
    priced = any(w.volume.usd is not None for w in windows)
    for ax, which in zip(axes[:, 0], panels, strict=True):
        if which in ("score", "agreement"):
            _bars(ax, xs, windows, which)
            figure = next((w.agreement_figure for w in windows if w.agreement_figure), "agreement")
            ax.set_ylabel("dataset score" if which == "score" else f"{figure} vs people")
        elif which == "volume":
            ax.bar([x - 0.2 for x in xs], [w.volume.seen for w in windows], 0.4, label="seen", color=CATEGORICAL[1])
            ax.bar([x + 0.2 for x in xs], [w.volume.judged for w in windows], 0.4, label="judged", color=CATEGORICAL[2])
            ax.set_ylabel("traces")
            ax.legend(fontsize=7, loc="upper left")
        else:
            costs = [(w.volume.usd or 0.0) if priced else float(w.volume.tokens) for w in windows]
            ax.bar(xs, costs, 0.6, color=CATEGORICAL[3])
            ax.set_ylabel("US dollars" if priced else "judge tokens")
        ax.grid(axis="y", alpha=0.3)
    step = max(1, len(windows) // 12)
    axes[-1, 0].set_xticks(xs[::step], [w.label[5:16].replace("T", "\n") for w in windows][::step], fontsize=7)
    axes[-1, 0].set_xlabel(f"{metric}: windows (UTC start), oldest first; ringed: in alarm")
    return bytes(png(fig))


def _explorer(
    st: Store, watch_id: str, by_metric: Mapping[str, Sequence[WindowFigures]], folder: Path
) -> dict[str, int]:
    """The explorer beside the page: each metric's judged records of these windows, each tagged with its window
    (the explorer's group); metric -> its number in the explorer."""
    if (folder / "data").exists():
        shutil.rmtree(folder / "data")
    copy_static(folder)
    metrics: list[Any] = []
    data: dict[str, dict[str, Any]] = {}
    numbers: dict[str, int] = {}
    for metric, windows in by_metric.items():
        w0 = windows[-1]
        scope = Scope(watch_id, metric, w0.spec_key, w0.spec_hash, w0.judge_key, w0.end - w0.start)
        rows = st.window_items(scope.watch_id, metric, [w.start for w in windows])
        items = judged_items(st, scope, rows)
        if not items:
            continue
        label = {(str(r["record_id"]), str(r["record_hash"])): _label(r["window_start"], windows) for r in rows}
        specs = {scope.spec_key: st.any_spec(scope.spec_key)}
        recs = record_rows(items, specs)
        for rec in recs:
            rec["group"] = label.get((str(rec["record_id"]), str(rec["record_hash"])))
            rec["system"] = None
        fig = figures_from_rows(items, specs)[0]
        row = metric_row(st, fig, specs[scope.spec_key], items, recs, Resampling(resamples=200), None)
        numbers[metric] = len(metrics)
        metrics.append(metric_data(st, row, specs[scope.spec_key], recs, items))
        data.update({r.hash: r.data for r in st.records({str(i["record_hash"]) for i in items})})
    write_data(folder / "data", Where(st.name, "", "window"), metrics, data, pricing=pricing())
    return numbers


def _label(start: Any, windows: Sequence[WindowFigures]) -> str | None:
    return next((w.label for w in windows if w.start == float(start)), None)


def _rows(metric: int | None, windows: Sequence[WindowFigures]) -> list[tuple[str, list[str]]]:
    out = []
    for w in reversed(windows):
        v = w.volume
        agree = f"{fmt_number(w.agreement.value)} {fmt_ci(w.agreement)}".strip() if w.agreement else "—"
        link = href(metric, {"group": w.label}, f"{FOLDER}/index.html") if metric is not None else "#"
        cost = "—" if v.usd is None else usd_text(v.usd)
        out.append(
            (
                link,
                [
                    w.label,
                    str(v.seen),
                    str(v.sampled),
                    str(v.judged),
                    str(v.held),
                    f"{fmt_number(w.score.mean)} {fmt_ci(w.score)}".strip(),
                    agree,
                    "—" if w.review_units is None else str(w.review_units),
                    str(v.tokens),
                    cost,
                    "; ".join(a.split(": ", 2)[-1] for a in w.alarms),
                ],
            )
        )
    return out


def render(source: str, by_metric: Mapping[str, Sequence[WindowFigures]], numbers: Mapping[str, int]) -> str:
    """The page (see the module doc)."""
    parts = [
        f"<h1>greval watch: {html.escape(source)}</h1>",
        "<p class=note>Per metric and per window (traces grouped by when they started, UTC): the dataset score and "
        "the judge's agreement with people on the window's reviewed records, each with its 95% bootstrap CI — the "
        "figures <code>greval gate</code> and <code>greval history</code> give —, the traces seen and judged, and "
        "the judge's tokens or cost. A window is <b class=drop>in alarm</b> when its interval lies wholly below its "
        "baseline's. Each window opens its records in the explorer.</p>",
    ]
    for metric, windows in by_metric.items():
        figure = next((w.agreement_figure for w in windows if w.agreement_figure), "agreement")
        head = [
            "window (UTC)",
            "seen",
            "chosen",
            "judged",
            "held back",
            "score [95% CI]",
            f"{figure} [95% CI]",
            "to review",
            "tokens",
            "cost",
            "alarm",
        ]
        parts.append(f"<h2>{html.escape(metric)}</h2>")
        parts.append(f"<figure>{img(trend_png(metric, windows), f'{metric}: windows as a trend')}</figure>")
        parts.append(linked_table(head, _rows(numbers.get(metric), windows)))
    style = _CSS + ".drop{color:#D55E00}"
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width,'
        f' initial-scale=1"><title>greval watch</title><style>{style}</style></head><body>'
        + "".join(parts)
        + "</body></html>"
    )


def write_page(st: Store, watch_id: str, out_dir: Path) -> Path:
    """Write ``index.html`` and the explorer into ``out_dir`` (made 0700, files 0600); returns index.html."""
    found = next((w for w in st.watches() if w["watch_id"] == watch_id), None)
    source = found["source"] if found else watch_id
    by_metric = windows_of(st, watch_id)
    output_dir(out_dir)
    numbers = _explorer(st, watch_id, by_metric, out_dir / FOLDER) if by_metric else {}
    index = out_dir / "index.html"
    write_private(index, render(source, by_metric, numbers))
    return index
