"""Metric authoring: draft a spec with the judge model (`greval spec new`), lint specs for what makes judges
unreliable (`greval spec lint`), and try a draft on a few human-labelled records (`greval spec try`).

A judge is only as good as its spec: overlapping or gappy ranges, labels nobody described, steps that read
fields the judge never sees, or steps that never connect to the scale all make verdicts noisy. The linter
catches these before any money is spent; the generator never writes a file that fails them.
"""

from __future__ import annotations

import contextlib
import json
import math
import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import yaml
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import BaseMessage, HumanMessage, SystemMessage
from pydantic import BaseModel, ConfigDict, Field, create_model

from greval._sync import run_sync
from greval.errors import SpecError, UserError
from greval.llm.retry import (
    CUT_OFF_HINT,
    CallFailed,
    ErrorKind,
    RetryPolicy,
    UnsupportedMethod,
    call_with_retries,
    finish_reason,
)
from greval.spec import (
    DEFAULT_SCHEMA_REF,
    SCHEMA_HEADER,
    STANDARD_INPUTS,
    CategoricalScale,
    Spec,
    compact_ranges,
    parse_spec,
)

Severity = Literal["error", "warning"]
#: `spec new`'s token budget when --max-tokens is not given (a draft is ~500-1,200 tokens of JSON).
DRAFT_MAX_TOKENS = 2048


# ============================================================================================ lint
@dataclass(frozen=True)
class Finding:
    """One lint finding: ``FILE: FIELD: [rule] message``."""

    file: str
    field: str
    rule: str
    severity: Severity
    message: str

    def line(self) -> str:
        return f"{self.file}: {self.field or '-'}: [{self.rule}] {self.message}"


#: rule id -> (severity, what it catches); documented in docs/authoring.md.
RULES: dict[str, tuple[Severity, str]] = {
    "yaml-syntax": ("error", "the file is not readable YAML"),
    "schema": ("error", "the spec does not validate (message from the schema)"),
    "range-overlap": ("error", "two value ranges share a value: the judge cannot tell which applies"),
    "range-gap": ("error", "some values of the scale belong to no range: the judge has no anchor for them"),
    "range-outside": ("error", "a range reaches outside the scale's min..max"),
    "range-backwards": ("error", "a range runs backwards (min > max)"),
    "range-undescribed": ("error", "a range has no description"),
    "range-short-description": ("warning", "a range description too short to anchor a verdict"),
    "range-single": ("warning", "one range covers the whole scale: no anchors at all"),
    "label-undescribed": ("error", "a label has no description"),
    "label-short-description": ("warning", "a label description too short to tell it apart"),
    "label-duplicate": ("error", "the same label is listed twice"),
    "label-same-description": ("error", "two labels share one description: they are indistinguishable"),
    "input-undeclared": ("warning", "the text refers to a field the judge never sees (not in inputs)"),
    "input-unused": ("warning", "a declared input is never mentioned in description, instructions or steps"),
    "steps-no-scale": ("warning", "no step mentions a label, a value or the scale"),
    "step-too-long": ("warning", "a single step is very long; split it"),
    "description-short": ("warning", "the description is too short to say what is measured"),
}

MAX_STEP_WORDS = 60
MAX_STEP_CHARS = 400
MIN_DESCRIPTION_WORDS = 3

# Words in the text that show a standard input is meant: (strong patterns for "referenced", loose for "used").
_STRONG: dict[str, str] = {
    "question": r"\bquestions?\b|\buser'?s? query\b",
    "expected_answer": r"\bexpected[ _]answers?\b|\breference answers?\b|\bgold answers?\b",
    "answer": r"\b(?:the|system'?s|generated|model'?s) (?:answer|response)s?\b",
    "chunks": r"\bchunks?\b|\bretrieved (?:passages?|context|documents?)\b",
    "triples": r"\btriples?\b",
    "source": r"\bsource texts?\b|\bthe source\b",
}
_LOOSE: dict[str, str] = {
    "question": _STRONG["question"] + r"|\bquery\b|\basked\b",
    "expected_answer": _STRONG["expected_answer"] + r"|\breference\b|\bground[- ]truth\b",
    "answer": r"\banswers?\b|\bresponses?\b",
    "chunks": _STRONG["chunks"] + r"|\bpassages?\b|\bcontext\b|\bdocuments?\b",
    "triples": _STRONG["triples"] + r"|\bknowledge[- ]graph\b|\brelations?\b",
    "source": r"\bsources?\b",
}
_EXPECTED_SPAN = re.compile(_STRONG["expected_answer"], re.I)
_PLACEHOLDER = re.compile(r"\{\s*([A-Za-z_][A-Za-z0-9_]*)\s*\}|`([A-Za-z_][A-Za-z0-9_]*)`")
_SCALE_WORDS = re.compile(r"\b(?:labels?|scale|scores?|scoring|rat(?:e|ing)|grades?|values?)\b", re.I)
_RANGE_KEY = re.compile(r"^\s*(-?\d+)\s*(?:(?:-|–|—|\.\.|to)\s*(-?\d+)\s*)?$")


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _words(text: str) -> int:
    return len(text.split())


def _raw_ranges(raw: Any) -> list[tuple[str, int | None, int | None, str]] | None:
    """(field path, min, max, description) per range, tolerant of half-broken YAML; None if unreadable."""
    out: list[tuple[str, int | None, int | None, str]] = []
    if isinstance(raw, dict):
        for key, desc in raw.items():
            m = _RANGE_KEY.match(str(key))
            where = f"scale.ranges.{key}"
            if not m:
                return None
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
            out.append((where, lo, hi, _as_text(desc)))
        return out
    if isinstance(raw, list):
        for i, r in enumerate(raw):
            if not isinstance(r, dict):
                return None
            rlo, rhi = r.get("min"), r.get("max")
            out.append(
                (
                    f"scale.ranges[{i}]",
                    rlo if isinstance(rlo, int) else None,
                    rhi if isinstance(rhi, int) else None,
                    _as_text(r.get("description")),
                )
            )
        return out
    return None


def _raw_labels(raw: Any) -> list[tuple[str, str, str]] | None:
    """(field path, name, description) per label, tolerant; None if unreadable."""
    out: list[tuple[str, str, str]] = []
    if isinstance(raw, dict):
        for name, body in raw.items():
            desc = body.get("description") if isinstance(body, dict) else body
            out.append((f"scale.labels.{name}", str(name), _as_text(desc)))
        return out
    if isinstance(raw, list):
        for i, lab in enumerate(raw):
            if isinstance(lab, dict):
                out.append((f"scale.labels[{i}]", str(lab.get("name", "")), _as_text(lab.get("description"))))
            elif isinstance(lab, str):
                out.append((f"scale.labels[{i}]", lab, ""))
            else:
                return None
        return out
    return None


def _raw_inputs(raw: Any) -> dict[str, str]:
    """Declared input names with their descriptions (empty when none)."""
    out: dict[str, str] = {}
    if isinstance(raw, dict):
        for k, v in raw.items():
            out[str(k)] = _as_text(v.get("description")) if isinstance(v, dict) else ""
    elif isinstance(raw, list):
        for e in raw:
            if isinstance(e, str):
                out[e] = ""
            elif isinstance(e, dict):
                out[str(e.get("name", ""))] = _as_text(e.get("description"))
    return out


def _norm(text: str) -> str:
    return " ".join(text.lower().split())


def _check_ranges(data: dict[str, Any], add: Callable[[str, str, str], None]) -> None:
    scale = data.get("scale")
    if not isinstance(scale, dict) or scale.get("kind") != "value":
        return
    lo, hi = scale.get("min"), scale.get("max")
    ranges = _raw_ranges(scale.get("ranges"))
    if ranges is None or not isinstance(lo, int) or not isinstance(hi, int) or lo >= hi:
        return
    owner: dict[int, str] = {}
    for where, rmin, rmax, desc in ranges:
        if rmin is None or rmax is None:
            continue
        text = str(rmin) if rmin == rmax else f"{rmin}-{rmax}"
        if rmin > rmax:
            add(where, "range-backwards", f"range {text} runs backwards")
            continue
        if rmin < lo or rmax > hi:
            add(where, "range-outside", f"range {text} lies outside the scale {lo}-{hi}")
        if not desc.strip():
            add(where, "range-undescribed", f"range {text} has no description")
        elif _words(desc) < MIN_DESCRIPTION_WORDS:
            add(where, "range-short-description", f"range {text}: {desc.strip()!r} is too short to anchor a verdict")
        overlap = sorted({v for v in range(rmin, rmax + 1) if v in owner})
        if overlap:
            other = owner[overlap[0]]
            add(where, "range-overlap", f"range {text} overlaps {other} at {compact_ranges(overlap)}")
        for v in range(max(rmin, lo), min(rmax, hi) + 1):
            owner.setdefault(v, text)
    missing = [v for v in range(lo, hi + 1) if v not in owner]
    if missing:
        add("scale.ranges", "range-gap", f"{compact_ranges(missing)} not covered by any range")
    described = [r for r in ranges if r[1] is not None and r[2] is not None]
    if len(described) == 1 and described[0][1] == lo and described[0][2] == hi:
        add("scale.ranges", "range-single", f"one range covers all of {lo}-{hi}; describe what each part means")


def _check_labels(data: dict[str, Any], add: Callable[[str, str, str], None]) -> list[str]:
    scale = data.get("scale")
    if not isinstance(scale, dict) or scale.get("kind") != "categorical":
        return []
    labels = _raw_labels(scale.get("labels"))
    if labels is None:
        return []
    seen_names: dict[str, str] = {}
    seen_desc: dict[str, str] = {}
    for where, name, desc in labels:
        key = name.strip().lower()
        if key in seen_names:
            add(where, "label-duplicate", f"label {name!r} is listed twice (also {seen_names[key]})")
        else:
            seen_names[key] = where
        if not desc.strip():
            add(where, "label-undescribed", f"label {name!r} has no description")
            continue
        if _words(desc) < MIN_DESCRIPTION_WORDS:
            add(where, "label-short-description", f"label {name!r}: {desc.strip()!r} is too short to tell it apart")
        d = _norm(desc)
        if d in seen_desc:
            add(where, "label-same-description", f"label {name!r} has the same description as {seen_desc[d]!r}")
        else:
            seen_desc[d] = name
    return [name for _, name, _ in labels]


def _check_text(data: dict[str, Any], labels: list[str], add: Callable[[str, str, str], None]) -> None:
    description = _as_text(data.get("description"))
    instructions = _as_text(data.get("instructions"))
    raw_steps = data.get("steps")
    steps = [s for s in raw_steps if isinstance(s, str)] if isinstance(raw_steps, list) else []
    outputs = data.get("outputs")
    out_text = " ".join(
        _as_text(o.get("description"))
        for o in (outputs.values() if isinstance(outputs, dict) else [])
        if isinstance(o, dict)
    )
    text = "\n".join([description, instructions, *steps, out_text])
    lower = text.lower()
    declared = _raw_inputs(data.get("inputs"))
    target = data.get("target")
    each = target.get("each") if isinstance(target, dict) else None

    if description.strip() and _words(description) < MIN_DESCRIPTION_WORDS:
        add("description", "description-short", f"{description.strip()!r} does not say what is measured")

    # Inputs referenced but not declared: standard fields by their usual wording, any field as {name}/`name`.
    without_expected = _EXPECTED_SPAN.sub(" ", lower)
    for name in STANDARD_INPUTS:
        if name in declared:
            continue
        hay = without_expected if name == "answer" else lower
        m = re.search(_STRONG[name], hay, re.I)
        if m:
            add("inputs", "input-undeclared", f"the text mentions {m.group(0)!r} but '{name}' is not an input")
    for m in _PLACEHOLDER.finditer(text):
        name = m.group(1) or m.group(2)
        if name not in declared and name not in STANDARD_INPUTS and name not in labels:
            outs = outputs if isinstance(outputs, dict) else {}
            if name not in outs and name not in ("reason", "label", "value", "verdicts", "id"):
                add("inputs", "input-undeclared", f"the text refers to {m.group(0)} but '{name}' is not an input")
    # Declared inputs never mentioned.
    for name in declared:
        if name == each:
            continue
        pattern = _LOOSE.get(name, "") or ""
        custom = r"\b" + re.escape(name.lower()) + r"\b|\b" + re.escape(name.lower().replace("_", " ")) + r"\b"
        pattern = f"{pattern}|{custom}" if pattern else custom
        # The input's own description names it in the author's words ("the dialogue message"): count those.
        own = [w for w in re.findall(r"[a-z]{6,}", declared[name].lower())]
        if not re.search(pattern, lower, re.I) and not any(re.search(rf"\b{w}\b", lower) for w in own):
            add(f"inputs.{name}", "input-unused", f"input '{name}' is never mentioned in the description or steps")

    # Steps and the scale.
    if steps:
        scale = data.get("scale")
        mentions = False
        values: list[int] = []
        if isinstance(scale, dict) and isinstance(scale.get("min"), int) and isinstance(scale.get("max"), int):
            values = list(range(scale["min"], scale["max"] + 1))
        for s in steps:
            low = s.lower()
            if _SCALE_WORDS.search(s):
                mentions = True
            if any(re.search(r"(?<![\w-])" + re.escape(lab.lower()) + r"(?![\w-])", low) for lab in labels if lab):
                mentions = True
            if any(re.search(rf"(?<![\w.]){v}(?![\w.])", s) for v in values):
                mentions = True
        if not mentions:
            what = "a label name" if labels else "a value"
            add("steps", "steps-no-scale", f"no step mentions {what} or the scale; end with how to choose the verdict")
        for i, s in enumerate(steps):
            if _words(s) > MAX_STEP_WORDS or len(s) > MAX_STEP_CHARS:
                add(f"steps[{i}]", "step-too-long", f"{_words(s)} words in one step; split it into smaller steps")


_COVERED_BY_LINT = ("overlap", "not covered", "lies outside", "runs backwards", "duplicate label")


def lint_data(data: Any, file: str = "<spec>", where: str = "") -> list[Finding]:
    """Lint one spec mapping: reliability rules on the raw YAML (so a schema-invalid scale is still explained),
    then the schema itself and the compiled judge's checks (few-shot examples)."""
    findings: list[Finding] = []
    prefix = f"{where}." if where else ""

    def add(path: str, rule: str, message: str) -> None:
        findings.append(Finding(file, prefix + path if path else where, rule, RULES[rule][0], message))

    if not isinstance(data, dict):
        add("", "schema", f"a spec must be a mapping, got {type(data).__name__}")
        return findings
    if data.get("kind", "judge") != "judge":
        try:
            parse_spec(data, file, where)
        except SpecError as exc:
            findings.append(Finding(file, exc.path, "schema", "error", exc.message))
        return findings
    _check_ranges(data, add)
    labels = _check_labels(data, add)
    _check_text(data, labels, add)
    try:
        spec = parse_spec(data, file, where)
        if isinstance(spec, Spec):
            _compile_check(spec)
    except SpecError as exc:
        already = any(f.severity == "error" for f in findings) and any(k in exc.message for k in _COVERED_BY_LINT)
        if not already:
            findings.append(Finding(file, exc.path, "schema", "error", exc.message))
    return findings


def _compile_check(spec: Spec) -> None:
    """Build the judge without a model: checks few-shot examples against the verdict schema."""
    from greval.judge.judge import Judge

    Judge(spec, cast(Any, None))


def lint_text(text: str, file: str = "<spec>") -> list[Finding]:
    """Lint the text of a spec file (one spec, a list, or ``specs: [...]``)."""
    from greval.spec import RefusedYAML, read_yaml, yaml_mark

    try:
        data = read_yaml(text)  # the spec loader: duplicate keys, alias bombs and deep nesting are refused here too
    except RefusedYAML as exc:
        return [Finding(file, yaml_mark(exc), "yaml-refused", "error", str(exc.problem))]
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        return [Finding(file, yaml_mark(exc), "yaml-syntax", "error", f"YAML syntax error: {problem}")]
    except (RecursionError, ValueError, TypeError, AttributeError, OverflowError) as exc:
        return [Finding(file, "", "yaml-syntax", "error", f"cannot load the YAML: {exc}")]
    if data is None:
        return [Finding(file, "", "schema", "error", "the file is empty")]
    if isinstance(data, dict) and set(data) == {"specs"}:
        data = data["specs"]
    if isinstance(data, list):
        out: list[Finding] = []
        for i, item in enumerate(data):
            out.extend(lint_data(item, file, f"[{i}]"))
        return out
    return lint_data(data, file)


def lint_file(path: str | Path) -> list[Finding]:
    """Lint a spec file; an unreadable file is one finding, never an exception."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return [Finding(str(path), "", "schema", "error", "no such file")]
    except (OSError, UnicodeDecodeError) as exc:
        return [Finding(str(path), "", "schema", "error", f"cannot read: {exc}")]
    return lint_text(text, str(path))


# ============================================================================================ draft
class DraftRequest(BaseModel):
    """What the user asked `greval spec new` for; the model fills in steps and descriptions."""

    model_config = ConfigDict(frozen=True)

    name: str = Field(pattern=r"^[A-Za-z_][A-Za-z0-9_]*$")
    description: str = Field(min_length=1)
    kind: Literal["value", "categorical"] = "value"
    target: Literal["record", "chunks", "triples"] = "record"
    labels: list[str] = Field(default_factory=list)
    min: int = 1
    max: int = 5
    inputs: list[str] = Field(default_factory=list)

    def effective_inputs(self) -> list[str]:
        default = {
            "record": ["question", "answer"],
            "chunks": ["question", "chunks"],
            "triples": ["question", "triples"],
        }
        names = list(self.inputs) or default[self.target]
        if self.target != "record" and self.target not in names:
            names.append(self.target)
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
    _compile_check(spec)
    errors = [f for f in lint_text(text, source) if f.severity == "error"]
    if errors:
        raise UserError(errors[0].line())
    return spec


# ============================================================================================ try
def human_frame(
    spec: Spec,
    records: Sequence[Any],
    results: Mapping[str, Any],
    humans: Mapping[str, Sequence[tuple[str, Any]]],
) -> Any:
    """The agreement module's frame: one row per record (or per chunk / triple for item metrics) and human
    annotator; the ``annotator`` column only when some record has several human answers."""
    import pandas as pd

    rows: list[dict[str, Any]] = []
    several = any(len(v) > 1 for v in humans.values())
    for rec in records:
        res = results.get(rec.hash)
        verdicts = {v.item_id: v for v in res.verdicts} if res is not None else {}
        answers = list(humans.get(rec.id) or [("human", None)])
        for annotator, human in answers:
            extra = {"annotator": str(annotator)} if several else {}
            if spec.each is None:
                judged = _verdict_value(spec, verdicts.get(""))
                rows.append({"item": rec.id, "judge": judged, "human": human, **extra})
                continue
            ids = [it["id"] for it in rec.items(spec.each)]
            per_item = _per_item(human, ids, rec.id)
            for iid in ids:
                judged = _verdict_value(spec, verdicts.get(iid))
                rows.append({"item": f"{rec.id}/{iid}", "judge": judged, "human": per_item.get(iid), **extra})
    return pd.DataFrame(rows, columns=["item", "judge", "human", *(["annotator"] if several else [])])


def humans_from_file(
    path: str, column: str, id_column: str | None = None, annotator_column: str | None = None
) -> dict[str, list[tuple[str, Any]]]:
    """Human answers kept in their own table (e.g. pulled from Argilla), joined on the record id."""
    from greval.agreement.tables import read_table, select

    table = read_table(path, as_text=True)  # a label spelled NA / None / null stays that label
    id_col = id_column or next((c for c in ("record_id", "id") if c in table.columns), None)
    if id_col is None:
        raise UserError(f"{path}: no record_id or id column; name it with --human-id-column")
    ids = select(table, id_col).astype(str)
    values = select(table, column)
    annotators = select(table, annotator_column).astype(str) if annotator_column else None
    out: dict[str, list[tuple[str, Any]]] = {}
    for i, (rid, value) in enumerate(zip(ids, values, strict=True)):
        who = str(annotators.iloc[i]) if annotators is not None else f"h{len(out.get(rid, [])) + 1}"
        out.setdefault(rid, []).append((who, _plain(value)))
    return out


def _verdict_value(spec: Spec, v: Any) -> Any:
    if v is None or v.status != "ok":
        return None
    return v.label if isinstance(spec.scale, CategoricalScale) else v.value


def _per_item(human: Any, ids: Sequence[str], rid: str) -> dict[str, Any]:
    if isinstance(human, str) and human.strip()[:1] in ("[", "{"):
        with contextlib.suppress(json.JSONDecodeError):
            human = json.loads(human)
    if human is None or (isinstance(human, float) and math.isnan(human)):
        return {}
    if hasattr(human, "tolist"):
        human = human.tolist()
    if isinstance(human, Mapping):
        return {str(k): v for k, v in human.items()}
    if isinstance(human, list):
        if len(human) != len(ids):
            raise UserError(
                f"record {rid}: the human column holds {len(human)} labels for {len(ids)} items; "
                "give one per item, in item order, or a mapping {item_id: label}"
            )
        return dict(zip(ids, human, strict=True))
    raise UserError(
        f"record {rid}: an item metric needs per-item human labels: a list in item order or {{item_id: label}}"
    )


def split_human(records: Sequence[Any], column: str) -> tuple[list[Any], dict[str, list[tuple[str, Any]]]]:
    """Take the human column out of the records (so the store sees the same records as `greval run`)."""
    from greval.dataset.records import Record, content_hash

    humans: dict[str, list[tuple[str, Any]]] = {}
    out: list[Any] = []
    found = False
    for rec in records:
        data = dict(rec.data)
        value: Any = None
        if column in data:
            value = data.pop(column)
            found = True
        else:
            cur: Any = data
            for part in column.split("."):
                cur = cur.get(part) if isinstance(cur, Mapping) else None
            value = cur
            found = found or value is not None
        humans[rec.id] = [("human", value)]
        out.append(Record(id=rec.id, hash=content_hash(data), data=data))
    if not found:
        cols = sorted({k for r in records for k in r.data})
        raise UserError(f"--human-column {column!r} not found; columns: {', '.join(cols)}")
    return out, humans


def try_spec(
    specs: Sequence[Any],
    target: Spec,
    data_file: str,
    human_column: str,
    *,
    judge_ref: str,
    judge_params: Mapping[str, Any],
    session: Callable[..., Any],
    mapping: Mapping[str, str] | None = None,
    id_column: str | None = None,
    limit: int | None = 20,
    store: str | None = None,
    bootstrap: int = 200,
    human_file: str | None = None,
    human_id_column: str | None = None,
    annotator_column: str | None = None,
) -> tuple[Any, Any, Any]:
    """Run the specs on the labelled records and compute agreement of ``target`` with the human answers
    (a column of the data file, or of ``human_file`` joined on the record id)."""
    from greval.agreement import AgreementOptions, compute_agreement
    from greval.dataset.records import load_records
    from greval.judge.evaluators import config_for
    from greval.runner import arun
    from greval.store.store import Store, spec_keys

    loaded = load_records(data_file, mapping, id_column, limit)
    if human_file:
        records = loaded
        humans = humans_from_file(human_file, human_column, human_id_column, annotator_column)
        if not any(r.id in humans for r in records):
            raise UserError(f"{human_file}: no human answer for any of the {len(records)} record ids")
    else:
        records, humans = split_human(loaded, human_column)
    with tempfile.TemporaryDirectory(prefix="greval-try-") as tmp:
        path = store or str(Path(tmp) / "try.sqlite")
        with session(judge_ref, **judge_params) as cfg, Store(path) as st:
            summary = run_sync(arun(specs, records, st, cfg, dataset=data_file))
            keys = spec_keys(specs)
            jkey = config_for(target, cfg).key
            results = {r.hash: st.result(keys[target.name], jkey, r) for r in records}
    frame = human_frame(target, records, results, humans)
    frame["human"] = frame["human"].map(_plain)
    from greval.agreement.from_store import agreement_scale

    report = compute_agreement(frame, agreement_scale(target), AgreementOptions(bootstrap=bootstrap))
    return report, frame, summary


def _plain(v: Any) -> Any:
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return None
    return v


def print_try(console: Any, spec: Spec, report: Any, frame: Any, summary: Any) -> None:
    """Compact agreement: counts, headline metrics with CIs, and the confusion matrix for labels."""
    from rich.markup import escape
    from rich.table import Table

    c = report.counts
    console.print(
        f"[bold]{spec.name}[/] ({spec.hash}) judged by {summary.judge}: {c.items_compared} of {c.items} "
        f"items compared ({c.items_missing_human} without a human label, {c.items_invalid_judge} judge failures)",
        highlight=False,
    )
    from greval.store.results import metric_notes

    for m in summary.metrics:  # why judge answers failed (truncated, content filter …), as `greval run` says
        if m.spec == spec.name:
            for note in metric_notes(m):
                console.print(f"[yellow]note:[/] {escape(note)}", highlight=False)
    t = Table(title="judge vs human", title_justify="left")
    for col in ("metric", "value", "95% CI", "n", "note"):
        t.add_column(col, justify="right" if col in ("value", "n") else "left")
    for name, e in report.metrics.items():
        ci = f"[{e.ci_low:.3f}, {e.ci_high:.3f}]" if e.ci_low is not None and e.ci_high is not None else ""
        t.add_row(name, "—" if e.value is None else f"{e.value:.3f}", escape(ci), str(e.n), escape(e.note or ""))
    console.print(t)
    if report.categorical is not None:
        cm = Table(title="confusion (rows human, columns judge)", title_justify="left")
        cm.add_column("human \\ judge")
        for lab in report.categorical.confusion.judge_labels:
            cm.add_column(escape(lab), justify="right")
        for lab, row in zip(report.categorical.confusion.labels, report.categorical.confusion.counts, strict=True):
            cm.add_row(escape(lab), *[str(v) for v in row])
        console.print(cm)
    for note in report.notes:
        console.print(f"  note: {escape(note)}", highlight=False)
