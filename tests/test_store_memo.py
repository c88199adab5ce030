"""What a no-op re-run need not work out again (greval.store.memo): chunks with nothing left to judge and a run's
figures are remembered in a SQLite store, read back only while the triggers' counters say nothing they depend on
changed, and always equal to the computation afresh. Runs go over real HTTP to the test server, into real
SQLite files (and a real PostgreSQL database, which keeps no memo)."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

import greval.runner.plan as planning
from greval.dataset.records import DataFile
from greval.runner.driver import run
from greval.runner.options import RunSummary
from greval.spec import resolve_specs
from greval.store import results
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.test_run import FAST, cfg

SPECS = ["answer_alignment"]


def _write(path: Path, ids: range, prefix: str = "r") -> Path:
    rows = [
        {"id": f"{prefix}{i}", "question": f"Q {prefix}{i}?", "answer": f"A {i}.", "expected_answer": f"G {i}."}
        for i in ids
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


@pytest.fixture()
def asked(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many records each Store.pending call asked about (the planning work the memo skips, and a run's
    check of what it is about to judge); plans in chunks of 4, each one the memo may mark."""
    monkeypatch.setattr(planning, "PLAN_CHUNK", 4)
    monkeypatch.setattr(planning, "SETTLE_MIN", 1)
    calls: list[int] = []
    pending = Store.pending

    def counted(self: Store, *args: Any, **kw: Any) -> Any:
        calls.append(len(args[2]))
        return pending(self, *args, **kw)

    monkeypatch.setattr(Store, "pending", counted)
    return calls


def _run(store: Path, data: Path, llm: OpenAIServer, **kw: Any) -> RunSummary:
    with Store(store) as st:
        return run(resolve_specs(SPECS), DataFile(data), st, cfg(llm), options=FAST, **kw)


def _fresh(store: Path, run_id: str) -> list[results.MetricFigures]:
    """The run's figures computed afresh (the memo not consulted)."""
    with Store(store) as st:
        scope = _scope(st, run_id)
        return results._figures(st, scope)


def _scope(st: Store, run_id: str) -> results.Scope:
    spec_key, judge_key = st.db.execute(
        "SELECT spec_key, judge_key FROM verdicts WHERE spec_name=? LIMIT 1", (SPECS[0],)
    ).fetchone()
    return results.Scope(run_id=run_id, spec_key=spec_key, judge_key=judge_key)


def _memos(store: Path, kind: str) -> int:
    with sqlite3.connect(store) as db:
        return int(db.execute("SELECT COUNT(*) FROM memo WHERE kind=?", (kind,)).fetchone()[0])


def _sql(store: Path, sql: str, *params: Any) -> None:
    """An edit typed by hand: no greval code on its path (only the store's own triggers)."""
    with sqlite3.connect(store) as db:
        db.execute(sql, params)


def _metric(summary: RunSummary) -> dict[str, Any]:
    """The figures a run summary shows (what this run did — judged, reused, tokens — set apart)."""
    own = {"judged", "reused", "tokens_in", "tokens_out", "tokens_cached", "calls", "asked"}
    return summary.metrics[0].model_dump(exclude=own)


def test_a_no_op_re_run_asks_nothing_and_shows_the_figures_computed_afresh(
    llm: OpenAIServer, tmp_path: Path, asked: list[int]
) -> None:
    """10 records in chunks of 4. The first re-run finds the three chunks settled and marks them; the next asks
    the store about no record, and its summary's figures come from the memo: the same as computed afresh, and
    the same as the first run's."""
    data, store = _write(tmp_path / "d.jsonl", range(10)), tmp_path / "s.sqlite"
    first = _run(store, data, llm)
    assert first.calls == 10
    assert _memos(store, "settled") == 0 and _memos(store, "figures") == 1  # kept by the first run's summary
    asked.clear()
    second = _run(store, data, llm)
    assert second.calls == 0 and asked == [4, 4, 2] and _memos(store, "settled") == 3
    asked.clear()
    third = _run(store, data, llm)
    assert third.calls == 0 and asked == []
    assert _metric(first) == _metric(second) == _metric(third)
    assert _fresh(store, third.run_id) == _fresh(store, first.run_id)
    assert _metric(third) == {
        k: v for k, v in _fresh(store, third.run_id)[0].model_dump().items() if k in _metric(third)
    }
    assert llm.stats()["total"] == 10


def test_a_lost_verdict_unsettles_its_pair_and_its_record_is_judged_again(
    llm: OpenAIServer, tmp_path: Path, asked: list[int]
) -> None:
    """A verdict deleted by hand (and, the next time, one rewritten to a status that is not final) makes its
    record pending again although its chunk was marked settled: every chunk is asked about, one call (the run
    checks that record once more before judging it), and figures that count it."""
    data, store = _write(tmp_path / "d.jsonl", range(10)), tmp_path / "s.sqlite"
    _run(store, data, llm)
    _run(store, data, llm)  # marks the chunks settled
    _sql(store, "DELETE FROM verdicts WHERE record_id='r5'")
    asked.clear()
    again = _run(store, data, llm)
    assert again.calls == 1 and asked == [4, 4, 2, 1] and llm.stats()["total"] == 11
    assert again.metrics[0].records == 10 and _metric(again)["records"] == _fresh(store, again.run_id)[0].records
    _sql(store, "UPDATE verdicts SET status='unknown' WHERE record_id='r7'")
    asked.clear()
    plan = _plan(store, data, llm)
    assert plan.judgements == 1 and asked == [4, 4, 2]


def _plan(store: Path, data: Path, llm: OpenAIServer, **kw: Any) -> planning.Plan:
    with Store(store) as st:
        return planning.plan_work(resolve_specs(SPECS), DataFile(data), st, cfg(llm), **kw)


def test_new_verdicts_elsewhere_keep_chunks_settled_but_not_the_figures(
    llm: OpenAIServer, tmp_path: Path, asked: list[int]
) -> None:
    """Another dataset judged by the same spec and judge adds verdicts: nothing a settled chunk has can be lost
    that way (no store question), but the figures' memo is not read (a write to the pair) — computed again and
    the same as afresh. A label edited by hand is seen in the figures at once."""
    a, b, store = _write(tmp_path / "a.jsonl", range(6)), _write(tmp_path / "b.jsonl", range(3), "b"), tmp_path / "s"
    _run(store, a, llm)
    _run(store, a, llm)
    _run(store, b, llm)
    asked.clear()
    again = _run(store, a, llm)
    assert again.calls == 0 and asked == []
    assert _metric(again) == {
        k: v for k, v in _fresh(store, again.run_id)[0].model_dump().items() if k in _metric(again)
    }
    with Store(store) as st:
        label = st.db.execute("SELECT label FROM verdicts WHERE record_id='a0' OR record_id='r0'").fetchone()[0]
        other = next(
            n for n in st.spec(st.db.execute("SELECT spec_key FROM verdicts").fetchone()[0]).scale.names if n != label
        )
    _sql(store, "UPDATE verdicts SET label=? WHERE record_id='r0'", other)
    with Store(store) as st:
        shown = results.figures(st, run_id=again.run_id, **_pair(st))
    assert (
        shown == _fresh(store, again.run_id)
        and shown[0].distribution[other] == again.metrics[0].distribution[other] + 1
    )


def _pair(st: Store) -> dict[str, str]:
    scope = _scope(st, "")
    assert scope.spec_key is not None and scope.judge_key is not None
    return {"spec_key": scope.spec_key, "judge_key": scope.judge_key}


def test_a_memo_raced_by_a_write_is_not_kept(llm: OpenAIServer, tmp_path: Path) -> None:
    """Figures computed from what the store held before a write landed are not remembered: the counter read
    before the computation has moved when the memo would be written."""
    data, store = _write(tmp_path / "d.jsonl", range(4)), tmp_path / "s.sqlite"
    summary = _run(store, data, llm)
    _sql(store, "DELETE FROM memo")
    with Store(store) as st:
        pair = _pair(st)
        before = st.generation(pair["spec_key"], pair["judge_key"])
        assert before is not None
        computed = results._figures(st, _scope(st, summary.run_id))
        _sql(store, "UPDATE verdicts SET reason='edited' WHERE record_id='r1'")  # lands in between
        assert not st.remember(pair["spec_key"], pair["judge_key"], "figures", {"k": json.dumps([])}, before)
        assert st.recall(pair["spec_key"], pair["judge_key"], "figures", ["k"], before) == {}
        now = st.generation(pair["spec_key"], pair["judge_key"])
        assert now is not None and now.writes == before.writes + 1 and now.losses == before.losses
        assert st.remember(pair["spec_key"], pair["judge_key"], "figures", {"k": "[]"}, now)
    assert computed


def test_retried_errors_are_asked_although_their_chunk_is_settled(
    llm: OpenAIServer, tmp_path: Path, asked: list[int]
) -> None:
    """An error verdict is done for a plain re-run (its chunk stays settled: no store question), and pending for
    one that retries errors, which asks the store about every record."""
    data, store = _write(tmp_path / "d.jsonl", range(8)), tmp_path / "s.sqlite"
    _run(store, data, llm)
    _run(store, data, llm)
    _sql(store, "UPDATE verdicts SET status='error', error='timeout: x', label=NULL WHERE record_id='r2'")
    asked.clear()
    assert _plan(store, data, llm).judgements == 0 and asked == []
    assert _plan(store, data, llm, retry_errors=True).judgements == 1 and asked == [4, 4]


def test_a_postgresql_store_keeps_no_memo(llm: OpenAIServer, tmp_path: Path, pg_url: str, asked: list[int]) -> None:
    """No counters on PostgreSQL (see greval.store.memo): a re-run plans in full (as the first run did, which
    also checked its 5 records before judging them) and tallies afresh, with the same figures."""
    data = _write(tmp_path / "d.jsonl", range(5))
    with Store(pg_url) as st:
        first = run(resolve_specs(SPECS), DataFile(data), st, cfg(llm), options=FAST)
        assert st.generation("a", "b") is None
        again = run(resolve_specs(SPECS), DataFile(data), st, cfg(llm), options=FAST)
    assert again.calls == 0 and asked == [4, 1, 5, 4, 1] and _metric(again) == _metric(first)


def test_a_resumed_run_s_figures_count_what_it_judged(llm: OpenAIServer, tmp_path: Path) -> None:
    """Figures remembered while a record had no verdict (its verdict and judgement gone, as after an interrupted
    run) are not read once the record is judged: the new rows move the pair's counter."""
    data, store = _write(tmp_path / "d.jsonl", range(6)), tmp_path / "s.sqlite"
    first = _run(store, data, llm)
    _sql(store, "DELETE FROM verdicts WHERE record_id='r2'")
    _sql(store, "DELETE FROM judgements WHERE record_hash NOT IN (SELECT record_hash FROM verdicts)")
    with Store(store) as st:
        assert results.figures(st, run_id=first.run_id, **_pair(st))[0].records == 5  # remembered
    assert _memos(store, "figures") == 1
    again = _run(store, data, llm)
    assert again.calls == 1 and again.metrics[0].records == 6 == _fresh(store, again.run_id)[0].records


def test_small_chunks_are_asked_and_never_marked(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Below SETTLE_MIN new contents (greval serve's lookups: a few records a request) a chunk is asked about
    in one store query and no memo is read or written: a plan stays a read."""
    monkeypatch.setattr(planning, "PLAN_CHUNK", 4)
    monkeypatch.setattr(planning, "SETTLE_MIN", 3)
    data, store = _write(tmp_path / "d.jsonl", range(10)), tmp_path / "s.sqlite"
    _run(store, data, llm)
    _run(store, data, llm)
    assert _memos(store, "settled") == 2  # the two chunks of 4; not the last one of 2
