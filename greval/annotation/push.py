"""Push judge verdicts to Argilla: select units, record the selection, upsert them in batches.

The selection is recorded in the store (``annotation_pushes`` / ``annotation_selection``) with each unit's
inclusion probability, so agreement on a non-uniform sample can be reweighted (``selection_weights``).

Argilla record ids are derived from (spec name, record hash, item id), so a push is an upsert: re-running a
push, or finishing one that was interrupted, updates records and never duplicates them. Records with the
same content and different ids are one Argilla record whose ``record_id`` metadata lists every id.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from greval.annotation import dataset as ds
from greval.annotation.argilla import (
    DEFAULT_BATCH,
    Connection,
    DatasetHandle,
    DistributionChange,
    batches,
    bulk_upsert,
    ensure_dataset,
)
from greval.annotation.assign import ASSIGNED, Overlap, plan
from greval.annotation.errors import AnnotationError
from greval.annotation.selection import Pick, Strategy, Unit, select
from greval.dataset.records import Record
from greval.errors import option
from greval.spec import Spec
from greval.store.lookups import UnitVerdict
from greval.store.store import Store


def unit_of(v: UnitVerdict) -> Unit:
    """The labelable unit of a stored verdict, its stratum the verdict (label, or value as text)."""
    verdict = v.label if v.label is not None else str(v.value)
    return Unit(v.record_hash, v.item_id, verdict, v.best_confidence)


@dataclass(frozen=True)
class JudgeInfo:
    key: str
    label: str
    model: str


def spec_and_judge(store: Store, spec_name: str, judge: str | None = None) -> tuple[str, Spec, JudgeInfo]:
    """The version of a spec a push reads (NAME: its production version; NAME@HASH: that one) and the judge
    whose verdicts to push."""
    version, spec = store.reader_spec(spec_name)
    spec_key = version.spec_key
    rows = store.verdict_judges(spec_key, ok_only=True, newest_first=True)
    if not rows:
        raise AnnotationError(f"{store.name}: no verdicts of {spec_name!r} (version {spec.hash}) to push")
    if judge is not None:
        rows = [r for r in rows if judge in (r["label"], r["judge_key"])]
        if not rows:
            raise AnnotationError(f"{option('judge')} {judge!r}: no verdicts of {spec_name!r} by that judge")
    if len(rows) > 1:
        names = ", ".join(f"{r['label']} ({r['judge_key']})" for r in rows[:5])
        choose = f"choose one with {option('judge')}"
        raise AnnotationError(f"several judges have verdicts of {spec_name!r}: {names}; {choose}")
    ident = json.loads(rows[0]["identity"] or "{}")
    return spec_key, spec, JudgeInfo(rows[0]["judge_key"], rows[0]["label"], str(ident.get("model", "")))


def candidates(store: Store, spec_key: str, judge_key: str) -> list[UnitVerdict]:
    """What may be pushed: the judge's ok verdicts of this spec version."""
    return store.unit_verdicts(spec_key, judge_key)


def selection_weights(store: Store, spec_name: str, push_id: str | None = None) -> dict[tuple[str, str], float]:
    """Horvitz-Thompson weights (1 / inclusion probability) of the units of one push (default: the latest)."""
    if push_id is None:
        push_id = store.latest_push(spec_name)
        if push_id is None:
            return {}
    probs = store.selection_probabilities(push_id)
    return {unit: 1.0 / p for unit, p in probs.items() if p > 0}


@dataclass
class PushResult:
    push_id: str
    dataset: str
    workspace: str
    strategy: str
    population: int
    selected: int
    pushed: int
    by_selection: dict[str, int]
    seconds: float
    created: bool
    distribution_change: DistributionChange | None = None
    notes: list[str] = field(default_factory=list)
    sent: int = 0  # upserted by this push (the rest of ``pushed`` was sent by an earlier push)
    unusable: dict[str, int] = field(default_factory=dict)  # units whose verdict is not ok, by why: never pushed
    unit: str = "record"  # what one unit is: a record, or an item (per-chunk / per-triple metrics)
    assigned: dict[str, int] = field(default_factory=dict)  # reviewer -> records of this push assigned to them
    updated: tuple[str, ...] = ()  # texts of an existing dataset brought in line with the spec


def _loads(assigned: Mapping[str, Sequence[str]]) -> dict[str, int]:
    return dict(sorted(Counter(p for people in assigned.values() for p in people).items()))


def unusable_note(unusable: Mapping[str, int], unit: str = "record") -> str | None:
    """The units a push could not send, in words: "1 record not pushed: its verdict is an error (truncated)".
    None when every verdict was usable."""
    total = sum(unusable.values())
    if not total:
        return None
    errors = {why: n for why, n in unusable.items() if why != "skipped"}
    parts = []
    if errors:
        kinds = ", ".join(f"{why} ×{n}" if len(errors) > 1 else why for why, n in errors.items())
        one = sum(errors.values()) == 1
        parts.append(f"{'its verdict is an error' if one else 'their verdicts are errors'} ({kinds})")
    if unusable.get("skipped"):
        parts.append(f"{unusable['skipped']} skipped (the metric does not apply)")
    return f"{total} {unit}{'' if total == 1 else 's'} not pushed: {'; '.join(parts)}"


def uncertain_notes(cands: Sequence[UnitVerdict]) -> list[str]:
    """What "uncertain first" could not see: verdicts without a confidence (a judge asked once, without
    token log-probabilities, has none) count as confident, so with none at all the uncertain slice is random."""
    blind = sum(c.best_confidence is None for c in cands)
    if not blind:
        return []
    what = "no verdict has" if blind == len(cands) else f"{blind} of {len(cands)} verdicts have no"
    return [
        f"{what} confidence: these count as confident and are ordered at random among themselves; judge with "
        f"{option('logprobs')} (token log-probabilities, one call) or {option('samples')} 3 for 'uncertain first' "
        "to mean it"
    ]


def _push_id(
    spec_key: str,
    judge_key: str,
    dataset: str,
    strategy: str,
    params: Mapping[str, Any],
    picks: Sequence[Pick],
) -> str:
    """The same push (same verdicts, same choice) gets the same id: re-running it updates, not adds."""
    blob = json.dumps(
        [
            spec_key,
            judge_key,
            dataset,
            strategy,
            params,
            [[p.unit.record_hash, p.unit.item_id] for p in picks],
        ],
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def push(
    store: Store,
    conn: Connection,
    spec_name: str,
    *,
    dataset: str | None = None,
    workspace: str | None = None,
    strategy: Strategy = "all",
    n: int | None = None,
    seed: int = 0,
    control_share: float = 0.2,
    blind: bool = False,
    annotators_per_record: int | None = None,
    force: bool = False,
    judge: str | None = None,
    batch_size: int = DEFAULT_BATCH,
    overlap: Overlap | None = None,
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> PushResult:
    """Select verdicts of a spec, record the selection, upsert them into Argilla in batches.

    ``annotators_per_record``: None keeps an existing dataset's setting (1 for a new one); a different
    value on an existing dataset is refused unless ``force`` (see :func:`ensure_dataset`). ``overlap``: each
    record assigned to that many annotators (and that many submitted answers needed, see ``assign.py``)."""
    t0 = time.perf_counter()
    if overlap is not None:
        if annotators_per_record not in (None, overlap.n):
            raise AnnotationError(
                f"{option('overlap')} {overlap.n} and {option('annotators_per_record')} {annotators_per_record} "
                f"disagree; give one of them"
            )
        annotators_per_record = overlap.n
    spec_key, spec, jinfo = spec_and_judge(store, spec_name, judge)
    ds.check_scale(spec)
    cands = candidates(store, spec_key, jinfo.key)
    picks = select([unit_of(c) for c in cands], strategy, n, seed, control_share)
    params = {"n": n, "seed": seed, "control_share": control_share if strategy == "uncertain" else None}
    res = deliver(
        store,
        conn,
        Delivery(spec_key, spec, jinfo, dataset or spec.name, workspace, strategy, params),
        cands,
        picks,
        blind=blind,
        annotators_per_record=annotators_per_record,
        force=force,
        batch_size=batch_size,
        overlap=overlap,
        on_start=on_start,
        on_progress=on_progress,
    )
    res.seconds = time.perf_counter() - t0
    res.notes = uncertain_notes(cands) if strategy == "uncertain" else []
    res.unusable = store.unusable_units(spec_key, jinfo.key)
    res.unit = "item" if spec.each else "record"
    return res


@dataclass(frozen=True)
class Delivery:
    """What a push sends where: a spec version's verdicts by one judge, to one Argilla dataset, and how they
    were chosen (``strategy`` and its ``params``, part of the push's id)."""

    spec_key: str
    spec: Spec
    judge: JudgeInfo
    dataset: str
    workspace: str | None
    strategy: str
    params: Mapping[str, Any]


def deliver(
    store: Store,
    conn: Connection,
    to: Delivery,
    cands: Sequence[UnitVerdict],
    picks: Sequence[Pick],
    *,
    blind: bool = False,
    annotators_per_record: int | None = None,
    force: bool = False,
    batch_size: int = DEFAULT_BATCH,
    overlap: Overlap | None = None,
    already_there: frozenset[tuple[str, str]] = frozenset(),
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> PushResult:
    """Record ``picks`` as one push and upsert them into Argilla, except the units ``already_there`` (sent by
    an earlier push to the same dataset: they are recorded in this push's selection, not sent again). Records
    keep the reviewers they are assigned to; ``overlap`` assigns the others."""
    t0 = time.perf_counter()
    by_key = {(c.record_hash, c.item_id): c for c in cands}
    handle = ensure_dataset(
        conn, to.spec, to.dataset, to.workspace, blind=blind, annotators_per_record=annotators_per_record, force=force
    )
    params = {
        **to.params,
        "blind": blind,
        "annotators_per_record": handle.annotators_per_record or annotators_per_record or 1,
    }
    # Every id of each selected content (one Argilla record stands for all of them).
    ids = store.record_ids({p.unit.record_hash for p in picks})
    push_id = _record_push(
        store, conn, to, handle, params=params, population=len(cands), picks=picks, by_key=by_key, ids=ids
    )
    if handle.created:  # a new dataset (another server, a fresh data directory): nothing is there yet
        already_there = frozenset()
    argilla_ids = [ds.argilla_id(to.spec.name, p.unit.record_hash, p.unit.item_id) for p in picks]
    assigned = plan(conn, handle, argilla_ids, overlap)
    if overlap is not None:  # an assignment changes what is there: every picked record carries its reviewers
        already_there = frozenset()
    there = [p.unit.key for p in picks if p.unit.key in already_there]
    done = len(there)
    if there:
        store.mark_pushed(push_id, there, done)
    to_send = [p for p in picks if p.unit.key not in already_there]
    records = {r.hash: r for r in store.records({p.unit.record_hash for p in to_send})}
    if on_start:
        on_start(len(to_send))
    for batch in batches(to_send, max(1, min(batch_size, 1000))):
        refs = [_verdict_ref(to, p, by_key[p.unit.key], records, ids) for p in batch]
        items = [ds.record_payload(to.spec, ref, handle, blind=blind) for ref in refs]
        for item in items:
            if item["external_id"] in assigned:
                item["metadata"][ASSIGNED] = assigned[item["external_id"]]
        bulk_upsert(conn, handle.id, items, done - len(there), len(to_send))
        done += len(batch)
        store.mark_pushed(push_id, [p.unit.key for p in batch], done)
        if on_progress:
            on_progress(len(batch))
    store.finish_push(push_id)
    return PushResult(
        push_id=push_id,
        dataset=to.dataset,
        workspace=handle.workspace,
        strategy=to.strategy,
        population=len(cands),
        selected=len(picks),
        pushed=done,
        by_selection=dict(Counter(p.selection for p in picks)),
        seconds=time.perf_counter() - t0,
        created=handle.created,
        distribution_change=handle.distribution_change,
        sent=len(to_send),
        assigned=_loads(assigned),
        updated=handle.updated,
    )


def _ids_of(ids: Mapping[str, list[str]], c: UnitVerdict) -> tuple[str, ...]:
    """Every record id of a verdict's content (its own when the store knows no other)."""
    return tuple(ids.get(c.record_hash) or [c.record_id])


def _record_push(
    store: Store,
    conn: Connection,
    to: Delivery,
    handle: DatasetHandle,
    *,
    params: Mapping[str, Any],
    population: int,
    picks: Sequence[Pick],
    by_key: Mapping[tuple[str, str], UnitVerdict],
    ids: Mapping[str, list[str]],
) -> str:
    """The push and its selection recorded before anything is sent; its id (the same push, the same id)."""
    spec, name = to.spec, to.dataset
    push_id = _push_id(to.spec_key, to.judge.key, f"{conn.url}|{handle.workspace}|{name}", to.strategy, params, picks)
    store.start_push(
        push_id,
        spec_name=spec.name,
        spec_key=to.spec_key,
        spec_hash=spec.hash,
        judge_key=to.judge.key,
        dataset=name,
        workspace=handle.workspace,
        api_url=conn.url,
        strategy=to.strategy,
        params=json.dumps(params, sort_keys=True),
        population=population,
        units=[
            {
                "record_hash": p.unit.record_hash,
                "item_id": p.unit.item_id,
                "record_id": _ids_of(ids, by_key[p.unit.key])[0],
                "argilla_id": ds.argilla_id(spec.name, p.unit.record_hash, p.unit.item_id),
                "stratum": p.selection,
                "probability": p.probability,
                "rank": p.rank,
            }
            for p in picks
        ],
    )
    return push_id


def _verdict_ref(
    to: Delivery, p: Pick, c: UnitVerdict, records: Mapping[str, Record], ids: Mapping[str, list[str]]
) -> ds.VerdictRef:
    """What one picked unit's Argilla record shows: its record, the judge's verdict and how it was chosen."""
    return ds.VerdictRef(
        record=records[c.record_hash],
        item_id=c.item_id,
        label=c.label,
        value=c.value,
        confidence=c.best_confidence,
        reason=c.reason,
        judge=to.judge.label,
        judge_model=to.judge.model,
        selection=p.selection,
        probability=p.probability,
        record_ids=_ids_of(ids, c),
    )
