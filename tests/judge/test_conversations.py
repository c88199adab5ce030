"""Conversations (a conversation input, target {each: turns}): shown turn by turn, each assistant turn judged
once and stored per turn, the shipped conversation specs end to end.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval._sync import run_sync
from greval.cli import main
from greval.dataset.records import Record
from greval.errors import UserError
from greval.judge.prompt import render_inputs
from greval.runner.driver import run
from greval.spec.verdict import verdict_models
from greval.store.results import figures, item_rows, metric_notes, record_rows
from greval.store.store import Store
from greval.testing.openai_server import OpenAIServer
from tests.judge.conftest import RUN, cfg, judge, judge_spec

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
