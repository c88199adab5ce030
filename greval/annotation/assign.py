"""Which reviewers a record goes to (``push --overlap N``): each record to N distinct annotators, balanced.

Argilla 2.8's task distribution has one strategy, ``overlap`` with ``min_submitted``: a record is complete
once N people submitted it, but every member of the workspace sees every record — it assigns nothing. So
greval sets ``min_submitted`` to N (Argilla counts completion) and writes the assignment itself into the
``assigned_to`` metadata property (terms, visible to annotators: each reviewer filters on their own name).

The assignment is reproducible (seeded), stable (a record keeps the reviewers it already has, so a re-push
moves no work) and balanced (each new record goes to the N least loaded reviewers; ties broken by a seeded
order), so loads differ by at most one when the records start unassigned.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from greval.annotation.argilla import Connection, DatasetHandle, _check, iter_records
from greval.annotation.errors import AnnotationError
from greval.annotation.reviewers import annotators
from greval.errors import option

ASSIGNED = "assigned_to"


def _rank(seed: int, key: str) -> str:
    return hashlib.sha256(f"{seed}\x1f{key}".encode()).hexdigest()


def assign(
    records: Sequence[str],
    reviewers: Sequence[str],
    overlap: int,
    seed: int = 0,
    existing: Mapping[str, Sequence[str]] | None = None,
) -> dict[str, list[str]]:
    """Record id -> its ``overlap`` reviewers. ``existing`` assignments are kept as they are (reviewers no longer
    listed included: their answers stay theirs); only records without one are assigned."""
    people = sorted(dict.fromkeys(reviewers))
    if overlap < 1:
        raise AnnotationError(f"{option('overlap')} must be at least 1")
    if len(people) < overlap:
        raise AnnotationError(
            f"{option('overlap')} {overlap} needs at least {overlap} annotators; the workspace has {len(people)}"
            f"{': ' + ', '.join(people) if people else ''} (add them with `greval annotate users add NAME`)"
        )
    existing = existing or {}
    out: dict[str, list[str]] = {}
    load = dict.fromkeys(people, 0)
    for rid in records:
        if existing.get(rid):
            out[rid] = list(existing[rid])
            for p in out[rid]:
                if p in load:
                    load[p] += 1
    order = {p: _rank(seed, p) for p in people}
    for rid in sorted((r for r in dict.fromkeys(records) if r not in out), key=lambda r: _rank(seed, r)):
        chosen = sorted(people, key=lambda p: (load[p], order[p]))[:overlap]
        out[rid] = sorted(chosen)
        for p in chosen:
            load[p] += 1
    return out


def ensure_property(conn: Connection, handle: DatasetHandle) -> None:
    """The dataset's ``assigned_to`` terms property, visible to annotators (added to a published dataset too:
    argilla-server 2.8 allows new metadata properties after publishing)."""
    if ASSIGNED in handle.metadata:
        return
    body = {"name": ASSIGNED, "title": "Assigned to", "settings": {"type": "terms"}, "visible_for_annotators": True}
    _check(conn.http.post(f"/api/v1/datasets/{handle.id}/metadata-properties", json=body), "add 'assigned_to'")
    handle.metadata.add(ASSIGNED)


def read_assignments(conn: Connection, dataset_id: str) -> dict[str, list[str]]:
    """Each record's reviewers as its ``assigned_to`` metadata says (records without one left out)."""
    out: dict[str, list[str]] = {}
    for rec in iter_records(conn, dataset_id):
        value = (rec.get("metadata") or {}).get(ASSIGNED)
        if value:
            out[str(rec.get("external_id"))] = [str(v) for v in value] if isinstance(value, list) else [str(value)]
    return out


@dataclass(frozen=True)
class Overlap:
    """``push --overlap N``: each record to ``n`` of ``reviewers`` (default: the workspace's annotators)."""

    n: int
    reviewers: tuple[str, ...] = ()
    seed: int = 0


def plan(conn: Connection, handle: DatasetHandle, ids: Sequence[str], overlap: Overlap | None) -> dict[str, list[str]]:
    """The ``assigned_to`` of each record a push sends: kept from the dataset, new ones assigned under
    ``overlap``; empty when the dataset has no assignment and none is asked for."""
    if overlap is None and ASSIGNED not in handle.metadata:
        return {}
    existing = read_assignments(conn, handle.id) if ASSIGNED in handle.metadata else {}
    if overlap is None:
        return {i: existing[i] for i in ids if i in existing}
    known = annotators(conn, handle.workspace)
    people = list(overlap.reviewers) or known
    unknown = [p for p in people if p not in known]
    if unknown:
        raise AnnotationError(
            f"{option('reviewers')}: {', '.join(unknown[:5])} not an annotator of workspace {handle.workspace!r} "
            f"(see `greval annotate users list`)"
        )
    ensure_property(conn, handle)
    return assign(ids, people, overlap.n, overlap.seed, existing)
