"""Reading verdicts back out of a store: pandas frames, record-level aggregates, exports.

Aggregation of item verdicts into a record score is pure computation over the stored rows, so changing how
a report aggregates never needs a model call.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import pandas as pd

from greval.errors import UserError
from greval.spec import Spec
from greval.store import Store

_ITEM_SQL = """
SELECT v.spec_name AS spec, v.spec_hash, v.spec_key, j.label AS judge, v.judge_key, v.record_id, v.record_hash,
       v.item_id, v.status, v.label, v.value, v.score, v.confidence, v.reason, v.error,
       g.outputs, g.tokens_in, g.tokens_out, g.latency_ms, g.attempts, v.run_id, v.created_at, v.updated_at
FROM verdicts v
JOIN judges j ON j.judge_key = v.judge_key
LEFT JOIN judgements g ON g.spec_key = v.spec_key AND g.judge_key = v.judge_key AND g.record_hash = v.record_hash
"""


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


def load_results(
    store: str | Path | Store,
    spec: str | None = None,
    level: Literal["item", "record"] = "item",
) -> pd.DataFrame:
    """Verdicts as a DataFrame: one row per item verdict, or (``level="record"``) one per judged record
    with many-metrics aggregated into ``score`` and item counts."""
    st = store if isinstance(store, Store) else Store(store)
    try:
        sql = _ITEM_SQL + (" WHERE v.spec_name = ?" if spec else "") + " ORDER BY v.spec_name, v.created_at"
        rows = st.query(sql, (spec,) if spec else ())
        frame = pd.DataFrame(rows)
        if frame.empty:
            if spec:
                st.latest_spec(spec)  # raises a clear "no metric" error
            return frame
        frame["outputs"] = frame["outputs"].map(lambda s: json.loads(s) if s else {})
        if level == "item":
            return frame.drop(columns=["spec_key", "judge_key"])
        specs = {key: st.any_spec(key) for key in frame["spec_key"].unique()}
        out: list[dict[str, Any]] = []
        for (skey, _jkey, rhash), grp in frame.groupby(["spec_key", "judge_key", "record_hash"], sort=False):
            sp = specs[skey]
            if not isinstance(sp, Spec):  # computed / pipeline: the record row holds the score, items the detail
                record_rows = grp[grp["item_id"] == ""]
                grp = record_rows if len(record_rows) else grp
            first = grp.iloc[0]
            ok = grp[grp["status"] == "ok"]
            row: dict[str, Any] = {
                "spec": first["spec"],
                "spec_hash": first["spec_hash"],
                "judge": first["judge"],
                "record_id": first["record_id"],
                "record_hash": rhash,
                "status": "ok" if len(ok) == len(grp) else ("partial" if len(ok) else "error"),
                "items": len(grp) if sp.each else None,
                "items_ok": len(ok) if sp.each else None,
                "outputs": first["outputs"],
                "tokens_in": first["tokens_in"],
                "tokens_out": first["tokens_out"],
            }
            if isinstance(sp, Spec) and sp.each:
                row["label"] = None
                row["value"] = None
                row["score"] = aggregate_items(
                    sp,
                    [x if isinstance(x, str) else None for x in ok["label"]],
                    [None if pd.isna(x) else float(x) for x in ok["value"]],
                )
                row["reason"] = None
                row["error"] = "; ".join(sorted({str(e) for e in grp["error"].dropna()})) or None
            else:
                for col in ("label", "value", "score", "reason", "error"):
                    row[col] = first[col]
            out.append(row)
        return pd.DataFrame(out)
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
    frame = load_results(store, spec, level)
    if kind == "csv":
        flat = frame.copy()
        if "outputs" in flat:
            flat["outputs"] = flat["outputs"].map(lambda d: json.dumps(d, ensure_ascii=False))
        flat.to_csv(out, index=False)
    elif kind in ("jsonl", "ndjson"):
        frame.to_json(out, orient="records", lines=True, force_ascii=False)
    elif kind in ("parquet", "pq"):
        flat = frame.copy()
        if "outputs" in flat:
            flat["outputs"] = flat["outputs"].map(lambda d: json.dumps(d, ensure_ascii=False))
        flat.to_parquet(out, index=False)
    else:
        raise UserError(f"unknown export format {kind!r}; use csv, jsonl or parquet")
    return len(frame)
