"""The record explorer's data: every record row of every metric, and what each record holds, as the JavaScript
files the explorer loads on demand (``<script>`` files, so the folder opens from disk: a browser refuses
``fetch`` of ``file://``). Python decides every figure and every verdict shown (the report's models and the
store's rows); the JavaScript filters, sorts and shows them as text.

Layout under ``explorer/data/``: ``meta.js`` (the metrics, their columns, figures and filters; loaded first),
``m{metric}-{chunk}.js`` (ROWS_PER_CHUNK record rows of one metric), ``r{chunk}.js`` (RECORDS_PER_CHUNK
records' fields: question, answer, chunks …, read when a record page or a text search needs them).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from greval.llm.prices import CallsCost, Price, calls_cost, price_for, usd_text
from greval.paths import output_dir, write_private
from greval.report.explorer.js import js_call
from greval.report.models import MetricRow
from greval.report.stats import score_bins
from greval.report.tables import agreement_cell, summary_cell
from greval.spec import BaseSpec, CategoricalScale, Spec
from greval.store.labels import HumanLabel
from greval.store.store import spec_keys

ROWS_PER_CHUNK = 2000
RECORDS_PER_CHUNK = 500
#: A record row's fields, in the order each row array holds them (meta.js names them for the JavaScript).
COLUMNS = (
    "rec",  # the record's number (its chunk: rec // RECORDS_PER_CHUNK)
    "id",
    "system",
    "group",
    "status",
    "verdict",  # the label, the value, or a many-metric's item labels counted
    "score",
    "human",  # the human labels, "; "-joined
    "agree",  # "agree" / "disagree" / "" (no human label)
    "confidence",
    "latency_ms",
    "tokens",
    "cost",  # the judge's calls in US dollars (greval.llm.prices.calls_cost), None without tokens or a price
    "cost_text",  # the same as shown: "$0.000123", "≤ $0.000123" (cached tokens not recorded), "—" (no price)
    "reason",
    "bin",  # the record score's histogram bin (report.histogram's keys)
    "humans",  # [[item, annotator, label, comment], …]
    "items",  # a many-metric's [[item id, verdict, reason, status], …]
    "labels",  # the labels the row's verdicts hold (a many-metric: every item's), for the label filter
    "samples",  # the judge's answers when it was asked several times (--samples), else None
)


@dataclass(frozen=True)
class MetricData:
    """What the explorer reads of one metric: the report's row, the spec and the record rows."""

    row: MetricRow
    spec: BaseSpec
    records: Sequence[dict[str, Any]]
    items: Mapping[tuple[str, str], list[dict[str, Any]]]
    humans: Mapping[tuple[str, str], list[HumanLabel]]
    samples: Mapping[tuple[str, str], list[Any]] = field(default_factory=dict)
    #: each judgement's calls (method, item ids, times sent) by record hash: what rebuilds its prompts (None: not
    #: read)
    calls: Mapping[str, Sequence[tuple[str, Sequence[str], int]]] | None = None


def _text(v: Any) -> str:
    return "" if v is None else str(v)


def _verdict(r: Mapping[str, Any]) -> str:
    """An item row's verdict as the report's distribution names it (a label, or a value as an integer)."""
    if r.get("label") is not None:
        return str(r["label"])
    if r.get("value") is not None:
        v = float(r["value"])
        return str(int(v)) if v.is_integer() else f"{v:g}"
    return ""


def _said(h: HumanLabel) -> str:
    """A human answer as the judge's verdict is written (a label, or a value like the distribution's keys)."""
    return h["label"] if h["label"] is not None else _verdict({"value": h["value"]})


def _agree(judge: Mapping[tuple[str, str], str], humans: Sequence[HumanLabel]) -> str:
    """'disagree' when some human answer differs from the judge's verdict on its item, else 'agree' ('' without
    human answers)."""
    if not humans:
        return ""
    for h in humans:
        if judge.get((h["record_hash"], h["item_id"])) != _said(h):
            return "disagree"
    return "agree"


def _judged(m: MetricData, mine: Sequence[Mapping[str, Any]]) -> tuple[str, list[str]]:
    """A record's verdict as the table shows it (a many-metric's item labels counted) and the labels its ok
    verdicts hold (what the label filter matches)."""
    many = isinstance(m.spec, Spec) and m.spec.each is not None
    whole = [r for r in mine if r["item_id"] == ""] or list(mine[:1])
    counted = [_verdict(r) for r in (mine if many else whole) if r["status"] == "ok" and (r["item_id"] != "") == many]
    labels = sorted({v for v in counted if v})
    if not many:
        return (_verdict(whole[0]) if whole else ""), labels
    return ", ".join(f"{k} ×{counted.count(k)}" for k in dict.fromkeys(counted)), labels


def _spent(mine: Sequence[Mapping[str, Any]]) -> tuple[float | None, int | None]:
    """The judge's milliseconds and tokens (in + out) for a record: its judgement's, which every item row of the
    record carries (counted once, not once per item); None when none."""
    first = mine[0] if mine else {}
    tokens = int(first.get("tokens_in") or 0) + int(first.get("tokens_out") or 0)
    latency = float(first.get("latency_ms") or 0)
    return (round(latency) if latency else None), (tokens or None)


def record_cost(price: Price | None, mine: Sequence[Mapping[str, Any]]) -> CallsCost | None:
    """What a record's judgement cost on one metric (None: it spent no token), by the one formula."""
    first = mine[0] if mine else {}
    t_in, t_out = int(first.get("tokens_in") or 0), int(first.get("tokens_out") or 0)
    if not t_in and not t_out:
        return None
    cached = first.get("tokens_cached")
    return calls_cost(price, t_in, None if cached is None else int(cached), t_out)


def cost_cell(cost: CallsCost | None) -> str:
    """A cost as the explorer shows it ('' when nothing was spent)."""
    if cost is None:
        return ""
    if cost.usd is None:
        return "—"
    return ("≤ " if cost.bound else "") + usd_text(cost.usd)


def _reason(r: Mapping[str, Any]) -> str:
    return _text(r.get("reason") or r.get("error"))


def record_reason(m: MetricData, mine: Sequence[Mapping[str, Any]]) -> str:
    """What the record's headline says of its verdict: the judge's reason, or on a per-item metric (per chunk,
    per step …) its items' verdicts counted — "2 of 3 chunks Relevant; …" — never one item's reason as if it were
    the record's (each item's reason is shown under its item)."""
    items = [r for r in mine if r["item_id"] != ""]
    each = m.spec.each if isinstance(m.spec, Spec) else None
    if each is None or not items:
        whole = next((r for r in mine if r["item_id"] == ""), mine[0] if mine else {})
        return _reason(whole)
    n = len(items)
    said = [r for r in items if r["status"] == "ok"]
    parts = [
        f"{k} of {n} {each} {'scored ' if said[0].get('label') is None else ''}{v}"
        for v, k in Counter(_verdict(r) for r in said).items()
    ]
    errors = Counter(_reason(r) or r["status"] for r in items if r["status"] != "ok")
    parts += [f"{k} of {n} {each} not scored ({why})" for why, k in errors.items()]
    return "; ".join(parts) + f" — each {each.removesuffix('s')}'s reason is under it"


def record_confidence(mine: Sequence[Mapping[str, Any]]) -> float | None:
    """The judge's stated confidence for a record: its verdict's; a per-item metric's, its least sure item's (the
    one a reviewer should see first, as the review's selection ranks items: lowest first)."""
    items = [r["confidence"] for r in mine if r["item_id"] != "" and r.get("confidence") is not None]
    if items:
        return float(min(items))
    whole = next((r for r in mine if r["item_id"] == ""), None)
    return None if whole is None else whole.get("confidence")


def record_row(
    m: MetricData, rec: Mapping[str, Any], number: int, bin_key: str, price: Price | None = None
) -> list[Any]:
    """One record row of the explorer's table (COLUMNS' order); ``price``: its judge's."""
    key = (rec["record_id"], rec["record_hash"])
    mine = m.items.get(key, [])
    judge = {(r["record_hash"], r["item_id"]): _verdict(r) for r in mine if r["status"] == "ok"}
    humans = m.humans.get(key, [])
    verdict, labels = _judged(m, mine)
    latency, tokens = _spent(mine)
    cost = record_cost(price, mine)
    return [
        number,
        rec["record_id"],
        _text(rec.get("system")),
        _text(rec.get("group")),
        {"error": "failed"}.get(rec["status"], rec["status"]),
        verdict,
        rec.get("score"),
        "; ".join(_said(h) for h in humans),
        _agree(judge, humans),
        record_confidence(mine),
        latency,
        tokens,
        None if cost is None else cost.usd,
        cost_cell(cost),
        record_reason(m, mine),
        bin_key,
        [[h["item_id"], h["annotator"], _said(h), h["comment"] or ""] for h in humans],
        [
            [r["item_id"], _verdict(r), _reason(r), r["status"], m.samples.get((r["record_hash"], r["item_id"]))]
            for r in mine
            if r["item_id"] != ""
        ],
        labels,
        m.samples.get((rec["record_hash"], "")),
    ]


@dataclass(frozen=True)
class Pricing:
    """The price table the explorer's costs are at (the one `greval results runs` reads), or why there is none."""

    table: Mapping[str, Price] | None = None
    problem: str = ""  # why there is no table (one line naming the file)
    source: str = ""  # where the prices come from, in words

    def price(self, judge: str) -> Price | None:
        return None if self.table is None else price_for(judge, self.table)

    def missing(self, judge: str) -> str:
        """Why a judge's records have no cost ('' when they do)."""
        if self.table is None:
            return f"no cost: {self.problem or 'no price table'}"
        return "" if price_for(judge, self.table) is not None else f"no price for {judge}"


def metric_meta(
    m: MetricData, index: int, rows: Sequence[list[Any]], where: Where, pricing: Pricing = Pricing()
) -> dict[str, Any]:
    """A metric's entry in meta.js: the figures the report shows for it (the same cells) and its filters."""
    spec = m.spec
    labels = spec.scale.names if isinstance(spec, Spec) and isinstance(spec.scale, CategoricalScale) else []
    col = COLUMNS.index
    cost = total_cost(rows, pricing.price(m.row.judge) is not None)
    return {
        "index": index,
        "name": m.row.metric,
        "judge": m.row.judge,
        "kind": m.row.kind,
        "spec_hash": m.row.spec_hash,
        "labels": labels,
        "many": isinstance(spec, Spec) and spec.each is not None,
        "chunks": -(-len(rows) // ROWS_PER_CHUNK),
        "rows": len(rows),
        "figures": {
            "records": m.row.figures.records,
            "ok": m.row.figures.ok,
            "failed": m.row.figures.failed,
            "skipped": m.row.figures.skipped,
            "distribution": m.row.distribution or m.row.histogram,
            "summary": summary_cell(m.row),
            "by_shares": m.row.by_shares,
            "agreement": agreement_cell(m.row),
            "agreement_page": m.row.agreement_page or "",
            "cost": cost,
        },
        "cost_missing": pricing.missing(m.row.judge) if cost else "",
        "values": {
            key: sorted({str(r[col(key)]) for r in rows if r[col(key)] not in (None, "")})
            for key in ("system", "group", "status", "agree")
        },
        "system_column": where.system_column,
        "group_column": where.group_column,
    }


def record_fields(data: Mapping[str, Any]) -> dict[str, Any]:
    """What a record page shows of a record: its fields as stored (chunks and triples with their ids)."""
    return dict(data)


#: The columns a comparison adds to each row (side B's verdict beside side A's).
COMPARE_COLUMNS = ("verdict_b", "score_b", "reason_b", "status_b", "changed")


@dataclass(frozen=True)
class Where:
    """What the explorer says about the store and its columns (the report's, or a comparison's)."""

    store: str
    system_column: str = ""
    group_column: str = ""
    compare: tuple[str, str] | None = None


def metric_rows(m: MetricData, numbers: Mapping[tuple[str, str], int], price: Price | None = None) -> list[list[Any]]:
    """Every record row of a metric (COLUMNS' order), each with its record's number, score bin and cost at
    ``price`` (its judge's)."""
    scored = [r for r in m.records if r.get("score") is not None]
    keys, where = score_bins([float(r["score"]) for r in scored])
    bins = {id(r): keys[w] for r, w in zip(scored, where, strict=True)}
    return [
        record_row(m, rec, numbers[rec["record_id"], rec["record_hash"]], bins.get(id(rec), ""), price)
        for rec in m.records
    ]


def total_cost(rows: Sequence[Sequence[Any]], priced: bool) -> str:
    """A metric's cost in the explorer: the sum of its records' (an upper bound when one of them is); '' when
    nothing was spent, '—' when its judge has no price."""
    col = COLUMNS.index
    spent = [r for r in rows if r[col("cost_text")]]
    if not spent:
        return ""
    if not priced:
        return "—"
    total = sum(float(r[col("cost")]) for r in spent)
    return ("≤ " if any(r[col("cost_text")].startswith("≤") for r in spent) else "") + usd_text(total)


#: How far apart two scores may be and still be the same score: float noise, not a change (a computed score
#: recomputed on the same text is the same float; 1e-9 of it is far below the 3 decimals any page shows).
SAME_SCORE = 1e-9


def _same_score(x: Any, y: Any) -> bool:
    if x is None or y is None:
        return x is None and y is None
    return math.isclose(float(x), float(y), rel_tol=SAME_SCORE, abs_tol=SAME_SCORE)


def _items_said(row: Sequence[Any]) -> list[tuple[str, str, str]]:
    """A row's item verdicts as (item id, verdict, status), in item order (a many-metric's items)."""
    return sorted((str(i[0]), str(i[1]), str(i[3])) for i in row[COLUMNS.index("items")] or [])


def changed(a: Sequence[Any], b: Sequence[Any] | None) -> str:
    """Whether a record changed between the two sides of a comparison ('changed' / 'same'; '' when side B has
    no verdict for it) — THE definition the comparison page, the terminal and the explorer count: its status,
    its verdict (a label or a value), its score (a computed or pipeline metric's, or what a judge's label or
    items score) or one of its items' verdicts differs. A change of score is a change, whatever the kind."""
    if b is None:
        return ""
    col = COLUMNS.index
    same = (
        a[col("status")] == b[col("status")]
        and a[col("verdict")] == b[col("verdict")]
        and _same_score(a[col("score")], b[col("score")])
        and _items_said(a) == _items_said(b)
    )
    return "same" if same else "changed"


def side_by_side(a: list[list[Any]], b: Mapping[str, list[Any]], keys: Sequence[str]) -> list[list[Any]]:
    """Side A's rows with side B's verdict, score, reason and status of the paired record, and whether it
    changed; changed records first (then A's order)."""
    col = COLUMNS.index
    out = []
    for row, key in zip(a, keys, strict=True):
        other = b.get(key)
        extra = [None, None, None, None] if other is None else [other[col(c)] for c in ("verdict", "score", "reason")]
        if other is not None:
            extra.append(other[col("status")])
        out.append([*row, *extra, changed(row, other)])
    return sorted(out, key=lambda r: r[-1] != "changed")


def _numbers(metrics: Sequence[MetricData]) -> dict[tuple[str, str], int]:
    numbers: dict[tuple[str, str], int] = {}
    for m in metrics:
        for rec in m.records:
            numbers.setdefault((rec["record_id"], rec["record_hash"]), len(numbers))
    return numbers


def _write_rows(out: Path, i: int, rows: Sequence[list[Any]]) -> int:
    for k in range(0, len(rows), ROWS_PER_CHUNK):
        text = js_call("GREVAL.rows", i, k // ROWS_PER_CHUNK, rows[k : k + ROWS_PER_CHUNK])
        write_private(out / f"m{i}-{k // ROWS_PER_CHUNK}.js", text)
    return -(-len(rows) // ROWS_PER_CHUNK)


def _write_records(out: Path, numbers: Mapping[tuple[str, str], int], data: Mapping[str, dict[str, Any]]) -> int:
    ordered = sorted(numbers.items(), key=lambda kv: kv[1])
    for k in range(0, len(ordered), RECORDS_PER_CHUNK):
        chunk = ordered[k : k + RECORDS_PER_CHUNK]
        part = {n: {"id": rid, "fields": record_fields(data.get(h, {}))} for (rid, h), n in chunk}
        write_private(out / f"r{k // RECORDS_PER_CHUNK}.js", js_call("GREVAL.records", k // RECORDS_PER_CHUNK, part))
    return -(-len(ordered) // RECORDS_PER_CHUNK)


def prompt_note(m: MetricData) -> str:
    """Why a metric's record pages cannot show the judge's prompt ('' when they can)."""
    if m.calls is None:
        return "Prompts are shown in the store's own explorer (greval report), not in a comparison."
    return unavailable(m.spec, m.row.figures.spec_key)


def unavailable(spec: BaseSpec, spec_key: str) -> str:
    """Why a metric version's prompts cannot be shown exactly ('' when they can)."""

    if not isinstance(spec, Spec):
        if spec.kind == "computed":
            return "Computed without a judge: no prompt was sent."
        return f"A {spec.kind} metric: the prompts of its steps are not rebuilt here."
    if spec.depends_on:
        deps = ", ".join(sorted(spec.depends_on))
        return (
            f"This metric's prompt held the verdicts of {deps} as they were when it was judged: not rebuilt here, "
            "so as not to show something approximate."
        )
    if spec_keys([spec])[spec.name] != spec_key:
        return "Judged with an earlier prompt layout than this greval's: its prompt is not rebuilt (it would differ)."
    return ""


def _write_prompts(
    out: Path, i: int, m: MetricData, numbers: Mapping[tuple[str, str], int], data: Mapping[str, dict[str, Any]]
) -> int:
    # The judge's prompt code (greval.judge) loads only when prompts are written, not for every reader of this
    # module (`greval agreement FILE` prints through report.terminal, which imports the comparison's rows).
    from greval.report.explorer.prompts import write_prompts

    assert isinstance(m.spec, Spec) and m.calls is not None  # prompt_note said so
    recs = [(numbers[r["record_id"], r["record_hash"]], r["record_hash"]) for r in m.records]
    return write_prompts(out, i, m.spec, recs, data, m.calls, RECORDS_PER_CHUNK)


def write_data(
    out: Path,
    where: Where,
    metrics: Sequence[MetricData],
    data: Mapping[str, dict[str, Any]],
    paired: Sequence[tuple[list[str], Mapping[str, list[Any]]]] = (),
    pricing: Pricing = Pricing(),
) -> int:
    """Write meta.js, the row chunks and the record chunks under ``out`` (explorer/data); ``paired``: a
    comparison's (pair key of each of side A's rows, side B's rows by pair key) per metric; ``pricing``: what
    the records' calls cost. Returns the files written."""
    output_dir(out)
    numbers = _numbers(metrics)
    metas, files = [], 0
    for i, m in enumerate(metrics):
        rows = metric_rows(m, numbers, pricing.price(m.row.judge))
        if paired:
            rows = side_by_side(rows, paired[i][1], paired[i][0])
        metas.append(metric_meta(m, i, rows, where, pricing) | {"prompt": prompt_note(m)})
        files += _write_rows(out, i, rows)
        if not metas[-1]["prompt"]:
            files += _write_prompts(out, i, m, numbers, data)
    files += _write_records(out, numbers, data)
    meta = {
        "store": where.store,
        "columns": list(COLUMNS) + (list(COMPARE_COLUMNS) if paired else []),
        "compare": list(where.compare) if where.compare else None,
        "records_per_chunk": RECORDS_PER_CHUNK,
        "records": len(numbers),
        "prices": pricing.source,
        "metrics": metas,
    }
    write_private(out / "meta.js", js_call("GREVAL.meta", meta))
    return files + 1
