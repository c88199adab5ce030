"""greval.judge.prompt: the messages a judge sends (few-shot examples), checked against the verdict schema."""

from __future__ import annotations

import json

import pytest

from greval._sync import run_sync
from greval.errors import SpecError
from greval.spec import parse_spec
from greval.testing.openai_server import OpenAIServer
from tests.judge.conftest import VALUE_SPEC, judge


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

    with pytest.raises(SpecError, match=r"examples\[0\]\.output: value: Input should be less than or equal to 5"):
        judge(llm, bad)
