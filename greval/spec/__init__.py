"""Metric specs: the YAML a team writes to define a judge, validated into typed models.

A spec names a metric, explains it, lists chain-of-thought steps, declares the inputs the judge sees and a
scale (integer values with described ranges, or described labels), and whether one verdict covers the whole
record or each retrieved chunk / triple. Shorthand forms keep the YAML short; they are normalised here so
the rest of greval sees one canonical shape. Every error names the file, the field path and the problem.
"""

from __future__ import annotations

import difflib
import hashlib
import importlib
import json
import re
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
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
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

from greval.errors import SpecError
from greval.paths import metric_specs_dir

#: Record fields greval knows how to render; any other name is a custom text field.
STANDARD_INPUTS: tuple[str, ...] = ("question", "expected_answer", "answer", "chunks", "triples", "source")
ITEM_FIELDS: tuple[str, ...] = ("chunks", "triples")

IDENT = r"^[A-Za-z_][A-Za-z0-9_]*$"


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


# --------------------------------------------------------------------------------------------- inputs
class InputSpec(StrictModel):
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
class Range(StrictModel):
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


class ValueScale(StrictModel):
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
            raise ValueError(f"@ranges: {compact_ranges(missing)} not covered by any range")
        return self


class Label(StrictModel):
    """A categorical label, described for the judge (and the annotators)."""

    name: str = Field(min_length=1, json_schema_extra={"pattern": r"\S"})
    description: str = Field(min_length=1)
    score: float | None = Field(None, description="Numeric value of the label, used to aggregate scores.")

    @field_validator("name")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        # The judge must answer with the exact label: a blank one cannot be told apart from no answer.
        if not value.strip():
            raise ValueError(f"a label name may not be blank ({value!r})")
        return value


def labels_shorthand(value: Any) -> Any:
    if isinstance(value, dict):
        out = []
        for name, body in value.items():
            if isinstance(body, dict):
                out.append({"name": str(name), **body})
            else:
                out.append({"name": str(name), "description": body})
        return out
    return value


class _LabelBody(StrictModel):
    """A label's description and score, in the mapping shorthand ``labels: {Name: {description, score}}``."""

    description: str = Field(min_length=1)
    score: float | None = None


class CategoricalScale(StrictModel):
    """Described labels. ``ordered: true`` means the list runs from best to worst."""

    kind: Literal["categorical"] = "categorical"
    labels: Annotated[
        list[Label],
        BeforeValidator(labels_shorthand, json_schema_input_type=list[Label] | dict[str, str | _LabelBody]),
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
class EachTarget(StrictModel):
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
class JudgeDefaults(StrictModel):
    """Defaults for the judge model; command-line flags override them."""

    model: str | None = None
    temperature: float | None = Field(None, ge=0, le=2)
    max_tokens: int | None = Field(None, gt=0)
    samples: int = Field(1, ge=1, le=20)


OutputType = Literal["string", "integer", "number", "boolean", "list[string]", "list[integer]", "list[number]"]


class OutputSpec(StrictModel):
    """An extra field the judge fills beside the verdict (kept in the store, shown in reports)."""

    type: OutputType = "string"
    description: str = Field(min_length=1)


class Example(StrictModel):
    """A few-shot example: record fields in, the exact structured answer out."""

    inputs: dict[str, Any]
    output: dict[str, Any]


class BaseSpec(StrictModel):
    """What every kind of metric shares: a name, a description, dependencies, judge defaults, a version hash.

    Kinds: ``judge`` (:class:`Spec`, one LLM call per record), ``computed`` (no model) and ``pipeline``
    (declared multi-step LLM metrics). Other modules register theirs with :func:`register_kind`.
    """

    kind: str
    name: str = Field(pattern=IDENT, description="Identifier, used on the command line and in the store.")
    description: str = Field(min_length=1, description="What the metric measures.")
    depends_on: list[Annotated[str, Field(pattern=IDENT)]] = Field(
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


#: The built-in kinds and the module that registers each. A module is imported when a spec of its kind is
#: read (a judge spec alone imports neither the computed metrics nor the pipeline judge, nor LangChain);
#: an import error is not hidden.
BUILTIN_KINDS: dict[str, str] = {
    "judge": "greval.spec",
    "computed": "greval.judge.computed",
    "pipeline": "greval.judge.pipeline",
}


def _kind(kind: str) -> type[BaseSpec] | None:
    """The model of one kind, its module imported if needed; None for an unknown kind."""
    if kind not in SPEC_KINDS and kind in BUILTIN_KINDS:
        importlib.import_module(BUILTIN_KINDS[kind])
    return SPEC_KINDS.get(kind)


def _kinds() -> dict[str, type[BaseSpec]]:
    """Every kind: the built-in ones, in a fixed order (their modules register themselves on import), then
    any other registered."""
    for module in BUILTIN_KINDS.values():
        importlib.import_module(module)
    return {**{kind: SPEC_KINDS[kind] for kind in BUILTIN_KINDS}, **SPEC_KINDS}


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
    outputs: dict[Annotated[str, Field(pattern=IDENT)], OutputSpec] = Field(default_factory=dict)
    examples: list[Example] = Field(default_factory=list)

    @field_validator("inputs")
    @classmethod
    def _input_names(cls, value: dict[str, InputSpec]) -> dict[str, InputSpec]:
        if not value:
            raise ValueError("declare at least one input")
        for name in value:
            if not re.match(IDENT, name):
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
        # Outputs become fields of a pydantic model: names pydantic itself uses would break or shadow it.
        taken = sorted(n for n in self.outputs if n.startswith("_") or hasattr(BaseModel, n))
        if taken:
            raise ValueError(f"@outputs: {', '.join(taken)} is a name pydantic reserves; choose another")
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
def compact_ranges(values: Sequence[int]) -> str:
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


def _at(where: str, path: str) -> str:
    """A field path inside a file: ``[1]`` (the spec's index in a list file) joined with ``depends_on``."""
    return ".".join(p for p in (where, path) if p).replace(".[", "[")


def parse_spec(data: Any, source: str = "<spec>", where: str = "") -> BaseSpec:
    """Validate one spec mapping; raise SpecError naming the source, the field path and the problem."""
    if not isinstance(data, dict):
        raise SpecError(source, where, f"a spec must be a mapping, got {type(data).__name__}")
    kind = data.get("kind", "judge")
    model = _kind(str(kind))
    if model is None:
        path = f"{where}.kind" if where else "kind"
        raise SpecError(source, path, f"unknown kind {kind!r}; use one of: {', '.join(_kinds())}")
    try:
        spec = model.model_validate(data, context={"spec_source": source})
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
    except (TypeError, KeyError, AttributeError) as exc:
        # A validator that did not expect this type (a list where a name belongs …): still the file's fault.
        raise SpecError(source, where, f"invalid {kind} spec: {type(exc).__name__}: {exc}") from None
    try:
        spec.hash  # noqa: B018 - the hash is the spec's identity in the store: it must be computable
    except ValueError as exc:  # bytes that are not text, a lone surrogate …
        raise SpecError(source, where, f"cannot be stored as JSON text: {exc}") from None
    return spec


def _check_examples(spec: Spec, source: str, where: str) -> None:
    """Few-shot examples must be answers the judge could give, on inputs it can render.

    Checked while loading a file, where the file is known; the judge checks again when built, but only
    knows the spec's name.
    """
    if not spec.examples:
        return
    from greval.judge.verdict import verdict_models  # the verdict schema is built from specs: it imports this module

    answer, _ = verdict_models(spec)
    for i, ex in enumerate(spec.examples):
        here = _at(where, f"examples[{i}]")
        try:
            answer.model_validate(ex.output)
        except ValidationError as exc:
            err = exc.errors()[0]
            if err["type"] == "extra_forbidden":
                text = f"unknown field '{err['loc'][-1]}'"
            elif err["type"] == "missing":
                text = "required field is missing"
            else:
                text = str(err["msg"]).removeprefix("Value error, ")
            inner = _loc(err["loc"])  # in the message, as the judge reports it: the path stays the output's
            raise SpecError(source, f"{here}.output", f"{inner}: {text}" if inner else text) from None
        for field in ITEM_FIELDS:
            items = ex.inputs.get(field)
            if items is None or (field != spec.each and not isinstance(items, list)):
                continue
            if not isinstance(items, list):
                raise SpecError(source, f"{here}.inputs.{field}", f"the judged {field} must be a list of objects")
            keys = ("id", "subject", "predicate", "object") if field == "triples" else ("id",)
            for j, item in enumerate(items):
                if not isinstance(item, dict) or any(k not in item for k in keys):
                    need = ", ".join(keys) if field == "triples" else "id, text"
                    raise SpecError(source, f"{here}.inputs.{field}[{j}]", f"each item must be an object with {need}")


# --------------------------------------------------------------------------------------- YAML limits
#: What one spec file may hold once its aliases are expanded, so a hostile file fails in milliseconds
#: instead of exhausting memory: real specs are a few hundred values deep in single digits.
MAX_DEPTH = 100
MAX_VALUES = 200_000
MAX_CHARS = 20_000_000

_SURROGATE = re.compile("[\ud800-\udfff]")


class RefusedYAML(yaml.MarkedYAMLError):
    """Well-formed YAML that greval refuses (duplicate key, alias bomb, too deep): not a syntax error."""


class _SpecLoader(yaml.SafeLoader):
    """A SafeLoader that refuses, while loading, what would silently lose data or exhaust memory.

    Duplicate keys (YAML says last wins: a typo would silently drop a field), lone surrogate escapes (not
    text; the store could not write them), nesting deeper than MAX_DEPTH (the composer recurses) and
    documents whose aliases expand past MAX_VALUES / MAX_CHARS ("billion laughs": constructing is cheap, as
    aliases share objects, but validating, hashing or prompting walks every expanded copy).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self._depth = 0
        self._aliases = 0
        self._sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (values, characters), once composed

    def compose_node(self, parent: Node | None, index: int) -> Node | None:
        event: Any = self.peek_event()  # type: ignore[no-untyped-call]
        start: Any = event.start_mark
        if isinstance(event, yaml.AliasEvent):
            node = super().compose_node(parent, index)
            self._aliases += 1
            if node is not None and id(node) not in self._sizes:
                raise RefusedYAML(
                    problem=f"alias *{event.anchor} refers to a collection that holds it (recursive alias)",
                    problem_mark=start,
                )
            return node
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise RefusedYAML(problem=f"nested more than {MAX_DEPTH} levels deep", problem_mark=start)
            node = super().compose_node(parent, index)
        finally:
            self._depth -= 1
        if node is not None:
            self._measure(node, start)
        return node

    def _measure(self, node: Node, mark: yaml.Mark) -> None:
        if isinstance(node, ScalarNode):
            size = (1, len(node.value))
        else:
            children: list[Node] = []
            if isinstance(node, SequenceNode):
                children = list(node.value)
            elif isinstance(node, MappingNode):
                children = [n for pair in node.value for n in pair]
            parts = [self._sizes.get(id(c), (1, 0)) for c in children]
            size = (1 + sum(p[0] for p in parts), sum(p[1] for p in parts))
        self._sizes[id(node)] = size
        if size[0] > MAX_VALUES or size[1] > MAX_CHARS:
            what = f"{MAX_VALUES:,} values" if size[0] > MAX_VALUES else f"{MAX_CHARS:,} characters"
            how = f" through its {self._aliases:,} aliases (an alias bomb?)" if self._aliases else ""
            raise RefusedYAML(problem=f"expands to more than {what}{how}", problem_mark=mark)

    def construct_object(self, node: Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep)
        except (ValueError, TypeError, AttributeError, OverflowError) as exc:  # e.g. `!!int x`, a 5000-digit int
            raise RefusedYAML(
                problem=f"cannot read this {node.tag.rsplit(':', 1)[-1]} value: {exc}", problem_mark=node.start_mark
            ) from None

    def construct_scalar(self, node: ScalarNode | MappingNode) -> str:
        value = super().construct_scalar(node)
        if isinstance(value, str) and _SURROGATE.search(value):
            raise RefusedYAML(
                problem="a lone UTF-16 surrogate escape (\\ud800-\\udfff) is not a character; write the character",
                problem_mark=node.start_mark,
            )
        return value

    def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
        seen: dict[Any, yaml.Mark] = {}
        for key_node, _ in node.value if isinstance(node, MappingNode) else []:  # else the base class objects
            if key_node.tag == "tag:yaml.org,2002:merge":
                continue  # `<<: *defaults` may be overridden by the keys beside it
            key = self.construct_object(key_node, deep=True)
            try:
                first = seen.get(key)
            except TypeError:
                continue  # an unhashable key: the base class reports it
            if first is not None:
                raise RefusedYAML(
                    problem=f"duplicate key {key!r} (first at line {first.line + 1})", problem_mark=key_node.start_mark
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep)


def read_yaml(text: str) -> Any:
    loader = _SpecLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def yaml_mark(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f"line {mark.line + 1}, column {mark.column + 1}" if mark is not None else ""


def _load(path: str | Path) -> list[tuple[BaseSpec, str]]:
    """The specs of one file, each with where it sits in the file (``[i]`` in a list, else "")."""
    p = Path(path)
    name = str(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise SpecError(name, "", "no such file") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(name, "", f"cannot read: {exc}") from None
    try:
        data = read_yaml(text)
    except RefusedYAML as exc:
        raise SpecError(name, yaml_mark(exc), str(exc.problem)) from None
    except yaml.YAMLError as exc:
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SpecError(name, yaml_mark(exc), f"YAML syntax error: {problem}") from None
    except RecursionError:  # MAX_DEPTH keeps the composer well away from this; a safety net
        raise SpecError(name, "", "nested too deeply") from None
    except (ValueError, TypeError, AttributeError, OverflowError) as exc:  # a constructor choking on a value
        raise SpecError(name, "", f"cannot load the YAML: {exc}") from None
    if data is None:
        raise SpecError(name, "", "the file is empty")
    if isinstance(data, dict) and set(data) == {"specs"}:
        data = data["specs"]
    if isinstance(data, list):
        if not data:
            raise SpecError(name, "", "no specs in file (an empty list)")
        specs = [(parse_spec(item, name, f"[{i}]"), f"[{i}]") for i, item in enumerate(data)]
        names = [s.name for s, _ in specs]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise SpecError(name, "", f"two specs named {dup[0]!r} in one file")
    else:
        specs = [(parse_spec(data, name), "")]
    for spec, where in specs:
        if isinstance(spec, Spec):
            _check_examples(spec, name, where)
    return specs


def load_spec_file(path: str | Path) -> list[BaseSpec]:
    """Load a YAML file holding one spec, a list of specs, or ``specs: [...]``.

    ``depends_on`` is checked too: each dependency is in the file or predefined, and there is no cycle
    (counting the predefined specs the file would bring along, as ``greval run`` does).
    """
    loaded = _load(path)
    _check_dependencies(str(path), loaded)
    return [s for s, _ in loaded]


def _check_dependencies(file: str, loaded: Sequence[tuple[BaseSpec, str]]) -> None:
    local = {s.name: where for s, where in loaded}
    graph: dict[str, list[str]] = {s.name: list(s.depends_on) for s, _ in loaded}
    library: dict[str, Path] = {}
    if any(d not in local for s, _ in loaded for d in s.depends_on):
        library = bundled_specs()
    for s, where in loaded:
        for i, dep in enumerate(s.depends_on):
            if dep not in local and dep not in library:
                hint = difflib.get_close_matches(dep, [*local, *library], n=1)
                extra = f" (did you mean '{hint[0]}'?)" if hint else "; define it here or see `greval spec list`"
                raise SpecError(
                    file, _at(where, f"depends_on[{i}]"), f"metric {dep!r} is neither given nor predefined{extra}"
                )
    pending = [d for deps in graph.values() for d in deps if d not in graph]
    while pending:  # the predefined specs `greval run` would add, and theirs
        dep = pending.pop()
        if dep in graph or dep not in library:
            continue
        found = next((s for s, _ in _load(library[dep]) if s.name == dep), None)
        graph[dep] = list(found.depends_on) if found else []
        pending.extend(d for d in graph[dep] if d not in graph)
    try:
        _topological(list(local), lambda n: [d for d in graph.get(n, []) if d in graph])
    except _Cycle as cycle:
        raise SpecError(file, _at(local[cycle.root], "depends_on"), f"dependency cycle: {cycle}") from None


def bundled_specs() -> dict[str, Path]:
    """The predefined specs shipped with greval, by name."""
    out: dict[str, Path] = {}
    for f in sorted(metric_specs_dir().glob("*.yaml")):
        for name in _spec_names(f):
            out[name] = f
    return out


def _spec_names(path: Path) -> list[str]:
    """The names of the specs in a predefined file, read without validating them: finding a dependency by
    name then parses only its own file (a judge spec's check does not import the pipeline judge, and with
    it LangChain). A file whose names cannot be read so is loaded in full, so its error is the usual one."""
    try:
        data = read_yaml(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, TypeError, AttributeError, RecursionError, yaml.YAMLError):
        data = None
    if isinstance(data, dict) and set(data) == {"specs"}:
        data = data["specs"]
    items = data if isinstance(data, list) else [data]
    names = [item.get("name") if isinstance(item, dict) else None for item in items]
    if not items or not all(isinstance(n, str) for n in names):
        return [spec.name for spec, _ in _load(path)]
    return [n for n in names if isinstance(n, str)]


def resolve_specs(refs: Sequence[str], with_dependencies: bool = True) -> list[BaseSpec]:
    """Turn command-line references (files, or names of predefined specs) into specs.

    Dependencies named in ``depends_on`` are added from the predefined library when not given, so
    ``--spec answer_completeness`` brings its chunk and triple evaluations along. The result is in
    dependency order. Without dependencies, the specs are ordered among themselves only. A spec may depend
    on a metric of another file given in ``refs``; errors name the file (and the spec's place in it).
    """
    specs: dict[str, BaseSpec] = {}
    origin: dict[str, tuple[str, str]] = {}  # name -> (file, where in the file), for errors
    library: dict[str, Path] | None = None
    for ref in refs:
        p = Path(ref)
        if p.suffix in (".yaml", ".yml", ".json") or p.exists():
            loaded = _load(p)  # dependencies are checked below, across every file given
            source = ref
        else:
            library = library if library is not None else bundled_specs()
            if ref not in library:
                hint = difflib.get_close_matches(ref, list(library), n=1)
                extra = f" (did you mean '{hint[0]}'?)" if hint else f"; predefined: {', '.join(library)}"
                raise SpecError(ref, "", f"no such file or predefined spec{extra}")
            loaded = [(s, w) for s, w in _load(library[ref]) if s.name == ref]
            source = str(library[ref])
        for s, where in loaded:
            if s.name in specs and specs[s.name].hash != s.hash:
                raise SpecError(ref, _at(where, "name"), f"two different specs are named {s.name!r}")
            specs[s.name] = s
            origin[s.name] = (source, where)
    if not with_dependencies:
        return order_specs(list(specs.values()), sources=origin, missing_ok=True)
    pending = [d for s in specs.values() for d in s.depends_on if d not in specs]
    while pending:
        dep = pending.pop()
        if dep in specs:
            continue
        library = library if library is not None else bundled_specs()
        if dep not in library:
            owner = next(s for s in specs.values() if dep in s.depends_on)
            file, where = origin[owner.name]
            at = _at(where, f"depends_on[{owner.depends_on.index(dep)}]")
            hint = difflib.get_close_matches(dep, [*specs, *library], n=1)
            extra = f" (did you mean '{hint[0]}'?)" if hint else "; see `greval spec list`"
            raise SpecError(file, at, f"metric {dep!r} is neither given nor predefined{extra}")
        for s, where in _load(library[dep]):
            if s.name == dep:
                specs[dep] = s
                origin[dep] = (str(library[dep]), where)
                pending.extend(d for d in s.depends_on if d not in specs)
    return order_specs(list(specs.values()), sources=origin)


class _Cycle(Exception):
    """A dependency cycle: ``root`` is where the search started, ``path`` the loop (first name repeated)."""

    def __init__(self, root: str, path: list[str]) -> None:
        super().__init__(" -> ".join(path))
        self.root = root
        self.path = path


def _topological(roots: Sequence[str], deps: Callable[[str], Sequence[str]]) -> list[str]:
    """Depth-first post-order from ``roots`` (dependencies first, in the order given).

    Iterative, so a long chain of specs in a hostile file cannot exhaust the interpreter's stack.
    """
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    order: list[str] = []
    for root in roots:
        if root in state:
            continue
        state[root] = 1
        stack: list[tuple[str, Iterator[str]]] = [(root, iter(deps(root)))]
        while stack:
            name, rest = stack[-1]
            nxt = next(rest, None)
            if nxt is None:
                stack.pop()
                state[name] = 2
                order.append(name)
            elif state.get(nxt) == 1:
                trail = [n for n, _ in stack]
                raise _Cycle(root, [*trail[trail.index(nxt) :], nxt])
            elif nxt not in state:
                state[nxt] = 1
                stack.append((nxt, iter(deps(nxt))))
    return order


def order_specs(
    specs: Sequence[BaseSpec],
    *,
    sources: Mapping[str, tuple[str, str]] | None = None,
    missing_ok: bool = False,
) -> list[BaseSpec]:
    """Dependency order (a topological sort); a cycle or a missing dependency is a SpecError.

    ``sources`` maps a spec's name to (file, where in the file) so an error names the file; without it the
    spec's name stands in. ``missing_ok`` orders the specs among themselves, ignoring dependencies not given.
    """
    by_name = {s.name: s for s in specs}

    def origin(name: str) -> tuple[str, str]:
        return (sources or {}).get(name, (name, ""))

    if not missing_ok:
        for s in specs:
            for i, d in enumerate(s.depends_on):
                if d not in by_name:
                    file, where = origin(s.name)
                    at = _at(where, f"depends_on[{i}]" if sources else "depends_on")
                    raise SpecError(file, at, f"metric {d!r} is not among the specs being run")
    try:
        names = _topological([s.name for s in specs], lambda n: [d for d in by_name[n].depends_on if d in by_name])
    except _Cycle as cycle:
        file, where = origin(cycle.path[0])
        raise SpecError(file, _at(where, "depends_on"), f"dependency cycle: {cycle}") from None
    return [by_name[n] for n in names]


def dependency_levels(specs: Sequence[BaseSpec]) -> list[list[BaseSpec]]:
    """Groups of specs that can run concurrently: each level depends only on earlier levels."""
    level: dict[str, int] = {}
    for s in order_specs(specs):
        level[s.name] = 1 + max((level[d] for d in s.depends_on), default=-1)
    out: list[list[BaseSpec]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for s in order_specs(specs):
        out[level[s.name]].append(s)
    return out


#: The first line of a spec file written by greval (``greval spec new``): editors with the YAML extension
#: validate the file against the schema ``greval spec schema`` writes.
SCHEMA_HEADER = "# yaml-language-server: $schema={ref}"
DEFAULT_SCHEMA_REF = "./greval-spec.schema.json"


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
