"""Adjudication (``greval annotate adjudicate``): records whose reviewers disagree go to adjudicators.

A record is disputed when at least two reviewers submitted it with different labels. The disputed records are
upserted (same external ids: re-running updates, never duplicates) into ``<dataset>-adjudication`` in the
adjudication workspace, whose members are the adjudicators (``reviewers.py``): the reviewers cannot answer
there. Each record shows the review record's fields, a *Reviews* field with every reviewer's label and comment
and the judge's verdict, and the judge's verdict as the suggestion. ``--pull`` stores the adjudicators'
answers as human labels of that dataset, beside (never over) the reviewers' labels; the gold module reads
them with ``--gold adjudicated:NAME``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from greval.annotation import dataset as ds
from greval.annotation.argilla import (
    Connection,
    DatasetHandle,
    batches,
    bulk_upsert,
    ensure_dataset,
    iter_records,
    usernames,
)
from greval.annotation.assign import ASSIGNED
from greval.annotation.errors import AnnotationError
from greval.annotation.pull import PullResult, pull
from greval.annotation.reviewers import adjudication_workspace, ensure_workspace
from greval.spec import CategoricalScale, Spec
from greval.store.store import Store

SUFFIX = "-adjudication"


@dataclass(frozen=True)
class Review:
    reviewer: str
    answer: Any
    comment: str | None


@dataclass(frozen=True)
class Dispute:
    record: Mapping[str, Any]  # the review record as Argilla's REST API lists it
    reviews: tuple[Review, ...]


@dataclass
class AdjudicationResult:
    dataset: str
    workspace: str
    reviewed: int  # records with at least two submitted answers
    disputed: int
    created: bool


def adjudication_names(dataset: str, workspace: str) -> tuple[str, str]:
    """(dataset, workspace) of a review dataset's adjudication round."""
    return f"{dataset}{SUFFIX}", adjudication_workspace(workspace)


def _reviews(rec: Mapping[str, Any], users: Mapping[str, str]) -> list[Review]:
    out = []
    for r in rec.get("responses") or []:
        if r["status"] != "submitted":
            continue
        values = r.get("values") or {}
        answer = (values.get(ds.QUESTION) or {}).get("value")
        if answer is not None:
            who = users.get(str(r["user_id"]), str(r["user_id"]))
            out.append(Review(who, answer, (values.get(ds.COMMENT) or {}).get("value") or None))
    return sorted(out, key=lambda v: v.reviewer)


def disputes(conn: Connection, handle: DatasetHandle) -> tuple[int, list[Dispute]]:
    """(records with two or more submitted answers, those whose answers differ), in the dataset's order."""
    users = usernames(conn)
    reviewed, found = 0, []
    for rec in iter_records(conn, handle.id):
        revs = _reviews(rec, users)
        if len(revs) < 2:
            continue
        reviewed += 1
        if len({str(v.answer) for v in revs}) > 1:
            found.append(Dispute(rec, tuple(revs)))
    return reviewed, found


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def reviews_markdown(d: Dispute) -> str:
    """Every reviewer's label and comment, and the judge's verdict, as a markdown table."""
    meta = d.record.get("metadata") or {}
    rows = ["| who | label | comment |", "| --- | --- | --- |"]
    rows += [f"| {_cell(v.reviewer)} | **{_cell(str(v.answer))}** | {_cell(v.comment or '')} |" for v in d.reviews]
    if meta.get("judge_verdict") is not None:
        judge = f"judge ({meta.get('judge', '')})"
        rows.append(f"| {_cell(judge)} | **{_cell(str(meta['judge_verdict']))}** | see *Judge's reasoning* |")
    return "\n".join(rows)


def _payload(spec: Spec, d: Dispute, handle: DatasetHandle) -> dict[str, Any]:
    """The adjudication record of a dispute: the review record's fields and metadata, the reviews, and the
    judge's verdict as the suggestion."""
    fields = {k: v for k, v in (d.record.get("fields") or {}).items() if k in handle.fields}
    fields[ds.REVIEWS_FIELD] = reviews_markdown(d)
    meta = {k: v for k, v in (d.record.get("metadata") or {}).items() if k != ASSIGNED}
    item: dict[str, Any] = {"external_id": d.record["external_id"], "fields": fields, "metadata": meta}
    verdict = meta.get("judge_verdict")
    value: Any = verdict
    if verdict is not None and not isinstance(spec.scale, CategoricalScale):
        value = int(float(verdict))
    if value is not None:
        agent = ds.agent_name(str(meta.get("judge", "judge")), str(meta.get("spec_hash", spec.hash)))
        item["suggestions"] = [{"question_id": handle.question_id, "value": value, "type": "model", "agent": agent}]
    return item


def adjudicate(
    store: Store, conn: Connection, spec_name: str, *, dataset: str | None = None, workspace: str | None = None
) -> AdjudicationResult:
    """Send the disputed records of a spec's review dataset to its adjudication dataset (one line if none)."""
    _, spec = store.reader_spec(spec_name)
    review = ensure_dataset(conn, spec, dataset or spec.name, workspace, create=False)
    reviewed, found = disputes(conn, review)
    if not found:
        raise AnnotationError(
            f"nothing to adjudicate in dataset {review.name!r}: {reviewed} record(s) have two or more submitted "
            "answers and none of them disagree"
        )
    name, ws = adjudication_names(review.name, review.workspace)
    ensure_workspace(conn, ws)
    handle = ensure_dataset(conn, spec, name, ws, annotators_per_record=1, adjudication=True)
    items: Sequence[dict[str, Any]] = [_payload(spec, d, handle) for d in found]
    for batch in batches(items, 500):
        bulk_upsert(conn, handle.id, batch)
    return AdjudicationResult(name, ws, reviewed, len(found), handle.created)


def pull_adjudicated(
    store: Store, conn: Connection, spec_name: str, *, dataset: str | None = None, workspace: str | None = None
) -> PullResult:
    """The adjudicators' answers into the store (dataset ``<dataset>-adjudication``), beside the reviewers'."""
    _, spec = store.reader_spec(spec_name)
    review = ensure_dataset(conn, spec, dataset or spec.name, workspace, create=False)
    name, ws = adjudication_names(review.name, review.workspace)
    return pull(store, conn, spec_name, dataset=name, workspace=ws)
