"""Reading verdicts back out of a store: item rows, record rows, and each metric's figures — defined once.

Every command that shows a count or a score (the run summary, ``greval report``, ``load_results`` and exports,
``greval results runs``) reads it from here, so the same store gives the same figures everywhere:

- **item rows**: one per stored verdict *and record id* — the verdict cache is keyed by content, but two
  records with the same content and different ids are two rows (each id is listed, counted and weighted);
- **record rows**: one per (metric, judge, record id): a many-metric's items aggregated into the record's
  score, with the record's status: ``ok`` (every verdict ok), ``partial`` (some items failed), ``error``
  (no verdict), ``skipped`` (the metric does not apply: a required input is absent);
- **figures** (:class:`MetricFigures`): per metric and judge, the counts of those statuses, the item counts,
  the label / value distribution and the **dataset score** (:func:`dataset_score`) over the ``ok`` and
  ``partial`` records with a score, as the spec's ``dataset_aggregate`` says: ``micro`` pools the items of
  all records (Σ score·units / Σ units, where a record's ``units`` are the items its score is a share or mean
  over — Σ supported / Σ triples for FActScore*), ``macro`` is the mean of the record scores. Both are kept,
  so every rendering can show the other one beside the chosen one. A record-level metric has one unit per
  record, so there micro = macro.

Pure computation over stored rows: changing how a figure is computed never needs a model call.
"""

from __future__ import annotations

import functools
import itertools
import json
import math
from array import array
from collections import Counter
from collections.abc import Callable, Generator, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, Field

from greval import __version__
from greval.errors import option
from greval.llm.retry import CUT_OFF_HINT, ErrorKind
from greval.spec import BaseSpec, CategoricalScale, EachTarget, Spec, ValueScale
from greval.store.memo import Generation, digest
from greval.store.store import Store
from greval.store.versions import parse_ref
from greval.types import MISSING_INPUT, UNITS

if TYPE_CHECKING:
    import pandas as pd

RecordStatus = Literal["ok", "partial", "error", "skipped"]
#: Rows read from the store as they are consumed (closing it ends the read).
RowStream = Generator[dict[str, Any], None, None]

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
    "error_kind",
    "outputs",
    "tokens_in",
    "tokens_cached",  # of tokens_in, read from the provider's prompt cache (None: not recorded, before schema 6)
    "tokens_out",
    "latency_ms",
    "attempts",
    "run_id",
    "created_at",
    "updated_at",
    "token_confidence",
)


#: What figures need of an item row (reading only these keeps a 100k-record summary fast and small);
#: ``stored_units``: the record's ``outputs.units`` (computed and pipeline metrics), without the rest.
_FIGURE_COLS = (*_ITEM_COLS[:16], "created_at", "stored_units")


#: A verdict's judgement (its outputs, tokens and timings).
_JUDGEMENT = "g.spec_key = v.spec_key AND g.judge_key = v.judge_key AND g.record_hash = v.record_hash"


def _item_sql(ids: str, tail: str, judgements: bool = True) -> str:
    """Verdicts joined with their record ids (``ids``: the id table to join, with its own filter), their
    judge's label and (``judgements``) their judgement; ``tail``: the columns after the verdict's own."""
    joined = f"LEFT JOIN judgements g ON {_JUDGEMENT}" if judgements else ""
    return f"""
SELECT v.spec_name, v.spec_hash, v.spec_key, j.label, v.judge_key, COALESCE(i.record_id, v.record_id) AS rid,
       v.record_hash, v.item_id, v.status, v.label, v.value, v.score, v.confidence, v.reason, v.error,
       v.error_kind, {tail}
FROM verdicts v
JOIN judges j ON j.judge_key = v.judge_key
{ids}
{joined}
"""


def _figure_tail(store: Store, keys: Sequence[str] | None, spec: str | None) -> tuple[str, list[Any]]:
    """What figures read after a verdict's columns, and its parameters: its time, and the units a computed or
    pipeline metric's judgement stored in its outputs. A judge metric's outputs are the judge's own (never
    read as units): their judgements are not read at all — that join was a fifth of a 1M-record summary."""
    if keys is not None:
        stored = list(keys)
    else:
        scope, params = ("name = ?", [parse_ref(spec)[0]]) if spec is not None else ("1 = 1", [])
        stored = [key for (key,) in store.stream(f"SELECT spec_key FROM specs WHERE {scope}", params)]
    keys = [key for key in stored if not isinstance(store.any_spec(key), Spec)]
    if not keys:
        return "v.created_at, NULL", []
    units = store.json_field("g.outputs", UNITS)
    marks = ",".join("?" * len(keys))
    column = f"CASE WHEN v.spec_key IN ({marks}) THEN (SELECT {units} FROM judgements g WHERE {_JUDGEMENT}) END"
    return f"v.created_at, {column}", keys


#: The judgement's outputs, tokens and timings, and the verdict's own times (the rest of an item row).
_FULL_TAIL = (
    "g.outputs, g.tokens_in, g.tokens_cached, g.tokens_out, g.latency_ms, g.attempts, v.run_id, v.created_at,"
    " v.updated_at, v.token_confidence"
)

#: A verdict an experiment made under a version that is not its own, not reused by a run yet (store.versions).
_HIDDEN = (
    "NOT EXISTS (SELECT 1 FROM experiment_verdicts e WHERE e.spec_key = v.spec_key AND e.judge_key = v.judge_key"
    " AND e.record_hash = v.record_hash)"
)


class Scope(BaseModel):
    """Which verdicts a read covers. By default what every reader reads: each metric's production version
    (``spec``: one metric, ``NAME`` or ``NAME@HASH``; ``all_versions``: every version but those only experiments
    judged), without what experiments made (:mod:`greval.store.versions`). ``run_id``: the record ids that run
    was given (its versions, unless ``spec_key`` names one); ``spec_key`` / ``judge_key``: one version, one judge."""

    model_config = {"frozen": True}

    spec: str | None = None
    run_id: str | None = None
    spec_key: str | None = None
    judge_key: str | None = None
    all_versions: bool = False

    def keys(self, store: Store) -> list[str] | None:
        """The spec versions read (None: any version of the run's)."""
        if self.spec_key is not None:
            return [self.spec_key]
        if self.run_id is not None:
            return None
        return store.reader_keys(self.spec, all_versions=self.all_versions)

    def hides(self, store: Store, keys: Sequence[str] | None) -> bool:
        """Whether what experiments made is left out: always, but in a read of an experiment run or of versions
        only experiments judged (asked for by name: what the user wants to see)."""
        if self.run_id is not None:
            return store.run_kind(self.run_id) != "experiment" and store.has_hidden()
        if keys and set(keys) <= store.experiment_keys():
            return False
        return store.has_hidden()


def _select(store: Store, scope: Scope, full: bool, extra: str = "") -> tuple[str, list[Any]]:
    """The item-row query (no ORDER BY) and its parameters (``scope``: which verdicts); ``full``: every column
    of an item row, else only what figures read (the units of the outputs); ``extra``: more columns, after those."""
    where: list[str] = []
    params: list[Any] = []
    if scope.run_id is not None:
        ids = (
            "JOIN snapshot_members i ON i.record_hash = v.record_hash"
            " AND i.snapshot = (SELECT snapshot FROM runs WHERE run_id = ?)"
        )
        params.append(scope.run_id)
    else:
        ids = "LEFT JOIN record_ids i ON i.record_hash = v.record_hash"
    keys = scope.keys(store)
    if keys is not None:
        where.append(f"v.spec_key IN ({','.join('?' * len(keys))})" if keys else "1 = 0")
        params += keys
    elif scope.spec is not None:
        where.append("v.spec_name = ?")
        params.append(parse_ref(scope.spec)[0])
    if scope.judge_key is not None:
        where.append("v.judge_key = ?")
        params.append(scope.judge_key)
    if scope.hides(store, keys):
        where.append(_HIDDEN)
    tail, head = (_FULL_TAIL, []) if full else _figure_tail(store, keys, scope.spec)
    sql = _item_sql(ids, tail + extra, judgements=full)
    return sql + (" WHERE " + " AND ".join(where) if where else ""), head + params


#: Item rows fetched at a time: they carry reasons and outputs (a few KB each), figures' rows do not.
_WIDE_CHUNK = 1000

#: The order item rows are listed in: by metric name, then storage order (two ids of one content: by id).
_ITEM_ORDER = "v.spec_name, v.created_at, v.rowid, COALESCE(i.record_id, v.record_id)"


def item_rows(
    store: Store,
    spec: str | None = None,
    *,
    run_id: str | None = None,
    spec_key: str | None = None,
    judge_key: str | None = None,
    all_versions: bool = False,
) -> list[dict[str, Any]]:
    """One row per verdict and record id, by metric name then storage order, of the verdicts a :class:`Scope`
    of these arguments covers (by default: every metric's production version)."""
    scope = Scope(spec=spec, run_id=run_id, spec_key=spec_key, judge_key=judge_key, all_versions=all_versions)
    return list(_item_stream(store, scope))


def _item_stream(store: Store, scope: Scope) -> RowStream:
    """:func:`item_rows`, read from the store a few thousand at a time."""
    sql, params = _select(store, scope, full=True)
    with closing(store.stream(f"{sql} ORDER BY {_ITEM_ORDER}", params, _WIDE_CHUNK)) as rows:
        for r in rows:
            yield _item_row(r)


def _item_row(r: Sequence[Any]) -> dict[str, Any]:
    row = dict(zip(_ITEM_COLS, r[: len(_ITEM_COLS)], strict=True))
    row["outputs"] = json.loads(row["outputs"]) if row["outputs"] else {}
    return row


def _stream(store: Store, scope: Scope) -> RowStream:
    """The columns figures read, sorted so that each record's rows come together (in storage order), read
    a few thousand at a time. Sorted by content before id: the verdicts' key gives that order, so only the
    rows of one content are sorted (by id), not the whole result before its first row (8 s of 1M verdicts)."""
    sql, params = _select(store, scope, full=False)
    sql += " ORDER BY v.spec_key, v.judge_key, v.record_hash, rid, v.created_at, v.rowid"
    with closing(store.stream(sql, params)) as rows:
        for r in rows:
            row = dict(zip(_FIGURE_COLS, r, strict=True))
            row["stored_units"] = store.json_value(row["stored_units"])
            yield row


def _record_stream(store: Store, scope: Scope) -> RowStream:
    """:func:`record_rows` of every item row, streamed: each record's item rows are sorted together, the
    records in the order of their first item row (as :func:`record_rows` lists them), then grouped one record
    at a time."""
    rank = f", ROW_NUMBER() OVER (ORDER BY {_ITEM_ORDER}) AS pos"
    ranked, params = _select(store, scope, True, rank)
    grouped = (
        "SELECT * FROM (SELECT q.*, MIN(q.pos) OVER (PARTITION BY q.spec_key, q.judge_key, q.rid, q.record_hash)"
        f" AS first_pos FROM ({ranked}) q) t ORDER BY first_pos, pos"
    )
    specs: dict[str, BaseSpec] = {}
    with closing(store.stream(grouped, params, _WIDE_CHUNK)) as rows:
        for key, grp in itertools.groupby(map(_item_row, rows), key=_group_key):
            if key[0] not in specs:
                specs[key[0]] = store.any_spec(key[0])
            yield _record_row(specs[key[0]], list(grp))


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


def rule_label(spec: Spec, labels: Sequence[str | None]) -> str | None:
    """A per-item metric's record label by its ``target.record_label`` rule, from its items' labels (None when
    the spec names no rule or no item has a label): the one definition the run's summary, the results and
    ``greval agreement --level record`` read."""
    rule = spec.target.record_label if isinstance(spec.target, EachTarget) else None
    labs = [lab for lab in labels if lab is not None]
    if rule is None or not labs:
        return None
    hits = sum(1 for lab in labs if lab in rule.labels)
    if rule.rule == "any":
        held = hits > 0
    elif rule.rule == "all":
        held = hits == len(labs)
    else:
        held = hits / len(labs) >= (rule.min_share or 0.0)
    return rule.then if held else rule.otherwise


def item_units(spec: Spec, labels: Sequence[str | None], values: Sequence[float | None]) -> int:
    """How many item verdicts a many-metric's record score (:func:`aggregate_items`) is taken over."""
    if spec.aggregate == "mean":
        return sum(1 for v in values if v is not None)
    return sum(1 for lab in labels if lab is not None)


class LabelCounts(BaseModel):
    """A categorical per-item metric's label counts — per record or pooled over a dataset — and, when the
    spec names ``target.unsupported`` labels, FActScore*'s precision, recall and F1 (GraphMERT's definition:
    precision = positive / all, recall = positive / (positive + unsupported), F1 their harmonic mean)."""

    labels: dict[str, int]
    positive: int
    unsupported: int | None = None
    total: int
    precision: float | None = None
    recall: float | None = None
    f1: float | None = None


def label_counts(spec: Spec, counts: Mapping[str, int]) -> LabelCounts:
    """:class:`LabelCounts` from the number of items given each label."""
    assert isinstance(spec.scale, CategoricalScale)
    positive = sum(counts.get(lab, 0) for lab in spec.positive_labels)
    total = sum(counts.values())
    out = LabelCounts(labels={n: counts.get(n, 0) for n in spec.scale.names}, positive=positive, total=total)
    target = spec.target
    if isinstance(target, EachTarget) and target.unsupported:
        out.unsupported = sum(counts.get(lab, 0) for lab in target.unsupported)
        out.precision = positive / total if total else None
        out.recall = positive / (positive + out.unsupported) if positive + out.unsupported else None
        out.f1 = _f1(out.precision, out.recall)
    return out


def _f1(p: float | None, r: float | None) -> float | None:
    if p is None or r is None:
        return None
    return 0.0 if p + r == 0 else 2 * p * r / (p + r)


class FactCounts(BaseModel):
    """A dataset's FActScore*-style figures: the pooled counts and P / R / F1 (micro), and the means of the
    records' own P / R / F1 (macro, over the records where each is defined)."""

    pooled: LabelCounts
    macro_precision: float | None = None
    macro_recall: float | None = None
    macro_f1: float | None = None
    records: int = Field(0, description="Records whose counts are pooled (ok and partial).")


def fact_counts(spec: Spec, records: Sequence[LabelCounts]) -> FactCounts:
    """Pool the records' label counts (micro P / R / F1) and average their own P / R / F1 (macro)."""
    pooled: Counter[str] = Counter()
    for c in records:
        pooled.update(c.labels)
    out = FactCounts(pooled=label_counts(spec, pooled), records=len(records))

    def mean(xs: Iterable[float | None]) -> float | None:
        vals = [x for x in xs if x is not None]
        return math.fsum(vals) / len(vals) if vals else None

    if out.pooled.unsupported is not None:
        out.macro_precision = mean(c.precision for c in records)
        out.macro_recall = mean(c.recall for c in records)
        out.macro_f1 = mean(c.f1 for c in records)
    return out


def dataset_score(rows: Iterable[Mapping[str, Any]], pooling: str) -> tuple[float | None, float | None, int, float]:
    """(chosen score, other score, records with a score, Σ units) of record rows — THE dataset score.

    ``micro``: Σ score·units / Σ units over the ok / partial records with a score (a record with 0 units, a
    score given by a spec's ``empty`` rule, adds nothing to pool); ``macro``: the mean of those record
    scores. fsum: the figure does not depend on the order the rows come in."""
    pooled = _Pooled()
    for r in rows:
        if r["status"] in ("ok", "partial") and r["score"] is not None:
            pooled.add(r["score"], r["units"])
    return pooled.score(pooling)


class _Pooled:
    """The record scores and units :func:`dataset_score` pools, as two arrays of floats (16 bytes a record:
    a run summary over a million records held a dict per record, ~300 bytes)."""

    def __init__(self) -> None:
        self.scores = array("d")
        self.units = array("d")

    def add(self, score: float, units: float) -> None:
        self.scores.append(float(score))
        self.units.append(float(units))

    def score(self, pooling: str) -> tuple[float | None, float | None, int, float]:
        """:func:`dataset_score`'s answer: (chosen score, other score, records with a score, Σ units)."""
        scores, units = self.scores, self.units
        total = math.fsum(units)
        micro = math.fsum(s * w for s, w in zip(scores, units, strict=True)) / total if total > 0 else None
        macro = math.fsum(scores) / len(scores) if scores else None
        chosen, other = (micro, macro) if pooling == "micro" else (macro, micro)
        return chosen, other, len(scores), total


def _status(rows: Sequence[Mapping[str, Any]]) -> RecordStatus:
    if len(rows) == 1:  # most records: one verdict (the same answer as below, without the lists)
        one = rows[0]["status"]
        return "ok" if one == "ok" else ("skipped" if one == "skipped" else "error")
    statuses = [r["status"] for r in rows]
    if "skipped" in statuses and not any(s == "ok" for s in statuses):
        return "skipped"
    ok = sum(1 for s in statuses if s == "ok")
    return "ok" if ok == len(statuses) else ("partial" if ok else "error")


GroupKey = tuple[str, str, str, str]  # (spec key, judge key, record id, record hash)


def _group_key(r: Mapping[str, Any]) -> GroupKey:
    return (r["spec_key"], r["judge_key"], r["record_id"], r["record_hash"])


def _groups(items: Iterable[Mapping[str, Any]]) -> dict[GroupKey, list[Mapping[str, Any]]]:
    groups: dict[GroupKey, list[Mapping[str, Any]]] = {}
    for r in items:
        groups.setdefault(_group_key(r), []).append(r)
    return groups


def record_rows(items: Sequence[Mapping[str, Any]], specs: Mapping[str, BaseSpec]) -> list[dict[str, Any]]:
    """Item rows grouped into one row per (metric version, judge, record id, content) — see the module doc.
    ``specs``: spec key -> spec, for every spec key in ``items``."""
    return [_record_row(specs[key[0]], grp) for key, grp in _groups(items).items()]


def _record_row(sp: BaseSpec, grp: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """One record row from the item rows of one (metric version, judge, record id, content), in stored order."""
    judged, each = isinstance(sp, Spec), sp.each
    has_items = any(r["item_id"] != "" for r in grp)
    if not judged:  # computed / pipeline: the record row holds the score, items the detail
        whole = [r for r in grp if r["item_id"] == ""]
        grp = whole or grp
    first = grp[0]
    item_grp = [r for r in grp if r["item_id"] != ""] if each else []
    row: dict[str, Any] = {
        "spec": first["spec"],
        "spec_hash": first["spec_hash"],
        "spec_key": first["spec_key"],
        "judge": first["judge"],
        "judge_key": first["judge_key"],
        "record_id": first["record_id"],
        "record_hash": first["record_hash"],
        "status": _status(grp),
        "items": len(item_grp) if each else None,
        "items_ok": sum(1 for r in item_grp if r["status"] == "ok") if each else None,
        "outputs": first.get("outputs"),
        "tokens_in": first.get("tokens_in"),
        "tokens_cached": first.get("tokens_cached"),
        "tokens_out": first.get("tokens_out"),
        "counts": None,
        "units_missing": False,
    }
    if isinstance(sp, Spec) and each is not None:
        row.update(_pooled_items(sp, grp))
    else:
        row.update(_one_verdict(sp, first, has_items))
    return row


def _pooled_items(sp: Spec, grp: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """A judge's per-item record: its score pools the items' ok verdicts (the spec's aggregate)."""
    ok = [r for r in grp if r["status"] == "ok"]
    labels = [r["label"] for r in ok]
    values = [None if r["value"] is None else float(r["value"]) for r in ok]
    out: dict[str, Any] = {
        "label": rule_label(sp, labels),
        "value": None,
        "score": aggregate_items(sp, labels, values),
        "units": item_units(sp, labels, values),
    }
    if isinstance(sp.scale, CategoricalScale):
        out["counts"] = label_counts(sp, Counter(lab for lab in labels if lab is not None)).model_dump(
            exclude_none=True
        )
    out["reason"] = None
    out["error"] = "; ".join(sorted({str(r["error"]) for r in grp if r["error"]})) or None
    return out


def _one_verdict(sp: BaseSpec, first: Mapping[str, Any], has_items: bool) -> dict[str, Any]:
    """A record scored once (a record-level judge, a computed or pipeline metric): its row's verdict and units."""
    out = {col: first[col] for col in ("label", "value", "score", "reason", "error")}
    stored = None
    if not isinstance(sp, Spec):  # a judge metric's outputs are the judge's, whatever their names
        stored = first["stored_units"] if "stored_units" in first else (first.get("outputs") or {}).get(UNITS)
    if isinstance(stored, int | float) and not isinstance(stored, bool):
        out["units"] = stored
    else:  # a record-level score is one unit; an item metric stored before units were recorded weighs 1 too
        out["units"] = 1
        out["units_missing"] = has_items and out["score"] is not None and sp.poolable
    return out


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
    scored: int = Field(0, description="Records with a score (the macro mean's n).")
    aggregate: Literal["micro", "macro"] = Field("micro", description="How mean_score pools records (the spec's).")
    units: float = Field(0, description="Σ units of the scored records: what a micro score pools (items).")
    mean_score: float | None = Field(
        None, description="THE dataset score, as `aggregate` says (see greval.store.results.dataset_score)."
    )
    other_score: float | None = Field(
        None, description="The other aggregate (macro when mean_score is micro), shown beside it where they differ."
    )
    units_missing: int = Field(
        0, description="Records of an item metric stored without their item count: they weigh 1 in a micro score."
    )
    units_none: int = Field(
        0, description="Records with a score but no item (a spec's `empty` value): they add nothing to a micro score."
    )
    fact_counts: FactCounts | None = Field(
        None, description="Per-item metrics with `target.unsupported`: FActScore*'s counts and P / R / F1."
    )
    distribution: dict[str, int] = Field(default_factory=dict)
    record_rule: str | None = Field(None, description="That rule in words (RecordLabelRule.text).")
    record_labels: dict[str, int] = Field(
        default_factory=dict,
        description="Per-item metrics with `target.record_label`: the ok and partial records by the rule's label.",
    )
    skipped_why: dict[str, int] = Field(default_factory=dict)
    errors: dict[str, int] = Field(default_factory=dict, description="Failed records and items by error kind.")


def not_scored(counts: Mapping[str, Any]) -> str:
    """The records a metric did not score, by why: "2 failed, 10 skipped" ('' when every record is ok).
    ``counts``: a MetricFigures dumped, or a run's stored summary of one metric."""
    return ", ".join(f"{counts[k]} {k}" for k in ("partial", "failed", "skipped") if counts.get(k))


#: How a failed judgement is judged again, in a note that names no command of its own.
RETRY_HINT = f"a run with {option('retry_errors')} judges them again"


def metric_notes(
    fig: MetricFigures, retry: str = RETRY_HINT, origin: Callable[[Sequence[str]], str] | None = None
) -> list[str]:
    """What a reader must know about a metric's figures, in words (the same in every rendering). ``retry``: how
    failed records are judged again (a command that printed its own command line says where it is); ``origin``:
    where the records' fields come from, for records skipped for lack of one (None: a table's columns, which
    ``mapping`` names; a trace source says where in a trace each field is read)."""
    notes = []
    for why, n in fig.skipped_why.items():
        names = missing_fields(why)
        hint = "" if not names else f" — {origin(names)}" if origin else _map_hint(names)
        notes.append(f"{fig.spec}: {n} record(s) skipped — {why}{hint}")
    if fig.failed or fig.partial:
        kinds = ", ".join(f"{k} ×{v}" for k, v in fig.errors.items())
        hint = f" ({CUT_OFF_HINT})" if ErrorKind.TRUNCATED.value in fig.errors else ""
        notes.append(f"{fig.spec}: {fig.failed} record(s) failed, {fig.partial} partly failed ({kinds}){hint}; {retry}")
    if fig.records and fig.ok + fig.partial == 0:
        notes.append(f"{fig.spec}: no verdict at all — the metric produced nothing to score")
    if fig.record_labels:
        counts = ", ".join(f"{lab} {n}" for lab, n in fig.record_labels.items())
        notes.append(f"{fig.spec}: records by its rule ({fig.record_rule}): {counts}")
    notes.extend(aggregate_notes(fig))
    return notes


def aggregate_notes(fig: MetricFigures) -> list[str]:
    """What the dataset score pools, when that matters: the other aggregate beside the chosen one when they
    differ, and records weighed 1 for lack of a stored item count. (Three decimals, as report.format writes
    every figure; the store may not import the report stage.)"""
    notes = []
    if fig.units_missing:
        notes.append(
            f"{fig.spec}: {fig.units_missing} record(s) were stored without their item count and weigh 1 each in "
            "the pooled (micro) score; judging them again with this greval stores it"
        )
    if fig.units_none and fig.aggregate == "micro":
        notes.append(
            f"{fig.spec}: {fig.units_none} record(s) had nothing to count and were scored by the spec's `empty` "
            "rule; they add nothing to the pooled (micro) score, the macro mean counts them"
        )
    if fig.mean_score is None or fig.other_score is None or round(fig.mean_score, 3) == round(fig.other_score, 3):
        return notes
    units = f"{fig.units:g} item(s)"
    micro = f"pooled over {units} of {fig.scored} record(s) (micro)"
    macro = f"the mean of {fig.scored} record scores (macro)"
    chosen, other = (micro, macro) if fig.aggregate == "micro" else (macro, micro)
    notes.append(
        f"{fig.spec}: dataset score {fig.mean_score:.3f} is {chosen}, as the spec's dataset_aggregate "
        f"says; {other} is {fig.other_score:.3f}"
    )
    return notes


def missing_fields(why: str) -> list[str]:
    """The fields a skipped record lacked, from its stored reason (``missing required input: chunks, …``)."""
    if not why.startswith(MISSING_INPUT):
        return []
    return [n.strip() for n in why.split(":", 1)[1].split(",") if n.strip().isidentifier()]


def _map_hint(names: Sequence[str]) -> str:
    return " — map a column with " + " ".join(f"{option('mapping')} {n}=COLUMN" for n in names)


class _Tally:
    """One metric's (version, judge) figures, added up record by record: the same definition whether the
    rows come from memory (a report) or stream from the store (a 100k-record run summary in bounded memory)."""

    def __init__(self, sp: BaseSpec, first: Mapping[str, Any]) -> None:
        self.sp = sp
        # What add() asks of the spec for every record, asked once (a million records asked it ~5 s).
        self.each = sp.each
        self.scale = sp.scale if isinstance(sp, Spec) else None
        self.fig = MetricFigures(
            spec=first["spec"],
            spec_hash=first["spec_hash"],
            spec_key=first["spec_key"],
            kind=sp.kind,
            judge=first["judge"],
            judge_key=first["judge_key"],
        )
        self.statuses: Counter[str] = Counter()
        self.scored = _Pooled()  # the ok / partial records with a score, as dataset_score counts them
        self.units_missing = 0
        self.units_none = 0
        self.counted: list[LabelCounts] = []
        self.skipped_why: Counter[str] = Counter()
        self.errors: Counter[str] = Counter()
        self.items = self.items_ok = self.items_failed = self.verdicts = 0
        self.labels: Counter[str] = Counter()
        self.record_labels: Counter[str] = Counter()
        self.values: Counter[int] = Counter()

    def add(self, rec: Mapping[str, Any], grp: Sequence[Mapping[str, Any]]) -> None:
        """One record row and the item rows it was made from."""
        status = rec["status"]
        self.statuses[status] += 1
        if status in ("ok", "partial"):
            if rec["score"] is not None:
                self.scored.add(rec["score"], rec["units"])
                self.units_missing += bool(rec["units_missing"])
                self.units_none += rec["units"] == 0
            if rec["counts"] is not None:
                self.counted.append(LabelCounts.model_validate(rec["counts"]))
            if self.each and rec["label"] is not None:  # a per-item metric's record label: its rule's
                self.record_labels[str(rec["label"])] += 1
        if status == "skipped":
            self.skipped_why.update(str(r["error"]) for r in grp if r["item_id"] == "")
        if status in ("error", "partial"):
            # The stored kind (schema 3 fills it for every error row, old ones from their text).
            self.errors.update(str(r["error_kind"] or ErrorKind.UNKNOWN) for r in grp if r["status"] == "error")
        if self.each:
            for r in grp:
                if r["item_id"] != "":
                    self.items += 1
                    self.items_ok += r["status"] == "ok"
                    self.items_failed += r["status"] == "error"
        # The distribution counts the ok verdicts a person would count: items of a many-metric, records otherwise.
        if self.scale is not None:
            items = self.each is not None
            counted = [r for r in grp if r["status"] == "ok" and (r["item_id"] != "") == items]
            self.verdicts += len(counted)
            if isinstance(self.scale, CategoricalScale):
                for r in counted:
                    self.labels[str(r["label"])] += 1
            elif isinstance(self.scale, ValueScale):
                for r in counted:
                    if r["value"] is not None:
                        self.values[int(r["value"])] += 1

    def result(self) -> MetricFigures:
        fig, sp, st = self.fig, self.sp, self.statuses
        fig.records = sum(st.values())
        fig.ok, fig.partial, fig.failed, fig.skipped = st["ok"], st["partial"], st["error"], st["skipped"]
        fig.aggregate = sp.pooling
        fig.mean_score, fig.other_score, fig.scored, fig.units = self.scored.score(sp.pooling)
        fig.units_missing = self.units_missing
        fig.units_none = self.units_none
        if self.counted and isinstance(sp, Spec) and isinstance(sp.target, EachTarget) and sp.target.unsupported:
            fig.fact_counts = fact_counts(sp, self.counted)
        fig.skipped_why = dict(self.skipped_why)
        fig.errors = dict(self.errors)
        if sp.each:
            fig.items, fig.items_ok, fig.items_failed = self.items, self.items_ok, self.items_failed
        rule = sp.target.record_label if isinstance(sp, Spec) and isinstance(sp.target, EachTarget) else None
        if rule is not None:
            fig.record_labels = {lab: self.record_labels.get(lab, 0) for lab in (rule.then, rule.otherwise)}
            fig.record_rule = rule.text()
        if isinstance(sp, Spec):
            fig.verdicts = self.verdicts
            if isinstance(sp.scale, CategoricalScale):
                fig.distribution = {name: self.labels.get(name, 0) for name in sp.scale.names}
            elif isinstance(sp.scale, ValueScale):
                fig.distribution = {str(v): self.values.get(v, 0) for v in range(sp.scale.min, sp.scale.max + 1)}
        else:
            fig.verdicts = fig.ok + fig.partial
        return fig


def _tally(
    groups: Iterable[Sequence[Mapping[str, Any]]], spec_of: Callable[[str], BaseSpec]
) -> dict[tuple[str, str], _Tally]:
    tallies: dict[tuple[str, str], _Tally] = {}
    for grp in groups:
        key = (grp[0]["spec_key"], grp[0]["judge_key"])
        tally = tallies.get(key)
        if tally is None:
            tally = tallies[key] = _Tally(spec_of(key[0]), grp[0])
        tally.add(_record_row(tally.sp, grp), grp)
    return tallies


def figures_from_rows(items: Sequence[Mapping[str, Any]], specs: Mapping[str, BaseSpec]) -> list[MetricFigures]:
    """Each (metric version, judge)'s figures from item rows (the one definition; see the module doc)."""
    return [t.result() for t in _tally(_groups(items).values(), specs.__getitem__).values()]


def figures(
    store: Store,
    spec: str | None = None,
    *,
    run_id: str | None = None,
    spec_key: str | None = None,
    judge_key: str | None = None,
    all_versions: bool = False,
) -> list[MetricFigures]:
    """Figures for every metric (version, judge) a :class:`Scope` of these arguments covers: by default each
    metric's production version; of one run's records (``run_id``).

    Streams the rows record by record (the store sorts them), so a large store is never held in memory;
    metrics come in the order :func:`item_rows` lists them (by name, then first verdict)."""
    scope = Scope(spec=spec, run_id=run_id, spec_key=spec_key, judge_key=judge_key, all_versions=all_versions)
    memo = _FiguresMemo.of(store, scope)
    if memo is not None and (kept := memo.recall()) is not None:
        return kept
    found = _figures(store, scope)
    if memo is not None:
        memo.keep(found)
    return found


def _figures(store: Store, scope: Scope) -> list[MetricFigures]:
    """:func:`figures`, computed."""
    specs: dict[str, BaseSpec] = {}

    def spec_of(key: str) -> BaseSpec:
        if key not in specs:
            specs[key] = store.any_spec(key)
        return specs[key]

    firsts: dict[tuple[str, str], tuple[str, float]] = {}

    def grouped() -> Iterator[Sequence[Mapping[str, Any]]]:
        rows = _stream(store, scope)
        for _, grp in itertools.groupby(rows, key=_group_key):
            members = list(grp)
            mkey = (members[0]["spec_key"], members[0]["judge_key"])
            first = (members[0]["spec"], min(r["created_at"] for r in members))
            if mkey not in firsts or first < firsts[mkey]:
                firsts[mkey] = first
            yield members

    tallies = _tally(grouped(), spec_of)
    return [tallies[k].result() for k in sorted(tallies, key=lambda k: firsts[k])]


@functools.cache
def _definition() -> str:
    """Which code defines the figures: this module, the spec models (what a label or value means) and greval's
    version. A memo of figures made by other code is never read."""
    root = Path(__file__).resolve().parents[1]
    files = [Path(__file__), root / "types.py", *sorted((root / "spec").glob("*.py"))]
    return digest([__version__, *(f.read_text(encoding="utf-8") for f in files)])


class _FiguresMemo:
    """The memo of one run's figures for one (spec version, judge), the shape of a run's summary
    (greval.store.memo): keyed by the run's snapshot, whether the run is an experiment (it reads what
    experiments made), the spec version's stored body and :func:`_definition`."""

    def __init__(self, store: Store, pair: tuple[str, str], key: str, before: Generation) -> None:
        self.store, self.pair, self.key, self.before = store, pair, key, before

    @classmethod
    def of(cls, store: Store, scope: Scope) -> _FiguresMemo | None:
        """The memo a read of ``scope`` may use (None: another shape of read, or a store that keeps none)."""
        if scope.run_id is None or scope.spec_key is None or scope.judge_key is None or scope.spec is not None:
            return None
        before = store.generation(scope.spec_key, scope.judge_key)  # read before the figures are
        if before is None:
            return None
        snapshot = store.run_snapshot(scope.run_id)
        body = store.spec_body(scope.spec_key)
        if snapshot is None or body is None:
            return None
        key = digest([snapshot, store.run_kind(scope.run_id), body, _definition()])
        return cls(store, (scope.spec_key, scope.judge_key), key, before)

    def recall(self) -> list[MetricFigures] | None:
        kept = self.store.recall(*self.pair, "figures", [self.key], self.before).get(self.key)
        return None if kept is None else [MetricFigures.model_validate(f) for f in json.loads(kept)]

    def keep(self, found: list[MetricFigures]) -> None:
        self.store.remember(*self.pair, "figures", {self.key: json.dumps([f.model_dump() for f in found])}, self.before)


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
    "units",
    "counts",
    "outputs",
    "tokens_in",
    "tokens_cached",
    "tokens_out",
    "label",
    "value",
    "score",
    "reason",
    "error",
)


#: The columns of item-level results (load_results, exports): an item row without its keys' internals.
ITEM_COLUMNS = tuple(c for c in _ITEM_COLS if c not in ("spec_key", "judge_key", "error_kind"))
#: The columns of record-level results.
RECORD_COLUMNS = _RECORD_COLS


def result_rows(
    store: Store, spec: str | None, level: Literal["item", "record"], *, all_versions: bool = False
) -> RowStream:
    """The rows of :func:`load_results` and of an export (their columns: :data:`ITEM_COLUMNS`,
    :data:`RECORD_COLUMNS`), read from the store as they are consumed: memory holds one chunk of rows (and
    one record's items), not the store. ``spec``: NAME (its production version) or NAME@HASH; None: every
    metric's production version (``all_versions``: every version but those only experiments judged). A metric
    the store does not have is a UserError instead of the first row. Closing it early ends the read (and, on
    PostgreSQL, its cursor)."""
    scope = Scope(spec=spec, all_versions=all_versions)
    if spec:
        store.metric_version(spec)  # a metric or version the store does not have: one clear line, before any row
    with closing(_item_stream(store, scope) if level == "item" else _record_stream(store, scope)) as rows:
        yield from rows


def verdict_frame(store: Store, items: Sequence[Mapping[str, Any]], level: Literal["item", "record"]) -> pd.DataFrame:
    """Item rows (:func:`item_rows`) as the DataFrame :func:`load_results` returns: as they are, or grouped
    into record rows (:func:`record_rows`; their specs read from ``store``)."""
    if level == "item":
        return _frame(items, ITEM_COLUMNS)
    specs = {key: store.any_spec(key) for key in dict.fromkeys(r["spec_key"] for r in items)}
    return _frame(record_rows(items, specs), RECORD_COLUMNS)


def load_results(
    store: str | Path | Store,
    spec: str | None = None,
    level: Literal["item", "record"] = "item",
    *,
    all_versions: bool = False,
) -> pd.DataFrame:
    """Verdicts as a DataFrame: one row per item verdict and record id, or (``level="record"``) one per
    judged record id with many-metrics aggregated into ``score`` and item counts (see the module doc). Of each
    metric's production version (``spec``: NAME or NAME@HASH; ``all_versions``: as :func:`result_rows`)."""
    st = store if isinstance(store, Store) else Store(store)
    try:
        rows = result_rows(st, spec, level, all_versions=all_versions)
        return _frame(rows, ITEM_COLUMNS if level == "item" else RECORD_COLUMNS)
    finally:
        if not isinstance(store, Store):
            st.close()
