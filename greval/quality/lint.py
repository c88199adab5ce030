"""`greval spec lint`: the rules that catch what makes a judge unreliable, before any money is spent.

A judge is only as good as its spec: overlapping or gappy ranges, labels nobody described, steps that read
fields the judge never sees, or steps that never connect to the scale all make verdicts noisy. The rules run
on the raw YAML (so a schema-invalid scale is still explained), then the schema and the compiled judge.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, cast

import yaml

from greval.errors import SpecError
from greval.judge.judge import Judge
from greval.spec import STANDARD_INPUTS, RefusedYAML, Spec, compact_ranges, parse_spec, read_yaml, yaml_mark
from greval.spec.computed import DEPRECATED_METRICS

Severity = Literal["error", "warning"]


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
    "metric-deprecated": ("warning", "a computed metric under its old name (still read; the new name is said)"),
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
    "conversation": r"\bconversations?\b|\bchat history\b",
}
_LOOSE: dict[str, str] = {
    "question": _STRONG["question"] + r"|\bquery\b|\basked\b",
    "expected_answer": _STRONG["expected_answer"] + r"|\breference\b|\bground[- ]truth\b",
    "answer": r"\banswers?\b|\bresponses?\b",
    "chunks": _STRONG["chunks"] + r"|\bpassages?\b|\bcontext\b|\bdocuments?\b",
    "triples": _STRONG["triples"] + r"|\bknowledge[- ]graph\b|\brelations?\b",
    "source": r"\bsources?\b",
    "conversation": _STRONG["conversation"] + r"|\bdialogues?\b|\bturns?\b|\bmessages?\b",
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


@dataclass(frozen=True)
class _SpecText:
    """The spec's prose as the text rules read it: description, instructions, steps and output descriptions."""

    description: str
    steps: list[str]
    outputs: dict[str, Any]
    text: str
    declared: dict[str, str]
    each: Any

    @property
    def lower(self) -> str:
        return self.text.lower()


def _spec_text(data: dict[str, Any]) -> _SpecText:
    description = _as_text(data.get("description"))
    raw_steps = data.get("steps")
    steps = [s for s in raw_steps if isinstance(s, str)] if isinstance(raw_steps, list) else []
    outputs = data.get("outputs")
    outs = outputs if isinstance(outputs, dict) else {}
    out_text = " ".join(_as_text(o.get("description")) for o in outs.values() if isinstance(o, dict))
    target = data.get("target")
    return _SpecText(
        description=description,
        steps=steps,
        outputs=outs,
        text="\n".join([description, _as_text(data.get("instructions")), *steps, out_text]),
        declared=_raw_inputs(data.get("inputs")),
        each=target.get("each") if isinstance(target, dict) else None,
    )


def _check_undeclared(t: _SpecText, labels: list[str], add: Callable[[str, str, str], None]) -> None:
    """Inputs referenced but not declared: standard fields by their usual wording, any field as {name}/`name`."""
    lower = t.lower
    without_expected = _EXPECTED_SPAN.sub(" ", lower)
    for name in STANDARD_INPUTS:
        if name in t.declared:
            continue
        hay = without_expected if name == "answer" else lower
        m = re.search(_STRONG[name], hay, re.I)
        if m:
            add("inputs", "input-undeclared", f"the text mentions {m.group(0)!r} but '{name}' is not an input")
    known = (t.declared, STANDARD_INPUTS, labels, t.outputs, ("reason", "label", "value", "verdicts", "id"))
    for m in _PLACEHOLDER.finditer(t.text):
        name = m.group(1) or m.group(2)
        if not any(name in names for names in known):
            add("inputs", "input-undeclared", f"the text refers to {m.group(0)} but '{name}' is not an input")


def _check_unused(t: _SpecText, add: Callable[[str, str, str], None]) -> None:
    """Declared inputs never mentioned."""
    lower = t.lower
    for name in t.declared:
        if name == t.each:
            continue
        pattern = _LOOSE.get(name, "") or ""
        custom = r"\b" + re.escape(name.lower()) + r"\b|\b" + re.escape(name.lower().replace("_", " ")) + r"\b"
        pattern = f"{pattern}|{custom}" if pattern else custom
        # The input's own description names it in the author's words ("the dialogue message"): count those.
        own = [w for w in re.findall(r"[a-z]{6,}", t.declared[name].lower())]
        if not re.search(pattern, lower, re.I) and not any(re.search(rf"\b{w}\b", lower) for w in own):
            add(f"inputs.{name}", "input-unused", f"input '{name}' is never mentioned in the description or steps")


def _step_mentions_scale(step: str, labels: list[str], values: list[int]) -> bool:
    low = step.lower()
    return bool(
        _SCALE_WORDS.search(step)
        or any(re.search(r"(?<![\w-])" + re.escape(lab.lower()) + r"(?![\w-])", low) for lab in labels if lab)
        or any(re.search(rf"(?<![\w.]){v}(?![\w.])", step) for v in values)
    )


def _check_steps(
    data: dict[str, Any], steps: list[str], labels: list[str], add: Callable[[str, str, str], None]
) -> None:
    """Steps and the scale: some step says how to choose the verdict, and no step is too long to follow."""
    if not steps:
        return
    scale = data.get("scale")
    values: list[int] = []
    if isinstance(scale, dict) and isinstance(scale.get("min"), int) and isinstance(scale.get("max"), int):
        values = list(range(scale["min"], scale["max"] + 1))
    if not any(_step_mentions_scale(s, labels, values) for s in steps):
        what = "a label name" if labels else "a value"
        add("steps", "steps-no-scale", f"no step mentions {what} or the scale; end with how to choose the verdict")
    for i, s in enumerate(steps):
        if _words(s) > MAX_STEP_WORDS or len(s) > MAX_STEP_CHARS:
            add(f"steps[{i}]", "step-too-long", f"{_words(s)} words in one step; split it into smaller steps")


def _check_text(data: dict[str, Any], labels: list[str], add: Callable[[str, str, str], None]) -> None:
    t = _spec_text(data)
    if t.description.strip() and _words(t.description) < MIN_DESCRIPTION_WORDS:
        add("description", "description-short", f"{t.description.strip()!r} does not say what is measured")
    _check_undeclared(t, labels, add)
    _check_unused(t, add)
    _check_steps(data, t.steps, labels, add)


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
        new = DEPRECATED_METRICS.get(str(data.get("metric"))) if data.get("kind") == "computed" else None
        if new is not None:
            old = data["metric"]
            add("metric", "metric-deprecated", f"{old!r} is the old name of {new!r} (same scores); use {new!r}")
        return findings
    _check_ranges(data, add)
    labels = _check_labels(data, add)
    _check_text(data, labels, add)
    try:
        spec = parse_spec(data, file, where)
        if isinstance(spec, Spec):
            compile_check(spec)
    except SpecError as exc:
        already = any(f.severity == "error" for f in findings) and any(k in exc.message for k in _COVERED_BY_LINT)
        if not already:
            findings.append(Finding(file, exc.path, "schema", "error", exc.message))
    return findings


def compile_check(spec: Spec) -> None:
    """Build the judge without a model: checks few-shot examples against the verdict schema."""

    Judge(spec, cast(Any, None))


def lint_text(text: str, file: str = "<spec>") -> list[Finding]:
    """Lint the text of a spec file (one spec, a list, or ``specs: [...]``)."""

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
