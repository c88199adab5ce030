"""The store's tables and how an older store file is brought up to them (nothing it holds is dropped).

Schema history: 1 kept one record id per content and no dataset on human labels; 2 added record ids,
snapshots and claims; 3 stores each error's kind (``error_kind``, an :class:`~greval.types.ErrorKind` value)
beside its text, so that readers count failures by kind without parsing the text; 4 stores each verdict's
``token_confidence`` (from the judge's token log-probabilities; NULL for verdicts judged without them); 5 stores
each judge answer once, in its judgement's ``calls`` (the ``raw`` column held the same text again), and a
judgement's judge by its key alone (``model`` and ``params`` repeated the ``judges`` row): the three columns are
NULL in rows written since, and emptied in older rows wherever they repeat what ``calls`` and ``judges`` hold;
6 stores each judgement's cached prompt tokens (``judgements.tokens_cached``, of ``tokens_in`` those the provider
read from its prompt cache: what prices a record's calls exactly), filled in older rows from their calls where
each call says (greval logs each call's cached tokens since it counted them per run); NULL where one does not
(judged before that): read as not recorded; 7 keeps the loop's own state: which runs are *experiments* (``runs.kind``:
align candidates, ``spec try``, side runs — stored, never what a reader picks by default), which spec versions only
experiments declared (``specs.experiment``), and each metric's *production* version (``promotions``: every change
of it, the latest per name is the one readers default to); a migrated store's align runs become experiments and
each metric's production version is the one readers read before (its latest version declared by any other run);
``experiment_verdicts`` lists the judgements an experiment made under a version that is not its own, hidden from
readers until a run or a server reuses them; 8 keeps ``greval watch``'s state (:mod:`greval.store.watch`): each
watch's source (``watches``), its cursor per metric (``watch_cursors``: how far the watch has read its source; the
metric ``''`` is the sampling's own), what it counted per window and stratum (``watch_strata``), the traces its
sampling chose (``watch_traces``), each chosen trace's way through a metric (``watch_items``: admitted, held back by
the daily budget, judged, written back; its tokens and cost) and each window's figures and alarm (``watch_windows``).
9 keeps the ledger of spent labels (``decisions``: each align
decision taken on a test part, numbered per metric; ``label_uses``: which labels each decision read as its test
part, which search fold each was in, which became few-shot examples of its winner), empty in a migrated store
(align decisions were not recorded before). Step 9 creates its tables only (``CREATE TABLE IF NOT EXISTS``):
it applies after schema 8's step or straight from 7.
A store written by an older greval is migrated the first time this one opens it, in one transaction.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import re
import time
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, NamedTuple

from greval.dataset.compact import Pairs
from greval.dataset.records import Record
from greval.errors import GrevalError
from greval.store.backend import batched
from greval.types import ErrorKind

if TYPE_CHECKING:
    from greval.store.backend import DB, Dialect

SCHEMA_VERSION = 9

# New columns go at the end of their table (where a migration's ALTER TABLE puts them), and every INSERT
# names its columns: a fresh store and a migrated one then have the same tables. Written in SQLite's types;
# ddl() gives PostgreSQL's (the one schema definition of both). judgements.raw, .model and .params are NULL since
# schema 5: each call's answer is in ``calls``, the judge's label and identity in ``judges``.
DDL = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS specs (
    spec_key TEXT PRIMARY KEY, name TEXT NOT NULL, spec_hash TEXT NOT NULL, body TEXT NOT NULL,
    created_at REAL NOT NULL, experiment INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS promotions (
    name TEXT NOT NULL, spec_key TEXT NOT NULL, at REAL NOT NULL, source TEXT NOT NULL, note TEXT, run_id TEXT,
    PRIMARY KEY (name, at, spec_key));
CREATE TABLE IF NOT EXISTS experiment_verdicts (
    spec_key TEXT NOT NULL, judge_key TEXT NOT NULL, record_hash TEXT NOT NULL, run_id TEXT NOT NULL,
    PRIMARY KEY (spec_key, judge_key, record_hash));
CREATE TABLE IF NOT EXISTS judges (
    judge_key TEXT PRIMARY KEY, label TEXT NOT NULL, identity TEXT NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS records (
    record_hash TEXT PRIMARY KEY, record_id TEXT NOT NULL, data TEXT NOT NULL, created_at REAL NOT NULL);
CREATE INDEX IF NOT EXISTS records_by_id ON records(record_id);
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY, started_at REAL NOT NULL, finished_at REAL, status TEXT NOT NULL,
    dataset TEXT, judge_key TEXT, specs TEXT, options TEXT, summary TEXT, snapshot TEXT, pid INTEGER, host TEXT,
    kind TEXT, purpose TEXT, dataset_name TEXT);
CREATE TABLE IF NOT EXISTS record_ids (
    record_id TEXT NOT NULL, record_hash TEXT NOT NULL, created_at REAL NOT NULL,
    PRIMARY KEY (record_id, record_hash));
CREATE INDEX IF NOT EXISTS record_ids_by_hash ON record_ids(record_hash);
CREATE TABLE IF NOT EXISTS snapshots (snapshot TEXT PRIMARY KEY, records INTEGER NOT NULL, created_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS snapshot_members (
    snapshot TEXT NOT NULL, record_id TEXT NOT NULL, record_hash TEXT NOT NULL,
    PRIMARY KEY (snapshot, record_id)) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS snapshot_members_by_hash ON snapshot_members(snapshot, record_hash);
CREATE TABLE IF NOT EXISTS claims (
    spec_key TEXT NOT NULL, judge_key TEXT NOT NULL, record_hash TEXT NOT NULL,
    host TEXT NOT NULL, pid INTEGER NOT NULL, owner TEXT NOT NULL, expires_at REAL NOT NULL,
    PRIMARY KEY (spec_key, judge_key, record_hash));
CREATE TABLE IF NOT EXISTS verdicts (
    spec_key TEXT NOT NULL, judge_key TEXT NOT NULL, record_hash TEXT NOT NULL, item_id TEXT NOT NULL,
    spec_name TEXT NOT NULL, spec_hash TEXT NOT NULL, record_id TEXT NOT NULL,
    status TEXT NOT NULL, label TEXT, value INTEGER, score REAL, confidence REAL, reason TEXT, error TEXT,
    samples TEXT, run_id TEXT, created_at REAL NOT NULL, updated_at REAL NOT NULL, error_kind TEXT,
    token_confidence REAL,
    PRIMARY KEY (spec_key, judge_key, record_hash, item_id));
CREATE INDEX IF NOT EXISTS verdicts_by_name ON verdicts(spec_name, record_hash);
CREATE TABLE IF NOT EXISTS judgements (
    spec_key TEXT NOT NULL, judge_key TEXT NOT NULL, record_hash TEXT NOT NULL,
    status TEXT NOT NULL, error TEXT, outputs TEXT, calls TEXT, raw TEXT, model TEXT, params TEXT,
    tokens_in INTEGER, tokens_out INTEGER, latency_ms REAL, attempts INTEGER, run_id TEXT,
    created_at REAL NOT NULL, updated_at REAL NOT NULL, error_kind TEXT, tokens_cached INTEGER,
    PRIMARY KEY (spec_key, judge_key, record_hash));
CREATE TABLE IF NOT EXISTS human_labels (
    spec_name TEXT NOT NULL, dataset TEXT NOT NULL, record_id TEXT NOT NULL, record_hash TEXT NOT NULL,
    item_id TEXT NOT NULL, annotator TEXT NOT NULL,
    spec_hash TEXT, label TEXT, value REAL, comment TEXT, status TEXT NOT NULL,
    source TEXT NOT NULL, answered_at REAL, updated_at REAL NOT NULL,
    PRIMARY KEY (spec_name, dataset, record_id, record_hash, item_id, annotator));
CREATE TABLE IF NOT EXISTS annotation_pushes (
    push_id TEXT PRIMARY KEY, spec_name TEXT NOT NULL, spec_key TEXT NOT NULL, spec_hash TEXT NOT NULL,
    judge_key TEXT NOT NULL, dataset TEXT NOT NULL, workspace TEXT, api_url TEXT,
    strategy TEXT NOT NULL, params TEXT NOT NULL, population INTEGER NOT NULL, selected INTEGER NOT NULL,
    pushed INTEGER NOT NULL DEFAULT 0, status TEXT NOT NULL, attempts INTEGER NOT NULL DEFAULT 0,
    created_at REAL NOT NULL, updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS annotation_selection (
    push_id TEXT NOT NULL, spec_name TEXT NOT NULL, record_hash TEXT NOT NULL, item_id TEXT NOT NULL,
    record_id TEXT NOT NULL, argilla_id TEXT NOT NULL, stratum TEXT NOT NULL, probability REAL NOT NULL,
    rank INTEGER NOT NULL, pushed_at REAL,
    PRIMARY KEY (push_id, record_hash, item_id));
CREATE INDEX IF NOT EXISTS annotation_selection_by_unit
    ON annotation_selection(spec_name, record_hash, item_id);
CREATE TABLE IF NOT EXISTS watches (
    watch_id TEXT PRIMARY KEY, source TEXT NOT NULL, config TEXT NOT NULL, created_at REAL NOT NULL,
    updated_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS watch_cursors (
    watch_id TEXT NOT NULL, metric TEXT NOT NULL, position TEXT NOT NULL, updated_at REAL NOT NULL,
    PRIMARY KEY (watch_id, metric));
CREATE TABLE IF NOT EXISTS watch_strata (
    watch_id TEXT NOT NULL, window_start REAL NOT NULL, stratum TEXT NOT NULL, seen INTEGER NOT NULL,
    matched INTEGER NOT NULL, sampled INTEGER NOT NULL,
    PRIMARY KEY (watch_id, window_start, stratum));
CREATE TABLE IF NOT EXISTS watch_traces (
    watch_id TEXT NOT NULL, trace_id TEXT NOT NULL, window_start REAL NOT NULL, stratum TEXT NOT NULL,
    PRIMARY KEY (watch_id, trace_id));
CREATE TABLE IF NOT EXISTS watch_items (
    watch_id TEXT NOT NULL, metric TEXT NOT NULL, trace_id TEXT NOT NULL, window_start REAL NOT NULL,
    status TEXT NOT NULL, decided_at REAL NOT NULL, record_id TEXT, record_hash TEXT, run_id TEXT, judged_at REAL,
    tokens INTEGER, usd REAL, review_batch INTEGER,
    PRIMARY KEY (watch_id, metric, trace_id));
CREATE INDEX IF NOT EXISTS watch_items_by_window ON watch_items(watch_id, metric, window_start);
CREATE INDEX IF NOT EXISTS watch_items_by_time ON watch_items(watch_id, decided_at);
CREATE TABLE IF NOT EXISTS watch_windows (
    watch_id TEXT NOT NULL, metric TEXT NOT NULL, window_start REAL NOT NULL, window_end REAL NOT NULL,
    spec_key TEXT, figures TEXT, alarm TEXT, alarmed_at REAL, posted_at REAL, routed_at REAL, review_units INTEGER,
    updated_at REAL NOT NULL,
    PRIMARY KEY (watch_id, metric, window_start));
CREATE TABLE IF NOT EXISTS decisions (
    spec_name TEXT NOT NULL, number INTEGER NOT NULL, decision_id TEXT NOT NULL, at REAL NOT NULL,
    from_key TEXT NOT NULL, to_key TEXT, adopted INTEGER NOT NULL, objective TEXT NOT NULL, gain REAL, ci_low REAL,
    ci_high REAL, seed INTEGER NOT NULL, reuse_test INTEGER NOT NULL, evidence TEXT NOT NULL,
    PRIMARY KEY (spec_name, number));
CREATE UNIQUE INDEX IF NOT EXISTS decisions_by_id ON decisions(decision_id);
CREATE TABLE IF NOT EXISTS label_uses (
    spec_name TEXT NOT NULL, record_id TEXT NOT NULL, record_hash TEXT NOT NULL, item_id TEXT NOT NULL,
    decision_id TEXT NOT NULL, use TEXT NOT NULL, fold INTEGER, spec_key TEXT NOT NULL, at REAL NOT NULL,
    PRIMARY KEY (decision_id, use, record_id, record_hash, item_id));
CREATE INDEX IF NOT EXISTS label_uses_by_name ON label_uses(spec_name, use, record_hash);
"""

#: A verdict status that counts as done for planning (Store.pending, without retrying errors).
_FINAL = "('ok', 'skipped', 'error')"


def _bump(table: str, event: str, losses: str) -> str:
    """A trigger moving the (spec key, judge key) counters after ``event`` on ``table``: every write moves
    ``writes``; ``losses`` moves by the SQL expression given (0 or 1)."""
    row = "OLD" if event == "DELETE" else "NEW"
    return f"""
CREATE TRIGGER IF NOT EXISTS memo_{table}_{event.lower()} AFTER {event} ON {table} BEGIN
    INSERT INTO memo_generations (spec_key, judge_key, writes, losses)
    VALUES ({row}.spec_key, {row}.judge_key, 1, {losses})
    ON CONFLICT (spec_key, judge_key) DO UPDATE SET writes = writes + 1, losses = losses + ({losses});
END;"""


#: The memo tables and their triggers (greval.store.memo; SQLite only, run on every open as DDL is). Not in
#: :func:`tables`: a cache, never copied to another store (greval.store.copy), and outside DDL, whose
#: statements are split at ";" (a trigger's body has several).
MEMO_DDL = "\n".join(
    [
        """
CREATE TABLE IF NOT EXISTS memo_generations (
    spec_key TEXT NOT NULL, judge_key TEXT NOT NULL, writes INTEGER NOT NULL, losses INTEGER NOT NULL,
    PRIMARY KEY (spec_key, judge_key)) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS memo (
    spec_key TEXT NOT NULL, judge_key TEXT NOT NULL, kind TEXT NOT NULL, key TEXT NOT NULL,
    generation INTEGER NOT NULL, value TEXT,
    PRIMARY KEY (spec_key, judge_key, kind, key)) WITHOUT ROWID;""",
        _bump("verdicts", "INSERT", "0"),
        _bump("verdicts", "UPDATE", f"NEW.status NOT IN {_FINAL}"),
        _bump("verdicts", "DELETE", "1"),
        _bump("judgements", "INSERT", "0"),
        _bump("judgements", "UPDATE", "OLD.status = 'ok' AND NEW.status <> 'ok'"),
        _bump("judgements", "DELETE", "1"),
        _bump("experiment_verdicts", "INSERT", "0"),
        _bump("experiment_verdicts", "UPDATE", "0"),
        _bump("experiment_verdicts", "DELETE", "0"),
    ]
)


#: The tables of schema 9 (the ledger), made by its migration step (see the module doc).
LEDGER_TABLES = ("decisions", "label_uses")

# Schema 1 -> 2: records kept one id per content (a second id with the same content vanished), runs linked
# contents not ids, and human labels had no dataset. The ids schema 1 still knew are carried over.
_MIGRATE_1_2 = """
INSERT OR IGNORE INTO record_ids SELECT record_id, record_hash, created_at FROM records;
INSERT OR IGNORE INTO record_ids SELECT DISTINCT record_id, record_hash, MIN(created_at) FROM verdicts
    GROUP BY record_id, record_hash;
ALTER TABLE runs ADD COLUMN snapshot TEXT;
ALTER TABLE runs ADD COLUMN pid INTEGER;
ALTER TABLE runs ADD COLUMN host TEXT;
ALTER TABLE human_labels RENAME TO human_labels_v1;
"""

# Schema 2 -> 3: each stored error gets its kind column, filled from its text (see error_kind).
_MIGRATE_2_3 = """
ALTER TABLE verdicts ADD COLUMN error_kind TEXT;
ALTER TABLE judgements ADD COLUMN error_kind TEXT;
"""

# Schema 3 -> 4: each verdict's token confidence; verdicts judged before have none (NULL), as a verdict judged
# without log-probabilities.
_MIGRATE_3_4 = """
ALTER TABLE verdicts ADD COLUMN token_confidence REAL;
"""

# Schema 5 -> 6: each judgement's cached prompt tokens (filled from its calls by _migrate_5_6).
_MIGRATE_5_6 = """
ALTER TABLE judgements ADD COLUMN tokens_cached INTEGER;
"""

# Schema 6 -> 7: the loop's state (see the module doc; filled by _migrate_6_7).
_MIGRATE_6_7 = """
ALTER TABLE runs ADD COLUMN kind TEXT;
ALTER TABLE runs ADD COLUMN purpose TEXT;
ALTER TABLE runs ADD COLUMN dataset_name TEXT;
ALTER TABLE specs ADD COLUMN experiment INTEGER NOT NULL DEFAULT 0;
"""

_KINDS = {k.value: k for k in ErrorKind}

#: How greval joined a judgement's answers into its ``raw`` column (schema 4 and before).
RAW_SEPARATOR = "\n---\n"


_LEGACY_DEPENDENCY = ("depends on ", "needs the verdicts of ")


def error_kind(text: str | None) -> ErrorKind:
    """The kind of a stored error text: greval writes every error as ``"<kind>: …"`` (an :class:`ErrorKind`
    value before the first colon); any other text is ``unknown``. The one place an error's text becomes its
    kind: the v2 -> v3 migration fills the column with it, and so does a write whose verdict has no kind."""
    if not text:
        return ErrorKind.UNKNOWN
    if text.startswith(_LEGACY_DEPENDENCY):  # written before these texts carried their kind (schema 2)
        return ErrorKind.DEPENDENCY
    return _KINDS.get(text.split(":", 1)[0].strip(), ErrorKind.UNKNOWN)


def stored_kind(status: str, kind: ErrorKind | None, text: str | None) -> str | None:
    """The ``error_kind`` column of a row: the kind given, else the text's, for errors; None otherwise."""
    if status != "error":
        return None
    return (kind or error_kind(text)).value


def snapshot_key(records: Sequence[Record]) -> str:
    """A dataset's identity: its (record id, content hash) pairs, in any order."""
    return members_key([(r.id, r.hash) for r in records])


def members_key(members: Sequence[tuple[str, str]]) -> str:
    """:func:`snapshot_key` of a dataset given as its (record id, content hash) pairs: the sha256 of their
    ``id\\x1fhash`` lines, sorted, joined by newlines — hashed a batch of lines at a time, never as one text
    (that text, its lines and its bytes were ~280 bytes a row at once: the peak of a large re-run)."""
    if isinstance(members, Pairs) and len(members) > _SORT_COMPACT:
        with contextlib.suppress(_NotById):
            return _key_of(_lines_by_id(members))
    return _key_of(sorted(f"{rid}\x1f{rhash}" for rid, rhash in members))


#: Members past which :func:`members_key` sorts a dataset's ids packed in a numpy array, not its lines.
_SORT_COMPACT = 50_000
_BELOW_SEPARATOR = re.compile(b"[\x00-\x1f]")


def _key_of(lines: Iterable[str]) -> str:
    digest = hashlib.sha256()
    for n, batch in enumerate(batched(lines, 10_000)):
        digest.update((("\n" if n else "") + "\n".join(batch)).encode())
    return digest.hexdigest()[:24]


class _NotById(GrevalError):
    """The lines cannot be sorted by their ids alone (see :func:`_lines_by_id`)."""


def _lines_by_id(members: Pairs) -> Iterator[str]:
    """The lines in sorted order, the ids alone sorted (~24 bytes a row in a numpy string array, not ~130 for
    the lines as strs): distinct ids without a character below U+0020 sort as their lines do, no line being
    then a prefix of another up to its separator. :class:`_NotById` (raised now, or while the lines are read)
    when two ids are equal, one holds such a character or a lone surrogate, or numpy is older than 2."""
    import numpy as np

    string = getattr(getattr(np, "dtypes", None), "StringDType", None)
    if string is None or members.ids.contains(_BELOW_SEPARATOR):
        raise _NotById
    ids = np.empty(len(members), dtype=string())
    try:
        for n, batch in enumerate(batched(members.ids, 10_000)):
            ids[n * 10_000 : n * 10_000 + len(batch)] = batch
    except UnicodeEncodeError:
        raise _NotById from None
    order = np.argsort(ids, kind="stable")
    del ids

    def lines() -> Iterator[str]:
        last = None
        for start in range(0, len(order), 10_000):
            for rid, rhash in members.at(order[start : start + 10_000].tolist()):
                if rid == last:
                    raise _NotById
                last = rid
                yield f"{rid}\x1f{rhash}"

    return lines()


def put_snapshot(db: DB, records: Sequence[Record], key: str | None = None) -> str:
    """Store a dataset's snapshot (its ids and contents, once however often it is run); returns its key."""
    return put_members(db, [(r.id, r.hash) for r in records], key)


def put_members(db: DB, members: Sequence[tuple[str, str]], key: str | None = None) -> str:
    """:func:`put_snapshot` for a dataset given as its (record id, content hash) pairs."""
    key = key or members_key(members)
    for chunk in batched(members, 5000):
        db.executemany(
            "INSERT INTO snapshot_members (snapshot, record_id, record_hash) VALUES (?,?,?) ON CONFLICT DO NOTHING",
            [(key, *m) for m in chunk],
        )
    db.execute(
        "INSERT INTO snapshots (snapshot, records, created_at) VALUES (?,?,?) ON CONFLICT DO NOTHING",
        (key, len(members), time.time()),
    )
    return key


def stored_version(db: DB) -> int | None:
    """The schema version a store file was written with (None: a new file)."""
    row = db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()
    return None if row is None else int(row[0])


def set_version(db: DB) -> None:
    db.execute(
        "INSERT INTO meta (key, value) VALUES ('schema_version', ?)"
        " ON CONFLICT (key) DO UPDATE SET value=excluded.value",
        (str(SCHEMA_VERSION),),
    )


_TABLE = re.compile(r"CREATE TABLE IF NOT EXISTS (\w+) \((.*)\)( WITHOUT ROWID)?$", re.S)


def statements(script: str) -> list[str]:
    """A script's statements (none of greval's has a ``;`` inside a literal)."""
    return [s.strip() for s in script.split(";") if s.strip()]


def ddl(dialect: Dialect) -> str:
    """The schema in a dialect. PostgreSQL: 8-byte floats and integers (SQLite's REAL and INTEGER are 8
    bytes), byte-order text (``COLLATE "C"``, as SQLite compares: the same ORDER BY gives the same rows), and
    an explicit ``rowid`` (a sequence, last) where SQLite has its implicit one: "in storage order" is
    ``ORDER BY rowid`` on both."""
    if dialect == "sqlite":
        return DDL
    out = []
    for stmt in statements(DDL):
        stmt = column_types(stmt)
        m = _TABLE.match(stmt)
        if m:
            stmt = f"CREATE TABLE IF NOT EXISTS {m[1]} ({m[2]}, rowid BIGSERIAL)"
        out.append(stmt + ";")
    return "\n".join(out)


def column_types(sql: str) -> str:
    """SQLite's column types in PostgreSQL's (for DDL and for a migration's ALTER TABLE)."""
    sql = re.sub(r"\bREAL\b", "DOUBLE PRECISION", sql)
    sql = re.sub(r"\bINTEGER\b", "BIGINT", sql)
    return re.sub(r"\bTEXT\b", 'TEXT COLLATE "C"', sql)


class Table(NamedTuple):
    """A table as the schema declares it."""

    columns: list[str]  # in order, without any rowid
    key: list[str]  # its primary key
    rowid: bool  # whether SQLite keeps a rowid for it (all but WITHOUT ROWID tables)


def tables() -> dict[str, Table]:
    """Every table of the schema, in the order it is declared."""
    out: dict[str, Table] = {}
    for stmt in statements(DDL):
        m = _TABLE.match(stmt)
        if not m:
            continue
        cols: list[str] = []
        key: list[str] = []
        for part in re.split(r",(?![^()]*\))", m[2]):
            words = part.split()
            if words[0].upper() == "PRIMARY":
                key = [c.strip() for c in part[part.index("(") + 1 : part.rindex(")")].split(",")]
            else:
                cols.append(words[0])
                if "PRIMARY KEY" in part.upper():
                    key = [words[0]]
        out[m[1]] = Table(cols, key, m[3] is None)
    return out


def migrate(db: DB, dialect: Dialect = "sqlite") -> None:
    """Bring an older store up to this schema, inside the caller's (immediate) transaction. The version is
    read again here: another process may have migrated the file since it was first read. A PostgreSQL store
    is created at this greval's schema; the steps below version 4 exist only for SQLite files (schema 1-3
    predate PostgreSQL stores), and a later step is written once, in SQLite's types, through ``_script``."""
    version = stored_version(db)
    if version is None or version >= SCHEMA_VERSION:
        return
    if version < 2:
        _migrate_1_2(db)
    if version < 3:
        _script(db, _MIGRATE_2_3)
        # A judgement's own error (a failed call); one whose items failed has no error text and no kind.
        for table, where in (("verdicts", ""), ("judgements", " AND error IS NOT NULL")):
            rows = db.execute(f"SELECT rowid, error FROM {table} WHERE status='error'{where}").fetchall()
            db.executemany(
                f"UPDATE {table} SET error_kind=? WHERE rowid=?", [(error_kind(text).value, rid) for rid, text in rows]
            )
    if version < 4:
        _script(db, _MIGRATE_3_4, dialect)
    if version < 5:
        _migrate_4_5(db)
    if version < 6:
        _script(db, _MIGRATE_5_6, dialect)
        _migrate_5_6(db)
    if version < 7:
        _script(db, _MIGRATE_6_7, dialect)
        _migrate_6_7(db, dialect)
    if version < 8:
        _migrate_7_8(db, dialect)
    if version < 9:
        _create(db, dialect, LEDGER_TABLES)
    set_version(db)


def _create(db: DB, dialect: Dialect, names: Sequence[str]) -> None:
    """Create these tables (and their indexes) as the schema declares them, if they do not exist: a step that
    only adds tables applies in any order with another such step."""
    for stmt in statements(ddl(dialect)):
        if any(re.search(rf"(TABLE IF NOT EXISTS|\bON) {t}\b", stmt) for t in names):
            db.execute(stmt)


def _script(db: DB, script: str, dialect: Dialect = "sqlite") -> None:
    for stmt in statements(script):
        db.execute(column_types(stmt) if dialect == "postgresql" else stmt)


def _migrate_1_2(db: DB) -> None:
    _script(db, _MIGRATE_1_2)
    # Each schema-1 run's records (by content) become the snapshot of its dataset.
    members: dict[str, list[Record]] = {}
    for run_id, rid, rhash in db.execute(
        "SELECT rr.run_id, r.record_id, rr.record_hash FROM run_records rr JOIN records r USING (record_hash)"
    ):
        members.setdefault(run_id, []).append(Record(id=rid, hash=rhash, data={}))
    for run_id, recs in members.items():
        db.execute("UPDATE runs SET snapshot=? WHERE run_id=?", (put_snapshot(db, recs), run_id))
    db.execute("DROP TABLE run_records")
    for stmt in DDL.split(";"):
        if "human_labels" in stmt:
            db.execute(stmt)
    # Schema 1 did not record which Argilla dataset a label came from: a spec pushed to exactly one
    # dataset gets that name, else the default one (the spec's name); imports get "import".
    pushed: dict[str, set[str]] = {}
    if db.execute("SELECT 1 FROM sqlite_master WHERE name='annotation_pushes'").fetchone():
        for name, ds in db.execute("SELECT DISTINCT spec_name, dataset FROM annotation_pushes"):
            pushed.setdefault(name, set()).add(ds)
    rows = db.execute(
        "SELECT spec_name, record_id, record_hash, item_id, annotator, spec_hash, label, value, comment,"
        " status, source, answered_at, updated_at FROM human_labels_v1"
    ).fetchall()
    db.executemany(
        "INSERT OR IGNORE INTO human_labels (spec_name, dataset, record_id, record_hash, item_id, annotator,"
        " spec_hash, label, value, comment, status, source, answered_at, updated_at)"
        " VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
        [
            (
                r[0],
                (next(iter(pushed[r[0]])) if len(pushed.get(r[0], ())) == 1 else r[0])
                if r[10] == "argilla"
                else "import",
                *r[1:],
            )
            for r in rows
        ],
    )
    db.execute("DROP TABLE human_labels_v1")


def call_answers(calls: str | None) -> list[str]:
    """The model's answers a judgement's ``calls`` (JSON) hold, in call order (calls without one left out)."""
    try:
        logged = json.loads(calls or "[]")
    except ValueError:
        return []
    if not isinstance(logged, list):
        return []
    return [c["raw"] for c in logged if isinstance(c, dict) and isinstance(c.get("raw"), str) and c["raw"]]


def raw_in_calls(raw: str | None, calls: str | None) -> bool:
    """Whether a schema-4 ``raw`` column says nothing its ``calls`` do not: it joined the answers of the
    judgement's last write, which are the last of ``calls`` (a resumed many-judge appends its calls)."""
    if raw is None:
        return True
    answers = call_answers(calls)
    return any(RAW_SEPARATOR.join(answers[k:]) == raw for k in range(len(answers) + 1))


def _migrate_4_5(db: DB, chunk: int = 5000) -> None:
    """Schema 4 -> 5: empty each judgement's ``raw``, ``model`` and ``params`` where they repeat its calls'
    answers and its judge's row (where they do not, they are kept). A chunk of rows at a time, in key order
    (the primary key's index on both engines; PostgreSQL has none on its rowid)."""
    last: tuple[str, ...] = ("", "", "")
    while True:
        rows = db.execute(
            "SELECT g.spec_key, g.judge_key, g.record_hash, g.calls, g.raw, g.model, g.params, j.label, j.identity"
            " FROM judgements g LEFT JOIN judges j ON j.judge_key = g.judge_key"
            " WHERE (g.spec_key, g.judge_key, g.record_hash) > (?, ?, ?)"
            " ORDER BY g.spec_key, g.judge_key, g.record_hash LIMIT ?",
            (*last, chunk),
        ).fetchall()
        if not rows:
            return
        last = tuple(rows[-1][:3])
        db.executemany(
            "UPDATE judgements SET raw=?, model=?, params=? WHERE spec_key=? AND judge_key=? AND record_hash=?",
            [
                (
                    None if raw_in_calls(raw, calls) else raw,
                    None if model == label else model,
                    None if params == identity else params,
                    *key,
                )
                for *key, calls, raw, model, params, label, identity in rows
                if raw is not None or model is not None or params is not None
            ],
        )


def calls_cached(calls: str | None) -> int | None:
    """The cached prompt tokens a judgement's ``calls`` (JSON) logged, summed; None when a call does not say (it
    was logged before greval counted them: 0 would claim a cost it cannot know)."""
    try:
        logged = json.loads(calls or "[]")
    except ValueError:
        return None
    if not isinstance(logged, list) or not all(isinstance(c, dict) and "tokens_cached" in c for c in logged):
        return None
    return sum(int(c["tokens_cached"] or 0) for c in logged)


def _migrate_5_6(db: DB, chunk: int = 5000) -> None:
    """Schema 5 -> 6: each judgement's ``tokens_cached`` from its calls where every call logged it (else it stays
    NULL). A chunk of rows at a time, in key order, as :func:`_migrate_4_5`."""
    last: tuple[str, ...] = ("", "", "")
    while True:
        rows = db.execute(
            "SELECT spec_key, judge_key, record_hash, calls FROM judgements"
            " WHERE (spec_key, judge_key, record_hash) > (?, ?, ?)"
            " ORDER BY spec_key, judge_key, record_hash LIMIT ?",
            (*last, chunk),
        ).fetchall()
        if not rows:
            return
        last = tuple(rows[-1][:3])
        found = [(calls_cached(calls), *key) for *key, calls in rows]
        db.executemany(
            "UPDATE judgements SET tokens_cached=? WHERE spec_key=? AND judge_key=? AND record_hash=?",
            [f for f in found if f[0] is not None],
        )


#: How greval < 0.2 named the runs of ``greval align`` (their ``dataset``): candidates and the optimizer's questions.
_ALIGN_RUNS = ("align %",)
#: The specs align asks its optimizer's questions with (never a user's metric).
ALIGN_INTERNAL = "greval_align_%"


def _migrate_6_7(db: DB, dialect: Dialect) -> None:
    """Schema 6 -> 7: the runs ``greval align`` made become experiments, and so do the spec versions only they
    declared (align's own question specs always); each metric's production version is the version readers read
    until now: its latest declaration by any run that is not an experiment."""
    if dialect == "postgresql":  # SQLite made the new tables when it opened the file (the DDL runs on open)
        for stmt in statements(ddl(dialect)):
            if any(f"CREATE TABLE IF NOT EXISTS {t} " in stmt for t in ("promotions", "experiment_verdicts")):
                db.execute(stmt)
    db.execute(
        "UPDATE runs SET kind='experiment', purpose=CASE WHEN dataset LIKE 'align optimizer%' THEN 'align optimizer'"
        " ELSE 'align candidate' END WHERE dataset LIKE ?",
        _ALIGN_RUNS,
    )
    declared: dict[str, bool] = {}  # spec key -> declared (or judged) by a run that is not an experiment

    def saw(key: str, kind: str | None) -> None:
        declared[key] = declared.get(key, False) or kind != "experiment"

    for kind, summary in db.execute("SELECT kind, summary FROM runs").fetchall():
        try:
            metrics = json.loads(summary or "{}").get("metrics", [])
        except (ValueError, AttributeError):
            metrics = []
        for m in metrics if isinstance(metrics, list) else []:
            if isinstance(m, dict) and m.get("spec_key"):
                saw(str(m["spec_key"]), kind)
    # A run killed before its summary is known by the verdicts it wrote (one served verdict has no run).
    for key, kind in db.execute(
        "SELECT DISTINCT v.spec_key, r.kind FROM verdicts v LEFT JOIN runs r ON r.run_id = v.run_id"
    ).fetchall():
        saw(str(key), kind)
    db.executemany("UPDATE specs SET experiment=1 WHERE spec_key=?", [(k,) for k, ok in declared.items() if not ok])
    db.execute("UPDATE specs SET experiment=1 WHERE name LIKE ?", (ALIGN_INTERNAL,))
    rows = db.execute(
        "SELECT name, spec_key FROM specs WHERE experiment=0 ORDER BY name, created_at DESC, rowid DESC"
    ).fetchall()
    newest: dict[str, str] = {}
    judged: dict[str, str] = {}
    for name, key in rows:
        newest.setdefault(name, key)
        if declared.get(key):
            judged.setdefault(name, key)
    # the latest version a normal run judged; else the latest declared (none judged)
    latest = {name: judged.get(name, key) for name, key in newest.items()}
    now = time.time()
    db.executemany(
        "INSERT INTO promotions (name, spec_key, at, source, note, run_id) VALUES (?,?,?,?,?,NULL)",
        [(name, key, now, "migration", "the version greval read by default before") for name, key in latest.items()],
    )


#: The tables schema 8 added (greval watch's state): nothing older holds anything to carry over.
WATCH_TABLES = ("watches", "watch_cursors", "watch_strata", "watch_traces", "watch_items", "watch_windows")


def _migrate_7_8(db: DB, dialect: Dialect) -> None:
    """Schema 7 -> 8: ``greval watch``'s tables, empty (SQLite made them when it opened the file: its DDL runs on
    every open; PostgreSQL's are made here)."""
    if dialect != "postgresql":
        return
    for stmt in statements(ddl(dialect)):
        if any(f"EXISTS {t} " in stmt or f"ON {t}(" in stmt for t in WATCH_TABLES):
            db.execute(stmt)
