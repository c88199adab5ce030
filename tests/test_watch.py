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
import importlib.util
import json
import math
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

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
def emit(
    folder: Path, n: int, *, start: int = 0, per_file: int = 50, drift_after: int | None = None
) -> list[dict[str, Any]]:
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
        "attributes.route ==": "expected a value or a path, found 'the end' at character 20",
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
    # read as it streams: the same spans as the file read whole, whatever keys come before resourceSpans
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "keys.json").write_text(json.dumps({"note": {"by": "hand"}, **doc}, indent=1))
    [streamed] = list(FolderSource(tmp_path / "other", max_spans=100, settle_s=0.0).pages(None, 10))
    assert [len(t.spans) for t in streamed.traces] == [3, 3, 3, 3] and streamed.notes == []
    assert [t.trace_id for t in streamed.traces] == [t["trace_id"] for t in traces[:4]]


# ------------------------------------------------------------------------------------ --once, budget, share
@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_once_twice_judges_nothing_the_second_time(
    llm: OpenAIServer, tmp_path: Path, backend: str, request: pytest.FixtureRequest
) -> None:
    store = str(tmp_path / "s.sqlite") if backend == "sqlite" else str(request.getfixturevalue("pg_url"))
    llm.script(judge_rules())
    land = tmp_path / "land"
    emit(land, 40, per_file=20)
    args = ["--source", str(land), "-s", "answer_alignment", "--store", store, "--once", "--settle", "0s",
            *judge_args(llm)]  # fmt: skip
    prices = tmp_path / "prices.yaml"
    prices.write_text("openai:judge-test: {input: 2.0, output: 8.0}\n")
    first = watch(*args, env={"GREVAL_PRICES": str(prices)})
    assert first.exit_code == 0, first.output
    assert "40 trace(s) read, 40 chosen, 40 judged" in first.output
    with Store(store) as st:  # each trace's cost is kept, budget or not: the page's cost per window
        [cost] = st.query("SELECT COUNT(*) AS n, MIN(usd) AS least, SUM(usd) AS usd FROM watch_items")
    assert cost["n"] == 40 and cost["least"] > 0, cost
    assert f"${cost['usd']:.4f} " in first.output  # the window's cost, as the table shows it
    assert llm.stats()["total"] == 40  # one call per trace: the scripted answers parse
    second = watch(*args)
    assert second.exit_code == 0, second.output
    assert "0 trace(s) read, 0 chosen, 0 judged" in second.output
    assert llm.stats()["total"] == 40  # nothing judged again
    emit(land, 10, start=40, per_file=10)  # a new file lands: only its traces are read
    third = watch(*args)
    assert "10 trace(s) read, 10 chosen, 10 judged" in third.output, third.output
    assert llm.stats()["total"] == 50
    with Store(store) as st:
        judged = st.query("SELECT status, COUNT(*) AS n FROM watch_items GROUP BY status")
        assert judged == [{"status": "judged", "n": 50}]
        assert st.query("SELECT COUNT(*) AS n FROM verdicts")[0]["n"] == 50


def test_the_sampled_share_is_within_its_binomial_margin(tmp_path: Path) -> None:
    """1,200 traces, a filter on the root span's route attribute, a 20 % sample drawn within route and hour:
    every stratum gets its share to within one trace, the whole within its binomial margin (3σ)."""
    land = tmp_path / "land"
    traces = emit(land, 1200, per_file=300)
    store = tmp_path / "s.sqlite"
    res = watch("--source", str(land), "-s", "rouge_l", "--store", str(store), "--once", "--settle", "0s",
                "--sample", "0.2", "--where", 'attributes.route == "search"', "--stratify", "route,hour")  # fmt: skip
    assert res.exit_code == 0, res.output
    search = sum(1 for t in traces if t["route"] == "search")
    strata = rows(store, "SELECT stratum, seen, matched, sampled FROM watch_strata")
    assert sum(r[1] for r in strata) == 1200 and sum(r[2] for r in strata) == search
    for stratum, _, matched, sampled in strata:
        assert abs(sampled - 0.2 * matched) < 1, stratum
        assert matched == 0 or stratum.startswith("route=search")
    drawn = sum(r[3] for r in strata)
    assert abs(drawn - 0.2 * search) <= 3 * math.sqrt(search * 0.2 * 0.8)
    assert f"1200 trace(s) read, {drawn} chosen, {drawn} judged" in res.output
    assert rows(store, "SELECT COUNT(*) FROM watch_items WHERE status='judged'") == [(drawn,)]


def _spent(store: Path) -> tuple[int, int, float]:
    """(traces judged, their judge tokens as the judgements table holds them, the watch's own sum of them)."""
    with Store(store) as st:
        watched = st.query("SELECT COUNT(*) AS n, SUM(tokens) AS t FROM watch_items WHERE status='judged'")[0]
        made = st.query("SELECT SUM(tokens_in + tokens_out) AS t FROM judgements")[0]["t"]
    return int(watched["n"]), int(made or 0), float(watched["t"] or 0)


def test_the_daily_budget_is_never_exceeded(llm: OpenAIServer, tmp_path: Path) -> None:
    llm.script(judge_rules())
    land = tmp_path / "land"
    emit(land, 60, per_file=30)
    store = tmp_path / "s.sqlite"
    args = ["--source", str(land), "-s", "answer_alignment", "--store", str(store), "--once", "--settle", "0s",
            "--budget-tokens", "3000", *judge_args(llm)]  # fmt: skip
    first = watch(*args)
    assert first.exit_code == 0, first.output
    judged, made, counted = _spent(store)
    assert made == counted <= 3000  # the day's budget holds, counted as the judge server reported the tokens
    assert 0 < judged < 60 and llm.stats()["total"] == judged
    held = rows(store, "SELECT COUNT(*) FROM watch_items WHERE status='over_budget'")[0][0]
    assert judged + held == 60
    assert f"{held} held back by the day's budget" in first.output
    assert "note: the day's budget is spent" in first.output
    emit(land, 10, start=60, per_file=10)
    again = watch(*args)  # the same day: what comes later is held back too, and nothing held is judged
    assert "10 held back by the day's budget" in again.output, again.output
    assert _spent(store)[:2] == (judged, made) and llm.stats()["total"] == judged
    # in US dollars, at the price table's price for the judge (the user's table: GREVAL_PRICES)
    prices = tmp_path / "prices.yaml"
    prices.write_text("openai:judge-test: {input: 2.0, output: 8.0}\n")
    budget = 0.004  # a dozen traces' worth at ~280 prompt and ~10 completion tokens each
    usd = watch(*[a for a in args if a not in ("--budget-tokens", "3000")], "--budget-usd", str(budget),
                "--name", "in dollars", env={"GREVAL_PRICES": str(prices)})  # fmt: skip
    assert usd.exit_code == 0, usd.output
    assert "held back by the day's budget" in usd.output  # the dollars bound, not the traces
    with Store(store) as st:
        spent = st.query("SELECT COUNT(*) AS n, SUM(usd) AS usd FROM watch_items WHERE status='judged' AND usd > 0")
    assert spent[0]["n"] > 0 and spent[0]["usd"] <= budget


# ---------------------------------------------------------------------------------------- drift, alarms
class _Hook(http.server.BaseHTTPRequestHandler):
    """A local webhook receiver: keeps each POST's path, headers and JSON body."""

    got: ClassVar[list[dict[str, Any]]] = []

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        _Hook.got.append({"path": self.path, "headers": dict(self.headers), "body": json.loads(body)})
        self.send_response(204)
        self.end_headers()

    def log_message(self, format: str, *args: Any) -> None:
        return


@contextlib.contextmanager
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    _Hook.got = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Hook)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", _Hook.got
    finally:
        server.shutdown()
        server.server_close()


def _paced(folder: Path, n: int, drift_after: int, pace: float) -> list[dict[str, Any]]:
    """The app answering ``n`` questions ``pace`` seconds apart into OTLP JSON files (20 traces a file)."""
    folder.mkdir(parents=True, exist_ok=True)
    cmd = [sys.executable, "-m", "tests.watch_app", "--otlp-dir", str(folder), "--n", str(n), "--per-file", "20",
           "--no-llm", "--pace", str(pace), "--drift-after", str(drift_after)]  # fmt: skip
    done = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, timeout=300, check=True)
    return [json.loads(line) for line in done.stdout.splitlines()]


def test_a_drift_raises_an_alarm_once_as_exit_code_junit_and_webhook(llm: OpenAIServer, tmp_path: Path) -> None:
    """The app drifts after 40 of 80 traces (2 s windows, 10 traces a second): the first window that is mostly
    drifted lies below the windows before it. --once exits 1, a JUnit file says which window and figure, the
    webhook of the user's config gets one POST per window in alarm (never again on the next pass), and the
    webhook's secret URL and header are in no output or file."""
    xmlschema = pytest.importorskip("xmlschema")
    llm.script(judge_rules())
    traces = _paced(tmp_path / "land", 80, 40, 0.1)
    first_drifted = min(t["started"] for t in traces if t["drifted"])
    store, junit = tmp_path / "s.sqlite", tmp_path / "watch.xml"
    with webhook() as (url, got):
        config = tmp_path / "watch.yaml"
        config.write_text(
            f"webhook:\n  url: {url}/hooks/{SECRET}\n  headers: {{Authorization: 'Bearer ${{HOOK_TOKEN}}'}}\n"
        )
        env = {"GREVAL_WATCH_CONFIG": str(config), "HOOK_TOKEN": SECRET + "-token"}
        args = ["--source", str(tmp_path / "land"), "-s", "answer_alignment", "--store", str(store), "--once",
                "--window", "2s", "--settle", "0s", "--junit", str(junit), "--bootstrap", "500",
                *judge_args(llm)]  # fmt: skip
        res = watch(*args, env=env)
        again = watch(*args, env=env)
    assert res.exit_code == 1, res.output
    alarms = [line for line in res.output.splitlines() if line.startswith("alarm: ")]
    assert alarms and all("lies below the baseline's" in a for a in alarms)
    with Store(store) as st:
        windows = st.watch_windows(st.watches()[0]["watch_id"], "answer_alignment")
    alarmed = [w for w in windows if w.alarm]
    assert alarmed and all(w.window_start + 2 > first_drifted for w in alarmed)  # no alarm before the drift
    drifted = [w for w in windows if w.window_start + 2 > first_drifted]
    assert alarmed[0].window_start <= drifted[1].window_start  # caught within two windows of the drift
    schema = xmlschema.XMLSchema(str(Path(__file__).parent / "fixtures" / "junit" / "junit-10.xsd"))
    schema.validate(str(junit))
    xml = junit.read_text()
    assert xml.count("<failure") == len(alarmed) and f'failures="{len(alarmed)}"' in xml
    assert [g["body"]["window"]["start"] for g in got] == [
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(w.window_start)) for w in alarmed
    ]  # one POST per window in alarm, the second pass posting none again
    assert [g["body"]["window"]["end"] for g in got] == [
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(w.window_start + 2)) for w in alarmed
    ]  # its end written as its start is (2 s windows)
    assert got[0]["path"] == f"/hooks/{SECRET}" and got[0]["headers"]["Authorization"] == f"Bearer {SECRET}-token"
    assert got[0]["body"]["metric"] == "answer_alignment" and got[0]["body"]["alarms"][0] in res.output
    assert again.exit_code == 1 and "alarm: " not in again.output  # still in alarm, not raised again
    for output in (res.output, again.output):
        assert SECRET not in output
    assert f"alarm posted to the webhook http://127.0.0.1:{url.rsplit(':', 1)[1]}/…" in res.output
    for path in tmp_path.rglob("*"):
        if path.is_file() and path.name != "watch.yaml":
            assert SECRET.encode() not in path.read_bytes(), path


def test_each_closed_window_sends_its_designed_share_to_review(llm: OpenAIServer, tmp_path: Path) -> None:
    """Each window, once closed, sends max(1, round(share × n)) of its n judged units to the review queue by
    greval review's design — the most doubtful by the judge's token confidence taken whole (π = 1), a control
    sample of the rest drawn within each verdict (π = drawn / left) —; greval review status reads the queue, and
    once people's labels are in, each window has its design-weighted agreement with people and its CI."""
    llm.script(judge_rules())
    llm.configure(logprobs="on")
    _paced(tmp_path / "land", 60, 30, 0.1)
    store = tmp_path / "s.sqlite"
    args = ["--source", str(tmp_path / "land"), "-s", "answer_alignment", "--store", str(store), "--once",
            "--window", "2s", "--settle", "0s", "--review-share", "0.3", "--logprobs", *judge_args(llm)]  # fmt: skip
    res = watch(*args)
    assert res.exit_code in (0, 1), res.output
    with Store(store) as st:  # under load the pass may end inside its last window: a pass after it closes routes it
        last_end = max(w.window_end for w in st.watch_windows(st.watches()[0]["watch_id"], "answer_alignment"))
    time.sleep(max(0.0, last_end - time.time() + 0.2))
    assert watch(*args).exit_code in (0, 1)
    with Store(store) as st:
        wid = st.watches()[0]["watch_id"]
        windows = st.watch_windows(wid, "answer_alignment")
        picked = st.query("SELECT stratum, probability, record_hash FROM annotation_selection")
        items = st.query("SELECT window_start, record_hash FROM watch_items WHERE status='judged'")
        verdicts = {r["record_hash"]: r["label"] for r in st.query("SELECT record_hash, label FROM verdicts")}
    from greval.watch.review import designed
    from greval.watch.windows import window_label

    assert windows and all(w.routed_at is not None for w in windows)
    for w in windows:
        label = window_label(w.window_start)
        mine = [p for p in picked if p["stratum"].startswith(label + " ")]
        units = [i["record_hash"] for i in items if i["window_start"] == w.window_start]
        assert len(mine) == w.review_units == designed(len(units), 0.3), label
        certain = [p for p in mine if p["stratum"].endswith(" uncertain")]
        assert all(p["probability"] == 1.0 for p in certain)
        assert len(certain) == len(mine) - round(len(mine) * 0.2)
        for verdict in {p["stratum"].split("control:")[1] for p in mine if "control:" in p["stratum"]}:
            drawn = [p for p in mine if p["stratum"].endswith(f"control:{verdict}")]
            left = [h for h in units if verdicts[h] == verdict and h not in {p["record_hash"] for p in certain}]
            assert all(p["probability"] == pytest.approx(len(drawn) / len(left)) for p in drawn), verdict
    # people label the queue: their answers stored under the watch's review dataset as a pull from Argilla
    # stores them (here written directly; people agree with the judge but on three items)
    flip = {"Correct": "Incorrect", "Incorrect": "Correct"}
    with Store(store) as st:
        ids = {r["record_hash"]: r["record_id"] for r in st.query("SELECT record_hash, record_id FROM record_ids")}
        st.put_human_labels(
            {"spec_name": "answer_alignment", "dataset": "answer_alignment-watch", "record_id": ids[p["record_hash"]],
             "record_hash": p["record_hash"], "annotator": "reviewer", "source": "argilla",
             "label": flip[verdicts[p["record_hash"]]] if i < 3 else verdicts[p["record_hash"]]}
            for i, p in enumerate(picked)
        )  # fmt: skip
    status = CliRunner().invoke(main, ["review", "status", "--store", str(store), "--spec", "answer_alignment",
                                       "--dataset", "answer_alignment-watch", "--no-pull"],
                                env={"COLUMNS": "200"})  # fmt: skip
    assert status.exit_code == 0, status.output
    assert f"{len(picked)} of {len(picked)} selected items labelled" in status.output
    assert f"{window_label(windows[0].window_start)} uncertain" in status.output
    after = watch(*args)
    assert "kappa" in after.output or "cohen_kappa" in after.output
    with Store(store) as st:
        figures = [w.figures for w in st.watch_windows(wid, "answer_alignment")]
    assert all(f and f["agreement"] is not None and f["agreement_figure"] == "cohen_kappa" for f in figures)


def _alternating_judge() -> list[dict[str, Any]]:
    """A judge whose verdict depends on the question alone (every other question Correct): each window gets both
    verdicts and the same score, so only people can make a window look worse."""
    rules: list[dict[str, Any]] = [
        {"match": re.escape(question), "regex": True,
         "action": {"type": "respond", "content": {"reason": "It states the fact.", "label": "Correct"}}}
        for question, _ in QUESTIONS[::2]
    ]  # fmt: skip
    rules.append({"match": "Metric: answer_alignment", "action": {"type": "respond", "content": {
        "reason": "It misses the fact.", "label": "Incorrect"}}})  # fmt: skip
    return rules


def test_people_disagreeing_with_the_judge_raise_the_agreement_alarm(llm: OpenAIServer, tmp_path: Path) -> None:
    """The judge judges alike all along (no score drift); people label every judged trace, agreeing with it in
    the first windows and contradicting it from the third on. The next pass computes each window's Cohen's kappa
    with people: the third window's lies below its baseline's (the windows before it) and is an alarm, said in a
    line and stored with the window; the second window, where people agree, is compared too and is no alarm."""
    llm.script(_alternating_judge())
    _paced(tmp_path / "land", 60, 60, 0.05)
    store = tmp_path / "s.sqlite"
    args = ["--source", str(tmp_path / "land"), "-s", "answer_alignment", "--store", str(store), "--once",
            "--window", "1s", "--settle", "0s", "--bootstrap", "300", *judge_args(llm)]  # fmt: skip
    first = watch(*args)
    assert first.exit_code in (0, 1), first.output
    assert "vs people" not in first.output  # nothing labelled yet: no agreement, no agreement alarm
    with Store(store) as st:
        wid = st.watches()[0]["watch_id"]
        starts = [w.window_start for w in st.watch_windows(wid, "answer_alignment")]
        items = st.query("SELECT window_start, record_id, record_hash FROM watch_items WHERE status='judged'")
        verdicts = {r["record_hash"]: r["label"] for r in st.query("SELECT record_hash, label FROM verdicts")}
        assert len(starts) >= 3 and {"Correct", "Incorrect"} <= set(verdicts.values()), (starts, verdicts)
        flip = {"Correct": "Incorrect", "Incorrect": "Correct"}
        st.put_human_labels(
            {"spec_name": "answer_alignment", "dataset": "answer_alignment-watch", "record_id": i["record_id"],
             "record_hash": i["record_hash"], "annotator": "reviewer", "source": "argilla",
             "label": verdicts[i["record_hash"]] if i["window_start"] < starts[2] else flip[verdicts[i["record_hash"]]]}
            for i in items
        )  # fmt: skip
    second = watch(*args)
    assert second.exit_code == 1, second.output
    with Store(store) as st:
        windows = {w.window_start: w for w in st.watch_windows(wid, "answer_alignment")}
    agreeing, contradicted = windows[starts[1]], windows[starts[2]]
    for w in (agreeing, contradicted):  # both compared with their baseline's agreement with people
        assert w.figures and w.figures["agreement_figure"] == "cohen_kappa" and w.figures["agreement"], w
        assert w.figures["baseline"]["agreement"] is not None, w.figures
    assert agreeing.figures and agreeing.figures["agreement"]["value"] == 1.0
    assert not any("vs people" in a for a in agreeing.figures["alarms"]), agreeing.figures["alarms"]
    label = agreeing.figures["label"]
    assert f"alarm: answer_alignment: window {label}: cohen_kappa" not in second.output
    assert contradicted.figures and contradicted.figures["agreement"]["value"] < 0
    [line] = [a for a in contradicted.figures["alarms"] if "vs people" in a]
    assert line.startswith(f"answer_alignment: window {contradicted.figures['label']}: cohen_kappa vs people -")
    assert "lies below the baseline's 1.000" in line and contradicted.alarm and line in contradicted.alarm
    assert f"alarm: {line}" in second.output
    assert not any("score" in a for a in (agreeing.figures["alarms"] + contradicted.figures["alarms"]))


def test_each_metric_is_judged_by_its_production_version(llm: OpenAIServer, tmp_path: Path) -> None:
    """The watch judges with the production version the store names, never the newest nor the one on the command
    line: answer_alignment's first watch makes the shipped version (v1) production; a ``greval run --promote`` of
    an edited file makes that (v2) production, and the next traces are judged by v2 even though the watch names
    the metric as before (a file of v1 is judged by v2 too, with a note); ``greval spec promote`` of the older
    v1 then has the next traces judged by v1 again. Each batch's verdicts are stored under the version's hash."""
    import yaml

    from greval.spec.load import resolve_specs

    llm.script(judge_rules())
    [v1] = resolve_specs(["answer_alignment"], with_dependencies=False)
    edited = v1.model_dump(mode="json", exclude_none=True)
    edited["steps"] = [*edited["steps"], "Say which fact decided it."]
    v2_file, v1_file = tmp_path / "v2.yaml", tmp_path / "v1.yaml"
    v2_file.write_text(yaml.safe_dump(edited))
    v1_file.write_text(yaml.safe_dump(v1.model_dump(mode="json", exclude_none=True)))
    [v2] = resolve_specs([str(v2_file)], with_dependencies=False)
    assert v2.hash != v1.hash
    land, store = tmp_path / "land", tmp_path / "s.sqlite"
    args = ["--source", str(land), "--store", str(store), "--once", "--settle", "0s", *judge_args(llm)]

    def batch(start: int, spec: str) -> tuple[set[str], Any]:
        traces = emit(land, 3, start=start, per_file=3)
        res = watch(*args, "-s", spec)
        assert res.exit_code == 0 and "3 trace(s) read, 3 chosen, 3 judged" in res.output, res.output
        ids = {t["trace_id"] for t in traces}
        with Store(store) as st:
            found = st.query("SELECT DISTINCT v.record_id, v.spec_hash FROM verdicts v JOIN watch_items w"
                             " ON w.record_hash = v.record_hash")  # fmt: skip
        return {r["spec_hash"] for r in found if r["record_id"] in ids}, res

    assert batch(0, "answer_alignment")[0] == {v1.hash}  # the first judging makes v1 production
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"id": "d1", "question": "When was the Ostra bridge opened?", "answer": "In 1911.",
                                "expected_answer": "In 1911."}) + "\n")  # fmt: skip
    ran = CliRunner().invoke(main, ["run", str(data), "-s", str(v2_file), "--store", str(store), "--promote",
                                    "--quiet", *judge_args(llm)], env={"OPENAI_API_KEY": TEST_KEY})  # fmt: skip
    assert ran.exit_code == 0, ran.output
    assert batch(3, "answer_alignment")[0] == {v2.hash}  # promoted by the run: the watch follows
    hashes, res = batch(6, str(v1_file))  # a file of another version: noted, production judged
    assert hashes == {v2.hash}
    assert (
        f"note: answer_alignment: the watch judges its production version {v2.hash[:12]}; {v1_file} is version "
        f"{v1.hash[:12]}" in " ".join(res.output.split())
    )
    promoted = CliRunner().invoke(main, ["spec", "promote", f"answer_alignment@{v1.hash[:10]}", "--store", str(store)])
    assert promoted.exit_code == 0, promoted.output
    assert batch(9, "answer_alignment")[0] == {v1.hash}  # the older version, promoted again, judges again
    with Store(store) as st:
        assert st.metric_version("answer_alignment").spec_hash == v1.hash


# ------------------------------------------------------------------------------------------ hostile sources
def _phoenix_rows(trace: str, n: int, *, broken: bool = False) -> list[dict[str, Any]]:
    """A trace as Phoenix's REST spans (a span export's JSONL rows): a root and ``n - 1`` children; ``broken``: one
    child without its span id."""
    root = {"context": {"trace_id": trace, "span_id": f"{trace[:12]}0000"}, "parent_id": None, "name": "rag",
            "span_kind": "CHAIN", "start_time": "2025-05-01T10:00:00+00:00", "end_time": "2025-05-01T10:00:01+00:00",
            "attributes": {"input.value": "When was the Ostra bridge opened?", "output.value": "In 1911.",
                           "metadata": json.dumps({"expected_answer": "In 1911."})}}  # fmt: skip
    out = [root]
    for k in range(1, n):
        ctx = {"trace_id": trace} if broken and k == 1 else {"trace_id": trace, "span_id": f"{trace[:12]}{k:04d}"}
        out.append({"context": ctx, "parent_id": root["context"]["span_id"], "name": "step", "span_kind": "CHAIN",
                    "attributes": {"input.value": "x"}})  # fmt: skip
    return out


def test_hostile_files_are_one_line_each_and_the_rest_is_judged(llm: OpenAIServer, tmp_path: Path) -> None:
    """A span that does not parse spoils its trace alone; a trace past the span cap is not read further; a file
    that is no trace export is skipped; a folder that is not one is one line and exit 2. Each is said in one line,
    never a traceback, and every good trace is judged."""
    llm.script(judge_rules())
    land = tmp_path / "land"
    good = emit(land, 10, per_file=10)
    spans = _phoenix_rows("a" * 32, 3, broken=True) + _phoenix_rows("b" * 32, 60) + _phoenix_rows("c" * 32, 3)
    (land / "export.jsonl").write_text("".join(json.dumps(r) + "\n" for r in spans))
    (land / "notes.json").write_text(json.dumps({"hello": "world"}))
    cut = land / "cut.json"  # an OTLP JSON file cut short: read as it streams, it is refused whole, in one line
    cut.write_text(next(land.glob("spans-*.json")).read_text()[:700])
    store = tmp_path / "s.sqlite"
    res = watch("--source", str(land), "-s", "answer_alignment", "--store", str(store), "--once", "--settle", "0s",
                "--max-spans", "50", *judge_args(llm))  # fmt: skip
    assert res.exit_code == 0, res.output
    notes = [line for line in res.output.splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: {land / 'export.jsonl'}: trace {'a' * 32}: a span does not parse ({land / 'export.jsonl'}: row 2: a "
        "Phoenix span needs context.trace_id and context.span_id): not judged",
        f"note: {land / 'export.jsonl'}: trace {'b' * 32} has more than 50 spans: not judged",
        f"note: {land / 'notes.json'}: not read (no trace export: OTLP JSON, or a Phoenix, LangSmith or Langfuse "
        "export)",
        f"note: {cut}: not read ({cut}: invalid JSON (Unterminated string starting at))",
    ]
    assert f"{len(good) + 3} trace(s) read, {len(good) + 1} chosen, {len(good) + 1} judged" in res.output
    assert "Traceback" not in res.output
    with Store(store) as st:
        counted = st.query("SELECT stratum, SUM(seen) AS n FROM watch_strata WHERE stratum LIKE '!%' GROUP BY stratum")
    assert {r["stratum"]: r["n"] for r in counted} == {"!malformed": 1, "!oversize": 1}
    missing = watch("--source", str(tmp_path / "nowhere"), "-s", "answer_alignment", "--store", str(store), "--once")
    assert missing.exit_code == 2
    assert missing.output.strip() == (
        f"error: {tmp_path / 'nowhere'}: not a folder (greval watch reads a Phoenix project or a folder of exports)"
    )


def _huge_otlp_trace(path: Path, trace: str, n: int) -> None:
    """One trace of ``n`` spans as one OTLP JSON request (a root and its children), written as it goes: the
    test's own memory holds one span at a time."""
    t0 = 1_764_400_000_000_000_000
    head = '{"resourceSpans": [{"resource": {"attributes": []}, "scopeSpans": [{"scope": {"name": "big"}, "spans": ['
    with path.open("w") as fh:
        fh.write(head)
        for k in range(n):
            parent = f', "parentSpanId": "{1:016x}"' if k else ""
            fh.write(f'{"," if k else ""}{{"traceId": "{trace}", "spanId": "{k + 1:016x}"{parent}, "name": "step", '
                     f'"kind": 1, "startTimeUnixNano": "{t0 + k}", "endTimeUnixNano": "{t0 + k + 1}", '
                     '"attributes": [{"key": "input.value", "value": {"stringValue": "x"}}]}')  # fmt: skip
        fh.write("]}]}]}\n")


_PEAKS = """
import json, resource, sys
from click.testing import CliRunner
from greval.cli import main
out = []
for folder, store in zip(sys.argv[1::2], sys.argv[2::2]):
    res = CliRunner().invoke(main, ["watch", "--source", folder, "-s", "rouge_l", "--store", store, "--once",
                                    "--settle", "0s"], env={"COLUMNS": "200"})
    out.append({"exit": res.exit_code, "output": res.output,
                "peak_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024})
print(json.dumps(out))
"""


def test_a_200k_span_trace_is_one_line_and_costs_no_more_memory(tmp_path: Path) -> None:
    """A 200,000-span trace in one OTLP JSON file (60 MB) next to an export of ordinary traces: the watch says
    it in one line and judges the others. One process watches a folder of the ordinary traces alone, then the
    folder with the huge trace too; its peak RSS after the second pass is within 48 MB of its peak after the
    first (what stays held is the 10,000 spans up to the cap; read whole, the file cost 307 MiB more)."""
    small, big = tmp_path / "small", tmp_path / "big"
    good = emit(small, 6, per_file=6)
    big.mkdir()
    shutil.copy(small / "spans-00001.json", big / "spans-00001.json")
    huge = "f" * 32
    _huge_otlp_trace(big / "huge.json", huge, 200_000)
    started = time.monotonic()
    done = subprocess.run([sys.executable, "-c", _PEAKS, str(small), str(tmp_path / "small.db"), str(big),
                           str(tmp_path / "big.db")], capture_output=True, text=True, cwd=ROOT, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True)  # fmt: skip
    alone, with_huge = json.loads(done.stdout)
    print(f"{time.monotonic() - started:.1f} s; peak RSS {alone['peak_mb']:.1f} MiB, then {with_huge['peak_mb']:.1f}")
    assert alone["exit"] == with_huge["exit"] == 0, (alone, with_huge)
    notes = [line for line in with_huge["output"].splitlines() if line.startswith("note: ")]
    assert notes == [f"note: {big / 'huge.json'}: trace {huge} has more than 10000 spans: not judged"]
    assert f"{len(good) + 1} trace(s) read, {len(good)} chosen, {len(good)} judged" in with_huge["output"]
    assert "Traceback" not in with_huge["output"]
    assert rows(tmp_path / "big.db", "SELECT status, COUNT(*) FROM watch_items GROUP BY status") == [
        ("judged", len(good))
    ]
    assert with_huge["peak_mb"] - alone["peak_mb"] < 48, (alone["peak_mb"], with_huge["peak_mb"])


def test_an_unreachable_phoenix_is_a_line_per_try_then_exit_75(tmp_path: Path) -> None:
    port = free_port()
    res = watch("--source", f"phoenix://127.0.0.1:{port}/rag", "-s", "answer_alignment", "--store",
                str(tmp_path / "s.db"), "--once", "--retries", "2")  # fmt: skip
    assert res.exit_code == 75
    down = (
        f"phoenix http://127.0.0.1:{port} project 'rag': cannot reach Phoenix"
        " (ConnectError: [Errno 111] Connection refused)"
    )
    assert res.output.splitlines() == [
        f"{down}; trying again in 1 s",
        f"{down}; trying again in 2 s",
        f"error: {down}",
    ]


EXPORTS = ("langsmith_runs.jsonl", "langsmith_chain_runs.jsonl", "langfuse_observations.jsonl", "langfuse_trace.json")


def test_langsmith_and_langfuse_exports_landing_in_a_folder_are_watched_as_greval_run_reads_them(
    llm: OpenAIServer, tmp_path: Path
) -> None:
    """LangSmith runs and Langfuse observations / trace downloads (the suite's export fixtures, tests/fixtures/traces)
    land in a watched folder one after another: each trace becomes the record ``greval run`` makes of it (its id
    and content hash), those with an expected answer are judged once, those without are said in one line as
    ``greval run`` says them (where a trace's expected answer is read), and a second pass reads nothing."""
    from greval.traces.detect import open_data

    llm.script(judge_rules())
    land, store = tmp_path / "land", tmp_path / "s.sqlite"
    land.mkdir()
    expected: dict[str, str] = {}
    answerable = 0
    for n, name in enumerate(EXPORTS):
        shutil.copy(ROOT / "tests" / "fixtures" / "traces" / name, land / name)
        os.utime(land / name, (1_700_000_000 + n, 1_700_000_000 + n))  # landed in this order
        made = list(open_data(land / name, None, None, None))
        expected |= {row.id: row.hash for row in made}
        answerable += sum(1 for row in made if row.data.get("expected_answer"))
    n, lacking = len(expected), len(expected) - answerable
    assert answerable and lacking, (answerable, lacking)  # both kinds are among the fixtures
    args = ["--source", str(land), "-s", "answer_alignment", "--store", str(store), "--once", "--settle", "0s",
            *judge_args(llm)]  # fmt: skip
    first = watch(*args)
    assert first.exit_code == 0, first.output
    assert f"{n} trace(s) read, {n} chosen, {answerable} judged" in first.output, first.output
    notes = [line for line in first.output.splitlines() if line.startswith("note: ")]
    assert notes == [
        f"note: answer_alignment: {lacking} trace(s) skipped — missing required input: expected_answer — greval "
        "reads a trace's expected_answer from the root span's metadata key 'expected_answer'"
    ], first.output
    judged = rows(store, "SELECT record_id, record_hash FROM watch_items")
    assert dict(judged) == expected  # the records greval run makes of these files: same ids, same content
    with Store(store) as st:  # the windows count as the pass's line does: a skipped trace is not judged
        volumes = [w.figures["volume"] for w in st.watch_windows(st.watches()[0]["watch_id"], "answer_alignment")]
    assert sum(v["judged"] for v in volumes) == answerable and sum(v["skipped"] for v in volumes) == lacking
    assert llm.stats()["total"] == answerable
    again = watch(*args)
    assert "0 trace(s) read, 0 chosen, 0 judged" in again.output and llm.stats()["total"] == answerable


# ------------------------------------------------------------------------------------------------ the page
@pytest.mark.browser
def test_the_page_shows_the_windows_and_opens_each_window_s_records(llm: OpenAIServer, tmp_path: Path) -> None:
    """``greval watch page``: the trend figure and one row per window, in Chromium from disk; a window's row opens
    the explorer filtered to that window, showing exactly the traces the window judged."""
    playwright = pytest.importorskip("playwright.sync_api")
    from tests.test_report_explorer import ARGS, CHROMIUM

    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (CI installs it)")
    llm.script(judge_rules())
    _paced(tmp_path / "land", 40, 20, 0.1)
    store = tmp_path / "s.sqlite"
    res = watch("--source", str(tmp_path / "land"), "-s", "answer_alignment", "--store", str(store), "--once",
                "--window", "2s", "--settle", "0s", "--bootstrap", "200", *judge_args(llm))  # fmt: skip
    assert res.exit_code in (0, 1), res.output
    page_res = watch("page", "--store", str(store), "-o", str(tmp_path / "page"))
    assert page_res.exit_code == 0, page_res.output
    with Store(store) as st:
        windows = st.watch_windows(st.watches()[0]["watch_id"], "answer_alignment")
    assert (tmp_path / "page" / "index.html").stat().st_mode & 0o777 == 0o600
    with playwright.sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        page.goto((tmp_path / "page" / "index.html").as_uri())
        sizes = page.eval_on_selector_all("figure img", "els => els.map(e => [e.complete, e.naturalWidth])")
        assert sizes and all(ok and w > 100 for ok, w in sizes)
        links = page.locator("table tr td:first-child a")
        assert links.count() == len(windows)
        for i, w in enumerate(reversed(windows)):  # newest first
            link = links.nth(i)
            assert link.inner_text() == w.figures["label"] if w.figures else False
        link = links.nth(len(windows) - 1)  # the oldest window
        link.click()
        page.wait_for_selector("body[data-ready=list]")
        judged = windows[0].figures["volume"]["judged"] if windows[0].figures else -1
        total = sum(w.figures["volume"]["judged"] for w in windows if w.figures)
        assert page.locator("#count").inner_text() == f"{judged} of {total} records"
        browser.close()
    assert errors == []


# ------------------------------------------------------------------------------------------ a live Phoenix
CANARY = "px-canary-KEY-5e1b77-never-print"


def _health(port: int) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())
    except OSError:
        return 0, {}


def _until(what: Any, timeout: float, every: float = 0.25) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(every)
    raise AssertionError(f"still not so after {timeout:.0f} s: {what}")


def _written(store: Path) -> int:
    try:
        return int(rows(store, "SELECT COUNT(*) FROM watch_items WHERE status='written'")[0][0])
    except Exception:  # the store is made by the watch's first pass
        return 0


@pytest.mark.slow
@pytest.mark.skipif(importlib.util.find_spec("phoenix") is None, reason="pip install 'greval[phoenix]'")
def test_a_live_phoenix_drifting_watched_killed_and_restarted(openai_server: OpenAIServer, tmp_path: Path) -> None:
    """The whole loop against a real Phoenix. The watch starts before Phoenix does: its health says failing and
    it retries with back-off, never exiting. Then Phoenix comes up, and the instrumented RAG app answers 96
    questions over ~30 s (its LLM calls to one test server), drifting to the wrong chunk after 48. The watch
    (--every 1s, 4 s windows; its judge another test server) is SIGKILLed once 24 verdicts are written back,
    restarted with the same command, and stopped with SIGTERM once it has caught up. Then: the drift raised an
    alarm within two windows of its start and none before; every trace was judged once and written back once
    (counted at the judge server and read back from Phoenix); each closed window sent its designed share to
    review; the canary PHOENIX_API_KEY is in no output or file."""
    from greval.testing.phoenix import PhoenixServer
    from greval.watch.review import designed

    openai_server.reset()
    store, port = tmp_path / "s.sqlite", free_port()
    env = {**os.environ, "OPENAI_API_KEY": TEST_KEY, "PHOENIX_API_KEY": CANARY, "COLUMNS": "200",
           "PYTHONPATH": str(ROOT)}  # fmt: skip
    px = PhoenixServer()  # not started: its port is known, nothing answers there yet
    with OpenAIServer() as judge, contextlib.closing(_Stops(px)), contextlib.ExitStack() as files:
        judge.script(judge_rules())
        judge.configure(logprobs="on")
        cmd = [sys.executable, "-m", "greval", "watch", "--source", f"phoenix://127.0.0.1:{px.port}/rag", "-s",
               "answer_alignment", "--store", str(store), "--every", "1s", "--window", "4s", "--settle", "1s",
               "--review-share", "0.25", "--logprobs", "-c", "2", "--health-port", str(port), "--bootstrap", "300",
               "--judge", "openai:judge-test", "--base-url", judge.base_url]  # fmt: skip
        logs = [files.enter_context((tmp_path / f"watch-{i}.log").open("w")) for i in range(2)]
        proc = subprocess.Popen(cmd, env=env, stdout=logs[0], stderr=subprocess.STDOUT, cwd=tmp_path)
        _, body = _until(lambda: (s := _health(port))[0] == 503 and s, 60)
        assert "cannot reach Phoenix" in body["last_error"] and body["retry_in_s"] >= 1 and proc.poll() is None
        px.start()
        app = subprocess.Popen(
            [sys.executable, "-m", "tests.watch_app", "--phoenix", px.url, "--project", "rag", "--llm",
             openai_server.base_url, "--n", "96", "--pace", "0.2", "--drift-after", "48"],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, env=env,
        )  # fmt: skip
        _until(lambda: _written(store) >= 24, 120)
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
        proc = subprocess.Popen(cmd, env=env, stdout=logs[1], stderr=subprocess.STDOUT, cwd=tmp_path)
        out, _ = app.communicate(timeout=180)
        traces = [json.loads(line) for line in out.splitlines()]
        assert len(traces) == 96
        _until(lambda: _written(store) == 96, 120)
        _until(lambda: rows(store, "SELECT COUNT(*) FROM watch_windows WHERE routed_at IS NULL")[0][0] <= 1, 60)
        _until(lambda: _health(port)[0] == 200, 30)  # polled: a loaded machine may hold one answer past 5 s
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        calls = judge.stats()["total"]
        annotations = _phoenix_annotations(px.url, [t["root_span_id"] for t in traces])
    lines = [(tmp_path / f"watch-{i}.log").read_text() for i in range(2)]
    assert "stopped: every page read is committed" in lines[1]
    # judged once: one judgement per trace; the judge was asked again only for what was in flight at the kill
    with Store(store) as st:
        made = st.query("SELECT COUNT(*) AS n FROM judgements")[0]["n"]
        verdicts = {r["record_id"]: r["label"] for r in st.query("SELECT record_id, label FROM verdicts")}
        wid = st.watches()[0]["watch_id"]
        windows = st.watch_windows(wid, "answer_alignment")
        batches = st.query(
            "SELECT window_start, review_batch, COUNT(*) AS n FROM watch_items WHERE review_batch IS NOT NULL"
            " GROUP BY window_start, review_batch"
        )
    assert made == 96 and 96 <= calls <= 96 + 2, (made, calls)
    # written back once: one annotation per trace, equal to the store's verdict, never rewritten
    assert sorted(a["span_id"] for a in annotations) == sorted(t["root_span_id"] for t in traces)
    by_root = {t["root_span_id"]: t["trace_id"] for t in traces}
    for a in annotations:
        assert a["result"]["label"] == verdicts[by_root[a["span_id"]]] and a["identifier"] == "greval"
        assert a["created_at"] == a["updated_at"]
    # the drift: no alarm before it, one within two windows of its start
    first = min(t["started"] for t in traces if t["drifted"])
    alarmed = [w.window_start for w in windows if w.alarm]
    drifted = [w.window_start for w in windows if w.window_start + 4 > first]
    assert alarmed and min(alarmed) >= drifted[0] and min(alarmed) <= drifted[1], (alarmed, drifted)
    assert "alarm: answer_alignment: window" in lines[0] + lines[1]
    # each closed window's designed share went to review: a batch at its close, and one per late arrival's pass
    designs: dict[float, int] = {}
    for r in batches:
        designs[float(r["window_start"])] = designs.get(float(r["window_start"]), 0) + designed(int(r["n"]), 0.25)
    routed = [w for w in windows if w.routed_at is not None]
    assert len(routed) >= len(windows) - 1
    assert all(w.review_units == designs[w.window_start] for w in routed), [(w, designs) for w in windows]
    for text in lines:
        assert CANARY not in text and "Traceback" not in text
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert CANARY.encode() not in path.read_bytes(), path


class _Stops:
    """Stops a Phoenix server (started or not) on close."""

    def __init__(self, px: Any) -> None:
        self.px = px

    def close(self) -> None:
        self.px.stop()


def _phoenix_annotations(url: str, span_ids: list[str]) -> list[dict[str, Any]]:
    from phoenix.client import Client

    found = Client(base_url=url).spans.get_span_annotations(span_ids=span_ids, project_identifier="rag")
    return [dict(a) for a in found]


# ------------------------------------------------------------------------------------------------ memory
def test_a_long_running_watch_holds_no_more_memory_after_10000_spans(tmp_path: Path) -> None:
    """A watch kept open, as ``--every`` keeps it, reads 10,200 spans (3,400 traces of 3 spans) landing in ten
    batches of four files, a pass per batch. What it holds after a pass (the interpreter's allocated blocks, after
    a collection) stays flat: from the second pass to the tenth it grows by fewer blocks than one per span read
    (spans are read a page at a time and let go; what remains is the store's bounded cache of recent records).
    The process's RSS after each pass is printed, not asserted (the allocator keeps what it once used)."""
    import gc

    from greval.flows.watch import Watch
    from greval.llm.config import JudgeChoice
    from greval.watch.options import WatchOptions
    from greval.watch.sampling import Rules
    from greval.watch.service import rss_mb

    staged, land = tmp_path / "staged", tmp_path / "land"
    emit(staged, 3400, per_file=85)
    files = sorted(staged.glob("*.json"))
    assert len(files) == 40
    land.mkdir()
    opts = WatchOptions(source=str(land), specs=("rouge_l",), rules=Rules(rate=0.1), settle_s=0.0, page_size=100)
    held: list[int] = []
    rss: list[float | None] = []
    read = 0
    with Store(tmp_path / "s.sqlite") as st:
        w = Watch(st, opts, JudgeChoice(), stop=threading.Event())
        try:
            for batch in range(10):
                for f in files[batch * 4 : batch * 4 + 4]:
                    f.rename(land / f.name)  # lands whole, its mtime kept: read in the order it was written
                read += w.once(latest=False).read
                gc.collect()
                held.append(sys.getallocatedblocks())
                rss.append(rss_mb())
        finally:
            w.close()
    assert read == 3400
    print("allocated blocks after each pass:", held, "RSS MiB:", rss)
    assert held[-1] - held[1] < 3400 * 3 * 0.8, held
