"""Reading verdicts back out of a store: item rows, record rows, and each metric's figures — defined once.

Every command that shows a count or a score (the run summary, ``greval report``, ``load_results`` and exports,
``greval results runs``) reads it from here, so the same store gives the same figures everywhere:

- **item rows**: one per stored verdict *and record id* — the verdict cache is keyed by content, but two
  records with the same content and different ids are two rows (each id is listed, counted and weighted);
- **record rows**: one per (metric, judge, record id): a many-metric's items aggregated into the record's
  score, with the record's status: ``ok`` (every verdict ok), ``partial`` (some items failed), ``error``
  (no verdict), ``skipped`` (the metric does not apply: a required input is absent);
- **figures** (:class:`MetricFigures`): per metric and judge, the counts of those statuses, the item counts,
  the label / value distribution and the dataset score — the mean of the record scores of ``ok`` and
  ``partial`` records (a many-metric's dataset score is the mean of its record scores, never of its items).

Pure computation over stored rows: changing how a figure is computed never needs a model call.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from greval.errors import UserError
from greval.judge import MISSING_INPUT
from greval.spec import BaseSpec, CategoricalScale, Spec, ValueScale
from greval.store import Store

if TYPE_CHECKING:
    import pandas as pd

RecordStatus = Literal["ok", "partial", "error", "skipped"]

_ITEM_COLS = (
    "spec",
    "spec_hash",
    "spec_key",
    "judge",
    "judge_key",
    "record_id",
    "record_hash",
    "item_id",
    "status",
    "label",
    "value",
    "score",
    "confidence",
    "reason",
    "error",
    "outputs",
    "tokens_in",
    "tokens_out",
    "latency_ms",
    "attempts",
    "run_id",
    "created_at",
    "updated_at",
)


#: What figures need of an item row (reading only these keeps a 100k-record summary fast and small).
_FIGURE_COLS = _ITEM_COLS[:15]


def _item_sql(ids: str, full: bool) -> str:
    """Verdicts joined with their record ids (``ids``: the id table to join, with its own filter); ``full``
    adds the judgement's outputs, tokens and timings."""
    cols = """v.spec_name, v.spec_hash, v.spec_key, j.label, v.judge_key, COALESCE(i.record_id, v.record_id),
       v.record_hash, v.item_id, v.status, v.label, v.value, v.score, v.confidence, v.reason, v.error"""
    if not full:
        return f"SELECT {cols} FROM verdicts v JOIN judges j ON j.judge_key = v.judge_key {ids}"
    return f"""
SELECT {cols},
       g.outputs, g.tokens_in, g.tokens_out, g.latency_ms, g.attempts, v.run_id, v.created_at, v.updated_at
FROM verdicts v
JOIN judges j ON j.judge_key = v.judge_key
{ids}
LEFT JOIN judgements g ON g.spec_key = v.spec_key AND g.judge_key = v.judge_key AND g.record_hash = v.record_hash
"""


def item_rows(
    store: Store,
    spec: str | None = None,
    *,
    run_id: str | None = None,
    spec_key: str | None = None,
    judge_key: str | None = None,
    full: bool = True,
) -> list[dict[str, Any]]:
    """One row per verdict and record id. ``run_id``: only the records (ids) that run was given. Without
    ``full``, only the columns figures read (no outputs, tokens or timings)."""
    where: list[str] = []
    params: list[Any] = []
    if run_id is not None:
        ids = (
            "JOIN snapshot_members i ON i.record_hash = v.record_hash"
            " AND i.snapshot = (SELECT snapshot FROM runs WHERE run_id = ?)"
        )
        params.append(run_id)
    else:
        ids = "LEFT JOIN record_ids i ON i.record_hash = v.record_hash"
    for col, val in (("v.spec_name", spec), ("v.spec_key", spec_key), ("v.judge_key", judge_key)):
        if val is not None:
            where.append(f"{col} = ?")
            params.append(val)
    sql = _item_sql(ids, full) + (" WHERE " + " AND ".join(where) if where else "")
    sql += " ORDER BY v.spec_name, v.created_at, v.rowid, 6"
    with store._lock:
        rows = store.db.execute(sql, params).fetchall()
    if not full:
        return [dict(zip(_FIGURE_COLS, r, strict=True)) for r in rows]
    out = []
    for r in rows:
        row = dict(zip(_ITEM_COLS, r, strict=True))
        row["outputs"] = json.loads(row["outputs"]) if row["outputs"] else {}
        out.append(row)
    return out


def aggregate_items(spec: Spec, labels: Sequence[str | None], values: Sequence[float | None]) -> float | None:
    """A many-metric's record score from its item verdicts (None when no item has a verdict).

    mean: mean of values; share: share of items whose label is positive; score_mean: mean label score.
    """
    how = spec.aggregate
    if how == "mean":
        vals = [float(v) for v in values if v is not None]
        return sum(vals) / len(vals) if vals else None
    labs = [lab for lab in labels if lab is not None]
    if not labs:
        return None
    if how == "share":
        positive = set(spec.positive_labels)
        return sum(1 for lab in labs if lab in positive) / len(labs)
    scores = spec.scale.scores() if hasattr(spec.scale, "scores") else None
    if not scores:
        return None
    return sum(scores[lab] for lab in labs) / len(labs)


def _status(rows: Sequence[Mapping[str, Any]]) -> RecordStatus:
    statuses = [r["status"] for r in rows]
    if "skipped" in statuses and not any(s == "ok" for s in statuses):
        return "skipped"
    ok = sum(1 for s in statuses if s == "ok")
    return "ok" if ok == len(statuses) else ("partial" if ok else "error")


def record_rows(items: Sequence[Mapping[str, Any]], specs: Mapping[str, BaseSpec]) -> list[dict[str, Any]]:
    """Item rows grouped into one row per (metric version, judge, record id, content) — see the module doc.
    ``specs``: spec key -> spec, for every spec key in ``items``."""
    groups: dict[tuple[str, str, str, str], list[Mapping[str, Any]]] = {}
    for r in items:
        groups.setdefault((r["spec_key"], r["judge_key"], r["record_id"], r["record_hash"]), []).append(r)
    out: list[dict[str, Any]] = []
    for (skey, jkey, rid, rhash), grp in groups.items():
        sp = specs[skey]
        if not isinstance(sp, Spec):  # computed / pipeline: the record row holds the score, items the detail
            whole = [r for r in grp if r["item_id"] == ""]
            grp = whole or grp
        first = grp[0]
        ok = [r for r in grp if r["status"] == "ok"]
        many = isinstance(sp, Spec) and sp.each is not None
        item_grp = [r for r in grp if r["item_id"] != ""]
        row: dict[str, Any] = {
            "spec": first["spec"],
            "spec_hash": first["spec_hash"],
            "spec_key": skey,
            "judge": first["judge"],
            "judge_key": jkey,
            "record_id": rid,
            "record_hash": rhash,
            "status": _status(grp),
            "items": len(item_grp) if sp.each else None,
            "items_ok": sum(1 for r in item_grp if r["status"] == "ok") if sp.each else None,
            "outputs": first.get("outputs"),
            "tokens_in": first.get("tokens_in"),
            "tokens_out": first.get("tokens_out"),
        }
        if many:
            assert isinstance(sp, Spec)
            row["label"] = None
            row["value"] = None
            row["score"] = aggregate_items(
                sp,
                [r["label"] for r in ok],
                [None if r["value"] is None else float(r["value"]) for r in ok],
            )
            row["reason"] = None
            row["error"] = "; ".join(sorted({str(r["error"]) for r in grp if r["error"]})) or None
        else:
            for col in ("label", "value", "score", "reason", "error"):
                row[col] = first[col]
        out.append(row)
    return out


def error_kind(text: str | None) -> str:
    """A failure's kind: the text before its first colon (e.g. ``no verdict after 3 call(s)``)."""
    if not text:
        return "unknown"
    return text.split(":")[0][:60]


class MetricFigures(BaseModel):
    """Every count and score greval shows for one metric version and judge (see the module doc)."""

    spec: str
    spec_hash: str
    spec_key: str
    kind: str
    judge: str
    judge_key: str
    records: int = Field(0, description="Record ids with a stored outcome (ok + partial + failed + skipped).")
    ok: int = 0
    partial: int = Field(0, description="Many-metrics: records where some items have no verdict.")
    failed: int = Field(0, description="Records with no verdict at all (stored errors).")
    skipped: int = Field(0, description="Records the metric does not apply to (a required input is absent).")
    items: int | None = Field(None, description="Many-metrics: item outcomes over all records.")
    items_ok: int | None = None
    items_failed: int | None = None
    verdicts: int = Field(0, description="ok verdicts (items for many-metrics, records otherwise).")
    scored: int = Field(0, description="Records with a score (the mean's n).")
    mean_score: float | None = Field(None, description="Mean record score over ok and partial records.")
    distribution: dict[str, int] = Field(default_factory=dict)
    skipped_why: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict, description="Failed records and items by error kind.")


def not_scored(counts: Mapping[str, Any]) -> str:
    """The records a metric did not score, by why: "2 failed, 10 skipped" ('' when every record is ok).
    ``counts``: a MetricFigures dumped, or a run's stored summary of one metric."""
    return ", ".join(f"{counts[k]} {k}" for k in ("partial", "failed", "skipped") if counts.get(k))


def metric_notes(fig: MetricFigures) -> list[str]:
    """What a reader must know about a metric's figures, in words (the same in every rendering)."""
    notes = []
    for why, n in fig.skipped_why.items():
        notes.append(f"{fig.spec}: {n} record(s) skipped — {why}{_map_hint(why)}")
    if fig.failed or fig.partial:
        kinds = ", ".join(f"{k} ×{v}" for k, v in fig.errors.items())
        notes.append(
            f"{fig.spec}: {fig.failed} record(s) failed, {fig.partial} partly failed ({kinds}); "
            "`greval run … --retry-errors` judges them again"
        )
    if fig.records and fig.ok + fig.partial == 0:
        notes.append(f"{fig.spec}: no verdict at all — the metric produced nothing to score")
    return notes


def _map_hint(why: str) -> str:
    if not why.startswith(MISSING_INPUT):
        return ""
    names = [n.strip() for n in why.split(":", 1)[1].split(",") if n.strip()]
    return " — map a column with " + " ".join(f"--map {n}=COLUMN" for n in names) if names else ""


def _figures_for(sp: BaseSpec, items: Sequence[Mapping[str, Any]], recs: Sequence[Mapping[str, Any]]) -> MetricFigures:
    first = recs[0]
    statuses = Counter(r["status"] for r in recs)
    fig = MetricFigures(
        spec=first["spec"],
        spec_hash=first["spec_hash"],
        spec_key=first["spec_key"],
        kind=sp.kind,
        judge=first["judge"],
        judge_key=first["judge_key"],
        records=len(recs),
        ok=statuses["ok"],
        partial=statuses["partial"],
        failed=statuses["error"],
        skipped=statuses["skipped"],
    )
    judged = [r for r in recs if r["status"] in ("ok", "partial")]
    scores = [float(r["score"]) for r in judged if r["score"] is not None]
    fig.scored = len(scores)
    fig.mean_score = sum(scores) / len(scores) if scores else None
    skipped_ids = {(r["record_id"], r["record_hash"]) for r in recs if r["status"] == "skipped"}
    fig.skipped_why = dict(
        Counter(
            str(r["error"]) for r in items if r["item_id"] == "" and (r["record_id"], r["record_hash"]) in skipped_ids
        )
    )
    failed_ids = {(r["record_id"], r["record_hash"]) for r in recs if r["status"] in ("error", "partial")}
    fig.errors = dict(
        Counter(
            error_kind(r["error"])
            for r in items
            if r["status"] == "error" and (r["record_id"], r["record_hash"]) in failed_ids
        )
    )
    if sp.each:
        unit_items = [r for r in items if r["item_id"] != ""]
        fig.items = len(unit_items)
        fig.items_ok = sum(1 for r in unit_items if r["status"] == "ok")
        fig.items_failed = sum(1 for r in unit_items if r["status"] == "error")
    # The distribution counts the ok verdicts a person would count: items of a many-metric, records otherwise.
    if isinstance(sp, Spec):
        counted = [r for r in items if r["status"] == "ok" and (r["item_id"] != "") == (sp.each is not None)]
        fig.verdicts = len(counted)
        scale = sp.scale
        if isinstance(scale, CategoricalScale):
            labels = Counter(str(r["label"]) for r in counted)
            fig.distribution = {name: labels.get(name, 0) for name in scale.names}
        elif isinstance(scale, ValueScale):
            values = Counter(int(r["value"]) for r in counted if r["value"] is not None)
            fig.distribution = {str(v): values.get(v, 0) for v in range(scale.min, scale.max + 1)}
    else:
        fig.verdicts = fig.ok + fig.partial
    return fig


def figures_from_rows(items: Sequence[Mapping[str, Any]], specs: Mapping[str, BaseSpec]) -> list[MetricFigures]:
    """Each (metric version, judge)'s figures from item rows (the one definition; see the module doc)."""
    recs = record_rows(items, specs)
    by_metric: dict[tuple[str, str], tuple[list[Mapping[str, Any]], list[Mapping[str, Any]]]] = {}
    for r in items:
        by_metric.setdefault((r["spec_key"], r["judge_key"]), ([], []))[0].append(r)
    for rec in recs:
        by_metric[(rec["spec_key"], rec["judge_key"])][1].append(rec)
    return [_figures_for(specs[skey], its, rs) for (skey, _), (its, rs) in by_metric.items() if rs]


def figures(
    store: Store,
    spec: str | None = None,
    *,
    run_id: str | None = None,
    spec_key: str | None = None,
    judge_key: str | None = None,
) -> list[MetricFigures]:
    """Figures for every metric (version, judge) in a store, or of one run's records (``run_id``)."""
    items = item_rows(store, spec, run_id=run_id, spec_key=spec_key, judge_key=judge_key, full=False)
    specs = {key: store.any_spec(key) for key in dict.fromkeys(r["spec_key"] for r in items)}
    return figures_from_rows(items, specs)


def _frame(rows: Iterable[Mapping[str, Any]], columns: Sequence[str]) -> pd.DataFrame:
    import pandas as pd

    return pd.DataFrame(list(rows), columns=list(columns))


_RECORD_COLS = (
    "spec",
    "spec_hash",
    "judge",
    "record_id",
    "record_hash",
    "status",
    "items",
    "items_ok",
    "outputs",
    "tokens_in",
    "tokens_out",
    "label",
    "value",
    "score",
    "reason",
    "error",
)


def load_results(
    store: str | Path | Store,
    spec: str | None = None,
    level: Literal["item", "record"] = "item",
) -> pd.DataFrame:
    """Verdicts as a DataFrame: one row per item verdict and record id, or (``level="record"``) one per
    judged record id with many-metrics aggregated into ``score`` and item counts (see the module doc)."""
    st = store if isinstance(store, Store) else Store(store)
    try:
        items = item_rows(st, spec)
        if not items and spec:
            st.latest_spec(spec)  # raises a clear "no metric" error
        if level == "item":
            return _frame(items, [c for c in _ITEM_COLS if c not in ("spec_key", "judge_key")])
        specs = {key: st.any_spec(key) for key in dict.fromkeys(r["spec_key"] for r in items)}
        return _frame(record_rows(items, specs), _RECORD_COLS)
    finally:
        if not isinstance(store, Store):
            st.close()


def export_results(
    store: str | Path,
    output: str | Path,
    fmt: str | None = None,
    spec: str | None = None,
    level: Literal["item", "record"] = "item",
) -> int:
    """Write verdicts to CSV, JSONL or Parquet (format from ``fmt`` or the file's suffix); returns rows."""
    out = Path(output)
    kind = (fmt or out.suffix.lstrip(".")).lower()
    if kind not in ("csv", "jsonl", "ndjson", "parquet", "pq"):
        raise UserError(f"unknown export format {kind!r}; use csv, jsonl or parquet")
    frame = load_results(store, spec, level)
    if kind == "csv":
        flat = frame.copy()
        flat["outputs"] = flat["outputs"].map(lambda d: json.dumps(d, ensure_ascii=False))
        flat.to_csv(out, index=False)
    elif kind in ("jsonl", "ndjson"):
        frame.to_json(out, orient="records", lines=True, force_ascii=False)
    else:
        flat = frame.copy()
        flat["outputs"] = flat["outputs"].map(lambda d: json.dumps(d, ensure_ascii=False))
        flat.to_parquet(out, index=False)
    return len(frame)
