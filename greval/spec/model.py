"""The judge spec's model and the parts every kind shares: inputs, scales, targets, judge defaults.

A spec names a metric, explains it, lists chain-of-thought steps, declares the inputs the judge sees and a
scale (integer values with described ranges, or described labels), and whether one verdict covers the whole
record or each retrieved chunk / triple. Shorthand forms keep the YAML short; they are normalised here so
the rest of greval sees one canonical shape.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, field_validator, model_validator

from greval.spec.kinds import register_kind

#: Record fields greval knows how to render; any other name is a custom text field.
STANDARD_INPUTS: tuple[str, ...] = (
    "question", "expected_answer", "answer", "chunks", "triples", "source", "conversation",
)  # fmt: skip
ITEM_FIELDS: tuple[str, ...] = ("chunks", "triples")
#: What ``target.each`` can name -> the input its items are read from: a conversation's assistant turns (a
#: trajectory's agent steps) are judged one by one, but the judge reads every turn (step) for context.
ITEM_SOURCES: dict[str, str] = {
    "chunks": "chunks", "triples": "triples", "turns": "conversation", "steps": "trajectory",
}  # fmt: skip

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
class RecordLabelRule(StrictModel):
    """A record's label from its items' labels by a rule (a trajectory is bad when any step is harmful, good when
    all are useful): ``then`` when the rule holds over the items' verdicts, else ``otherwise``."""

    rule: Literal["any", "all", "share"] = Field(
        description=(
            "'any': some item has one of `labels`; 'all': every item has one of them; 'share': at least "
            "`min_share` of the items have one of them."
        )
    )
    labels: list[str] = Field(min_length=1, description="The item labels the rule counts (the scale's).")
    min_share: float | None = Field(None, gt=0, le=1, description="rule: share: the least share of the items.")
    then: str = Field(min_length=1, description="The record's label when the rule holds.")
    otherwise: str = Field(min_length=1, description="The record's label when it does not.")

    @model_validator(mode="after")
    def _share(self) -> RecordLabelRule:
        if (self.rule == "share") != (self.min_share is not None):
            raise ValueError("min_share goes with rule: share (and only with it)")
        if self.then == self.otherwise:
            raise ValueError("then and otherwise must be two different labels")
        return self

    def text(self) -> str:
        """The rule in words: "any item Harmful → bad, else good"."""
        labs = " or ".join(self.labels)
        held = {"any": f"any item {labs}", "all": f"every item {labs}"}.get(self.rule)
        held = held or f"at least {self.min_share:g} of the items {labs}"
        return f"{held} → {self.then}, else {self.otherwise}"


class EachTarget(StrictModel):
    """One verdict per chunk, triple, assistant turn or agent step, judged together in one call, aggregated into a
    record score."""

    each: Literal["chunks", "triples", "turns", "steps"] = Field(
        description=(
            "The items judged one by one: the record's chunks, its triples, the assistant turns of its "
            "`conversation` (the judge reads every turn, verdicts are asked for the assistant turns), or the "
            "agent's steps of its `trajectory` (its messages, tool calls and final answer; the judge reads the "
            "user's messages and the tool results too)."
        )
    )
    aggregate: Literal["mean", "share", "score_mean"] | None = Field(
        None,
        description=(
            "How item verdicts become a record score: 'mean' of values (value scales), 'share' of items "
            "whose label is in `positive`, or 'score_mean' of label scores. Default: mean / score_mean "
            "when labels have scores / share of the first label."
        ),
    )
    positive: list[str] | None = Field(None, description="Labels counted by aggregate: share.")
    unsupported: list[str] | None = Field(
        None,
        description=(
            "FActScore*-style counts: labels that mean 'the source does not say' (e.g. not_supported). With "
            "it, records and the dataset also get precision = positive / all, recall = positive / (positive + "
            "unsupported) and their F1."
        ),
    )
    record_label: RecordLabelRule | None = Field(
        None,
        description=(
            "A record's label from its items' labels by a rule (any / all / share of `labels`): shown in the "
            "run's summary and compared with people's by `greval agreement` at record level. Not part of the "
            "verdicts' identity: declaring it re-judges nothing."
        ),
    )


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
    (declared multi-step LLM metrics). Other modules register theirs with :func:`register_kind` (and its
    evaluator with :func:`greval.judge.evaluators.register_evaluator`). A spec declares; it builds nothing.
    """

    kind: str
    name: str = Field(pattern=IDENT, description="Identifier, used on the command line and in the store.")
    description: str = Field(min_length=1, description="What the metric measures.")
    depends_on: list[Annotated[str, Field(pattern=IDENT)]] = Field(
        default_factory=list, description="Metrics whose verdicts this one reads (they run first)."
    )
    judge: JudgeDefaults = Field(default_factory=JudgeDefaults)
    dataset_aggregate: Literal["micro", "macro"] | None = Field(
        None,
        description=(
            "How a per-item metric's record scores become the dataset score: 'micro' pools the items of all "
            "records (Σ positives / Σ items, as FActScore* and ValidityScore are defined), 'macro' is the mean of "
            "the record scores. Default micro where items can be pooled. Not part of the verdicts' identity: "
            "changing it re-judges nothing."
        ),
    )

    @property
    def each(self) -> str | None:
        """The item field judged one by one (``chunks`` / ``triples``), or None for record metrics."""
        return None

    @property
    def poolable(self) -> bool:
        """Whether the record score is a share / mean over items that can be pooled across records."""
        return True

    @property
    def pooling(self) -> Literal["micro", "macro"]:
        """The effective dataset aggregate (see ``dataset_aggregate``)."""
        if self.dataset_aggregate is not None:
            return self.dataset_aggregate
        return "micro" if self.poolable else "macro"

    @property
    def needs_model(self) -> bool:
        """Whether this metric calls a judge model (computed metrics do not)."""
        return True

    def required_inputs(self) -> list[str]:
        return []

    def canonical(self) -> dict[str, Any]:
        """The spec's content as plain JSON, without judge defaults (they are part of the judge's identity)
        and without the dataset aggregate (a way of reading verdicts, not of making them)."""
        return self.model_dump(mode="json", exclude={"judge", "dataset_aggregate"})

    @property
    def hash(self) -> str:
        """A short content hash of the canonical form: the spec's version."""
        blob = json.dumps(self.canonical(), sort_keys=True, ensure_ascii=False, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:12]


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
            source = ITEM_SOURCES[t.each]
            if source not in self.inputs:
                raise ValueError(
                    f"@target.each: '{t.each}' is not among the inputs"
                    if source == t.each
                    else f"@target.each: '{t.each}' needs the input '{source}'"
                )
            if isinstance(self.scale, ValueScale):
                if t.aggregate not in (None, "mean"):
                    raise ValueError(f"@target.aggregate: '{t.aggregate}' needs labels; a value scale uses 'mean'")
                if t.unsupported:
                    raise ValueError("@target.unsupported: needs labels (a categorical scale)")
            else:
                if t.aggregate == "mean":
                    raise ValueError("@target.aggregate: 'mean' needs a value scale; use 'share' or 'score_mean'")
                if t.aggregate == "score_mean" and self.scale.scores() is None:
                    raise ValueError("@target.aggregate: 'score_mean' needs label scores (or ordered: true)")
                for lab in t.positive or []:
                    if lab not in self.scale.names:
                        raise ValueError(f"@target.positive: {lab!r} is not a scale label")
                for lab in t.unsupported or []:
                    if lab not in self.scale.names:
                        raise ValueError(f"@target.unsupported: {lab!r} is not a scale label")
                    if lab in self.positive_labels:
                        raise ValueError(f"@target.unsupported: {lab!r} is also a positive label")
                for lab in t.record_label.labels if t.record_label else []:
                    if lab not in self.scale.names:
                        raise ValueError(f"@target.record_label.labels: {lab!r} is not a scale label")
            if isinstance(self.scale, ValueScale) and t.record_label:
                raise ValueError("@target.record_label: needs labels (a categorical scale)")
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

    def canonical(self) -> dict[str, Any]:
        """As for every kind, and without ``target.unsupported`` and ``target.record_label``: they name how
        verdicts are counted, not how they are made, so declaring them re-judges nothing."""
        data = super().canonical()
        if isinstance(data.get("target"), dict):
            data["target"].pop("unsupported", None)
            data["target"].pop("record_label", None)
        return data

    # ------------------------------------------------------------------------------ derived facts
    @property
    def each(self) -> str | None:
        """The items judged one by one (``chunks`` / ``triples`` / ``turns`` / ``steps``), or None for record
        metrics."""
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
