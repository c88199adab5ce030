"""The judge's direct call path (greval.llm.call): the same requests and verdicts as LangChain's, and when it
steps aside.
"""

from __future__ import annotations

from typing import Any

import pytest

from greval._sync import run_sync
from greval.judge.evaluators import compile
from greval.judge.judge import Judge
from greval.testing.openai_server import OpenAIServer
from tests.judge.conftest import FAST, LABEL_SPEC, RECORD, VALUE_SPEC, judge, model


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
def test_direct_call_sends_and_returns_what_langchain_does(llm: OpenAIServer, method: Any) -> None:
    """The direct path must be indistinguishable on the wire and in the message greval reads."""
    j = judge(llm, LABEL_SPEC)
    ids = [t["id"] for t in RECORD.items("triples")]
    messages = j.messages(method, RECORD.data, None, ids)
    caller = j.caller(method)
    assert caller.direct, caller.reason
    llm.reset()
    via_langchain = run_sync(j.bound(method).ainvoke(messages))
    via_direct = run_sync(caller(messages))
    assert caller.direct, caller.reason  # the call really went the direct way
    lc_body, direct_body = llm.requests()
    assert direct_body == lc_body
    assert_same_request_meta(llm)
    assert via_direct.content == via_langchain.content
    assert via_direct.tool_calls == via_langchain.tool_calls
    assert via_direct.usage_metadata == via_langchain.usage_metadata
    for key in ("finish_reason", "model_name", "token_usage", "logprobs"):
        assert via_direct.response_metadata.get(key) == via_langchain.response_metadata.get(key), key
    # the whole message, but for the per-call ids
    direct_dump, lc_dump = via_direct.model_dump(exclude={"id"}), via_langchain.model_dump(exclude={"id"})
    assert direct_dump["response_metadata"].pop("id") != lc_dump["response_metadata"].pop("id")
    assert direct_dump == lc_dump


def assert_same_request_meta(llm: OpenAIServer) -> None:
    """Headers and query string of the last two requests (LangChain's, then the direct one) match, except the
    header asking the SDK for the raw response, which only LangChain's wrapper sets."""
    lc, direct = llm.request_meta(limit=2)
    lc["headers"].pop("x-stainless-raw-response", None)
    differ = {k: (lc["headers"].get(k), v) for k, v in direct["headers"].items() if lc["headers"].get(k) != v}
    assert direct == lc, differ


def test_direct_call_carries_the_models_request_options(llm: OpenAIServer, monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user sets on ChatOpenAI (model kwargs, default headers and query, timeout) and the judge's own
    extra body field reach the server the same way on both paths: the direct call splits the payload into
    body and request options as create() does. (A model-level ``extra_body`` makes the judge bind
    ``response_format`` itself, which LangChain sends through the SDK's parse path: such models are called
    through ``ainvoke``.)"""
    chat = model(
        llm,
        timeout=7,
        default_headers={"X-Team": "qa"},
        default_query={"tenant": "t1"},
        model_kwargs={"user": "greval-tests"},
        temperature=0.3,
    )
    j = Judge(LABEL_SPEC, chat, policy=FAST)
    ids = [t["id"] for t in RECORD.items("triples")]
    messages = j.messages("json_schema", RECORD.data, None, ids)
    caller = j.caller("json_schema")
    assert caller.direct, caller.reason
    llm.reset()
    via_langchain = run_sync(j.bound("json_schema").ainvoke(messages))
    via_direct = run_sync(caller(messages))
    assert caller.direct, caller.reason  # the call really went the direct way
    lc_body, direct_body = llm.requests()
    assert direct_body == lc_body
    # response_format travels as the request's extra JSON (greval binds it so), the rest as body fields
    assert direct_body["response_format"]["type"] == "json_schema"
    assert (direct_body["user"], direct_body["temperature"]) == ("greval-tests", 0.3)
    assert_same_request_meta(llm)
    meta = llm.request_meta(limit=1)[0]
    assert meta["headers"]["x-team"] == "qa" and meta["query"] == {"tenant": "t1"}
    assert meta["headers"]["x-stainless-read-timeout"] == "7.0"
    assert via_direct.content == via_langchain.content

    # ...and it is sent without create() and its per-call parameter transform (the CPU it saves is the
    # point of the direct path; scripts/bench_run.py measures it).
    async def no_create(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the direct path called chat.completions.create")

    from openai.resources.chat.completions import AsyncCompletions

    monkeypatch.setattr(AsyncCompletions, "create", no_create)
    assert run_sync(caller(messages)).content == via_direct.content


def test_direct_and_langchain_paths_give_the_same_verdicts(llm: OpenAIServer) -> None:
    direct = run_sync(judge(llm, LABEL_SPEC).ajudge(RECORD))
    plain = run_sync(judge(llm, LABEL_SPEC, direct=False).ajudge(RECORD))
    assert judge(llm, LABEL_SPEC, direct=False).caller("json_schema").reason == "direct calls are switched off"
    assert [(v.item_id, v.label, v.reason) for v in direct.verdicts] == [
        (v.item_id, v.label, v.reason) for v in plain.verdicts
    ]


def test_direct_call_steps_aside_when_langchain_callbacks_listen(llm: OpenAIServer) -> None:
    """A callback handler (tracing, cost tracking) must see every model call, so those go via ainvoke."""
    from langchain_core.callbacks import AsyncCallbackHandler

    class Seen(AsyncCallbackHandler):
        def __init__(self) -> None:
            self.starts = 0

        async def on_chat_model_start(self, *args: Any, **kwargs: Any) -> None:
            self.starts += 1

    seen = Seen()
    runnable = compile(VALUE_SPEC, model(llm), policy=FAST)
    result = run_sync(runnable.ainvoke(RECORD, config={"callbacks": [seen]}))
    assert result.ok and seen.starts == 1  # the parent run's callbacks reached the model call
    own = Seen()
    result = run_sync(Judge(VALUE_SPEC, model(llm, callbacks=[own]), policy=FAST).ajudge(RECORD))
    assert result.ok and own.starts == 1
    result = run_sync(judge(llm, VALUE_SPEC).ajudge(RECORD))  # nothing listening: no handler ran
    assert result.ok and seen.starts == 1 and own.starts == 1


def test_direct_call_is_refused_for_models_that_need_langchain(llm: OpenAIServer) -> None:
    from langchain_core.caches import InMemoryCache
    from langchain_core.globals import set_llm_cache
    from langchain_core.rate_limiters import InMemoryRateLimiter

    from greval.llm.call import direct_reason

    assert direct_reason(model(llm)) is None
    assert direct_reason(model(llm, streaming=True)) == "the model streams"
    limiter = InMemoryRateLimiter(requests_per_second=100)
    assert direct_reason(model(llm, rate_limiter=limiter)) == "the model has a rate limiter"
    cached = model(llm, cache=InMemoryCache())
    assert direct_reason(cached) == "the model has a cache"
    set_llm_cache(InMemoryCache())
    try:
        assert direct_reason(model(llm)) == "a global LLM cache is set"
        # The cache really is used on the LangChain path: the second identical judgement makes no request.
        j = judge(llm, VALUE_SPEC)
        llm.reset()
        first, second = run_sync(j.ajudge(RECORD)), run_sync(j.ajudge(RECORD))
        assert first.ok and second.ok and llm.stats()["total"] == 1
    finally:
        set_llm_cache(None)
