"""The store at scale (issue 35): each judge answer stored once (schema 5, older stores migrated without a
loss), PostgreSQL's large reads through a server-side cursor, and exports whose memory does not grow with the
store (measured in a subprocess)."""

from __future__ import annotations

import gzip
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import pytest

from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.spec import resolve_specs
from greval.store import results
from greval.store.schema import RAW_SEPARATOR, SCHEMA_VERSION, call_answers, raw_in_calls
from greval.store.store import Store, spec_keys
from greval.types import CallLog, ItemVerdict, JudgeResult
from tests.test_store import FIXTURES, _rows, old_store

__all__ = ["old_store"]  # the schema-2 fixture, a pytest fixture of this module too

_JUDGEMENT = "SELECT spec_key, judge_key, record_hash, calls, raw, model, params FROM judgements"


def _judgements(path: Path) -> dict[tuple[str, str, str], tuple[Any, ...]]:
    return {tuple(r[:3]): tuple(r[3:]) for r in _rows(path, _JUDGEMENT)}


def test_an_old_store_keeps_each_answer_once_and_loses_none(old_store: Path) -> None:
    """Schema 4 stored each answer twice (``raw``, and in ``calls``) and the judge's label and identity on every
    judgement: migrated, ``raw`` / ``model`` / ``params`` are NULL where ``calls`` and ``judges`` say the same,
    and kept where they say more (here a raw text changed by hand); nothing else changes."""
    db = sqlite3.connect(old_store)
    [(edited,)] = db.execute("SELECT MIN(rowid) FROM judgements WHERE raw != ''").fetchall()
    db.execute("UPDATE judgements SET raw = raw || ' (a note)' WHERE rowid = ?", (edited,))
    [edited_key] = db.execute("SELECT spec_key, judge_key, record_hash FROM judgements WHERE rowid = ?", (edited,))
    db.commit()
    db.close()
    before = _judgements(old_store)
    judges = {
        k: (label, identity) for k, label, identity in _rows(old_store, "SELECT judge_key, label, identity FROM judges")
    }
    several = [v for v in before.values() if len(call_answers(v[0])) > 1]
    assert several and all(RAW_SEPARATOR in v[1] for v in several)  # the fixture has judgements of several calls
    with Store(old_store):
        pass
    assert _rows(old_store, "SELECT value FROM meta WHERE key='schema_version'") == [(str(SCHEMA_VERSION),)]
    after = _judgements(old_store)
    assert after.keys() == before.keys()
    for key, (calls, raw, model, params) in before.items():
        now = after[key]
        assert now[0] == calls  # every call, and its answer, as it was
        if key == edited_key:
            assert now[1] == raw  # says what calls do not: kept
        else:
            assert now[1] is None and raw == RAW_SEPARATOR.join(call_answers(calls))
        assert now[2:] == (None, None) and (model, params) == judges[key[1]]


@pytest.fixture()
def v4_store(tmp_path: Path) -> Path:
    """A copy of the schema-4 fixture: the schema-2 fixture's runs, labels and errors as the greval of commit
    e6173c6 wrote them (scripts/make_store_fixture.py --name store_v4), with the item rows it read back."""
    path = tmp_path / "v4.sqlite"
    path.write_bytes(gzip.decompress((FIXTURES / "store_v4.sqlite.gz").read_bytes()))
    return path


def _as_recorded(fig: results.MetricFigures) -> dict[str, Any]:
    """A figure with the fields the schema-4 fixture recorded (the record-label rule's came later)."""
    return fig.model_dump(mode="json", exclude={"record_rule", "record_labels"})


def test_a_schema_4_store_migrated_reads_every_verdict_as_before(v4_store: Path) -> None:
    """A store a schema-4 greval wrote (each answer in ``raw`` and in ``calls``), opened by this one: every
    verdict, item row and figure reads as that greval read them, each judgement keeps every call and its
    answer, and the copies are gone."""
    expected = json.loads((FIXTURES / "store_v4.figures.json").read_text())
    assert _rows(v4_store, "SELECT value FROM meta WHERE key='schema_version'") == [("4",)]
    verdicts = _rows(v4_store, "SELECT * FROM verdicts")
    before = _judgements(v4_store)
    assert all(raw is not None and model is not None for _, raw, model, _ in before.values())
    assert any(RAW_SEPARATOR in raw for _, raw, _, _ in before.values())  # a judgement of several calls
    with Store(v4_store) as st:
        assert st.version == SCHEMA_VERSION >= 5
        rows = results.item_rows(st)
        # schema 6's column, filled from each judgement's calls (this greval logged each call's cached tokens)
        cached = {(r["spec_key"], r["judge_key"], r["record_hash"]): r.pop("tokens_cached") for r in rows}
        assert rows == expected["items"]
        logged = {k: sum(c["tokens_cached"] for c in json.loads(v[0] or "[]")) for k, v in before.items()}
        assert cached == {k: logged[k] for k in cached} and None not in cached.values()
        assert [_as_recorded(f) for f in results.figures(st)] == expected["figures"]
        for run_id, figs in expected["runs"].items():
            assert [_as_recorded(f) for f in results.figures(st, run_id=run_id)] == figs
        assert len(list(results.result_rows(st, None, "record"))) == len(
            {(r["spec_key"], r["record_id"]) for r in expected["items"]}
        )
    assert _rows(v4_store, "SELECT * FROM verdicts") == verdicts
    after = _judgements(v4_store)
    assert after.keys() == before.keys()
    assert all(after[k][0] == calls and after[k][1:] == (None, None, None) for k, (calls, *_) in before.items())


def test_raw_in_calls_knows_a_resumed_judgement_s_last_answers() -> None:
    """A resumed many-judge appended its calls to the earlier ones, and its raw held only its own answers."""
    calls = json.dumps([{"raw": "first"}, {"raw": ""}, {"raw": "second"}, {"raw": "third"}])
    assert call_answers(calls) == ["first", "second", "third"]
    assert raw_in_calls(f"second{RAW_SEPARATOR}third", calls)
    assert raw_in_calls("third", calls) and raw_in_calls("", calls) and raw_in_calls(None, calls)
    assert raw_in_calls(RAW_SEPARATOR.join(["first", "second", "third"]), calls)
    assert not raw_in_calls(f"first{RAW_SEPARATOR}second", calls)  # not the last answers
    assert not raw_in_calls("something else", calls) and not raw_in_calls("x", "not json")


def test_a_new_judgement_stores_its_answers_once(store_path: Path) -> None:
    """Written by this greval: the answers in ``calls`` alone; an older row judged again drops its copies."""
    cfg = JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")
    [spec] = resolve_specs(["answer_alignment"])
    rec = Record.from_mapping({"id": "r1", "question": "q?", "answer": "a.", "expected_answer": "a."})
    call = CallLog(method="json_schema", items=[""], latency_ms=1.0, raw='{"label": "Correct"}')
    res = JudgeResult(spec=spec.name, spec_hash=spec.hash, verdicts=[ItemVerdict(label="Correct")], calls=[call])
    with Store(store_path) as st:
        st.put_result(None, spec.hash, cfg, rec, res)
        st.db.execute("UPDATE judgements SET raw='old', model='m', params='{}'")
        st.put_result(None, spec.hash, cfg, rec, res)
    [(calls, raw, model, params)] = _rows(store_path, "SELECT calls, raw, model, params FROM judgements")
    assert call_answers(calls) == ['{"label": "Correct"}'] and (raw, model, params) == (None, None, None)


# ------------------------------------------------------------------------------ PostgreSQL's large reads
def _fill(ref: str, n: int, reason: str = "why", spec_name: str = "chunk_evaluation") -> None:
    """``n`` judgements of a three-item metric, written as a run writes them (deferred, committed in groups)."""
    cfg = JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")
    specs = resolve_specs([spec_name])
    key = spec_keys(specs)[spec_name]
    verdicts = [ItemVerdict(item_id=f"c{k}", label="Relevant", reason=reason) for k in (1, 2, 3)]
    res = JudgeResult(spec=spec_name, spec_hash=specs[0].hash, verdicts=verdicts)
    with Store(ref) as st:
        st.put_specs(specs, {spec_name: key})
        st.put_judge(cfg)
        for i in range(n):
            rec = Record.from_mapping({"id": f"r{i}", "question": f"q{i}?", "answer": "a.", "chunks": ["x", "y", "z"]})
            st.put_result(None, key, cfg, rec, res, defer=True)
            if st.queued >= 500:
                st.flush()


def _cursors(st: Store) -> list[str]:
    return [r[0] for r in st.db.execute("SELECT name FROM pg_cursors").fetchall()]


@pytest.mark.parametrize(
    "read",
    [
        pytest.param(lambda st: results._stream(st, results.Scope()), id="figures"),
        pytest.param(lambda st: results.result_rows(st, None, "item"), id="items"),
        pytest.param(lambda st: results.result_rows(st, None, "record"), id="records"),
    ],
)
def test_postgresql_s_large_reads_go_through_a_server_side_cursor(read: Any, pg_url: str) -> None:
    """Figures, item rows and record rows (exports, load_results) are read through a named cursor, in a
    transaction of their own that ends with the read, read whole or left early (before: psycopg fetched the
    whole result into the client before the first row)."""
    _fill(pg_url, 30)
    with Store(pg_url) as st:
        rows = read(st)
        first = next(rows)
        assert first["spec"] == "chunk_evaluation"
        assert [c.startswith("greval_stream_") for c in _cursors(st)] == [True]
        assert len([first, *rows]) == (90 if first.get("item_id") else 30)
        assert _cursors(st) == [] and not st.db._in_tx  # type: ignore[attr-defined]
        rows = read(st)
        next(rows)
        rows.close()  # left early: the cursor and its transaction end
        assert _cursors(st) == [] and not st.db._in_tx  # type: ignore[attr-defined]
        run_id = st.start_run("d", "j", ["chunk_evaluation"], {})  # the connection writes again
        assert [r["run_id"] for r in st.runs()] == [run_id]


def test_the_streamed_rows_and_figures_are_the_same_on_sqlite_and_postgresql(pg_url: str, tmp_path: Path) -> None:
    """The same writes read back the same item rows, record rows (the window query that orders records by
    their first item) and figures from both engines."""
    sqlite = str(tmp_path / "s.sqlite")
    for ref in (sqlite, pg_url):
        _fill(ref, 12)
    drop = ("created_at", "updated_at")
    with Store(pg_url) as pg, Store(sqlite) as sq:
        for level in ("item", "record"):
            got = [
                [{k: v for k, v in r.items() if k not in drop} for r in results.result_rows(st, None, level)]
                for st in (pg, sq)
            ]  # type: ignore[arg-type]
            assert got[0] == got[1] and len(got[0]) == (36 if level == "item" else 12)
        assert results.figures(pg) == results.figures(sq)


# ------------------------------------------------------------------------------------- export memory
def _peak_mb(args: list[str]) -> float:
    """Peak RSS (MB) of ``greval ARGS`` in a process of its own (its exit checked)."""
    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen([sys.executable, "-m", "greval", *args], stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        assert proc.returncode == 0, err.read().decode()
    return usage.ru_maxrss / 1024


@pytest.mark.slow
def test_an_export_s_memory_does_not_grow_with_the_store(tmp_path: Path) -> None:
    """A store with 4x the rows (~75 MB more verdict text) is exported within a few MB of the same peak RSS
    (before: every row was read into a list, then a DataFrame, then copied — the peak grew ~3.5x the text).
    Each format, at both levels; every row written."""
    reason = "A reason long enough to weigh something in memory. " * 40  # ~2 KB per verdict
    sizes = {"mid": 4_000, "big": 16_000}
    for name, n in sizes.items():
        _fill(str(tmp_path / f"{name}.sqlite"), n, reason)
    more_text_mb = (sizes["big"] - sizes["mid"]) * 3 * len(reason) / 1e6
    assert more_text_mb > 70
    for fmt, level in (("csv", "item"), ("jsonl", "record"), ("parquet", "item")):
        peaks = {}
        for name in sizes:
            out = tmp_path / f"{name}-{level}.{fmt}"
            args = ["results", "export", "--store", str(tmp_path / f"{name}.sqlite"), "-o", str(out), "--level", level]
            peaks[name] = _peak_mb(args)
        written = tmp_path / f"big-{level}.{fmt}"
        rows = sizes["big"] * (3 if level == "item" else 1)
        if fmt == "parquet":
            import pyarrow.parquet as pq

            assert pq.ParquetFile(written).metadata.num_rows == rows
        else:
            assert written.read_text(encoding="utf-8").count("\n") == rows + (fmt == "csv")
        assert peaks["big"] - peaks["mid"] < 10, (fmt, level, peaks, f"{more_text_mb:.0f} MB more text")
