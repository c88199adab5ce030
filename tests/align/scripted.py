"""A store and a scripted judge for end-to-end ``greval align`` tests on the local OpenAI-compatible test server.

Records ``Q0``..``Qn`` each have a true label (the people's). The judge's rules (greval.testing.openai_server):
the optimizer's rewrite question is answered with a step naming ``RULE-ZETA``; a prompt whose steps name it is
answered right; any other prompt is answered right with probability ``noise`` (drawn per prompt, so every
spec version gets its own draws) and wrong otherwise. ``rule=False`` leaves the optimizer without the rule:
no candidate can then truly help (the null case).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import Spec, parse_spec
from greval.store.store import Store

LABELS = ("yes", "no")
RULE = "RULE-ZETA"


def spec() -> Spec:
    s = parse_spec(
        {
            "name": "supported",
            "description": "Whether the answer is supported by the question's own facts.",
            "steps": ["Read the question.", "Read the answer.", "Decide whether the answer is supported."],
            "inputs": ["question", "answer"],
            "scale": {"kind": "categorical", "labels": {"yes": "The answer is supported.", "no": "It is not."}},
        }
    )
    assert isinstance(s, Spec)
    return s


def truth(i: int) -> str:
    return LABELS[(i * 7 + i // 3) % 2]


def records(n: int) -> list[Record]:
    return [
        Record.from_mapping({"id": f"r{i}", "question": f"Question Q{i}: is it so?", "answer": f"Answer number {i}."})
        for i in range(n)
    ]


def _answer(label: str, reason: str = "scripted") -> dict[str, Any]:
    return {"type": "respond", "text": json.dumps({"reason": reason, "label": label})}


def rules(n: int, *, rule: bool = True, noise: float = 0.5) -> list[dict[str, Any]]:
    """The scripted judge (see the module doc); first match wins."""
    edit = {
        "reason": "The judge misses when the answer restates the question.",
        "label": "edit" if rule else "keep",
        "description": "",
        "instructions": "",
        "steps": ["Read the question.", f"Apply {RULE}: compare the answer with the question.", "Decide."]
        if rule
        else [],
        "scale_descriptions": [],
    }
    reason = {"reason": "r", "label": "clear", "explanation": "People read the answer as supported by the question."}
    out: list[dict[str, Any]] = [
        {"match": "Metric: greval_align_rewrite", "action": {"type": "respond", "text": json.dumps(edit)}},
        {"match": "Metric: greval_align_reason", "action": {"type": "respond", "text": json.dumps(reason)}},
    ]
    for i in range(n):
        last = rf"\bQ{i}\b(?!.*\"label\")"  # Qi in the last message: the record judged, not an example
        right, wrong = truth(i), LABELS[1 - LABELS.index(truth(i))]
        out.append({"match": rf"(?s){RULE}.*{last}", "regex": True, "action": _answer(right, "rule")})
        out.append({"match": rf"(?s){last}", "regex": True, "probability": noise, "action": _answer(right)})
        out.append({"match": rf"(?s){last}", "regex": True, "action": _answer(wrong)})
    return out


def judge(base_url: str) -> JudgeConfig:
    return JudgeConfig.parse("openai:scripted-judge", base_url=base_url)


def labelled_store(path: Path, base_url: str, n: int, *, annotators: int = 1) -> None:
    """Judge every record with the current spec, then store people's (true) labels on all of them."""
    recs = records(n)
    with Store(path) as st:
        run([spec()], recs, st, judge(base_url), options=RunOptions())
        st.put_human_labels(
            [
                {
                    "spec_name": "supported",
                    "record_id": r.id,
                    "record_hash": r.hash,
                    "item_id": "",
                    "annotator": f"person{a}",
                    "label": truth(i),
                    "status": "submitted",
                }
                for i, r in enumerate(recs)
                for a in range(annotators)
            ]
        )
