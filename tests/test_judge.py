"""Stage 2 — the compiled judge, through real HTTP (langchain-openai -> local test server)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_core.runnables import Runnable
from langchain_openai import ChatOpenAI

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.judge.evaluators import compile, compile_suite
from greval.judge.judge import Judge
from greval.judge.verdict import verdict_models
from greval.llm.retry import RetryPolicy
from greval.spec import Spec, parse_spec, resolve_specs
from greval.testing.openai_server import OpenAIServer
from greval.types import RECORD_ITEM, ErrorKind, JudgeResult

FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.2)

VALUE_SPEC = parse_spec(
    {
        "name": "coherence",
        "description": "How coherent the answer is.",
        "steps": ["Read the answer.", "Rate it on the scale."],
        "inputs": ["question", "answer"],
        "scale": {"kind": "value", "min": 1, "max": 5, "ranges": {"1-2": "poor", "3": "fair", "4-5": "good"}},
        "outputs": {"recommendations": {"type": "list[string]", "description": "How to improve the answer."}},
    }
)
LABEL_SPEC = parse_spec(
    {
        "name": "validity",
        "description": "Whether each triple uses its relation correctly.",
        "steps": ["Read each triple.", "Decide yes, maybe or no."],
        "inputs": ["triples"],
        "target": {"each": "triples"},
        "scale": {
            "kind": "categorical",
            "labels": [
                {"name": "yes", "description": "valid", "score": 1},
                {"name": "maybe", "description": "ambiguous", "score": 0.5},
                {"name": "no", "description": "invalid", "score": 0},
            ],
        },
    }
)
RECORD = Record.from_mapping(
    {
        "question": "What treats diabetes?",
        "answer": "Insulin treats diabetes.",
        "triples": [
            ["insulin", "treats", "diabetes"],
            ["blood sugar", "treats", "patient"],
            ["metformin", "isa", "drug"],
        ],
    }
)


def model(srv: OpenAIServer, **kw: Any) -> ChatOpenAI:
    return ChatOpenAI(
        model="judge-test",
        base_url=srv.base_url,
        api_key="sk-test",
        max_retries=0,  # type: ignore[arg-type]
        timeout=kw.pop("timeout", 10),
        **kw,
    )


def judge(srv: OpenAIServer, spec: Spec, **kw: Any) -> Judge:
    return Judge(spec, model(srv), policy=kw.pop("policy", FAST), **kw)


def test_verdict_models_put_reason_before_verdict() -> None:
    answer, item = verdict_models(VALUE_SPEC)
    props = list(answer.model_json_schema()["properties"])
    assert props[:2] == ["reason", "value"]
    assert answer.model_json_schema()["properties"]["value"]["maximum"] == 5
    answer, item = verdict_models(LABEL_SPEC)
    item_schema = item.model_json_schema()
    assert list(item_schema["properties"]) == ["id", "reason", "label"]
    assert item_schema["properties"]["label"]["enum"] == ["yes", "maybe", "no"]


def test_compile_and_compile_suite_take_every_spec_kind(llm: OpenAIServer) -> None:
    """A computed spec compiles without a model, a pipeline spec with one; a suite mixes kinds."""
    [bleu] = resolve_specs(["bleu"])
    answer = "Insulin is the hormone that treats type 1 diabetes in most patients."
    data = {"question": "What treats diabetes?", "answer": answer, "expected_answer": answer, "chunks": ["Insulin."]}
    computed = compile(bleu).invoke(data)
    assert computed.ok and computed.verdicts[0].score == 1.0 and llm.stats()["total"] == 0
    [faithfulness] = resolve_specs(["faithfulness"], with_dependencies=False)
    piped = compile(faithfulness, model(llm), policy=FAST).invoke(Record.from_mapping(data))
    assert piped.ok and piped.verdicts[0].item_id == "" and llm.stats()["total"] > 0
    both = compile_suite([bleu, faithfulness, VALUE_SPEC], model(llm), policy=FAST).invoke(data)
    assert set(both) == {"bleu", "faithfulness", "coherence"} and all(r.ok for r in both.values())
    with pytest.raises(ValueError, match="needs a chat model"):
        compile(VALUE_SPEC)


def test_compile_returns_a_runnable_with_value_verdict(llm: OpenAIServer) -> None:
    runnable = compile(VALUE_SPEC, model(llm), policy=FAST)
    assert isinstance(runnable, Runnable)
    result = runnable.invoke({"question": "q", "answer": "a"})
    assert isinstance(result, JudgeResult)
    assert result.ok
    [v] = result.verdicts
    assert v.value is not None and 1 <= v.value <= 5
    assert v.score == v.value
    assert v.reason
    assert isinstance(result.outputs["recommendations"], list)
    assert result.tokens_in > 0 and result.tokens_out > 0
    body = llm.requests()[-1]
    assert body["response_format"]["type"] == "json_schema"
    system = body["messages"][0]["content"]
    for fragment in (
        "How coherent the answer is.",
        "1. Read the answer.",
        "- 1-2: poor",
        "- 3: fair",
        "- 4-5: good",
    ):
        assert fragment in system


def test_scripted_verdict_is_returned_exactly(llm: OpenAIServer) -> None:
    llm.script(
        [
            {
                "match": "(blood sugar; treats; patient)",
                "action": {
                    "type": "respond",
                    "content": {
                        "verdicts": [
                            {"id": "t1", "reason": "correct use", "label": "yes"},
                            {"id": "t2", "reason": "wrong types", "label": "no"},
                            {"id": "t3", "reason": "vague", "label": "maybe"},
                        ]
                    },
                },
            }
        ]
    )
    result = run_sync(judge(llm, LABEL_SPEC).ajudge(RECORD))
    assert [(v.item_id, v.label, v.score) for v in result.verdicts] == [
        ("t1", "yes", 1.0),
        ("t2", "no", 0.0),
        ("t3", "maybe", 0.5),
    ]
    assert len(result.calls) == 1  # all items of the record in ONE call
    prompt = llm.requests()[-1]["messages"][-1]["content"]
    assert "Item ids: t1, t2, t3" in prompt
    assert "[t2] (blood sugar; treats; patient)" in prompt


def test_many_judge_reasks_missing_ids_and_ignores_extra_ones(llm: OpenAIServer) -> None:
    llm.script(
        [
            {"match": "Item ids: t1, t2, t3", "times": 1, "action": {"type": "drop_ids", "ids": ["t2"]}},
            {"match": "Item ids: t2", "times": 1, "action": {"type": "extra_ids", "ids": ["t9"]}},
        ]
    )
    result = run_sync(judge(llm, LABEL_SPEC).ajudge(RECORD))
    assert result.ok
    assert [v.item_id for v in result.verdicts] == ["t1", "t2", "t3"]
    assert len(result.calls) == 2
    reask = llm.requests()[-1]["messages"][-1]["content"]
    assert "Item ids: t2" in reask and "[t1]" not in reask  # only the missing item is asked again
    assert all(v.item_id != "t9" for v in result.verdicts)


def test_many_judge_records_explicit_error_for_items_never_returned(llm: OpenAIServer) -> None:
    llm.script([{"match": "Item ids:", "action": {"type": "drop_ids", "ids": ["t3"]}}])
    result = run_sync(judge(llm, LABEL_SPEC).ajudge(RECORD))
    assert not result.ok
    by_id = {v.item_id: v for v in result.verdicts}
    assert by_id["t1"].status == by_id["t2"].status == "ok"
    assert by_id["t3"].status == "error"
    assert "no verdict after 3 call(s)" in (by_id["t3"].error or "")
    assert by_id["t3"].error_kind is ErrorKind.INCOMPLETE and by_id["t1"].error_kind is None


def test_a_many_judge_that_fails_types_every_pending_item(llm: OpenAIServer) -> None:
    """A request failing for good ends the re-ask rounds: every item still pending gets an error verdict
    with the failure's kind (not "incomplete"), and the items judged before keep their verdicts."""
    llm.script(
        [
            {"match": "Item ids: t1, t2, t3", "times": 1, "action": {"type": "drop_ids", "ids": ["t2", "t3"]}},
            {
                "match": "Item ids: t2, t3",
                "action": {"type": "fault", "status": 400, "code": "context_length_exceeded"},
            },
        ]
    )
    result = run_sync(judge(llm, LABEL_SPEC).ajudge(RECORD))
    by_id = {v.item_id: v for v in result.verdicts}
    assert by_id["t1"].status == "ok"
    for iid in ("t2", "t3"):
        assert by_id[iid].status == "error" and by_id[iid].error_kind is ErrorKind.CONTEXT_LENGTH
        assert (by_id[iid].error or "").startswith("context_length: no verdict after 2 call(s): ")


def test_conflicting_duplicate_ids_are_asked_again(llm: OpenAIServer) -> None:
    llm.script(
        [
            {
                "match": "Item ids: t1, t2, t3",
                "times": 1,
                "action": {
                    "type": "respond",
                    "content": {
                        "verdicts": [
                            {"id": "t1", "reason": "a", "label": "yes"},
                            {"id": "t1", "reason": "b", "label": "no"},
                            {"id": "t2", "reason": "c", "label": "no"},
                            {"id": "t3", "reason": "d", "label": "no"},
                        ]
                    },
                },
            }
        ]
    )
    result = run_sync(judge(llm, LABEL_SPEC).ajudge(RECORD))
    assert result.ok and len(result.calls) == 2
    assert "Item ids: t1" in llm.requests()[-1]["messages"][-1]["content"]


@pytest.mark.parametrize("fault", ["malformed", "invalid"])
def test_unparsable_answer_is_retried_then_recorded(llm: OpenAIServer, fault: str) -> None:
    llm.script([{"match": "Rate it on the scale", "times": 2, "action": {"type": fault}}])
    result = run_sync(judge(llm, VALUE_SPEC).ajudge({"question": "q", "answer": "a"}))
    assert result.ok and len(result.calls) == 3
    assert result.calls[0].error and result.calls[0].raw
    llm.script([{"match": "Rate it on the scale", "action": {"type": fault}}])
    result = run_sync(judge(llm, VALUE_SPEC).ajudge({"question": "q2", "answer": "a"}))
    assert not result.ok
    assert "unusable answer after 3 tries" in (result.verdicts[0].error or "")
    assert result.verdicts[0].error_kind is ErrorKind.UNPARSABLE and result.verdicts[0].item_id == RECORD_ITEM
    assert all(c.raw for c in result.calls)  # the raw answers are kept for inspection


def test_transport_faults_are_retried_with_retry_after(llm: OpenAIServer) -> None:
    llm.script(
        [
            {"match": "Rate it", "times": 1, "action": {"type": "fault", "status": 429, "retry_after": 0.3}},
            {"match": "Rate it", "times": 1, "action": {"type": "fault", "status": 500}},
            {"match": "Rate it", "times": 1, "action": {"type": "timeout", "seconds": 3}},
        ]
    )
    j = Judge(VALUE_SPEC, model(llm, timeout=1.0), policy=FAST)
    import time

    t0 = time.perf_counter()
    result = run_sync(j.ajudge({"question": "q", "answer": "a"}))
    elapsed = time.perf_counter() - t0
    assert result.ok
    assert result.calls[0].attempts == 4
    assert elapsed >= 0.3 + 1.0  # waited the Retry-After and the client timeout
    assert llm.stats()["by_status"] == {"429": 1, "500": 1, "200": 2} or llm.stats()["by_status"]["429"] == 1


def test_transport_failure_after_bounded_attempts_is_an_error_verdict(llm: OpenAIServer) -> None:
    llm.script([{"match": "Rate it", "action": {"type": "fault", "status": 503}}])
    result = run_sync(judge(llm, VALUE_SPEC).ajudge({"question": "q", "answer": "a"}))
    assert not result.ok
    assert result.verdicts[0].error and result.verdicts[0].error.startswith("server_error: HTTP 503")
    assert result.verdicts[0].error_kind is ErrorKind.SERVER_ERROR
    assert llm.stats()["total"] == FAST.max_attempts


@pytest.mark.parametrize(
    ("json_schema", "tools", "expected"),
    [(True, True, "json_schema"), (False, True, "function_calling"), (False, False, "json_mode")],
)
def test_structured_output_falls_back_when_a_method_is_refused(
    llm: OpenAIServer, json_schema: bool, tools: bool, expected: str
) -> None:
    llm.configure(json_schema=json_schema, tools=tools)
    j = judge(llm, LABEL_SPEC)
    result = run_sync(j.ajudge(RECORD))
    assert result.ok, result
    assert j.method == expected
    assert result.calls[-1].method == expected
    if expected == "json_mode":
        system = llm.requests()[-1]["messages"][0]["content"]
        assert "```json" in system and '"verdicts"' in system
    # The fallback is remembered: the next record goes straight to the working method.
    before = llm.stats()["total"]
    run_sync(j.ajudge(Record.from_mapping({"triples": [["a", "b", "c"]]})))
    assert llm.stats()["total"] == before + 1


def test_missing_required_input_is_an_explicit_error_without_a_call(llm: OpenAIServer) -> None:
    result = run_sync(judge(llm, VALUE_SPEC).ajudge({"question": "q"}))
    assert result.error == "missing required input: answer"
    assert llm.stats()["total"] == 0


def test_depends_on_feeds_verdicts_and_suite_runs_independent_metrics_concurrently(llm: OpenAIServer) -> None:
    llm.configure(latency=0.4)
    llm.script(
        [
            {
                "match": "Metric: chunk_evaluation",
                "action": {
                    "type": "respond",
                    "content": {
                        "verdicts": [
                            {"id": "c1", "reason": "names the drug", "label": "Relevant"},
                            {"id": "c2", "reason": "off topic", "label": "Irrelevant"},
                        ]
                    },
                },
            }
        ]
    )
    specs = resolve_specs(["answer_completeness"])
    suite = compile_suite(specs, model(llm), policy=FAST)
    rec = Record.from_mapping(
        {
            "question": "What treats diabetes?",
            "answer": "Insulin.",
            "chunks": ["Insulin treats diabetes.", "Paris is in France."],
            "triples": [["insulin", "treats", "diabetes"]],
        }
    )
    import time

    t0 = time.perf_counter()
    results = run_sync(suite.ainvoke(rec))
    elapsed = time.perf_counter() - t0
    assert set(results) == {"chunk_evaluation", "triple_evaluation", "answer_completeness"}
    assert all(r.ok for r in results.values())
    assert elapsed < 3 * 0.4 - 0.05  # two levels, not three sequential calls
    assert llm.stats()["max_in_flight"] >= 2
    completeness = [b for b in llm.requests() if "Metric: answer_completeness" in b["messages"][0]["content"]][-1]
    human = completeness["messages"][-1]["content"]
    assert "## Verdicts of the metric 'chunk_evaluation'" in human
    assert "- [c1] Relevant: names the drug" in human
    assert "- [c2] Irrelevant: off topic" in human
    out = results["answer_completeness"].outputs
    assert isinstance(out["entities"], list) and isinstance(out["recommendations"], list)


def test_dependent_metric_without_triples_still_runs(llm: OpenAIServer) -> None:
    specs = resolve_specs(["answer_completeness"])
    suite = compile_suite(specs, model(llm), policy=FAST)
    results = run_sync(suite.ainvoke(Record.from_mapping({"question": "q", "answer": "a", "chunks": ["x"]})))
    assert results["triple_evaluation"].error == "missing required input: triples"
    assert results["answer_completeness"].ok


def test_few_shot_examples_are_sent_and_checked(llm: OpenAIServer) -> None:
    spec = parse_spec(
        VALUE_SPEC.model_dump(mode="json")
        | {
            "examples": [
                {
                    "inputs": {"question": "2+2?", "answer": "4"},
                    "output": {"reason": "fine", "value": 5, "recommendations": []},
                }
            ]
        }
    )
    run_sync(judge(llm, spec).ajudge({"question": "q", "answer": "a"}))
    msgs = llm.requests()[-1]["messages"]
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user"]
    assert json.loads(msgs[2]["content"])["value"] == 5
    bad = parse_spec(
        VALUE_SPEC.model_dump(mode="json")
        | {
            "examples": [
                {
                    "inputs": {"question": "2+2?", "answer": "4"},
                    "output": {"reason": "x", "value": 9, "recommendations": []},
                }
            ]
        }
    )
    from greval.errors import SpecError

    with pytest.raises(SpecError, match=r"examples\[0\]\.output: value: Input should be less than or equal to 5"):
        judge(llm, bad)


def test_samples_give_majority_and_confidence(llm: OpenAIServer) -> None:
    llm.script(
        [
            {
                "match": "Rate it",
                "times": 2,
                "action": {"type": "respond", "content": {"reason": "r", "value": 4, "recommendations": []}},
            },
            {
                "match": "Rate it",
                "times": 1,
                "action": {"type": "respond", "content": {"reason": "r", "value": 2, "recommendations": []}},
            },
        ]
    )
    result = run_sync(judge(llm, VALUE_SPEC, samples=3).ajudge({"question": "q", "answer": "a"}))
    [v] = result.verdicts
    # The verdict is the majority value (4, as the README says; the mean 3.33 rounded gave 3 before), its
    # confidence the share of samples that gave it; the score keeps the samples' mean.
    assert v.value == 4 and v.confidence == pytest.approx(2 / 3)
    assert v.score == pytest.approx(10 / 3)
    assert v.samples is not None and len(v.samples) == 3
    assert len(result.calls) == 3


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([4, 4, 2], 4),  # the mode, not round(mean) = 3
        ([2, 3], 2),  # a tie equally near the median 2.5: the smaller (round(2.5) is 2 by banker's rounding too)
        ([3, 4], 3),  # ... and round(3.5) would give 4: ties do not depend on parity
        ([1, 1, 5, 5, 4], 5),  # tie 1 vs 5, median 4: 5 is nearer
        ([1, 1, 2, 5, 5], 1),  # tie 1 vs 5, median 2: 1 is nearer
        ([1, 5], 1),  # no value in between is invented (round(mean) = 3 was)
        ([2, 2, 2, 5], 2),
    ],
)
def test_majority_value_is_the_mode_with_ties_toward_the_median(values: list[int], expected: int) -> None:
    from greval.judge.parse import majority_value

    assert majority_value(values) == expected


# ------------------------------------------------------------------ direct calls (greval.llm.call)
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
