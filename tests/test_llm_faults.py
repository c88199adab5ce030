"""Robust under servers that misbehave, through real HTTP (langchain-openai -> the local test server):
an error about one request is that judgement's typed error and the run goes on; rate limiting cuts
concurrency once per episode; a judge works in any event loop; no API key reaches a log, file or the store."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import sqlite3
import subprocess
import sys
import time
from collections.abc import Awaitable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from click.testing import CliRunner
from langchain_openai import ChatOpenAI

from greval import export_results, load_results
from greval._sync import run_sync
from greval.cli import main
from greval.dataset.records import Record
from greval.errors import UserError
from greval.judge.evaluators import compile
from greval.judge.judge import Judge
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.retry import (
    CallFailed,
    ErrorKind,
    JudgeUnavailable,
    RetryPolicy,
    call_with_retries,
    classify,
    describe_error,
    redact,
)
from greval.runner import RunOptions, run
from greval.spec import parse_spec, resolve_specs
from greval.store.schema import error_kind
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from greval.types import JudgeResult
from tests.conftest import TEST_KEY
from tests.test_run import cfg, rag_records

SPECS_DIR = Path(__file__).resolve().parents[1] / "metric_specs"

FAST = RunOptions(concurrency=8, retry=RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.05))

SPEC = parse_spec(
    {
        "name": "coherence",
        "description": "How coherent the answer is.",
        "steps": ["Read the answer.", "Rate it on the scale."],
        "inputs": ["question", "answer"],
        "scale": {"kind": "value", "min": 1, "max": 5, "ranges": {"1-2": "poor", "3": "fair", "4-5": "good"}},
    }
)

CONTEXT_LENGTH = {
    "error": {
        "message": "This model's maximum context length is 8192 tokens. However, your messages resulted in "
        "9113 tokens. Please reduce the length of the messages.",
        "type": "invalid_request_error",
        "param": "messages",
        "code": "context_length_exceeded",
    }
}
PER_REQUEST_400S = {
    "context_length": CONTEXT_LENGTH,
    # Azure OpenAI's prompt filter
    "content_filter": {
        "error": {
            "message": "The response was filtered due to the prompt triggering Azure OpenAI's content management "
            "policy. Please modify your prompt and retry.",
            "type": None,
            "param": "prompt",
            "code": "content_filter",
            "status": 400,
        }
    },
    "bad_request": {
        "error": {
            "message": "Invalid image: the image data you provided does not represent a valid image.",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_image_format",
        }
    },
}
# vLLM says it without a code
VLLM_CONTEXT_LENGTH = {
    "object": "error",
    "message": "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
    "(4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion.",
    "type": "BadRequestError",
    "param": None,
    "code": 400,
}


def model(srv: OpenAIServer, key: str = TEST_KEY, **kw: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model="judge-test",
        base_url=srv.base_url,
        api_key=key,  # type: ignore[arg-type]
        max_retries=0,
        timeout=kw.pop("timeout", 10),
        **kw,
    )


def records(n: int) -> list[Record]:
    return [
        Record.from_mapping({"id": f"q{i}", "question": f"Question {i}?", "answer": f"Answer {i}."}) for i in range(n)
    ]


# ---------------------------------------------------------------- the test server's error faults
def test_fault_answers_a_given_status_with_a_given_body_and_can_echo_the_key(llm: OpenAIServer) -> None:
    client = openai.OpenAI(base_url=llm.base_url, api_key=TEST_KEY, max_retries=0)
    llm.script(
        [
            {"match": "LONG", "action": {"type": "fault", "status": 400, "body": CONTEXT_LENGTH}},
            {"match": "WHO", "action": {"type": "fault", "status": 401, "echo_auth": True}},
            {"match": "RAW", "action": {"type": "fault", "status": 500, "echo_auth": "token", "body": {"x": 1}}},
            {"match": "GONE", "action": {"type": "fault", "status": 404, "code": "model_not_found"}},
        ]
    )

    def fails(text: str) -> openai.APIStatusError:
        with pytest.raises(openai.APIStatusError) as info:
            client.chat.completions.create(model="judge-test", messages=[{"role": "user", "content": text}])
        return info.value

    long = fails("LONG")
    assert (long.status_code, long.code, long.param) == (400, "context_length_exceeded", "messages")
    assert long.body == CONTEXT_LENGTH["error"]
    who = fails("WHO")
    assert who.status_code == 401 and who.code == "invalid_api_key"
    assert f"(received Authorization: Bearer {TEST_KEY})" in who.message
    raw = fails("RAW")
    assert raw.status_code == 500 and raw.body == {"x": 1, "authorization": TEST_KEY}
    gone = fails("GONE")
    assert gone.status_code == 404 and gone.code == "model_not_found" and "judge-test" in gone.message
    # the rule's own body is not changed by echoing
    assert fails("RAW").body == {"x": 1, "authorization": TEST_KEY}


# ---------------------------------------------------- 1. one bad request is that judgement's error
def test_a_prompt_beyond_the_context_is_that_records_error_and_the_run_goes_on(
    llm: OpenAIServer, store_path: Path
) -> None:
    llm.script([{"match": "Question number 7?", "action": {"type": "fault", "status": 400, "body": CONTEXT_LENGTH}}])
    specs = resolve_specs(["answer_alignment", "chunk_evaluation"])
    with Store(store_path) as st:
        summary = run(specs, rag_records(30), st, cfg(llm), options=FAST)
        [r] = st.runs()
    assert r["status"] == "finished"
    assert summary.failed == 2
    frame = load_results(store_path, level="record")
    assert len(frame) == 60
    failed = frame[frame["status"] != "ok"]
    assert sorted(failed["record_id"]) == ["r7", "r7"]
    assert {error_kind(e) for e in failed["error"]} == {"context_length"}
    assert all("maximum context length is 8192 tokens" in e for e in failed["error"])
    items = load_results(store_path, spec="chunk_evaluation")
    bad = items[items["record_id"] == "r7"]
    assert len(bad) == 3 and set(bad["status"]) == {"error"}
    assert all(str(e).startswith("context_length: no verdict after 1 call(s): HTTP 400:") for e in bad["error"])
    stats = llm.stats()
    # Not retried, and no structured-output fallback: the 400 is about this request, not about the method.
    assert stats["by_status"]["400"] == 2 and set(stats["by_mode"]) == {"json_schema"}
    # The failed call is logged with the judgement (attempts, redacted error).
    calls = sqlite3.connect(store_path).execute("SELECT calls FROM judgements WHERE status='error'").fetchall()
    assert [json.loads(c)[0]["error"].split(":")[0] for (c,) in calls] == ["context_length"] * 2


@pytest.mark.parametrize(
    ("body", "kind"),
    [*((body, kind) for kind, body in PER_REQUEST_400S.items()), (VLLM_CONTEXT_LENGTH, "context_length")],
    ids=[*PER_REQUEST_400S, "vllm_context_length"],
)
def test_a_400_about_one_request_is_a_typed_error_of_that_judgement(
    llm: OpenAIServer, store_path: Path, body: dict[str, Any], kind: str
) -> None:
    llm.script([{"match": "Question 3?", "action": {"type": "fault", "status": 400, "body": body}}])
    with Store(store_path) as st:
        summary = run([SPEC], records(8), st, cfg(llm), options=FAST)
    assert summary.failed == 1
    frame = load_results(store_path, level="record")
    [err] = frame[frame["status"] == "error"]["error"]
    assert frame[frame["status"] == "error"]["record_id"].tolist() == ["q3"]
    assert error_kind(err) == kind and err.startswith(f"{kind}: HTTP 400: ")
    assert summary.metrics[0].errors == {kind: 1}


@pytest.mark.parametrize(
    ("status", "kind", "extra"),
    [(401, "auth", {}), (403, "auth", {}), (404, "not_found", {"code": "model_not_found"})],
)
def test_errors_that_fail_every_call_stop_the_run(
    llm: OpenAIServer, store_path: Path, status: int, kind: str, extra: dict[str, Any]
) -> None:
    llm.script([{"action": {"type": "fault", "status": status, **extra}}])
    with Store(store_path) as st, pytest.raises(JudgeUnavailable) as info:
        run([SPEC], records(40), st, cfg(llm), options=FAST)
    assert info.value.kind == kind and f"{kind}: HTTP {status}: " in str(info.value)
    with Store(store_path) as st:
        assert [r["status"] for r in st.runs()] == ["failed"]


def test_no_structured_output_method_left_stops_the_run(llm: OpenAIServer, store_path: Path) -> None:
    llm.configure(json_schema=False, tools=False)
    refuse_json_mode = {"type": "fault", "status": 400, "param": "response_format"}
    llm.script([{"match": "Rate it", "action": {**refuse_json_mode, "message": "'json_object' is not supported"}}])
    with Store(store_path) as st, pytest.raises(JudgeUnavailable) as info:
        run([SPEC], records(5), st, cfg(llm), options=FAST)
    assert info.value.kind == ErrorKind.UNSUPPORTED
    assert "none of the structured-output methods (json_schema, function_calling, json_mode)" in str(info.value)


def test_classification_is_typed_not_read_from_the_message() -> None:
    class Plain(Exception):
        pass

    assert classify(TimeoutError()).kind == ErrorKind.TIMEOUT
    assert classify(ConnectionResetError()).kind == ErrorKind.CONNECTION
    assert classify(Plain("context_length_exceeded 401 rate limit")).kind == ErrorKind.UNKNOWN
    assert {k.value for k in ErrorKind} >= {
        "context_length",
        "content_filter",
        "bad_request",
        "rate_limited",
        "server_error",
        "timeout",
        "unparsable",
        "auth",
        "not_found",
    }


def test_failures_without_a_status_are_classified_by_class() -> None:
    """The libraries greval calls models through raise typed errors with no HTTP status: they are told apart
    by class (a read error is a connection failure though its name says neither; LangChain's context
    overflow is a context-length error), also when wrapped in another exception."""
    import httpx
    from langchain_core import exceptions as lc

    request = httpx.Request("POST", "http://judge.invalid/v1/chat/completions")
    assert classify(httpx.ReadError("peer closed", request=request)).kind == ErrorKind.CONNECTION
    assert classify(openai.APITimeoutError(request=request)).kind == ErrorKind.TIMEOUT
    assert classify(openai.APIConnectionError(request=request)).kind == ErrorKind.CONNECTION
    if hasattr(lc, "ContextOverflowError"):
        assert classify(lc.ContextOverflowError("too long")).kind == ErrorKind.CONTEXT_LENGTH
    try:
        try:
            raise httpx.RemoteProtocolError("server hung up", request=request)
        except httpx.HTTPError as inner:
            raise RuntimeError("call failed") from inner
    except RuntimeError as wrapped:
        assert classify(wrapped).kind == ErrorKind.CONNECTION


def test_unparsable_and_server_errors_carry_their_kind(llm: OpenAIServer) -> None:
    policy = RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.05)
    llm.script(
        [
            {"match": "Question 0?", "action": {"type": "malformed"}},
            {"match": "Question 1?", "action": {"type": "fault", "status": 503}},
            {"match": "Question 2?", "action": {"type": "fault", "status": 429, "code": "insufficient_quota"}},
        ]
    )
    j = Judge(SPEC, model(llm), policy=policy)
    recs = records(2)
    unparsable, server = (run_sync(j.ajudge(r)) for r in recs)
    assert (unparsable.verdicts[0].error or "").startswith("unparsable: unusable answer after 3 tries: ")
    assert (server.verdicts[0].error or "").startswith("server_error: HTTP 503: ")
    assert server.calls[0].attempts == 2  # retried, then recorded with the judgement
    with pytest.raises(JudgeUnavailable) as info:  # out of credit: every call would fail
        run_sync(j.ajudge(records(3)[2]))
    assert info.value.kind == ErrorKind.QUOTA


@pytest.mark.parametrize("direct", [True, False], ids=["direct", "langchain"])
def test_an_answer_cut_off_or_filtered_is_named_so(llm: OpenAIServer, direct: bool) -> None:
    """finish_reason "length" (max_tokens ran out) and "content_filter" arrive as HTTP 200: each is that
    judgement's own typed error, not "unparsable"; a filtered answer is not asked again (it would be refused
    again), a cut-off one is re-asked like any unusable answer and then says to raise the token budget."""
    llm.script(
        [
            {"match": "Question 0?", "action": {"type": "length"}},
            {"match": "Question 1?", "action": {"type": "content_filter"}},
        ]
    )
    j = Judge(SPEC, model(llm), direct=direct)
    cut, filtered = (run_sync(j.ajudge(r)) for r in records(2))
    assert (cut.verdicts[0].error or "").startswith("truncated: the answer was cut off at the token limit in 3 tries")
    assert "--max-tokens" in (cut.verdicts[0].error or "")
    assert len(cut.calls) == 3
    assert (filtered.verdicts[0].error or "").startswith("content_filter: the provider's content filter withheld")
    assert len(filtered.calls) == 1
    assert error_kind(cut.verdicts[0].error) == ErrorKind.TRUNCATED
    assert error_kind(filtered.verdicts[0].error) == ErrorKind.CONTENT_FILTER


def test_the_sdk_s_finish_reason_errors_are_classified() -> None:
    """The openai SDK's `.parse()` (LangChain's json_schema path, `spec new`) raises on such answers."""
    from openai.types import CompletionUsage
    from openai.types.chat import ChatCompletion

    completion = ChatCompletion.model_validate(
        {
            "id": "x",
            "object": "chat.completion",
            "created": 0,
            "model": "m",
            "choices": [{"index": 0, "message": {"role": "assistant", "content": "{"}, "finish_reason": "length"}],
            "usage": CompletionUsage(completion_tokens=21, prompt_tokens=5, total_tokens=26).model_dump(),
        }
    )
    cut = openai.LengthFinishReasonError(completion=completion)
    assert classify(cut).kind is ErrorKind.TRUNCATED
    assert describe_error(cut).startswith("truncated: the answer was cut off at the token limit after 21 tokens")
    assert classify(openai.ContentFilterFinishReasonError()).kind is ErrorKind.CONTENT_FILTER


def test_a_failed_call_raises_greval_s_error_never_the_sdk_s(llm: OpenAIServer) -> None:
    """What leaves the call layer is typed and redacted (the SDK's error holds the server's echo), and a
    one-shot command prints it in one line (a UserError)."""
    llm.script([{"match": "ECHO", "action": {"type": "fault", "status": 400, "echo_auth": True}}])
    chat = model(llm)

    async def send() -> Any:
        return await chat.ainvoke("ECHO")

    with pytest.raises(CallFailed) as info:
        run_sync(call_with_retries(send, FAST.retry, None))
    assert isinstance(info.value, UserError) and info.value.kind == ErrorKind.BAD_REQUEST
    assert str(info.value).startswith("bad_request: HTTP 400: ") and "Bearer [REDACTED]" in str(info.value)
    assert info.value.__cause__ is None and TEST_KEY not in repr(info.value)


# ----------------------------------------------------------------------------- 2. rate limiting
async def watch(limiter: AdaptiveLimiter, work: Awaitable[Any]) -> tuple[Any, list[float]]:
    """Run ``work``, sampling the limiter's limit every few milliseconds."""
    seen = [limiter.limit]

    async def sample() -> None:
        while True:
            seen.append(limiter.limit)
            await asyncio.sleep(0.002)

    sampler = asyncio.create_task(sample())
    try:
        return await work, seen
    finally:
        sampler.cancel()


def judge_all(j: Judge, recs: list[Record], limiter: AdaptiveLimiter) -> tuple[list[JudgeResult], list[float], float]:
    async def go() -> tuple[list[JudgeResult], list[float]]:
        results, seen = await watch(limiter, asyncio.gather(*(j.ajudge(r) for r in recs)))
        return list(results), seen

    start = time.perf_counter()
    results, seen = run_sync(go())
    return results, seen, time.perf_counter() - start


def test_a_burst_of_429s_cuts_concurrency_once(llm: OpenAIServer) -> None:
    llm.configure(latency=0.8)  # all 64 calls are in flight when the 429s come back, even on a busy machine
    llm.script([{"match": "Rate it", "times": 64, "action": {"type": "fault", "status": 429, "retry_after": 0.2}}])
    limiter = AdaptiveLimiter(64)
    j = Judge(SPEC, model(llm), policy=RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=1), limiter=limiter)
    results, seen, _ = judge_all(j, records(64), limiter)
    assert all(r.ok for r in results)
    assert llm.stats()["by_status"]["429"] == 64 and llm.stats()["max_in_flight"] == 64
    assert min(seen) == 32, sorted(set(seen))
    assert limiter.cuts == 1 and limiter.rate_limited == 64


def test_scattered_429s_keep_the_limit_and_the_pace(llm: OpenAIServer) -> None:
    """A proxy refusing a random tenth of the calls is not congestion: the retries handle it."""
    llm.configure(latency=0.03)
    rule = {"match": "Rate it", "probability": 0.1, "action": {"type": "fault", "status": 429, "retry_after": 0.05}}
    policy = RetryPolicy(max_attempts=8, base_delay=0.01, max_delay=0.1)
    recs = records(480)
    timings = {}
    for adaptive in (False, True):
        llm.reset()
        llm.script([rule])  # the same rule, so the same calls are refused in both runs
        limiter = AdaptiveLimiter(32, adaptive=adaptive)
        results, seen, seconds = judge_all(Judge(SPEC, model(llm), policy=policy, limiter=limiter), recs, limiter)
        assert all(r.ok for r in results)
        assert llm.stats()["by_status"]["429"] > 30
        timings[adaptive] = seconds
    assert min(seen) >= 16, sorted(set(seen))
    assert timings[True] <= 2 * timings[False], timings


def test_the_cooldown_honours_retry_after(llm: OpenAIServer) -> None:
    """After a cut no call starts before the server's Retry-After has passed: the calls queued behind the
    refused ones (never refused themselves) wait for it too. (The tolerance is lowered so that the first
    429 starts the episode.)"""
    llm.configure(latency=0.05)
    llm.script([{"match": "Rate it", "times": 8, "action": {"type": "fault", "status": 429, "retry_after": 0.5}}])
    limiter = AdaptiveLimiter(8, tolerance=0.01)
    j = Judge(SPEC, model(llm), policy=RetryPolicy(max_attempts=4, base_delay=0.01), limiter=limiter)
    recs = records(16)

    async def go() -> list[float]:
        start = time.perf_counter()

        async def one(r: Record) -> float:
            assert (await j.ajudge(r)).ok
            return time.perf_counter() - start

        return list(await asyncio.gather(*(one(r) for r in recs)))

    done = run_sync(go())
    assert limiter.cuts == 1
    assert min(done[8:]) >= 0.5 + 0.05, done  # queued behind the first eight, which were refused


# --------------------------------------------------------------------- 3. any event loop, any order
@pytest.mark.parametrize("direct", [True, False])
def test_a_compiled_judge_works_in_every_event_loop(llm: OpenAIServer, direct: bool) -> None:
    llm.configure(json_schema=False)  # the method fallback runs too (its lock is shared by the loops)
    limiter = AdaptiveLimiter(1)  # and calls queue in the limiter, in each loop
    judge = compile(SPEC, model(llm), policy=FAST.retry, limiter=limiter, direct=direct)
    recs = records(3)

    async def three() -> list[JudgeResult]:
        return list(await asyncio.gather(*(judge.ainvoke(r) for r in recs)))

    for _ in range(10):
        assert judge.invoke(recs[0]).ok
        assert all(r.ok for r in asyncio.run(three()))
    assert asyncio.run(judge.ainvoke(recs[1])).ok
    assert asyncio.run(judge.ainvoke(recs[2])).ok
    assert judge.invoke(recs[2]).ok


# ---------------------------------------------------------------------------------- 4. secrets
@pytest.fixture()
def logs(caplog: pytest.LogCaptureFixture) -> Iterator[pytest.LogCaptureFixture]:
    caplog.set_level(logging.DEBUG)
    yield caplog


def store_bytes(store: Path) -> bytes:
    return b"".join(p.read_bytes() for p in store.parent.glob(store.name + "*"))


def test_an_echoed_api_key_never_reaches_stderr_logs_the_store_or_an_export(
    llm: OpenAIServer,
    tmp_path: Path,
    logs: pytest.LogCaptureFixture,
    capfd: pytest.CaptureFixture[str],
) -> None:
    store = tmp_path / "s.sqlite"
    echo_500 = {"type": "fault", "status": 500, "echo_auth": True}
    llm.script([{"match": "Question 2?", "action": echo_500}])
    with Store(store) as st:
        summary = run([SPEC], records(4), st, cfg(llm), options=FAST)
    assert summary.failed == 1
    frame = load_results(store, level="record")
    [err] = frame[frame["status"] == "error"]["error"]
    assert err.startswith("server_error: HTTP 500: ") and "Authorization: Bearer [REDACTED]" in err
    exported = [tmp_path / "out.csv", tmp_path / "out.jsonl"]
    for out in exported:
        export_results(store, out)

    llm.reset()
    llm.script([{"action": {"type": "fault", "status": 401, "echo_auth": True}}])
    with Store(store) as st, pytest.raises(JudgeUnavailable) as info:
        run([SPEC], records(8), st, cfg(llm), options=FAST.model_copy(update={"retry_errors": True}))
    assert "[REDACTED]" in str(info.value) and TEST_KEY not in repr(info.value)
    assert info.value.__cause__ is None  # the SDK's error, key and all, is not attached
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r.data | {"id": r.id}) + "\n" for r in records(3)))
    args = ["run", str(data), "-s", "answer_quality", "--store", str(store), "--judge", "openai:judge-test"]
    res = CliRunner().invoke(main, [*args, "--base-url", llm.base_url])
    assert res.exit_code == 2 and "auth: HTTP 401" in res.output and "[REDACTED]" in res.output, res.output

    out, err_text = capfd.readouterr()
    for text in (res.output, out, err_text, logs.text, *(r.getMessage() for r in logs.records)):
        assert TEST_KEY not in text
    blob = store_bytes(store) + b"".join(p.read_bytes() for p in exported)
    assert TEST_KEY.encode() not in blob and b"[REDACTED]" in blob


def test_a_configured_key_is_redacted_whatever_its_shape(
    llm: OpenAIServer, store_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A proxy's key has no ``sk-`` prefix, and the echo has no ``Bearer``: only knowing the key finds it."""
    key = "proxy-7f3a9c1e5b2d4f60"
    monkeypatch.setenv("OPENAI_API_KEY", key)
    llm.script([{"match": "Question 1?", "action": {"type": "fault", "status": 500, "echo_auth": "token"}}])
    with Store(store_path) as st:
        summary = run([SPEC], records(3), st, cfg(llm), options=FAST)
    assert summary.failed == 1
    assert key.encode() not in store_bytes(store_path) and b"[REDACTED]" in store_bytes(store_path)
    assert redact(f"key={key}; Authorization: Bearer abc.def") == "key=[REDACTED]; Authorization: Bearer [REDACTED]"


# ------------------------------------------------ every command that calls a model, with a small model
_TRUNCATING = [{"action": {"type": "length"}}]  # every answer cut off, as a small model with a low max_tokens does


def _cli(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "greval", *args], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_every_model_calling_command_copes_with_answers_cut_off(llm: OpenAIServer, tmp_path: Path) -> None:
    """`run`, `spec new`, `spec try`, `reliability` and `quickstart` against a server whose every answer stops
    at finish_reason "length": no traceback; each says the answers were cut off and how to give the judge more
    tokens; `spec new` writes nothing and exits 2 with one line; the run goes on and exits as it says."""
    llm.script(_TRUNCATING)
    env = {**os.environ, "OPENAI_API_KEY": TEST_KEY, "COLUMNS": "200"}
    judge = ["--judge", "openai:judge-test", "--base-url", llm.base_url]
    rows = [
        {
            "id": f"r{i}",
            "question": f"Question {i}?",
            "answer": f"Answer {i}.",
            "expected_answer": f"Expected {i}.",
            "label": "Correct",
        }
        for i in range(3)
    ]
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "aa.yaml").write_text((SPECS_DIR / "answer_alignment.yaml").read_text())
    commands: dict[str, tuple[list[str], int]] = {
        "run": (["run", "d.jsonl", "-s", "answer_alignment", "--store", "s.sqlite", *judge], 1),
        "spec new": (["spec", "new", "polite", "-d", "Is the answer polite?", *judge], 2),
        "spec try": (
            ["spec", "try", "aa.yaml", "--data", "d.jsonl", "--human-column", "label", "--bootstrap", "0", *judge],
            0,
        ),
        "reliability": (
            [
                "reliability",
                "-s",
                "answer_alignment",
                "--data",
                "d.jsonl",
                "--sample",
                "3",
                "--store",
                "r.sqlite",
                *judge,
            ],
            0,
        ),
        "quickstart": (["quickstart", "--no-argilla", "--dir", "qs", "--bootstrap", "20", *judge], 0),
    }
    for name, (args, code) in commands.items():
        res = _cli(args, tmp_path, env)
        out = res.stdout + res.stderr
        assert "Traceback" not in out, (name, out[-3000:])
        assert res.returncode == code, (name, res.returncode, out[-3000:])
        assert "truncated" in out and "--max-tokens" in out, (name, out[-3000:])
    assert not (tmp_path / "polite.yaml").exists()
    new_err = _cli(commands["spec new"][0], tmp_path, env).stderr.strip().splitlines()
    errors = [line for line in new_err if line.startswith("error:")]
    assert errors == new_err[-1:] and errors[0].startswith("error: the judge model did not produce a usable draft")
