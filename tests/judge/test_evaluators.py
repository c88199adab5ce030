"""greval.judge.evaluators: the kind -> evaluator table, compile and compile_suite over every kind of spec."""

from __future__ import annotations

import dataclasses
from typing import Any, Literal

import pytest
from langchain_core.runnables import Runnable

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.judge.computed import ComputedEvaluator
from greval.judge.evaluators import EVALUATORS, compile, compile_suite, make_evaluator, register_evaluator
from greval.judge.judge import Judge
from greval.judge.options import CallOptions, Options
from greval.judge.pipeline import PipelineEvaluator
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.retry import RetryPolicy
from greval.spec import BUILTIN_KINDS, SPEC_KINDS, BaseSpec, parse_spec, register_kind, resolve_specs
from greval.spec.kinds import kind_model
from greval.testing.openai_server import OpenAIServer
from greval.types import JudgeResult
from tests.judge.conftest import FAST, VALUE_SPEC, model


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
    results = run_sync(suite.ainvoke(rec))
    assert set(results) == {"chunk_evaluation", "triple_evaluation", "answer_completeness"}
    assert all(r.ok for r in results.values())
    assert llm.stats()["max_in_flight"] >= 2  # the two per-item metrics at once: two levels, not three in a row
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


def test_every_kind_is_built_by_the_one_table_and_no_spec_builds_its_own_judge(llm: OpenAIServer) -> None:
    """Issue 30: a spec declares, judge/evaluators.py dispatches (EVALUATORS: kind -> evaluator). A kind
    registered outside greval gets its evaluator with register_evaluator; one without is a TypeError naming it."""
    assert set(EVALUATORS) >= set(BUILTIN_KINDS)
    for kind in BUILTIN_KINDS:
        assert not hasattr(kind_model(kind), "evaluator"), kind
    [bleu] = resolve_specs(["bleu"])
    assert isinstance(make_evaluator(bleu, None), ComputedEvaluator)
    [faithfulness] = resolve_specs(["faithfulness"], with_dependencies=False)
    assert isinstance(make_evaluator(faithfulness, model(llm)), PipelineEvaluator)
    assert isinstance(make_evaluator(VALUE_SPEC, model(llm)), Judge)

    @register_kind("echo_test")
    class EchoSpec(BaseSpec):
        kind: Literal["echo_test"] = "echo_test"

        @property
        def needs_model(self) -> bool:
            return False

    class Echo:
        async def ajudge(self, record: Any, deps: Any = None, only_items: Any = None) -> JudgeResult:
            return JudgeResult(spec="echo", spec_hash="h", record_id="r1")

    echo = parse_spec({"kind": "echo_test", "name": "echo", "description": "d"})
    try:
        with pytest.raises(TypeError, match=r"has no evaluator .*register_evaluator"):
            make_evaluator(echo, None)
        register_evaluator("echo_test", lambda spec, chat, calls: Echo())
        assert run_sync(make_evaluator(echo, None).ajudge({"answer": "a"})).spec == "echo"
    finally:
        SPEC_KINDS.pop("echo_test", None)
        EVALUATORS.pop("echo_test", None)


def test_call_options_are_one_frozen_bundle_with_one_keyword_form(llm: OpenAIServer) -> None:
    """The evaluator options are written once (CallOptions); Options, their keyword form for Python callers,
    names the same fields, and a run's bundle reaches every step of a pipeline (without log-probabilities)."""
    assert set(Options.__annotations__) == {f.name for f in dataclasses.fields(CallOptions)}
    limiter = AdaptiveLimiter(3)
    calls = CallOptions.of(policy=FAST, limiter=limiter, samples=3, logprobs=2)
    assert calls.policy is FAST and calls.limiter is limiter and calls.logprobs is not None
    assert calls.logprobs.top == 2
    with pytest.raises(dataclasses.FrozenInstanceError):
        calls.samples = 1  # type: ignore[misc]
    assert CallOptions.of(calls, policy=None).policy == RetryPolicy()
    [faithfulness] = resolve_specs(["faithfulness"], with_dependencies=False)
    ev = make_evaluator(faithfulness, model(llm), calls)
    assert isinstance(ev, PipelineEvaluator)
    steps = [*ev.extractors.values(), *ev.verifiers.values()]
    assert steps and all(j.limiter is limiter and j.policy is FAST and j.logprobs is None for j in steps)
    assert {j.samples for j in ev.extractors.values()} == {1} and {j.samples for j in ev.verifiers.values()} == {3}
    judge = Judge(VALUE_SPEC, model(llm), calls)
    assert judge.calls is calls and judge.logprobs is calls.logprobs
