"""`greval spec new`: draft a spec with the judge model, re-asking until it validates, compiles and lints
clean of errors (the generator never writes a file that fails the linter), and render it as YAML."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import yaml
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, Field, create_model

from greval._sync import run_sync
from greval.errors import UserError
from greval.llm.retry import (
    CUT_OFF_HINT,
    CallFailed,
    ErrorKind,
    RetryPolicy,
    UnsupportedMethod,
    call_with_retries,
    finish_reason,
)
from greval.quality.lint import Finding, compile_check, lint_data, lint_text
from greval.spec import DEFAULT_SCHEMA_REF, ITEM_SOURCES, SCHEMA_HEADER, Spec, parse_spec

#: `spec new`'s token budget when --max-tokens is not given (a draft is ~500-1,200 tokens of JSON).
DRAFT_MAX_TOKENS = 2048


class DraftRequest(BaseModel):
    """What the user asked `greval spec new` for; the model fills in steps and descriptions."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    description: str = Field(min_length=1)
    kind: Literal["value", "categorical"] = "value"
    target: Literal["record", "chunks", "triples", "turns"] = "record"
    labels: list[str] = Field(default_factory=list)
    min: int = 1
    max: int = 5
    inputs: list[str] = Field(default_factory=list)

    def effective_inputs(self) -> list[str]:
        default = {
            "record": ["question", "answer"],
            "chunks": ["question", "chunks"],
            "triples": ["question", "triples"],
            "turns": [ITEM_SOURCES["turns"]],
        }
        names = list(self.inputs) or default[self.target]
        if self.target != "record" and ITEM_SOURCES[self.target] not in names:
            names.append(ITEM_SOURCES[self.target])
        return names


class _RangeDraft(BaseModel):
    min: int
    max: int
    description: str


class _LabelDraft(BaseModel):
    name: str
    description: str


def draft_model(req: DraftRequest) -> type[BaseModel]:
    """The structured answer asked of the model: steps, optional instructions, and the scale's descriptions.

    Given labels become one required property each, so a schema-valid answer describes every label.
    """
    fields: dict[str, Any] = {
        "steps": (
            list[str],
            Field(
                description="3 to 7 chain-of-thought evaluation steps, in order; "
                "the last says how to choose the verdict"
            ),
        ),
        "instructions": (
            str,
            Field(description="Extra guidance for the judge (pitfalls, what not to penalise); may be empty"),
        ),
    }
    if req.kind == "value":
        bounded = create_model(
            "RangeDraft",
            min=(int, Field(ge=req.min, le=req.max)),
            max=(int, Field(ge=req.min, le=req.max)),
            description=(str, Field(min_length=1, description="What a verdict in this range means")),
        )
        fields["ranges"] = (
            list[bounded],
            Field(
                description=f"Non-overlapping ranges covering every integer from {req.min} to {req.max}, low to high"
            ),
        )
    elif req.labels:
        label_fields: dict[str, Any] = {
            f"label_{i}": (str, Field(alias=name, min_length=1, description=f"What the label {name!r} means"))
            for i, name in enumerate(req.labels)
        }
        descriptions = create_model("LabelDescriptions", __config__=ConfigDict(populate_by_name=True), **label_fields)
        fields["labels"] = (descriptions, Field(description="A distinct description for every label"))
    else:
        fields["labels"] = (
            list[_LabelDraft],
            Field(description="2 to 6 labels with distinct names and descriptions, best first"),
        )
    model: type[BaseModel] = create_model("MetricDraft", **fields)
    return model


_TITLES = {
    "question": "the user's question",
    "expected_answer": "the expected (reference) answer",
    "answer": "the system's answer",
    "chunks": "the retrieved chunks, each with an id",
    "triples": "knowledge-graph triples (subject; predicate; object), each with an id",
    "source": "the source text",
    "conversation": "the conversation, turn by turn (user, assistant and tool turns), each turn with an id",
}


def draft_prompt(req: DraftRequest) -> list[BaseMessage]:
    """The messages asking for a draft: the metric's facts and what a good spec looks like."""
    inputs = "\n".join(f"- {n}: {_TITLES.get(n, n.replace('_', ' '))}" for n in req.effective_inputs())
    if req.kind == "value":
        scale = (
            f"An integer value from {req.min} to {req.max}. Describe ranges (e.g. '{req.min}', or "
            f"'{req.min}-{req.min + 1}') that together cover every integer exactly once, low to high."
        )
    elif req.labels:
        scale = "These labels, in this order: " + ", ".join(repr(x) for x in req.labels) + ". Describe each one."
    else:
        scale = "Categorical: propose 2 to 6 labels (short names), best first, each with a description."
    target = {
        "record": "one verdict per record",
        "chunks": "one verdict per retrieved chunk (all chunks of a record are judged in one call)",
        "triples": "one verdict per knowledge-graph triple (all triples of a record are judged in one call)",
        "turns": "one verdict per assistant turn of the conversation (all read and judged in one call)",
    }[req.target]
    system = (
        "You design evaluation rubrics for LLM judges of retrieval-augmented question answering. "
        "Write concrete, checkable evaluation steps a careful judge follows in order, and descriptions of the "
        "scale that are mutually exclusive and say observable things, not vague adjectives. Refer to the "
        "judge's inputs by their names, never to information the judge does not receive. The last step must "
        "say how to choose the verdict on the scale."
    )
    human = (
        f"Metric name: {req.name}\nWhat it measures: {req.description}\nVerdict: {target}\n"
        f"The judge sees these inputs:\n{inputs}\nScale: {scale}"
    )
    return [SystemMessage(system), HumanMessage(human)]


@dataclass
class DraftOutcome:
    """The drafted spec (plain data, valid), what had to be fixed, and how many requests it took."""

    data: dict[str, Any]
    requests: int
    notes: list[str] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)


_METHODS: tuple[Literal["json_schema", "function_calling", "json_mode"], ...] = (
    "json_schema",
    "function_calling",
    "json_mode",
)


async def _ask(
    model: BaseChatModel, schema_model: type[BaseModel], messages: list[BaseMessage], policy: RetryPolicy
) -> tuple[dict[str, Any] | None, str]:
    """One structured request; falls back through the structured-output methods the server refuses."""
    schema = schema_model.model_json_schema(by_alias=True)
    last = "no answer"
    for method in _METHODS:
        msgs = messages
        if method == "json_mode":
            msgs = [
                *messages,
                HumanMessage("Answer with one JSON object valid against this JSON schema:\n" + json.dumps(schema)),
            ]
        runnable = model.with_structured_output(schema, method=method, include_raw=True)

        async def send(r: Any = runnable, m: list[BaseMessage] = msgs) -> Any:
            return await r.ainvoke(m)

        try:
            out = await call_with_retries(send, policy, None)
        except UnsupportedMethod as exc:
            last = str(exc)[:200]
            continue
        except CallFailed as exc:
            if exc.kind in (ErrorKind.TRUNCATED, ErrorKind.CONTENT_FILTER):  # about this answer: ask again
                return None, str(exc)
            raise
        parsed = out.get("parsed") if isinstance(out, dict) else None
        if isinstance(parsed, dict):
            return parsed, ""
        if finish_reason(out.get("raw") if isinstance(out, dict) else None) == "length":
            return None, f"{ErrorKind.TRUNCATED}: the answer was cut off at the token limit (finish_reason=length)"
        err = out.get("parsing_error") if isinstance(out, dict) else None
        return None, f"the answer was not valid JSON for the schema ({str(err)[:200]})"
    return None, f"the server refused every structured-output method ({last})"


def _clean(text: Any) -> str:
    return " ".join(str(text).split()) if text is not None else ""


def _assemble(req: DraftRequest, draft: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """Turn a draft answer into spec data; returns the data and problems that need the model again."""
    problems: list[str] = []
    steps = []
    for s in draft.get("steps") or []:
        c = _clean(s)
        if c and c not in steps:
            steps.append(c)
    if not steps:
        problems.append("no evaluation steps")
    data: dict[str, Any] = {"name": req.name, "description": req.description.strip()}
    instructions = _clean(draft.get("instructions"))
    if instructions:
        data["instructions"] = instructions
    data["steps"] = steps[:10]
    data["inputs"] = {n: {"required": True} for n in req.effective_inputs()}
    if req.kind == "value":
        ranges = []
        for r in draft.get("ranges") or []:
            if isinstance(r, Mapping) and isinstance(r.get("min"), int) and isinstance(r.get("max"), int):
                ranges.append({"min": r["min"], "max": r["max"], "description": _clean(r.get("description"))})
            else:
                problems.append(f"unreadable range {r!r}")
        data["scale"] = {"kind": "value", "min": req.min, "max": req.max, "ranges": ranges}
    else:
        raw = draft.get("labels")
        labels: list[dict[str, Any]] = []
        if req.labels:
            given = raw if isinstance(raw, Mapping) else {}
            for i, name in enumerate(req.labels):
                desc = _clean(given.get(name, given.get(f"label_{i}", "")))
                labels.append({"name": name, "description": desc})
        else:
            for lab in raw if isinstance(raw, list) else []:
                if isinstance(lab, Mapping) and _clean(lab.get("name")):
                    labels.append({"name": _clean(lab.get("name")), "description": _clean(lab.get("description"))})
            if len(labels) < 2:
                problems.append("fewer than 2 labels")
        data["scale"] = {"kind": "categorical", "labels": labels}
    if req.target != "record":
        data["target"] = {"each": req.target}
    return data, problems


def repair_ranges(ranges: Sequence[Mapping[str, Any]], lo: int, hi: int) -> list[dict[str, Any]]:
    """Make described ranges tile lo..hi exactly: clip to the scale, cut overlaps, stretch over gaps.

    The descriptions are kept; only boundaries move (the CLI says so, and the user reviews them).
    """
    usable: list[dict[str, Any]] = []
    for r in ranges:
        desc = _clean(r.get("description"))
        a, b = int(r["min"]), int(r["max"])
        a, b = min(a, b), max(a, b)
        a, b = max(a, lo), min(b, hi)
        if desc and a <= b:
            usable.append({"min": a, "max": b, "description": desc})
    usable.sort(key=lambda r: (r["min"], r["max"]))
    out: list[dict[str, Any]] = []
    for r in usable:
        if out and r["min"] <= out[-1]["max"]:
            r = {**r, "min": out[-1]["max"] + 1}
            if r["min"] > r["max"]:
                continue
        if out and r["min"] > out[-1]["max"] + 1:
            out[-1]["max"] = r["min"] - 1  # stretch the previous range over the gap
        out.append(dict(r))
    if not out:
        return []
    out[0]["min"] = lo
    out[-1]["max"] = hi
    return out


async def adraft_spec(
    req: DraftRequest, model: BaseChatModel, *, attempts: int = 3, policy: RetryPolicy | None = None
) -> DraftOutcome:
    """Ask the model for a draft, re-ask with the problems found (schema + lint errors), repair what can be
    repaired mechanically (range boundaries), and return a spec that validates, compiles and lints clean of
    errors, or raise UserError: an unusable draft is never returned."""
    policy = policy or RetryPolicy(max_attempts=4)
    schema_model = draft_model(req)
    base = draft_prompt(req)
    feedback = ""
    notes: list[str] = []
    data: dict[str, Any] | None = None
    requests = 0
    for attempt in range(attempts):
        msgs = list(base)
        if feedback:
            msgs.append(HumanMessage(feedback))
        answer, err = await _ask(model, schema_model, msgs, policy)
        requests += 1
        if answer is None:
            feedback = f"Your previous answer was unusable: {err}. Answer again, following the schema exactly."
            notes.append(f"draft {attempt + 1}: {err}")
            continue
        data, problems = _assemble(req, answer)
        errors = [f.message for f in lint_data(data, req.name) if f.severity == "error"]
        problems += errors
        if not problems:
            return DraftOutcome(data, requests, notes, lint_data(data, req.name))
        notes.append(f"draft {attempt + 1}: " + "; ".join(problems[:4]))
        feedback = (
            "Your previous draft had these problems:\n- "
            + "\n- ".join(problems[:8])
            + "\nPrevious draft:\n"
            + json.dumps(answer, ensure_ascii=False)[:4000]
            + "\nAnswer again with a corrected, complete draft."
        )
    if data is not None and data.get("steps") and isinstance(data.get("scale"), dict):
        scale = data["scale"]
        if scale.get("kind") == "value":
            fixed = repair_ranges(scale.get("ranges") or [], req.min, req.max)
            if fixed:
                scale["ranges"] = fixed
                notes.append("repaired the range boundaries so they cover the scale exactly once; check them")
        findings = lint_data(data, req.name)
        if not any(f.severity == "error" for f in findings):
            return DraftOutcome(data, requests, notes, findings)
    last = notes[-1] if notes else "no usable answer"
    hint = f"; {CUT_OFF_HINT}" if ErrorKind.TRUNCATED.value in last and CUT_OFF_HINT not in last else ""
    raise UserError(
        f"the judge model did not produce a usable draft in {attempts} tries ({last}); nothing written{hint}"
    )


def draft_spec(req: DraftRequest, model: BaseChatModel, **kw: Any) -> DraftOutcome:
    """Synchronous :func:`adraft_spec`."""
    return run_sync(adraft_spec(req, model, **kw))


class _Dumper(yaml.SafeDumper):
    """Readable YAML: long strings folded, no aliases."""

    def ignore_aliases(self, data: Any) -> bool:
        return True


def _str_repr(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    if len(value) > 90 and "\n" not in value:
        return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=">")
    return dumper.represent_scalar("tag:yaml.org,2002:str", value)


_Dumper.add_representer(str, _str_repr)


def render_spec_yaml(data: Mapping[str, Any], schema_ref: str = DEFAULT_SCHEMA_REF, note: str = "") -> str:
    """Spec data as YAML in the shorthand people write (ranges and labels as mappings), with the schema header."""
    body: dict[str, Any] = dict(data)
    scale = dict(body["scale"])
    if scale["kind"] == "value":
        scale["ranges"] = {
            (str(r["min"]) if r["min"] == r["max"] else f"{r['min']}-{r['max']}"): r["description"]
            for r in scale["ranges"]
        }
    else:
        labs = scale["labels"]
        if all(lab.get("score") is None for lab in labs):
            scale["labels"] = {lab["name"]: lab["description"] for lab in labs}
    body["scale"] = scale
    inputs = body.get("inputs")
    if isinstance(inputs, dict) and all(v == {"required": True} for v in inputs.values()):
        body["inputs"] = list(inputs)
    text = yaml.dump(body, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=100)
    head = SCHEMA_HEADER.format(ref=schema_ref) + "\n"
    if note:
        head += "".join(f"# {line}\n" for line in note.splitlines())
    return head + text


def check_written(text: str, source: str) -> Spec:
    """The written file must load, compile and lint clean of errors (the promise of `spec new`)."""
    data = yaml.safe_load(text)
    spec = parse_spec(data, source)
    if not isinstance(spec, Spec):  # pragma: no cover - spec new writes judge specs only
        raise UserError(f"{source}: not a judge spec")
    compile_check(spec)
    errors = [f for f in lint_text(text, source) if f.severity == "error"]
    if errors:
        raise UserError(errors[0].line())
    return spec
