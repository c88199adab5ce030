"""The LLM judge (greval.judge.judge), through real HTTP (langchain-openai -> the local OpenAI-compatible test
server): scripted verdicts, many-judges and re-asks, retries and fallbacks, missing inputs, dependencies, samples.
"""

from __future__ import annotations

import pytest

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.judge.judge import Judge
from greval.testing.openai_server import OpenAIServer
from greval.types import RECORD_ITEM, ErrorKind
from tests.judge.conftest import FAST, LABEL_SPEC, RECORD, VALUE_SPEC, judge, model


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
