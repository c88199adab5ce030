"""The judge greval builds for an OpenAI-compatible server (greval.llm.openai_chat): without LangChain, the same
requests and answers as LangChain's ChatOpenAI, the same errors, and LangChain whenever it could behave otherwise.
(That a run with it imports no LangChain at all is checked in a fresh process: tests/test_cli_startup.py.)
"""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from pydantic import SecretStr

from greval._sync import run_sync
from greval.judge.evaluators import compile
from greval.judge.judge import Judge
from greval.llm.call import ModelCall, chat_result_message, to_langchain
from greval.llm.config import JudgeConfig, judge_model, make_chat_model, openai_chat
from greval.llm.openai_chat import OpenAICall, OpenAIChat, langchain_may_listen, reply_of, tracing_configured
from greval.llm.retry import classify, describe_error
from greval.llm.wire import HTTPStatusError
from greval.testing.openai_server import OpenAIServer
from tests.judge.conftest import FAST, LABEL_SPEC, RECORD, VALUE_SPEC, cfg

IDS = [t["id"] for t in RECORD.items("triples")]


def chat(llm: OpenAIServer, ref: str = "openai:judge-test", **params: Any) -> OpenAIChat:
    return openai_chat(JudgeConfig.parse(ref, base_url=llm.base_url, timeout=10, **params))


def _given(value: Any) -> Any:
    """``value`` without the None fields the SDK's response model adds for what the server did not send."""
    if isinstance(value, dict):
        return {k: _given(v) for k, v in value.items() if v is not None}
    return value


def same_reply(direct: Any, lc: Any) -> None:
    """What greval reads of an answer is the same on both paths (the message id differs per call); the token
    usage as the server gave it (the SDK adds None for every field it did not send)."""
    assert direct.content == lc.content
    assert direct.tool_calls == lc.tool_calls and direct.invalid_tool_calls == lc.invalid_tool_calls
    usage = lc.usage_metadata
    assert direct.usage_metadata == (None if usage is None else {k: usage[k] for k in direct.usage_metadata})
    meta, lc_meta = dict(direct.response_metadata), dict(lc.response_metadata)
    assert ("id" in meta) == ("id" in lc_meta)
    meta.pop("id", None), lc_meta.pop("id", None)
    assert _given(meta.pop("token_usage")) == _given(lc_meta.pop("token_usage"))
    assert meta == lc_meta


# What greval's own client (greval.llm.wire) sends differently from the SDK, on purpose: its User-Agent, and none
# of the SDK's telemetry (X-Stainless-*). Connection handling (keep-alive, compression) is each client's own.
OWN_HEADERS = ("user-agent", "accept-encoding", "connection")


def same_request_meta(llm: OpenAIServer) -> None:
    """Headers and query of the last two requests (LangChain's, then greval's) match, except the SDK's telemetry,
    the user agent and connection handling (OWN_HEADERS)."""
    lc, direct = llm.request_meta(limit=2)
    assert direct["headers"]["user-agent"].startswith("greval/")
    assert not [k for k in direct["headers"] if k.startswith("x-stainless")]
    for meta in (lc, direct):
        meta["headers"] = {
            k: v for k, v in meta["headers"].items() if k not in OWN_HEADERS and not k.startswith("x-stainless")
        }
    assert direct == lc, {k: (lc["headers"].get(k), v) for k, v in direct["headers"].items()}
    assert {"authorization", "content-type", "accept"} <= direct["headers"].keys()


def test_a_run_judges_with_greval_own_model_for_openai_compatible_providers(llm: OpenAIServer) -> None:
    model = judge_model(cfg(llm))
    assert isinstance(model, OpenAIChat) and model.chat_openai_kwargs()["max_retries"] == 0
    built = make_chat_model(cfg(llm))  # the public LangChain model: the same settings
    assert type(built).__name__ == "ChatOpenAI"
    assert built.model_dump() == model.langchain().model_dump()


@pytest.mark.parametrize("method", ["json_schema", "json_mode"])
@pytest.mark.parametrize("logprobs", [None, 2])
def test_direct_request_and_answer_are_langchains(llm: OpenAIServer, method: Any, logprobs: int | None) -> None:
    """The body, headers and query on the wire, and every field greval reads of the answer, as ChatOpenAI's —
    with the judge's parameters (temperature, token budget, seed) and log-probabilities asked or not."""
    llm.configure(logprobs="on")
    model = chat(llm, temperature=0.2, max_tokens=300, seed=7)
    j = Judge(LABEL_SPEC, model, policy=FAST, logprobs=logprobs)
    messages = j.messages(method, RECORD.data, None, IDS)
    caller = j.caller(method)
    assert isinstance(caller, OpenAICall) and caller.direct, caller.reason
    llm.reset()
    via_langchain = run_sync(j.bound(method).ainvoke(to_langchain(messages)))
    via_direct = run_sync(caller(messages))
    assert caller._langchain is None  # the call went without LangChain's ChatOpenAI
    lc_body, direct_body = llm.requests()
    assert direct_body == lc_body
    assert (direct_body["temperature"], direct_body["max_completion_tokens"], direct_body["seed"]) == (0.2, 300, 7)
    assert ("logprobs" in direct_body) == (logprobs is not None)
    same_request_meta(llm)
    same_reply(via_direct, via_langchain)
    assert via_direct.response_metadata["finish_reason"] == "stop" and via_direct.usage_metadata["input_tokens"] > 0
    if logprobs:
        assert via_direct.response_metadata["logprobs"]["content"]


def test_direct_and_langchain_verdicts_agree(llm: OpenAIServer) -> None:
    direct = run_sync(Judge(LABEL_SPEC, chat(llm), policy=FAST).ajudge(RECORD))
    plain = Judge(LABEL_SPEC, chat(llm), policy=FAST, direct=False)
    assert plain.caller("json_schema").reason == "direct calls are switched off"
    via_langchain = run_sync(plain.ajudge(RECORD))
    assert direct.ok and [(v.item_id, v.label, v.reason) for v in direct.verdicts] == [
        (v.item_id, v.label, v.reason) for v in via_langchain.verdicts
    ]


def _reason_caps(node: Any) -> list[Any]:
    """The maxLength of every ``reason`` property in a JSON schema (None where it has none)."""
    if isinstance(node, list):
        return [cap for n in node for cap in _reason_caps(n)]
    if not isinstance(node, dict):
        return []
    props = node.get("properties", {})
    here = [props["reason"].get("maxLength")] if isinstance(props.get("reason"), dict) else []
    return here + [cap for v in node.values() for cap in _reason_caps(v)]


@pytest.mark.parametrize("direct", [True, False])
def test_a_reason_cap_goes_to_the_schema_sent_and_not_to_the_prompt(llm: OpenAIServer, direct: bool) -> None:
    """The embedded judge's reason cap (greval.llm.config.LOCAL_REASON_CHARS) is the maxLength of every reason
    in the schema sent, on the direct path and through LangChain alike; the prompt (which shows the schema) is the
    one an uncapped judge sends, and the answer keeps to it (the test server honours maxLength, as llama.cpp does:
    tests/test_llm.py)."""
    capped = Judge(LABEL_SPEC, chat(llm, reason_chars=25), policy=FAST, direct=direct)
    result = run_sync(capped.ajudge(RECORD))
    run_sync(Judge(LABEL_SPEC, chat(llm), policy=FAST, direct=direct).ajudge(RECORD))
    with_cap, without = llm.requests()[-2:]
    caps = _reason_caps(with_cap["response_format"]["json_schema"]["schema"])
    assert caps and set(caps) == {25}
    assert set(_reason_caps(without["response_format"]["json_schema"]["schema"])) == {None}
    assert with_cap["messages"] == without["messages"]
    assert result.ok and result.verdicts and all(0 < len(v.reason or "") <= 25 for v in result.verdicts)


def test_only_a_local_judge_has_a_reason_cap_and_every_other_judge_keeps_its_key() -> None:
    """The cap is part of a local judge's identity (its answers change), and absent from every other judge's:
    their keys are the ones stores hold (computed before the cap existed, 2026-11-29)."""
    from greval.llm.config import LOCAL_REASON_CHARS

    assert LOCAL_REASON_CHARS == 300
    assert JudgeConfig.parse("openai:gpt-4o-mini").key == "83cdcff0a78d"
    assert JudgeConfig.parse("openai:judge-test", max_tokens=300, seed=7).key == "32ab43a023c5"
    assert "reason_chars" not in JudgeConfig.parse("anthropic:claude-x").identity
    assert JudgeConfig.parse("anthropic:claude-x").key == "f35e60eeecc6"


def test_tool_calling_goes_through_langchain(llm: OpenAIServer) -> None:
    """A judge that falls back to tool calling binds LangChain's tool (its schema conversion): ChatOpenAI, then."""
    llm.configure(json_schema=False)
    j = Judge(VALUE_SPEC, chat(llm), policy=FAST, method="auto")
    result = run_sync(j.ajudge(RECORD))
    assert result.ok and [c.method for c in result.calls] == ["json_schema", "function_calling"]
    assert isinstance(j.caller("function_calling"), ModelCall)


@pytest.mark.parametrize(
    ("ref", "developer"),
    [("openai:o3-mini", True), ("openai:gpt-5-mini", False), ("openai:gpt-5.2-pro", False), ("openai:my-codex", False)],
)
def test_models_chatopenai_adapts_go_through_it(llm: OpenAIServer, ref: str, developer: bool) -> None:
    """o-series, gpt-5 and later, codex: ChatOpenAI changes their requests (the system role, temperature, the
    Responses API), so greval does not build them itself."""
    caller = Judge(VALUE_SPEC, chat(llm, ref), policy=FAST).caller("json_schema")
    assert not caller.direct and "adapts requests" in (caller.reason or "")
    if developer:  # the request really is LangChain's: o-series models get the system prompt as "developer"
        llm.reset()
        run_sync(Judge(VALUE_SPEC, chat(llm, ref), policy=FAST).ajudge(RECORD))
        assert llm.requests()[0]["messages"][0]["role"] == "developer"


@pytest.mark.parametrize("name", ["OPENAI_PROXY", "OPENAI_API_BASE", "LANGSMITH_GATEWAY_URL"])
def test_settings_only_langchain_reads_send_calls_through_it(
    llm: OpenAIServer, monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    monkeypatch.setenv(name, "http://127.0.0.1:9")
    caller = Judge(VALUE_SPEC, chat(llm), policy=FAST).caller("json_schema")
    assert not caller.direct and ("OPENAI_" in name) == (name in (caller.reason or ""))


def test_tracing_in_the_environment_means_langchain_may_listen(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("LANGSMITH_TRACING", "LANGCHAIN_TRACING_V2", "LANGSMITH_TRACING_V2", "LANGCHAIN_TRACING"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("LANGCHAIN_HANDLER", raising=False)
    assert not tracing_configured()
    monkeypatch.setenv("LANGSMITH_TRACING", " ")
    assert not tracing_configured()
    monkeypatch.setenv("LANGSMITH_TRACING", "true")
    assert tracing_configured() and langchain_may_listen(True)
    assert langchain_may_listen(False)  # this test process has LangChain loaded: LangChain itself is asked


def test_callbacks_that_listen_get_the_call_through_langchain(llm: OpenAIServer) -> None:
    """A parent run's callback handler (tracing, cost tracking) sees the model call; with none, no handler runs
    and the call goes without LangChain."""
    from langchain_core.callbacks import AsyncCallbackHandler

    class Seen(AsyncCallbackHandler):
        def __init__(self) -> None:
            self.starts = 0

        async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            self.starts += 1

    seen = Seen()
    runnable = compile(VALUE_SPEC, chat(llm), policy=FAST)
    assert run_sync(runnable.ainvoke(RECORD, config={"callbacks": [seen]})).ok and seen.starts == 1
    j = Judge(VALUE_SPEC, chat(llm), policy=FAST)
    assert run_sync(j.ajudge(RECORD)).ok and seen.starts == 1
    caller = j.caller("json_schema")
    assert isinstance(caller, OpenAICall) and caller._langchain is None


def test_a_global_llm_cache_is_used(llm: OpenAIServer) -> None:
    from langchain_core.caches import InMemoryCache
    from langchain_core.globals import set_llm_cache

    set_llm_cache(InMemoryCache())
    try:
        j = Judge(VALUE_SPEC, chat(llm), policy=FAST)
        llm.reset()
        first, second = run_sync(j.ajudge(RECORD)), run_sync(j.ajudge(RECORD))
        assert first.ok and second.ok and llm.stats()["total"] == 1
    finally:
        set_llm_cache(None)


FAULTS = [
    {"status": 400, "message": "ContextWindowExceededError: the prompt is 9000 tokens"},
    {"status": 400, "message": "'response_format' of type 'json_schema' is not supported with this model"},
    {"status": 400, "code": "context_length_exceeded"},
    {"status": 401},
    {"status": 404},
    {"status": 429, "retry_after": 3},
    {"status": 500},
]


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f"{f['status']}-{f.get('message', f.get('code', ''))[:20]}")
def test_errors_are_classified_and_described_as_langchain_s(llm: OpenAIServer, fault: dict[str, Any]) -> None:
    """greval's own error (greval.llm.wire.HTTPStatusError, no SDK class) and LangChain's for the same refusal are
    classified alike (kind, status, Retry-After) and described in the same words, so greval retries, falls back
    and reports a failure alike on both paths."""
    j = Judge(VALUE_SPEC, chat(llm), policy=FAST)
    messages = j.messages("json_schema", RECORD.data, None, None)
    raised: list[BaseException] = []
    for call in (j.caller("json_schema"), ModelCall(j.bound("json_schema"))):
        llm.script([{"times": 1, "action": {"type": "fault", **fault}}])
        with warnings.catch_warnings(), pytest.raises(Exception) as caught:
            warnings.simplefilter("ignore")  # LangChain warns about a refused json_schema on both paths
            run_sync(call(messages))
        raised.append(caught.value)
    direct, via_langchain = raised
    assert isinstance(direct, HTTPStatusError) and direct.status_code == fault["status"]
    assert classify(direct) == classify(via_langchain)
    assert describe_error(direct) == describe_error(via_langchain)


def _completion(message: dict[str, Any], **extra: Any) -> Any:
    """A response as the direct call's SDK request builds it (greval.llm.sdk: leniently for an odd one)."""
    from greval.llm.sdk import _FastChatCompletion

    choice = {"index": 0, "message": message, "finish_reason": extra.pop("finish_reason", "stop")}
    if "logprobs" in extra:
        choice["logprobs"] = extra.pop("logprobs")
    data = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice], **extra}
    return _FastChatCompletion.build(response=None, data=data)


USAGE = {"prompt_tokens": 11, "completion_tokens": 5, "total_tokens": 16}
TOOL = {"id": "t", "type": "function", "function": {"name": "f", "arguments": '{"v": 2}'}}
BAD_TOOL = {**TOOL, "function": {"name": "f", "arguments": "{bad"}}


@pytest.mark.parametrize(
    "response",
    [
        _completion({"role": "assistant", "content": '{"a": 1}'}, usage=USAGE),
        _completion({"role": "assistant", "content": None, "refusal": "no"}, finish_reason="content_filter"),
        _completion({"role": "assistant", "content": "x"}, usage={"prompt_tokens": 3}, service_tier="default"),
        _completion({"role": "assistant", "content": "x"}, logprobs={"content": [], "refusal": None}),
        _completion({"role": "assistant", "content": None, "tool_calls": [TOOL]}),
        _completion({"role": "assistant", "content": None, "tool_calls": [BAD_TOOL]}),
    ],
    ids=["plain", "refusal", "partial-usage", "logprobs", "tool-call", "bad-tool-call"],
)
def test_answers_read_as_langchain_reads_them(response: Any) -> None:
    model = OpenAIChat(model="m", api_key=SecretStr("sk-test"))
    same_reply(reply_of(response, model), chat_result_message(model.langchain(), response))
