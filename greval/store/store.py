"""The verdict store: one SQLite file (WAL) where every verdict lands the moment it arrives.

A verdict is keyed by (spec key, judge key, record content hash, item id): the spec key is the spec's content
hash folded with its dependencies' keys, the judge key hashes the model and its parameters. Re-running a
finished job therefore makes no model call, a killed job resumes with exactly the missing verdicts, and an
edited spec (or record) is re-judged alone.

The verdict cache is keyed by content, but a dataset's identity is its record ids: ``record_ids`` keeps every
(record id, content hash) pair the store has seen, and a run points at the **snapshot** of the dataset it was
given (``snapshot_members``: its ids and contents, stored once however often the same dataset is re-run). Two records
with the same content and different ids cost one call and are both listed, counted and weighted, by every
reader (``greval.store.results``).

A :class:`Store` is this module's writes and reads of verdicts, runs and records, plus its parts: the tables
and migrations (``schema.py``), the connection (``connection.py``), human labels (``labels.py``), Argilla
pushes (``annotation.py``), the verdict reads of later stages (``lookups.py``), ``greval watch``'s state
(``watch.py``) and what a no-op re-run need not work out again (``memo.py``). Only ``greval.store`` holds SQL.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import socket
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from greval.dataset.records import Record
from greval.errors import UserError
from greval.llm.config import JudgeConfig
from greval.spec import BaseSpec, Spec, order_specs, parse_spec
from greval.store.annotation import AnnotationPushes
from greval.store.backend import DB, RECONNECT_WAIT_S, batched
from greval.store.labels import HumanLabels
from greval.store.ledger import Ledger
from greval.store.lookups import VerdictLookups
from greval.store.memo import Memos
from greval.store.schema import members_key, put_members, stored_kind
from greval.store.versions import RunKind, SpecVersions, Version
from greval.store.watch import WatchState
from greval.types import PROMPT_LAYOUT, RECORD_ITEM, ErrorKind, ItemVerdict, JudgeResult, not_applicable

#: Records a connection remembers having stored (see Store._stored), and records stored per transaction.
_REMEMBERED = 10_000
_RECORD_CHUNK = 2000

#: How long a claim on a judgement holds when its owner cannot be checked (another host); an owner on this
#: host that is gone (killed) frees its claims at once.
CLAIM_LEASE_S = 600.0
_HOST = socket.gethostname()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def spec_keys(specs: Sequence[BaseSpec], *, layout: int | None = None) -> dict[str, str]:
    """Each spec's key: its content hash, folded with its dependencies' keys (editing a dependency
    re-judges the metrics that read it) and, for a metric a model judges, the prompt layout (a new layout is
    a new judgement). ``layout``: default the current one; 1 folds nothing, the keys of stores written before
    layouts were counted."""

    layout = PROMPT_LAYOUT if layout is None else layout
    keys: dict[str, str] = {}
    for s in order_specs(specs):
        key = s.hash
        if s.depends_on:
            blob = s.hash + "|" + "|".join(f"{d}={keys[d]}" for d in sorted(s.depends_on))
            key = hashlib.sha256(blob.encode()).hexdigest()[:12]
        if s.needs_model and layout != 1:
            key = hashlib.sha256(f"{key}|prompt-layout={layout}".encode()).hexdigest()[:12]
        keys[s.name] = key
    return keys


def _json(value: Any, default: Callable[[Any], Any] | None = None) -> str:
    """JSON text as the store keeps it, without the spaces after separators (bytes on every stored row)."""
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=default)


_JudgementKey = tuple[str, str, str]
"""(spec_key, judge_key, record_hash): one judgement's row."""


def _judgement_so_far(db: DB, key: _JudgementKey) -> Any:
    """A partial judgement's stored row (what its earlier calls cost and produced), None when there is none."""
    return db.execute(
        "SELECT outputs, tokens_in, tokens_out, latency_ms, attempts, calls, updated_at, tokens_cached"
        " FROM judgements"
        " WHERE spec_key=? AND judge_key=? AND record_hash=?",
        key,
    ).fetchone()


def _upsert_judgement(
    db: DB, key: _JudgementKey, result: JudgeResult, prev: Any, run_id: str | None, now: float
) -> None:
    """The judgement's row; a resumed many-judge (``prev``) keeps what its earlier calls cost and produced."""
    status = "ok" if result.ok else ("skipped" if not_applicable(result) else "error")
    calls = [c.model_dump() for c in result.calls]  # each call's answer (raw) is stored here alone
    outputs = dict(result.outputs)
    t_in, t_out, lat, att = result.tokens_in, result.tokens_out, result.latency_ms, result.attempts
    t_cached: int | None = result.tokens_cached
    if prev is not None:
        outputs = {**json.loads(prev[0] or "{}"), **outputs}
        t_in += prev[1] or 0
        t_out += prev[2] or 0
        # earlier calls judged before schema 6 recorded no cached tokens: the sum is not known either
        t_cached = None if prev[7] is None and prev[1] else result.tokens_cached + (prev[7] or 0)
        lat += prev[3] or 0.0
        att += prev[4] or 0
        calls = json.loads(prev[5] or "[]") + calls
    # Schema 5: raw, model and params stay NULL (the answers are in calls, the judge in judges); an older
    # row judged again loses its copies with the rest of what it said.
    db.execute(
        "INSERT INTO judgements (spec_key, judge_key, record_hash, status, error, outputs, calls,"
        " tokens_in, tokens_out, latency_ms, attempts, run_id, created_at, updated_at,"
        " error_kind, tokens_cached) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT (spec_key, judge_key, record_hash) DO UPDATE SET status=excluded.status,"
        " error=excluded.error, outputs=excluded.outputs, calls=excluded.calls, raw=NULL, model=NULL,"
        " params=NULL, tokens_in=excluded.tokens_in,"
        " tokens_out=excluded.tokens_out, latency_ms=excluded.latency_ms, attempts=excluded.attempts,"
        " run_id=excluded.run_id, updated_at=excluded.updated_at, error_kind=excluded.error_kind,"
        " tokens_cached=excluded.tokens_cached",
        (
            *key,
            status,
            result.error,
            _json(outputs),
            _json(calls),
            t_in,
            t_out,
            lat,
            att,
            run_id,
            now,
            now,
            # The judgement's own error (a failed call); one whose items failed has no text, no kind.
            None if result.error is None else stored_kind(status, None, result.error),
            t_cached,
        ),
    )


def _replace_verdicts(
    db: DB, key: _JudgementKey, record_id: str, result: JudgeResult, *, partial: bool, run_id: str | None, now: float
) -> None:
    """The judgement's verdict rows: an earlier verdict it no longer has is deleted (unless ``partial``)."""
    verdicts = result.verdicts
    # Item verdicts supersede an earlier record-level error row (item id '').
    drop_record_row = any(v.item_id for v in verdicts)
    if not partial:
        keep = [v.item_id for v in verdicts] or [""]
        db.execute(
            "DELETE FROM verdicts WHERE spec_key=? AND judge_key=? AND record_hash=?"
            f" AND (item_id NOT IN ({','.join('?' * len(keep))}) OR (? AND item_id=''))",
            (*key, *keep, drop_record_row),
        )
    elif drop_record_row:
        db.execute("DELETE FROM verdicts WHERE spec_key=? AND judge_key=? AND record_hash=? AND item_id=''", key)
    if result.error is not None and not verdicts:
        # A metric that does not apply to this record (an input it requires is absent) is "skipped":
        # done, not failed; the record's content hash changes when the input is added.
        status = "skipped" if not_applicable(result) else "error"
        verdicts = [ItemVerdict(item_id=RECORD_ITEM, status=status, error=result.error)]
    db.executemany(
        "INSERT INTO verdicts (spec_key, judge_key, record_hash, item_id, spec_name, spec_hash, record_id,"
        " status, label, value, score, confidence, reason, error, samples, run_id, created_at, updated_at,"
        " error_kind, token_confidence) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)"
        " ON CONFLICT(spec_key, judge_key, record_hash, item_id) DO UPDATE SET"
        " spec_name=excluded.spec_name, spec_hash=excluded.spec_hash, record_id=excluded.record_id,"
        " status=excluded.status, label=excluded.label, value=excluded.value, score=excluded.score,"
        " confidence=excluded.confidence, reason=excluded.reason, error=excluded.error,"
        " error_kind=excluded.error_kind, samples=excluded.samples, run_id=excluded.run_id,"
        " updated_at=excluded.updated_at, token_confidence=excluded.token_confidence",
        [
            (
                *key,
                v.item_id,
                result.spec,
                result.spec_hash,
                record_id,
                v.status,
                v.label,
                v.value,
                v.score,
                v.confidence,
                v.reason,
                v.error,
                _json(v.samples) if v.samples else None,
                run_id,
                now,
                now,
                stored_kind(v.status, v.error_kind, v.error),
                v.token_confidence,
            )
            for v in verdicts
        ],
    )


class Store(HumanLabels, AnnotationPushes, VerdictLookups, SpecVersions, WatchState, Ledger, Memos):
    """A greval store: a SQLite file (WAL; safe to open from several processes) or a PostgreSQL database
    (``postgresql://…``, shared by many machines); one connection per Store.

    Opening an older SQLite store migrates it (:mod:`greval.store.schema`); a PostgreSQL one is migrated when
    asked (``migrate=True``, ``greval store migrate``). ``wait_s``: how long an operation waits for a PostgreSQL
    server that went away (:class:`~greval.store.connection.StoreFile`)."""

    def __init__(self, path: str | Path, *, migrate: bool | None = None, wait_s: float = RECONNECT_WAIT_S) -> None:
        super().__init__(path, migrate=migrate, wait_s=wait_s)
        #: Judgements (and their verdicts) this connection has committed: what a store that went away holds
        #: of this process's work.
        self.committed = 0
        self.committed_verdicts = 0
        # (record id, record hash) pairs this connection stored last (at most _REMEMBERED, oldest dropped first):
        # a record judged by several metrics in turn is written once, and a long run's memory does not grow
        # with its dataset. One stored earlier is asked of the store (put_records) or written again (a no-op).
        self._stored: OrderedDict[tuple[str, str], None] = OrderedDict()
        # Judgements put with defer=True, waiting for the next group commit (put_result's arguments and time).
        self._queue: list[tuple[Any, ...]] = []
        self._queued_keys: set[tuple[str, str, str]] = set()  # their (spec key, judge key, record hash)
        self.owner = uuid.uuid4().hex[:12]  # this connection, as the holder of claims
        self._kinds: dict[str, RunKind] = {}  # run id -> its kind (Store._experiment)
        self._reap_runs()

    def _reap_runs(self) -> None:
        """Runs left 'running' by a process of this host that is gone (killed, crashed) are 'interrupted'."""
        rows = self.db.execute("SELECT run_id, pid FROM runs WHERE status='running' AND host=?", (_HOST,)).fetchall()
        gone = [run_id for run_id, pid in rows if pid is not None and not _alive(int(pid))]
        if gone:
            self._write(
                lambda db: db.executemany(
                    "UPDATE runs SET status='interrupted', finished_at=COALESCE(finished_at, ?) WHERE run_id=?",
                    [(time.time(), r) for r in gone],
                )
            )

    # -------------------------------------------------------------------------------- catalogue
    def put_specs(self, specs: Sequence[BaseSpec], keys: Mapping[str, str], *, experiment: bool = False) -> None:
        """Declare spec versions (every run does). ``experiment``: declared by an experiment — a version only
        experiments declared stays marked so (no reader reads it by default), one any other run or a server
        declared is a normal version for good. A metric declared for the first time outside an experiment gets
        this version as its production version, in the same transaction (see :mod:`greval.store.versions`)."""
        now = time.time()
        flag = 1 if experiment else 0

        def write(db: DB) -> None:
            # The body is the latest declaration of this version: fields outside the hash (dataset_aggregate,
            # a way of reading verdicts) may change without a new version, and the store reads them from here;
            # an experiment does not rewrite a normal version's body.
            db.executemany(
                "INSERT INTO specs (spec_key, name, spec_hash, body, created_at, experiment) VALUES (?,?,?,?,?,?)"
                " ON CONFLICT(spec_key) DO UPDATE SET"
                " body = CASE WHEN excluded.experiment > specs.experiment THEN specs.body ELSE excluded.body END,"
                " created_at = excluded.created_at,"
                " experiment = CASE WHEN excluded.experiment < specs.experiment THEN 0 ELSE specs.experiment END",
                [(keys[s.name], s.name, s.hash, s.model_dump_json(), now, flag) for s in specs],
            )
            if experiment:
                return
            db.executemany(
                "INSERT INTO promotions (name, spec_key, at, source, note, run_id)"
                " SELECT ?, ?, ?, 'first run', NULL, NULL WHERE NOT EXISTS (SELECT 1 FROM promotions WHERE name=?)",
                [(s.name, keys[s.name], now, s.name) for s in specs],
            )

        self._write(write)

    def put_judge(self, cfg: JudgeConfig) -> None:
        self._write(
            lambda db: db.execute(
                "INSERT INTO judges (judge_key, label, identity, created_at) VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
                (cfg.key, cfg.label, json.dumps(cfg.identity, sort_keys=True), time.time()),
            )
        )

    def put_records(self, records: Iterable[Record], *, ids: bool = True) -> None:
        """Store records (content once per hash, every (id, hash) pair), read and written a chunk at a time.
        Records the store already holds (stored by this connection lately, else :meth:`known_records`) are
        skipped without serialising them. ``ids`` False (an experiment's records): the contents only — the
        ids stay in the experiment's snapshot, out of every default reader's sight."""
        for chunk in batched(records, _RECORD_CHUNK):
            fresh = [r for r in chunk if (r.id, r.hash) not in self._stored]
            known = self.known_records([(r.id, r.hash) for r in fresh]) if fresh else set()
            todo = [r for r in fresh if (r.id, r.hash) not in known]
            if todo:
                self._write(functools.partial(self._insert_records, records=todo, ids=ids))
                if ids:
                    self._remember((r.id, r.hash) for r in todo)

    def _remember(self, pairs: Iterable[tuple[str, str]]) -> None:
        """Note records this connection stored (the latest _REMEMBERED of them are kept)."""
        stored = self._stored
        for pair in pairs:
            stored[pair] = None
            stored.move_to_end(pair)
        while len(stored) > _REMEMBERED:
            stored.popitem(last=False)

    def _insert_records(self, db: DB, records: Sequence[Record], ids: bool = True) -> None:
        """Content once per hash; every (id, hash) pair (``ids``). Every id is kept, whatever its content."""
        now = time.time()
        fresh = {r.hash: r for r in records}
        db.executemany(
            "INSERT INTO records (record_hash, record_id, data, created_at) VALUES (?,?,?,?) ON CONFLICT DO NOTHING",
            [(h, r.id, _json(r.data, str), now) for h, r in fresh.items()],
        )
        if not ids:
            return
        db.executemany(
            "INSERT INTO record_ids (record_id, record_hash, created_at) VALUES (?,?,?) ON CONFLICT DO NOTHING",
            [(r.id, r.hash, now) for r in records],
        )

    def link_run(self, run_id: str, records: Sequence[Record]) -> None:
        """Record which dataset a run was given: its snapshot (ids and contents). A dataset run again — the
        same ids with the same contents — adds nothing but the run's pointer to it; so does a finished job
        re-run without a call."""
        self.link_snapshot(run_id, [(r.id, r.hash) for r in records], records)

    def link_snapshot(self, run_id: str, members: Sequence[tuple[str, str]], records: Iterable[Record]) -> None:
        """:meth:`link_run` for a dataset given as its (record id, content hash) pairs; ``records`` holds at
        least every member the store has not seen (:meth:`known_records`), whose content goes in with it."""
        key = members_key(members)
        with self._lock:
            known = self.db.execute("SELECT 1 FROM snapshots WHERE snapshot=?", (key,)).fetchone() is not None
        experiment = self._experiment(run_id)
        if not known or not experiment:  # a run's ids join record_ids even when an experiment had its snapshot
            self.put_records(records, ids=not experiment)

        def link(db: DB) -> None:
            if not known:
                put_members(db, members, key)
            db.execute("UPDATE runs SET snapshot=? WHERE run_id=?", (key, run_id))

        self._write(link)

    def known_records(self, members: Sequence[tuple[str, str]]) -> set[tuple[str, str]]:
        """Which of these (record id, content hash) pairs the store already holds (``record_ids``), asked 500
        ids at a time: a run keeps in memory only the records the store still lacks. Asked by id: the table's
        key holds both columns, so the index answers alone (by content it also read each row: 2.5x slower)."""
        wanted = set(members)
        ids = list(dict.fromkeys(i for i, _ in members))
        found: set[tuple[str, str]] = set()
        with self._lock:
            for i in range(0, len(ids), 500):
                chunk = ids[i : i + 500]
                marks = ",".join("?" * len(chunk))
                sql = f"SELECT record_id, record_hash FROM record_ids WHERE record_id IN ({marks})"
                rows = self.db.execute(sql, chunk).fetchall()
                found.update(pair for pair in rows if tuple(pair) in wanted)
        return found

    def any_spec(self, spec_key: str) -> BaseSpec:
        """A stored spec of any kind."""
        row = self.db.execute("SELECT body FROM specs WHERE spec_key=?", (spec_key,)).fetchone()
        if row is None:
            raise UserError(f"{self.name}: no spec with key {spec_key}")
        return parse_spec(json.loads(row[0]), f"{self.name}#{spec_key}")

    def spec_body(self, spec_key: str) -> str | None:
        """A spec version's stored body, as stored (None: no such version)."""
        rows = self._rows("SELECT body FROM specs WHERE spec_key=?", (spec_key,))
        return str(rows[0][0]) if rows else None

    def run_snapshot(self, run_id: str) -> str | None:
        """The snapshot (record ids and contents) a run was given (None: no such run, or not linked yet)."""
        rows = self._rows("SELECT snapshot FROM runs WHERE run_id=?", (run_id,))
        return str(rows[0][0]) if rows and rows[0][0] is not None else None

    def spec(self, spec_key: str) -> Spec:
        """A stored judge spec (what people can label and agreement applies to)."""
        spec = self.any_spec(spec_key)
        if not isinstance(spec, Spec):
            raise UserError(f"metric {spec.name!r} is a {spec.kind} metric, not a judge metric")
        return spec

    def specs(self) -> list[dict[str, Any]]:
        """Every spec version the store has verdicts or labels for."""
        cur = self.db.execute("SELECT spec_key, name, spec_hash, created_at FROM specs ORDER BY created_at, rowid")
        return [dict(zip(("spec_key", "name", "spec_hash", "created_at"), r, strict=True)) for r in cur]

    def reader_spec(self, ref: str) -> tuple[Version, Spec]:
        """The judge metric a reader reads for ``ref``: ``NAME``, its production version; ``NAME@HASH``, that
        version (:meth:`metric_version`); with the spec, for the reader to say which version it read."""
        version = self.metric_version(ref)
        return version, self.spec(version.spec_key)

    def spec_version(self, name: str, version: str) -> str | None:
        """The key of a metric's stored version whose spec hash or key is (or starts with) ``version``; None
        when it has none."""
        try:
            return self.metric_version(f"{name}@{version}").spec_key
        except UserError:
            return None

    def records(self, hashes: Iterable[str] | None = None) -> list[Record]:
        """Stored records, one per (record id, content): two ids with the same content are two Records."""
        sql = "SELECT i.record_hash, i.record_id, r.data FROM record_ids i JOIN records r USING (record_hash) WHERE 1=1"
        if hashes is None:
            rows: Iterable[tuple[Any, ...]] = self.db.execute(sql + " ORDER BY i.created_at, i.rowid").fetchall()
        else:
            rows = sorted(self._rows_for(sql, (), list(hashes)), key=lambda r: (r[0], r[1]))
        return [Record(hash=h, id=i, data=json.loads(d)) for h, i, d in rows]

    def records_with_ids(self, ids: Iterable[str]) -> list[Record]:
        """Every stored version (content) of the given record ids, oldest first for each id."""
        wanted = sorted(set(ids))
        out: list[Record] = []
        for i in range(0, len(wanted), 500):
            chunk = wanted[i : i + 500]
            rows = self._rows(
                "SELECT i.record_id, i.record_hash, r.data FROM record_ids i JOIN records r USING (record_hash)"
                f" WHERE i.record_id IN ({','.join('?' * len(chunk))}) ORDER BY i.created_at, i.rowid",
                chunk,
            )
            out += [Record(id=rid, hash=h, data=json.loads(d)) for rid, h, d in rows]
        return out

    def record_ids(self, hashes: Iterable[str] | None = None) -> dict[str, list[str]]:
        """Content hash -> every record id the store knows for it (in the order they were first seen)."""
        sql = "SELECT record_hash, record_id FROM record_ids WHERE 1=1"
        if hashes is None:
            rows: Iterable[tuple[Any, ...]] = self.db.execute(sql + " ORDER BY created_at, rowid").fetchall()
        else:
            rows = self._rows_for(sql, (), list(hashes))
        out: dict[str, list[str]] = {}
        for h, i in rows:
            out.setdefault(h, []).append(i)
        return out

    # -------------------------------------------------------------------------------------- runs
    def start_run(
        self,
        dataset: str,
        judge_key: str,
        specs: Sequence[str],
        options: dict[str, Any],
        *,
        kind: RunKind = "run",
        purpose: str | None = None,
        dataset_name: str | None = None,
    ) -> str:
        """Record a run as running. ``kind``: an ``experiment`` (``purpose`` says what it tries) is stored like
        any run and read by no reader by default (:mod:`greval.store.versions`); ``dataset_name``: the name of
        the dataset's snapshot, so that history compares like with like."""
        run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        # ON CONFLICT: written again after a commit whose answer was lost with the connection (_write).
        self._write(
            lambda db: db.execute(
                "INSERT INTO runs (run_id, started_at, status, dataset, judge_key, specs, options, pid, host,"
                " kind, purpose, dataset_name) VALUES (?,?,?,?,?,?,?,?,?,?,?,?) ON CONFLICT (run_id) DO NOTHING",
                (
                    run_id,
                    time.time(),
                    "running",
                    dataset,
                    judge_key,
                    json.dumps(list(specs)),
                    json.dumps(options),
                    os.getpid(),
                    _HOST,
                    kind,
                    purpose,
                    dataset_name,
                ),
            )
        )
        self._kinds[run_id] = kind
        return run_id

    def _experiment(self, run_id: str | None) -> bool:
        """Whether ``run_id`` is an experiment run (asked of the store once per run and connection)."""
        if run_id is None:
            return False
        if run_id not in self._kinds:
            self._kinds[run_id] = self.run_kind(run_id)
        return self._kinds[run_id] == "experiment"

    def finish_run(self, run_id: str, status: str, summary: dict[str, Any]) -> None:
        self._write(
            lambda db: db.execute(
                "UPDATE runs SET finished_at=?, status=?, summary=? WHERE run_id=?",
                (time.time(), status, json.dumps(summary, default=str), run_id),
            )
        )

    def activity(self) -> tuple[Any, ...]:
        """How many verdicts and human labels the store holds and when each last changed: equal tuples mean
        nothing a report shows has changed (greval serve's /ui rebuilds its report when it differs)."""
        out: tuple[Any, ...] = ()
        for table in ("verdicts", "human_labels"):
            [row] = self.db.execute(f"SELECT COUNT(*), MAX(updated_at) FROM {table}").fetchall()
            out += tuple(row)
        return out

    def runs(self) -> list[dict[str, Any]]:
        """Every run, oldest first; ``options`` and ``summary`` are JSON text (a sampled run's options hold its
        ``sample``: records, items, seed; its summary what was drawn of how many); ``kind`` is ``experiment`` for
        an experiment (``purpose``: what it tried), else ``run`` (older runs: None)."""
        cols = (
            "run_id",
            "started_at",
            "finished_at",
            "status",
            "dataset",
            "judge_key",
            "specs",
            "options",
            "summary",
            "pid",
            "kind",
            "purpose",
            "dataset_name",
        )
        cur = self.db.execute(f"SELECT {', '.join(cols)} FROM runs ORDER BY started_at, rowid")
        return [dict(zip(cols, r, strict=True)) for r in cur]

    def last_run_summary(self, pid: int) -> dict[str, Any] | None:
        """The stored summary of the latest run a process started (None: no such run, or no summary yet)."""
        row = self.db.execute(
            "SELECT summary FROM runs WHERE pid=? ORDER BY started_at DESC LIMIT 1", (pid,)
        ).fetchone()
        if row is None or not row[0]:
            return None
        summary: dict[str, Any] = json.loads(row[0])
        return summary

    # ---------------------------------------------------------------------------------- verdicts
    def pending(
        self,
        spec_key: str,
        judge_key: str,
        records: Sequence[Record],
        each: str | None,
        retry_errors: bool = False,
    ) -> list[list[str] | None]:
        """What is still to judge for one (spec, judge) on each record, in order: None when nothing; for
        record metrics ``[""]``; for many metrics (``each``: chunks / triples) the item ids without a
        verdict. An explicit error row counts as done (a finished run makes no call) unless ``retry_errors``.

        One query per 500 records: asking record by record cost more than the run's first wave of calls
        takes to go out (scripts/bench_run.py), and reading the whole (spec, judge) would cost a small
        re-run on a large store."""
        if self._queued_keys and any((spec_key, judge_key, r.hash) in self._queued_keys for r in records):
            self.flush()  # this connection reads its own queued verdicts
        final = "('ok', 'skipped')" if retry_errors else "('ok', 'skipped', 'error')"
        found = self._rows_for(
            f"SELECT record_hash, item_id, status FROM verdicts WHERE spec_key=? AND judge_key=? AND status IN {final}",
            (spec_key, judge_key),
            [r.hash for r in records],
        )
        if not each:  # a record metric is done once its record row is final (the loop below, in one set)
            whole = {record_hash for record_hash, item_id, _ in found if item_id == ""}
            return [None if r.hash in whole else [""] for r in records]
        done: dict[str, list[tuple[str, str]]] = {}
        for record_hash, item_id, status in found:
            done.setdefault(record_hash, []).append((item_id, status))
        ids = [[it["id"] for it in r.items(each)] for r in records]
        judged: set[str] | None = None  # records with a successful judgement (asked only if some have no items)
        out: list[list[str] | None] = []
        for record, item_ids in zip(records, ids, strict=True):
            rows = done.get(record.hash, [])
            if any(i == "" and st in ("skipped", "error") for i, st in rows):
                out.append(None)  # not applicable, or a record-level failure of a many-metric (kept unless retried)
                continue
            have = {i for i, _ in rows}
            if not item_ids:  # a record with no items: judged once (an explicit error row says why)
                if judged is None:
                    empty = [r.hash for r, i in zip(records, ids, strict=True) if i == []]
                    judged = {
                        h
                        for (h,) in self._rows_for(
                            "SELECT record_hash FROM judgements WHERE spec_key=? AND judge_key=? AND status='ok'",
                            (spec_key, judge_key),
                            empty,
                        )
                    }
                out.append(None if record.hash in judged else [])
            else:
                out.append([i for i in item_ids if i not in have] or None)
        return out

    def claim(self, spec_key: str, judge_key: str, record_hash: str) -> bool:
        """Take the claim on one judgement before calling the model for it: False while another live owner
        (a concurrent run on this store) holds it. Two processes on overlapping data then pay once."""
        return self.claim_many([(spec_key, judge_key, record_hash)])[0]

    def claim_many(self, wanted: Sequence[tuple[str, str, str]]) -> list[bool]:
        """:meth:`claim` for several (spec key, judge key, record hash) at once: one transaction, committed at
        once (a call waits for its claim; queued verdicts wait for their own group)."""
        if not wanted:
            return []
        # In one order for every process: two PostgreSQL transactions claiming overlapping sets then lock
        # their rows in the same order and cannot deadlock.
        keys = sorted(set(wanted))
        pid = os.getpid()
        lock = " FOR UPDATE" if self.dialect == "postgresql" else ""  # SQLite: BEGIN IMMEDIATE serialises

        def take(db: DB) -> dict[tuple[str, str, str], bool]:
            now = time.time()
            lease = (_HOST, pid, self.owner, now + CLAIM_LEASE_S)
            got: dict[tuple[str, str, str], bool] = {}
            if self.dialect == "postgresql":
                # Every free judgement (the common case) in one statement, one round trip for the batch.
                cols = [list(c) for c in zip(*keys, strict=True)]
                free = db.execute(
                    "INSERT INTO claims (spec_key, judge_key, record_hash, host, pid, owner, expires_at)"
                    " SELECT s, j, r, ?, ?, ?, ? FROM unnest(?::text[], ?::text[], ?::text[]) AS t(s, j, r)"
                    " ON CONFLICT DO NOTHING RETURNING spec_key, judge_key, record_hash",
                    (*lease, *cols),
                ).fetchall()
                got = {(s, j, r): True for s, j, r in free}
            for key in keys:
                if key in got:
                    continue
                # A free judgement: one statement, which two writers cannot both win.
                if (
                    self.dialect == "sqlite"
                    and db.execute(
                        "INSERT INTO claims (spec_key, judge_key, record_hash, host, pid, owner, expires_at)"
                        " VALUES (?,?,?,?,?,?,?) ON CONFLICT DO NOTHING RETURNING 1",
                        (*key, *lease),
                    ).fetchone()
                ):
                    got[key] = True
                    continue
                row = db.execute(
                    "SELECT host, pid, owner, expires_at FROM claims"
                    f" WHERE spec_key=? AND judge_key=? AND record_hash=?{lock}",
                    key,
                ).fetchone()
                if row is not None:
                    held = row[2] != self.owner and row[3] > now
                    if held and (row[0] != _HOST or _alive(int(row[1]))):
                        got[key] = False
                        continue
                # Ours already, expired, or its holder on this host is gone: taken over.
                db.execute(
                    "INSERT INTO claims (spec_key, judge_key, record_hash, host, pid, owner, expires_at)"
                    " VALUES (?,?,?,?,?,?,?) ON CONFLICT (spec_key, judge_key, record_hash) DO UPDATE SET"
                    " host=excluded.host, pid=excluded.pid, owner=excluded.owner, expires_at=excluded.expires_at",
                    (*key, *lease),
                )
                got[key] = True
            return got

        granted = self._write(take)
        return [granted[w] for w in wanted]

    def release_claims(self) -> None:
        """Drop every claim this connection holds (a run's end, however it ended), committing the queued
        verdicts first."""

        def release(db: DB) -> None:
            self._write_queued(db)
            db.execute("DELETE FROM claims WHERE owner=?", (self.owner,))

        self._write(release)
        self._written()

    def close(self) -> None:
        """Commit what is queued, then close (a deferred verdict is never dropped by closing its store; one
        that went away drops them, as its error said)."""
        try:
            if self._down is None:
                self.flush()
        finally:
            super().close()

    def _lost_note(self) -> str:
        if not self.committed and not self._queue:
            return ""
        note = (
            f"; {self.committed:,} judgement(s) ({self.committed_verdicts:,} verdicts) of this run were stored "
            "before it went away"
        )
        if self._queue:
            note += f", {len(self._queue):,} judged since the last commit were not (they are judged again)"
        return note

    @property
    def queued(self) -> int:
        """Verdicts queued by ``put_result(defer=True)`` and not committed yet."""
        return len(self._queue)

    def flush(self) -> None:
        """Commit the queued verdicts (one transaction for all of them; nothing to do when none are queued)."""
        if not self._queue:
            return
        self._write(self._write_queued)
        self._written()

    def _write_queued(self, db: DB) -> None:
        for args in self._queue:
            self._write_result(db, *args)

    def _written(self) -> None:
        """After the commit of the queued verdicts: their records are stored, the queue is empty."""
        self.committed += len(self._queue)
        self.committed_verdicts += sum(len(args[4].verdicts) or 1 for args in self._queue)
        self._remember((args[3].id, args[3].hash) for args in self._queue if not self._experiment(args[0]))
        self._queue.clear()
        self._queued_keys.clear()

    def put_result(
        self,
        run_id: str | None,
        spec_key: str,
        cfg: JudgeConfig,
        record: Record,
        result: JudgeResult,
        partial: bool = False,
        *,
        defer: bool = False,
    ) -> None:
        """Write one judgement and its verdicts in one transaction (all or nothing, at once).

        ``partial``: the result covers only some items (a resumed many-judge); otherwise it replaces every
        earlier verdict of this (spec, judge, record), so a re-judged pipeline leaves no stale items.

        ``defer``: queue it for the next group commit instead (:meth:`flush`, :meth:`release_claims`, or the
        next immediate write commit every queued judgement, in arrival order, each whole): a process killed
        meanwhile loses the queued judgements (their claims die with it) and a re-run judges them again. This
        connection's reads of verdicts (:meth:`result`, and :meth:`pending` for a queued one) commit the queue
        first.
        """
        args = (run_id, spec_key, cfg, record, result, partial, time.time())
        if defer:
            self._queue.append(args)
            self._queued_keys.add((spec_key, cfg.key, record.hash))
            return

        def write(db: DB) -> None:
            self._write_queued(db)
            self._write_result(db, *args)

        self._write(write)
        self._queue.append(args)  # marks its record stored with the others
        self._written()

    @staticmethod
    def _judged_by_a_run(db: DB, spec_key: str, judge_key: str, record_hash: str) -> bool:
        """Whether a judgement is stored and not an experiment's own (see :meth:`_write_result`)."""
        key = (spec_key, judge_key, record_hash)
        where = "spec_key=? AND judge_key=? AND record_hash=?"
        if db.execute(f"SELECT 1 FROM judgements WHERE {where}", key).fetchone() is None:
            return False
        return db.execute(f"SELECT 1 FROM experiment_verdicts WHERE {where}", key).fetchone() is None

    def _write_result(
        self,
        db: DB,
        run_id: str | None,
        spec_key: str,
        cfg: JudgeConfig,
        record: Record,
        result: JudgeResult,
        partial: bool,
        now: float,
    ) -> None:
        """The statements of one :meth:`put_result`, inside the caller's transaction."""
        key = (spec_key, cfg.key, record.hash)  # cfg.key is a property that hashes the config: computed once
        if (record.id, record.hash) not in self._stored:
            # The record goes in with its first verdict, in the same transaction: a run needs no up-front
            # pass over the dataset before its first call, and no verdict lacks its record (an experiment's
            # record without its id: see greval.store.versions).
            self._insert_records(db, [record], ids=not self._experiment(run_id))
        prev = _judgement_so_far(db, key) if partial else None
        if prev is not None and prev[6] == now:
            return  # this very write committed already (its answer lost with the connection): not merged twice
        # An experiment's new judgement is hidden from readers until a run or a server reuses it (store.versions);
        # one it makes again of a judgement a run made stays the run's.
        hide = self._experiment(run_id) and not self._judged_by_a_run(db, *key)
        _upsert_judgement(db, key, result, prev, run_id, now)
        db.execute(
            "DELETE FROM claims WHERE spec_key=? AND judge_key=? AND record_hash=? AND owner=?", (*key, self.owner)
        )
        if hide:
            db.execute(
                "INSERT INTO experiment_verdicts (spec_key, judge_key, record_hash, run_id) VALUES (?,?,?,?)"
                " ON CONFLICT DO NOTHING",
                (*key, run_id),
            )
        _replace_verdicts(db, key, record.id, result, partial=partial, run_id=run_id, now=now)

    def result(self, spec_key: str, judge_key: str, record: Record) -> JudgeResult | None:
        """A stored judgement (to feed metrics that depend on it when a run resumes)."""
        if (spec_key, judge_key, record.hash) in self._queued_keys:
            self.flush()  # this connection reads its own queued verdict
        j = self.db.execute(
            "SELECT status, error, outputs FROM judgements WHERE spec_key=? AND judge_key=? AND record_hash=?",
            (spec_key, judge_key, record.hash),
        ).fetchone()
        if j is None:
            return None
        rows = self.db.execute(
            "SELECT spec_name, spec_hash, item_id, status, label, value, score, confidence, reason, error, error_kind,"
            " token_confidence FROM verdicts WHERE spec_key=? AND judge_key=? AND record_hash=? ORDER BY item_id",
            (spec_key, judge_key, record.hash),
        ).fetchall()
        if not rows:
            return None
        verdicts = [
            ItemVerdict(
                item_id=r[2],
                status=r[3],
                label=r[4],
                value=r[5],
                score=r[6],
                confidence=r[7],
                reason=r[8],
                error=r[9],
                error_kind=None if r[10] is None else ErrorKind(r[10]),
                token_confidence=r[11],
            )
            for r in rows
        ]
        err = j[1] if j[0] in ("error", "skipped") and all(v.item_id == "" for v in verdicts) else None
        if err is not None:
            verdicts = [v for v in verdicts if v.status == "ok"]
        return JudgeResult(
            spec=rows[0][0],
            spec_hash=rows[0][1],
            verdicts=verdicts,
            outputs=json.loads(j[2] or "{}"),
            error=err,
        )
