"""Push judge verdicts to Argilla, pull human answers back, import existing labels.

Selection is pure (``select``) and recorded in the store (``annotation_pushes`` / ``annotation_selection``)
with each unit's inclusion probability, so agreement estimated on a non-uniform sample (stratified,
uncertain-first) can be reweighted honestly (Horvitz-Thompson: weight = 1 / probability).

Argilla record ids are derived from (spec name, record hash, item id), so a push is an upsert: re-running a
push, or finishing one that was interrupted, updates records and never duplicates them. Records with the
same content and different ids are one Argilla record whose ``record_id`` metadata lists every id.

Human answers are keyed (spec name, dataset, record id, record hash, item id, annotator) in
``human_labels``: ``dataset`` is the Argilla dataset an answer came from (``import`` for labels imported
without Argilla), and an answer on a record shared by several ids is stored once per id. Two datasets of
one spec (a blind copy beside the one with suggestions) therefore never overwrite each other.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import math
import random
import secrets
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import argilla as rg
import httpx

from greval.annotation import dataset as ds
from greval.dataset.records import Record
from greval.dataset.tables import read_rows
from greval.errors import UserError
from greval.spec import CategoricalScale, Spec
from greval.store.store import Store

Strategy = Literal["all", "random", "stratified", "uncertain"]
STRATEGIES: tuple[Strategy, ...] = ("all", "random", "stratified", "uncertain")
DEFAULT_BATCH = 500
_LIST_LIMIT = 1000  # argilla-server's maximum page size for listing records


class AnnotationError(UserError):
    """Something the user can fix about a push / pull / import (bad flag, unknown spec, server refused)."""


# ------------------------------------------------------------------------------------------- selection
@dataclass(frozen=True)
class Unit:
    """One thing a person can label: a record (``item_id == ""``) or one chunk / triple of it."""

    record_hash: str
    item_id: str
    stratum: str  # the judge's verdict (label, or value as text)
    confidence: float | None = None

    @property
    def key(self) -> tuple[str, str]:
        return (self.record_hash, self.item_id)


@dataclass(frozen=True)
class Pick:
    """A selected unit, why it was selected, and the probability it had of being selected."""

    unit: Unit
    selection: str
    probability: float
    rank: int


def _shuffled(units: Sequence[Unit], rng: random.Random) -> list[Unit]:
    ordered = sorted(units, key=lambda u: u.key)  # independent of the input order
    rng.shuffle(ordered)
    return ordered


def allocate(sizes: Mapping[str, int], n: int) -> dict[str, int]:
    """Split ``n`` across strata as evenly as their sizes allow (rare labels are covered, not drowned)."""
    alloc = dict.fromkeys(sizes, 0)
    left = min(n, sum(sizes.values()))
    open_ = sorted(s for s in sizes if sizes[s] > 0)
    while left > 0 and open_:
        share = max(1, left // len(open_))
        for s in list(open_):
            take = min(share, sizes[s] - alloc[s], left)
            alloc[s] += take
            left -= take
            if alloc[s] >= sizes[s]:
                open_.remove(s)
            if left == 0:
                break
    return alloc


def select(
    units: Sequence[Unit],
    strategy: Strategy,
    n: int | None = None,
    seed: int = 0,
    control_share: float = 0.2,
) -> list[Pick]:
    """Choose what people label, with each unit's inclusion probability.

    - ``all``: everything (probability 1).
    - ``random``: a simple random sample of n (probability n/N).
    - ``stratified``: by the judge's verdict, n split evenly across verdicts (probability n_h/N_h).
    - ``uncertain``: the least confident verdicts first (a take-all stratum, probability 1), plus a random
      control slice (``control_share`` of n) drawn from the rest (probability n_c/(N - n_u)), so the
      uncertain bias can be undone when estimating agreement. Unknown confidence counts as confident.
    """
    if strategy not in STRATEGIES:
        raise AnnotationError(f"--select {strategy!r}: choose one of {', '.join(STRATEGIES)}")
    if not 0.0 <= control_share <= 1.0:
        raise AnnotationError(f"--control-share {control_share}: give a share between 0 and 1")
    if n is not None and n < 1:
        raise AnnotationError(f"--n {n}: give a positive number of items")
    rng = random.Random(seed)
    total = len(units)
    if strategy == "all" or n is None or n >= total:
        if strategy != "all" and n is None:
            raise AnnotationError(f"--select {strategy} needs --n (how many items to label)")
        ordered = sorted(units, key=lambda u: u.key)
        return [Pick(u, "all", 1.0, i) for i, u in enumerate(ordered)]
    picks: list[Pick] = []
    if strategy == "random":
        chosen = _shuffled(units, rng)[:n]
        picks = [Pick(u, "random", n / total, i) for i, u in enumerate(chosen)]
    elif strategy == "stratified":
        by: dict[str, list[Unit]] = defaultdict(list)
        for u in units:
            by[u.stratum].append(u)
        alloc = allocate({s: len(v) for s, v in by.items()}, n)
        rows: list[tuple[Unit, str, float]] = []
        for s in sorted(by):
            for u in _shuffled(by[s], rng)[: alloc[s]]:
                rows.append((u, f"stratum:{s}", alloc[s] / len(by[s])))
        rng.shuffle(rows)  # interleave strata so a partial annotation pass still covers every label
        picks = [Pick(u, sel, p, i) for i, (u, sel, p) in enumerate(rows)]
    else:  # uncertain
        n_control = round(n * control_share)
        n_uncertain = n - n_control
        tie = {u.key: rng.random() for u in sorted(units, key=lambda u: u.key)}
        by_doubt = sorted(units, key=lambda u: (1.0 if u.confidence is None else u.confidence, tie[u.key]))
        uncertain, rest = by_doubt[:n_uncertain], by_doubt[n_uncertain:]
        picks = [Pick(u, "uncertain", 1.0, i) for i, u in enumerate(uncertain)]
        if rest and n_control:
            p = min(1.0, n_control / len(rest))
            control = _shuffled(rest, rng)[:n_control]
            picks += [Pick(u, "control", p, n_uncertain + i) for i, u in enumerate(control)]
    return picks


# ------------------------------------------------------------------------------------------- the store
@dataclass(frozen=True)
class Candidate:
    """A stored ok verdict of the chosen spec version and judge."""

    record_hash: str
    item_id: str
    record_id: str
    label: str | None
    value: int | None
    confidence: float | None
    reason: str | None

    def unit(self) -> Unit:
        verdict = self.label if self.label is not None else str(self.value)
        return Unit(self.record_hash, self.item_id, verdict, self.confidence)


@dataclass(frozen=True)
class JudgeInfo:
    key: str
    label: str
    model: str


def spec_and_judge(store: Store, spec_name: str, judge: str | None = None) -> tuple[str, Spec, JudgeInfo]:
    """The latest version of a spec in the store and the judge whose verdicts to push."""
    spec_key, spec = store.latest_spec(spec_name)
    rows = store.verdict_judges(spec_key, ok_only=True, newest_first=True)
    if not rows:
        raise AnnotationError(f"{store.path}: no verdicts of {spec_name!r} (version {spec.hash}) to push")
    if judge is not None:
        rows = [r for r in rows if judge in (r["label"], r["judge_key"])]
        if not rows:
            raise AnnotationError(f"--judge {judge!r}: no verdicts of {spec_name!r} by that judge")
    if len(rows) > 1:
        names = ", ".join(f"{r['label']} ({r['judge_key']})" for r in rows[:5])
        raise AnnotationError(f"several judges have verdicts of {spec_name!r}: {names}; choose one with --judge")
    ident = json.loads(rows[0]["identity"] or "{}")
    return spec_key, spec, JudgeInfo(rows[0]["judge_key"], rows[0]["label"], str(ident.get("model", "")))


def candidates(store: Store, spec_key: str, judge_key: str) -> list[Candidate]:
    return [Candidate(**r) for r in store.unit_verdicts(spec_key, judge_key)]


def selection_weights(store: Store, spec_name: str, push_id: str | None = None) -> dict[tuple[str, str], float]:
    """Horvitz-Thompson weights (1 / inclusion probability) of the units of one push (default: the latest)."""
    if push_id is None:
        push_id = store.latest_push(spec_name)
        if push_id is None:
            return {}
    probs = store.selection_probabilities(push_id)
    return {unit: 1.0 / p for unit, p in probs.items() if p > 0}


# ------------------------------------------------------------------------------------------ connection
@dataclass
class Connection:
    """An Argilla client plus its raw HTTP client (bulk calls go straight to the REST API, one request per
    batch). ``repr`` shows no key."""

    url: str
    client: rg.Argilla = field(repr=False)
    workspace: str | None = None

    @property
    def http(self) -> httpx.Client:
        h: httpx.Client = self.client.api.http_client
        return h

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.http.close()


def connect(
    api_url: str | None, api_key: str | None, data_dir: Path | None = None, workspace: str | None = None
) -> Connection:
    """Connect to ``api_url`` with ``api_key``, or by default to the embedded server's credentials."""
    if api_url and not api_key:
        raise AnnotationError("--api-url needs an API key: pass --api-key or set ARGILLA_API_KEY")
    if not api_url:
        from greval.annotation import server

        st = server.status(data_dir)
        if not st.running or not st.url:
            raise AnnotationError(
                "no Argilla server: start the embedded one with `greval annotate up`, "
                "or pass --api-url/--api-key "
                "(or set ARGILLA_API_URL / ARGILLA_API_KEY)"
            )
        creds = server.read_credentials(data_dir)
        api_url, api_key = st.url, api_key or creds.get("api_key")
        workspace = workspace or creds.get("workspace")
        if not api_key:
            raise AnnotationError(f"no API key in the embedded server's credentials ({st.data_dir})")
    try:
        client = rg.Argilla(api_url=api_url, api_key=api_key, timeout=120)
        me = client.api.http_client.get("/api/v1/me")
    except Exception as exc:  # the SDK wraps connection failures in its own types
        if "Credentials" in type(exc).__name__ or "Credentials" in str(exc):
            raise AnnotationError(f"Argilla at {api_url} refused the API key") from None
        raise AnnotationError(f"cannot reach Argilla at {api_url}: {_short(exc)}") from None
    if me.status_code in (401, 403):
        raise AnnotationError(f"Argilla at {api_url} refused the API key (HTTP {me.status_code})")
    return Connection(url=api_url, client=client, workspace=workspace)


def _short(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:200]


def _scrub(value: Any) -> Any:
    """Drop echoed inputs and secrets from an error body before it reaches a message."""
    if isinstance(value, dict):
        return {k: _scrub(v) for k, v in value.items() if k not in ("input", "password", "api_key", "ctx")}
    if isinstance(value, list):
        return [_scrub(v) for v in value]
    return value


def _check(resp: httpx.Response, what: str) -> Any:
    if resp.status_code >= 400:
        try:
            detail = json.dumps(_scrub(resp.json().get("detail")))[:300]
        except (ValueError, AttributeError):
            detail = resp.text[:300]
        raise AnnotationError(f"Argilla refused to {what} (HTTP {resp.status_code}): {detail}")
    return resp.json() if resp.content else None


def _workspace(conn: Connection, workspace: str | None) -> str:
    name = workspace or conn.workspace
    if name:
        return name
    items = _check(conn.http.get("/api/v1/me/workspaces"), "list workspaces")["items"]
    if not items:
        raise AnnotationError("this Argilla user has no workspace; pass --workspace")
    return str(items[0]["name"])


def find_dataset(conn: Connection, name: str, workspace: str | None) -> dict[str, Any] | None:
    """The dataset named ``name`` in the workspace, as the REST API describes it (None if absent)."""
    ws = _workspace(conn, workspace)
    items = _check(conn.http.get("/api/v1/me/datasets"), "list datasets")["items"]
    ws_ids = {w["name"]: w["id"] for w in _check(conn.http.get("/api/v1/me/workspaces"), "list workspaces")["items"]}
    for d in items:
        if d["name"] == name and d["workspace_id"] == ws_ids.get(ws):
            return dict(d)
    return None


def _questions(conn: Connection, dataset_id: str) -> dict[str, dict[str, Any]]:
    items = _check(conn.http.get(f"/api/v1/datasets/{dataset_id}/questions"), "read the questions")["items"]
    return {q["name"]: q for q in items}


def _names(conn: Connection, dataset_id: str, what: str, me: bool = False) -> set[str]:
    prefix = "/api/v1/me/datasets" if me else "/api/v1/datasets"
    items = _check(conn.http.get(f"{prefix}/{dataset_id}/{what}"), f"read the {what}")["items"]
    return {str(i["name"]) for i in items}


def _options(question: Mapping[str, Any]) -> list[Any]:
    return [o["value"] for o in question.get("settings", {}).get("options", [])]


@dataclass(frozen=True)
class DistributionChange:
    """``--annotators-per-record`` changed on a dataset that already existed (applied with ``force``)."""

    before: int
    after: int
    completed: int | None  # records completed under the old setting (None: the server did not say)
    total: int | None


@dataclass
class DatasetHandle:
    """What a push needs to know about the dataset on the server."""

    id: str
    name: str
    workspace: str
    question_id: str
    comment_id: str | None
    fields: set[str]
    metadata: set[str]
    created: bool = False
    distribution_change: DistributionChange | None = None
    annotators_per_record: int | None = None  # the dataset's setting after this call (None: unknown)


def dataset_progress(conn: Connection, dataset_id: str) -> tuple[int, int] | None:
    """(completed, total) records of a dataset, or None when the server will not say."""
    try:
        resp = conn.http.get(f"/api/v1/datasets/{dataset_id}/progress")
    except httpx.HTTPError:
        return None
    if resp.status_code != 200:
        return None
    body = resp.json()
    return int(body.get("completed", 0)), int(body.get("total", 0))


def ensure_dataset(
    conn: Connection,
    spec: Spec,
    name: str,
    workspace: str | None,
    *,
    blind: bool = False,
    annotators_per_record: int | None = None,
    create: bool = True,
    force: bool = False,
) -> DatasetHandle:
    """Create the dataset for a spec, or check that the existing one asks the same question.

    ``annotators_per_record``: the submitted answers a record needs (Argilla's task distribution). A new
    dataset gets it (default 1); an existing one keeps its own when it is None. Changing it on an existing
    dataset recounts every record's progress, so it is refused unless ``force``."""
    ws = _workspace(conn, workspace)
    found = find_dataset(conn, name, ws)
    created = False
    if found is None:
        if not create:
            raise AnnotationError(f"no Argilla dataset {name!r} in workspace {ws!r}; push first")
        settings = ds.build_settings(spec, conn.client, blind=blind, annotators_per_record=annotators_per_record or 1)
        try:
            rg.Dataset(name=name, settings=settings, workspace=ws, client=conn.client).create()
        except Exception as exc:
            raise AnnotationError(f"cannot create the Argilla dataset {name!r} in {ws!r}: {_short(exc)}") from None
        found = find_dataset(conn, name, ws)
        created = True
        if found is None:
            raise AnnotationError(f"the Argilla dataset {name!r} vanished right after it was created")
    did = str(found["id"])
    questions = _questions(conn, did)
    q = questions.get(ds.QUESTION)
    if q is None:
        raise AnnotationError(
            f"Argilla dataset {name!r} has no question {ds.QUESTION!r}; it was not made by "
            "greval - choose another name with --dataset"
        )
    change: DistributionChange | None = None
    current = (found.get("distribution") or {}).get("min_submitted")
    if create:
        want = (
            spec.scale.names
            if isinstance(spec.scale, CategoricalScale)
            else list(range(spec.scale.min, spec.scale.max + 1))
        )
        have = _options(q)
        if [str(x) for x in have] != [str(x) for x in want]:
            raise AnnotationError(
                f"Argilla dataset {name!r} asks for {have} but spec {spec.name!r} has {want}; "
                "push to a new dataset with --dataset"
            )
        if not created and annotators_per_record is not None and current not in (None, annotators_per_record):
            progress = dataset_progress(conn, did)
            done = f"; {progress[0]} of {progress[1]} records are completed" if progress else ""
            if not force:
                raise AnnotationError(
                    f"Argilla dataset {name!r} needs {current} submitted answer(s) per record{done}; "
                    f"--annotators-per-record {annotators_per_record} would change that and recount every "
                    "record's progress: pass --force to apply it (or leave the flag out to keep "
                    f"{current})"
                )
            resp = conn.http.patch(
                f"/api/v1/datasets/{did}",
                json={"distribution": {"strategy": "overlap", "min_submitted": annotators_per_record}},
            )
            _check(resp, f"change --annotators-per-record of {name!r}")
            change = DistributionChange(
                before=int(current),
                after=annotators_per_record,
                completed=progress[0] if progress else None,
                total=progress[1] if progress else None,
            )
    comment = questions.get(ds.COMMENT)
    return DatasetHandle(
        id=did,
        name=name,
        workspace=ws,
        question_id=str(q["id"]),
        comment_id=str(comment["id"]) if comment else None,
        fields=_names(conn, did, "fields"),
        metadata=_names(conn, did, "metadata-properties", me=True),
        created=created,
        distribution_change=change,
        annotators_per_record=change.after if change else (int(current) if current is not None else None),
    )


# ------------------------------------------------------------------------------------------------ push
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


def record_payload(
    spec: Spec,
    ref: ds.VerdictRef,
    handle: DatasetHandle,
    *,
    blind: bool,
    responses: Sequence[Mapping[str, Any]] = (),
) -> dict[str, Any]:
    """One item of a bulk upsert: stable external id, fields, metadata, the judge's suggestion."""
    item: dict[str, Any] = {
        "external_id": ds.argilla_id(spec.name, ref.record.hash, ref.item_id),
        "fields": ds.record_fields(spec, ref, blind=blind, known=handle.fields),
        "metadata": ds.record_metadata(spec, ref, known=handle.metadata),
    }
    value = ds.suggestion_value(spec, ref) if not blind else None
    if value is not None:
        sug: dict[str, Any] = {
            "question_id": handle.question_id,
            "value": value,
            "type": "model",
            "agent": ds.agent_name(ref.judge, spec.hash),
        }
        if ref.confidence is not None and 0.0 <= ref.confidence <= 1.0:
            sug["score"] = float(ref.confidence)
        item["suggestions"] = [sug]
    if responses:
        item["responses"] = list(responses)
    return item


def bulk_upsert(
    conn: Connection, dataset_id: str, items: Sequence[Mapping[str, Any]], done: int = 0, total: int = 0
) -> None:
    """One request; a dead server becomes a one-line error saying that re-running finishes the job."""
    try:
        resp = conn.http.put(f"/api/v1/datasets/{dataset_id}/records/bulk", json={"items": list(items)})
    except httpx.HTTPError as exc:
        raise AnnotationError(
            f"Argilla at {conn.url} stopped answering after {done} of {total} records ({_short(exc)}); "
            "re-run the same command to finish (pushing is idempotent)"
        ) from None
    _check(resp, "store the records")


def _batches(seq: Sequence[Any], size: int) -> Iterator[Sequence[Any]]:
    for i in range(0, len(seq), size):
        yield seq[i : i + size]


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
    on_start: Callable[[int], None] | None = None,
    on_progress: Callable[[int], None] | None = None,
) -> PushResult:
    """Select verdicts of a spec, record the selection, upsert them into Argilla in batches.

    ``annotators_per_record``: None keeps an existing dataset's setting (1 for a new one); a different
    value on an existing dataset is refused unless ``force`` (see :func:`ensure_dataset`)."""
    t0 = time.perf_counter()
    spec_key, spec, jinfo = spec_and_judge(store, spec_name, judge)
    ds.check_scale(spec)
    cands = candidates(store, spec_key, jinfo.key)
    by_key = {(c.record_hash, c.item_id): c for c in cands}
    picks = select([c.unit() for c in cands], strategy, n, seed, control_share)
    name = dataset or spec.name
    handle = ensure_dataset(
        conn, spec, name, workspace, blind=blind, annotators_per_record=annotators_per_record, force=force
    )
    params = {
        "n": n,
        "seed": seed,
        "control_share": control_share if strategy == "uncertain" else None,
        "blind": blind,
        "annotators_per_record": handle.annotators_per_record or annotators_per_record or 1,
    }
    # Every id of each selected content (one Argilla record stands for all of them).
    ids = store.record_ids({p.unit.record_hash for p in picks})

    def ids_of(c: Candidate) -> tuple[str, ...]:
        return tuple(ids.get(c.record_hash) or [c.record_id])

    push_id = _push_id(spec_key, jinfo.key, f"{conn.url}|{handle.workspace}|{name}", strategy, params, picks)
    store.start_push(
        push_id,
        spec_name=spec.name,
        spec_key=spec_key,
        spec_hash=spec.hash,
        judge_key=jinfo.key,
        dataset=name,
        workspace=handle.workspace,
        api_url=conn.url,
        strategy=strategy,
        params=json.dumps(params, sort_keys=True),
        population=len(cands),
        units=[
            {
                "record_hash": p.unit.record_hash,
                "item_id": p.unit.item_id,
                "record_id": ids_of(by_key[p.unit.key])[0],
                "argilla_id": ds.argilla_id(spec.name, p.unit.record_hash, p.unit.item_id),
                "stratum": p.selection,
                "probability": p.probability,
                "rank": p.rank,
            }
            for p in picks
        ],
    )
    records = {r.hash: r for r in store.records({p.unit.record_hash for p in picks})}
    if on_start:
        on_start(len(picks))
    done = 0
    for batch in _batches(picks, max(1, min(batch_size, 1000))):
        items = []
        for p in batch:
            c = by_key[p.unit.key]
            ref = ds.VerdictRef(
                record=records[c.record_hash],
                item_id=c.item_id,
                label=c.label,
                value=c.value,
                confidence=c.confidence,
                reason=c.reason,
                judge=jinfo.label,
                judge_model=jinfo.model,
                selection=p.selection,
                probability=p.probability,
                record_ids=ids_of(c),
            )
            items.append(record_payload(spec, ref, handle, blind=blind))
        bulk_upsert(conn, handle.id, items, done, len(picks))
        done += len(batch)
        store.mark_pushed(push_id, [p.unit.key for p in batch], done)
        if on_progress:
            on_progress(len(batch))
    store.finish_push(push_id)
    return PushResult(
        push_id=push_id,
        dataset=name,
        workspace=handle.workspace,
        strategy=strategy,
        population=len(cands),
        selected=len(picks),
        pushed=done,
        by_selection=dict(Counter(p.selection for p in picks)),
        seconds=time.perf_counter() - t0,
        created=handle.created,
        distribution_change=handle.distribution_change,
    )


# ------------------------------------------------------------------------------------------------ pull
@dataclass
class PullResult:
    dataset: str
    records: int
    submitted: int
    discarded: int
    drafts: int
    pending: int
    stored: int
    changed: int
    by_annotator: dict[str, int] = field(default_factory=dict)
    unknown: int = 0
    answers: int = 0  # responses read; ``stored`` counts rows, one per record id an answer stands for


def _epoch(ts: str | None) -> float | None:
    if not ts:
        return None
    dt = datetime.fromisoformat(ts)
    return (dt if dt.tzinfo else dt.replace(tzinfo=UTC)).timestamp()


def _usernames(conn: Connection) -> dict[str, str]:
    """User id -> username (everyone for an owner; just oneself otherwise)."""
    resp = conn.http.get("/api/v1/users")
    if resp.status_code == 200:
        return {str(u["id"]): str(u["username"]) for u in resp.json()["items"]}
    me = _check(conn.http.get("/api/v1/me"), "read the current user")
    return {str(me["id"]): str(me["username"])}


def iter_records(conn: Connection, dataset_id: str, include: str = "responses") -> Iterator[dict[str, Any]]:
    """Every record of a dataset, page by page (the REST list keeps response timestamps the SDK drops)."""
    offset = 0
    while True:
        resp = conn.http.get(
            f"/api/v1/datasets/{dataset_id}/records",
            params={"include": include, "offset": offset, "limit": _LIST_LIMIT},
        )
        page = _check(resp, "list the records")["items"]
        yield from page
        if len(page) < _LIST_LIMIT:
            return
        offset += len(page)


def _meta_ids(value: Any) -> list[str]:
    """The record ids in a record's ``record_id`` metadata (one id, or a list of them)."""
    if isinstance(value, list):
        return [str(v) for v in value if str(v)]
    return [str(value)] if value is not None and str(value) else []


def pull(
    store: Store,
    conn: Connection,
    spec_name: str,
    *,
    dataset: str | None = None,
    workspace: str | None = None,
) -> PullResult:
    """Fetch every annotator's answers into ``human_labels`` (submitted, discarded and draft, with status).

    Rows are keyed by this dataset's name, and written once per record id that has the answered content
    (every id the store knows for it; else the ids the record itself names). What other datasets of the
    spec hold is neither compared with nor touched."""
    _, spec = store.latest_spec(spec_name)
    name = dataset or spec.name
    handle = ensure_dataset(conn, spec, name, workspace, create=False)
    users = _usernames(conn)
    known = {r["argilla_id"]: (r["record_hash"], r["item_id"], r["record_id"]) for r in store.selected_units(spec.name)}
    before = {
        (r["record_id"], r["record_hash"], r["item_id"], r["annotator"]): (
            r["label"],
            r["value"],
            r["comment"],
            r["status"],
        )
        for r in store.human_labels(spec.name, dataset=name)
    }
    categorical = isinstance(spec.scale, CategoricalScale)
    answers: list[tuple[tuple[str, str, list[str]], dict[str, Any]]] = []
    counts: Counter[str] = Counter()
    per_user: Counter[str] = Counter()
    n_records = pending = unknown = 0
    for rec in iter_records(conn, handle.id, "responses"):
        n_records += 1
        meta = rec.get("metadata") or {}
        unit: tuple[str, str, list[str]]
        if "record_hash" in meta:
            item = str(meta.get("item_id", "-"))
            unit = (str(meta["record_hash"]), "" if item == "-" else item, _meta_ids(meta.get("record_id")))
        elif rec.get("external_id") in known:
            h, i, rid = known[rec["external_id"]]
            unit = (h, i, _meta_ids(meta.get("record_id")) or [rid])
        else:
            unknown += 1
            continue
        responses = rec.get("responses") or []
        if not any(r["status"] == "submitted" for r in responses):
            pending += 1
        for r in responses:
            status = str(r["status"])
            counts[status] += 1
            values = r.get("values") or {}
            answer = (values.get(ds.QUESTION) or {}).get("value")
            comment = (values.get(ds.COMMENT) or {}).get("value")
            annotator = users.get(str(r["user_id"]), str(r["user_id"]))
            if status == "submitted":
                per_user[annotator] += 1
            answers.append(
                (
                    unit,
                    {
                        "spec_name": spec.name,
                        "dataset": name,
                        "record_hash": unit[0],
                        "item_id": unit[1],
                        "annotator": annotator,
                        "spec_hash": meta.get("spec_hash", spec.hash),
                        "label": str(answer) if categorical and answer is not None else None,
                        "value": float(answer) if not categorical and answer is not None else None,
                        "comment": comment or None,
                        "status": status,
                        "source": "argilla",
                        "answered_at": _epoch(r.get("updated_at")),
                    },
                )
            )
    store_ids = store.record_ids({u[0] for u, _ in answers})
    rows: list[dict[str, Any]] = []
    changed = 0
    for (rhash, item_id, meta_ids), answer_row in answers:
        ids = list(dict.fromkeys(store_ids.get(rhash) or meta_ids or [rhash[:16]]))
        mine = [{**answer_row, "record_id": rid} for rid in ids]
        rows += mine
        # An answer changed when a row it had before differs now (counted once, however many ids it has).
        if any(
            (k := (r["record_id"], rhash, item_id, r["annotator"])) in before
            and before[k] != (r["label"], r["value"], r["comment"], r["status"])
            for r in mine
        ):
            changed += 1
    stored = store.put_human_labels(rows)
    return PullResult(
        dataset=name,
        records=n_records,
        submitted=counts["submitted"],
        discarded=counts["discarded"],
        drafts=counts["draft"],
        pending=pending,
        stored=stored,
        changed=changed,
        by_annotator=dict(per_user),
        unknown=unknown,
        answers=len(answers),
    )


# ----------------------------------------------------------------------------------------------- import
@dataclass
class ImportResult:
    rows: int
    stored: int
    annotators: dict[str, int]
    to_argilla: int = 0
    dataset: str = "import"  # the human-label dataset the rows are stored under


def _few(values: Iterable[Any], k: int = 5) -> str:
    vals = list(dict.fromkeys(str(v) for v in values))
    return ", ".join(vals[:k]) + (f" … ({len(vals)} in all)" if len(vals) > k else "")


def _cell(value: Any) -> str | None:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return None
    text = str(value).strip()
    return text or None


def _resolve_records(store: Store, spec_key: str, ids: set[str]) -> dict[str, Record]:
    """Record id -> the stored record version that has verdicts of this spec (else the newest version).

    Every (id, content) pair the store has seen counts (``record_ids``): an id whose content another id
    shares resolves to itself, and an edited record has one version per content."""
    judged = store.judged_hashes(spec_key)
    out: dict[str, Record] = {}
    for rec in store.records_with_ids(ids):
        prev = out.get(rec.id)
        if prev is None or prev.hash not in judged or rec.hash in judged:
            out[rec.id] = rec
    return out


def import_labels(
    store: Store,
    path: Path,
    spec_name: str,
    *,
    record_id_col: str,
    label_col: str,
    item_id_col: str | None = None,
    annotator_col: str | None = None,
    annotator_name: str | None = None,
    comment_col: str | None = None,
    conn: Connection | None = None,
    dataset: str | None = None,
    workspace: str | None = None,
) -> ImportResult:
    """Load human labels from a file into ``human_labels`` (source "import"), optionally into Argilla as
    submitted responses of the named annotator users (created when missing).

    Each row is stored for the record id it names. Its dataset is ``import``, or the Argilla dataset the
    answers also go to (``conn`` given), so a later pull of that dataset updates these rows."""
    if (annotator_col is None) == (annotator_name is None):
        raise AnnotationError("give exactly one of --annotator COL or --annotator-name NAME")
    spec_key, spec = store.latest_spec(spec_name)
    rows = read_rows(path)
    if not rows:
        raise AnnotationError(f"{path}: no rows")
    cols = list(rows[0])
    for flag, col in (
        ("--record-id", record_id_col),
        ("--label", label_col),
        ("--item-id", item_id_col),
        ("--annotator", annotator_col),
        ("--comment", comment_col),
    ):
        if col is not None and col not in cols:
            raise AnnotationError(f"{flag} {col!r}: no such column in {path.name} (has: {_few(cols, 12)})")
    if spec.each and item_id_col is None:
        raise AnnotationError(f"spec {spec.name!r} labels each of the {spec.each}: give --item-id COL")
    label_dataset = (dataset or spec.name) if conn is not None else "import"
    ids = {v for r in rows if (v := _cell(r[record_id_col])) is not None}
    recs = _resolve_records(store, spec_key, ids)
    missing_ids = [i for i in (_cell(r[record_id_col]) for r in rows) if i is None or i not in recs]
    if missing_ids:
        raise AnnotationError(
            f"{len(missing_ids)} row(s) name records not in {store.path.name}: {_few(str(i) for i in missing_ids)}"
        )
    scale = spec.scale
    categorical = isinstance(scale, CategoricalScale)
    allowed_labels = scale.names if isinstance(scale, CategoricalScale) else []
    lo_hi = (scale.min, scale.max) if not isinstance(scale, CategoricalScale) else (0, 0)
    out: list[dict[str, Any]] = []
    bad_labels: list[str] = []
    bad_items: list[str] = []
    for r in rows:
        rec = recs[str(_cell(r[record_id_col]))]
        item_id = ""
        if spec.each and item_id_col:
            item_id = _cell(r[item_id_col]) or ""
            if item_id not in {str(it.get("id")) for it in rec.items(spec.each)}:
                bad_items.append(f"{rec.id}/{item_id or '?'}")
                continue
        raw = _cell(r[label_col])
        label: str | None = None
        value: float | None = None
        if categorical:
            if raw is None or raw not in allowed_labels:
                bad_labels.append(str(raw))
                continue
            label = raw
        else:
            try:
                num = float(raw) if raw is not None else math.nan
            except ValueError:
                num = math.nan
            lo, hi = lo_hi
            if math.isnan(num) or num != int(num) or not lo <= num <= hi:
                bad_labels.append(str(raw))
                continue
            value = float(int(num))
        annotator = annotator_name if annotator_name is not None else _cell(r[str(annotator_col)])
        if not annotator:
            raise AnnotationError(f"record {rec.id}: empty annotator in column {annotator_col!r}")
        out.append(
            {
                "spec_name": spec.name,
                "dataset": label_dataset,
                "record_hash": rec.hash,
                "item_id": item_id,
                "annotator": annotator,
                "record_id": rec.id,
                "spec_hash": spec.hash,
                "label": label,
                "value": value,
                "comment": _cell(r[comment_col]) if comment_col else None,
                "status": "submitted",
                "source": "import",
                "answered_at": None,
            }
        )
    if bad_items:
        raise AnnotationError(
            f"{len(bad_items)} row(s) name {spec.each} that their record does not have: {_few(bad_items)}"
        )
    if bad_labels:
        allowed = ", ".join(allowed_labels) if categorical else f"integers {lo_hi[0]}-{lo_hi[1]}"
        raise AnnotationError(
            f"{len(bad_labels)} label(s) not on the scale of {spec.name!r} ({allowed}): {_few(bad_labels)}"
        )
    stored = store.put_human_labels(out)
    result = ImportResult(
        rows=len(rows), stored=stored, annotators=dict(Counter(r["annotator"] for r in out)), dataset=label_dataset
    )
    if conn is not None:
        result.to_argilla = _import_to_argilla(store, conn, spec_key, spec, out, recs, label_dataset, workspace)
    return result


def ensure_user(conn: Connection, username: str, workspace: str) -> str:
    """The id of an annotator user (created with a random password if missing), member of the workspace."""
    users = {v: k for k, v in _usernames(conn).items()}
    uid = users.get(username)
    if uid is None:
        resp = conn.http.post(
            "/api/v1/users",
            json={
                "username": username,
                "first_name": username,
                "role": "annotator",
                "password": secrets.token_urlsafe(18),
            },
        )
        uid = str(_check(resp, f"create the user {username!r}")["id"])
    ws = {w["name"]: w["id"] for w in _check(conn.http.get("/api/v1/me/workspaces"), "list workspaces")["items"]}
    if workspace in ws:
        members = _check(conn.http.get(f"/api/v1/workspaces/{ws[workspace]}/users"), "list workspace users")
        if uid not in {str(u["id"]) for u in members["items"]}:
            resp = conn.http.post(f"/api/v1/workspaces/{ws[workspace]}/users", json={"user_id": uid})
            _check(resp, f"add {username!r} to the workspace {workspace!r}")
    return uid


def _import_to_argilla(
    store: Store,
    conn: Connection,
    spec_key: str,
    spec: Spec,
    rows: Sequence[dict[str, Any]],
    recs: Mapping[str, Record],
    dataset: str,
    workspace: str | None,
) -> int:
    """Upsert the labelled units with their judge verdict (when any) and the imported answers.

    A unit is one Argilla record for every id with its content (as a push makes it), holding one answer
    per annotator: when a file gives one person two answers for ids sharing a content, the last row wins
    in Argilla (the store keeps both)."""
    handle = ensure_dataset(conn, spec, dataset, workspace)
    verdicts: Mapping[tuple[str, str], Mapping[str, Any]] = store.latest_unit_verdicts(spec_key)
    user_ids = {a: ensure_user(conn, a, handle.workspace) for a in sorted({r["annotator"] for r in rows})}
    by_unit: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for r in rows:
        by_unit[(r["record_hash"], r["item_id"])].append(r)
    by_hash = {rec.hash: rec for rec in recs.values()}
    all_ids = store.record_ids(by_hash)
    items = []
    for (rhash, item_id), rows_of_unit in by_unit.items():
        answers = list({a["annotator"]: a for a in rows_of_unit}.values())
        v = verdicts.get((rhash, item_id), {})
        ident = json.loads(v.get("identity") or "{}")
        ref = ds.VerdictRef(
            record=by_hash[rhash],
            item_id=item_id,
            label=v.get("label"),
            value=v.get("value"),
            confidence=v.get("confidence"),
            reason=v.get("reason"),
            judge=v.get("judge") or "-",
            judge_model=str(ident.get("model", "-")),
            selection="import",
            record_ids=tuple(all_ids.get(rhash) or [by_hash[rhash].id]),
        )
        responses = []
        for a in answers:
            answer: str | int = a["label"] if a["label"] is not None else int(a["value"])
            values: dict[str, Any] = {ds.QUESTION: {"value": answer}}
            if a["comment"] and handle.comment_id:
                values[ds.COMMENT] = {"value": a["comment"]}
            responses.append({"values": values, "status": "submitted", "user_id": user_ids[a["annotator"]]})
        items.append(record_payload(spec, ref, handle, blind=False, responses=responses))
    done = 0
    for batch in _batches(items, DEFAULT_BATCH):
        bulk_upsert(conn, handle.id, batch, done, len(items))
        done += len(batch)
    return done
