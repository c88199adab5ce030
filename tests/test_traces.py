"""Traces in, verdicts back (greval.traces).

Exports: fixture files in the shapes the tools write (tests/fixtures/traces/README.md says where each shape comes
from; the Phoenix ones are a real server's output) become records with a question, an answer, chunks with their
ids and the efficiency fields, with no --map; a malformed or unknown export is one line.

Phoenix: a real server (arize-phoenix in its own venv, SQLite in a temp dir), the suite's instrumented RAG app
sending 20 traces over OTLP (its LLM spans around real calls to the test LLM server), ``greval run
phoenix://…`` judging them with chunk_evaluation and answer_alignment through the test LLM server, and the
annotations read back through Phoenix's API: equal to the store's verdicts; a re-run adds none; a canary
PHOENIX_API_KEY appears in no output or file. Conversations: traces sharing a session id (a LangSmith thread, a
Langfuse session, Phoenix's session.id) become one conversation record; judged per turn in a real Phoenix, the
turn verdicts go back to each turn's trace and the conversation's to its session.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.cli import main
from greval.errors import DataError, UserError
from greval.store.results import item_rows, record_rows
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from greval.traces.detect import open_data
from greval.traces.phoenix import parse_address
from greval.traces.source import TraceRows
from greval.traces.spans import as_text, nest
from tests.conftest import TEST_KEY

FIX = Path(__file__).parent / "fixtures" / "traces"
ROOT = Path(__file__).resolve().parents[1]
CANARY = "px-canary-KEY-9f3a7c-never-print"
EFFICIENCY = ("prompt_tokens", "output_tokens", "tokens", "llm_calls", "latency_s")


def records(path: Path) -> tuple[list[Any], list[str]]:
    rows = open_data(path, None, None, None)
    assert isinstance(rows, TraceRows), f"{path.name} was not recognised as a trace export"
    out = [r.record() for r in rows]
    return out, rows.notes


# ------------------------------------------------------------------------------------------- exports
@pytest.mark.parametrize(
    ("name", "count", "first_chunks"),
    [
        ("langsmith_runs.jsonl", 3, ["hb-12", "hb-13"]),
        ("langfuse_observations.jsonl", 2, ["faq-3"]),
        ("langfuse_trace.json", 1, ["faq-12"]),
        ("phoenix_spans.jsonl", 3, None),
        ("phoenix_spans.parquet", 3, None),
    ],
)
def test_exports_become_records_without_flags(name: str, count: int, first_chunks: list[str] | None) -> None:
    recs, _ = records(FIX / name)
    assert len(recs) == count
    with_chunks = [r for r in recs if r.items("chunks")]
    assert with_chunks, "no record got chunks"
    for rec in with_chunks:
        assert rec.data["question"] and rec.data["answer"]
        assert all(c["id"] and c["text"] for c in rec.items("chunks"))
        assert all(rec.data.get(k) is not None for k in EFFICIENCY), {k: rec.data.get(k) for k in EFFICIENCY}
        assert rec.data["tokens"] == rec.data["prompt_tokens"] + rec.data["output_tokens"]
    if first_chunks is not None:
        assert [c["id"] for c in recs[0].items("chunks")] == first_chunks


def test_langsmith_runs_map_every_part_of_a_trace() -> None:
    recs, notes = records(FIX / "langsmith_runs.jsonl")
    first = recs[0]
    assert first.id == "1f0b6a3e-0000-4000-8000-000000000001"  # the trace id: verdicts go back to the trace
    assert first.data["question"] == "How many vacation days do new staff get?"
    assert first.data["answer"] == "New staff get 25 vacation days a year."
    assert first.data["expected_answer"] == "25 days a year."  # the root run's metadata
    assert "ls_run_depth" not in first.data  # LangSmith's own bookkeeping is not the app's metadata
    chunk = first.items("chunks")[0]
    assert chunk["text"] == "Employees receive 25 days of paid vacation per year."
    assert chunk["metadata"]["score"] == 0.91 and chunk["metadata"]["metadata"]["source"] == "handbook.pdf"
    # tokens from the LLM run only: the root run's aggregated counts are not added a second time
    assert (first.data["prompt_tokens"], first.data["output_tokens"], first.data["tokens"]) == (180, 12, 192)
    assert first.data["llm_calls"] == 1 and first.data["latency_s"] == 3.5
    # one line per kind of gap, naming the traces
    assert any("1 of 3 trace(s) have no retriever span" in n and "000000000003" in n for n in notes), notes
    assert any("ChatPromptTemplate (2)" in n for n in notes), notes


def test_langsmith_chain_runs_pass_their_documents_on(llm: OpenAIServer, tmp_path: Path) -> None:
    """Runs recorded by LangChain's tracer (tests/fixtures/traces/make_langsmith_chain_runs.py) whose documents
    travel in chain runs' outputs, with no retriever run: a graph's retrieve node (``documents``, passed on by
    two more chains) and a retrieval chain (``context``; a traced list as ``output``) give their chunks, each
    once, from the run that returned it first; a chain returning chat messages gives none. Judged per chunk,
    both traces are judged, the third skipped with a note that says where a trace's chunks come from."""
    path = FIX / "langsmith_chain_runs.jsonl"
    runs = [json.loads(line) for line in path.read_text().splitlines()]
    run_id = {r["name"]: r["id"] for r in runs}
    recs, notes = records(path)
    graph, chain, chat = recs
    assert [(c["id"], c["metadata"]["span_id"], c["metadata"]["position"]) for c in graph.items("chunks")] == [
        ("hb-12", run_id["retrieve"], 0),
        ("hb-13", run_id["retrieve"], 1),
    ]
    assert graph.items("chunks")[0]["text"] == "Employees receive 25 days of paid vacation per year."
    assert graph.data["answer"] == "New staff get 25 vacation days a year."
    assert [(c["id"], c["text"]) for c in chain.items("chunks")] == [
        ("d1", "Travel expenses are approved by the team lead."),
        ("d2", "Receipts must be uploaded within 30 days."),
    ]
    assert chain.items("chunks")[0]["metadata"]["span_id"] == run_id["find_documents"]
    assert chain.data["answer"] == "Ask your team lead."  # the outputs' answer, not the input beside it
    assert chat.items("chunks") == []  # {role, content} items are messages, not documents
    assert [n for n in notes if "no retriever span" in n] == [
        f"{path} (LangSmith runs): 1 of 3 trace(s) have no retriever span, nor documents in a chain span's "
        f"outputs (so no chunks): {chat.id}"
    ]
    res = CliRunner().invoke(main, ["run", str(path), "-s", "chunk_evaluation", "--store", str(tmp_path / "s.db"),
                                    "--judge", "openai:judge-test", "--base-url", llm.base_url, "--quiet"],
                             env={"COLUMNS": "300"})  # fmt: skip
    assert res.exit_code == 0, res.output
    with Store(tmp_path / "s.db") as st:
        items = item_rows(st, "chunk_evaluation")
    assert sorted((r["record_id"], r["item_id"]) for r in items if r["item_id"]) == sorted(
        [(graph.id, "hb-12"), (graph.id, "hb-13"), (chain.id, "d1"), (chain.id, "d2")]
    )
    said = " ".join(res.output.split())
    assert "chunk_evaluation: 1 record(s) skipped — missing required input: chunks — greval reads a trace's chunks " \
           "from its retriever spans' documents" in said, said  # fmt: skip
    assert "--map" not in said, said  # a column mapping does not apply to a trace export


def test_langfuse_chain_observations_pass_their_documents_on(tmp_path: Path) -> None:
    """A Langfuse CHAIN observation whose output passes LangChain Documents on (``page_content``) gives a trace
    its chunks when no retriever returned any; a CHAIN whose output is chat messages gives none."""
    rows = [json.loads(line) for line in (FIX / "langfuse_observations.jsonl").read_text().splitlines()]
    for row in rows:
        if row["name"] == "retrieve-documents":  # a graph node recorded as a CHAIN, its documents in its state
            docs = [{"page_content": d.get("pageContent", d.get("page_content")), "metadata": d["metadata"],
                     "type": "Document"} for d in row["output"]]  # fmt: skip
            row["type"], row["output"] = "CHAIN", {"question": row["input"], "documents": docs}
            if row["traceId"] == "lf-trace-1":
                row["output"] = {"output": [{"role": "assistant", "content": d["page_content"]} for d in docs]}
    path = tmp_path / "observations.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    recs, notes = records(path)
    assert [c["id"] for c in recs[0].items("chunks")] == ["faq-3"]
    assert recs[1].items("chunks") == []
    assert any("1 of 2 trace(s) have no retriever span" in n and "lf-trace-1" in n for n in notes), notes


def test_a_langfuse_span_holding_an_answer_and_its_documents_is_the_step_that_answered(tmp_path: Path) -> None:
    """A SPAN whose output is ``{answer, documents}`` (a pipeline traced with ``@observe``, its LLM call not) is
    the RAG step that answered, not a retrieval: the record's answer is its answer (it read as a retriever's:
    no answer) and its documents, given as ``{content}``, are the chunks."""
    docs = [{"content": "Refunds are possible within 30 days.", "metadata": {"id": "kb-3", "score": 0.9}},
            {"content": "Shipping takes two days.", "metadata": {"id": "kb-8", "score": 0.4}}]  # fmt: skip
    row = {"id": "obs-1", "traceId": "lf-rag-1", "type": "SPAN", "name": "rag", "parentObservationId": None,
           "startTime": "2025-05-02T08:00:00.000Z", "endTime": "2025-05-02T08:00:01.000Z",
           "input": {"question": "What is the refund window?"},
           "output": {"answer": "Within 30 days.", "documents": docs}, "level": "DEFAULT"}  # fmt: skip
    path = tmp_path / "observations.jsonl"
    path.write_text(json.dumps(row) + "\n")
    (rec,), notes = records(path)
    assert (rec.data["question"], rec.data["answer"]) == ("What is the refund window?", "Within 30 days.")
    assert [(c["id"], c["text"], c["metadata"]["score"]) for c in rec.items("chunks")] == [
        ("kb-3", docs[0]["content"], 0.9),
        ("kb-8", docs[1]["content"], 0.4),
    ]
    assert not any("no answer" in n for n in notes), notes


def test_langsmith_runs_without_trace_ids_join_their_root(tmp_path: Path) -> None:
    """A run whose row has no trace_id is in the trace its dotted_order starts with, else in its topmost
    ancestor's: the same records as with the ids (not one trace per child run)."""
    rows = [json.loads(line) for line in (FIX / "langsmith_runs.jsonl").read_text().splitlines()]
    for n, row in enumerate(r for r in rows if r["parent_run_id"]):
        del row["trace_id"]
        if n % 2:
            del row["dotted_order"]
    bare = tmp_path / "runs.jsonl"
    bare.write_text("".join(json.dumps(r) + "\n" for r in rows))
    want, _ = records(FIX / "langsmith_runs.jsonl")
    got, _ = records(bare)
    assert [(r.id, r.hash) for r in got] == [(r.id, r.hash) for r in want]


def test_langsmith_dataset_examples_give_questions_and_expected_answers() -> None:
    recs, notes = records(FIX / "langsmith_examples.jsonl")
    assert [r.id for r in recs] == ["e0c1-0", "e0c1-1"]
    assert recs[1].data["question"] == "Who approves travel expenses?"
    assert recs[1].data["expected_answer"] == "The team lead."
    assert any("2 of 2 trace(s) have no answer" in n for n in notes), notes


def test_langfuse_trace_download_uses_the_trace_as_root() -> None:
    recs, notes = records(FIX / "langfuse_trace.json")
    (rec,) = recs
    assert rec.id == "lf-trace-9"
    assert rec.data["question"] == "Can I change my delivery address?"
    assert rec.data["answer"] == "Yes, until the parcel ships."
    assert (rec.data["prompt_tokens"], rec.data["output_tokens"], rec.data["latency_s"]) == (60, 7, 0.8)
    assert notes == []


def test_phoenix_exports_read_alike() -> None:
    jsonl, _ = records(FIX / "phoenix_spans.jsonl")
    parquet, _ = records(FIX / "phoenix_spans.parquet")
    assert {r.id for r in jsonl} == {r.id for r in parquet}
    by_id = {r.id: r for r in parquet}
    for rec in jsonl:
        other = by_id[rec.id]
        assert rec.data["question"] == other.data["question"]
        assert [c["id"] for c in rec.items("chunks")] == [c["id"] for c in other.items("chunks")]
        assert rec.data["expected_answer"] == other.data["expected_answer"]  # the root span's metadata
        assert {k: rec.data[k] for k in EFFICIENCY} == {k: other.data[k] for k in EFFICIENCY}


def test_a_langsmith_thread_becomes_one_conversation_record() -> None:
    """Runs whose root metadata names the same thread_id are one record: its id the thread, each trace a user and
    an assistant turn in the order the traces started (not the file's), tokens summed; the run's own
    `session_id` (LangSmith's project) groups nothing; a trace outside the thread stays a trace record."""
    recs, notes = records(FIX / "langsmith_thread_runs.jsonl")
    assert [r.id for r in recs] == ["thread-7", "2a0c0000-0000-4000-8000-000000000003"]
    chat = recs[0]
    turns = chat.data["conversation"]
    assert [(t["id"], t["role"], t["content"]) for t in turns] == [
        ("t1", "user", "How many vacation days do I get?"),
        ("t2", "assistant", "You get 25 vacation days a year."),
        ("t3", "user", "And how many can I carry over?"),
        ("t4", "assistant", "Up to 5 days carry over to next year."),
    ]
    first, second = (f"2a0c0000-0000-4000-8000-00000000000{i}" for i in (1, 2))
    assert turns[1]["metadata"] == {"trace_id": first, "span_id": first}  # where the turn's verdict goes back
    assert [t["id"] for t in chat.items("turns")] == ["t2", "t4"]
    assert chat.data["trace_ids"] == [first, second] and chat.data["session_id"] == "thread-7"
    assert (chat.data["prompt_tokens"], chat.data["output_tokens"], chat.data["llm_calls"]) == (420, 20, 2)
    assert chat.data["latency_s"] == 5.0 and chat.data["app_version"] == "3.0"  # the first trace's metadata
    assert "question" not in chat.data and "conversation" not in recs[1].data
    assert any("2 trace(s) of 1 session(s) read as conversations" in n for n in notes), notes


def test_langfuse_traces_of_one_session_become_a_conversation(tmp_path: Path) -> None:
    """A Langfuse session export ({"traces": [...]}, each trace with its sessionId); a trace whose answer is
    missing leaves its assistant turn out, and says so."""
    trace = json.loads((FIX / "langfuse_trace.json").read_text())

    def turn(n: int, question: str, answer: str | None, session: str | None) -> dict[str, Any]:
        t = {**trace, "id": f"lf-{n}", "sessionId": session, "input": {"question": question}, "output": answer}
        t["timestamp"] = f"2025-05-03T10:0{n}:00Z"
        steps = [{**o, "traceId": f"lf-{n}"} for o in trace["observations"]]
        t["observations"] = steps if answer else []  # no generation either: nothing to read an answer from
        return t

    path = tmp_path / "session.json"
    path.write_text(json.dumps({"traces": [turn(2, "Q2?", None, "s-1"), turn(1, "Q1?", "A1.", "s-1"),
                                           turn(3, "Q3?", "A3.", None)]}))  # fmt: skip
    recs, notes = records(path)
    assert [r.id for r in recs] == ["s-1", "lf-3"]
    assert [(t["role"], t["content"]) for t in recs[0].data["conversation"]] == [
        ("user", "Q1?"),
        ("assistant", "A1."),
        ("user", "Q2?"),
    ]
    assert any("1 of 3 trace(s) have no answer (so the conversation lacks that trace's assistant turn): s-1" in n
               for n in notes), notes  # fmt: skip


def test_a_map_keeps_the_plain_table_reader() -> None:
    """--map / --id-column mean the user maps the columns: the file is read as a table, as before."""
    rows = open_data(FIX / "langsmith_runs.jsonl", {"question": "inputs.question"}, None, None)
    assert not isinstance(rows, TraceRows)


def test_malformed_and_unknown_exports_are_one_line(tmp_path: Path) -> None:
    lines = (FIX / "langsmith_runs.jsonl").read_text().splitlines()
    broken = json.loads(lines[2])
    del broken["id"]
    bad = tmp_path / "runs.jsonl"
    bad.write_text("\n".join([lines[0], lines[1], json.dumps(broken)]) + "\n")
    with pytest.raises(DataError, match=r"runs\.jsonl \(LangSmith runs\): row 3: not a LangSmith run"):
        list(open_data(bad, None, None, None))
    otlp = tmp_path / "spans.json"
    otlp.write_text(json.dumps({"resourceSpans": [{"resource": {}, "scopeSpans": []}]}))
    with pytest.raises(DataError, match="OpenTelemetry"):
        open_data(otlp, None, None, None)
    res = CliRunner().invoke(main, ["run", str(otlp), "-s", "chunk_evaluation", "--store", str(tmp_path / "s.db")])
    assert res.exit_code == 2
    assert len(res.output.strip().splitlines()) == 1 and "OpenTelemetry" in res.output, res.output


def test_nest_and_text() -> None:
    flat = {"retrieval.documents.1.document.id": "b", "retrieval.documents.0.document.id": "a", "input.value": "q"}
    assert nest(flat) == {"retrieval": {"documents": [{"document": {"id": "a"}}, {"document": {"id": "b"}}]},
                          "input": {"value": "q"}}  # fmt: skip
    # nested (OTLP JSON) numbered levels become lists too (they were dropped: an empty object)
    otlp = {"retrieval": {"documents": {"1": {"document": {"id": "b"}}, "0": {"document.id": "a"}}}}
    assert nest(otlp) == {"retrieval": {"documents": [{"document": {"id": "a"}}, {"document": {"id": "b"}}]}}
    msgs = [{"message": {"role": "system", "content": "ctx"}}, {"message": {"role": "user", "content": "why?"}}]
    assert as_text(msgs, last_user=True) == "why?"
    assert as_text('{"question": "q?", "k": 3}') == "q?"


def test_phoenix_addresses() -> None:
    addr = parse_address("phoenix://127.0.0.1:6006/rag-app?last=2h&root=rag&limit=50")
    assert (addr.base_url, addr.project, addr.root, addr.limit) == ("http://127.0.0.1:6006", "rag-app", "rag", 50)
    assert addr.start is not None and addr.end is None
    assert parse_address("phoenix+https://px.example.org/prefix/p1").base_url == "https://px.example.org/prefix"
    with pytest.raises(UserError, match="PHOENIX_API_KEY"):
        parse_address("phoenix://user:secret@127.0.0.1:6006/p")
    for bad, why in (("phoenix://h:1/p?since=1h", "unknown parameter"), ("phoenix://h:1/p?last=soon", "last="),
                     ("phoenix://h:1/", "PROJECT"), ("phoenix://h:1/p?limit=0", "limit")):  # fmt: skip
        with pytest.raises(DataError, match=why):
            parse_address(bad)


def test_an_unreachable_phoenix_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args = ["run", f"phoenix://127.0.0.1:{port}/rag", "-s", "chunk_evaluation", "--store", str(tmp_path / "s.db"),
            "--judge", "openai:judge-test", "--base-url", f"http://127.0.0.1:{port}/v1"]  # fmt: skip
    res = CliRunner().invoke(main, args, env={"PHOENIX_API_KEY": CANARY, "OPENAI_API_KEY": TEST_KEY})
    assert res.exit_code == 2, res.output
    assert res.output.strip().splitlines() == [f"error: phoenix http://127.0.0.1:{port} project 'rag': cannot reach "
                                               "Phoenix (ConnectError: [Errno 111] Connection refused)"]  # fmt: skip
    assert CANARY not in res.output


def test_run_an_export_end_to_end(llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`greval run` on a LangSmith runs file, no flags but the metric: chunk verdicts keyed by the documents' ids,
    the gap said in one note; the tools' keys in the environment (canaries) are not read, shown or stored."""
    for var in ("LANGSMITH_API_KEY", "LANGFUSE_SECRET_KEY", "LANGFUSE_PUBLIC_KEY"):
        monkeypatch.setenv(var, CANARY)
    store = tmp_path / "s.db"
    args = ["run", str(FIX / "langsmith_runs.jsonl"), "-s", "chunk_evaluation", "-s", "answer_alignment"]
    res = CliRunner().invoke(main, [*args, "--store", str(store), "--judge", "openai:judge-test",
                                    "--base-url", llm.base_url, "--quiet"])  # fmt: skip
    assert res.exit_code == 0, res.output
    assert "have no retriever span" in res.output
    said = " ".join(res.output.split())
    assert "answer_alignment: 1 record(s) skipped — missing required input: expected_answer — greval reads a " \
           "trace's expected_answer from the root span's metadata key 'expected_answer'" in said, said  # fmt: skip
    assert "--map" not in said, said
    with Store(store) as st:
        items = item_rows(st, "chunk_evaluation")
    assert {(r["record_id"][-4:], r["item_id"]) for r in items if r["item_id"]} == {
        ("0001", "hb-12"),
        ("0001", "hb-13"),
        ("0002", "hb-40"),
    }
    assert CANARY not in res.output and CANARY.encode() not in store.read_bytes()


def test_evaluate_an_export_says_where_a_trace_field_comes_from(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """greval.evaluate on a trace export notes a skipped record as `greval run` does: where greval reads the
    missing field from a trace, not a column mapping."""
    import greval

    monkeypatch.setenv("OPENAI_BASE_URL", llm.base_url)
    res = greval.evaluate(str(FIX / "langsmith_runs.jsonl"), "answer_alignment", judge="openai:judge-test",
                          store=tmp_path / "s.db", progress=False, quiet=True)  # fmt: skip
    skipped = [n for n in res.notes if "skipped" in n]
    assert skipped == [
        "answer_alignment: 1 record(s) skipped — missing required input: expected_answer — greval reads a trace's "
        "expected_answer from the root span's metadata key 'expected_answer'"
    ], res.notes


# ------------------------------------------------------------------------------------- a real Phoenix
@pytest.mark.slow
def test_a_phoenix_that_refuses_the_key_is_one_line(tmp_path: Path) -> None:
    """Phoenix with its own authentication on (a real server): a wrong PHOENIX_API_KEY gets one line naming the
    variable, not a traceback, and the key is sent as the bearer token — the right one gets past the check to
    the next question (no such project). Neither key is printed."""
    from greval.testing.phoenix import PhoenixServer

    admin = "px-admin-" + "7c4e9a1b3d5f" * 4
    with PhoenixServer(admin_key=admin) as px:
        address = f"phoenix://{px.url.removeprefix('http://')}/rag"
        args = ["run", address, "-s", "chunk_evaluation", "--store", str(tmp_path / "s.db"),
                "--judge", "openai:judge-test", "--base-url", "http://127.0.0.1:9/v1"]  # fmt: skip
        refused = CliRunner().invoke(main, args, env={"PHOENIX_API_KEY": CANARY, "OPENAI_API_KEY": TEST_KEY})
        taken = CliRunner().invoke(main, args, env={"PHOENIX_API_KEY": admin, "OPENAI_API_KEY": TEST_KEY})
    assert refused.exit_code == 2, refused.output
    assert refused.output.strip().splitlines() == [
        f"error: phoenix {px.url} project 'rag': Phoenix refused the request (HTTP 401); check PHOENIX_API_KEY"
    ]
    assert taken.exit_code == 2, taken.output
    assert taken.output.strip().splitlines() == [
        f"error: phoenix {px.url} project 'rag': not found on the server (HTTP 404): is the project's name right?"
    ]
    assert CANARY not in refused.output and admin not in taken.output


@pytest.fixture(scope="module")
def phoenix() -> Iterator[Any]:
    from greval.testing.phoenix import PhoenixServer

    with PhoenixServer() as px:
        yield px


def emit_traces(px: Any, llm: OpenAIServer, project: str, n: int) -> list[dict[str, Any]]:
    """Run the suite's instrumented RAG app (its own process) against Phoenix and the test LLM server."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.traces_app", "--phoenix", px.url, "--project", project, "--llm", llm.base_url,
         "--n", str(n)],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in out.stdout.splitlines()]


def greval_run(
    px: Any,
    llm: OpenAIServer,
    project: str,
    store: Path,
    metrics: tuple[str, ...] = ("chunk_evaluation", "answer_alignment"),
) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, "-m", "greval", "run", f"phoenix://{px.url.removeprefix('http://')}/{project}",
           *(a for m in metrics for a in ("-s", m)), "--store", str(store),
           "--judge", "openai:judge-test", "--base-url", llm.base_url, "--quiet"]  # fmt: skip
    env = {**os.environ, "OPENAI_API_KEY": TEST_KEY, "PHOENIX_API_KEY": CANARY, "COLUMNS": "200"}
    return subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=300)


def annotations(
    px: Any,
    project: str,
    span_ids: list[str],
    names: tuple[str, ...] | list[str] = ("chunk_evaluation", "answer_alignment"),
) -> list[dict[str, Any]]:
    from phoenix.client import Client

    found = Client(base_url=px.url).spans.get_span_annotations(
        span_ids=span_ids, project_identifier=project, include_annotation_names=list(names)
    )
    return [dict(a) for a in found]


def document_annotations(px: Any, span_ids: list[str]) -> dict[tuple[str, int], dict[str, Any]]:
    """(retriever span id, position) -> greval's document annotation, through Phoenix's GraphQL API (its REST API
    has no read route for them); all of them, so that a duplicate shows."""
    import httpx

    out: dict[tuple[str, int], dict[str, Any]] = {}
    for sid in span_ids:
        q = (
            'query { getSpanByOtelId(spanId: "%s") '
            "{ documentEvaluations { name label score explanation documentPosition } } }"
        )
        data = httpx.post(f"{px.url}/graphql", json={"query": q % sid}, timeout=30).json()
        assert "errors" not in data, data
        for ev in data["data"]["getSpanByOtelId"]["documentEvaluations"]:
            assert (sid, ev["documentPosition"]) not in out, (
                f"two annotations on {sid} document {ev['documentPosition']}"
            )
            out[sid, ev["documentPosition"]] = ev
    return out


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("phoenix") is None, reason="pip install 'greval[phoenix]'")
def test_phoenix_traces_in_verdicts_back(phoenix: Any, openai_server: OpenAIServer, tmp_path: Path) -> None:
    n = 20
    openai_server.reset()
    project = "rag-app"
    traces = emit_traces(phoenix, openai_server, project, n)
    assert len(traces) == n
    store = tmp_path / "store.sqlite"
    first = greval_run(phoenix, openai_server, project, store)
    assert first.returncode == 0, first.stdout + first.stderr
    assert f": {2 * n} span annotation(s) written with {3 * n} document annotation(s), 0 already there" in (
        first.stdout + first.stderr
    ), first.stdout + first.stderr

    roots = [t["root_span_id"] for t in traces]
    got = annotations(phoenix, project, roots)
    assert len(got) == 2 * n  # 20 traces x 2 metrics
    assert {a["annotator_kind"] for a in got} == {"LLM"} and {a["identifier"] for a in got} == {"greval"}

    with Store(store) as st:
        items = item_rows(st)
        specs = {k: st.any_spec(k) for k in {r["spec_key"] for r in items}}
    rows = {(r["spec"], r["record_id"]): r for r in record_rows(items, specs)}
    by_trace = {t["root_span_id"]: t["trace_id"] for t in traces}
    for a in got:
        row = rows[a["name"], by_trace[a["span_id"]]]
        result = a["result"]
        assert a["metadata"]["spec_version"] == specs[row["spec_key"]].hash
        if a["name"] == "answer_alignment":
            assert (result["label"], result["explanation"]) == (row["label"], row["reason"])
            assert result["score"] == pytest.approx(row["score"])
        else:  # per chunk: the record's share, its label counts as the explanation
            assert result["label"] is None and result["score"] == pytest.approx(row["score"])
            assert f"of {row['counts']['total']} chunks positive" in result["explanation"]

    # every chunk verdict as a document annotation on its retriever span, label and reason as stored
    docs = document_annotations(phoenix, [t["retriever_span_id"] for t in traces])
    chunk_items = [r for r in items if r["spec"] == "chunk_evaluation" and r["item_id"]]
    assert len(docs) == len(chunk_items) == 3 * n
    place = {
        (t["trace_id"], d["id"]): (t["retriever_span_id"], i) for t in traces for i, d in enumerate(t["documents"])
    }
    for r in chunk_items:
        ev = docs[place[r["record_id"], r["item_id"]]]
        assert (ev["name"], ev["label"], ev["explanation"]) == ("chunk_evaluation", r["label"], r["reason"])

    # a re-run judges nothing and writes nothing: no annotation added or rewritten
    calls = openai_server.stats()["total"]
    again = greval_run(phoenix, openai_server, project, store)
    assert again.returncode == 0, again.stdout + again.stderr
    assert ": 0 span annotation(s) written, 40 already there" in again.stdout + again.stderr
    assert ", 0 judgement(s) to make" in again.stdout + again.stderr
    assert openai_server.stats()["total"] == calls  # no judge call
    after = annotations(phoenix, project, roots)
    assert sorted((a["id"], a["updated_at"]) for a in after) == sorted((a["id"], a["updated_at"]) for a in got)
    assert len(document_annotations(phoenix, [t["retriever_span_id"] for t in traces])) == 3 * n

    # a project that is not there: one line
    missing = greval_run(phoenix, openai_server, "no-such-project", tmp_path / "other.sqlite")
    assert missing.returncode == 2 and "no-such-project" in missing.stderr, missing.stdout + missing.stderr
    assert "Traceback" not in missing.stderr and len(missing.stderr.strip().splitlines()) == 1, missing.stderr

    # the canary API key: sent, never shown or stored
    for out in (first, again, missing):
        assert CANARY not in out.stdout + out.stderr
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("phoenix") is None, reason="pip install 'greval[phoenix]'")
def test_phoenix_write_back_says_what_was_not_judged(phoenix: Any, openai_server: OpenAIServer, tmp_path: Path) -> None:
    """A metric reading what no trace has (triple_evaluation: triples) skips every record: the write-back line
    says they were not judged and where greval reads that field from a trace — not that they were errors — and
    the run's note says the same, not to map a column (which would read the project as no table at all)."""
    openai_server.reset()
    project = "rag-skips"
    traces = emit_traces(phoenix, openai_server, project, 3)
    run = greval_run(phoenix, openai_server, project, tmp_path / "s.sqlite", ("answer_alignment", "triple_evaluation"))
    said = " ".join((run.stdout + run.stderr).split())
    assert run.returncode == 1 and "no verdict at all for triple_evaluation" in said, said  # every record skipped
    where = "greval reads a trace's triples from the root span's metadata key 'triples'"
    assert (f": 3 span annotation(s) written, 0 already there; 3 record(s) not judged, so not annotated "
            f"(triple_evaluation: 3 without triples; {where})") in said, said  # fmt: skip
    assert f"triple_evaluation: 3 record(s) skipped — missing required input: triples — {where}" in said, said
    assert "were errors" not in said and "--map" not in said, said
    got = annotations(phoenix, project, [t["root_span_id"] for t in traces], ["answer_alignment", "triple_evaluation"])
    assert sorted(a["name"] for a in got) == ["answer_alignment"] * 3


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("phoenix") is None, reason="pip install 'greval[phoenix]'")
def test_phoenix_sessions_are_conversations_judged_turn_by_turn(
    phoenix: Any, openai_server: OpenAIServer, tmp_path: Path
) -> None:
    """2 conversations of 3 turns each (6 traces sharing 2 session ids) become 2 conversation records; judged
    with turn_relevance (per assistant turn) and task_completion (per conversation): every turn verdict goes
    back as a span annotation on its trace's root span, every conversation verdict as a session annotation;
    a re-run writes nothing."""

    openai_server.reset()
    project = "chat-app"
    out = subprocess.run(
        [sys.executable, "-m", "tests.traces_app", "--phoenix", phoenix.url, "--project", project, "--llm",
         openai_server.base_url, "--chats", "2", "--turns", "3"],
        capture_output=True, text=True, cwd=ROOT, timeout=120, check=True,
    )  # fmt: skip
    turns = [json.loads(line) for line in out.stdout.splitlines()]
    assert len(turns) == 6
    store = tmp_path / "store.sqlite"
    first = greval_run(phoenix, openai_server, project, store, ("turn_relevance", "task_completion"))
    said = first.stdout + first.stderr
    assert first.returncode == 0, said
    assert "6 trace(s) of 2 session(s) read as conversations" in said, said
    assert ": 6 span annotation(s) written, 0 already there; 4 session annotation(s) written, 0 already there" in said

    with Store(store) as st:
        items = item_rows(st)
        specs = {k: st.any_spec(k) for k in {r["spec_key"] for r in items}}
    judged = {(r["record_id"], r["item_id"]): r for r in items if r["spec"] == "turn_relevance" and r["item_id"]}
    assert sorted(judged) == [(s, t) for s in ("chat-1", "chat-2") for t in ("t2", "t4", "t6")]
    # each assistant turn's verdict on the root span of the turn's trace
    root_of_turn = {(t["session_id"], f"t{2 * t['turn']}"): t["root_span_id"] for t in turns}
    got = annotations(phoenix, project, [t["root_span_id"] for t in turns], ["turn_relevance"])
    assert len(got) == 6
    for a in got:
        key = next(k for k, span in root_of_turn.items() if span == a["span_id"])
        row = judged[key]
        assert (a["result"]["label"], a["result"]["explanation"]) == (row["label"], row["reason"])
        assert a["metadata"]["turn_id"] == key[1] and a["identifier"] == "greval"
    # each conversation's verdicts on its session
    rows = {(r["spec"], r["record_id"]): r for r in record_rows(items, specs)}
    sessions = session_annotations(phoenix, project, ["chat-1", "chat-2"])
    assert sorted((a["session_id"], a["name"]) for a in sessions) == [
        (s, m) for s in ("chat-1", "chat-2") for m in ("task_completion", "turn_relevance")
    ]
    for a in sessions:
        row = rows[a["name"], a["session_id"]]
        assert a["result"]["score"] == pytest.approx(row["score"]) and a["annotator_kind"] == "LLM"
        if a["name"] == "task_completion":
            assert (a["result"]["label"], a["result"]["explanation"]) == (row["label"], row["reason"])
        else:
            assert "of 3 assistant turns positive" in a["result"]["explanation"]

    calls = openai_server.stats()["total"]
    again = greval_run(phoenix, openai_server, project, store, ("turn_relevance", "task_completion"))
    said = again.stdout + again.stderr
    assert again.returncode == 0 and openai_server.stats()["total"] == calls, said
    assert ": 0 span annotation(s) written, 6 already there; 0 session annotation(s) written, 4 already there" in said
    after = session_annotations(phoenix, project, ["chat-1", "chat-2"])
    assert sorted((a["id"], a["updated_at"]) for a in after) == sorted((a["id"], a["updated_at"]) for a in sessions)


def session_annotations(px: Any, project: str, session_ids: list[str]) -> list[dict[str, Any]]:
    """Phoenix's session annotations through its REST API (its client has no read method for them)."""
    import httpx

    got = httpx.get(f"{px.url}/v1/projects/{project}/session_annotations",
                    params={"session_ids": session_ids, "limit": 100}, timeout=30)  # fmt: skip
    got.raise_for_status()
    return list(got.json()["data"])
