"""Each reviewer's progress on a dataset (``greval annotate status --spec NAME``), read from Argilla alone.

Per reviewer: *assigned* records (their name in ``assigned_to``; every record when the dataset has no
assignment, since Argilla then shows every record to every member), *submitted* / *discarded* / *drafts*
(their responses by status, as Argilla stores them), *pending* (assigned records without their submitted or
discarded answer), and the *median seconds per label*: the median gap between the ``updated_at`` of a
reviewer's consecutive submitted or discarded answers, gaps over :data:`BREAK_SECONDS` counting as breaks
and left out. Argilla keeps no "opened at" time (a response submitted at once has ``inserted_at`` equal to
``updated_at``), so the gap between answers is the only time per label its timestamps give.
"""

from __future__ import annotations

import itertools
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from greval.annotation.argilla import Connection, dataset_progress, find_dataset, iter_records, usernames
from greval.annotation.assign import ASSIGNED
from greval.annotation.errors import AnnotationError
from greval.annotation.reviewers import annotators

BREAK_SECONDS = 30 * 60
ANSWERED = ("submitted", "discarded")


@dataclass(frozen=True)
class ReviewerProgress:
    name: str
    assigned: int
    submitted: int
    discarded: int
    drafts: int
    pending: int
    median_seconds: float | None  # None: fewer than two answers within a break of each other
    gaps: int  # how many gaps the median is over


@dataclass
class DatasetStatus:
    dataset: str
    records: int
    completed: int | None  # records with the submitted answers Argilla's task distribution asks (None: unknown)
    assigned: bool  # whether the dataset has an assignment (``push --overlap``)
    reviewers: list[ReviewerProgress] = field(default_factory=list)


def _epoch(ts: str) -> float:
    dt = datetime.fromisoformat(ts)
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def median_gap(times: list[float]) -> tuple[float | None, int]:
    """The median gap between consecutive answer times, breaks (over :data:`BREAK_SECONDS`) left out."""
    ts = sorted(times)
    gaps = [b - a for a, b in itertools.pairwise(ts) if b - a <= BREAK_SECONDS]
    return (statistics.median(gaps) if gaps else None), len(gaps)


@dataclass
class _Tally:
    assigned: set[str] = field(default_factory=set)
    answered: set[str] = field(default_factory=set)
    counts: Counter[str] = field(default_factory=Counter)
    times: list[float] = field(default_factory=list)


def _read(conn: Connection, dataset_id: str) -> tuple[int, bool, dict[str, _Tally]]:
    users = usernames(conn)
    tallies: dict[str, _Tally] = defaultdict(_Tally)
    records: list[str] = []
    any_assigned = False
    for rec in iter_records(conn, dataset_id):
        rid = str(rec["id"])
        records.append(rid)
        people = (rec.get("metadata") or {}).get(ASSIGNED) or []
        for p in people if isinstance(people, list) else [people]:
            any_assigned = True
            tallies[str(p)].assigned.add(rid)
        for r in rec.get("responses") or []:
            t = tallies[users.get(str(r["user_id"]), str(r["user_id"]))]
            t.counts[str(r["status"])] += 1
            if r["status"] in ANSWERED:
                t.answered.add(rid)
                if r.get("updated_at"):
                    t.times.append(_epoch(str(r["updated_at"])))
    if not any_assigned:
        for t in tallies.values():
            t.assigned = set(records)
    return len(records), any_assigned, tallies


def dataset_status(conn: Connection, dataset: str, workspace: str | None = None) -> DatasetStatus:
    """Every reviewer's progress on ``dataset`` (annotators of the workspace with nothing yet included)."""
    found = find_dataset(conn, dataset, workspace)
    if found is None:
        raise AnnotationError(f"no Argilla dataset {dataset!r}; push first")
    did = str(found["id"])
    n, has_assignment, tallies = _read(conn, did)
    try:
        for name in annotators(conn, workspace):
            tallies.setdefault(name, _Tally())
    except AnnotationError:  # a non-owner key cannot list users: only those who answered are shown
        pass
    rows = []
    for name, t in sorted(tallies.items()):
        med, gaps = median_gap(t.times)
        assigned = len(t.assigned) if has_assignment else n
        pending = len(t.assigned - t.answered) if has_assignment else n - len(t.answered)
        rows.append(
            ReviewerProgress(
                name, assigned, t.counts["submitted"], t.counts["discarded"], t.counts["draft"], pending, med, gaps
            )
        )
    prog = dataset_progress(conn, did)
    return DatasetStatus(dataset, n, prog[0] if prog else None, has_assignment, rows)
