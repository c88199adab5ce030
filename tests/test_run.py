"""Stage 3 — running a dataset into the store: resumable, never paying twice, losing nothing."""

from __future__ import annotations

import json
import os
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

from greval import load_records, load_results
from greval.cli import main
from greval.data import Record
from greval.errors import DataError
from greval.execution import RetryPolicy
from greval.models import JudgeConfig
from greval.runner import RunOptions, run
from greval.spec import parse_spec, resolve_specs
from greval.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.conftest import TEST_KEY

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
        linked = st.db.execute("SELECT COUNT(*) FROM run_records WHERE run_id=?", (again.run_id,)).fetchone()[0]
        assert linked == 6
        edited = specs[0].model_copy(update={"steps": [*specs[0].steps, "Be strict."]})
        run([edited, specs[1]], recs, st, cfg(llm), options=FAST)
        assert llm.stats()["total"] == 6
        assert all("Metric: answer_alignment" in b["messages"][0]["content"] for b in llm.requests())
        llm.reset()
        run(specs, recs, st, cfg(llm, temperature=0.7), options=FAST)  # a new judge identity
        assert llm.stats()["total"] == 12
    frame = load_results(store_path)
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
    raw, params = db.execute("SELECT raw, params FROM judgements LIMIT 1").fetchone()
    assert json.loads(raw)["label"] == row["label"]
    assert json.loads(params)["model"] == "judge-test"
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
    done_before = sqlite3.connect(store).execute("SELECT COUNT(*) FROM verdicts WHERE status='ok'").fetchone()[0]
    assert 10 <= done_before < 40
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
