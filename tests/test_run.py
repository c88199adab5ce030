"""Stage 3 — running a dataset into the store: resumable, never paying twice, losing nothing."""

from __future__ import annotations

import ast
import contextlib
import json
import math
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import yaml
from click.testing import CliRunner
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from greval import export_results, load_records, load_results
from greval.cli import main
from greval.dataset.records import Record
from greval.errors import DataError
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.runner.driver import run
from greval.runner.judging import GROUP_DELAY_S
from greval.runner.options import RunOptions
from greval.runner.plan import plan_work
from greval.spec import parse_spec, resolve_specs
from greval.store.schema import call_answers
from greval.store.store import Store, spec_keys
from greval.testing.openai_server import OpenAIServer
from greval.types import ItemVerdict, JudgeResult
from tests.conftest import TEST_KEY, terminal_sigint

FAST = RunOptions(concurrency=8, retry=RetryPolicy(max_attempts=6, base_delay=0.01, max_delay=0.1))


def rag_records(n: int, chunks: int = 3) -> list[Record]:
    return [
        Record.from_mapping(
            {
                "id": f"r{i}",
                "question": f"Question number {i}?",
                "expected_answer": f"Expected {i}.",
                "answer": f"Answer {i}.",
                "chunks": [f"chunk {i}.{k}" for k in range(chunks)],
                "triples": [[f"s{i}", "p", f"o{k}"] for k in range(2)],
                "system": "A" if i % 2 else "B",
            }
        )
        for i in range(n)
    ]


def cfg(srv: OpenAIServer, **kw: Any) -> JudgeConfig:
    return JudgeConfig.parse("openai:judge-test", base_url=srv.base_url, timeout=kw.pop("timeout", 10), **kw)


def test_rerun_makes_zero_calls_and_edit_rejudges_only_that_spec(llm: OpenAIServer, store_path: Path) -> None:
    specs = resolve_specs(["answer_alignment", "chunk_evaluation"])
    recs = rag_records(6)
    with Store(store_path) as st:
        first = run(specs, recs, st, cfg(llm), options=FAST)
        assert first.failed == 0
        assert llm.stats()["total"] == 12
        llm.reset()
        again = run(specs, recs, st, cfg(llm), options=FAST)
        assert llm.stats()["total"] == 0
        assert again.calls == 0
        assert [m.reused for m in again.metrics] == [6, 6]
        # The summary is the dataset's state, reused verdicts included, and the run lists every record.
        assert [(m.verdicts, m.distribution, m.mean_score) for m in again.metrics] == [
            (m.verdicts, m.distribution, m.mean_score) for m in first.metrics
        ]
        assert [m.verdicts for m in first.metrics] == [6, 18] and sum(first.metrics[1].distribution.values()) == 18
        # Both runs point at one snapshot of the dataset: a re-run adds no membership rows.
        snaps = st.db.execute("SELECT DISTINCT snapshot FROM runs").fetchall()
        assert len(snaps) == 1 and st.db.execute("SELECT COUNT(*) FROM snapshot_members").fetchone()[0] == 6
        edited = specs[0].model_copy(update={"steps": [*specs[0].steps, "Be strict."]})
        run([edited, specs[1]], recs, st, cfg(llm), options=FAST)
        assert llm.stats()["total"] == 6
        assert all("Metric: answer_alignment" in b["messages"][0]["content"] for b in llm.requests())
        llm.reset()
        run(specs, recs, st, cfg(llm, temperature=0.7), options=FAST)  # a new judge identity
        assert llm.stats()["total"] == 12
    frame = load_results(store_path)  # the production version (the first run's: the edit was not promoted) …
    assert set(frame["spec_hash"][frame["spec"] == "answer_alignment"]) == {specs[0].hash}
    frame = load_results(store_path, all_versions=True)  # … and, asked for, every version
    assert set(frame["spec_hash"][frame["spec"] == "answer_alignment"]) == {specs[0].hash, edited.hash}


def test_every_verdict_row_keeps_what_happened(llm: OpenAIServer, store_path: Path) -> None:
    specs = resolve_specs(["answer_alignment"])
    with Store(store_path) as st:
        run(specs, rag_records(2), st, cfg(llm), options=FAST)
    frame = load_results(store_path)
    row = frame.iloc[0]
    assert row["status"] == "ok" and row["label"] in specs[0].scale.names  # type: ignore[union-attr]
    assert row["reason"] and row["judge"] == "openai:judge-test"
    assert row["tokens_in"] > 0 and row["tokens_out"] > 0 and row["latency_ms"] > 0 and row["attempts"] == 1
    db = sqlite3.connect(store_path)
    # Each call's answer once, in calls; the judge's parameters once, in judges (schema 5).
    calls, raw, params = db.execute("SELECT calls, raw, params FROM judgements LIMIT 1").fetchone()
    assert [json.loads(answer)["label"] for answer in call_answers(calls)] == [row["label"]]
    assert raw is None and params is None
    [(identity,)] = db.execute("SELECT identity FROM judges").fetchall()
    assert json.loads(identity)["model"] == "judge-test"
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_fault_injected_run_loses_nothing(llm: OpenAIServer, store_path: Path) -> None:
    llm.configure(latency=0.02)
    llm.script(
        [
            {
                "match": "Question number",
                "probability": 0.15,
                "action": {"type": "fault", "status": 429, "retry_after": 0.05},
            },
            {"match": "Question number", "probability": 0.10, "action": {"type": "fault", "status": 500}},
            {"match": "Question number", "probability": 0.05, "action": {"type": "timeout", "seconds": 2}},
            {"match": "Question number", "probability": 0.10, "action": {"type": "malformed"}},
            {"match": "Item ids", "probability": 0.15, "action": {"type": "drop_ids", "ids": ["c1"]}},
            {"match": "Question number 7?", "action": {"type": "malformed"}},  # never answers properly
        ]
    )
    specs = resolve_specs(["answer_alignment", "chunk_evaluation"])
    recs = rag_records(30)
    with Store(store_path) as st:
        summary = run(specs, recs, st, cfg(llm, timeout=0.5), options=FAST)
    stats = llm.stats()
    assert stats["by_status"].get("429", 0) > 0 and stats["by_status"].get("500", 0) > 0
    frame = load_results(store_path, level="record")
    assert len(frame) == 60  # every (record, metric) has a row: a verdict or an explicit error
    failed = frame[frame["status"] != "ok"]
    assert set(failed["record_id"]) == {"r7"}
    assert all("unusable answer" in str(e) or "no verdict" in str(e) for e in failed["error"])
    assert summary.failed == 2
    items = load_results(store_path)
    assert len(items[items["spec"] == "chunk_evaluation"]) == 30 * 3


def test_killed_process_resumes_with_only_missing_verdicts(llm: OpenAIServer, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    with data.open("w") as fh:
        for r in rag_records(40):
            fh.write(json.dumps({"id": r.id, **r.data}) + "\n")
    store = tmp_path / "s.sqlite"
    llm.configure(latency=0.25)
    cmd = [
        sys.executable,
        "-m",
        "greval",
        "run",
        str(data),
        "-s",
        "answer_alignment",
        "--store",
        str(store),
        "--judge",
        "openai:judge-test",
        "--base-url",
        llm.base_url,
        "-c",
        "4",
        "--quiet",
    ]
    env = {**os.environ, "OPENAI_API_KEY": TEST_KEY}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.time() + 60
    stored = 0
    while time.time() < deadline and stored < 10:
        time.sleep(0.2)
        if store.exists():
            try:
                stored = sqlite3.connect(store).execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]
            except sqlite3.OperationalError:
                stored = 0
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=10)
    assert proc.returncode == -signal.SIGKILL
    asked_before = llm.stats()["total"]
    done_before = sqlite3.connect(store).execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0]
    assert 10 <= done_before < 40
    # Verdicts are committed in groups (greval.runner.judging.GroupCommit): the kill lost the calls in flight (at most
    # -c 4) and the last group's verdicts — those that arrived within GROUP_DELAY_S (50 ms) of the kill; at 4 in
    # flight and 250 ms a call, at most 4 more. Everything asked before that is stored.
    assert GROUP_DELAY_S <= 0.05
    assert 0 <= asked_before - done_before <= 4 + 4, (asked_before, done_before)
    # Each record is stored in the same transaction as its first verdict: none is missing after a kill.
    orphans = "SELECT COUNT(*) FROM verdicts v LEFT JOIN records r USING (record_hash) WHERE r.record_hash IS NULL"
    assert sqlite3.connect(store).execute(orphans).fetchone()[0] == 0
    llm.reset()
    llm.configure(latency=0.0)
    res = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    assert llm.stats()["total"] == 40 - done_before
    assert sqlite3.connect(store).execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0] == 40
    assert sqlite3.connect(store).execute("SELECT COUNT(*) FROM records").fetchone()[0] == 40


def _start_run(data: Path, store: Path, llm: OpenAIServer, *extra: str) -> subprocess.Popen[str]:
    cmd = [sys.executable, "-m", "greval", "run", str(data), "-s", "answer_alignment", "--store", str(store)]
    cmd += ["--judge", "openai:judge-test", "--base-url", llm.base_url, "-c", "4", "--quiet", *extra]
    return subprocess.Popen(
        cmd,
        # PYTHONFAULTHANDLER: a run that outlives its signal is sent SIGABRT (_ended), and prints every thread's stack.
        env={**os.environ, "OPENAI_API_KEY": TEST_KEY, "PYTHONFAULTHANDLER": "1"},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        # A background job inherits SIGINT as ignored; a user's terminal delivers it.
        preexec_fn=terminal_sigint,
    )


def _ended(proc: subprocess.Popen[str], timeout: float) -> str:
    """The run's stderr once it has ended. One that is still running after ``timeout`` fails the test with
    its stderr and every thread's stack (SIGABRT and the fault handler), and is gone afterwards."""
    try:
        return proc.communicate(timeout=timeout)[1]
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGABRT)
        try:
            err = proc.communicate(timeout=10)[1]
        except subprocess.TimeoutExpired:
            proc.kill()
            err = proc.communicate()[1]
        raise AssertionError(f"the run did not end within {timeout:.0f} s of its signal:\n{err}") from None


def _wait_for_verdicts(store: Path, n: int, timeout: float = 60) -> int:
    deadline = time.time() + timeout
    stored = 0
    while time.time() < deadline and stored < n:
        time.sleep(0.05)
        with contextlib.suppress(sqlite3.Error):
            stored = sqlite3.connect(store).execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]
    return int(stored)


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_mark_the_run_interrupted_and_keep_what_was_judged(
    llm: OpenAIServer, tmp_path: Path, sig: signal.Signals
) -> None:
    """A real SIGINT (20 times) or SIGTERM to `greval run`: exit 130 / 143 with one line, the run stored as
    'interrupted' with its summary, no crash (the store used to be closed under the loop thread still
    writing the run's last transaction: 'Cannot operate on a closed database', or a segfault)."""
    # Long enough (~60 s a run at 4 in flight) that every signal lands mid-run: the four runs of a batch start
    # together and are signalled one after the other, each once the one before has ended — at 200 records (~15 s)
    # the last of them could finish first on a loaded machine, and a signal after the run is not this test's case
    # (CI, 2026-11-29).
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, **r.data}) + "\n" for r in rag_records(800)))
    llm.configure(latency=0.3)
    tries = 20 if sig == signal.SIGINT else 4
    for batch in range(0, tries, 4):  # four at a time: the same signal, at different moments of a run
        stores = [tmp_path / f"s{sig}-{batch + k}.sqlite" for k in range(4)]
        procs = [_start_run(data, store, llm) for store in stores]
        try:
            for k, (store, proc) in enumerate(zip(stores, procs, strict=True)):
                stored = _wait_for_verdicts(store, 2 + k + batch // 4)
                proc.send_signal(sig)
                err = _ended(proc, 30)
                assert proc.returncode == (130 if sig == signal.SIGINT else 143), err
                assert "Traceback" not in err
                lines = [line for line in err.splitlines() if line.startswith("interrupted:")]
                assert len(lines) == 1 and "re-run the same command to resume" in lines[0], err
                with Store(store) as st:
                    [r] = st.runs()
                    kept = st.db.execute("SELECT COUNT(*) FROM verdicts").fetchone()[0]
                assert r["status"] == "interrupted" and r["finished_at"] is not None
                assert json.loads(r["summary"])["metrics"][0]["ok"] == kept >= stored
                assert f"{kept} verdict(s) stored" in lines[0]
        finally:  # a failure leaves no run calling the worker's test server during the next tests
            for proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.communicate()


@pytest.mark.slow
def test_a_second_signal_ends_a_large_run_within_seconds_with_the_resume_line_and_loses_no_verdict(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """Issue 40: after the first Ctrl-C a large run stores its dataset's snapshot (every record: seconds at
    50k records, a minute at 100k under load) and printed nothing meanwhile; the second Ctrl-C closed the store
    under that work ('Cannot operate on a closed database' tracebacks, "0 verdict(s) stored"), and a run once
    kept judging through two SIGINTs and a SIGTERM. Now the first says at once what happens, the second ends the
    process within seconds with the command that resumes, once the verdicts received are committed."""
    n, concurrency = 50_000, 8
    data = tmp_path / "data.jsonl"
    rows = ({"id": f"r{i}", "question": f"Q {i}?", "expected_answer": f"A {i}.", "answer": f"A {i}."} for i in range(n))
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = tmp_path / "s.sqlite"
    llm.configure(latency=0.3)
    proc = _start_run(data, store, llm, "-c", str(concurrency))
    _wait_for_verdicts(store, 20, timeout=120)
    proc.send_signal(signal.SIGINT)
    time.sleep(0.3)
    assert proc.poll() is None, "the first signal's bookkeeping ended before the second signal: no second signal"
    proc.send_signal(signal.SIGINT)
    second = time.monotonic()
    time.sleep(0.3)
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=60)
    took = time.monotonic() - second
    print(f"ended {took:.2f} s after the second signal")
    assert took < 5, f"the process ended {took:.1f} s after the second signal"
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Task exception" not in err, err
    assert err.count("stopping:") == 1, err
    [line] = [ln for ln in err.splitlines() if ln.startswith("interrupted:")]
    assert "every verdict received is stored; to resume, run again: " in line and str(store) in line, line
    time.sleep(0.6)  # the abandoned calls answered (to no one)
    answered = llm.stats()["by_status"].get("200", 0)
    with Store(store) as st:
        stored = st.db.execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0]
        assert st.db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0
        [r] = st.runs()
        assert r["status"] == "interrupted"  # its process is gone: reported as interrupted
        left = plan_work(resolve_specs(["answer_alignment"]), load_records(data), st, cfg(llm)).judgements
    # The only answers not stored: those of the calls the first signal abandoned (at most -c of them in flight).
    assert 0 <= answered - stored <= concurrency, (answered, stored)
    assert left == n - stored  # the re-run judges exactly what is missing


def test_a_killed_run_is_marked_interrupted_when_the_store_is_next_opened(llm: OpenAIServer, tmp_path: Path) -> None:
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, **r.data}) + "\n" for r in rag_records(20)))
    llm.configure(latency=0.2)
    store = tmp_path / "s.sqlite"
    proc = _start_run(data, store, llm)
    _wait_for_verdicts(store, 2)
    proc.kill()
    proc.wait(timeout=10)
    assert sqlite3.connect(store).execute("SELECT status FROM runs").fetchone()[0] == "running"
    listing = CliRunner().invoke(main, ["results", "runs", "--store", str(store)], env={"COLUMNS": "200"})
    assert "interrupted" in listing.output and "running" not in listing.output


@pytest.mark.slow
def test_two_runs_on_one_store_pay_once_for_what_they_share(llm: OpenAIServer, tmp_path: Path) -> None:
    """Two processes on overlapping records: each judgement is claimed before its call, and the other
    process waits for it and reuses it (it used to pay again for what the other had just stored)."""
    recs = rag_records(40)
    first, second = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    first.write_text("".join(json.dumps({"id": r.id, **r.data}) + "\n" for r in recs[:30]))
    second.write_text("".join(json.dumps({"id": r.id, **r.data}) + "\n" for r in recs[10:]))
    llm.configure(latency=0.1)
    store = tmp_path / "s.sqlite"
    procs = [_start_run(first, store, llm), _start_run(second, store, llm)]
    for proc in procs:
        _, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
    assert llm.stats()["total"] == 40  # one call per judgement: none paid twice
    with Store(store) as st:
        assert st.db.execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0] == 40
        assert st.db.execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0


def test_partly_judged_many_record_resumes_missing_items_only(llm: OpenAIServer, store_path: Path) -> None:
    llm.script([{"match": "Item ids", "times": 3, "action": {"type": "drop_ids", "ids": ["c2"]}}])
    specs = resolve_specs(["chunk_evaluation"])
    recs = rag_records(1)
    with Store(store_path) as st:
        first = run(specs, recs, st, cfg(llm), options=FAST)
        assert first.failed == 1
        llm.reset()
        untouched = run(specs, recs, st, cfg(llm), options=FAST)  # errors are final unless retried
        assert untouched.calls == 0 and llm.stats()["total"] == 0
        second = run(specs, recs, st, cfg(llm), options=FAST.model_copy(update={"retry_errors": True}))
        assert second.failed == 0
    [body] = llm.requests()
    assert "Item ids: c2" in body["messages"][-1]["content"]
    items = load_results(store_path)
    assert sorted(items["item_id"]) == ["c1", "c2", "c3"] and set(items["status"]) == {"ok"}


def test_depends_on_reads_stored_verdicts_when_resuming(llm: OpenAIServer, store_path: Path) -> None:
    recs = rag_records(2)
    with Store(store_path) as st:
        run(resolve_specs(["chunk_evaluation", "triple_evaluation"]), recs, st, cfg(llm), options=FAST)
        llm.reset()
        run(resolve_specs(["answer_completeness"]), recs, st, cfg(llm), options=FAST)
    bodies = llm.requests()
    assert len(bodies) == 2
    assert all("Verdicts of the metric 'chunk_evaluation'" in b["messages"][-1]["content"] for b in bodies)
    rec_frame = load_results(store_path, level="record")
    chunk = rec_frame[rec_frame["spec"] == "chunk_evaluation"]
    items = load_results(store_path, spec="chunk_evaluation")
    for _, row in chunk.iterrows():
        labels = items[items["record_id"] == row["record_id"]]["label"]
        assert row["score"] == pytest.approx((labels == "Relevant").mean())


def test_cli_run_and_export_without_leaking_the_key(llm: OpenAIServer, tmp_path: Path) -> None:
    data = tmp_path / "data.csv"
    pd.DataFrame(
        [
            {
                "qid": r.id,
                "query": r.data["question"],
                "response": r.data["answer"],
                "gold": r.data["expected_answer"],
            }
            for r in rag_records(5)
        ]
    ).to_csv(data, index=False)
    store = tmp_path / "s.sqlite"
    args = [
        "run",
        str(data),
        "-s",
        "answer_alignment",
        "--store",
        str(store),
        "--judge",
        "openai:judge-test",
        "--base-url",
        llm.base_url,
        "--map",
        "question=query",
        "--map",
        "answer=response",
        "--map",
        "expected_answer=gold",
        "--id-column",
        "qid",
    ]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "answer_alignment" in res.output
    for fmt in ("csv", "jsonl", "parquet"):
        out = tmp_path / f"out.{fmt}"
        res = CliRunner().invoke(main, ["results", "export", "--store", str(store), "-o", str(out)])
        assert res.exit_code == 0, res.output
        frame = {
            "csv": pd.read_csv,
            "jsonl": lambda p: pd.read_json(p, lines=True),
            "parquet": pd.read_parquet,
        }[fmt](out)
        assert sorted(frame["record_id"].astype(str)) == ["r0", "r1", "r2", "r3", "r4"]
    blob = store.read_bytes() + b"".join(p.read_bytes() for p in tmp_path.glob("s.sqlite*"))
    assert TEST_KEY.encode() not in blob
    assert TEST_KEY not in res.output


def test_cli_reports_missing_column_and_bad_key_in_one_line(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text('{"question": "q", "answer": "a"}\n')
    res = CliRunner().invoke(
        main,
        [
            "run",
            str(data),
            "-s",
            "answer_quality",
            "--store",
            str(tmp_path / "s.db"),
            "--map",
            "answer=nope",
            "--base-url",
            llm.base_url,
        ],
    )
    assert res.exit_code == 2 and "column 'nope'" in res.output
    monkeypatch.delenv("OPENAI_API_KEY")
    res = CliRunner().invoke(
        main,
        [
            "run",
            str(data),
            "-s",
            "answer_quality",
            "--store",
            str(tmp_path / "s.db"),
            "--judge",
            "openai:gpt-4o-mini",
        ],
    )
    assert res.exit_code == 2 and "no API key" in res.output


def test_data_formats_and_normalisation(tmp_path: Path) -> None:
    rows = [
        {
            "id": "a",
            "question": "q",
            "chunks": [{"chunk_id": "k1", "content": "x"}, "y"],
            "triples": [{"head": "h", "relation": "r", "tail": "t"}, ["s", "p", "o"]],
            "meta": {"q": "nested question"},
        }
    ]
    (tmp_path / "d.jsonl").write_text("\n".join(json.dumps(r) for r in rows))
    (tmp_path / "d.json").write_text(json.dumps({"records": rows}))
    flat = pd.DataFrame(
        [
            {
                **r,
                "chunks": json.dumps(r["chunks"]),
                "triples": json.dumps(r["triples"]),
                "meta": json.dumps(r["meta"]),
            }
            for r in rows
        ]
    )
    flat.to_csv(tmp_path / "d.csv", index=False)
    flat.to_parquet(tmp_path / "d.parquet")
    loaded = [load_records(tmp_path / f"d.{ext}")[0] for ext in ("jsonl", "json", "csv", "parquet")]
    for rec in loaded:
        assert rec.id == "a"
        assert rec.data["chunks"] == [{"id": "k1", "text": "x"}, {"id": "c2", "text": "y"}]
        assert rec.data["triples"] == [
            {"id": "t1", "subject": "h", "predicate": "r", "object": "t"},
            {"id": "t2", "subject": "s", "predicate": "p", "object": "o"},
        ]
    assert loaded[2].hash == loaded[3].hash
    nested = load_records(tmp_path / "d.jsonl", {"question": "meta.q"})[0]
    assert nested.data["question"] == "nested question"
    (tmp_path / "dup.jsonl").write_text('{"id": 1, "answer": "x"}\n{"id": 1, "answer": "y"}\n')
    with pytest.raises(DataError, match="two different records have the id '1'"):
        load_records(tmp_path / "dup.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"answer": "x"}\n{oops\n')
    with pytest.raises(DataError, match="line 2: invalid JSON"):
        load_records(tmp_path / "bad.jsonl")
    (tmp_path / "dupchunk.jsonl").write_text(json.dumps({"chunks": [{"id": 1, "text": "a"}, {"id": 1, "text": "b"}]}))
    with pytest.raises(DataError, match="two chunks have the id '1'"):
        load_records(tmp_path / "dupchunk.jsonl")


def test_value_spec_many_metric_mean_aggregate(llm: OpenAIServer, store_path: Path, tmp_path: Path) -> None:
    spec = parse_spec(
        yaml.safe_load("""
name: chunk_usefulness
description: Usefulness of each chunk.
steps: [Rate each chunk.]
inputs: [question, chunks]
target: {each: chunks}
scale: {kind: value, min: 0, max: 2, ranges: {'0': useless, '1': some use, '2': useful}}
""")
    )
    llm.script(
        [
            {
                "match": "Item ids",
                "action": {
                    "type": "respond",
                    "content": {
                        "verdicts": [
                            {"id": "c1", "reason": "a", "value": 0},
                            {"id": "c2", "reason": "b", "value": 2},
                            {"id": "c3", "reason": "c", "value": 2},
                        ]
                    },
                },
            }
        ]
    )
    with Store(store_path) as st:
        run([spec], rag_records(1), st, cfg(llm), options=FAST)
    rec = load_results(store_path, level="record")
    assert rec["score"].tolist() == [pytest.approx(4 / 3)]


def test_many_metric_on_a_record_without_items_is_done_once(llm: OpenAIServer, store_path: Path) -> None:
    """A "many" metric whose items are optional: a record without any is judged (no call, no verdict row)
    and counted as done, so the next run reuses it instead of judging it again."""
    body = resolve_specs(["triple_evaluation"])[0].model_dump(mode="json")
    body["name"] = "triples_optional"
    body["inputs"]["triples"]["required"] = False
    spec = parse_spec(body, "triples_optional.yaml")
    recs = [
        Record.from_mapping({"id": "none", "question": "Who?"}),
        Record.from_mapping({"id": "one", "question": "What?", "triples": [["s", "p", "o"]]}),
    ]
    with Store(store_path) as st:
        first = run([spec], recs, st, cfg(llm), options=FAST)
        assert llm.stats()["total"] == 1 and first.metrics[0].judged == 2 and first.metrics[0].verdicts == 1
        llm.reset()
        again = run([spec], recs, st, cfg(llm), options=FAST)
        assert llm.stats()["total"] == 0 and again.metrics[0].reused == 2 and again.metrics[0].judged == 0


# ------------------------------------------------------------- one figure everywhere (issue: numbers)
def _same_as(rec: Record, new_id: str) -> Record:
    """A record with the same content and another id (the verdict cache is keyed by content)."""
    return Record(id=new_id, hash=rec.hash, data=rec.data)


def _record_figures(frame: pd.DataFrame, spec: str) -> dict[str, Any]:
    """Counts and the dataset score recomputed by hand from an exported record-level table: the shipped
    specs pool their items (dataset_aggregate micro, the default), Σ score·units / Σ units."""
    grp = frame[frame["spec"] == spec]
    rows = grp[grp["status"].isin(["ok", "partial"]) & grp["score"].notna()]
    scores, units = rows["score"].astype(float), rows["units"].astype(float)
    counts = grp["status"].value_counts()
    return {
        "records": len(grp),
        "ok": int(counts.get("ok", 0)),
        "partial": int(counts.get("partial", 0)),
        "failed": int(counts.get("error", 0)),
        "skipped": int(counts.get("skipped", 0)),
        # greval sums with math.fsum (exactly rounded: the same score in whatever order rows are read)
        "mean_score": math.fsum(scores * units) / math.fsum(units) if math.fsum(units) > 0 else None,
    }


def test_identical_records_with_other_ids_are_judged_once_and_listed_each(
    llm: OpenAIServer, store_path: Path, tmp_path: Path
) -> None:
    recs = rag_records(5)
    recs.append(_same_as(recs[0], "r0-again"))
    specs = resolve_specs(["answer_alignment", "chunk_evaluation"])
    with Store(store_path) as st:
        summary = run(specs, recs, st, cfg(llm), options=FAST)
    # One call per content and metric: the copy costs nothing ...
    assert llm.stats()["total"] == 2 * 5 and summary.calls == 10
    assert summary.records == 6 and summary.distinct_contents == 5
    # ... but it is a record of the dataset: counted, listed and weighted under its own id.
    assert [(m.records, m.ok) for m in summary.metrics] == [(6, 6), (6, 6)]
    assert [m.judged + m.reused for m in summary.metrics] == [6, 6]
    items = load_results(store_path)
    assert sorted(items[items["spec"] == "answer_alignment"]["record_id"]) == sorted(r.id for r in recs)
    assert (items["spec"] == "chunk_evaluation").sum() == 6 * 3
    records = load_results(store_path, level="record")
    assert len(records) == 12 and set(records["record_id"]) == {r.id for r in recs}
    out = tmp_path / "v.csv"
    res = CliRunner().invoke(
        main, ["results", "export", "--store", str(store_path), "-o", str(out), "--level", "record"]
    )
    assert res.exit_code == 0, res.output
    assert "r0-again" in set(pd.read_csv(out)["record_id"])
    from greval.report.store_report import build

    rep = build(store_path, system_column=None)
    assert [m.records for m in rep.metrics] == [6, 6]
    with Store(store_path) as st:
        assert sorted(r.id for r in st.records()) == sorted(r.id for r in recs)
        assert st.record_ids([recs[0].hash])[recs[0].hash] == ["r0", "r0-again"]


def test_run_summary_report_and_export_agree_on_per_item_means(llm: OpenAIServer, store_path: Path) -> None:
    """A per-chunk metric's dataset score has one definition everywhere (the run summary once took the mean
    of item scores, the report the mean of record shares: 0.300 vs 0.000 on the same store); since issue 16
    the spec chooses it (dataset_aggregate, default micro: the items pooled)."""
    llm.script(
        [  # two records' chunk c2 never gets a verdict: those records are partial
            {"match": "Item ids: c1, c2, c3, c4", "times": 2, "action": {"type": "drop_ids", "ids": ["c2"]}},
            {"match": "Item ids: c2", "action": {"type": "drop_ids", "ids": ["c2"]}},
        ]
    )
    specs = resolve_specs(["chunk_evaluation", "triple_evaluation"])
    recs = rag_records(6, chunks=4)
    with Store(store_path) as st:
        summary = run(specs, recs, st, cfg(llm), options=FAST.model_copy(update={"retry": RetryPolicy(max_attempts=1)}))
    from greval.report.store_report import build

    rep = {m.metric: m for m in build(store_path, system_column=None).metrics}
    frame = load_results(store_path, level="record")
    for m in summary.metrics:
        by_hand = _record_figures(frame, m.spec)
        assert by_hand == {k: getattr(m, k) for k in by_hand}
        in_report = rep[m.spec].figures.model_dump()
        assert in_report == {k: v for k, v in m.model_dump().items() if k in in_report}
        assert rep[m.spec].score.mean == m.mean_score
    assert any(m.partial for m in summary.metrics)  # the dropped items made some records partial


def test_skipped_records_are_counted_explained_and_an_empty_metric_fails_the_run(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"Q{i}?", "answer": f"A{i}."}) + "\n" for i in range(10))
    )
    store = tmp_path / "s.sqlite"
    args = ["run", str(data), "-s", "answer_alignment", "--store", str(store), "--judge", "openai:judge-test"]
    res = CliRunner().invoke(main, [*args, "--base-url", llm.base_url])
    assert llm.stats()["total"] == 0
    assert res.exit_code == 1, res.output
    text = " ".join(res.output.split())
    assert "10 record(s) skipped — missing required input: expected_answer" in text
    assert "--map expected_answer=COLUMN" in text
    assert "no verdict at all for answer_alignment" in text
    rep = CliRunner().invoke(main, ["report", "--store", str(store), "-o", str(tmp_path / "rep")])
    assert rep.exit_code == 0, rep.output
    report = json.loads((tmp_path / "rep" / "report.json").read_text())
    [m] = report["metrics"]
    assert (m["figures"]["failed"], m["figures"]["skipped"], m["figures"]["records"]) == (0, 10, 10)
    assert "10 record(s) skipped" in (tmp_path / "rep" / "index.html").read_text()
    with Store(store) as st:
        [r] = st.runs()
    summ = json.loads(r["summary"])
    assert r["status"] == "finished" and summ["metrics"][0]["skipped"] == 10 and summ["metrics"][0]["failed"] == 0
    listing = CliRunner().invoke(main, ["results", "runs", "--store", str(store)], env={"COLUMNS": "200"})
    # the cell may wrap (an xdist worker's console keeps the width it was imported with): its words, in order
    words = re.sub(r"[│┃┏┓┗┛━─┡┩└┘\s]+", " ", listing.output)
    assert re.search(r"answer_alignment: .*— .*\(10 .*skipped\)", words), listing.output


def test_a_run_that_cannot_start_its_judge_is_marked_failed(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"question": "q", "answer": "a"}) + "\n")
    store = tmp_path / "s.sqlite"
    monkeypatch.delenv("OPENAI_API_KEY")
    res = CliRunner().invoke(
        main, ["run", str(data), "-s", "answer_quality", "--store", str(store), "--judge", "openai:gpt-4o-mini"]
    )
    assert res.exit_code == 2 and "no API key" in res.output
    with Store(store) as st:
        assert [r["status"] for r in st.runs()] == ["failed"]
    listing = CliRunner().invoke(main, ["results", "runs", "--store", str(store)])
    assert "failed" in listing.output and "running" not in listing.output


def test_a_computed_only_run_needs_no_judge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # No judge configured anywhere, and no local model to fall back to.
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GREVAL_JUDGE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GREVAL_HOME", str(tmp_path / "empty-home"))
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(
            json.dumps({"id": f"r{i}", "answer": f"Paris is in France [{i}].", "chunks": [f"c{i}"]}) + "\n"
            for i in range(3)
        )
    )
    res = CliRunner().invoke(main, ["run", str(data), "-s", "citation_validity", "--store", str(tmp_path / "s.sqlite")])
    assert res.exit_code == 0, res.output
    assert "judgement(s) to make" not in res.output and "local judge" not in res.output
    assert "3 computed score(s) to make" in " ".join(res.output.split())


def test_a_dependency_the_data_cannot_feed_is_left_out_with_a_note_and_fails_nothing(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """Issue 29, item 2: answer_completeness reads triples as optional; triple_evaluation, pulled in by its
    depends_on, needs them. On data without triples the dependent is judged without that dependency's verdicts
    (its prompt says why), a note says so, and the run (and its 0-call re-run) exits 0. Asked for by name, the
    same empty metric fails the run."""
    data = tmp_path / "d.jsonl"
    rows = [{"id": f"q{i}", "question": f"Q{i}?", "answer": f"A{i}.", "chunks": [f"c{i}"]} for i in range(3)]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = tmp_path / "s.sqlite"
    args = ["run", str(data), "-s", "answer_completeness", "--store", str(store), "--judge", "openai:judge-test"]
    args += ["--base-url", llm.base_url]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "6 judgement(s) to make, 3 to skip (a required input is absent)" in text
    assert (
        "answer_completeness: judged without the verdicts of triple_evaluation on 3 record(s) that lack triples, "
        "which triple_evaluation requires (the judge is told); triple_evaluation was only pulled in as a "
        "dependency, not asked for: this fails nothing"
    ) in text
    assert "no verdict at all for" not in text
    with Store(store) as st:
        [first] = st.runs()
    by = {m["spec"]: m for m in json.loads(first["summary"])["metrics"]}
    assert (by["triple_evaluation"]["judged"], by["triple_evaluation"]["skipped"]) == (0, 3)  # skipped, not judged
    assert by["answer_completeness"]["judged"] == 3 and not by["triple_evaluation"]["asked"]
    told = (
        "## Verdicts of the metric 'triple_evaluation'\n"
        "None: it does not apply to this record (missing required input: triples)."
    )
    prompts = [
        b["messages"][-1]["content"]
        for b in llm.requests()
        if "Metric: answer_completeness" in b["messages"][0]["content"]
    ]
    assert len(prompts) == 3
    assert all(told in p and "## Verdicts of the metric 'chunk_evaluation'" in p for p in prompts)

    calls = llm.stats()["total"]
    again = CliRunner().invoke(main, args)
    assert again.exit_code == 0, again.output
    assert llm.stats()["total"] == calls  # nothing judged twice
    assert "only pulled in as a dependency" in " ".join(again.output.split())  # the data has not changed

    named = CliRunner().invoke(main, [*args, "-s", "triple_evaluation"])
    assert named.exit_code == 1, named.output
    assert "no verdict at all for triple_evaluation" in " ".join(named.output.split())
    assert "only pulled in" not in named.output and llm.stats()["total"] == calls

    # The Python API: every spec given is asked for unless `asked` says which were.
    specs = resolve_specs(["answer_completeness"])
    with Store(store) as st:
        records = load_records(data)
        assert [m.spec for m in run(specs, records, st, cfg(llm)).empty_metrics] == ["triple_evaluation"]
        assert run(specs, records, st, cfg(llm), asked=["answer_completeness"]).empty_metrics == []


def test_a_run_of_skipped_records_judges_nothing_and_starts_no_local_judge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 29, item 10: every record lacks a column the metric requires. Nothing is judged (the summary's
    `judged` is 0, the skips are counted as skipped), and the embedded judge is neither built nor started: here
    it could not start at all (GREVAL_LLAMA_SERVER names no file), so a run that tried would fail with exit 2."""
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GREVAL_JUDGE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("GREVAL_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("GREVAL_LLAMA_SERVER", str(tmp_path / "no-llama-server"))
    model = tmp_path / "judge.gguf"
    model.write_bytes(b"GGUF" + b"x" * 1000)  # identified by its content; never loaded
    data = tmp_path / "d.jsonl"
    data.write_text(
        "".join(json.dumps({"id": f"q{i}", "question": f"Q{i}?", "answer": f"A{i}."}) + "\n" for i in range(4))
    )
    store = tmp_path / "s.sqlite"
    args = ["run", str(data), "-s", "answer_alignment", "--store", str(store), "--judge", f"gguf:{model}"]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 1, res.output  # the metric asked for has no verdict at all: that fails the run
    text = " ".join(res.output.split())
    assert "(no call to make)" in text and "0 judgement(s) to make, 4 to skip (a required input is absent)" in text
    assert "starting the embedded local judge" not in text and "no verdict at all for answer_alignment" in text
    with Store(store) as st:
        [stored] = st.runs()
    [m] = json.loads(stored["summary"])["metrics"]
    assert (m["judged"], m["reused"], m["skipped"], m["calls"]) == (0, 0, 4, 0)


@settings(
    max_examples=12,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    derandomize=True,
)
@given(data=st.data())
def test_run_summary_report_export_and_store_show_the_same_figures(
    llm: OpenAIServer, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Property: for random stores — identical records under other ids, per-item metrics, skipped, failed
    and partly failed judgements — the run summary, the stored run, ``greval report``, ``load_results`` and
    a CSV export give the same counts and the same dataset score for every metric."""
    from greval.report.store_report import build
    from greval.store.results import figures

    n = data.draw(st.integers(1, 6), label="records")
    recs: list[Record] = []
    rules: list[dict[str, Any]] = []
    for i in range(n):
        row: dict[str, Any] = {"id": f"r{i}", "question": f"Question number {i}?", "answer": f"Answer {i}."}
        if data.draw(st.booleans(), label=f"r{i} has expected_answer"):
            row["expected_answer"] = f"Expected {i}."
        k = data.draw(st.integers(0, 3), label=f"r{i} chunks")
        if k:
            row["chunks"] = [f"chunk {i}.{j}" for j in range(k)]
        recs.append(Record.from_mapping(row))
        fault = data.draw(st.sampled_from(["none", "none", "malformed", "drop"]), label=f"r{i} fault")
        if fault == "malformed":
            rules.append({"match": f"Question number {i}?", "action": {"type": "malformed"}})
        elif fault == "drop" and k:
            rules.append({"match": f"Question number {i}?", "action": {"type": "drop_ids", "ids": ["c1"]}})
    for j in data.draw(st.lists(st.integers(0, n - 1), max_size=3), label="copies"):
        recs.append(_same_as(recs[j], f"copy{len(recs)}-of-{recs[j].id}"))
    llm.reset()
    llm.script(rules)
    path = tmp_path_factory.mktemp("prop") / "s.sqlite"
    specs = resolve_specs(["answer_alignment", "chunk_evaluation"])
    opts = FAST.model_copy(update={"retry": RetryPolicy(max_attempts=2, base_delay=0.0, max_delay=0.0)})
    with Store(path) as store:
        summary = run(specs, recs, store, cfg(llm), options=opts)
        in_store = {f.spec: f for f in figures(store)}
        [stored_run] = store.runs()
    stored = {m["spec"]: m for m in json.loads(stored_run["summary"])["metrics"]}
    rep = {m.metric: m for m in build(path, system_column=None, bootstrap_resamples=10).metrics}
    frame = load_results(path, level="record")
    out = path.parent / "records.csv"
    export_results(path, out, level="record")
    exported = pd.read_csv(out, dtype={"record_id": str}, keep_default_na=False, na_values=[""])
    for m in summary.metrics:
        for what in ("partial", "failed", "skipped"):
            if getattr(m, what):
                event(f"{m.spec} {what}")  # --hypothesis-show-statistics shows what the examples covered
        mine = m.model_dump()
        if m.records == 0:
            assert m.spec not in in_store
            continue
        same = in_store[m.spec].model_dump()
        assert same == {k: mine[k] for k in same}
        assert {k: stored[m.spec][k] for k in same} == same
        assert rep[m.spec].figures.model_dump() == same
        assert rep[m.spec].score.mean == pytest.approx(m.mean_score) if m.mean_score is not None else True
        by_hand = _record_figures(frame, m.spec)
        assert by_hand == {k: mine[k] for k in by_hand}
        from_csv = _record_figures(exported, m.spec)
        assert from_csv["mean_score"] == pytest.approx(by_hand["mean_score"]) if by_hand["mean_score"] else True
        assert {k: v for k, v in from_csv.items() if k != "mean_score"} == {
            k: v for k, v in by_hand.items() if k != "mean_score"
        }
        # Every record id of the dataset is there, once per metric.
        assert m.records == len(recs)
        assert sorted(frame[frame["spec"] == m.spec]["record_id"]) == sorted(r.id for r in recs)


def test_a_row_repeated_exactly_is_read_once_and_said(llm: OpenAIServer, tmp_path: Path) -> None:
    data = tmp_path / "d.jsonl"
    row = {"id": "a", "question": "q?", "answer": "x", "expected_answer": "x"}
    data.write_text("".join(json.dumps(r) + "\n" for r in [row, {**row, "id": "b"}, row]))
    store = tmp_path / "s.sqlite"
    args = ["run", str(data), "-s", "answer_alignment", "--store", str(store), "--judge", "openai:judge-test"]
    res = CliRunner().invoke(main, [*args, "--base-url", llm.base_url])
    assert res.exit_code == 0, res.output
    text = " ".join(res.output.split())
    assert "1 row(s) repeat an earlier row exactly (same id and content), read once: rows 3" in text
    assert "judging 2 records (1 share their content with another: judged once)" in text


# ------------------------------------------------------------------------------- streamed records (issue 12)
_RERUN_PROBE = """
import json, sys
from greval.dataset.records import DataFile, Record

built = 0
init = Record.__init__


def counting(self, **data):
    global built
    built += 1
    init(self, **data)


Record.__init__ = counting
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.spec import resolve_specs
from greval.store.store import Store, spec_keys

data, store, base_url = sys.argv[1:4]
cfg = JudgeConfig.parse("openai:judge-test", base_url=base_url, timeout=10)
with Store(store) as st:
    s = run(resolve_specs(["answer_alignment", "chunk_evaluation"]), DataFile(data), st, cfg)
    snapshots = [r["snapshot"] for r in st.query("SELECT snapshot FROM runs ORDER BY started_at")]
print(json.dumps({
    "built": built,
    "calls": s.calls,
    "records": s.records,
    "distinct": s.distinct_contents,
    "figures": [(m.records, m.ok, m.judged, m.reused) for m in s.metrics],
    "snapshots": snapshots,
    "modules": sorted({m.split(".")[0] for m in sys.modules}),
}))
"""


def _rows_file(path: Path, n: int, copy: int = 0) -> list[dict[str, Any]]:
    rows = [
        {"id": f"r{i}", "question": f"Q{i}?", "answer": f"A{i}.", "expected_answer": f"E{i}.", "chunks": [f"c{i}"]}
        for i in range(n)
    ]
    rows.append({**rows[copy], "id": f"r{copy}-copy"})  # same content, other id: judged once, listed twice
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def test_a_finished_job_rerun_streams_builds_no_record_and_imports_no_judge_stack(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    data, store = tmp_path / "d.jsonl", tmp_path / "s.sqlite"
    _rows_file(data, 30)
    specs = resolve_specs(["answer_alignment", "chunk_evaluation"])
    with Store(store) as st:
        first = run(specs, load_records(data), st, cfg(llm), options=FAST)
    assert first.calls == 60 and first.records == 31 and first.distinct_contents == 30
    done = subprocess.run(
        [sys.executable, "-c", _RERUN_PROBE, str(data), str(store), llm.base_url],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    got = json.loads(done.stdout.strip().splitlines()[-1])
    # Nothing to do: no Record validated, no LangChain / openai imported, no call ...
    assert got["built"] == 0
    assert [m for m in got["modules"] if m == "openai" or m.startswith("langchain")] == []
    assert got["calls"] == 0 and llm.stats()["total"] == 60
    # ... and the same run all the same: every count of the summary, and the dataset's snapshot.
    assert got["records"] == 31 and got["distinct"] == 30
    assert got["figures"] == [[31, 31, 0, 31], [31, 31, 0, 31]]
    assert len(got["snapshots"]) == 2 and got["snapshots"][0] == got["snapshots"][1]


def test_streamed_plan_keeps_dedup_limit_resume_and_counts_across_chunks(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Records planned 4 at a time: a content repeated in a later chunk is judged once, a row repeated
    exactly is read once, --limit and a resumed run count what a list of Records counts."""
    import greval.runner.plan as planning
    from greval.dataset.records import DataFile

    monkeypatch.setattr(planning, "PLAN_CHUNK", 4)
    data = tmp_path / "d.jsonl"
    rows = _rows_file(data, 10, copy=7)  # r7 in the second chunk, its copy in the third
    with data.open("a") as fh:
        fh.write(json.dumps(rows[3]) + "\n")  # row 4 again, exactly
    specs = resolve_specs(["answer_alignment", "chunk_evaluation"])
    streamed, listed = tmp_path / "streamed.sqlite", tmp_path / "listed.sqlite"
    summaries = []
    for store, recs in ((streamed, lambda **kw: DataFile(data, **kw)), (listed, lambda **kw: load_records(data, **kw))):
        with Store(store) as st:
            part = run(specs, recs(limit=6), st, cfg(llm), options=FAST)
            assert part.records == 6 and part.calls == 12
            plan = planning.plan_work(specs, recs(), st, cfg(llm))
            assert (plan.records, plan.distinct_contents, plan.judgements) == (11, 10, 8)
            assert len(plan.unique) == 4 and {r.id for r in plan.unique} == {"r6", "r7", "r8", "r9"}
            unstored = {"r6", "r7", "r8", "r9", "r7-copy"} if store == streamed else {r["id"] for r in rows}
            assert {r.id for r in plan.unstored} == unstored  # a file's rows the store has are not held
            summaries.append(run(specs, recs(), st, cfg(llm), options=FAST, plan=plan))
            ids = st.query(
                "SELECT record_id FROM snapshot_members WHERE snapshot=(SELECT snapshot FROM runs"
                " ORDER BY started_at DESC LIMIT 1)"
            )
            assert sorted(r["record_id"] for r in ids) == sorted({r["id"] for r in rows})
    a, b = summaries
    assert a.calls == b.calls == 8 and a.records == b.records == 11 and a.distinct_contents == 10
    assert [m.model_dump() for m in a.metrics] == [m.model_dump() for m in b.metrics]
    assert [(m.records, m.ok, m.judged, m.reused) for m in a.metrics] == [(11, 11, 4, 7), (11, 11, 4, 7)]


def _run_logprobs(data: Path, store: Path, llm: OpenAIServer, *extra: str) -> Any:
    args = ["run", str(data), "-s", "answer_alignment", "-s", "chunk_evaluation", "--store", str(store)]
    args += ["--judge", "openai:judge-test", "--base-url", llm.base_url, "--quiet", *extra]
    return CliRunner().invoke(main, args, env={"COLUMNS": "200"})


def _token_confidences(store: Path) -> list[float | None]:
    db = sqlite3.connect(store)
    try:
        return [r[0] for r in db.execute("SELECT token_confidence FROM verdicts WHERE status='ok' ORDER BY rowid")]
    finally:
        db.close()


def test_cli_run_logprobs_stores_a_token_confidence_per_verdict(llm: OpenAIServer, tmp_path: Path) -> None:
    """``greval run --logprobs`` over HTTP: every verdict (record and chunk ones) gets its token confidence, they
    differ from item to item, the export carries them, and a re-run without the flag judges nothing again (the
    flag is not part of the judge's identity)."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, **r.data}) + "\n" for r in rag_records(6)))
    store = tmp_path / "s.sqlite"
    llm.configure(logprobs="on")
    try:
        res = _run_logprobs(data, store, llm, "--logprobs", "--top-logprobs", "4")
        assert res.exit_code == 0, res.output
        assert "note:" not in res.output  # every answer had them
        bodies = llm.requests()
        assert bodies and all(b["logprobs"] is True and b["top_logprobs"] == 4 for b in bodies)
        confs = _token_confidences(store)
        # The server draws the chosen value's probability in [0.34, 0.99] and gives 95 % of the rest to the other
        # values: their share among the values, the confidence, is at most 0.99 / (0.99 + 0.95 · 0.01) < 0.991.
        assert len(confs) == 6 + 18 and all(c is not None and 0.34 <= c < 0.991 for c in confs)
        assert len({round(c or 0, 9) for c in confs}) > 20
        out = tmp_path / "out.csv"
        assert CliRunner().invoke(main, ["results", "export", "--store", str(store), "-o", str(out)]).exit_code == 0
        frame = pd.read_csv(out)
        assert frame["token_confidence"].notna().all() and len(frame) == 24
        llm.reset()
        again = _run_logprobs(data, store, llm)
        assert again.exit_code == 0, again.output
        assert llm.stats()["total"] == 0  # nothing re-judged for the flag's sake
    finally:
        llm.configure(logprobs="null")


@pytest.mark.parametrize("mode", ["null", "reject"])
def test_cli_run_logprobs_falls_back_with_one_note(llm: OpenAIServer, tmp_path: Path, mode: str) -> None:
    """A server that ignores the parameter (``null``) or refuses it (``reject``, a 400 naming logprobs): the run
    completes, no verdict has a token confidence, and the summary says why once, not once per item."""
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps({"id": r.id, **r.data}) + "\n" for r in rag_records(5)))
    store = tmp_path / "s.sqlite"
    llm.configure(logprobs=mode)
    try:
        res = _run_logprobs(data, store, llm, "--logprobs")
    finally:
        llm.configure(logprobs="null")
    assert res.exit_code == 0, res.output
    confs = _token_confidences(store)
    assert len(confs) == 5 + 15 and all(c is None for c in confs)
    notes = [line for line in res.output.splitlines() if line.startswith("note:")]
    assert len(notes) == 1, res.output
    if mode == "null":
        assert "10 of 10 answer(s) without token log-probabilities" in notes[0]
    else:
        assert "not asked for the rest of the run" in notes[0]
        bodies = llm.requests()
        asked = [b for b in bodies if b.get("logprobs")]
        # At most one refused call per judgement (those in flight before the refusal was heard), and then each
        # of the 10 judgements answered once without the parameter.
        assert 1 <= len(asked) <= 10 and len(bodies) - len(asked) == 10


# ------------------------------------------------------------------------ --sample / --sample-items (issue 16)
def _sample_data(path: Path, n: int, chunks: int = 3, reverse: bool = False) -> list[Record]:
    recs = rag_records(n, chunks)
    rows = [{"id": r.id, **r.data} for r in recs]
    path.write_text("".join(json.dumps(r) + "\n" for r in (rows[::-1] if reverse else rows)))
    return recs


def _cli_sample(data: Path, store: Path, llm: OpenAIServer, specs: tuple[str, ...], *extra: str) -> Any:
    args = ["run", str(data), "--store", str(store), "--judge", "openai:judge-test", "--base-url", llm.base_url]
    args += [x for s in specs for x in ("-s", s)] + ["--quiet", *extra]
    return CliRunner().invoke(main, args, env={"COLUMNS": "250"})


def _last_run(store: Path) -> tuple[dict[str, Any], dict[str, Any], set[str]]:
    """The latest run's stored options, its summary and the record ids of its snapshot."""
    with Store(store) as st:
        run_row = st.runs()[-1]
        ids = st.query(
            "SELECT record_id FROM snapshot_members WHERE snapshot=(SELECT snapshot FROM runs WHERE run_id=?)",
            (run_row["run_id"],),
        )
    return json.loads(run_row["options"]), json.loads(run_row["summary"]), {r["record_id"] for r in ids}


def test_sample_draws_reproducibly_a_superset_for_a_larger_n_whatever_the_file_order(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """``--sample N``: N records judged; the same N and seed again (also from the file reversed) draw the same
    records and pay nothing; a larger N pays only for the records it adds; another seed draws other records;
    N ≥ the dataset judges all with a note. The run's stored options and summary carry the parameters."""
    data, backwards, store = tmp_path / "d.jsonl", tmp_path / "r.jsonl", tmp_path / "s.sqlite"
    recs = _sample_data(data, 40)
    _sample_data(backwards, 40, reverse=True)
    spec = ("answer_alignment",)
    res = _cli_sample(data, store, llm, spec, "--sample", "10")
    assert res.exit_code == 0, res.output
    assert llm.stats()["total"] == 10
    assert "sample: 10 of 40 records drawn at random (seed 0" in res.output
    assert "judging 10 records" in " ".join(res.output.split())  # the plan is the sample's, before any call
    listing = CliRunner().invoke(main, ["results", "runs", "--store", str(store)], env={"COLUMNS": "250"})
    assert "10 of 40 (sample, seed 0)" in listing.output
    options, summary, ten = _last_run(store)
    assert options["sample"] == {"records": 10, "items": None, "seed": 0}
    assert summary["records"] == 10 and summary["sample"]["records_drawn"] == 10
    assert summary["sample"]["records_of"] == 40 and summary["sample"]["seed"] == 0
    assert len(ten) == 10 and ten != {r.id for r in recs[:10]}  # drawn, not the first ten rows
    assert {r["record_id"] for r in load_results(store).to_dict("records")} == ten
    llm.reset()
    for again in (data, backwards):  # the same sample: resumed / re-run, from either order, pays nothing
        res = _cli_sample(again, store, llm, spec, "--sample", "10")
        assert res.exit_code == 0, res.output
        assert llm.stats()["total"] == 0 and _last_run(store)[2] == ten
    res = _cli_sample(backwards, store, llm, spec, "--sample", "16")
    assert res.exit_code == 0, res.output
    sixteen = _last_run(store)[2]
    assert len(sixteen) == 16 and sixteen > ten and llm.stats()["total"] == 6  # only the six it adds
    llm.reset()
    res = _cli_sample(data, store, llm, spec, "--sample", "10", "--sample-seed", "7")
    assert res.exit_code == 0, res.output
    other = _last_run(store)
    assert other[0]["sample"]["seed"] == 7 and len(other[2]) == 10 and other[2] != ten
    assert llm.stats()["total"] == len(other[2] - sixteen)
    llm.reset()
    res = _cli_sample(data, store, llm, spec, "--sample", "500")
    assert res.exit_code == 0, res.output
    assert "--sample 500 is not less than the dataset's 40 record(s): every record is judged" in res.output
    assert len(_last_run(store)[2]) == 40 and llm.stats()["total"] == 40 - len(sixteen | other[2])


def test_sample_of_a_streamed_file_and_of_records_in_memory_is_the_same_and_a_full_run_pays_the_rest(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import greval.runner.plan as planning
    from greval.dataset.records import DataFile
    from greval.dataset.sample import Sample

    monkeypatch.setattr(planning, "PLAN_CHUNK", 3)  # the sample is drawn before the plan's chunks
    data, store = tmp_path / "d.jsonl", tmp_path / "s.sqlite"
    recs = _sample_data(data, 25)
    specs = resolve_specs(["answer_alignment"])
    sample = FAST.model_copy(update={"sample": Sample(records=7, seed=3)})
    with Store(store) as st:
        streamed = planning.plan_work(specs, DataFile(data), st, cfg(llm), sample=sample.sample)
        listed = planning.plan_work(specs, recs[::-1], st, cfg(llm), sample=sample.sample)
        assert [r.id for r in streamed.unique] == [r.id for r in listed.unique][::-1]
        assert (streamed.records, streamed.population, streamed.judgements) == (7, 25, 7)
        limited = planning.plan_work(specs, DataFile(data, limit=10), st, cfg(llm), sample=Sample(records=4))
        assert limited.population == 10 and {r.id for r in limited.unique} <= {f"r{i}" for i in range(10)}
        assert len(limited.unique) == 4  # --limit keeps the first rows; the sample is drawn from those
        first = run(specs, DataFile(data), st, cfg(llm), options=sample)
        assert first.calls == 7 and first.records == 7 and first.metrics[0].records == 7
        assert first.sample is not None and (first.sample.records_drawn, first.sample.records_of) == (7, 25)
        whole = run(specs, DataFile(data), st, cfg(llm), options=FAST)
        assert whole.calls == 18 and whole.sample is None and whole.metrics[0].reused == 7


def test_sample_items_limits_what_the_judge_sees_and_a_larger_n_pays_only_the_extra_items(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """``--sample-items N`` on a many-metric: each call asks about N of a record's items (the judge is shown
    those chunks only), item ids are kept, the figures count the items drawn, a re-run pays nothing, a larger N
    asks only about the items it adds, and going back to the smaller N pays nothing and says why the figures
    count more items than it drew."""
    data, store = tmp_path / "d.jsonl", tmp_path / "s.sqlite"
    _sample_data(data, 6, chunks=5)
    spec = ("chunk_evaluation",)
    res = _cli_sample(data, store, llm, spec, "--sample-items", "2")
    assert res.exit_code == 0, res.output
    bodies = llm.requests()
    assert len(bodies) == 6  # one call per record, as without sampling
    asked: dict[str, list[str]] = {}
    for body in bodies:
        text = body["messages"][-1]["content"]
        ids = text.split("Item ids: ")[1].splitlines()[0].split(", ")
        assert len(ids) == 2 and set(ids) <= {f"c{k}" for k in range(1, 6)}
        number = text.split("chunk ")[1].split(".")[0]
        shown = {f"c{int(k) + 1}" for k in range(5) if f"chunk {number}.{k}" in text}
        assert shown == set(ids)  # the judge saw the drawn chunks and no other
        asked[f"r{number}"] = ids
    assert len({tuple(v) for v in asked.values()}) > 1  # drawn per record, not the same two everywhere
    items = load_results(store, spec="chunk_evaluation")
    assert {(r["record_id"], r["item_id"]) for r in items.to_dict("records")} == {
        (rid, i) for rid, ids in asked.items() for i in ids
    }
    assert "items sampled: at most 2 per record (seed 0): chunk_evaluation 12 of 30 items drawn" in res.output
    options, summary, ids = _last_run(store)
    assert options["sample"] == {"records": None, "items": 2, "seed": 0} and len(ids) == 6
    assert summary["sample"]["items_drawn"] == {"chunk_evaluation": 12}
    assert summary["sample"]["items_of"] == {"chunk_evaluation": 30}
    [metric] = summary["metrics"]
    assert metric["items"] == 12 and metric["items_ok"] == 12 and metric["records"] == 6
    llm.reset()
    assert _cli_sample(data, store, llm, spec, "--sample-items", "2").exit_code == 0
    assert llm.stats()["total"] == 0
    res = _cli_sample(data, store, llm, spec, "--sample-items", "3")
    assert res.exit_code == 0, res.output
    for body in llm.requests():
        text = body["messages"][-1]["content"]
        [new] = text.split("Item ids: ")[1].splitlines()[0].split(", ")
        assert new not in asked["r" + text.split("chunk ")[1].split(".")[0]]
    assert llm.stats()["total"] == 6 and len(load_results(store, spec="chunk_evaluation")) == 18
    llm.reset()
    res = _cli_sample(data, store, llm, spec, "--sample-items", "2")
    assert res.exit_code == 0 and llm.stats()["total"] == 0
    assert "chunk_evaluation: the figures count 18 items, 6 more than drawn" in res.output


def test_sample_items_with_no_many_metric_says_so_and_a_record_sample_combines(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    data, store = tmp_path / "d.jsonl", tmp_path / "s.sqlite"
    _sample_data(data, 12, chunks=4)
    res = _cli_sample(data, store, llm, ("answer_alignment",), "--sample-items", "1")
    assert res.exit_code == 0, res.output
    assert "--sample-items 1: no metric here judges items one by one" in res.output
    assert llm.stats()["total"] == 12
    llm.reset()
    res = _cli_sample(
        data, store, llm, ("answer_alignment", "chunk_evaluation"), "--sample", "5", "--sample-items", "3"
    )
    assert res.exit_code == 0, res.output
    assert llm.stats()["total"] == 5  # answer_alignment is stored for all twelve; chunks for five
    assert all(len(b["messages"][-1]["content"].split("Item ids: ")[1].split(", ")) == 3 for b in llm.requests())
    options, summary, ids = _last_run(store)
    assert options["sample"] == {"records": 5, "items": 3, "seed": 0} and len(ids) == 5
    assert summary["sample"]["items_drawn"] == {"chunk_evaluation": 15}
    assert summary["sample"]["items_of"] == {"chunk_evaluation": 20}


@pytest.mark.parametrize(
    ("extra", "said"),
    [
        (("--sample", "0"), "'--sample': 0 is not in the range x>=1"),
        (("--sample", "-3"), "'--sample': -3 is not in the range x>=1"),
        (("--sample", "ten"), "'--sample': 'ten' is not a valid integer"),
        (("--sample-items", "0"), "'--sample-items': 0 is not in the range x>=1"),
        (("--sample-seed", "3"), "--sample-seed chooses a sample: give --sample N"),
    ],
)
def test_bad_sample_values_are_a_one_line_usage_error(
    llm: OpenAIServer, tmp_path: Path, extra: tuple[str, ...], said: str
) -> None:
    data = tmp_path / "d.jsonl"
    _sample_data(data, 3)
    res = _cli_sample(data, tmp_path / "s.sqlite", llm, ("answer_alignment",), *extra)
    assert res.exit_code == 2 and "Traceback" not in res.output
    [line] = [x for x in res.output.splitlines() if x.startswith("Error:")]
    assert said in line, res.output
    assert llm.stats()["total"] == 0 and not (tmp_path / "s.sqlite").exists()


def test_sample_draws_are_uniform_and_ranked_by_id_not_position() -> None:
    """Over many seeds every record (and every item) is drawn about N / M of the time, and a draw is a function
    of the ids drawn from, not of their order."""
    from collections import Counter

    from greval.dataset.records import HashedRow
    from greval.dataset.sample import sample_items, sample_records

    rows = [HashedRow(f"id{i}", f"h{i}", {}) for i in range(20)]
    ids = [f"c{k}" for k in range(8)]
    seeds = range(2000)
    picked: Counter[str] = Counter()
    items: Counter[str] = Counter()
    for seed in seeds:
        drawn, total = sample_records(rows, 5, seed)
        assert total == 20 and len(drawn) == 5
        assert [r.id for r in drawn] == [r.id for r in rows if r in drawn]  # kept in the order read
        picked.update(r.id for r in drawn)
        items.update(sample_items(ids, 2, seed, "somehash"))
    # Binomial(2000, 1/4): sd 19.4, the bounds are 5 sd; items Binomial(2000, 1/4) alike.
    assert all(403 <= picked[r.id] <= 597 for r in rows), picked
    assert all(403 <= items[i] <= 597 for i in ids), items
    shuffled = rows[7:] + rows[:7]
    assert {r.id for r in sample_records(shuffled, 6, 11)[0]} == {r.id for r in sample_records(rows, 6, 11)[0]}
    assert set(sample_items(ids[::-1], 3, 5, "h")) == set(sample_items(ids, 3, 5, "h"))
    assert sample_items(ids, 99, 0, "h") == ids and sample_records(rows, 99, 0)[0] == rows


def test_verdicts_are_committed_in_groups_and_claims_taken_ahead(llm: OpenAIServer, store_path: Path) -> None:
    """Group commit and claims taken ahead: a run of 64 calls at 16 in flight commits a few transactions, not
    the two per call it used to (a claim, then the verdict: 128 and more); its stored rows are those of a run
    at concurrency 1; and a verdict queued with defer=True is invisible to other connections until committed,
    but read back at once by its own connection (Store.result and Store.pending commit the queue first)."""
    llm.configure(latency=0.05)
    specs = resolve_specs(["answer_alignment"])
    recs = rag_records(64)
    commits: list[str] = []
    with Store(store_path) as st:
        st.db.set_trace_callback(lambda sql: commits.append(sql) if sql.strip().upper() == "COMMIT" else None)
        summary = run(specs, recs, st, cfg(llm), options=RunOptions(concurrency=16))
        st.db.set_trace_callback(None)
    assert summary.calls == 64 and summary.failed == 0
    assert len(commits) < 32, len(commits)
    other = store_path.with_name("one_at_a_time.sqlite")
    with Store(other) as st:
        run(specs, recs, st, cfg(llm), options=RunOptions(concurrency=1))
    cols = "spec_name, record_id, item_id, status, label, value, score, reason, error, error_kind"
    grouped = sqlite3.connect(store_path).execute(f"SELECT {cols} FROM verdicts ORDER BY record_id").fetchall()
    one_by_one = sqlite3.connect(other).execute(f"SELECT {cols} FROM verdicts ORDER BY record_id").fetchall()
    assert grouped == one_by_one and len(grouped) == 64
    assert sqlite3.connect(store_path).execute("SELECT COUNT(*) FROM claims").fetchone()[0] == 0

    spec = specs[0]
    key = spec_keys(specs)[spec.name]
    judge = cfg(llm)
    extra = rag_records(66)[64:]
    with Store(store_path) as st:
        for rec in extra:
            result = JudgeResult(spec=spec.name, spec_hash=spec.hash, verdicts=[ItemVerdict(label="aligned")])
            st.put_result(None, key, judge, rec, result, defer=True)
        assert st.queued == 2
        assert sqlite3.connect(store_path).execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == 64
        assert st.pending(key, judge.key, [recs[0]], None) == [None]  # not about a queued one: no commit
        assert st.queued == 2
        assert st.pending(key, judge.key, [extra[0]], None) == [None] and st.queued == 0
        assert sqlite3.connect(store_path).execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == 66
        st.put_result(None, key, judge, rag_records(67)[66], result, defer=True)
    # closing the store commits what was queued
    assert sqlite3.connect(store_path).execute("SELECT COUNT(*) FROM verdicts").fetchone()[0] == 67


RUNNER = Path(__file__).resolve().parents[1] / "greval" / "runner"


def test_the_run_path_stays_readable() -> None:
    """Issue 30: greval/runner/ has no function over 60 lines and none ranked D or worse by radon (cyclomatic
    complexity above 20; radon is in the dev extra, so that half is skipped without it). runner.py had a
    158-line _judge_all (D 24) and arun D 30."""
    modules = {p.name for p in RUNNER.glob("*.py")}
    assert {"options.py", "plan.py", "job.py", "judging.py", "driver.py"} <= modules
    long = []
    for path in sorted(RUNNER.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > 60:
                    long.append(f"{path.name}:{node.lineno} {node.name} ({lines} lines)")
    assert not long, long
    complexity = pytest.importorskip("radon.complexity", reason="radon is in the dev extra")
    worst = [
        f"{path.name}:{block.lineno} {block.name} ({block.complexity})"
        for path in sorted(RUNNER.rglob("*.py"))
        for block in complexity.cc_visit(path.read_text(encoding="utf-8"))
        if complexity.cc_rank(block.complexity) in ("D", "E", "F")
    ]
    assert not worst, worst


def test_run_with_metric_names_or_a_dataframe_points_to_evaluate(store_path: Path) -> None:
    """Issue 33: `greval.run(["answer_alignment"], df)` (what a Ragas / DeepEval user types first) was an
    AttributeError deep in the plan; it is one UserError naming greval.evaluate."""
    import greval

    df = pd.DataFrame([{"question": "q", "answer": "a"}])
    cfg = greval.JudgeConfig.parse("openai:judge-test", base_url="http://127.0.0.1:9/v1")
    with Store(store_path) as st:
        with pytest.raises(greval.UserError, match=r"greval\.evaluate\(data, metrics\)"):
            greval.run(["answer_alignment"], df, st, cfg)  # type: ignore[list-item]
        with pytest.raises(greval.UserError, match="takes Records"):
            greval.run(greval.resolve_specs(["answer_alignment"]), df, st, cfg)
