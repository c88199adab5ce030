"""The judge's prompt layout (issue 35): compact, the static part first, and nothing of a spec left out.

Every request goes through langchain-openai to the real local test server; what is checked is what the server
received. A new layout is a new judgement: ``greval.types.PROMPT_LAYOUT`` folds into the key of every metric a
model judges (the store side is in tests/test_store.py: an old store's verdicts stay readable, a run judges
again).
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from langchain_openai import ChatOpenAI

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.judge.evaluators import make_evaluator
from greval.judge.judge import Judge
from greval.judge.options import CallOptions
from greval.judge.prompt import wire_schema
from greval.llm.retry import RetryPolicy
from greval.spec import CategoricalScale, Spec, parse_spec, resolve_specs
from greval.spec.pipeline import PipelineSpec, VerifyStep
from greval.spec.verdict import verdict_models
from greval.store.store import spec_keys
from greval.testing.openai_server import OpenAIServer
from greval.types import PROMPT_LAYOUT, ItemVerdict, JudgeResult, Method

FAST = RetryPolicy(max_attempts=3, base_delay=0.01, max_delay=0.1)

# Each element carries a marker (S-1, L-2, E-C1 …) so its text can be found in what the server received.
PER_CHUNK = parse_spec(
    {
        "name": "support_check",
        "description": "Whether each chunk supports the answer (marker D-91).",
        "instructions": "Mind the dates (marker I-17).",
        "steps": ["Read the answer (step S-1).", "Compare each chunk with it (step S-2).", "Pick a label (S-3)."],
        "inputs": {
            "question": {"required": True, "description": "what the user asked (marker Q-D)"},
            "answer": {"required": True},
            "chunks": {"required": True},
        },
        "target": {"each": "chunks"},
        "depends_on": ["chunk_evaluation"],
        "scale": {
            "kind": "categorical",
            "ordered": True,
            "labels": {
                "Supports": "The chunk states what the answer says (L-1).",
                "Partly": "The chunk states some of it (L-2).",
                "No support": "The chunk states none of it (L-3).",
            },
        },
        "outputs": {"gaps": {"type": "list[string]", "description": "What no chunk supports (O-1)."}},
        "examples": [
            {
                "inputs": {"question": "Example E-Q?", "answer": "Example E-A.", "chunks": ["E-C1 text", "E-C2 text"]},
                "output": {
                    "verdicts": [
                        {"id": "c1", "reason": "Example reason E-R1", "label": "Supports"},
                        {"id": "c2", "reason": "Example reason E-R2", "label": "No support"},
                    ],
                    "gaps": ["E-G"],
                },
            }
        ],
    }
)
assert isinstance(PER_CHUNK, Spec)

VALUE = parse_spec(
    {
        "name": "clarity",
        "description": "How clear the answer is (marker D-7).",
        "steps": ["Read it (step V-1).", "Score it (step V-2)."],
        "inputs": {"answer": {"required": True}},
        "scale": {"kind": "value", "min": 1, "max": 5, "ranges": {"1-2": "hard to follow (R-1)", "3-5": "clear (R-2)"}},
    }
)

assert isinstance(VALUE, Spec)


def chat_model(srv: OpenAIServer) -> ChatOpenAI:
    return ChatOpenAI(model="judge-test", base_url=srv.base_url, api_key="sk-test", max_retries=0, timeout=10)


def record(i: int) -> Record:
    return Record.from_mapping(
        {
            "id": f"r{i}",
            "question": f"When did event {i} happen?",
            "answer": f"Event {i} happened in 19{i}0.",
            "chunks": [f"Chunk one of record {i}.", f"Chunk two of record {i}.", f"Chunk three of record {i}."],
        }
    )


def deps(i: int) -> dict[str, JudgeResult]:
    """chunk_evaluation's verdicts on record i, as a run hands them to a metric that depends on it."""
    verdicts = [
        ItemVerdict(item_id="c1", label="Relevant", reason=f"dependency reason DR-{i}1"),
        ItemVerdict(item_id="c2", label="Irrelevant", reason=f"dependency reason DR-{i}2"),
        ItemVerdict(item_id="c3", label="Indirectly relevant", reason=f"dependency reason DR-{i}3"),
    ]
    return {"chunk_evaluation": JudgeResult(spec="chunk_evaluation", spec_hash="x", verdicts=verdicts)}


def sent_text(body: dict[str, Any]) -> str:
    """Everything a request put in front of the model: its messages and its structured-output definition."""
    parts = [m["content"] for m in body["messages"]]
    for key in ("response_format", "tools"):
        if body.get(key):
            parts.append(json.dumps(body[key], ensure_ascii=False))
    return "\n".join(parts)


@pytest.mark.parametrize("method", ["json_schema", "function_calling", "json_mode"])
def test_every_element_of_a_spec_reaches_the_judge(llm: OpenAIServer, method: Method) -> None:
    """Steps, instructions, the description, every label with its description, the inputs (with their
    descriptions), the items with their ids, the outputs, the few-shot examples and the verdicts it depends on
    are all in the request — whichever way structured output is asked for."""
    result = run_sync(Judge(PER_CHUNK, chat_model(llm), method=method, policy=FAST).ajudge(record(1), deps(1)))
    assert result.ok, result
    body = llm.requests()[-1]
    text = sent_text(body)
    spec = PER_CHUNK
    assert isinstance(spec.scale, CategoricalScale)
    wanted = [spec.description, spec.instructions or "", "what the user asked (marker Q-D)"]
    wanted += [f"{i}. {step}" for i, step in enumerate(spec.steps, 1)]
    wanted += [f'- "{lab.name}": {lab.description}' for lab in spec.scale.labels]
    wanted += ["`gaps` (list[string]): What no chunk supports (O-1)."]
    wanted += ["When did event 1 happen?", "Event 1 happened in 1910."]
    wanted += ["[c1] Chunk one of record 1.", "[c2] Chunk two of record 1.", "[c3] Chunk three of record 1."]
    wanted += ["Item ids: c1, c2, c3"]
    wanted += ["Example E-Q?", "Example E-A.", "[c1] E-C1 text", "[c2] E-C2 text", "Item ids: c1, c2"]
    wanted += ["Example reason E-R1", "Example reason E-R2", "E-G"]
    wanted += ["- [c1] Relevant: dependency reason DR-11", "- [c2] Irrelevant: dependency reason DR-12"]
    wanted += ["- [c3] Indirectly relevant: dependency reason DR-13"]
    missing = [w for w in wanted if w not in text]
    assert not missing, missing
    # The labels the answer may take, and the outputs, are in the schema the provider enforces (JSON mode:
    # in the prompt, fenced).
    schema = json.dumps(wire_schema(verdict_models(spec)[0]), ensure_ascii=False, separators=(",", ":"))
    if method == "json_mode":
        assert schema in body["messages"][0]["content"]
    elif method == "json_schema":
        assert body["response_format"]["json_schema"]["schema"] == json.loads(schema)
    else:
        assert body["tools"][0]["function"]["parameters"] == json.loads(schema)


def test_a_value_scale_and_a_conversation_reach_the_judge_whole(llm: OpenAIServer) -> None:
    """Every range of a value scale with its description; a conversation turn by turn, each with its id."""
    run_sync(Judge(VALUE, chat_model(llm), policy=FAST).ajudge({"answer": "It is clear."}))
    text = sent_text(llm.requests()[-1])
    for want in (
        "How clear the answer is (marker D-7).",
        "1. Read it (step V-1).",
        "2. Score it (step V-2).",
        "from 1 to 5",
        "- 1-2: hard to follow (R-1)",
        "- 3-5: clear (R-2)",
        "It is clear.",
    ):
        assert want in text, want
    [turns] = resolve_specs(["turn_relevance"], with_dependencies=False)
    assert isinstance(turns, Spec)
    chat = [
        {"role": "user", "content": "Hi, I need a table for two."},
        {"role": "assistant", "content": "For which evening?"},
        {"role": "user", "content": "Friday."},
        {"role": "assistant", "content": "Booked for Friday."},
    ]
    result = run_sync(Judge(turns, chat_model(llm), policy=FAST).ajudge({"conversation": chat}))
    assert result.ok, result
    user = llm.requests()[-1]["messages"][-1]["content"]
    lines = ["[t1] user: Hi, I need a table for two.", "[t2] assistant: For which evening?",
             "[t3] user: Friday.", "[t4] assistant: Booked for Friday."]  # fmt: skip
    assert "\n\n".join(lines) in user and user.rstrip().endswith("Item ids: t2, t4")


def test_a_pipeline_step_gets_its_labels_steps_and_items(llm: OpenAIServer) -> None:
    [spec] = resolve_specs(["faithfulness"], with_dependencies=False)
    assert isinstance(spec, PipelineSpec)
    claims = {"reason": "two claims", "items": ["Paris is in France.", "Paris has a river."]}
    llm.script([{"match": "List the factual claims", "action": {"type": "respond", "content": claims}}])
    ev = make_evaluator(spec, chat_model(llm), CallOptions(policy=FAST))
    result = run_sync(ev.ajudge({"answer": "Paris is in France and has a river.", "chunks": ["Paris, France."]}))
    assert result.ok, result
    [verify] = [b for b in llm.requests() if "Item ids:" in b["messages"][-1]["content"]]
    text = sent_text(verify)
    step = spec.steps[1]
    assert isinstance(step, VerifyStep)
    wanted = [f'- "{lab.name}": {lab.description}' for lab in step.labels]
    wanted += [f"{i}. {s}" for i, s in enumerate(step.steps, 1)]
    wanted += [(step.instructions or "").strip(), "[s1] Paris is in France.", "[s2] Paris has a river."]
    wanted += ["[c1] Paris, France.", "Item ids: s1, s2"]
    assert not [w for w in wanted if w not in text]


def test_the_static_part_comes_first_and_is_the_same_for_every_record(llm: OpenAIServer) -> None:
    """The system message, the few-shot examples and the answer's schema are the same bytes for every record
    of a spec and come before the record, so a provider's prefix cache can hold them; the record (with the
    verdicts it depends on) is the last message."""
    j = Judge(PER_CHUNK, chat_model(llm), policy=FAST)
    for i in range(3):
        assert run_sync(j.ajudge(record(i), deps(i))).ok
    bodies = llm.requests()[-3:]
    static = [(b["messages"][:-1], b["response_format"]) for b in bodies]
    assert static[0] == static[1] == static[2]
    assert [m["role"] for m in bodies[0]["messages"]] == ["system", "user", "assistant", "user"]
    for i, b in enumerate(bodies):
        assert f"event {i} happen" in b["messages"][-1]["content"]
        assert f"DR-{i}1" in b["messages"][-1]["content"]
        assert not any(f"event {i}" in m["content"] for m in b["messages"][:-1])


def test_the_schema_sent_says_nothing_the_prompt_already_says() -> None:
    """No title or description in the schema sent (the system prompt says what each field holds); the
    field names, the labels and the constraints are all kept, and an output named like a keyword stays."""
    spec = parse_spec(
        PER_CHUNK.model_dump(mode="json")
        | {"outputs": {"description": {"type": "string", "description": "A field named description."}}}
        | {"examples": []}
    )
    assert isinstance(spec, Spec)
    schema = wire_schema(verdict_models(spec)[0])
    text = json.dumps(schema)
    assert '"title"' not in text and '"$ref"' not in text and "$defs" not in text
    assert schema["properties"]["description"] == {"type": "string"}
    assert schema["required"] == ["verdicts", "description"] and schema["additionalProperties"] is False
    item = schema["properties"]["verdicts"]["items"]
    assert list(item["properties"]) == ["id", "reason", "label"]
    assert item["properties"]["label"]["enum"] == ["Supports", "Partly", "No support"]
    value = wire_schema(verdict_models(VALUE)[0])
    assert value["properties"]["value"] == {"maximum": 5, "minimum": 1, "type": "integer"}


def test_a_new_layout_is_a_new_key_for_judged_metrics_only() -> None:
    """The prompt layout is part of the key of every metric a model judges (judge and pipeline kinds, and what
    reads their verdicts), not of computed ones; layout 1's keys are the keys stores had before."""
    specs = resolve_specs(["answer_completeness", "faithfulness", "rouge_l"])
    old, new = spec_keys(specs, layout=1), spec_keys(specs)
    assert PROMPT_LAYOUT >= 2
    assert old["rouge_l"] == new["rouge_l"] == next(s.hash for s in specs if s.name == "rouge_l")
    assert all(old[s.name] != new[s.name] for s in specs if s.needs_model)
    assert old["chunk_evaluation"] == next(s.hash for s in specs if s.name == "chunk_evaluation")
