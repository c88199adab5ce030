"""greval watch: continuous evaluation of a live system's traces (greval.flows.watch, greval.watch, greval.store.watch).

The traces come from the suite's instrumented RAG app run as a service (tests/watch_app.py: real OpenTelemetry
spans with OpenInference's conventions), into a real Phoenix server or into OTLP JSON files written by the OTLP
encoder; the judge is greval's local test LLM server, scripted to judge like a judge that knows the answers (an
answer from the question's top chunk is Correct, any other Incorrect); the app drifts part-way by answering from
the wrong chunk. Checked: the sampled share (within its binomial margin, each stratum to within one), the daily
budget (never exceeded), --once twice (the second judges nothing), every trace judged and written back once across
a SIGKILL and a restart (counted at the judge server and at Phoenix), the drift caught within two windows, the
review queue's designed share with its inclusion probabilities, alarms as exit codes, JUnit and a webhook POST (its
secret never shown), hostile sources as one line and a retry, the page in Chromium, and memory over 10,000 spans.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.cli import main
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from greval.watch.budget import Limits, budget_room, day_start, rate_room
from greval.watch.sampling import chosen, offset
from greval.watch.sources import FolderSource, otlp_rows
from greval.watch.where import WhereError, parse_where
from tests.conftest import TEST_KEY
from tests.traces_app import QUESTIONS, retrieve

ROOT = Path(__file__).resolve().parents[1]
SECRET = "hook-SECRET-4d2f9a-never-print"


# ---------------------------------------------------------------------------------------------- helpers
def emit(folder: Path, n: int, *, start: int = 0, per_file: int = 50, drift_after: int | None = None) -> list[dict[str, Any]]:
    """Run the RAG app (its own process, no LLM call) writing ``n`` traces as OTLP JSON files into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "tests.watch_app", "--otlp-dir", str(folder), "--n", str(n), "--start", str(start),
           "--per-file", str(per_file), "--no-llm"]  # fmt: skip
    if drift_after is not None:
        cmd += ["--drift-after", str(drift_after)]
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def judge_rules() -> list[dict[str, Any]]:
    """A judge that knows the answers: an answer that is the question's top chunk is Correct, any other Incorrect."""
    rules: list[dict[str, Any]] = []
    for question, _ in QUESTIONS:
        top = retrieve(question)[0]["content"]
        rules.append({
            "match": f"(?s)(?=.*{re.escape(question)})(?=.*{re.escape(top)})", "regex": True,
            "action": {"type": "respond", "content": {"reason": "It states the expected fact.", "label": "Correct"}},
        })  # fmt: skip
    rules.append({"match": "Metric: answer_alignment", "action": {"type": "respond", "content": {
        "reason": "It answers from another passage.", "label": "Incorrect"}}})  # fmt: skip
    return rules


def watch(*args: str, env: dict[str, str] | None = None) -> Any:
    """``greval watch …`` in this process (the CLI's own error handling, exit codes and output)."""
    env = {"OPENAI_API_KEY": TEST_KEY, "COLUMNS": "200", **(env or {})}
    return CliRunner().invoke(main, ["watch", *args], env=env, catch_exceptions=False)


def judge_args(llm: OpenAIServer) -> list[str]:
    return ["--judge", "openai:judge-test", "--base-url", llm.base_url]


def rows(store: Path, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with Store(store) as st:
        return [tuple(r.values()) for r in st.query(sql, params)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


# ---------------------------------------------------------------------------------------- the filter
def test_the_filter_language_reads_paths_and_never_evaluates_python() -> None:
    fields = {
        "attributes": {"route": "search", "llm.model_name": "gpt-4o-mini"},
        "metadata": {"app": {"version": 2}},
        "question": "When was the Ostra bridge opened?",
        "tokens": 1500,
        "hour": 3,
    }
    holds = [
        'attributes.route == "search"',
        "tokens < 2000 and not attributes.route == 'chat'",
        'attributes.llm.model_name in ["gpt-4o-mini", "gpt-4o"]',  # a dotted key kept flat
        'question contains "Ostra" && hour >= 2 && hour < 4',
        "metadata.app.version == 2",
        "missing == null and not (missing > 3)",  # a path the trace lacks is null; an order with null is false
        "attributes.route not in ['chat']",
    ]
    for text in holds:
        assert parse_where(text).matches(fields), text
    assert not parse_where('attributes.route == "chat" or tokens > 5000').matches(fields)
    bad = {
        'attributes.route ==': "expected a value or a path, found 'the end' at character 20",
        '__import__("os").system("true")': "unexpected '.' at character 17",
        '__import__("os")': "unexpected '(' at character 11",
        "a === b": "unexpected '=' at character 5",
        "(a == 1": "expected ')', found 'the end' at character 8",
        "[1, c]": "a list holds only texts, numbers, true, false or null at character 5",
    }
    for text, why in bad.items():
        with pytest.raises(WhereError) as raised:
            parse_where(text)
        assert str(raised.value) == f"where {text!r}: {why}"
    with pytest.raises(WhereError, match="nested more than 40 deep"):
        parse_where("(" * 60 + "a" + ")" * 60)


def test_a_bad_filter_is_one_line_before_anything_is_read(tmp_path: Path) -> None:
    res = watch("--source", str(tmp_path), "-s", "rouge_l", "--store", str(tmp_path / "s.db"), "--once",
                "--where", "attributes.route = 'search'")  # fmt: skip
    assert res.exit_code == 2
    assert res.output.strip() == "error: where \"attributes.route = 'search'\": unexpected '=' at character 18"
    assert not (tmp_path / "s.db").exists()


# -------------------------------------------------------------------------------------- the sampling
@pytest.mark.parametrize("rate", [0.05, 0.1, 0.37, 1.0])
def test_the_systematic_draw_takes_each_stratum_s_share_to_within_one(rate: float) -> None:
    for stratum in ("route=search", "route=chat", "route=-"):
        start = offset(7, 1_700_000_000.0, stratum)
        for n in (1, 9, 100, 1234):
            drawn = sum(chosen(k, rate, start) for k in range(n))
            assert abs(drawn - rate * n) < 1, (stratum, n, drawn)
    # and every position has the same chance over the draw's starts: each is drawn for exactly a share `rate`
    starts = [i / 1000 for i in range(1000)]
    for k in (0, 3, 17):
        assert sum(chosen(k, rate, u) for u in starts) == pytest.approx(1000 * rate, abs=1)


# ------------------------------------------------------------------------------------- rate and budget
def test_the_rate_cap_throttles_and_the_budget_holds_back() -> None:
    from greval.store.watch import Spend

    now = 10_000.0
    assert rate_room([], None, now) == (None, 0.0)
    assert rate_room([now - 70, now - 50, now - 10], 3, now) == (1, 0.0)  # the one 70 s ago no longer counts
    room, wait = rate_room([now - 50, now - 30, now - 10], 3, now)
    assert room == 0 and wait == pytest.approx(10.0)  # the oldest of the minute frees its slot in 10 s
    tokens = Limits(tokens_per_day=10_000)
    assert budget_room(Limits(), Spend(0, 0.0, 0), None) is None
    assert budget_room(tokens, Spend(0, 0.0, 0), None) == 1  # nothing judged yet: one trace, to learn its cost
    assert budget_room(tokens, Spend(0, 0.0, 1), None) == 0  # …and only one at a time until it is judged
    assert budget_room(tokens, Spend(4000, 0.0, 0), (300, 0.0)) == 16  # (10000-4000) / (300*1.25)
    assert budget_room(tokens, Spend(4000, 0.0, 4), (300, 0.0)) == 12  # admitted, not judged yet: reserved
    assert budget_room(tokens, Spend(9800, 0.0, 0), (300, 0.0)) == 0
    usd = Limits(usd_per_day=1.0, tokens_per_day=10_000)
    assert budget_room(usd, Spend(100, 0.95, 0), (300, 0.01)) == 4  # the tighter budget wins
    assert day_start(86_400 * 3 + 5_000.0) == 86_400 * 3


# -------------------------------------------------------------------------------------------- sources
def test_otlp_json_from_the_real_encoder_becomes_traces(tmp_path: Path) -> None:
    traces = emit(tmp_path / "land", 7, per_file=4)
    files = sorted((tmp_path / "land").glob("*.json"))
    assert [f.name for f in files] == ["spans-00001.json", "spans-00002.json"]
    doc = json.loads(files[0].read_text())
    spans = list(otlp_rows(doc))
    assert len(spans) == 4 * 3  # root, retriever, LLM span per trace
    assert {s["context"]["trace_id"] for s in spans} == {t["trace_id"] for t in traces[:4]}
    src = FolderSource(tmp_path / "land", max_spans=100, settle_s=0.0)
    pages = list(src.pages(None, 3))
    seen = [t for p in pages for t in p.traces]
    assert [t.trace_id for t in seen] == [t["trace_id"] for t in traces]  # file by file, each in file order
    assert {t.attributes.get("route") for t in seen} == {"search", "chat"}  # the root span's own attribute
    assert pages[-1].end[-1] == 1  # the last file finished
    again = list(src.pages(pages[1].end, 3))  # after the first file (its 4 traces in pages of 3): the second file
    assert [t.trace_id for p in again for t in p.traces] == [t["trace_id"] for t in traces[4:]]
    assert list(src.pages(pages[-1].end, 3)) == []
