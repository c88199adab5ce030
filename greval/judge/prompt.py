"""The judge's prompt, built from a spec: instructions, the scale in words, the record under headings.

Text only, apart from the few-shot messages: ``greval spec show`` and the Argilla guidelines read the same
words the judge model reads (:func:`describe_scale`, :func:`system_prompt`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from greval.dataset.records import (
    CONVERSATION,
    TRAJECTORY,
    item_list,
    normalise_chunks,
    normalise_conversation,
    normalise_trajectory,
    normalise_triples,
)
from greval.llm.openai_chat import Message
from greval.spec import CategoricalScale, Spec, ValueScale
from greval.types import JudgeResult, Method, not_applicable

PREAMBLE = "You are a careful, impartial evaluator of a retrieval-augmented question-answering system."

_TITLES = {
    "question": "Question",
    "expected_answer": "Expected answer",
    "answer": "Answer",
    "chunks": "Retrieved chunks",
    "triples": "Knowledge-graph triples",
    "source": "Source text",
    "conversation": "Conversation",
}

#: What the judge is asked to judge one by one, in words.
NOUNS = {
    "chunks": "retrieved chunk", "triples": "knowledge-graph triple", "turns": "assistant turn", "steps": "agent step",
}  # fmt: skip


def title(name: str) -> str:
    """The heading of a record field in the prompt (``expected_answer`` → ``Expected answer``)."""
    return _TITLES.get(name, name.replace("_", " ").capitalize())


def describe_scale(spec: Spec) -> str:
    """The scale in words, every range or label with its description (shared with Argilla guidelines)."""
    if isinstance(spec.scale, ValueScale):
        s = spec.scale
        lines = [f"Give an integer value from {s.min} to {s.max}:"]
        lines += [f"- {r.text}: {r.description}" for r in s.ranges]
    else:
        lines = ["Labels, best to worst:" if spec.scale.ordered else "Labels:"]
        lines += [f'- "{lab.name}": {lab.description}' for lab in spec.scale.labels]
    return "\n".join(lines)


def schema_note(method: Method, schema: Mapping[str, Any]) -> list[str]:
    """JSON mode has no schema on the wire: the prompt carries it (nothing for the other methods)."""
    if method != "json_mode":
        return []
    return [
        "Answer with one JSON object and nothing else, valid against this JSON schema:\n```json\n"
        + json.dumps(schema, ensure_ascii=False, separators=(",", ":"))
        + "\n```"
    ]


_DATA_KEYWORDS = frozenset({"enum", "const", "default", "examples", "required"})


def wire_schema(model: type[BaseModel]) -> dict[str, Any]:
    """The answer's JSON schema as it goes to the provider: references inlined, no ``title`` or
    ``description``. The system prompt already says what each field holds (the reason first, the scale with
    every label's description, each output's description), and a provider reads the schema into the prompt
    too, so saying it twice would cost tokens on every call. Validation still uses ``model`` itself."""
    full = model.model_json_schema()
    defs: dict[str, Any] = full.get("$defs", {})

    def walk(node: Any, names: bool = False) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        if names:  # a ``properties`` map: its keys are field names, each value a schema
            return {k: walk(v) for k, v in node.items()}
        if "$ref" in node:
            target = defs[str(node["$ref"]).rsplit("/", 1)[-1]]
            node = {**target, **{k: v for k, v in node.items() if k != "$ref"}}
        return {
            k: v if k in _DATA_KEYWORDS else walk(v, k == "properties")
            for k, v in node.items()
            if k not in ("title", "description", "$defs")
        }

    out: dict[str, Any] = walk(full)
    return out


def capped_reasons(schema: dict[str, Any], chars: int) -> dict[str, Any]:
    """``schema`` (a :func:`wire_schema`) with ``maxLength: chars`` on every string field named ``reason``: a
    grammar-constrained engine (llama.cpp) then closes a reason that loops and the answer completes, where the
    token cap would cut it off and the call be paid again. Sent to the embedded judge only: OpenAI's strict
    structured outputs refuse ``maxLength``."""

    def walk(node: Any, names: bool = False) -> Any:
        if isinstance(node, list):
            return [walk(n) for n in node]
        if not isinstance(node, dict):
            return node
        if names:
            return {
                k: {**v, "maxLength": chars} if k == "reason" and v.get("type") == "string" else walk(v)
                for k, v in node.items()
            }
        return {k: v if k in _DATA_KEYWORDS else walk(v, k == "properties") for k, v in node.items()}

    out: dict[str, Any] = walk(schema)
    return out


def steps_text(steps: Sequence[str]) -> str:
    """The evaluation steps, numbered, in the spec's words."""
    return "Steps:\n" + "\n".join(f"{i}. {s.strip()}" for i, s in enumerate(steps, 1))


def each_answer(noun: str, word: str, *, steps: bool = True) -> str:
    """What a per-item judge returns: one verdict per listed id, the reason before the verdict."""
    reasoning = "your reasoning by the steps, first" if steps else "your reasoning, first"
    return (
        f"Judge each {noun} separately: in `verdicts`, one entry per id under 'Item ids' (each once, no "
        f"others) with `id`, `reason` ({reasoning}), `{word}`."
    )


def system_prompt(spec: Spec, method: Method, schema: Mapping[str, Any]) -> str:
    """The judge's instructions, the same bytes for every record of a spec (a provider's prefix cache can hold
    them): the spec's description, instructions, steps and scale in its own words, then the answer's shape.
    JSON mode also gets the answer's JSON schema. The layout is versioned by ``greval.types.PROMPT_LAYOUT``."""
    parts = [PREAMBLE, f"Metric: {spec.name}\n{spec.description.strip()}"]
    if spec.instructions:
        parts.append(f"Instructions: {spec.instructions.strip()}")
    parts += [steps_text(spec.steps), describe_scale(spec)]
    word = "label" if isinstance(spec.scale, CategoricalScale) else "value"
    if spec.each:
        out = each_answer(NOUNS[spec.each], word)
        if spec.each == "turns":
            out += " Read the whole conversation for context; judge only the assistant turns whose ids are listed."
        elif spec.each == "steps":
            out += (
                " Read the whole trajectory for context (the user's messages, the tool results); judge only the "
                "agent's steps whose ids are listed."
            )
    else:
        out = f"Answer with `reason` (your reasoning by the steps, first), then `{word}`."
    for name, o in spec.outputs.items():
        out += f"\nAlso fill `{name}` ({o.type}): {o.description}"
    parts.append(out)
    return "\n\n".join(parts + schema_note(method, schema))


def as_text(value: Any) -> str:
    """A field's value as prompt text: strings as they are, anything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)


def render_item(field: str, item: Mapping[str, Any]) -> str:
    """One chunk or triple with its id, as the judge cites it back."""
    if field == "triples":
        return f"[{item['id']}] ({item['subject']}; {item['predicate']}; {item['object']})"
    return f"[{item['id']}] {item.get('text', '')}"


def absent_dependency(name: str, res: JudgeResult) -> str:
    """A dependency that does not apply to the record (an input it requires is absent), said where its
    verdicts would be: instructions that mention it are not left hanging, and the judge knows why."""
    return f"## Verdicts of the metric '{name}'\nNone: it does not apply to this record ({res.error})."


def tool_call_text(call: Mapping[str, Any]) -> str:
    """One tool call, compactly: ``name({"arg": 1})`` (its id in brackets when it has one)."""
    args = call.get("arguments")
    shown = args if isinstance(args, str) else json.dumps(args, ensure_ascii=False, separators=(",", ":"), default=str)
    return f"{call.get('name', '')}({shown})" + (f" [{call['id']}]" if call.get("id") else "")


def render_turn(turn: Mapping[str, Any], number: int) -> str:
    """One conversation turn with its id, as the judge cites it back, and its turn number when the id does not
    say it (``[t2] assistant: …``, ``[msg-7] turn 2, assistant: …``); tool calls and tool results compactly."""
    tid, role = str(turn.get("id", "")), str(turn.get("role", ""))
    head = f"[{tid}] {role}" if tid == f"t{number}" else f"[{tid}] turn {number}, {role}"
    if role == "tool" and (turn.get("name") or turn.get("tool_call_id")):
        head += " (" + ", ".join(str(turn[k]) for k in ("name", "tool_call_id") if turn.get(k)) + ")"
    lines = [f"{head}: {turn.get('content', '')}".rstrip()]
    lines += [f"→ tool call {tool_call_text(c)}" for c in turn.get("tool_calls") or []]
    return "\n".join(lines)


def render_conversation(turns: Sequence[Mapping[str, Any]]) -> str:
    """Every turn of a conversation, in order, with its id and turn number."""
    return "\n\n".join(render_turn(t, n) for n, t in enumerate(turns, start=1))


def render_step(step: Mapping[str, Any], number: int) -> str:
    """One trajectory step with its id, as the judge cites it back, and its step number when the id does not say
    it (``[s2] tool call search({"q": "x"}) [call_1]``, ``[a-7] step 2, final answer: …``)."""
    sid, kind = str(step.get("id", "")), str(step.get("kind", ""))
    head = f"[{sid}]" if sid == f"s{number}" else f"[{sid}] step {number},"
    if kind == "tool_call":
        call = {"name": step.get("name"), "arguments": step.get("arguments"), "id": step.get("call_id")}
        line = f"{head} tool call {tool_call_text(call)}"
        return line + (f" (arguments {step['arguments_error']})" if step.get("arguments_error") else "")
    if kind == "tool_result":
        said = ", ".join(str(step[k]) for k in ("name", "call_id") if step.get(k))
        return f"{head} tool result" + (f" ({said})" if said else "") + f": {step.get('content', '')}".rstrip()
    return f"{head} {kind.replace('_', ' ')}: {step.get('content', '')}".rstrip()


def render_trajectory(steps: Sequence[Mapping[str, Any]]) -> str:
    """Every step of a trajectory, in order, with its id and step number."""
    return "\n".join(render_step(s, n) for n, s in enumerate(steps, start=1))


def render_inputs(
    spec: Spec,
    data: Mapping[str, Any],
    deps: Mapping[str, JudgeResult] | None = None,
    item_ids: Sequence[str] | None = None,
) -> str:
    """The record as the judge sees it: declared inputs under headings, items with their ids."""
    parts: list[str] = []
    for name, inp in spec.inputs.items():
        value = data.get(name)
        if value is None or value == [] or value == "":
            continue
        head = f"## {title(name)}" + (f" ({inp.description})" if inp.description else "")
        if name in ("chunks", "triples") and isinstance(value, list):
            items = value
            if name == spec.each and item_ids is not None:
                wanted = set(item_ids)
                items = [it for it in value if it["id"] in wanted]
            sep = "\n\n" if name == "chunks" else "\n"
            parts.append(head + "\n" + sep.join(render_item(name, it) for it in items))
        elif name == CONVERSATION and isinstance(value, list):  # every turn, whichever are judged
            parts.append(head + "\n" + render_conversation(value))
        elif name == TRAJECTORY and isinstance(value, list):  # every step, whichever are judged
            parts.append(head + "\n" + render_trajectory(value))
        else:
            parts.append(head + "\n" + as_text(value))
    for dep_name, res in (deps or {}).items():
        if not_applicable(res):
            parts.append(absent_dependency(dep_name, res))
            continue
        lines = [f"## Verdicts of the metric '{dep_name}'"]
        for v in res.verdicts:
            if v.status != "ok":
                continue
            verdict = v.label if v.label is not None else v.value
            who = f"[{v.item_id}] " if v.item_id else ""
            lines.append(f"- {who}{verdict}: {v.reason or ''}".rstrip())
        for key, val in res.outputs.items():
            lines.append(f"- {key}: {as_text(val)}")
        parts.append("\n".join(lines))
    if spec.each is not None and item_ids is not None:
        parts.append("Item ids: " + ", ".join(item_ids))
    return "\n\n".join(parts)


def example_inputs(inputs: Mapping[str, Any]) -> dict[str, Any]:
    """A few-shot example's inputs normalised as a record's are (chunk ids c1, c2 …, triple ids t1 …, turn ids
    t1, t2 …), so the example reads like the records the judge sees (a spec file's loader has checked them; a
    spec built in Python may give chunks as plain strings, as a record may)."""
    out = dict(inputs)
    if isinstance(out.get("chunks"), list):
        out["chunks"] = normalise_chunks(out["chunks"], "example")
    if isinstance(out.get("triples"), list):
        out["triples"] = normalise_triples(out["triples"], "example")
    if isinstance(out.get(CONVERSATION), list):
        out[CONVERSATION] = normalise_conversation(out[CONVERSATION], "example")
    if isinstance(out.get(TRAJECTORY), list):
        out[TRAJECTORY] = normalise_trajectory(out[TRAJECTORY], "example")
    return out


def _example_ids(spec: Spec, inputs: Mapping[str, Any], output: Mapping[str, Any]) -> list[str] | None:
    """The item ids a per-item example asks about: the items its answer judges (an example drawn from a
    labelled step answers that step alone), all of them when it names none."""
    if not spec.each:
        return None
    ids = [str(it["id"]) for it in item_list(inputs, spec.each)]
    verdicts = output.get("verdicts")
    answered = (
        {str(v["id"]) for v in verdicts if isinstance(v, Mapping) and "id" in v}
        if isinstance(verdicts, list)
        else set()
    )
    return [i for i in ids if i in answered] or ids


def example_messages(spec: Spec) -> list[Message]:
    """The spec's few-shot examples as a user turn (the inputs) and an assistant turn (the answer)."""
    msgs: list[Message] = []
    for ex in spec.examples:
        inputs = example_inputs(ex.inputs)
        ids = _example_ids(spec, inputs, ex.output)
        msgs.append({"role": "user", "content": render_inputs(spec, inputs, None, ids)})
        msgs.append({"role": "assistant", "content": json.dumps(ex.output, ensure_ascii=False)})
    return msgs
