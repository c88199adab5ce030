"""Pipeline metrics (kind: pipeline) and the shipped metric library, each proven on a worked example whose
extract / verify answers are scripted exactly and whose expected score is computed by hand; storing, resuming
and re-asking; one-line spec errors; the formulas alone.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
from langchain_openai import ChatOpenAI
from pydantic import SecretStr

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.errors import SpecError
from greval.judge.evaluators import make_evaluator
from greval.judge.judge import Judge
from greval.judge.options import CallOptions
from greval.judge.pipeline import aggregate_counts
from greval.runner.driver import run
from greval.spec import CategoricalScale, Spec, parse_spec, spec_json_schema
from greval.spec.pipeline import (
    CountsAggregate,
    PipelineSpec,
    RankedPrecisionAggregate,
    RatioAggregate,
    ScoreMeanAggregate,
)
from greval.store.results import aggregate_items
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from greval.types import RECORD_ITEM, ErrorKind, JudgeResult
from tests.judge.conftest import FAST, RUN, cfg, judge_spec, spec_named

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


def pipeline_model(srv: OpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(
        model="judge-test", base_url=srv.base_url, api_key=SecretStr("sk-test"), max_retries=0, timeout=10
    )


def pipeline(name: str) -> PipelineSpec:
    spec = spec_named(name)
    assert isinstance(spec, PipelineSpec)
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
    ev = make_evaluator(spec, pipeline_model(srv), CallOptions(policy=FAST))
    return run_sync(ev.ajudge(Record.from_mapping(record)))


def record_score(result: JudgeResult) -> float | None:
    [top] = [v for v in result.verdicts if v.item_id == ""]
    assert top.status == "ok", top.error
    return top.score


def by_id(result: JudgeResult) -> dict[str, Any]:
    return {v.item_id: v for v in result.verdicts}


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
    evaluator = make_evaluator(pipeline("faithfulness"), pipeline_model(llm), CallOptions(policy=FAST))
    result = run_sync(evaluator.ajudge(Record.from_mapping({"id": "r1", "answer": "...", "chunks": ["ctx"]})))
    rows = {v.item_id: v for v in result.verdicts}
    assert rows["claims"].status == "error" and rows["claims"].error_kind is ErrorKind.UNPARSABLE
    assert (rows["claims"].error or "").startswith("extraction failed: unparsable: ")
    assert rows[RECORD_ITEM].status == "error" and rows[RECORD_ITEM].error_kind is ErrorKind.UNPARSABLE


def test_a_failed_verify_step_types_the_record_verdict(llm: OpenAIServer) -> None:
    """A verify step whose request fails for good: its items and the score carry the failure's kind."""
    llm.script([*FAITHFUL_RULES[:1], {"match": "Item ids:", "action": {"type": "fault", "status": 503}}])
    evaluator = make_evaluator(pipeline("faithfulness"), pipeline_model(llm), CallOptions(policy=FAST))
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
