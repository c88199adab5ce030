"""Verdicts back to Phoenix, where the team looks: after ``greval run phoenix://…``, every record verdict of the
run becomes a span annotation on its trace's root span, and every chunk verdict of a per-chunk metric a
document annotation on the retriever span that returned the chunk, and every step verdict of an agent's
trajectory a span annotation on the step's span (the tool span that ran a call, the LLM span of a message or
the final answer; identifier ``greval:step:<id>``). A conversation (a session's traces) gets its
record verdict as a session annotation, and every turn verdict of a per-turn metric a span annotation on the root
span of the turn's trace (the turn Phoenix's session view shows).

A span annotation: name = the metric's name, annotator kind ``LLM``, label / score / explanation (the judge's
reason; for a per-chunk metric, its label counts), metadata with the spec's version and the judge;
``identifier="greval"``, on which Phoenix upserts. Idempotent: the annotations already on the spans are read
first and an unchanged verdict is not written again (a document annotation is rewritten only with its record's
span annotation, whose metadata holds a digest of the chunk verdicts; session annotations are read back through
Phoenix's REST route, which its client does not wrap). Figures come from
:mod:`greval.store.results` (``record_rows``), the ones every command shows.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from greval.store.results import RETRY_HINT, item_rows, missing_fields, record_rows
from greval.traces.phoenix_address import KEY_ENV, TIMEOUT_S, phoenix_client, phoenix_error
from greval.traces.source import field_origin

if TYPE_CHECKING:
    from phoenix.client import Client

    from greval.runner.options import MetricSummary, RunSummary
    from greval.spec import BaseSpec
    from greval.store.store import Store
    from greval.traces.phoenix import PhoenixRows
    from greval.traces.source import Places

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


_NOUNS = {"chunks": "chunks", "triples": "triples", "turns": "assistant turns", "steps": "agent steps"}


def _counts_text(counts: Mapping[str, Any] | None, items: int | None, each: str | None) -> str | None:
    """A per-item metric's record explanation: its label counts (the store's ``counts``)."""
    if not counts:
        return None
    labels = ", ".join(f"{name}: {n}" for name, n in counts.get("labels", {}).items())
    noun = _NOUNS.get(each or "", "items")
    return f"{counts.get('positive', 0)} of {counts.get('total', items or 0)} {noun} positive ({labels})"


def _digest(value: Any) -> str:
    return hashlib.sha256(json.dumps(value, sort_keys=True, default=str).encode()).hexdigest()[:16]


class Wanted:
    """The annotations a run's verdicts make: on spans, on documents (by record annotation), on sessions; and
    the records that make none: failed (``failed``) or not judged for lack of a field (``skipped``: "metric
    (metric, the fields lacked) -> records)."""

    def __init__(self) -> None:
        self.spans: list[dict[str, Any]] = []
        self.docs: dict[str, list[dict[str, Any]]] = {}  # "<root span id>\0<metric>" -> its documents'
        self.sessions: list[dict[str, Any]] = []
        self.failed = 0
        self.skipped: Counter[tuple[str, tuple[str, ...]]] = Counter()


def _annotation(
    spec: BaseSpec, result: dict[str, Any], metadata: dict[str, Any], identifier: str = IDENTIFIER, **where: str
) -> dict[str, Any]:
    return {"name": spec.name, "annotator_kind": "LLM", **where, "identifier": identifier, "result": result,
            "metadata": metadata}  # fmt: skip


def _step_annotations(
    spec: BaseSpec, mine: Sequence[Mapping[str, Any]], record_meta: dict[str, Any], places: Places
) -> list[dict[str, Any]]:
    """A trajectory's step verdicts (a judged per-step metric's item is the step id, a computed one's
    ``step:<id>``), each on its step's span; the identifier names the step, as one LLM span can hold several
    calls and the root span the record's verdict."""
    out = []
    for r in mine:
        item = str(r["item_id"])
        step = item if spec.each == "steps" else item.removeprefix("step:") if item.startswith("step:") else None
        if step is not None and step in places.steps:
            result = _result(r["label"], r["score"], r["reason"])
            out.append(_annotation(spec, result, {**record_meta, "step_id": step},
                                   f"{IDENTIFIER}:step:{step}", span_id=places.steps[step]))  # fmt: skip
    return out


def _annotations(
    rows: PhoenixRows, store: Store, run_id: str, metric: MetricSummary, spec: BaseSpec, out: Wanted
) -> None:
    """One metric's annotations, added to ``out``."""
    items = item_rows(store, run_id=run_id, spec_key=metric.spec_key, judge_key=metric.judge_key)
    items = [r for r in items if r["record_id"] in rows.places]
    meta = {"source": "greval", "spec_version": spec.hash, "judge": metric.judge}
    for rec in record_rows(items, {metric.spec_key: spec}):
        places = rows.places[rec["record_id"]]
        if rec["status"] == "skipped":
            out.skipped[spec.name, tuple(missing_fields(str(rec["error"] or "")))] += 1
            continue
        explanation = rec["reason"] if rec["items"] is None else _counts_text(rec["counts"], rec["items"], spec.each)
        result = _result(rec["label"], rec["score"], explanation)
        if (rec["status"] != "ok" and rec["score"] is None and rec["label"] is None) or not result:
            out.failed += 1
            continue
        mine = [r for r in items if r["record_hash"] == rec["record_hash"] and r["item_id"] and r["status"] == "ok"]
        mine = [r for r in mine if r["label"] is not None or r["score"] is not None]
        record_meta = {**meta, "record_hash": rec["record_hash"]}
        if places.session is not None:  # a conversation: its verdict on the session, turn verdicts on their traces
            out.sessions.append(_annotation(spec, result, record_meta, session_id=places.session))
            out.spans += [
                _annotation(spec, _result(r["label"], r["score"], r["reason"]),
                            {**record_meta, "turn_id": r["item_id"]}, span_id=places.turns[r["item_id"]])
                for r in mine
                if r["item_id"] in places.turns
            ]  # fmt: skip
            continue
        doc_list = [
            {
                "name": spec.name,
                "annotator_kind": "LLM",
                "span_id": places.chunks[r["item_id"]][0],
                "document_position": places.chunks[r["item_id"]][1],
                "result": _result(r["label"], r["score"], r["reason"]),
                "metadata": {**meta, "chunk_id": r["item_id"]},
            }
            for r in mine
            if r["item_id"] in places.chunks
        ]
        if doc_list:
            record_meta["chunks"] = _digest([(d["span_id"], d["document_position"], d["result"]) for d in doc_list])
            out.docs.setdefault(f"{places.root}\0{spec.name}", []).extend(doc_list)
        out.spans.append(_annotation(spec, result, record_meta, span_id=places.root))
        out.spans += _step_annotations(spec, mine, record_meta, places)


def _existing(
    client: Client, project: str, span_ids: Sequence[str], names: Sequence[str]
) -> dict[tuple[str, str, str], Any]:
    """(span id, name, identifier) -> (result, metadata) of greval's annotations already on those spans."""
    found = client.spans.get_span_annotations(
        span_ids=span_ids, project_identifier=project, include_annotation_names=list(names), timeout=60
    )
    out: dict[tuple[str, str, str], Any] = {}
    for a in found:
        mine = str(a.get("identifier") or "")
        if mine == IDENTIFIER or mine.startswith(f"{IDENTIFIER}:"):
            got: Mapping[str, Any] = a.get("result") or {}
            result = _result(got.get("label"), got.get("score"), got.get("explanation"))
            out[a["span_id"], a["name"], mine] = (result, dict(a.get("metadata") or {}))
    return out


def _existing_sessions(rows: PhoenixRows, session_ids: Sequence[str], names: Sequence[str]) -> dict[Any, Any]:
    """(session id, name, identifier) -> (result, metadata) of greval's session annotations already there
    (Phoenix's REST route: its client 3.5 writes session annotations but does not read them)."""
    import httpx

    key = os.environ.get(KEY_ENV)
    out: dict[Any, Any] = {}
    url = f"/v1/projects/{quote(rows.addr.project, safe='')}/session_annotations"
    headers = {"Authorization": f"Bearer {key}"} if key else {}
    with httpx.Client(base_url=rows.addr.base_url, headers=headers, timeout=TIMEOUT_S) as http:
        for i in range(0, len(session_ids), 1000):
            params: dict[str, Any] = {"session_ids": list(session_ids[i : i + 1000]), "identifier": [IDENTIFIER],
                                      "include_annotation_names": list(names), "limit": 1000}  # fmt: skip
            while True:
                got = http.get(url, params=params)
                got.raise_for_status()
                body = got.json()
                for a in body.get("data") or []:
                    found: Mapping[str, Any] = a.get("result") or {}
                    result = _result(found.get("label"), found.get("score"), found.get("explanation"))
                    out[a["session_id"], a["name"], IDENTIFIER] = (result, dict(a.get("metadata") or {}))
                if not body.get("next_cursor"):
                    break
                params["cursor"] = body["next_cursor"]
    return out


def _changed(wanted: Sequence[dict[str, Any]], have: Mapping[Any, Any], where: str) -> list[dict[str, Any]]:
    return [a for a in wanted if have.get((a[where], a["name"], a["identifier"])) != (a["result"], a["metadata"])]


def write_back(rows: PhoenixRows, store: Store, summary: RunSummary, specs: Sequence[BaseSpec]) -> list[str]:
    """Write the run's verdicts to Phoenix as annotations (only what changed); the line to print."""
    import httpx

    by_name = {s.name: s for s in specs}
    out = Wanted()
    for metric in summary.metrics:
        if metric.spec in by_name:
            _annotations(rows, store, summary.run_id, metric, by_name[metric.spec], out)
    client = phoenix_client(rows.addr)
    try:
        have = _existing(client, rows.addr.project, sorted({a["span_id"] for a in out.spans}), list(by_name))
        new = _changed(out.spans, have, "span_id")
        new_docs = [d for a in new for d in out.docs.get(f"{a['span_id']}\0{a['name']}", [])]
        sessions = sorted({a["session_id"] for a in out.sessions})
        new_sessions = _changed(out.sessions, _existing_sessions(rows, sessions, list(by_name)), "session_id")
        for i in range(0, len(new), _BATCH):
            client.spans.log_span_annotations(span_annotations=new[i : i + _BATCH], sync=True)  # type: ignore[arg-type, unused-ignore]
        for i in range(0, len(new_docs), _BATCH):
            client.spans.log_document_annotations(
                document_annotations=new_docs[i : i + _BATCH],  # type: ignore[arg-type, unused-ignore]
                sync=True,
            )
        for i in range(0, len(new_sessions), _BATCH):
            client.sessions.log_session_annotations(
                session_annotations=new_sessions[i : i + _BATCH],  # type: ignore[arg-type, unused-ignore]
                sync=True,
            )
    except httpx.HTTPError as exc:
        raise phoenix_error(rows.addr, exc) from None
    line = (
        f"{rows.addr.label}: {len(new)} span annotation(s) written"
        + (f" with {len(new_docs)} document annotation(s)" if new_docs else "")
        + f", {len(out.spans) - len(new)} already there"
    )
    if out.sessions:
        there = len(out.sessions) - len(new_sessions)
        line += f"; {len(new_sessions)} session annotation(s) written, {there} already there"
    return [line + _unwritten(out)]


def _unwritten(out: Wanted) -> str:
    """What the line says of records that got no annotation: not judged, as the trace lacks what the metric
    reads (and where greval reads that from a trace), or failed (a retry judges them again)."""
    said = ""
    if out.skipped:
        skipped = out.skipped.most_common()
        kinds = ", ".join(f"{name}: {n} without {' or '.join(lacked) or 'a required input'}" for (name, lacked), n
                          in skipped)  # fmt: skip
        fields = sorted({f for (_, lacked), _ in skipped for f in lacked})
        where = f"; {field_origin(fields)}" if fields else ""
        said += f"; {sum(out.skipped.values())} record(s) not judged, so not annotated ({kinds}{where})"
    if out.failed:
        said += f"; {out.failed} record(s) whose judging failed not annotated ({RETRY_HINT})"
    return said
