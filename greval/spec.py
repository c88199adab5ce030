"""Metric specs: the YAML a team writes to define a judge, validated into typed models.

A spec names a metric, explains it, lists chain-of-thought steps, declares the inputs the judge sees and a
scale (integer values with described ranges, or described labels), and whether one verdict covers the whole
record or each retrieved chunk / triple. Shorthand forms keep the YAML short; they are normalised here so
the rest of greval sees one canonical shape. Every error names the file, the field path and the problem.
"""

from __future__ import annotations

import difflib
import hashlib
import json
import re
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from greval.errors import SpecError
from greval.paths import metric_specs_dir

#: Record fields greval knows how to render; any other name is a custom text field.
STANDARD_INPUTS: tuple[str, ...] = ("question", "expected_answer", "answer", "chunks", "triples", "source")
ITEM_FIELDS: tuple[str, ...] = ("chunks", "triples")

_IDENT = r"^[A-Za-z_][A-Za-z0-9_]*$"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------------------------- inputs
class InputSpec(_Strict):
    """One record field the judge sees."""

    required: bool = Field(True, description="A record without this field is reported as an error.")
    description: str | None = Field(None, description="Shown to the judge next to the field's heading.")


def _inputs_shorthand(value: Any) -> Any:
    if isinstance(value, list):
        out: dict[str, Any] = {}
        for entry in value:
            if isinstance(entry, str):
                out[entry] = {"required": True}
            elif isinstance(entry, dict) and "name" in entry:
                rest = {k: v for k, v in entry.items() if k != "name"}
                out[str(entry["name"])] = rest
            else:
                raise ValueError("each input must be a field name or {name: ..., required: ...}")
        return out
    if isinstance(value, dict):
        return {k: ({"required": v} if isinstance(v, bool) else ({} if v is None else v)) for k, v in value.items()}
    return value


Inputs = Annotated[
    dict[str, InputSpec],
    BeforeValidator(
        _inputs_shorthand,
        json_schema_input_type=dict[str, InputSpec | bool | None] | list[str],
    ),
]


# ---------------------------------------------------------------------------------------------- scale
class Range(_Strict):
    """A described sub-range ``min``..``max`` (inclusive) of a value scale."""

    min: int
    max: int
    description: str = Field(min_length=1)

    @model_validator(mode="after")
    def _ordered(self) -> Range:
        if self.min > self.max:
            raise ValueError(f"range {self.min}-{self.max} runs backwards")
        return self

    @property
    def text(self) -> str:
        return str(self.min) if self.min == self.max else f"{self.min}-{self.max}"


_RANGE_KEY = re.compile(r"^\s*(-?\d+)\s*(?:(?:-|–|—|\.\.|to)\s*(-?\d+)\s*)?$")


def _ranges_shorthand(value: Any) -> Any:
    if isinstance(value, dict):
        out = []
        for key, desc in value.items():
            m = _RANGE_KEY.match(str(key))
            if not m:
                raise ValueError(f"range key {key!r} is not 'N' or 'N-M'")
            lo = int(m.group(1))
            hi = int(m.group(2)) if m.group(2) is not None else lo
            out.append({"min": lo, "max": hi, "description": desc})
        return out
    return value


class ValueScale(_Strict):
    """Integers ``min``..``max``; every integer falls in exactly one described range."""

    kind: Literal["value"] = "value"
    min: int
    max: int
    ranges: Annotated[
        list[Range],
        BeforeValidator(_ranges_shorthand, json_schema_input_type=list[Range] | dict[str, str]),
    ] = Field(description="Described sub-ranges; as a mapping {'1-2': '...', '3': '...'} or a list.")

    @model_validator(mode="after")
    def _cover(self) -> ValueScale:
        if self.min >= self.max:
            raise ValueError(f"min ({self.min}) must be below max ({self.max})")
        if self.max - self.min > 100:
            raise ValueError("a value scale spans at most 101 integers; describe coarser ranges")
        seen: dict[int, str] = {}
        for r in self.ranges:
            if r.min < self.min or r.max > self.max:
                raise ValueError(f"@ranges: range {r.text} lies outside the scale {self.min}-{self.max}")
            for v in range(r.min, r.max + 1):
                if v in seen:
                    raise ValueError(f"@ranges: {seen[v]} and {r.text} overlap at {v}")
                seen[v] = r.text
        missing = [v for v in range(self.min, self.max + 1) if v not in seen]
        if missing:
            raise ValueError(f"@ranges: {_compact(missing)} not covered by any range")
        return self


class Label(_Strict):
    """A categorical label, described for the judge (and the annotators)."""

    name: str = Field(min_length=1)
    description: str = Field(min_length=1)
    score: float | None = Field(None, description="Numeric value of the label, used to aggregate scores.")


def _labels_shorthand(value: Any) -> Any:
    if isinstance(value, dict):
        out = []
        for name, body in value.items():
            if isinstance(body, dict):
                out.append({"name": str(name), **body})
            else:
                out.append({"name": str(name), "description": body})
        return out
    return value


class _LabelBody(_Strict):
    """A label's description and score, in the mapping shorthand ``labels: {Name: {description, score}}``."""

    description: str = Field(min_length=1)
    score: float | None = None


class CategoricalScale(_Strict):
    """Described labels. ``ordered: true`` means the list runs from best to worst."""

    kind: Literal["categorical"] = "categorical"
    labels: Annotated[
        list[Label],
        BeforeValidator(_labels_shorthand, json_schema_input_type=list[Label] | dict[str, str | _LabelBody]),
    ] = Field(min_length=2)
    ordered: bool = False

    @model_validator(mode="after")
    def _unique(self) -> CategoricalScale:
        names = [lab.name for lab in self.labels]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"@labels: duplicate label(s): {', '.join(dup)}")
        scored = [lab.score is not None for lab in self.labels]
        if any(scored) and not all(scored):
            raise ValueError("@labels: give a score to every label or to none")
        return self

    @property
    def names(self) -> list[str]:
        return [lab.name for lab in self.labels]

    def scores(self) -> dict[str, float] | None:
        """Numeric label values: the declared ones, or for ordered labels 1 (best) down to 0 (worst)."""
        if all(lab.score is not None for lab in self.labels):
            return {lab.name: float(lab.score) for lab in self.labels if lab.score is not None}
        if self.ordered:
            n = len(self.labels) - 1
            return {lab.name: (n - i) / n for i, lab in enumerate(self.labels)}
        return None


Scale = Annotated[ValueScale | CategoricalScale, Field(discriminator="kind")]


# --------------------------------------------------------------------------------------------- target
class EachTarget(_Strict):
    """One verdict per chunk or triple, judged together in one call, aggregated into a record score."""

    each: Literal["chunks", "triples"]
    aggregate: Literal["mean", "share", "score_mean"] | None = Field(
        None,
        description=(
            "How item verdicts become a record score: 'mean' of values (value scales), 'share' of items "
            "whose label is in `positive`, or 'score_mean' of label scores. Default: mean / score_mean "
            "when labels have scores / share of the first label."
        ),
    )
    positive: list[str] | None = Field(None, description="Labels counted by aggregate: share.")


Target = Literal["record"] | EachTarget


# -------------------------------------------------------------------------------------- other parts
class JudgeDefaults(_Strict):
    """Defaults for the judge model; command-line flags override them."""

    model: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, gt=0)
    samples: int = Field(1, ge=1, le=20)


OutputType = Literal["string", "integer", "number", "boolean", "list[string]", "list[integer]", "list[number]"]


class OutputSpec(_Strict):
    """An extra field the judge fills beside the verdict (kept in the store, shown in reports)."""

    type: OutputType = "string"
    description: str = Field(min_length=1)


class Example(_Strict):
    """A few-shot example: record fields in, the exact structured answer out."""

    inputs: dict[str, Any]
    output: dict[str, Any]


class BaseSpec(_Strict):
    """What every kind of metric shares: a name, a description, dependencies, judge defaults, a version hash.

    Kinds: ``judge`` (:class:`Spec`, one LLM call per record), ``computed`` (no model) and ``pipeline``
    (declared multi-step LLM metrics). Other modules register theirs with :func:`register_kind`.
    """

    kind: str
    name: str = Field(pattern=_IDENT, description="Identifier, used on the command line and in the store.")
    description: str = Field(min_length=1, description="What the metric measures.")
    depends_on: list[Annotated[str, Field(pattern=_IDENT)]] = Field(
        default_factory=list, description="Metrics whose verdicts this one reads (they run first)."
    )
    judge: JudgeDefaults = Field(default_factory=JudgeDefaults)

    @property
    def each(self) -> str | None:
        """The item field judged one by one (``chunks`` / ``triples``), or None for record metrics."""
        return None

    @property
    def needs_model(self) -> bool:
        """Whether this metric calls a judge model (computed metrics do not)."""
        return True

    def required_inputs(self) -> list[str]:
        return []

    def canonical(self) -> dict[str, Any]:
        """The spec's content as plain JSON, without judge defaults (they are part of the judge's identity)."""
        return self.model_dump(mode="json", exclude={"judge"})

    @property
    def hash(self) -> str:
        """A short content hash of the canonical form: the spec's version."""
        blob = json.dumps(self.canonical(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


SPEC_KINDS: dict[str, type[BaseSpec]] = {}


def register_kind(kind: str) -> Any:
    """Class decorator: make ``kind: <kind>`` in a spec file validate with this model."""

    def deco(cls: type[BaseSpec]) -> type[BaseSpec]:
        SPEC_KINDS[kind] = cls
        return cls

    return deco


def _kinds() -> dict[str, type[BaseSpec]]:
    """The registered kinds; the optional kind modules register themselves on import."""
    import importlib

    for module in ("greval.computed", "greval.pipeline"):
        try:
            importlib.import_module(module)
        except ImportError:
            continue
    return SPEC_KINDS


@register_kind("judge")
class Spec(BaseSpec):
    """A judge metric: one structured LLM verdict per record or per chunk / triple. See README "Spec format"."""

    kind: Literal["judge"] = "judge"
    instructions: str | None = Field(None, description="Extra guidance for the judge.")
    steps: list[Annotated[str, Field(min_length=1)]] = Field(
        min_length=1, description="Chain-of-thought evaluation steps, in order."
    )
    inputs: Inputs = Field(description="Record fields the judge sees, and which are required.")
    scale: Scale
    target: Target = "record"
    outputs: dict[Annotated[str, Field(pattern=_IDENT)], OutputSpec] = Field(default_factory=dict)
    examples: list[Example] = Field(default_factory=list)

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, value: dict[str, InputSpec]) -> dict[str, InputSpec]:
        if not value:
            raise ValueError("declare at least one input")
        for name in value:
            if not re.match(_IDENT, name):
                raise ValueError(f"input name {name!r} is not an identifier")
        return value

    @model_validator(mode="after")
    def _consistent(self) -> Spec:
        if isinstance(self.target, EachTarget):
            t = self.target
            if t.each not in self.inputs:
                raise ValueError(f"@target.each: '{t.each}' is not among the inputs")
            if isinstance(self.scale, ValueScale):
                if t.aggregate not in (None, "mean"):
                    raise ValueError(f"@target.aggregate: '{t.aggregate}' needs labels; a value scale uses 'mean'")
            else:
                if t.aggregate == "mean":
                    raise ValueError("@target.aggregate: 'mean' needs a value scale; use 'share' or 'score_mean'")
                if t.aggregate == "score_mean" and self.scale.scores() is None:
                    raise ValueError("@target.aggregate: 'score_mean' needs label scores (or ordered: true)")
                for lab in t.positive or []:
                    if lab not in self.scale.names:
                        raise ValueError(f"@target.positive: {lab!r} is not a scale label")
        reserved = {"reason", "label", "value", "verdicts", "id"}
        clash = reserved.intersection(self.outputs)
        if clash:
            raise ValueError(f"@outputs: may not be named {', '.join(sorted(clash))} (reserved)")
        if self.name in self.depends_on:
            raise ValueError("@depends_on: a metric cannot depend on itself")
        return self

    # ------------------------------------------------------------------------------ derived facts
    @property
    def each(self) -> str | None:
        """The item field judged one by one (``chunks`` / ``triples``), or None for record metrics."""
        return self.target.each if isinstance(self.target, EachTarget) else None

    @property
    def aggregate(self) -> str | None:
        """The effective aggregation of item verdicts into a record score."""
        if not isinstance(self.target, EachTarget):
            return None
        if self.target.aggregate:
            return self.target.aggregate
        if isinstance(self.scale, ValueScale):
            return "mean"
        return "score_mean" if self.scale.scores() is not None else "share"

    @property
    def positive_labels(self) -> list[str]:
        if isinstance(self.target, EachTarget) and self.target.positive:
            return list(self.target.positive)
        if isinstance(self.scale, CategoricalScale):
            return [self.scale.labels[0].name]
        return []

    def required_inputs(self) -> list[str]:
        return [n for n, i in self.inputs.items() if i.required]


# ------------------------------------------------------------------------------------------ loading
def _compact(values: Sequence[int]) -> str:
    parts: list[str] = []
    start = prev = values[0]
    for v in [*values[1:], None]:
        if v is not None and v == prev + 1:
            prev = v
            continue
        parts.append(str(start) if start == prev else f"{start}-{prev}")
        if v is not None:
            start = prev = v
    return ", ".join(parts)


def _loc(loc: Iterable[int | str]) -> str:
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif part in ("ValueScale", "CategoricalScale", "value", "categorical") and out.endswith("scale"):
            continue  # discriminated-union tags add noise, not information
        elif (
            part in ("function-after[_consistent()]", "function-after[_cover()]", "function-after[_unique()]")
            or part.startswith(("function-", "json-or-python", "union[", "tagged-union["))
            or part
            in (
                "list[str]",
                "dict[str,InputSpec]",
                "EachTarget",
                "literal['record']",
            )
        ):
            continue
        else:
            out += ("." if out else "") + part
    return out


def _fields_of(model: type[BaseModel]) -> list[str]:
    return list(model.model_fields)


def _message(err: Any, raw: Any) -> str:
    kind = err["type"]
    msg = str(err["msg"])
    if kind == "extra_forbidden":
        name = str(err["loc"][-1])
        parent = _parent_model(err["loc"])
        hint = difflib.get_close_matches(name, _fields_of(parent), n=1) if parent else []
        return f"unknown field '{name}'" + (f" (did you mean '{hint[0]}'?)" if hint else "")
    if kind == "missing":
        return "required field is missing"
    if kind == "union_tag_invalid":
        return "scale.kind must be 'value' or 'categorical'"
    if kind == "union_tag_not_found":
        return "scale needs kind: value or kind: categorical"
    if kind == "literal_error" and list(err["loc"])[:1] == ["target"]:
        return "target must be 'record' or {each: chunks|triples}"
    if kind == "string_pattern_mismatch":
        return "must be an identifier: letters, digits and _, not starting with a digit"
    if kind == "too_short":
        n = err.get("ctx", {}).get("min_length", 1)
        return f"needs at least {n} item{'s' if n != 1 else ''}"
    return msg.removeprefix("Value error, ")


def _parent_model(loc: Sequence[Any]) -> type[BaseModel] | None:
    path = [p for p in loc[:-1] if isinstance(p, str)]
    model: type[BaseModel] = Spec
    table: dict[str, type[BaseModel]] = {
        "scale": ValueScale,
        "target": EachTarget,
        "judge": JudgeDefaults,
        "ranges": Range,
        "labels": Label,
        "examples": Example,
    }
    for p in path:
        if p in table:
            model = table[p]
        if p == "categorical":
            model = CategoricalScale
        if p == "outputs":
            model = OutputSpec
        if p == "inputs":
            model = InputSpec
    return model


def parse_spec(data: Any, source: str = "<spec>", where: str = "") -> BaseSpec:
    """Validate one spec mapping; raise SpecError naming the source, the field path and the problem."""
    if not isinstance(data, dict):
        raise SpecError(source, where, f"a spec must be a mapping, got {type(data).__name__}")
    kinds = _kinds()
    kind = data.get("kind", "judge")
    model = kinds.get(str(kind))
    if model is None:
        path = f"{where}.kind" if where else "kind"
        raise SpecError(source, path, f"unknown kind {kind!r}; use one of: {', '.join(kinds)}")
    try:
        return model.model_validate(data, context={"spec_source": source})
    except ValidationError as exc:
        errors = exc.errors()
        # An unknown key usually explains a "missing" one beside it (a typo): report it first.
        err = next((e for e in errors if e["type"] == "extra_forbidden"), errors[0])
        path = _loc(err["loc"])
        text = _message(err, data)
        at = re.match(r"^@([\w.\[\]]+): (.*)$", text)
        if at:  # a cross-field check that knows which field is at fault
            path = ".".join(p for p in (path, at.group(1)) if p)
            text = at.group(2)
        prefix = f"{where}." if where and path else where
        raise SpecError(source, prefix + path, text) from None


def load_spec_file(path: str | Path) -> list[BaseSpec]:
    """Load a YAML file holding one spec, a list of specs, or ``specs: [...]``."""
    p = Path(path)
    name = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(name, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(name, "", f"cannot read: {exc}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(name, at, f"YAML syntax error: {problem}") from None
    if data is None:
        raise SpecError(name, "", "the file is empty")
    if isinstance(data, dict) and set(data) == {"specs"}:
        data = data["specs"]
    if isinstance(data, list):
        specs = [parse_spec(item, name, f"[{i}]") for i, item in enumerate(data)]
        names = [s.name for s in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SpecError(name, "", f"two specs named {dup[0]!r} in one file")
        return specs
    return [parse_spec(data, name)]


def bundled_specs() -> dict[str, Path]:
    """The predefined specs shipped with greval, by name."""
    out: dict[str, Path] = {}
    for f in sorted(metric_specs_dir().glob("*.yaml")):
        for spec in load_spec_file(f):
            out[spec.name] = f
    return out


def resolve_specs(refs: Sequence[str], with_dependencies: bool = True) -> list[BaseSpec]:
    """Turn command-line references (files, or names of predefined specs) into specs.

    Dependencies named in ``depends_on`` are added from the predefined library when not given, so
    ``--spec answer_completeness`` brings its chunk and triple evaluations along. The result is in
    dependency order.
    """
    specs: dict[str, BaseSpec] = {}
    library: dict[str, Path] | None = None
    for ref in refs:
        p = Path(ref)
        if p.suffix in (".yaml", ".yml", ".json") or p.exists():
            loaded = load_spec_file(p)
        else:
            library = library if library is not None else bundled_specs()
            if ref not in library:
                hint = difflib.get_close_matches(ref, list(library), n=1)
                extra = f" (did you mean '{hint[0]}'?)" if hint else f"; predefined: {', '.join(library)}"
                raise SpecError(ref, "", f"no such file or predefined spec{extra}")
            loaded = [s for s in load_spec_file(library[ref]) if s.name == ref]
        for s in loaded:
            if s.name in specs and specs[s.name].hash != s.hash:
                raise SpecError(ref, "name", f"two different specs are named {s.name!r}")
            specs[s.name] = s
    if with_dependencies:
        pending = [d for s in specs.values() for d in s.depends_on if d not in specs]
        while pending:
            dep = pending.pop()
            if dep in specs:
                continue
            library = library if library is not None else bundled_specs()
            if dep not in library:
                owner = next(s.name for s in specs.values() if dep in s.depends_on)
                raise SpecError(owner, "depends_on", f"metric {dep!r} is neither given nor predefined")
            for s in load_spec_file(library[dep]):
                if s.name == dep:
                    specs[dep] = s
                    pending.extend(d for d in s.depends_on if d not in specs)
    return order_specs(list(specs.values()))


def order_specs(specs: Sequence[BaseSpec]) -> list[BaseSpec]:
    """Dependency order (a topological sort); a cycle or a missing dependency is a SpecError."""
    by_name = {s.name: s for s in specs}
    for s in specs:
        for d in s.depends_on:
            if d not in by_name:
                raise SpecError(s.name, "depends_on", f"metric {d!r} is not among the specs being run")
    done: list[BaseSpec] = []
    state: dict[str, int] = {}

    def visit(s: BaseSpec, trail: list[str]) -> None:
        if state.get(s.name) == 2:
            return
        if state.get(s.name) == 1:
            cycle = " -> ".join([*trail[trail.index(s.name) :], s.name])
            raise SpecError(s.name, "depends_on", f"dependency cycle: {cycle}")
        state[s.name] = 1
        for d in s.depends_on:
            visit(by_name[d], [*trail, s.name])
        state[s.name] = 2
        done.append(s)

    for s in specs:
        visit(s, [])
    return done


def dependency_levels(specs: Sequence[BaseSpec]) -> list[list[BaseSpec]]:
    """Groups of specs that can run concurrently: each level depends only on earlier levels."""
    level: dict[str, int] = {}
    for s in order_specs(specs):
        level[s.name] = 1 + max((level[d] for d in s.depends_on), default=-1)
    out: list[list[BaseSpec]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for s in order_specs(specs):
        out[level[s.name]].append(s)
    return out


def spec_json_schema() -> dict[str, Any]:
    """JSON Schema for spec files (one spec, a list, or {specs: [...]}), for editors to validate against."""
    defs: dict[str, Any] = {}
    variants = []
    for kind, cls in _kinds().items():
        # Each kind's sub-models get their own namespace: two kinds may both define a "Label".
        one = cls.model_json_schema(mode="validation", ref_template=f"#/$defs/{kind}__{{model}}")
        defs.update({f"{kind}__{name}": body for name, body in one.pop("$defs", {}).items()})
        title = f"{kind.capitalize()}Spec"
        if kind == "judge" and "kind" in one.get("required", []):  # `kind` may be left out for judge specs
            one["required"].remove("kind")
        defs[title] = one
        variants.append({"$ref": f"#/$defs/{title}"})
    defs["Spec"] = {"anyOf": variants}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": "greval metric spec file",
        "description": "One greval metric spec, a list of specs, or {specs: [...]}.",
        "anyOf": [
            {"$ref": "#/$defs/Spec"},
            {"type": "array", "items": {"$ref": "#/$defs/Spec"}},
            {
                "type": "object",
                "properties": {"specs": {"type": "array", "items": {"$ref": "#/$defs/Spec"}}},
                "required": ["specs"],
                "additionalProperties": False,
            },
        ],
        "$defs": defs,
    }
