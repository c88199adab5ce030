"""``greval report --compare A B``: two sides of one store — runs, spec versions (``NAME@HASH``), judges or
systems (``COLUMN=VALUE``) — example by example: the records whose verdict changed, each metric's paired
difference of its dataset score with a paired bootstrap CI (:func:`greval.report.scores.paired_change`, the
paired change ``greval gate`` tests, on agreement's bootstrap), the agreement difference where people labelled
(:func:`greval.agreement.comparison.compare_agreement`, what ``greval agreement --spec A --spec B`` prints), and
the record explorer with both verdicts side by side.

Records pair by record id; two systems answer different records, so their records pair by the question they
answer (the record field ``question``).
"""

from __future__ import annotations

import html
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from greval.agreement.bootstrap import RESAMPLES, Resampling
from greval.agreement.comparison import compare_agreement, compare_independent
from greval.agreement.models import AgreementOptions
from greval.errors import UserError, option
from greval.paths import write_private
from greval.report.explorer.data import metric_rows, side_by_side
from greval.report.explorer.links import FOLDER, href
from greval.report.explorer.write import metric_data, write_comparison_explorer
from greval.report.format import fmt_ci, fmt_number
from greval.report.html import _CSS, html_table
from greval.report.models import MetricRow
from greval.report.scores import PairedChange, SystemFilter, paired_change, run_items
from greval.report.store_report import metric_row, tag_rows
from greval.report.tables import STATISTIC_NAMES, summary_cell
from greval.store.results import figures_from_rows, item_rows, record_rows
from greval.store.store import Store

SideKind = Literal["run", "version", "judge", "system"]


@dataclass(frozen=True)
class Side:
    """One side of a comparison: what the user wrote, what it names, and its item rows."""

    text: str
    kind: SideKind
    items: list[dict[str, Any]]


def _version(st: Store, text: str) -> list[dict[str, Any]] | None:
    """The item rows of the version ``text`` names (NAME@HASH; any version, an experiment's too: named, it
    is what the user asked for), None when it names none."""
    if "@" not in text:
        return None
    try:
        version = st.metric_version(text)
    except UserError:
        return None
    return item_rows(st, spec_key=version.spec_key) or None


def _run_items(st: Store, run: Mapping[str, Any]) -> list[dict[str, Any]]:
    """A run's item rows: the spec versions and judges its summary says it judged, on its records (every
    verdict on them when it has no summary yet: a run still going, or killed)."""
    judged = json.loads(run["summary"]).get("metrics", []) if run.get("summary") else []
    if not judged:
        return item_rows(st, run_id=run["run_id"])
    return run_items(st, run["run_id"], dict.fromkeys((m["spec_key"], m["judge_key"]) for m in judged))


def resolve_side(st: Store, items: Sequence[dict[str, Any]], text: str, data: Mapping[str, dict[str, Any]]) -> Side:
    """What ``text`` names in the store: a spec version NAME@HASH, a run id, a judge, or a system COLUMN=VALUE
    (a user error naming the four when it is none of them)."""
    found = _version(st, text)
    if found is not None:
        return Side(text, "version", found)
    run = next((r for r in st.runs() if r["run_id"] == text), None)
    if run is not None:
        return Side(text, "run", _run_items(st, run))
    judged = [r for r in items if text in (r["judge"], r["judge_key"])]
    if judged:
        return Side(text, "judge", judged)
    if "=" in text:
        system = SystemFilter.parse(text)
        mine = [r for r in items if system.matches(data.get(r["record_hash"], {}))]
        if mine:
            return Side(text, "system", mine)
    raise UserError(
        f"{option('compare')} {text}: not a spec version (NAME@HASH), run id, judge or system (COLUMN=VALUE) of "
        "this store"
    )


class MetricChange(BaseModel):
    """One metric on both sides: its dataset score's paired change, and agreement's where people labelled."""

    metric: str
    a: MetricRow
    b: MetricRow
    change: PairedChange
    changed: int
    compared: int
    agreement: dict[str, Any] | None = None
    agreement_pairing: Pairing | None = None
    note: str | None = None


class Comparison(BaseModel):
    store: str
    a: str
    b: str
    kind: str
    metrics: list[MetricChange]


def pair_key(side: Side, row: Mapping[str, Any], data: Mapping[str, dict[str, Any]]) -> str:
    """How a record row pairs with the other side's: its record id, or (two systems) its question."""
    if side.kind == "system":
        return str(data.get(row["record_hash"], {}).get("question", row["record_id"]))
    return str(row["record_id"])


def rekeyed(rows: Sequence[dict[str, Any]], side: Side, data: Mapping[str, dict[str, Any]]) -> list[dict[str, Any]]:
    """Record rows with ``record_id`` replaced by their pair key (what paired_change pairs on)."""
    return [{**r, "record_id": pair_key(side, r, data)} for r in rows]


Pairing = Literal["record", "question", "independent"]


def _side_frame(st: Store, side: Side, row: MetricRow) -> tuple[Any, Any]:
    """One side's (item, annotator) frame of judge and human answers and its scale (agreement's
    ``store_frame``): a spec version or judge over every labelled record, a run or system over its own."""
    from greval.agreement.from_store import store_frame

    own = side.kind in ("run", "system")
    records = {(str(r["record_id"]), str(r["record_hash"])) for r in side.items} if own else None
    frame, scale, _ = store_frame(st, row.metric, row.judge, version=row.spec_hash, records=records)
    return frame, scale


def _by_question(frame: Any, side: Side, data: Mapping[str, dict[str, Any]]) -> Any | None:
    """A system's frame with its items keyed by the question they answer (what pairs two systems), or None
    when one question is several of its records (no pairing then)."""
    question = {str(r["record_id"]): pair_key(side, r, data) for r in side.items}
    asked = frame["record_id"].astype(str).map(question)
    if not frame.empty and frame.assign(q=asked).groupby("q")["record_id"].nunique().max() > 1:
        return None
    return frame.assign(group=asked, item=asked + frame["item_id"].map(lambda i: f"/{i}" if i else ""))


def _pairing(
    sides: tuple[Side, Side], fa: Any, fb: Any, data: Mapping[str, dict[str, Any]]
) -> tuple[Pairing, Any, Any]:
    """How the two sides' labelled items pair, and the frames to compare: by record when they share
    records, two systems by question when they share questions, else independent (nothing in common)."""
    sa, sb = sides
    if sa.kind == "system":
        qa, qb = _by_question(fa, sa, data), _by_question(fb, sb, data)
        if qa is not None and qb is not None and set(qa["item"]) & set(qb["item"]):
            return "question", qa, qb
        return "independent", fa, fb
    if sa.kind in ("version", "judge") or set(fa["item"]) & set(fb["item"]):
        return "record", fa, fb
    return "independent", fa, fb


def agreement_change(
    st: Store,
    sides: tuple[Side, Side],
    rows: tuple[MetricRow, MetricRow],
    data: Mapping[str, dict[str, Any]],
    resampling: Resampling,
) -> tuple[dict[str, Any] | None, Pairing | None]:
    """Agreement with people on both sides and B − A, as ({statistic: {a, b, difference, ci, n, n_a, n_b}},
    pairing); (None, None) when nobody labelled. Paired sides are ``greval agreement --spec A --spec B``'s
    comparison (compare_agreement); sides with no item in common (two systems answering their own
    questions) an independent bootstrap difference (compare_independent) of each side's own figures."""

    (sa, sb), (a, b) = sides, rows
    if not st.submitted_label_count(a.metric) or not st.submitted_label_count(b.metric) or a.metric != b.metric:
        return None, None
    (fa, scale), (fb, _) = _side_frame(st, sa, a), _side_frame(st, sb, b)
    if fa.empty or fb.empty:
        return None, None
    pairing, fa, fb = _pairing(sides, fa, fb, data)
    options = AgreementOptions(**resampling.model_dump())
    compare = compare_independent if pairing == "independent" else compare_agreement
    rep = compare({"A": fa, "B": fb}, scale, options)
    counts = {k: rep.reports[k].counts.items_compared for k in ("A", "B")}
    out: dict[str, Any] = {}
    for d in rep.differences:
        ea, eb = rep.reports["A"].metrics.get(d.metric), rep.reports["B"].metrics.get(d.metric)
        out[d.metric] = {
            "a": None if ea is None else ea.value,
            "b": None if eb is None else eb.value,
            "difference": d.estimate.value,
            "ci": [d.estimate.ci_low, d.estimate.ci_high],
            "n": rep.common_items if rep.paired else d.estimate.n,
            "n_a": counts["A"],
            "n_b": counts["B"],
        }
    return out, pairing


def _agreement_or_note(
    st: Store,
    sides: tuple[Side, Side],
    rows: tuple[MetricRow, MetricRow],
    data: Mapping[str, dict[str, Any]],
    resampling: Resampling,
) -> tuple[dict[str, Any] | None, Pairing | None, str | None]:
    """:func:`agreement_change`, or why the agreement difference is left out (a one-line note the page and
    the terminal show: the comparison of dataset scores and verdicts stands without it)."""
    try:
        return (*agreement_change(st, sides, rows, data, resampling), None)
    except UserError as e:
        return None, None, f"agreement with people left out: {e}"


@dataclass(frozen=True)
class Built:
    """A comparison, and what the explorer shows of it: each metric's side-A data, and the pair keys."""

    comparison: Comparison
    metrics: list[Any]  # explorer.data.MetricData of side A, one per compared metric
    paired: list[tuple[list[str], dict[str, list[Any]]]]
    data: dict[str, dict[str, Any]]


def _side_metrics(st: Store, side: Side, data: dict[str, dict[str, Any]], system_column: str | None) -> dict[str, Any]:
    """metric name -> (figures, spec, record rows) of one side (the first version / judge of each name)."""

    specs = {key: st.any_spec(key) for key in dict.fromkeys(r["spec_key"] for r in side.items)}
    recs = tag_rows(record_rows(side.items, specs), data, system_column, None)
    out: dict[str, Any] = {}
    for fig in figures_from_rows(side.items, specs):
        grp = [r for r in recs if r["spec_key"] == fig.spec_key and r["judge_key"] == fig.judge_key]
        out.setdefault(fig.spec, (fig, specs[fig.spec_key], grp))
    return out


def build_comparison(
    store_path: str, a: str, b: str, resamples: int = RESAMPLES, system_column: str | None = "system"
) -> Built:
    """Resolve both sides, pair their records, and compare every metric both sides have (``resamples``: of
    every CI, seed 0)."""

    boot = Resampling(resamples=resamples)
    with Store(store_path) as st:
        items = item_rows(st)
        data = {r.hash: r.data for r in st.records()}
        sa, sb = resolve_side(st, items, a, data), resolve_side(st, items, b, data)
        ma, mb = _side_metrics(st, sa, data, system_column), _side_metrics(st, sb, data, system_column)
        names = [n for n in ma if n in mb]
        if not names:
            raise UserError(f"{option('compare')} {a} {b}: no metric has verdicts on both sides")
        out, metrics, paired = [], [], []
        for name in names:
            (fa, spa, ga), (fb, spb, gb) = ma[name], mb[name]
            ra = metric_row(st, fa, spa, sa.items, ga, boot, None)
            rb = metric_row(st, fb, spb, sb.items, gb, boot, None)
            da, db = metric_data(st, ra, spa, ga, sa.items), metric_data(st, rb, spb, gb, sb.items)
            numbers = {(r["record_id"], r["record_hash"]): 0 for r in [*ga, *gb]}
            keys_a = [pair_key(sa, r, data) for r in ga]
            rows_b = dict(zip((pair_key(sb, r, data) for r in gb), metric_rows(db, numbers), strict=True))
            change = paired_change(rekeyed(gb, sb, data), rekeyed(ga, sa, data), fa.aggregate, boot)
            rows = side_by_side(metric_rows(da, numbers), rows_b, keys_a)
            flips = sum(r[-1] == "changed" for r in rows)
            compared = sum(r[-1] != "" for r in rows)
            agree, pairing, note = _agreement_or_note(st, (sa, sb), (ra, rb), data, boot)
            out.append(
                MetricChange(
                    metric=name,
                    a=ra,
                    b=rb,
                    change=change,
                    changed=flips,
                    compared=compared,
                    agreement=agree,
                    agreement_pairing=pairing,
                    note=note,
                )
            )
            metrics.append(da)
            paired.append((keys_a, rows_b))
    comp = Comparison(store=str(store_path), a=a, b=b, kind=f"{sa.kind} vs {sb.kind}", metrics=out)
    return Built(comp, metrics, paired, data)


# ------------------------------------------------------------------------------------------------- rendering
CHANGE_HEAD = ("metric", "A", "B", "B − A (95% CI, paired)", "records paired", "verdicts changed")


def change_rows(comp: Comparison) -> list[list[str]]:
    """Each metric's scores on both sides and their paired difference (the page's and the terminal's cells)."""
    out = []
    for m in comp.metrics:
        c = m.change
        ci = fmt_ci(c)
        out.append(
            [
                m.metric,
                summary_cell(m.a),
                summary_cell(m.b),
                f"{fmt_number(c.change)} {ci}".strip() if c.change is not None else _no_change(m),
                str(c.paired),
                f"{m.changed} of {m.compared}",
            ]
        )
    return out


def _no_change(m: MetricChange) -> str:
    if m.a.by_shares:
        return "labels without scores: see the changed verdicts"
    return m.change.note or "—"


AGREE_HEAD = ("metric", "statistic", "A", "B", "B − A (95% CI)", "paired by", "items")
PAIRINGS = {"record": "record", "question": "question", "independent": "— (independent)"}


def agreement_rows(comp: Comparison) -> list[list[str]]:
    """Agreement with people on both sides, and B − A with how its CI was drawn (where people labelled)."""
    out = []
    for m in comp.metrics:
        for name, d in (m.agreement or {}).items():
            lo, hi = d["ci"]
            ci = "" if lo is None or hi is None else f" [{lo:.3f}, {hi:.3f}]"
            independent = m.agreement_pairing == "independent"
            out.append(
                [
                    m.metric,
                    STATISTIC_NAMES.get(name, name),
                    fmt_number(d["a"]),
                    fmt_number(d["b"]),
                    f"{fmt_number(d['difference'])}{ci}",
                    PAIRINGS.get(m.agreement_pairing or "record", ""),
                    f"{d['n_a']} + {d['n_b']}" if independent else str(d["n"]),
                ]
            )
    return out


AGREE_NOTE = (
    "B − A of each statistic of the judge against people. Paired by record (or, two systems, by question) when "
    "both sides have labelled items in common: greval agreement's paired comparison, B − A on the common items "
    "with the same resampled items feeding both sides. Independent when they share none (two systems answering "
    "their own questions): each side's figure on its own items, and a CI from two independent bootstraps (each "
    "side resamples its own records; the items column shows both counts)."
)


def render_page(comp: Comparison) -> str:
    """The comparison's index.html: paired differences, agreement differences, and links to the changed
    verdicts (first in the explorer)."""

    links = "".join(
        f'<li><a href="{html.escape(href(i, {"changed": "changed"}))}">{html.escape(m.metric)}: {m.changed} '
        f"changed verdict(s) of {m.compared}</a></li>"
        for i, m in enumerate(comp.metrics)
    )
    agree = agreement_rows(comp)
    return (
        '<!doctype html><html lang=en><meta charset=utf-8><meta name=viewport content="width=device-width, '
        f'initial-scale=1"><title>greval comparison</title><style>{_CSS}</style>'
        f"<h1>greval comparison</h1><p class=note>store {html.escape(comp.store)} · A = {html.escape(comp.a)}, "
        f"B = {html.escape(comp.b)} ({html.escape(comp.kind)})</p>"
        f'<p class=explore><a href="{FOLDER}/index.html">Both verdicts side by side, changed first →</a></p>'
        f"<h2>Changed verdicts</h2><ul>{links}</ul>"
        "<h2>Dataset scores</h2><p class=note>B − A on the records both sides scored (paired by record id; two "
        "systems by question), with a percentile bootstrap CI that resamples those records.</p>"
        + html_table(CHANGE_HEAD, change_rows(comp))
        + (
            f"<h2>Agreement with people</h2><p class=note>{html.escape(AGREE_NOTE)}</p>" + html_table(AGREE_HEAD, agree)
            if agree
            else ""
        )
        + "".join(f"<p class=note>{html.escape(m.metric)}: {html.escape(m.note)}</p>" for m in comp.metrics if m.note)
    )


def write(comp_built: Built, out_dir: Path) -> None:
    """index.html (the comparison), comparison.json and the explorer with both verdicts."""

    write_private(out_dir / "index.html", render_page(comp_built.comparison))
    write_private(out_dir / "comparison.json", comp_built.comparison.model_dump_json(indent=2))
    write_comparison_explorer(comp_built, out_dir)
