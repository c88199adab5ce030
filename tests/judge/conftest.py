"""What the judge stage's tests share: the retry policy, judge and pipeline specs, records, and the chat model
and scripted answers of the local OpenAI-compatible test server (greval.testing.openai_server).
"""

from __future__ import annotations

from typing import Any

from langchain_openai import ChatOpenAI

from greval.dataset.records import Record
from greval.judge.judge import Judge
from greval.llm.config import JudgeConfig
from greval.llm.retry import RetryPolicy
from greval.runner.options import RunOptions
from greval.spec import BaseSpec, Spec, parse_spec, resolve_specs
from greval.testing.openai_server import OpenAIServer

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

FAST = RetryPolicy(max_attempts=4, base_delay=0.01, max_delay=0.2)


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


def judge_spec(name: str) -> Spec:
    spec = spec_named(name)
    assert isinstance(spec, Spec)
    return spec


def cfg(srv: OpenAIServer) -> JudgeConfig:
    return JudgeConfig.parse("openai:judge-test", base_url=srv.base_url, timeout=10)


RUN = RunOptions(concurrency=4, retry=FAST)


def spec_named(name: str) -> BaseSpec:
    [spec] = resolve_specs([name], with_dependencies=False)
    return spec
