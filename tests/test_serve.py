"""`greval serve`: metrics over real HTTP (uvicorn on a free port), judged by the local OpenAI-compatible test
server, sharing the store and cache of `greval run`."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

pytest.importorskip("langserve")
import uvicorn

from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.serve import ServeSettings, create_app
from greval.spec import resolve_specs
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.conftest import TEST_KEY

FAST = RunOptions(concurrency=8, retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.1))
SPECS = ["answer_alignment", "chunk_evaluation"]
KEY = "serve-key-0123456789"


def rows(n: int, start: int = 0) -> list[dict[str, Any]]:
    return [
        {
            "id": f"r{i}",
            "question": f"Question number {i}?",
            "expected_answer": f"Expected {i}.",
            "answer": f"Answer {i}.",
            "chunks": [f"chunk {i}.{k}" for k in range(2)],
            "system": "A",
        }
        for i in range(start, start + n)
    ]


def cfg(srv: OpenAIServer) -> JudgeConfig:
    return JudgeConfig.parse("openai:judge-test", base_url=srv.base_url, timeout=10)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def serving(srv: OpenAIServer, store: Path, **settings: Any) -> Iterator[str]:
    """uvicorn with the app in a thread; yields its base URL."""
    app = create_app(resolve_specs(SPECS), store, cfg(srv), FAST, ServeSettings(**settings))
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline and thread.is_alive(), "server did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(20)


def verdict_rows(path: Path) -> list[tuple[Any, ...]]:
    with contextlib.closing(sqlite3.connect(path)) as db:
        return sorted(
            db.execute(
                "SELECT spec_key, judge_key, record_hash, item_id, spec_name, spec_hash, record_id, status, label,"
                " value, score, confidence, reason, error, error_kind FROM verdicts"
            ).fetchall()
        )


def no_traceback(response: httpx.Response) -> None:
    assert "Traceback" not in response.text and 'File "' not in response.text


def test_v1_judge_invoke_and_batch_store_what_greval_run_stores(llm: OpenAIServer, tmp_path: Path) -> None:
    served, ran = tmp_path / "served.sqlite", tmp_path / "ran.sqlite"
    data = rows(4)
    with serving(llm, served) as url, httpx.Client(base_url=url, timeout=30) as http:
        r = http.post("/v1/judge", json={"spec": SPECS, "records": data[:2]})
        assert r.status_code == 200, r.text
        body = r.json()
        assert [x["id"] for x in body["results"]] == ["r0", "r1"]
        assert all(not x["cached"] for x in body["results"]) and body["calls"] == 4

        # LangServe: the typed input holds the declared fields; the record's others go in extra_fields.
        def typed(row: dict[str, Any], spec: str) -> dict[str, Any]:
            declared = (
                "id",
                "question",
                *(("chunks",) if spec == "chunk_evaluation" else ("answer", "expected_answer")),
            )
            rest = {k: v for k, v in row.items() if k not in declared}
            return {**{k: row[k] for k in declared}, "extra_fields": rest}

        r = http.post("/judges/answer_alignment/invoke", json={"input": typed(data[2], "answer_alignment")})
        assert r.status_code == 200, r.text
        out = r.json()["output"]
        assert out["record_id"] == "r2" and out["ok"] and not out["cached"] and out["calls"] == 1
        r = http.post(
            "/judges/chunk_evaluation/batch", json={"inputs": [typed(d, "chunk_evaluation") for d in data[2:]]}
        )
        assert r.status_code == 200, r.text
        assert [o["record_id"] for o in r.json()["output"]] == ["r2", "r3"]
        r = http.post("/judges/answer_alignment/invoke", json={"input": typed(data[3], "answer_alignment")})
        assert r.status_code == 200
        # the stored verdicts, read back
        r = http.get("/v1/results", params={"record_id": "r1", "spec": "chunk_evaluation"})
        assert [v["record_id"] for v in r.json()["verdicts"]] == ["r1"]
        assert len(r.json()["verdicts"][0]["verdicts"]) == 2
    from greval.dataset.records import Record

    records = [Record.from_mapping(d) for d in data]
    with Store(ran) as st:
        run(resolve_specs(SPECS), records, st, cfg(llm), options=FAST)
    assert verdict_rows(served) == verdict_rows(ran) and len(verdict_rows(ran)) == 4 * 3
    # same cache: `greval run` on the served store makes no call
    before = llm.stats()["total"]
    with Store(served) as st:
        summary = run(resolve_specs(SPECS), records, st, cfg(llm), options=FAST)
    assert summary.calls == 0 and llm.stats()["total"] == before


def test_identical_requests_share_one_call_and_a_warm_one_makes_none(llm: OpenAIServer, tmp_path: Path) -> None:
    llm.configure(latency=0.5)
    record = rows(1)[0]
    with serving(llm, tmp_path / "s.sqlite") as url:

        async def burst() -> list[httpx.Response]:
            async with httpx.AsyncClient(base_url=url, timeout=30) as http:
                return await asyncio.gather(
                    *(http.post("/v1/judge", json={"spec": "answer_alignment", "records": [record]}) for _ in range(50))
                )

        answers = asyncio.run(burst())
        assert all(a.status_code == 200 for a in answers)
        assert llm.stats()["total"] == 1
        labels = {a.json()["results"][0]["verdicts"]["answer_alignment"]["verdicts"][0]["label"] for a in answers}
        assert len(labels) == 1
        assert sum(a.json()["calls"] for a in answers) == 1
        with httpx.Client(base_url=url) as http:
            again = http.post("/v1/judge", json={"spec": "answer_alignment", "records": [record]}).json()
            assert again["calls"] == 0 and again["results"][0]["cached"]
            assert llm.stats()["total"] == 1
            metrics = http.get("/metrics").text
        assert 'greval_serve_cache_hits_total{spec="answer_alignment"} 1' in metrics
        assert 'greval_serve_judge_calls_total{spec="answer_alignment"} 1' in metrics
        assert 'greval_serve_shared_total{spec="answer_alignment"} 49' in metrics
        assert 'greval_serve_requests_total{method="POST",route="/v1/judge",status="200"} 51' in metrics
        assert 'greval_serve_request_duration_seconds_count{route="/v1/judge"} 51' in metrics


def test_two_servers_on_one_store_pay_once_and_a_key_over_its_cap_gets_429(llm: OpenAIServer, tmp_path: Path) -> None:
    """Two servers (as two --workers) on one store: the store's claim makes them share the call. A key with a
    cap of 2 judging requests in flight gets 429 on the third."""
    llm.configure(latency=0.6)
    store, record = tmp_path / "s.sqlite", rows(1)[0]
    body = {"spec": "answer_alignment", "records": [record]}
    with serving(llm, store, requests_per_key=2) as one, serving(llm, store, requests_per_key=2) as two:

        async def burst(urls: list[str]) -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as http:
                return await asyncio.gather(*(http.post(f"{u}/v1/judge", json=body) for u in urls))

        answers = asyncio.run(burst([one, two, one, two]))
        assert all(a.status_code == 200 for a in answers), [a.text for a in answers]
        assert llm.stats()["total"] == 1
        assert sum(a.json()["calls"] for a in answers) == 1
        other = {**body, "records": rows(1, start=5)}

        async def crowd() -> list[httpx.Response]:
            async with httpx.AsyncClient(timeout=30) as http:
                return await asyncio.gather(*(http.post(f"{one}/v1/judge", json=other) for _ in range(3)))

        statuses = sorted(a.status_code for a in asyncio.run(crowd()))
        assert statuses == [200, 200, 429]


def test_refusals_are_json_name_the_field_and_leak_nothing(
    llm: OpenAIServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    sentinel = "sk-SENTINEL-provider-key-77777777"
    monkeypatch.setenv("OPENAI_API_KEY", sentinel)
    caplog.set_level(logging.DEBUG)
    with serving(llm, tmp_path / "s.sqlite", api_keys=(KEY,), max_body=4000, max_records=2) as url:
        seen: list[httpx.Response] = []
        with httpx.Client(base_url=url, timeout=30) as http:

            def call(method: str, path: str, status: int, **kw: Any) -> Any:
                r = http.request(method, path, **kw)
                seen.append(r)
                assert r.status_code == status, (path, r.status_code, r.text)
                no_traceback(r)
                return r.json()

            ok = {"Authorization": f"Bearer {KEY}"}
            assert call("GET", "/healthz", 200)["status"] == "ok"  # open without a key
            assert call("GET", "/v1/specs", 401)["error"]["kind"] == "unauthorized"
            call("GET", "/v1/specs", 401, headers={"Authorization": "Bearer wrong-key"})
            call("POST", "/judges/answer_alignment/invoke", 401, json={"input": {}})
            call("GET", "/metrics", 401, headers={"X-API-Key": "nope"})
            assert [s["name"] for s in call("GET", "/v1/specs", 200, headers={"X-API-Key": KEY})] == SPECS
            call("GET", "/v1/specs", 200, headers={"Cookie": f"greval_api_key={KEY}"})  # the playground's way
            big = {"spec": "answer_alignment", "records": [{"question": "x" * 5000}]}
            assert call("POST", "/v1/judge", 413, headers=ok, json=big)["error"]["field"] == "body"

            def chunked() -> Iterator[bytes]:  # no Content-Length: the limit counts what arrives
                yield b'{"spec": "answer_alignment", "records": [{"question": "'
                yield from (b"x" * 500 for _ in range(20))
                yield b'"}]}'

            chunked_headers = {**ok, "Content-Type": "application/json"}
            assert (
                call("POST", "/v1/judge", 413, headers=chunked_headers, content=chunked())["error"]["field"] == "body"
            )
            many = {"spec": "answer_alignment", "records": rows(3)}
            many["records"] = [{"question": "q", "answer": str(i)} for i in range(3)]
            assert call("POST", "/v1/judge", 413, headers=ok, json=many)["error"]["field"] == "records"
            bad = {"spec": "chunk_evaluation", "records": [{"question": "q", "chunks": 7}]}
            err = call("POST", "/v1/judge", 422, headers=ok, json=bad)["error"]
            assert err["field"] == "records[0].chunks" and "chunks" in err["message"]
            err = call("POST", "/v1/judge", 422, headers=ok, json={"spec": "answer_alignment", "records": [3]})["error"]
            assert err["field"] == "records[0]"
            err = call("POST", "/v1/judge", 422, headers=ok, json={"records": []})["error"]
            assert err["field"] == "spec"
            err = call("POST", "/judges/answer_alignment/invoke", 422, headers=ok, json={"input": {"answer": "a"}})
            assert "question" in json.dumps(err)
            err = call("POST", "/v1/judge", 404, headers=ok, json={"spec": "nope", "records": []})["error"]
            assert err["kind"] == "unknown_spec" and err["field"] == "spec"
            call("GET", "/v1/specs/nope", 404, headers=ok)
            call("POST", "/judges/nope/invoke", 404, headers=ok, json={"input": {}})
            # the judge refuses the provider key and echoes it: nothing of it reaches the client or the log
            llm.script([{"action": {"type": "fault", "status": 401, "echo_auth": True}}])
            rec = {"spec": "answer_alignment", "records": [{"question": "q?", "answer": "a", "expected_answer": "e"}]}
            err = call("POST", "/v1/judge", 503, headers=ok, json=rec)["error"]
            assert err["kind"] == "judge_auth"
            schema = call("GET", "/v1/specs/chunk_evaluation", 200, headers=ok)
            assert schema["input_schema"]["required"] == ["question", "chunks"]
            # LangServe's playground cannot draw a nullable field (anyOf [..., null]): none is declared so
            assert "null" not in json.dumps(schema["input_schema"])
            assert (
                call("GET", "/judges/chunk_evaluation/input_schema", 200, headers=ok)["title"] == "ChunkEvaluationInput"
            )
        assert llm.stats()["total"] >= 1  # the judge was called with the sentinel key
        for r in seen:
            assert sentinel not in r.text and KEY not in r.text
        assert sentinel not in caplog.text and KEY not in caplog.text


def test_remote_runnable_round_trip(llm: OpenAIServer, tmp_path: Path) -> None:
    from langserve import RemoteRunnable

    with serving(llm, tmp_path / "s.sqlite", api_keys=(KEY,)) as url:
        judge = RemoteRunnable(f"{url}/judges/answer_alignment", headers={"Authorization": f"Bearer {KEY}"})
        rec = {
            "id": "q1",
            "question": "Why?",
            "answer": "Because.",
            "expected_answer": "So.",
            "extra_fields": {"system": "B"},
        }
        first = judge.invoke(rec)
        again = judge.invoke(rec)
        both = judge.batch([rec, {**rec, "id": "q2"}])
    assert first["record_id"] == "q1" and first["ok"] and not first["cached"]
    assert again["cached"] and again["verdicts"] == first["verdicts"]
    assert [b["record_id"] for b in both] == ["q1", "q2"] and all(b["cached"] for b in both)
    assert llm.stats()["total"] == 1


def start_serve(llm: OpenAIServer, store: Path, *flags: str) -> tuple[subprocess.Popen[str], str]:
    """A real `greval serve` process (keys from GREVAL_SERVE_KEYS) judging with the test server; returns it and
    its base URL once /healthz answers. The caller ends it (`stop_serve`)."""
    port = free_port()
    env = {**os.environ, "OPENAI_API_KEY": TEST_KEY, "GREVAL_SERVE_KEYS": KEY}
    cmd = [sys.executable, "-m", "greval", "serve", "-s", "answer_alignment", "--store", str(store)]
    cmd += ["--judge", "openai:judge-test", "--base-url", llm.base_url, "--port", str(port), *flags]
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"{url}/healthz").status_code == 200:
                return proc, url
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            _, err = proc.communicate()
            raise AssertionError(f"greval serve did not start: {err[-3000:]}")
        time.sleep(0.1)


@contextlib.contextmanager
def greval_serve(llm: OpenAIServer, store: Path, *flags: str) -> Iterator[str]:
    """`start_serve` for the length of a block: yields the base URL, then SIGTERMs the process (killed if it
    has not exited in 30 s)."""
    proc, url = start_serve(llm, store, *flags)
    try:
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()


def test_sigterm_finishes_and_stores_the_judgement_in_flight(llm: OpenAIServer, tmp_path: Path) -> None:
    llm.configure(latency=1.5)
    store = tmp_path / "s.sqlite"
    proc, url = start_serve(llm, store)
    try:
        deadline = time.monotonic() + 60
        got: list[httpx.Response] = []
        body = {
            "spec": "answer_alignment",
            "records": [{"id": "x", "question": "q?", "answer": "a", "expected_answer": "e"}],
        }
        client = threading.Thread(
            target=lambda: got.append(httpx.post(f"{url}/v1/judge", json=body, headers={"X-API-Key": KEY}, timeout=30))
        )
        client.start()
        while llm.stats()["in_flight"] == 0:  # the judge call is under way
            assert time.monotonic() < deadline and client.is_alive(), [g.text for g in got]
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
        client.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, err
    assert got and got[0].status_code == 200, err
    assert got[0].json()["results"][0]["verdicts"]["answer_alignment"]["ok"]
    with Store(store) as st:
        assert [r.id for r in st.records_with_ids(["x"])] == ["x"]
    assert len(verdict_rows(store)) == 1
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any(line["route"] == "/v1/judge" and line["status"] == 200 and line["key"] for line in lines)
    assert KEY not in err and TEST_KEY not in err


def test_compiled_metrics_declare_their_typed_input() -> None:
    """`compile` declares the spec's record model (what `add_routes(app, compile(spec))` shows), and still
    takes a plain mapping."""
    from greval.judge import compile

    bleu = compile(resolve_specs(["bleu"])[0])
    schema = bleu.get_input_jsonschema()
    assert schema["title"] == "BleuInput" and schema["required"] == ["answer", "expected_answer"]
    assert bleu.get_output_jsonschema()["title"] == "JudgeResult"
    assert bleu.invoke({"answer": "a b c d", "expected_answer": "a b c d"}).ok


def test_hostile_json_is_a_400_on_every_route(llm: OpenAIServer, tmp_path: Path) -> None:
    """A 100,000-deep nested body, a 5,000-digit integer, a body that is not UTF-8 and one that is not JSON:
    4xx JSON naming the body on greval's /v1 API and on the LangServe routes alike (before: LangServe's
    routes answered 500 `internal` with a RecursionError / ValueError in the log), and the server still
    judges afterwards."""
    deep = b'{"input": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    huge = b'{"input": {"question": "q", "answer": "a", "expected_answer": "e", "extra_fields": {"n": 1' + b"7" * 5000
    huge += b"}}}"
    bodies = {"deep": (deep, 400), "huge": (huge, 400), "latin-1": ('{"input": "é"}'.encode("latin-1"), 400)}
    bodies["not json"] = (b'{"input": ', 422)
    routes = ["/v1/judge", "/judges/answer_alignment/invoke", "/judges/answer_alignment/batch"]
    headers = {"X-API-Key": KEY, "Content-Type": "application/json"}
    with greval_serve(llm, tmp_path / "s.sqlite") as url, httpx.Client(base_url=url, timeout=30) as http:
        for route in routes:
            for name, (body, status) in bodies.items():
                if route == "/v1/judge":
                    body = body.replace(b'{"input": ', b'{"spec": "answer_alignment", "records": ', 1)
                r = http.post(route, content=body, headers=headers)
                assert r.status_code == status, (route, name, r.status_code, r.text[:300])
                no_traceback(r)
                err = r.json()["error"]
                assert err["field"] == "body", (route, name, err)
                assert err["kind"] == ("invalid_json" if status == 400 else "invalid_request"), (route, name, err)
        ok = {"question": "q?", "answer": "a", "expected_answer": "e"}
        r = http.post("/judges/answer_alignment/invoke", json={"input": ok}, headers=headers)
        assert r.status_code == 200 and r.json()["output"]["ok"], r.text
        metrics = http.get("/metrics", headers=headers).text
    assert 'kind="internal"' not in metrics


async def _slow_client(url: str, first: bytes, drip: bytes, give_up: float) -> tuple[float | None, bytes]:
    """A raw connection that sends ``first``, then one ``drip`` every 0.25 s and never finishes its request:
    how long until the server closed it (None: still open after ``give_up`` s), and what it answered."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    started, got = time.monotonic(), b""
    try:
        writer.write(first)
        while time.monotonic() - started < give_up:
            try:
                chunk = await asyncio.wait_for(reader.read(65536), 0.25)
            except TimeoutError:
                writer.write(drip)
                continue
            except ConnectionError:
                chunk = b""
            if not chunk:
                return time.monotonic() - started, got
            got += chunk
        return None, got
    finally:
        writer.close()


def test_slow_clients_are_closed_by_the_header_and_body_timeouts(llm: OpenAIServer, tmp_path: Path) -> None:
    """20 connections sending a body a byte at a time and 20 sending their headers a byte at a time are all
    closed within --body-timeout / --header-timeout (+ a margin for a loaded machine), while a normal request
    is answered (before: 0 of 40 were closed in 25 s)."""
    flags = ("--header-timeout", "1", "--body-timeout", "1.5")
    head = f"POST /v1/judge HTTP/1.1\r\nHost: x\r\nX-API-Key: {KEY}\r\nContent-Type: application/json\r\n"
    slow_body = (head + "Content-Length: 100000\r\n\r\n{").encode()
    slow_headers = b"POST /v1/judge HTTP/1.1\r\nHost: x\r\nX-Slow: "
    record = {"question": "q?", "answer": "a", "expected_answer": "e"}
    with greval_serve(llm, tmp_path / "s.sqlite", *flags) as url:

        async def attack() -> tuple[list[tuple[float | None, bytes]], list[tuple[float | None, bytes]], int]:
            bodies = [_slow_client(url, slow_body, b" ", 10) for _ in range(20)]
            headers = [_slow_client(url, slow_headers, b"a", 10) for _ in range(20)]
            both = asyncio.gather(asyncio.gather(*bodies), asyncio.gather(*headers))
            await asyncio.sleep(0.5)  # all 40 connected and dripping
            async with httpx.AsyncClient(base_url=url, timeout=30, headers={"X-API-Key": KEY}) as http:
                normal = await http.post("/v1/judge", json={"spec": "answer_alignment", "records": [record]})
            by_body, by_headers = await both
            return by_body, by_headers, normal.status_code

        by_body, by_headers, normal = asyncio.run(attack())
    assert normal == 200
    body_closed = [t for t, _ in by_body if t is not None and t < 1.5 + 3]
    header_closed = [t for t, _ in by_headers if t is not None and t < 1 + 3]
    assert len(body_closed) == 20 and min(body_closed) >= 1.4, [t for t, _ in by_body]
    assert len(header_closed) == 20 and min(header_closed) >= 0.9, [t for t, _ in by_headers]
    answered = [got for _, got in by_body + by_headers if got]
    assert answered and all(b" 408 " in got.split(b"\r\n")[0] for got in answered), answered[:3]
    assert any(b'"body_timeout"' in got for got in answered) and any(b'"header_timeout"' in got for got in answered)


def test_connections_over_the_cap_get_a_json_503_and_the_rest_are_served(llm: OpenAIServer, tmp_path: Path) -> None:
    """--max-connections 4: with 3 idle connections open a request is served; with 4 it gets 503
    too_many_connections (JSON, Retry-After) on a closed connection; once two leave, requests are served again."""
    host, headers = "127.0.0.1", {"X-API-Key": KEY}
    with greval_serve(llm, tmp_path / "s.sqlite", "--max-connections", "4", "--header-timeout", "60") as url:
        port = int(url.rsplit(":", 1)[1])
        idle = [socket.create_connection((host, port)) for _ in range(3)]
        try:
            time.sleep(0.3)
            assert httpx.get(f"{url}/v1/specs", headers=headers).status_code == 200
            idle.append(socket.create_connection((host, port)))
            time.sleep(0.3)  # the previous request's connection is gone, the fourth idle one is in
            refused = httpx.get(f"{url}/v1/specs", headers=headers)
            assert refused.status_code == 503, refused.text
            assert refused.json()["error"]["kind"] == "too_many_connections"
            assert refused.headers["retry-after"] == "1" and refused.headers["connection"] == "close"
            for s in idle[:2]:
                s.close()
            time.sleep(0.3)
            assert httpx.get(f"{url}/v1/specs", headers=headers).status_code == 200
        finally:
            for s in idle:
                s.close()


def test_json_problem_ignores_brackets_and_digits_inside_strings() -> None:
    """The guard's scan counts JSON's own nesting and numbers, not what a record's text holds."""
    from greval.serve.app import MAX_JSON_DEPTH, MAX_NUMBER_DIGITS, json_problem

    text = json.dumps({"chunks": ["[" * 500 + '\\"{' * 300, "7" * 9000], "n": 1}).encode()
    assert json_problem(text) is None
    assert json_problem(b"[" * MAX_JSON_DEPTH + b"]" * MAX_JSON_DEPTH) is None
    assert "nested deeper" in str(json_problem(b"[" * (MAX_JSON_DEPTH + 1) + b"]" * (MAX_JSON_DEPTH + 1)))
    assert json_problem(b"[1" + b"0" * (MAX_NUMBER_DIGITS - 1) + b"]") is None
    assert "digits" in str(json_problem(b"[1" + b"0" * MAX_NUMBER_DIGITS + b"]"))
    assert "UTF-8" in str(json_problem('["é"]'.encode("latin-1")))


def test_serve_flags_default_to_the_settings_defaults() -> None:
    """`greval serve`'s limits and ServeSettings (what create_app takes) have the same defaults."""
    from greval.cli.serve import serve_cmd

    flags = {p.name: p.default for p in serve_cmd.params}
    names = ["max_body", "max_records", "requests_per_key", "header_timeout", "body_timeout", "max_connections"]
    assert {n: flags[n] for n in names} == {n: ServeSettings.model_fields[n].default for n in names}


@pytest.mark.slow
def test_a_postgresql_store_gone_answers_503_and_the_server_works_again_once_it_is_back(
    llm: OpenAIServer, postgres: Any, pg_url: str
) -> None:
    """A long-lived server outlives a store outage: while PostgreSQL is down (past --store-wait) requests answer
    503 store_unavailable in one line, no traceback; once it is back the next request is judged and stored,
    with no restart (the connection given up is opened again)."""
    with serving(llm, pg_url, store_wait=1.0) as url, httpx.Client(base_url=url, timeout=60) as http:  # type: ignore[arg-type]
        assert http.post("/v1/judge", json={"spec": "answer_alignment", "records": rows(1)}).status_code == 200
        postgres.down()
        try:
            gone = http.post("/v1/judge", json={"spec": "answer_alignment", "records": rows(1, start=1)})
            assert gone.status_code == 503, gone.text
            assert gone.json()["error"]["kind"] == "store_unavailable" and "unavailable" in gone.text
            no_traceback(gone)
            still = http.get("/v1/results", params={"record_id": "r0"})
            assert still.status_code == 503 and still.json()["error"]["kind"] == "store_unavailable", still.text
        finally:
            postgres.up()
        back = http.post("/v1/judge", json={"spec": "answer_alignment", "records": rows(1, start=1)})
        assert back.status_code == 200, back.text
        assert http.get("/v1/results", params={"record_id": "r1"}).json()["verdicts"]


def test_warming_imports_what_the_first_judge_call_would_import_inside_the_event_loop() -> None:
    """The judge imports its HTTP client (greval.llm.wire: aiohttp) with its first call; in a server that import
    would stall every open connection's timers (with the openai SDK it was ~1 s: the slow-client test saw 20 body
    timeouts fire at once, 6 s late, under load). The SDK itself is not needed, so not imported."""
    code = (
        "import os, sys\n"
        "os.environ['OPENAI_API_KEY'] = 'sk-test'\n"
        "from greval.llm.config import JudgeConfig\n"
        "from greval.serve.service import JudgeService\n"
        "from greval.spec import resolve_specs\n"
        "svc = JudgeService(resolve_specs(['answer_alignment']), ':memory:', JudgeConfig.parse('openai:gpt-4o-mini'))\n"
        "assert 'greval.llm.wire' not in sys.modules\n"
        "assert svc.warm() is None\n"
        "print('greval.llm.wire' in sys.modules, 'openai' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "True False", done.stdout + done.stderr


# ------------------------------------------------------------------------------------------------------ /ui
def build_processes() -> list[int]:
    """This process's children building a /ui report (greval.report.explorer.served.child)."""
    found = []
    for proc in Path("/proc").iterdir():
        with contextlib.suppress(OSError):
            mine = proc.name.isdigit() and b"served import child" in (proc / "cmdline").read_bytes()
            if mine and int((proc / "stat").read_text().rsplit(")", 1)[1].split()[1]) == os.getpid():
                found.append(int(proc.name))
    return found


def ui_get(http: httpx.Client, path: str, within: float = 10.0) -> httpx.Response:
    """GET ``path`` with a sanity bound on its time. That a /ui request never waits for a build is shown by
    content, not by a clock: the pages saying a build is under way are answered while it runs (a 2 s bound here
    failed once in CI at 3.8 s on the loaded 2-core machine, with no build in the way)."""
    t0 = time.monotonic()
    r = http.get(path)
    assert time.monotonic() - t0 < within, (path, time.monotonic() - t0)
    no_traceback(r)
    return r


def ui_until(http: httpx.Client, path: str, wanted: str, timeout: float = 240) -> httpx.Response:
    """GET ``path`` until it answers 200 with ``wanted`` in it (each answer at once; the build itself may take
    minutes on a loaded 2-core machine: it is a child process importing the plotting stack)."""
    deadline = time.monotonic() + timeout
    while True:
        r = ui_get(http, path)
        if r.status_code == 200 and wanted in r.text:
            return r
        assert time.monotonic() < deadline, (path, wanted, r.status_code, r.text[:500])
        time.sleep(0.2)


@pytest.fixture()
def quick_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """/ui looks at the store on every view and builds again as soon as the store changed."""
    from greval.report.explorer import served

    monkeypatch.setattr(served, "CHECK_EVERY", 0.0)
    monkeypatch.setattr(served, "MIN_GAP", 0.0)
    monkeypatch.setattr(served, "RESAMPLES", 50)


@pytest.fixture()
def slow_builds(quick_builds: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """``quick_builds``, each build 6 s slower than it is (a sleep in the build process before the real build),
    so that requests meet a build under way."""
    from greval.report.explorer import served

    monkeypatch.setattr(served, "BUILD_CODE", "import time; time.sleep(6); " + served.BUILD_CODE)


@pytest.fixture()
def chromium() -> Iterator[Any]:
    from tests.test_report_explorer import ARGS, CHROMIUM

    playwright = pytest.importorskip("playwright.sync_api")
    if not Path(CHROMIUM).exists():
        pytest.skip("Debian chromium is not installed (CI installs it)")
    with playwright.sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield b
        b.close()


@pytest.mark.browser
def test_ui_answers_at_once_from_the_last_build_while_the_next_is_built_in_the_background(
    llm: OpenAIServer, tmp_path: Path, slow_builds: None, chromium: Any
) -> None:
    """Before, a view after a change rebuilt the whole report inside the request, behind one lock (16–181 s a
    view under judging traffic). Now every /ui request and every judging request is answered at once: before the
    first build a page saying it is being built (503, reloading itself), then the last build with when it was
    made and that a newer one is under way; one build at a time, in a child process; shown in Chromium."""
    store = tmp_path / "s.sqlite"
    peak: list[int] = []
    stop = threading.Event()

    def count() -> None:  # how many builds run at once, sampled throughout
        while not stop.wait(0.05):
            peak.append(len(build_processes()))

    sampler = threading.Thread(target=count, daemon=True)
    sampler.start()
    with serving(llm, store) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(3)}).status_code == 200
        first = ui_get(http, "/ui/")
        assert first.status_code == 503 and "being built" in first.text and "reloads itself" in first.text
        assert first.headers["retry-after"] == "2"
        assert ui_get(http, "/ui/explorer/data/meta.js").status_code == 503
        page = ui_until(http, "/ui/", "Report of the store as of").text
        assert "greval report" in page and "explorer/index.html" in page and "being built" not in page
        assert '"records":3' in ui_get(http, "/ui/explorer/data/meta.js").text
        # new verdicts: the next view still gets the last build at once, and says a newer one is being built
        assert http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(2, 3)}).status_code == 200
        ui_until(http, "/ui/", "A newer one is being built")
        assert '"records":3' in ui_get(http, "/ui/explorer/data/meta.js").text
        building = build_processes()  # judging meanwhile does not wait for the build: it is still running after
        assert building, "the page said a build was under way"
        r = http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(2, 5)})
        assert r.status_code == 200 and set(building) <= set(build_processes())
        ui_until(http, "/ui/explorer/data/meta.js", '"records":7')
        browser = chromium.new_page()
        errors: list[str] = []
        browser.on("pageerror", lambda e: errors.append(str(e)))
        browser.goto(url + "/ui/explorer/index.html#m=0")
        browser.wait_for_selector("body[data-ready=list]")
        assert browser.locator("#count").inner_text() == "7 of 7 records"
        assert browser.locator("#greval-served").inner_text().startswith("Report of the store as of ")
        browser.goto(url + "/ui/")
        assert "Report of the store as of" in browser.locator("#greval-served").inner_text()
        assert errors == []
        browser.close()
    stop.set()
    sampler.join()
    assert max(peak) == 1 and build_processes() == []  # builds ran, one at a time; none outlived the server


HOSTILE_PATHS = [
    "/ui/%00",
    "/ui/" + "a" * 5000,
    "/ui/" + "a/" * 2500,
    "/ui/" + "x" * 300 + ".js",
    "/ui/" + "é" * 200,
    "/ui/explorer/%00.js",
    "/ui/index.html%00.png",
    "/ui/%0a",
    "/ui/..%5c..%5cetc%5cpasswd",
    "/ui/%2e%2e/%2e%2e/etc/passwd",
    "/ui/%2fetc%2fpasswd",
    "/ui//etc/passwd",
    "/ui/%ff%fe",
    "/ui/%c0%ae%c0%ae/etc/passwd",
]


def test_hostile_ui_paths_are_a_404_before_and_after_a_build(
    llm: OpenAIServer, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A NUL, a path longer than a file name may be, a backslash, dots: a JSON 404, never a 500 (before: a NUL
    was "embedded null byte" and a 5,000-character path "File name too long", both 500s). A store with no
    verdict yet has no report: its page says why."""
    from greval.report.explorer import served

    caplog.set_level(logging.ERROR, logger="greval.serve")
    with serving(llm, tmp_path / "s.sqlite") as url, httpx.Client(base_url=url, timeout=30) as http:
        for when in ("before", "after"):
            for path in HOSTILE_PATHS + (["/ui/nothing.js", "/ui/explorer/data/m9-9.js"] if when == "after" else []):
                r = http.get(path)
                assert r.status_code == 404, (when, path[:50], r.status_code, r.text[:300])
                assert r.json()["error"]["kind"] == "not_found" and len(r.text) < 1000
                no_traceback(r)
            if when == "before":
                deadline = time.monotonic() + 60
                while "no verdicts yet" not in (r := ui_get(http, "/ui/")).text:
                    assert r.status_code == 503 and time.monotonic() < deadline, r.text[:500]
                    time.sleep(0.2)
                assert "cannot be built yet" in r.text
                assert http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(1)}).is_success
                ui_until(http, "/ui/", "Report of the store as of")
    assert "internal error" not in caplog.text
    assert served.report_path("a/../b") is None and served.report_path("./a//b/") == "a/b"


def test_a_failed_build_is_said_on_the_page_and_the_last_build_stays(
    llm: OpenAIServer, tmp_path: Path, quick_builds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that fails (here the build process is made to fail with one line on stderr, as a real failure
    ends) leaves the last build served, says so on the page with the line (an API key in it redacted); the
    store's next change builds again."""
    from greval.report.explorer import served

    real = served.BUILD_CODE
    store = tmp_path / "s.sqlite"
    with serving(llm, store) as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(2)}).status_code == 200
        ui_until(http, "/ui/", "Report of the store as of")
        fail = "import sys; sys.exit('cannot read the store: token sk-abcdefghijklmnopqrstuvwxyz123456 refused')"
        monkeypatch.setattr(served, "BUILD_CODE", fail)
        assert http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(1, 2)}).status_code == 200
        page = ui_until(http, "/ui/", "The last build failed: cannot read the store").text
        assert "sk-abcdefghijklmnopqrstuvwxyz123456" not in page and "[REDACTED]" in page
        assert '"records":2' in ui_get(http, "/ui/explorer/data/meta.js").text  # the last build, still served
        monkeypatch.setattr(served, "BUILD_CODE", real)  # tried again once the store changes
        assert http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(1, 3)}).status_code == 200
        ui_until(http, "/ui/explorer/data/meta.js", '"records":4')
        assert "The last build failed" not in ui_get(http, "/ui/").text


def test_a_build_under_way_ends_with_the_server_and_leaves_no_folder(
    llm: OpenAIServer, tmp_path: Path, quick_builds: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Stopping the server ends the build process under way (it is the server's child) and removes every
    report folder it made."""
    import tempfile

    from greval.report.explorer import served

    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    monkeypatch.setattr(served, "BUILD_CODE", "import time; time.sleep(120); " + served.BUILD_CODE)
    with serving(llm, tmp_path / "s.sqlite") as url, httpx.Client(base_url=url, timeout=30) as http:
        assert http.post("/v1/judge", json={"spec": ["answer_alignment"], "records": rows(1)}).status_code == 200
        assert ui_get(http, "/ui/").status_code == 503
        deadline = time.monotonic() + 30
        while not build_processes():
            assert time.monotonic() < deadline, "no build started"
            time.sleep(0.1)
        assert [p.name.startswith("greval-ui-") for p in temp.iterdir()] == [True]
        t0 = time.monotonic()
    assert build_processes() == [] and list(temp.iterdir()) == []
    assert time.monotonic() - t0 < 15
