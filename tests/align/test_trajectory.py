"""``greval align`` on a judged trajectory spec (issue 45): ``step_usefulness``, one verdict per agent step,
aligned from people's step labels with few-shot examples drawn from labelled steps — each example the whole
trajectory with the people's verdict on that one step, its prompt asking about that step alone. The judge is the
local OpenAI-compatible test server over HTTP, scripted: right on every step when its prompt holds a few-shot
example, "Useful" on every step otherwise."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

from greval.align.entry import Target, align, plan
from greval.align.models import AlignOptions
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.runner.driver import run
from greval.runner.options import RunOptions
from greval.spec import resolve_specs
from greval.store.store import Store

N = 40
LABELS = ("Useful", "Redundant", "Harmful")
STEPS = ("s2", "s4")  # the agent's: its tool call and its final answer


def trajectory(i: int) -> list[dict[str, Any]]:
    call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": f'{{"city": "C{i}"}}'}}
    return [
        {"role": "user", "content": f"Trip T{i}: what is the weather in C{i}?"},
        {"role": "assistant", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c1", "content": f"C{i}: {i} C"},
        {"role": "assistant", "content": f"It is {i} C in C{i}."},
    ]


def truth(i: int, step: str) -> str:
    return LABELS[(i * 7 + i // 3 + STEPS.index(step)) % 3]


def _verdicts(labels: dict[str, str]) -> dict[str, Any]:
    text = json.dumps({"verdicts": [{"id": s, "reason": "scripted", "label": lab} for s, lab in labels.items()]})
    return {"type": "respond", "text": text}


def rules() -> list[dict[str, Any]]:
    """The scripted judge; first match wins. ``T{i}`` in the last message (no ``"label"`` after it): the
    trajectory judged, not an example's."""
    reason = {"reason": "r", "label": "clear", "explanation": "People judged this step so."}
    out: list[dict[str, Any]] = [
        {"match": "Metric: greval_align_reason", "action": {"type": "respond", "text": json.dumps(reason)}},
    ]
    for i in range(N):
        last = rf"\bT{i}\b(?!.*\"label\")"
        right = {s: truth(i, s) for s in STEPS}
        out.append({"match": rf'(?s)"verdicts".*{last}', "regex": True, "action": _verdicts(right)})
        out.append({"match": rf"(?s){last}", "regex": True, "action": _verdicts(dict.fromkeys(STEPS, "Useful"))})
    return out


def labelled_store(path: Path, base_url: str) -> list[Record]:
    """Every trajectory judged by the current ``step_usefulness``, then people's labels on each agent step."""
    recs = [Record.from_mapping({"id": f"t{i}", "trajectory": trajectory(i)}) for i in range(N)]
    with Store(path) as st:
        run(resolve_specs(["step_usefulness"]), recs, st, JudgeConfig.parse("openai:judge-test", base_url=base_url),
            options=RunOptions())  # fmt: skip
        st.put_human_labels([
            {"spec_name": "step_usefulness", "record_id": r.id, "record_hash": r.hash, "item_id": s,
             "annotator": "person", "label": truth(i, s), "status": "submitted"}
            for i, r in enumerate(recs) for s in STEPS
        ])  # fmt: skip
    return recs


def test_align_draws_few_shot_examples_from_labelled_steps_and_adopts_them(llm: Any, tmp_path: Path) -> None:
    """Few-shot is proposed for the per-step spec; each example is a labelled step of a search record, its
    answer that step's people's label alone; the judge sees it so and the example version wins on the test part
    (κ 1 against the current spec's 0)."""
    llm.script(rules())
    store = tmp_path / "s.sqlite"
    recs = labelled_store(store, llm.base_url)
    opts = AlignOptions(folds=3, rounds=1, rewrites=0, shots=(1,), label_order=False)
    judge = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url)
    with Store(store) as st:
        planned = plan(st, Target("step_usefulness"), judge, options=opts)
    result = align(store, "step_usefulness", judge, options=opts, notify=lambda *a, **k: None)
    # the dry run's estimate counts the few-shot candidates' examples too: within 2x of what was spent
    calls, tokens = planned.estimate.calls / result.spent.calls, planned.estimate.tokens / result.spent.tokens
    assert 0.5 <= calls <= 2 and 0.5 <= tokens <= 2, (calls, tokens, planned.estimate, result.spent)

    assert result.adopted, result.decision.message
    d = result.decision.difference
    assert d is not None and (d.old, d.new) == (0.0, 1.0)
    assert d.n_units == 2 * d.n_records  # every step of a test trajectory is a unit
    new = result.new_spec
    assert new is not None and len(new.examples) == len(LABELS)  # one per label
    by_traj = {json.dumps(r.data["trajectory"], sort_keys=True): i for i, r in enumerate(recs)}
    shown = set()
    for ex in new.examples:
        (verdict,) = ex.output["verdicts"]  # the people's verdict on one step
        i = by_traj[json.dumps(ex.inputs["trajectory"], sort_keys=True)]
        assert verdict["label"] == truth(i, verdict["id"]) and verdict["reason"] == "People judged this step so."
        shown.add(verdict["label"])
    assert shown == set(LABELS)
    # the judge read each example asking about its step alone, then the trajectory judged with all its steps
    asked = [r["messages"] for r in llm.requests() if any('"verdicts"' in str(m["content"]) for m in r["messages"])]
    assert asked
    ids = [re.findall(r"Item ids: (.*)", str(m["content"])) for m in asked[-1] if m["role"] == "user"]
    assert ids[:-1] == [[ex.output["verdicts"][0]["id"]] for ex in new.examples] and ids[-1] == ["s2, s4"]
