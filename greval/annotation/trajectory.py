"""A trajectory as a reviewer reads it in Argilla: its steps numbered, each tool call as code (the tool's name
and its arguments as indented JSON), each tool result folded (``<details>``: open it when it matters), the step
under review marked. Argilla renders a markdown field through marked and DOMPurify, which keeps ``<details>``;
text from the record that goes inside HTML is escaped, so a tool's output cannot inject markup."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Mapping, Sequence
from typing import Any

#: How a step's kind is named to a reviewer.
KIND_TITLES = {
    "user": "user",
    "system": "system",
    "assistant": "agent message",
    "tool_call": "tool call",
    "tool_result": "tool result",
    "final_answer": "final answer",
}
UNDER_REVIEW_MARK = "◀ under review"
_TICKS = re.compile(r"`+")


def _fence(text: str, lang: str = "") -> str:
    """``text`` as a fenced code block whose fence is longer than any run of backticks inside it."""
    longest = max((len(m) for m in _TICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{lang}\n{text}\n{fence}"


def _code(text: str) -> str:
    """Inline code that survives backticks in ``text``."""
    longest = max((len(m) for m in _TICKS.findall(text)), default=0)
    ticks = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}"


def arguments_block(step: Mapping[str, Any]) -> str:
    """A tool call's arguments as a code block: indented JSON, or the text as given when it is not JSON."""
    args = step.get("arguments")
    if step.get("arguments_error") or isinstance(args, str):
        block = _fence(str(args if args is not None else ""))
        return block + f"\n\n*arguments {step.get('arguments_error') or 'given as text'}*"
    return _fence(json.dumps(args if args is not None else {}, indent=2, ensure_ascii=False, default=str), "json")


def step_head(step: Mapping[str, Any], number: int, *, marked: bool = False) -> str:
    """``**Step 3** · tool call `get_weather` · id `s3` · call `c1```: the step's number, kind, tool and ids."""
    kind = str(step.get("kind", ""))
    parts = [f"**Step {number}**", KIND_TITLES.get(kind, kind.replace("_", " "))]
    if kind == "tool_call" and step.get("name"):
        parts[-1] += " " + _code(str(step["name"]))
    parts.append("id " + _code(str(step.get("id", ""))))
    if step.get("call_id"):
        parts.append("call " + _code(str(step["call_id"])))
    head = " · ".join(parts)
    return f"{head} **{UNDER_REVIEW_MARK}**" if marked else head


def _result_summary(step: Mapping[str, Any], number: int) -> str:
    said = ", ".join(str(step[k]) for k in ("name", "call_id") if step.get(k))
    text = f"Step {number} · tool result" + (f" ({said})" if said else "") + f" · id {step.get('id', '')}"
    return html.escape(text)


def step_markdown(step: Mapping[str, Any], number: int, *, marked: bool = False) -> str:
    """One step: a tool call with its arguments as code, a tool result folded, a message as its text."""
    kind = step.get("kind")
    content = step.get("content")
    text = content if isinstance(content, str) else "" if content is None else json.dumps(content, default=str)
    if kind == "tool_call":
        return step_head(step, number, marked=marked) + "\n\n" + arguments_block(step)
    if kind == "tool_result":
        body = f"<pre>{html.escape(text)}</pre>" if text else "<p><em>(empty)</em></p>"
        return f"<details><summary>{_result_summary(step, number)}</summary>\n\n{body}\n\n</details>"
    return step_head(step, number, marked=marked) + ("\n\n" + text if text.strip() else "")


def trajectory_markdown(steps: Sequence[Mapping[str, Any]], under_review: str | None = None) -> str:
    """Every step in order, numbered from 1, separated by rules; the step whose id is ``under_review`` marked."""
    return "\n\n---\n\n".join(
        step_markdown(s, n, marked=under_review is not None and str(s.get("id")) == under_review)
        for n, s in enumerate(steps, start=1)
    )
