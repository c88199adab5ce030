"""Stage 3 — the store itself: its schema, migrations from older files, and the rule that it alone holds SQL.

tests/fixtures/store_v2.sqlite.gz is a store written by greval at schema 2 (scripts/make_store_fixture.py says
how): a finished run with stored errors and a partly judged record, an interrupted run, human labels, and the
figures that greval reported for it (store_v2.figures.json).
"""

from __future__ import annotations

import gzip
import json
import os
import re
import shlex
import sqlite3
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import resolve_specs
from greval.store.ledger import DecisionRow, LabelUse
from greval.store.results import MetricFigures, figures, item_rows
from greval.store.schema import SCHEMA_VERSION, WATCH_TABLES, error_kind
from greval.store.store import _HOST, Store, spec_keys
from greval.testing.openai_server import OpenAIServer
from greval.types import CallLog, ErrorKind, ItemVerdict, JudgeResult

FIXTURES = Path(__file__).parent / "fixtures"
FAST = RunOptions(concurrency=4, retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05))
# Every column a schema-2 verdict row had: none may change when the file is migrated.
V2_VERDICT_COLS = (
    "spec_key, judge_key, record_hash, item_id, spec_name, spec_hash, record_id, status, label, value, score,"
    " confidence, reason, error, samples, run_id, created_at, updated_at"
)
V2_RUN_COLS = (
    "run_id, started_at, finished_at, status, dataset, judge_key, specs, options, summary, snapshot, pid, host"
)


@pytest.fixture()
def old_store(tmp_path: Path) -> Path:
    """A copy of the schema-2 fixture (opening it migrates it in place)."""
    path = tmp_path / "old.sqlite"
    path.write_bytes(gzip.decompress((FIXTURES / "store_v2.sqlite.gz").read_bytes()))
    return path


#: What schema 9 added (the ledger of spent labels), undone to make a schema-8 store from a fresh one.
AS_SCHEMA_8 = ("DROP TABLE label_uses", "DROP TABLE decisions")
#: What schema 8 added (greval watch's tables), undone too to make a schema-7 store from a fresh one.
AS_SCHEMA_7 = (*AS_SCHEMA_8, *(f"DROP TABLE {table}" for table in WATCH_TABLES))
#: What schema 7 added (the loop's state), undone too to make a schema-6-or-older store from a fresh one.
AS_SCHEMA_6 = (
    *AS_SCHEMA_7,
    "ALTER TABLE runs DROP COLUMN kind",
    "ALTER TABLE runs DROP COLUMN purpose",
    "ALTER TABLE runs DROP COLUMN dataset_name",
    "ALTER TABLE specs DROP COLUMN experiment",
    "DROP TABLE promotions",
    "DROP TABLE experiment_verdicts",
)


def _rows(path: Path, sql: str) -> list[tuple[Any, ...]]:
    db = sqlite3.connect(path)
    try:
        return sorted(db.execute(sql).fetchall(), key=repr)
    finally:
        db.close()


def fixture_records() -> list[Record]:
    """The records scripts/make_store_fixture.py judged (r6 has no expected answer)."""
    lines = (FIXTURES / "store_v2.records.jsonl").read_text(encoding="utf-8").splitlines()
    return [Record.from_mapping(json.loads(line)) for line in lines if line.strip()]


def test_the_fixture_is_a_schema_2_store(old_store: Path) -> None:
    assert _rows(old_store, "SELECT value FROM meta WHERE key='schema_version'") == [("2",)]
    cols = [r[1] for r in sqlite3.connect(old_store).execute("PRAGMA table_info(verdicts)")]
    assert "error_kind" not in cols


def test_an_old_store_opens_keeps_every_verdict_and_reports_the_same_figures(old_store: Path) -> None:
    before = _rows(old_store, f"SELECT {V2_VERDICT_COLS} FROM verdicts")
    labels = _rows(old_store, "SELECT * FROM human_labels")
    runs = _rows(old_store, f"SELECT {V2_RUN_COLS} FROM runs")
    expected = json.loads((FIXTURES / "store_v2.figures.json").read_text())
    with Store(old_store) as st:
        assert _rows(old_store, "SELECT value FROM meta WHERE key='schema_version'") == [(str(SCHEMA_VERSION),)]
        assert len(item_rows(st)) == expected["rows"]
        assert [_as_recorded(f) for f in figures(st)] == expected["figures"]
        for run_id, figs in expected["runs"].items():
            assert [_as_recorded(f) for f in figures(st, run_id=run_id)] == figs
        # Since issue 16 a per-item metric's dataset score pools its items (micro, the default): chunk_evaluation's
        # share of Relevant chunks is now Σ Relevant / Σ chunks; the recorded mean of record scores is the macro.
        chunks = next(f for f in figures(st) if f.spec == "chunk_evaluation")
        old = next(f for f in expected["figures"] if f["spec"] == "chunk_evaluation")
        assert chunks.aggregate == "micro" and chunks.other_score == old["mean_score"]
        assert chunks.mean_score == chunks.distribution["Relevant"] / sum(chunks.distribution.values())
        assert chunks.units == sum(chunks.distribution.values())
        assert [r["status"] for r in st.runs()] == ["finished", "interrupted"]
    assert _rows(old_store, f"SELECT {V2_VERDICT_COLS} FROM verdicts") == before
    assert _rows(old_store, "SELECT * FROM human_labels") == labels
    assert _rows(old_store, f"SELECT {V2_RUN_COLS} FROM runs") == runs
    # Opening it again (now the current schema) changes nothing.
    with Store(old_store) as st:
        assert [_as_recorded(f) for f in figures(st)] == expected["figures"]


def _as_recorded(fig: MetricFigures) -> dict[str, Any]:
    """A figure as the schema-2 fixture recorded it: the fields it had, and the macro score of a per-item
    metric as its mean (the only definition then)."""
    data = fig.model_dump(mode="json")
    if fig.aggregate == "micro" and fig.other_score is not None:
        data["mean_score"] = fig.other_score
    new = ("aggregate", "units", "other_score", "units_missing", "units_none", "fact_counts", "record_rule")
    for name in (*new, "record_labels"):
        data.pop(name)
    return data


def test_an_old_store_s_errors_get_their_kind_from_their_text(old_store: Path) -> None:
    with Store(old_store):
        pass
    kinds = _rows(
        old_store, "SELECT spec_name, record_id, item_id, status, error_kind FROM verdicts WHERE status!='ok'"
    )
    assert kinds == sorted(
        [
            ("answer_alignment", "r3", "", "error", "context_length"),
            ("answer_alignment", "r5", "", "error", "truncated"),
            ("answer_alignment", "r6", "", "skipped", None),  # not applicable: no error, no kind
            ("chunk_evaluation", "r3", "c1", "error", "context_length"),
            ("chunk_evaluation", "r3", "c2", "error", "context_length"),
            ("chunk_evaluation", "r3", "c3", "error", "context_length"),
            ("chunk_evaluation", "r4", "c2", "error", "incomplete"),
            *(("triple_evaluation", f"r{i}", "", "skipped", None) for i in range(3)),
        ],
        key=repr,
    )
    assert _rows(old_store, "SELECT COUNT(*) FROM verdicts WHERE status='ok' AND error_kind IS NOT NULL") == [(0,)]
    # Judged before token log-probabilities were stored: every verdict has the column, empty.
    assert _rows(old_store, "SELECT COUNT(*), COUNT(token_confidence) FROM verdicts") == [(32, 0)]
    # These judgements failed item by item (the verdicts say why): no error of their own, so no kind.
    judgements = _rows(old_store, "SELECT error, error_kind FROM judgements WHERE status='error'")
    assert judgements == [(None, None)] * 4


def test_a_resumed_run_on_an_old_store_judges_only_what_is_missing(
    llm: OpenAIServer, old_store: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The interrupted run (answer_completeness on r0..r7, which reads chunk_evaluation and triple_evaluation)
    judged answer_completeness on r0 alone; chunk_evaluation has every record but r7; triple_evaluation skips
    every record (no triples). Stored errors are final: chunk_evaluation's on r3 and r4 are not asked again,
    and answer_completeness fails there without a call (what it depends on failed). The fixture's verdicts were
    given to prompt layout 1: resuming is what is tested, so the run keys its verdicts as layout 1 did (under
    the current layout everything is judged again: the next test)."""
    monkeypatch.setattr("greval.store.store.PROMPT_LAYOUT", 1)
    recs = fixture_records()
    assert {(r.id, r.hash) for r in recs} == set(_rows(old_store, "SELECT record_id, record_hash FROM record_ids"))
    before = _rows(old_store, f"SELECT {V2_VERDICT_COLS} FROM verdicts")
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(old_store) as st:
        summary = run(resolve_specs(["answer_completeness"]), recs, st, cfg, options=FAST)
        again = run(resolve_specs(["answer_completeness"]), recs, st, cfg, options=FAST)
    judged = {m.spec: (m.judged, m.reused) for m in summary.metrics}
    # triple_evaluation applies to no record (no triples): its 5 new outcomes are skips, not judgements made.
    assert judged == {"chunk_evaluation": (1, 7), "triple_evaluation": (0, 3), "answer_completeness": (7, 1)}
    assert llm.stats()["total"] == 6 == summary.calls  # r7's chunks; answer_completeness on r1, r2, r5, r6, r7
    assert again.calls == 0 and all(m.judged == 0 for m in again.metrics)
    assert set(before) <= set(_rows(old_store, f"SELECT {V2_VERDICT_COLS} FROM verdicts"))
    by_spec = {m.spec: m for m in summary.metrics}
    done = by_spec["answer_completeness"]
    assert (done.records, done.ok, done.failed) == (8, 6, 2)
    assert by_spec["chunk_evaluation"].errors == {"context_length": 3, "incomplete": 1}
    assert done.errors == {"dependency": 2}  # r3, r4: chunk_evaluation failed there, so nothing was asked
    assert by_spec["triple_evaluation"].skipped == 8


def test_a_new_prompt_layout_judges_again_and_the_old_verdicts_stay_readable(
    llm: OpenAIServer, old_store: Path
) -> None:
    """A new prompt layout is a new judgement (greval.types.PROMPT_LAYOUT folds into the key of every metric a
    model judges): the next run on a store of layout-1 verdicts asks the model again for every record, and the
    old verdicts stay in the store, readable with the figures they had."""
    recs = fixture_records()
    expected = json.loads((FIXTURES / "store_v2.figures.json").read_text())
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    specs = resolve_specs(["answer_completeness"])
    old_keys, new_keys = spec_keys(specs, layout=1), spec_keys(specs)
    assert all(old_keys[s.name] != new_keys[s.name] for s in specs)
    with Store(old_store) as st:
        summary = run(specs, recs, st, cfg, options=FAST)
        judged = {m.spec: m.reused for m in summary.metrics}
        assert judged == {"chunk_evaluation": 0, "triple_evaluation": 0, "answer_completeness": 0}
        assert summary.calls == llm.stats()["total"] > 0
        stored = {f["spec_key"] for f in expected["figures"]}
        assert {old_keys[s.name] for s in specs} <= stored  # the fixture's keys are layout 1's
        # The same specs under a new key: production follows them; the old verdicts are every version's.
        names = set(new_keys)
        assert {f.spec_key for f in figures(st) if f.spec in names} == set(new_keys.values())
        every = figures(st, all_versions=True)
        assert [_as_recorded(f) for f in every if f.spec_key in stored] == expected["figures"]
        assert {f.spec_key for f in every if f.spec_key not in stored} == set(new_keys.values())


def test_a_schema_1_store_is_migrated_without_losing_ids_runs_or_labels(llm: OpenAIServer, tmp_path: Path) -> None:
    """Stores written before record ids were kept apart (schema 1) open as today's schema with their ids, run
    links and human labels (which get the Argilla dataset they were pushed to). (Moved from test_run.py.)"""
    path = tmp_path / "old.sqlite"
    recs = fixture_records()[:3]
    with Store(path) as st:
        cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
        summary = run(resolve_specs(["answer_alignment"]), recs, st, cfg, options=FAST)
    db = sqlite3.connect(path)
    # Rewrite it as schema 1 had it: no record_ids, run_records by content, human labels without dataset.
    db.executescript(
        """
        CREATE TABLE run_records (run_id TEXT NOT NULL, record_hash TEXT NOT NULL, PRIMARY KEY (run_id, record_hash));
        INSERT INTO run_records SELECT r.run_id, m.record_hash FROM runs r JOIN snapshot_members m USING (snapshot);
        DROP TABLE snapshot_members; DROP TABLE snapshots; DROP TABLE claims; DROP TABLE record_ids;
        DROP TABLE human_labels; DROP TABLE annotation_pushes; DROP TABLE annotation_selection;
        ALTER TABLE verdicts DROP COLUMN error_kind; ALTER TABLE judgements DROP COLUMN error_kind;
        ALTER TABLE verdicts DROP COLUMN token_confidence; ALTER TABLE judgements DROP COLUMN tokens_cached;
        ALTER TABLE runs DROP COLUMN snapshot; ALTER TABLE runs DROP COLUMN pid; ALTER TABLE runs DROP COLUMN host;
        ALTER TABLE runs DROP COLUMN kind; ALTER TABLE runs DROP COLUMN purpose;
        ALTER TABLE runs DROP COLUMN dataset_name;
        ALTER TABLE specs DROP COLUMN experiment; DROP TABLE promotions; DROP TABLE experiment_verdicts;
        CREATE TABLE human_labels (
            spec_name TEXT NOT NULL, record_hash TEXT NOT NULL, item_id TEXT NOT NULL, annotator TEXT NOT NULL,
            record_id TEXT NOT NULL, spec_hash TEXT, label TEXT, value REAL, comment TEXT, status TEXT NOT NULL,
            source TEXT NOT NULL, answered_at REAL, updated_at REAL NOT NULL,
            PRIMARY KEY (spec_name, record_hash, item_id, annotator));
        CREATE TABLE annotation_pushes (push_id TEXT PRIMARY KEY, spec_name TEXT NOT NULL, dataset TEXT NOT NULL);
        INSERT INTO annotation_pushes VALUES ('p1', 'answer_alignment', 'my_review');
        UPDATE meta SET value='1' WHERE key='schema_version';
        """
    )
    db.executemany(
        "INSERT INTO human_labels VALUES (?,?,'','ann',?,NULL,'Correct',NULL,NULL,'submitted',?,NULL,0)",
        [
            ("answer_alignment", r.hash, r.id, src)
            for r, src in zip(recs, ["argilla", "argilla", "import"], strict=True)
        ],
    )
    db.commit()
    db.close()
    with Store(path) as st:
        version = st.db.execute("SELECT value FROM meta WHERE key='schema_version'").fetchone()[0]
        assert version == str(SCHEMA_VERSION)
        assert sorted(r.id for r in st.records()) == ["r0", "r1", "r2"]
        members = st.db.execute(
            "SELECT m.record_id FROM runs r JOIN snapshot_members m USING (snapshot) WHERE r.run_id=?",
            (summary.run_id,),
        ).fetchall()
        assert sorted(m[0] for m in members) == ["r0", "r1", "r2"]
        labels = st.query("SELECT record_id, dataset FROM human_labels ORDER BY record_id")
        assert [(r["record_id"], r["dataset"]) for r in labels] == [
            ("r0", "my_review"),
            ("r1", "my_review"),
            ("r2", "import"),
        ]


def test_error_kind_reads_the_kind_greval_writes_before_the_first_colon() -> None:
    assert error_kind("context_length: HTTP 400: maximum context length is 8192 tokens") == ErrorKind.CONTEXT_LENGTH
    assert error_kind("incomplete: no verdict after 3 call(s): the judge left it out") == ErrorKind.INCOMPLETE
    assert error_kind("no verdict after 3 call(s): boom") == ErrorKind.UNKNOWN
    assert error_kind("something else") == ErrorKind.UNKNOWN
    # A failed dependency: written with its kind since schema 3, recognised in older texts too.
    assert error_kind("dependency: depends on 'a', which failed for this record") == ErrorKind.DEPENDENCY
    assert error_kind("depends on 'a', which failed for this record") == ErrorKind.DEPENDENCY
    assert error_kind("needs the verdicts of 'a', which were not given") == ErrorKind.DEPENDENCY
    assert error_kind("") == error_kind(None) == ErrorKind.UNKNOWN


def test_a_written_error_keeps_the_judge_s_kind_or_gets_its_text_s(store_path: Path) -> None:
    rec = fixture_records()[0]
    cfg = JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")
    spec = resolve_specs(["chunk_evaluation"])[0]
    verdicts = [
        ItemVerdict(item_id="c1", status="ok", label="relevant"),
        ItemVerdict(item_id="c2", status="error", error="timeout: no answer", error_kind=ErrorKind.SERVER_ERROR),
        ItemVerdict(item_id="c3", status="error", error="unparsable: not JSON"),
    ]
    result = JudgeResult(spec=spec.name, spec_hash=spec.hash, verdicts=verdicts)
    with Store(store_path) as st:
        st.put_result(None, spec.hash, cfg, rec, result)
        stored = st.result(spec.hash, cfg.key, rec)
    assert stored is not None
    assert [(v.item_id, v.error_kind) for v in stored.verdicts] == [
        ("c1", None),
        ("c2", ErrorKind.SERVER_ERROR),  # the judge's kind is kept, whatever the text says
        ("c3", ErrorKind.UNPARSABLE),
    ]
    failed = JudgeResult(spec=spec.name, spec_hash=spec.hash, error="quota: out of credit")
    with Store(store_path) as st:
        st.put_result(None, spec.hash, cfg, rec, failed)
    assert _rows(store_path, "SELECT item_id, status, error_kind FROM verdicts") == [("", "error", "quota")]
    assert _rows(store_path, "SELECT status, error_kind FROM judgements") == [("error", "quota")]


def test_a_new_store_and_its_wal_and_shm_are_readable_by_their_owner_only(tmp_path: Path) -> None:
    """A store holds every record's text and verdict: created 0600 (its -wal / -shm alike) in directories greval
    makes 0700, whatever the umask lets through (before: 0644 files in 0755 directories). A store that exists
    keeps its mode: it is the user's file."""
    rec = fixture_records()[0]
    cfg = JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")
    spec = resolve_specs(["answer_alignment"])[0]
    result = JudgeResult(spec=spec.name, spec_hash=spec.hash, verdicts=[ItemVerdict(status="ok", label="Correct")])
    path = tmp_path / "new" / "dir" / "s.sqlite"
    mask = os.umask(0o022)
    try:
        with Store(path) as st:
            st.put_result(None, spec.hash, cfg, rec, result)
            files = {p.name: oct(p.stat().st_mode & 0o777) for p in path.parent.iterdir()}
        dirs = [oct(d.stat().st_mode & 0o777) for d in (path.parent, path.parent.parent)]
        mine = tmp_path / "mine.sqlite"
        mine.touch(mode=0o644)
        with Store(mine):
            pass
    finally:
        os.umask(mask)
    assert files == {"s.sqlite": "0o600", "s.sqlite-wal": "0o600", "s.sqlite-shm": "0o600"}
    assert dirs == ["0o700", "0o700"]
    assert oct(mine.stat().st_mode & 0o777) == "0o644"


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_an_export_is_the_owner_s_alone_and_a_failed_one_leaves_the_file_it_would_replace(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fmt: str
) -> None:
    """An export holds the store's records and verdicts: 0600 in folders greval makes 0700, even under umask 0
    (before: 0644 / 0755, 0666 under umask 0). An export greval replaces is written beside it and renamed: the
    new file is 0600 whatever the old one was, and an export that fails midway (here the store's rows end in
    an error after the first) leaves the old file as it was, with nothing beside it."""
    import greval.store.export as export

    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    store = tmp_path / "s.sqlite"
    with Store(store) as st:
        run(resolve_specs(["answer_alignment"]), fixture_records()[:3], st, cfg)
    out = tmp_path / "new" / "dir" / f"v.{fmt}"
    mask = os.umask(0)
    try:
        assert export.export_results(store, out) == 3
        first = (
            oct(out.stat().st_mode & 0o777),
            [oct(d.stat().st_mode & 0o777) for d in (out.parent, out.parent.parent)],
        )
        out.chmod(0o644)
        before = out.read_bytes()
        real = export.result_rows

        def failing(*args: Any, **kwargs: Any) -> Any:
            rows = real(*args, **kwargs)
            yield next(iter(rows))
            raise OSError("no space left on device")

        monkeypatch.setattr(export, "result_rows", failing)
        with pytest.raises(OSError, match="no space"):
            export.export_results(store, out)
        failed = (
            out.read_bytes() == before,
            oct(out.stat().st_mode & 0o777),
            sorted(p.name for p in out.parent.iterdir()),
        )
        monkeypatch.setattr(export, "result_rows", real)
        assert export.export_results(store, out) == 3
    finally:
        os.umask(mask)
    assert first == ("0o600", ["0o700", "0o700"])
    assert failed == (True, "0o644", [out.name])
    assert oct(out.stat().st_mode & 0o777) == "0o600" and sorted(p.name for p in out.parent.iterdir()) == [out.name]


_SQL = re.compile(
    r"\b(SELECT\s+[\w*(]|INSERT\s+(OR\s+\w+\s+)?INTO|UPDATE\s+\w+\s+SET|DELETE\s+FROM|CREATE\s+(TABLE|INDEX)"
    r"|ALTER\s+TABLE|DROP\s+TABLE)"
)


def test_only_the_store_holds_sql() -> None:
    """Every statement lives in greval/store/ (it found the 25 lines of SQL the other stages used to hold)."""
    root = Path(__file__).resolve().parents[1] / "greval"
    found = [
        f"{path.relative_to(root)}:{n}"
        for path in sorted(root.rglob("*.py"))
        if path.parent.name != "store"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if _SQL.search(line)
    ]
    assert found == []


def test_a_schema_3_store_gets_the_token_confidence_column(llm: OpenAIServer, tmp_path: Path) -> None:
    """Schema 3 -> 4 adds ``verdicts.token_confidence`` (NULL: judged without log-probabilities) and keeps every
    verdict; a verdict written afterwards stores its token confidence there and reads it back."""
    path = tmp_path / "v3.sqlite"
    recs = fixture_records()[:2]
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(path) as st:
        run(resolve_specs(["answer_alignment"]), recs, st, cfg, options=FAST)
    db = sqlite3.connect(path)
    db.executescript(
        "ALTER TABLE verdicts DROP COLUMN token_confidence; ALTER TABLE judgements DROP COLUMN tokens_cached;"
        " UPDATE meta SET value='3' WHERE key='schema_version';" + ";".join(AS_SCHEMA_6)
    )
    db.commit()
    db.close()
    before = _rows(path, f"SELECT {V2_VERDICT_COLS}, error_kind FROM verdicts")
    with Store(path) as st:
        assert _rows(path, "SELECT value FROM meta WHERE key='schema_version'") == [(str(SCHEMA_VERSION),)]
        assert SCHEMA_VERSION >= 4  # and any later step keeps the column
        assert _rows(path, "SELECT COUNT(*), COUNT(token_confidence) FROM verdicts") == [(2, 0)]
        assert _rows(path, f"SELECT {V2_VERDICT_COLS}, error_kind FROM verdicts") == before
        rec = Record.from_mapping({"id": "t1", "question": "q", "answer": "a"})
        res = JudgeResult(
            spec="answer_alignment",
            spec_hash="h",
            verdicts=[ItemVerdict(label="Correct", score=1.0, confidence=None, token_confidence=0.625)],
        )
        key = spec_keys(resolve_specs(["answer_alignment"]))["answer_alignment"]
        st.put_result("run-x", key, cfg, rec, res)
        got = st.result(key, cfg.key, rec)
        assert got is not None and got.verdicts[0].token_confidence == 0.625
        frame = item_rows(st, "answer_alignment")
        assert sorted(r["token_confidence"] for r in frame if r["record_id"] == "t1") == [0.625]


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_schema_5_store_gets_the_cached_tokens_column(
    backend: str, llm: OpenAIServer, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Schema 5 -> 6 adds ``judgements.tokens_cached``, filled from each older judgement's calls where they logged
    it and None where they did not (not recorded: its cost is an upper bound); one written afterwards stores the
    cached tokens its calls reported — the run summary's count — on SQLite and on PostgreSQL (``greval store
    migrate``)."""
    ref = str(tmp_path / "v5.sqlite") if backend == "sqlite" else request.getfixturevalue("pg_url")
    llm.configure(prefix_cache=True)
    recs = fixture_records()[:3]
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(ref) as st:
        run(resolve_specs(["answer_alignment"]), recs[:2], st, cfg, options=FAST)
        written = {r["record_hash"]: r["tokens_cached"] for r in st.query("SELECT * FROM judgements")}
        # the tables as schema 5 wrote them (the new column is the last of its table); the first record's calls as
        # a greval before the run summaries' cached tokens logged them (without their count)
        st.db.execute("ALTER TABLE judgements DROP COLUMN tokens_cached")
        st.db.execute("UPDATE meta SET value='5' WHERE key='schema_version'")
        for stmt in AS_SCHEMA_6:
            st.db.execute(stmt)
        [calls] = st.query("SELECT calls FROM judgements WHERE record_hash=?", (recs[0].hash,))
        older = [{k: v for k, v in c.items() if k != "tokens_cached"} for c in json.loads(calls["calls"])]
        st.db.execute("UPDATE judgements SET calls=? WHERE record_hash=?", (json.dumps(older), recs[0].hash))
        before = st.query("SELECT record_hash, tokens_in, tokens_out, calls FROM judgements ORDER BY record_hash")
    with Store(ref, migrate=True) as st:
        assert st.version == SCHEMA_VERSION >= 6
        old = st.query("SELECT record_hash, tokens_in, tokens_out, calls, tokens_cached FROM judgements")
        assert sorted(({k: r[k] for k in before[0]} for r in old), key=lambda r: r["record_hash"]) == before
        # filled from the calls that logged it (what the column held before it was dropped), else not recorded
        assert {r["record_hash"]: r["tokens_cached"] for r in old} == {
            recs[0].hash: None,
            recs[1].hash: written[recs[1].hash],
        }
        summary = run(resolve_specs(["answer_alignment"]), recs, st, cfg, options=FAST)
        [new] = st.query("SELECT tokens_cached FROM judgements WHERE record_hash=?", (recs[2].hash,))
        assert new["tokens_cached"] == summary.metrics[0].tokens_cached > 0
        rows = item_rows(st, "answer_alignment")
        assert sorted(r["tokens_cached"] is None for r in rows) == [False, False, True]


# --------------------------------------------------------------------------- the dataset score (issue 16)
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_schema_7_store_gets_the_watch_tables_and_keeps_what_it_held(
    llm: OpenAIServer, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    """Schema 8 added greval watch's tables: a schema-7 store (SQLite when opened, PostgreSQL by ``greval store
    migrate``) gets them, empty, keeps every verdict and production version, and a watch then records in it."""
    from greval.errors import UserError

    ref = str(tmp_path / "v7.sqlite") if backend == "sqlite" else request.getfixturevalue("pg_url")
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(ref) as st:
        run(resolve_specs(["answer_alignment"]), fixture_records()[:3], st, cfg, options=FAST)
        before = st.query("SELECT record_hash, status, label FROM verdicts ORDER BY record_hash")
        production = st.promotions("answer_alignment")
        for stmt in AS_SCHEMA_7:
            st.db.execute(stmt)
        st.db.execute("UPDATE meta SET value='7' WHERE key='schema_version'")
    if backend == "postgresql":
        with pytest.raises(UserError, match=rf"schema 7, this greval needs {SCHEMA_VERSION}$"):
            Store(ref)
        res = _cli("store", "migrate", "--store", ref)
        assert res.exit_code == 0 and f"schema 7 → {SCHEMA_VERSION}" in res.output, res.output
    with Store(ref) as st:
        assert st.version == SCHEMA_VERSION
        assert st.query("SELECT record_hash, status, label FROM verdicts ORDER BY record_hash") == before
        assert st.promotions("answer_alignment") == production
        assert [st.query(f"SELECT COUNT(*) AS n FROM {table}") for table in WATCH_TABLES] == [[{"n": 0}]] * 6
        st.register_watch("w1", "folder /land", {"rate": 0.5})
        assert [(w["watch_id"], w["config"]) for w in st.watches()] == [("w1", {"rate": 0.5})]


def _factscore_rows(n_triples: Sequence[int]) -> list[dict[str, Any]]:
    """Records with different numbers of triples, so that pooling the triples (micro) and averaging the
    records' shares (macro) give different dataset scores."""
    return [
        {
            "id": f"f{i}",
            "source": f"Source text number {i}: drug {i} treats disease {i}.",
            "triples": [[f"drug {i}", "treats", f"disease {i}.{k}"] for k in range(k_n)],
        }
        for i, k_n in enumerate(n_triples)
    ]


def _labels_by_record(path: Path, spec: str) -> dict[str, list[str]]:
    """The raw item labels per record, read with plain SQL (independent of greval's readers)."""
    by: dict[str, list[str]] = {}
    for record_id, label in _rows(
        path,
        f"SELECT i.record_id, v.label FROM verdicts v JOIN record_ids i ON i.record_hash = v.record_hash "
        f"WHERE v.spec_name = '{spec}' AND v.item_id != '' AND v.status = 'ok'",
    ):
        by.setdefault(record_id, []).append(label)
    return by


def test_the_dataset_score_pools_items_by_default_and_factscore_counts_are_reported(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """FActScore* as GraphMERT defines it, recomputed from the raw labels: per record precision = supported /
    all, recall = supported / (supported + not supported), F1; the dataset score pools every triple (micro);
    declaring dataset_aggregate: macro re-judges nothing and switches the dataset score to the record mean."""
    path = tmp_path / "s.sqlite"
    recs = [Record.from_mapping(r) for r in _factscore_rows([1, 2, 3, 5, 7, 4])]
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    [spec] = resolve_specs(["triple_factscore"])
    with Store(path) as st:
        summary = run([spec], recs, st, cfg, options=FAST)
    labels = _labels_by_record(path, "triple_factscore")
    assert sorted(len(v) for v in labels.values()) == [1, 2, 3, 4, 5, 7]
    sup = {r: v.count("supported") for r, v in labels.items()}
    uns = {r: v.count("not_supported") for r, v in labels.items()}
    micro = sum(sup.values()) / sum(len(v) for v in labels.values())
    macro = sum(sup[r] / len(v) for r, v in labels.items()) / len(labels)
    assert round(micro, 6) != round(macro, 6)  # the data tells the two apart
    [m] = summary.metrics
    assert m.aggregate == "micro" and m.mean_score == pytest.approx(micro) and m.other_score == pytest.approx(macro)
    assert m.units == sum(len(v) for v in labels.values())
    # FActScore* counts, pooled and per record.
    assert m.fact_counts is not None
    pooled = m.fact_counts.pooled
    assert pooled.positive == sum(sup.values()) and pooled.unsupported == sum(uns.values())
    assert pooled.labels["contradicted"] == sum(v.count("contradicted") for v in labels.values())
    assert pooled.precision == pytest.approx(micro)
    rec_p = {r: sup[r] / len(v) for r, v in labels.items()}
    rec_r = {r: sup[r] / (sup[r] + uns[r]) if sup[r] + uns[r] else None for r in labels}
    all_sup, all_uns = sum(sup.values()), sum(uns.values())
    assert pooled.recall == pytest.approx(all_sup / (all_sup + all_uns))
    p, r = pooled.precision, pooled.recall
    assert pooled.f1 == pytest.approx(2 * p * r / (p + r) if p + r else 0.0)
    defined = [x for x in rec_r.values() if x is not None]
    assert m.fact_counts.macro_recall == pytest.approx(sum(defined) / len(defined))
    assert m.fact_counts.macro_precision == pytest.approx(sum(rec_p.values()) / len(rec_p))
    from greval.store.results import load_results

    frame = load_results(path, level="record").set_index("record_id")
    for rid, counts in frame["counts"].items():
        assert counts["labels"]["supported"] == sup[rid] and counts["total"] == len(labels[rid])
        assert counts["precision"] == pytest.approx(rec_p[rid])
        assert counts.get("recall") == (pytest.approx(rec_r[rid]) if rec_r[rid] is not None else None)
        assert frame.loc[rid, "units"] == len(labels[rid])
    # macro, declared: the same verdicts (no call), the other figure.
    calls = llm.stats()["total"]
    macro_spec = spec.model_copy(update={"dataset_aggregate": "macro"})
    assert macro_spec.hash == spec.hash
    with Store(path) as st:
        again = run([macro_spec], recs, st, cfg, options=FAST)
        [stored] = figures(st)
    assert llm.stats()["total"] == calls and again.calls == 0
    assert again.metrics[0].mean_score == pytest.approx(macro) and stored.aggregate == "macro"
    assert stored.mean_score == pytest.approx(macro) and stored.other_score == pytest.approx(micro)


def test_run_summary_report_load_results_and_export_show_the_same_pooled_score(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """The four-way consistency of issue 16: `greval run`'s summary, `greval report`, load_results and a
    `greval results export` give one dataset score for a per-item metric, equal to Σ supported / Σ triples
    computed here from the raw verdicts."""
    import pandas as pd
    from click.testing import CliRunner

    from greval.cli import main
    from greval.store.results import load_results

    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in _factscore_rows([3, 1, 6, 2, 4])))
    path = tmp_path / "s.sqlite"
    env = {"COLUMNS": "250"}
    args = ["run", str(data), "-s", "triple_factscore", "--store", str(path), "--judge", "openai:judge-test"]
    res = CliRunner().invoke(main, [*args, "--base-url", llm.base_url], env=env)
    assert res.exit_code == 0, res.output
    labels = _labels_by_record(path, "triple_factscore")
    micro = sum(v.count("supported") for v in labels.values()) / sum(len(v) for v in labels.values())
    macro = sum(v.count("supported") / len(v) for v in labels.values()) / len(labels)
    assert round(micro, 3) != round(macro, 3)
    [row] = [line for line in res.output.splitlines() if "triple_factscore" in line and "│" in line]
    assert f"{micro:.3f}" in row and f"{macro:.3f}" not in row
    assert f"dataset score {micro:.3f} is pooled over 16 item(s) of 5 record(s) (micro)" in " ".join(res.output.split())
    rep = CliRunner().invoke(main, ["report", "--store", str(path), "-o", str(tmp_path / "rep")], env=env)
    assert rep.exit_code == 0, rep.output
    [m] = json.loads((tmp_path / "rep" / "report.json").read_text())["metrics"]
    assert m["figures"]["mean_score"] == pytest.approx(micro) and m["score"]["mean"] == pytest.approx(micro)
    assert m["score"]["ci_low"] <= micro <= m["score"]["ci_high"]
    assert f"{micro:.3f}" in rep.output
    flat = " ".join(rep.output.split())
    assert (
        "micro: 16 items pooled" in flat and "micro: 16 items pooled" in (tmp_path / "rep" / "index.html").read_text()
    )
    supported = sum(v.count("supported") for v in labels.values())
    unsupported = sum(v.count("not_supported") for v in labels.values())
    recall = supported / (supported + unsupported)
    md = (tmp_path / "rep" / "report.md").read_text()
    [fact] = [line for line in md.splitlines() if line.startswith("| triple_factscore | 5 | supported:")]
    assert f"| {micro:.3f} | {recall:.3f} | {2 * micro * recall / (micro + recall):.3f} |" in fact
    frame = load_results(path, level="record")
    from_frame = (frame["score"] * frame["units"]).sum() / frame["units"].sum()
    assert from_frame == pytest.approx(micro)
    out = tmp_path / "r.csv"
    exp = CliRunner().invoke(main, ["results", "export", "--store", str(path), "-o", str(out), "--level", "record"])
    assert exp.exit_code == 0, exp.output
    csv = pd.read_csv(out)
    assert (csv["score"] * csv["units"]).sum() / csv["units"].sum() == pytest.approx(micro)


def test_a_pipeline_ratio_pools_its_items_and_ranked_precision_cannot(llm: OpenAIServer, tmp_path: Path) -> None:
    """A pipeline's record verdict stores the units its score is over (outputs.units); the dataset score pools
    them. Rank-weighted precision is no share of items: micro is refused, and its default is macro."""
    from greval.errors import UserError
    from greval.spec import parse_spec

    body = {
        "kind": "pipeline",
        "name": "chunk_use",
        "description": "Share of useful chunks.",
        "inputs": {"question": {"required": True}, "chunks": {"required": True}},
        "steps": [{"verify": {"each": "chunks", "against": ["question"], "labels": {"yes": "useful", "no": "not"}}}],
        "aggregate": {"kind": "ratio", "step": "chunks", "positive": ["yes"]},
    }
    spec = parse_spec(body, "chunk_use.yaml")
    recs = [
        Record.from_mapping({"id": f"p{i}", "question": f"Q{i}?", "chunks": [f"c{i}.{k}" for k in range(n)]})
        for i, n in enumerate([1, 4, 2, 6])
    ]
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    path = tmp_path / "s.sqlite"
    with Store(path) as st:
        summary = run([spec], recs, st, cfg, options=FAST)
    labels = _labels_by_record(path, "chunk_use")
    assert sorted(len(v) for v in labels.values()) == [1, 2, 4, 6]
    micro = sum(v.count("yes") for v in labels.values()) / 13
    [m] = summary.metrics
    assert m.units == 13 and m.mean_score == pytest.approx(micro)
    units = _rows(path, "SELECT json_extract(outputs, '$.units') FROM judgements")
    assert sorted(u for (u,) in units) == [1, 2, 4, 6]

    ranked = {**body, "aggregate": {"kind": "ranked_precision", "step": "chunks", "positive": ["yes"]}}
    assert parse_spec(ranked, "r.yaml").pooling == "macro"
    with pytest.raises(UserError, match=r"r\.yaml: .*dataset_aggregate.*ranked_precision cannot be pooled"):
        parse_spec({**ranked, "dataset_aggregate": "micro"}, "r.yaml")


def test_records_scored_by_the_empty_rule_add_nothing_to_the_pooled_score_and_are_said() -> None:
    from greval.store.results import aggregate_notes, dataset_score

    rows = [
        {"status": "ok", "score": 0.0, "units": 0},  # `empty: 0`: nothing to count
        {"status": "ok", "score": 0.5, "units": 2},
        {"status": "partial", "score": 1.0, "units": 6},
        {"status": "error", "score": None, "units": 1},
        {"status": "ok", "score": None, "units": 0},  # no score at all: in neither
    ]
    micro, macro, n, units = dataset_score(rows, "micro")
    assert (micro, macro, n, units) == ((0.5 * 2 + 1.0 * 6) / 8, (0.0 + 0.5 + 1.0) / 3, 3, 8)
    assert dataset_score(rows, "macro")[:2] == (macro, micro)
    fig = MetricFigures(
        spec="bias", spec_hash="h", spec_key="h", kind="pipeline", judge="j", judge_key="k", scored=3, units=8,
        mean_score=micro, other_score=macro, units_none=1,
    )  # fmt: skip
    notes = aggregate_notes(fig)
    assert notes[0].startswith("bias: 1 record(s) had nothing to count and were scored by the spec's `empty` rule")
    assert notes[1] == (
        "bias: dataset score 0.875 is pooled over 8 item(s) of 3 record(s) (micro), as the spec's dataset_aggregate "
        "says; the mean of 3 record scores (macro) is 0.500"
    )


def test_the_factscore_worked_example_of_docs_computed_md() -> None:
    """docs/computed.md's two records: A 3 supported / 1 contradicted, B 1 / 1 / 4 not supported."""
    from greval.store.results import dataset_score, fact_counts, label_counts

    [spec] = resolve_specs(["triple_factscore"])
    a = label_counts(spec, {"supported": 3, "contradicted": 1})
    b = label_counts(spec, {"supported": 1, "contradicted": 1, "not_supported": 4})
    assert (a.precision, a.recall, round(a.f1 or 0, 3)) == (0.75, 1.0, 0.857)
    assert (round(b.precision or 0, 3), b.recall, round(b.f1 or 0, 3)) == (0.167, 0.2, 0.182)
    fc = fact_counts(spec, [a, b])
    p = fc.pooled
    assert (p.positive, p.total, p.unsupported, p.precision, p.recall) == (4, 10, 4, 0.4, 0.5)
    assert round(p.f1 or 0, 3) == 0.444
    assert [round(x or 0, 3) for x in (fc.macro_precision, fc.macro_recall, fc.macro_f1)] == [0.458, 0.6, 0.519]
    rows = [{"status": "ok", "score": c.precision, "units": c.total} for c in (a, b)]
    micro, macro, _, _ = dataset_score(rows, "micro")
    assert (micro, round(macro or 0, 3)) == (0.4, 0.458)


# ------------------------------------------------------------------------ PostgreSQL (issue 19)
# A real server (tests/conftest.py `postgres`: Debian's postgresql, initdb + pg_ctl in a temp dir), never a mock.
_VOLATILE = {"created_at", "updated_at", "run_id", "latency_ms"}


def _cli(*args: str) -> Any:
    from click.testing import CliRunner

    from greval.cli import main

    return CliRunner().invoke(main, list(args), env={"COLUMNS": "200"})


def _loop(store: str, llm: OpenAIServer, out: Path) -> dict[str, Any]:
    """The quick start's loop on the bundled example, into ``store``: run three metrics, import the people's
    labels, export, agreement and report. What each command wrote."""
    begin = Path(__file__).resolve().parents[1] / "examples" / "begin"
    out.mkdir()
    specs = ["-s", str(begin / "attribution.yaml"), "-s", "chunk_evaluation", "-s", "citation_density"]
    judge = ["--judge", "openai:judge-test", "--base-url", llm.base_url]
    res = _cli("run", str(begin / "records.jsonl"), *specs, "--store", store, *judge)
    assert res.exit_code == 0, res.output
    res = _cli(
        "annotate", "import-labels", str(begin / "human_labels.csv"), "--store", store, "--spec", "attribution",
        "--record-id", "record_id", "--label", "label", "--annotator", "annotator",
    )  # fmt: skip
    assert res.exit_code == 0, res.output
    assert _cli("results", "export", "--store", store, "-o", str(out / "items.jsonl")).exit_code == 0
    res = _cli("agreement", "--store", store, "--spec", "attribution", "--json", str(out / "agreement.json"))
    assert res.exit_code == 0, res.output
    res = _cli("report", "--store", store, "-o", str(out / "report"))
    assert res.exit_code == 0, res.output
    items = [json.loads(line) for line in (out / "items.jsonl").read_text().splitlines()]
    report = json.loads((out / "report" / "report.json").read_text())
    report.pop("store")
    return {
        "items": sorted(
            ({k: v for k, v in r.items() if k not in _VOLATILE} for r in items),
            key=lambda r: (r["spec"], r["record_id"], r["item_id"]),
        ),
        "agreement": json.loads((out / "agreement.json").read_text()),
        "report": report,
    }


@pytest.mark.slow
def test_the_loop_on_postgresql_gives_what_it_gives_on_sqlite(llm: OpenAIServer, pg_url: str, tmp_path: Path) -> None:
    """Run (judge, many and computed metrics), label import, export, agreement and report on a PostgreSQL
    store: every verdict and every figure equals the SQLite store's; a re-run on it makes no call."""
    on_sqlite = _loop(str(tmp_path / "s.sqlite"), llm, tmp_path / "sqlite")
    calls = llm.stats()["total"]
    on_pg = _loop(pg_url, llm, tmp_path / "pg")
    assert llm.stats()["total"] == 2 * calls > 0
    assert len(on_pg["items"]) == len(on_sqlite["items"]) == 90  # 30 records x 3 metrics (one chunk each)
    assert on_pg["items"] == on_sqlite["items"]
    assert on_pg["agreement"] == on_sqlite["agreement"]
    assert on_pg["report"] == on_sqlite["report"]
    begin = Path(__file__).resolve().parents[1] / "examples" / "begin"
    again = _cli("run", str(begin / "records.jsonl"), "-s", "chunk_evaluation", "--store", pg_url,
                 "--judge", "openai:judge-test", "--base-url", llm.base_url)  # fmt: skip
    assert again.exit_code == 0 and llm.stats()["total"] == 2 * calls


def _dump(ref: str | Path) -> dict[str, list[tuple[Any, ...]]]:
    """Every data table's rows in storage order (what `greval store copy` must carry over unchanged)."""
    from greval.store.schema import tables

    with Store(ref) as st:
        out = {}
        for name, t in tables().items():
            if name in ("meta", "claims"):
                continue
            order = "rowid" if t.rowid or st.dialect == "postgresql" else ", ".join(t.key)
            out[name] = [
                tuple(r.values()) for r in st.query(f"SELECT {', '.join(t.columns)} FROM {name} ORDER BY {order}")
            ]
        return out


@pytest.mark.slow
def test_store_copy_sqlite_to_postgresql_and_back_is_lossless(old_store: Path, pg_url: str, tmp_path: Path) -> None:
    """The schema-2 fixture (runs, errors, a partly judged record, human labels), migrated, then copied to
    PostgreSQL and back: every row of every table, in storage order, with every float and NULL as it was;
    copying again adds nothing and says so; the figures read from each store are the same."""
    source = _dump(old_store)
    assert sum(map(len, source.values())) > 50 and source["human_labels"] and source["runs"]
    res = _cli("store", "copy", str(old_store), pg_url)
    assert res.exit_code == 0, res.output
    assert _dump(pg_url) == source
    back = tmp_path / "back.sqlite"
    assert _cli("store", "copy", pg_url, str(back)).exit_code == 0
    assert _dump(back) == source
    again = _cli("store", "copy", str(old_store), pg_url)
    assert again.exit_code == 0
    [verdicts] = [line for line in again.output.splitlines() if "│ verdicts" in line]
    n = len(source["verdicts"])
    assert verdicts.split("│")[2:5] == [f" {n:>14} ", f" {0:>6} ", f" {n:>13} "]
    assert _dump(pg_url) == source
    with Store(old_store) as a, Store(pg_url) as b, Store(back) as c:
        assert figures(a) == figures(b) == figures(c)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_a_live_claim_holds_and_an_expired_or_orphaned_one_is_taken_over(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """The lease of a pending judgement: another live holder keeps it until it expires (a crashed worker on
    another machine frees it after the lease); a holder on this host whose process is gone frees it at once."""
    ref = str(tmp_path / "s.sqlite") if backend == "sqlite" else request.getfixturevalue("pg_url")
    key = ("spec", "judge", "hash")
    with Store(ref) as a, Store(ref) as b:
        assert a.claim(*key) is True
        assert b.claim(*key) is False  # held by a live process of this host
        assert a.claim(*key) is True  # its own claim, renewed
        b.db.execute("UPDATE claims SET host='elsewhere', expires_at=?", (time.time() + 60,))
        assert b.claim(*key) is False  # another machine's, not expired
        b.db.execute("UPDATE claims SET expires_at=?", (time.time() - 1,))
        assert b.claim(*key) is True  # expired: taken over
        assert a.claim_many([key, ("spec", "judge", "other")]) == [False, True]
        dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
        a.db.execute(
            "UPDATE claims SET owner='gone', pid=?, host=?, expires_at=? WHERE record_hash='hash'",
            (int(dead.stdout), _HOST, time.time() + 60),
        )
        assert a.claim(*key) is True and b.claim(*key) is False  # the dead holder's claim went to a; now a's
        b.release_claims()
        a.release_claims()
        assert a.query("SELECT COUNT(*) AS n FROM claims") == [{"n": 0}]


@pytest.mark.slow
def test_two_processes_on_overlapping_data_pay_once_on_postgresql(
    llm: OpenAIServer, pg_url: str, tmp_path: Path
) -> None:
    """Two `greval run` processes on overlapping records against one PostgreSQL store: one call per judgement
    (claims are row locks there, not SQLite's one writer), every verdict stored once, no claim left behind."""
    from greval.dataset.records import Record as R

    rows = [{"id": f"q{i}", "question": f"Question {i}?", "answer": f"Answer {i}.", "expected_answer": f"Gold {i}."}
            for i in range(40)]  # fmt: skip
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps(r) + "\n" for r in rows[:30]))
    second.write_text("".join(json.dumps(r) + "\n" for r in rows[10:]))
    llm.configure(latency=0.1)
    cmd = [sys.executable, "-m", "greval", "run", "-s", "answer_alignment", "--store", pg_url, "--judge"]
    cmd += ["openai:judge-test", "--base-url", llm.base_url, "-c", "4", "--quiet"]
    env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
    procs = [
        subprocess.Popen([*cmd, str(data)], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for data in (first, second)
    ]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert llm.stats()["total"] == 40  # one call per judgement: none paid twice
    with Store(pg_url) as st:
        assert st.query("SELECT COUNT(*) AS n FROM verdicts WHERE status='ok'") == [{"n": 40}]
        assert st.query("SELECT COUNT(*) AS n FROM claims") == [{"n": 0}]
        assert len(st.records()) == 40 and all(isinstance(r, R) for r in st.records())


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
@pytest.mark.parametrize("before", [7, 8])
def test_a_schema_7_or_8_store_gets_the_ledger_and_keeps_every_verdict_and_label(
    backend: str, before: int, llm: OpenAIServer, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Schema 9's step only adds the ledger's tables: from 7, or after schema 8's step (another step that only
    adds tables), every verdict, judgement and human label stays as it was, and the ledger is there and empty."""
    ref = str(tmp_path / "v7.sqlite") if backend == "sqlite" else request.getfixturevalue("pg_url")
    recs = fixture_records()[:3]
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, timeout=10)
    with Store(ref) as st:
        run(resolve_specs(["answer_alignment"]), recs, st, cfg, options=FAST)
        st.put_human_labels(
            [
                {"spec_name": "answer_alignment", "record_id": r.id, "record_hash": r.hash, "annotator": "a",
                 "label": "x", "status": "submitted"}
                for r in recs
            ]
        )  # fmt: skip
        for stmt in AS_SCHEMA_8 if before == 8 else AS_SCHEMA_7:
            st.db.execute(stmt)
        st.db.execute("UPDATE meta SET value=? WHERE key='schema_version'", (str(before),))
        tables = ("verdicts", "judgements", "human_labels", "runs", "promotions")
        held = {t: sorted(map(repr, st.query(f"SELECT * FROM {t}"))) for t in tables}
    with Store(ref, migrate=True) as st:
        assert st.version == SCHEMA_VERSION == 9
        assert {t: sorted(map(repr, st.query(f"SELECT * FROM {t}"))) for t in tables} == held
        assert held["verdicts"] and held["human_labels"]
        assert st.decision_count("answer_alignment") == 0 and st.tested_hashes("answer_alignment") == set()
        d = st.record_decision(
            DecisionRow(spec_name="m", decision_id="d1", from_key="k", adopted=False, objective="kappa", seed=0),
            [LabelUse(record_id="r", record_hash="h", use="test", spec_key="k")],
        )
        assert d.number == 1 and st.tested_hashes("m") == {"h"}


def test_the_oldest_fixture_store_migrates_to_the_ledger(old_store: Path) -> None:
    """The schema-2 fixture, migrated through every step to 9: its labels stay, and the ledger can be written."""
    labels = _rows(old_store, "SELECT * FROM human_labels")
    with Store(old_store) as st:
        assert st.version == SCHEMA_VERSION
        st.record_decision(
            DecisionRow(spec_name="m", decision_id="d1", from_key="k", adopted=False, objective="kappa", seed=0),
            [LabelUse(record_id="r", record_hash="h", use="search", fold=0, spec_key="k")],
        )
        assert [u.fold for u in st.label_uses("d1")] == [0]
    assert _rows(old_store, "SELECT * FROM human_labels") == labels and labels


def test_an_older_postgresql_store_is_migrated_only_when_asked(pg_url: str) -> None:
    """A shared store is not migrated behind its other clients' backs: opening one at an older schema says
    which command to run; `greval store migrate` adds what is missing and keeps every row."""
    from greval.errors import UserError

    with Store(pg_url) as st:
        st.put_human_labels([{"spec_name": "m", "record_id": "r", "record_hash": "h", "annotator": "a", "label": "x"}])
        st.db.execute("ALTER TABLE verdicts DROP COLUMN token_confidence")
        st.db.execute("ALTER TABLE judgements DROP COLUMN tokens_cached")
        st.db.execute("UPDATE meta SET value='3' WHERE key='schema_version'")
        for stmt in AS_SCHEMA_6:
            st.db.execute(stmt)
    with pytest.raises(UserError, match=rf"schema 3, this greval needs {SCHEMA_VERSION}$") as raised:
        Store(pg_url)
    # The stage names the command as facts; the CLI writes it as the command line to type.
    assert raised.value.remedy is not None and raised.value.remedy.command == "store migrate"
    cli = _cli("results", "runs", "--store", pg_url)
    assert (
        cli.exit_code == 2 and f"needs {SCHEMA_VERSION}; run `greval store migrate --store URL` once" in cli.output
    ), cli.output
    res = _cli("store", "migrate", "--store", pg_url)
    assert res.exit_code == 0 and f"schema 3 → {SCHEMA_VERSION}" in res.output, res.output
    with Store(pg_url) as st:
        assert st.version == SCHEMA_VERSION and len(st.human_labels("m")) == 1
        assert "token_confidence" in {c["column_name"] for c in st.query(
            "SELECT column_name FROM information_schema.columns WHERE table_name='verdicts'")}  # fmt: skip
    assert "up to date" in _cli("store", "migrate", "--store", pg_url).output


def test_a_store_url_s_password_never_reaches_the_terminal(postgres: Any, pg_url: str) -> None:
    """A password in a store URL is masked wherever greval names the store; a server that cannot be reached
    is one line naming the (masked) URL and the reason, no traceback."""
    secret = "S3cret-pw-9"
    with_pw = pg_url.replace("postgresql://greval@", f"postgresql://greval:{secret}@")
    res = _cli("store", "info", "--store", with_pw)
    assert res.exit_code == 0, res.output
    assert secret not in res.output and "greval:***@" in res.output
    closed = with_pw.replace(f"port={postgres.port}", "port=1")
    res = _cli("results", "runs", "--store", closed)
    assert res.exit_code == 2 and secret not in res.output and "Traceback" not in res.output
    assert "cannot connect to PostgreSQL" in res.output and len(res.output.strip().splitlines()) == 1


def test_greval_store_env_names_the_store_of_every_command(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GREVAL_STORE", pg_url)
    with Store(pg_url) as st:
        st.start_run("d", "j", ["m"], {})
    res = _cli("results", "runs")
    assert res.exit_code == 0 and "runs in postgresql://" in " ".join(res.output.split())


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_concurrent_claims_grant_each_judgement_once(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    """Four connections claim the same 200 judgements at once, in different orders; half are held by an
    expired lease (a crashed worker elsewhere) that all four try to take over. Each judgement goes to exactly
    one of them (on PostgreSQL the takeover reads the lease FOR UPDATE; without it two took the same one)."""
    import random
    import threading

    ref = str(tmp_path / "s.sqlite") if backend == "sqlite" else request.getfixturevalue("pg_url")
    keys = [("spec", "judge", f"h{i:03d}") for i in range(200)]
    with Store(ref) as st:
        st.db.executemany(
            "INSERT INTO claims (spec_key, judge_key, record_hash, host, pid, owner, expires_at)"
            " VALUES (?,?,?,?,?,?,?)",
            [(*k, "elsewhere", 1, "crashed", time.time() - 5) for k in keys[::2]],
        )
    stores = [Store(ref) for _ in range(4)]
    won: list[list[tuple[str, str, str]]] = [[] for _ in stores]
    start = threading.Barrier(len(stores))

    def claim(n: int) -> None:
        mine = random.Random(n).sample(keys, len(keys))
        start.wait()
        for i in range(0, len(mine), 20):
            batch = mine[i : i + 20]
            won[n] += [k for k, ok in zip(batch, stores[n].claim_many(batch), strict=True) if ok]

    threads = [threading.Thread(target=claim, args=(n,)) for n in range(len(stores))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for s in stores:
        s.close()
    assert sorted(k for w in won for k in w) == keys


def test_a_nul_in_a_judge_s_answer_is_stored_on_postgresql_not_a_failed_write(pg_url: str) -> None:
    """PostgreSQL text cannot hold NUL: the character is stored as U+FFFD and the verdict goes in (before,
    the whole group commit failed and the run with it)."""
    rec = fixture_records()[0]
    cfg = JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")
    [spec] = resolve_specs(["answer_alignment"])
    verdict = ItemVerdict(item_id="", status="ok", label=spec.scale.labels[0].name, reason="odd\x00answer")  # type: ignore[union-attr]
    with Store(pg_url) as st:
        st.put_result(None, spec.hash, cfg, rec, JudgeResult(spec=spec.name, spec_hash=spec.hash, verdicts=[verdict]))
        stored = st.result(spec.hash, cfg.key, rec)
    assert stored is not None and stored.verdicts[0].reason == "odd\ufffdanswer"


# ------------------------------------------------------------------ a store that goes away (issue 29)
def _outage_run(
    llm: OpenAIServer, store: str, tmp_path: Path, *flags: str, n: int = 400, preexec: Any = None
) -> tuple[subprocess.Popen[str], list[str]]:
    """`greval run` of ``n`` records against ``store`` in its own process (slow enough calls to be cut off
    mid-run); the process and its command line."""
    data = tmp_path / "outage.jsonl"
    rows = [{"id": f"q{i}", "question": f"Question {i}?", "answer": f"Answer {i}.", "expected_answer": f"Gold {i}."}
            for i in range(n)]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    llm.configure(latency=0.02)
    cmd = [sys.executable, "-m", "greval", "run", str(data), "-s", "answer_alignment", "--store", store, "--judge"]
    cmd += ["openai:judge-test", "--base-url", llm.base_url, "-c", "8", "--quiet", *flags]
    env = {**os.environ, "OPENAI_API_KEY": "sk-test"}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, preexec_fn=preexec)
    return proc, cmd


def _after_calls(llm: OpenAIServer, proc: subprocess.Popen[str], calls: int) -> None:
    """Wait until the judge has answered ``calls`` calls of the run (verdicts are being stored)."""
    deadline = time.monotonic() + 60
    while llm.stats()["total"] < calls:
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert "Traceback" not in err and lines and lines[-1].startswith("error: "), err[-3000:]
    assert not any(line.startswith("error") for line in lines[:-1]), lines
    return lines[-1]


def _ok_verdicts(ref: str) -> int:
    with Store(ref) as st:
        return int(st.query("SELECT COUNT(*) AS n FROM verdicts WHERE status='ok'")[0]["n"])


@pytest.mark.slow
def test_a_run_waits_for_a_postgresql_server_that_comes_back(
    llm: OpenAIServer, postgres: Any, pg_url: str, tmp_path: Path
) -> None:
    """PostgreSQL stopped mid-run and started again 3 s later: the run waits, connects again, writes again
    what was cut off, and finishes (exit 0, no traceback) with every verdict stored and no call paid twice."""
    proc, _ = _outage_run(llm, pg_url, tmp_path)
    try:
        _after_calls(llm, proc, 100)
        postgres.down()
        time.sleep(3)
    finally:
        postgres.up()
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 0 and "Traceback" not in err, err[-3000:]
    assert _ok_verdicts(pg_url) == 400 and llm.stats()["total"] == 400
    with Store(pg_url) as st:
        assert [r["status"] for r in st.runs()] == ["finished"]
        assert st.query("SELECT COUNT(*) AS n FROM claims") == [{"n": 0}]


@pytest.mark.slow
def test_a_postgresql_server_gone_past_the_wait_ends_the_run_in_one_line_that_says_how_to_resume(
    llm: OpenAIServer, postgres: Any, pg_url: str, tmp_path: Path
) -> None:
    """Gone for longer than --store-wait: one `error:` line (exit 75) that counts what this run stored and
    prints the command line to resume; once the server is back, that command judges only what is missing."""
    proc, cmd = _outage_run(llm, pg_url, tmp_path, "--store-wait", "2")
    try:
        _after_calls(llm, proc, 100)
        postgres.down()
        _, err = proc.communicate(timeout=120)
    finally:
        postgres.up()
    line = _one_error_line(err)
    assert proc.returncode == 75, err[-3000:]
    found = re.search(r"the store is unavailable \(no answer for 2 s: .*\); ([\d,]+) judgement\(s\) \(([\d,]+) "
                      r"verdicts\) of this run were stored before it went away(?:, ([\d,]+) judged since the last "
                      r"commit were not)?.*; to resume, run again: (.+)$", line)  # fmt: skip
    assert found is not None, line
    stored, verdicts, lost = (int((found.group(i) or "0").replace(",", "")) for i in (1, 2, 3))
    assert stored == verdicts == _ok_verdicts(pg_url) > 0
    again = shlex.split(found.group(4))
    assert again[len(again) - len(cmd) + 3 :] == cmd[3:]  # the same arguments, after greval's own command
    calls = llm.stats()["total"]
    resumed = subprocess.run(again, env={**os.environ, "OPENAI_API_KEY": "sk-test"}, capture_output=True, text=True)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert _ok_verdicts(pg_url) == 400
    # What the resumed run paid for: what was not stored — the lost group and the calls cut off in flight.
    assert llm.stats()["total"] - calls == 400 - stored
    assert calls - stored <= lost + 2 * 8


@pytest.mark.slow
@pytest.mark.parametrize("how", ["disk-full", "deleted"])
def test_a_sqlite_store_that_cannot_be_written_ends_the_run_in_one_line(
    llm: OpenAIServer, tmp_path: Path, how: str
) -> None:
    """SQLite's equivalents: a file that cannot grow (the process's file-size limit: a disk I/O error), and a
    file deleted under the run (SQLite writes on into the deleted file, losing it all: now refused)."""
    store = tmp_path / "s.sqlite"
    with Store(store):  # created before the limit: its schema alone is ~150 kB
        pass
    size = store.stat().st_size

    def small_files() -> None:  # pragma: no cover - runs in the child
        import resource
        import signal

        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit fails (EFBIG) instead of killing
        resource.setrlimit(resource.RLIMIT_FSIZE, (size + 200_000, size + 200_000))

    proc, _ = _outage_run(llm, str(store), tmp_path, preexec=small_files if how == "disk-full" else None)
    if how == "deleted":
        _after_calls(llm, proc, 100)
        store.unlink()
    _, err = proc.communicate(timeout=120)
    line = _one_error_line(err)
    assert proc.returncode == 75, err[-3000:]
    reason = "disk I/O error" if how == "disk-full" else "the file was deleted or replaced while in use"
    assert line.startswith(f"error: {store}: the store is unavailable ({reason}") and "to resume, run again: " in line


def test_a_read_waits_for_the_postgresql_server_and_a_retried_partial_write_is_merged_once(
    postgres: Any, pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read while the server is down is answered once it is back (within the wait). A write is run again
    whole after a lost connection, also when its commit went through unanswered: a partial judgement (a
    resumed chunk metric) written twice at the same instant adds its tokens once."""
    import threading

    with Store(pg_url, wait_s=30) as st:
        postgres.down()
        threading.Timer(1.0, postgres.up).start()
        assert st.runs() == []
        rec = fixture_records()[0]
        cfg = JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")
        [spec] = resolve_specs(["chunk_evaluation"])
        verdict = ItemVerdict(item_id="c1", status="ok", label=spec.scale.labels[0].name, reason="r")  # type: ignore[union-attr]
        call = CallLog(method="json_schema", items=["c1"], latency_ms=5.0, tokens_in=7)
        result = JudgeResult(spec=spec.name, spec_hash=spec.hash, verdicts=[verdict], calls=[call])
        monkeypatch.setattr(time, "time", lambda: 1_700_000_000.5)
        for _ in range(2):
            st.put_result(None, spec.hash, cfg, rec, result, partial=True)
        assert st.query("SELECT tokens_in FROM judgements") == [{"tokens_in": 7}]


_OPEN_MANY = """
import sys, time
from greval.store.connection import StoreFile
start = float(sys.argv[2])
for i in range(int(sys.argv[3])):
    while time.time() < start + i * 0.1:  # every process opens file i at the same moment
        pass
    StoreFile(f"{sys.argv[1]}-{i}.sqlite").close()
print("ok")
"""


def test_processes_opening_one_new_store_at_once_wait_for_each_other(tmp_path: Path) -> None:
    """Two pytest-xdist workers sharing a new store met SQLite's 'database is locked' while creating it (the
    journal-mode switch is not covered by the busy timeout): opening waits instead of calling it broken."""
    start = str(time.time() + 1.5)  # both processes past their imports, then racing on the same 40 new files
    cmd = [sys.executable, "-c", _OPEN_MANY, str(tmp_path / "s"), start, "40"]
    procs = [subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 and out.strip() == "ok" for p, (out, _) in zip(procs, outs, strict=True)), outs


def test_decisions_of_one_metric_taken_at_once_on_postgresql_are_numbered_in_turn(pg_url: str) -> None:
    """Two aligns of one metric recording their decisions at the same moment on a shared PostgreSQL store: each
    decision gets its own number, 1..N without a gap or a collision (numbering takes turns per metric)."""
    from concurrent.futures import ThreadPoolExecutor

    with Store(pg_url):
        pass  # the tables, made once

    def record(side: int) -> list[int]:
        with Store(pg_url) as st:
            return [
                st.record_decision(
                    DecisionRow(spec_name="m", decision_id=f"d{side}-{i}", from_key="k", adopted=False,
                                objective="kappa", seed=i),
                    [LabelUse(record_id=f"r{i}", record_hash=f"h{side}-{i}", use="test", spec_key="k")],
                ).number
                for i in range(25)
            ]  # fmt: skip

    with ThreadPoolExecutor(2) as pool:
        numbers = [n for got in pool.map(record, (0, 1)) for n in got]
    assert sorted(numbers) == list(range(1, 51))
