"""Verdicts back to Phoenix, where the team looks: after ``greval run phoenix://…``, every record verdict of the
run becomes a span annotation on its trace's root span, and every chunk verdict of a per-chunk metric a
document annotation on the retriever span that returned the chunk.

A span annotation: name = the metric's name, annotator kind ``LLM``, label / score / explanation (the judge's
reason; for a per-chunk metric, its label counts), metadata with the spec's version and the judge;
``identifier="greval"``, on which Phoenix upserts. Idempotent: the annotations already on the spans are read
first and an unchanged verdict is not written again (a document annotation is rewritten only with its record's
span annotation, whose metadata holds a digest of the chunk verdicts). Figures come from
:mod:`greval.store.results` (``record_rows``), the ones every command shows.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from greval.store.results import item_rows, record_rows

if TYPE_CHECKING:
    from phoenix.client import Client

    from greval.runner import MetricSummary, RunSummary
    from greval.spec import BaseSpec
    from greval.store.store import Store
    from greval.traces.phoenix import PhoenixRows

__all__ = ["IDENTIFIER", "write_back"]

IDENTIFIER = "greval"
_BATCH = 500


def _result(label: Any, score: Any, explanation: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if label is not None:
        out["label"] = str(label)
    if score is not None:
        out["score"] = float(score)
    if explanation:
        out["explanation"] = str(explanation)
    return out


def _counts_text(counts: Mapping[str, Any] | None, items: int | None) -> str | None:
    """A per-chunk metric's record explanation: its label counts (the store's ``counts``)."""
    if not counts:
        return None
    labels = ", ".join(f"{name}: {n}" for name, n in counts.get("labels", {}).items())
    return f"{counts.get('positive', 0)} of {counts.get('total', items or 0)} chunks positive ({labels})"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _annotations(
    rows: PhoenixRows, store: Store, run_id: str, metric: MetricSummary, spec: BaseSpec
) -> tuple[list[dict[str, Any]], dict[str, list[dict[str, Any]]], int]:
    """One metric's span annotations, the document annotations of each (by root span id), and error count."""
    items = item_rows(store, run_id=run_id, spec_key=metric.spec_key, judge_key=metric.judge_key)
    items = [r for r in items if r["record_id"] in rows.places]
    spans: list[dict[str, Any]] = []
    docs: dict[str, list[dict[str, Any]]] = {}
    errors = 0
    meta = {"source": "greval", "spec_version": spec.hash, "judge": metric.judge}
    for rec in record_rows(items, {metric.spec_key: spec}):
        root, chunk_places = rows.places[rec["record_id"]]
        if rec["status"] != "ok" and rec["score"] is None and rec["label"] is None:
            errors += 1
            continue
        explanation = rec["reason"] if rec["items"] is None else _counts_text(rec["counts"], rec["items"])
        result = _result(rec["label"], rec["score"], explanation)
        if not result:
            errors += 1
            continue
        mine = [r for r in items if r["record_hash"] == rec["record_hash"] and r["item_id"] and r["status"] == "ok"]
        doc_list = [
            {
                "name": spec.name,
                "annotator_kind": "LLM",
                "span_id": chunk_places[r["item_id"]][0],
                "document_position": chunk_places[r["item_id"]][1],
                "result": _result(r["label"], r["score"], r["reason"]),
                "metadata": {**meta, "chunk_id": r["item_id"]},
            }
            for r in mine
            if r["item_id"] in chunk_places and (r["label"] is not None or r["score"] is not None)
        ]
        record_meta = {**meta, "record_hash": rec["record_hash"]}
        if doc_list:
            record_meta["chunks"] = _digest([(d["span_id"], d["document_position"], d["result"]) for d in doc_list])
            docs[root] = doc_list
        spans.append(
            {
                "name": spec.name,
                "annotator_kind": "LLM",
                "span_id": root,
                "identifier": IDENTIFIER,
                "result": result,
                "metadata": record_meta,
            }
        )
    return spans, docs, errors


def _existing(
    client: Client, project: str, span_ids: Sequence[str], names: Sequence[str]
) -> dict[tuple[str, str], Any]:
    """(span id, name) -> (result, metadata) of greval's annotations already on those spans."""
    found = client.spans.get_span_annotations(
        span_ids=span_ids, project_identifier=project, include_annotation_names=list(names), timeout=60
    )
    out: dict[tuple[str, str], Any] = {}
    for a in found:
        if a.get("identifier") == IDENTIFIER:
            got: Mapping[str, Any] = a.get("result") or {}
            result = _result(got.get("label"), got.get("score"), got.get("explanation"))
            out[a["span_id"], a["name"]] = (result, dict(a.get("metadata") or {}))
    return out


def write_back(rows: PhoenixRows, store: Store, summary: RunSummary, specs: Sequence[BaseSpec]) -> list[str]:
    """Write the run's verdicts to Phoenix as annotations (only what changed); the line to print."""
    import httpx

    from greval.traces.phoenix import phoenix_client, phoenix_error

    by_name = {s.name: s for s in specs}
    wanted: list[dict[str, Any]] = []
    docs: dict[str, list[dict[str, Any]]] = {}
    errors = 0
    for metric in summary.metrics:
        if metric.spec not in by_name:
            continue
        spans, metric_docs, failed = _annotations(rows, store, summary.run_id, metric, by_name[metric.spec])
        wanted += spans
        errors += failed
        for root, doc_list in metric_docs.items():
            docs.setdefault(f"{root}\0{metric.spec}", []).extend(doc_list)
    client = phoenix_client(rows.addr)
    try:
        have = _existing(client, rows.addr.project, sorted({a["span_id"] for a in wanted}), list(by_name))
        new = [a for a in wanted if have.get((a["span_id"], a["name"])) != (a["result"], a["metadata"])]
        new_docs = [d for a in new for d in docs.get(f"{a['span_id']}\0{a['name']}", [])]
        for i in range(0, len(new), _BATCH):
            client.spans.log_span_annotations(span_annotations=new[i : i + _BATCH], sync=True)  # type: ignore[arg-type]
        for i in range(0, len(new_docs), _BATCH):
            client.spans.log_document_annotations(
                document_annotations=new_docs[i : i + _BATCH],  # type: ignore[arg-type]
                sync=True,
            )
    except httpx.HTTPError as exc:
        raise phoenix_error(rows.addr, exc) from None
    line = (
        f"{rows.addr.label}: {len(new)} span annotation(s) written"
        + (f" with {len(new_docs)} document annotation(s)" if new_docs else "")
        + f", {len(wanted) - len(new)} already there"
    )
    if errors:
        line += f"; {errors} record verdict(s) were errors and were not written"
    return [line]
