"""``kind: pipeline`` declarations: extract lists, verify every item, aggregate the verdict counts.

The YAML of a pipeline spec validated into typed models, with every cross-reference checked (a verify step's
list, the aggregate's steps and labels, ``max_over``). A declaration only: the judge that runs it is
:class:`greval.judge.pipeline.PipelineEvaluator` (greval.judge.evaluators maps the kind to it), so validating a
pipeline spec imports no LangChain.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, model_serializer, model_validator
from pydantic_core.core_schema import SerializerFunctionWrapHandler

from greval.spec.kinds import register_kind
from greval.spec.model import (
    IDENT,
    ITEM_FIELDS,
    BaseSpec,
    CategoricalScale,
    Inputs,
    Label,
    labels_shorthand,
)
from greval.types import UNITS

Ident = Annotated[str, Field(pattern=IDENT)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_by_name=True, validate_by_alias=True, serialize_by_alias=True
    )


# ----------------------------------------------------------------------------------------------- steps
class ExtractStep(_Model):
    """The judge lists the statements / claims / opinions of one text field."""

    op: Literal["extract"] = Field("extract", exclude=True)
    name: Ident = Field(description="Name of the extracted list; verify steps and `outputs` use it.")
    from_: Ident = Field(alias="from", description="The record field to extract from.")
    what: str = Field("statements", min_length=1, description="What to list, plural: 'factual claims'.")
    instructions: str | None = Field(None, description="How to split the text (what counts as one item).")
    context: list[Ident] = Field(
        default_factory=list, description="Other record fields shown to help (e.g. the question)."
    )

    @model_serializer(mode="wrap")
    def _as_yaml(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {"extract": handler(self)}


class VerifyStep(_Model):
    """One categorical verdict per item of an extracted list (or per chunk / triple), all in one call."""

    op: Literal["verify"] = Field("verify", exclude=True)
    name: Ident | None = Field(None, description="Name of the verdicts (item ids '<name>:s1'); default: `each`.")
    each: Ident = Field(description="An extract step's name, or chunks / triples.")
    against: list[Ident] = Field(
        default_factory=list, description="Record fields the items are checked against (shown to the judge)."
    )
    instructions: str | None = Field(None, description="Extra guidance for this verdict.")
    steps: list[Annotated[str, Field(min_length=1)]] = Field(
        default_factory=list, description="Chain-of-thought steps for this verdict (a generic list if empty)."
    )
    labels: Annotated[
        list[Label],
        BeforeValidator(labels_shorthand, json_schema_input_type=list[Label] | dict[str, str]),
    ] = Field(min_length=2, description="The labels, each described; as a mapping {label: description}.")
    ordered: bool = False

    @property
    def key(self) -> str:
        return self.name or self.each

    @model_serializer(mode="wrap")
    def _as_yaml(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        return {"verify": handler(self)}

    @model_validator(mode="after")
    def _scale(self) -> VerifyStep:
        CategoricalScale(labels=self.labels, ordered=self.ordered)  # duplicate labels, partial scores
        return self

    def scale(self) -> CategoricalScale:
        return CategoricalScale(labels=self.labels, ordered=self.ordered)


Step = Annotated[ExtractStep | VerifyStep, Field(discriminator="op")]


class _ExtractEntry(_Model):
    extract: ExtractStep


class _VerifyEntry(_Model):
    verify: VerifyStep


# ------------------------------------------------------------------------------------------- aggregate
def _refs(value: Any) -> Any:
    return [value] if isinstance(value, str) else value


LabelRefs = Annotated[list[str], BeforeValidator(_refs, json_schema_input_type=str | list[str])]


class _AggregateBase(_Model):
    empty: float | None = Field(
        None, description="The score when there is nothing to count (e.g. bias with no opinions: 0); default: no score."
    )
    max_over: Ident | None = Field(
        None,
        description="A record field that may hold several values (several expected answers): the steps "
        "reading it run once per value and the best score is kept.",
    )


class RatioAggregate(_AggregateBase):
    """Share of a verify step's items whose label is positive."""

    kind: Literal["ratio"]
    step: Ident
    positive: list[str] = Field(min_length=1)


class CountsAggregate(_AggregateBase):
    """Precision tp/(tp+fp), recall tp/(tp+fn) or F1 tp/(tp+½(fp+fn)) over labelled counts."""

    kind: Literal["precision", "recall", "f1"]
    tp: LabelRefs = Field(description="'step.label' (or a list): verdicts counted as true positives.")
    fp: LabelRefs = Field(default_factory=list, description="'step.label' (or a list): false positives.")
    fn: LabelRefs = Field(default_factory=list, description="'step.label' (or a list): false negatives.")

    @model_validator(mode="after")
    def _needed(self) -> CountsAggregate:
        if self.kind in ("precision", "f1") and not self.fp:
            raise ValueError(f"@fp: {self.kind} needs false positives ('step.label')")
        if self.kind in ("recall", "f1") and not self.fn:
            raise ValueError(f"@fn: {self.kind} needs false negatives ('step.label')")
        return self


class RankedPrecisionAggregate(_AggregateBase):
    """Rank-weighted precision: Σ_k precision@k · v_k / Σ_k v_k over items in order; 0 if none is positive."""

    kind: Literal["ranked_precision"]
    step: Ident
    positive: list[str] = Field(min_length=1)


class ScoreMeanAggregate(_AggregateBase):
    """Mean of the label scores of a verify step's items."""

    kind: Literal["score_mean"]
    step: Ident


Aggregate = Annotated[
    RatioAggregate | CountsAggregate | RankedPrecisionAggregate | ScoreMeanAggregate,
    Field(discriminator="kind"),
]


# ------------------------------------------------------------------------------------------------ spec
def _identity(value: Any) -> Any:
    return value


_STEP_FIELDS: dict[str, type[BaseModel]] = {"extract": ExtractStep, "verify": VerifyStep}


_AGGREGATES: dict[str, type[BaseModel]] = {
    "ratio": RatioAggregate,
    "precision": CountsAggregate,
    "recall": CountsAggregate,
    "f1": CountsAggregate,
    "ranked_precision": RankedPrecisionAggregate,
    "score_mean": ScoreMeanAggregate,
}


def _unknown_keys(path: str, data: Mapping[str, Any], fields: set[str], context: str = "") -> None:
    for key in data:
        if key not in fields:
            hint = difflib.get_close_matches(str(key), sorted(fields), n=1)
            extra = f" (did you mean '{hint[0]}'?)" if hint else f" (fields: {', '.join(sorted(fields))})"
            raise ValueError(f"@{path or key}: unknown field '{key}'{context}{extra}")


def _step_of(verifies: Mapping[str, VerifyStep], path: str, name: str) -> VerifyStep:
    """The verify step an aggregate names at ``path``."""
    if name not in verifies:
        hint = difflib.get_close_matches(name, list(verifies), n=1)
        extra = f" (did you mean '{hint[0]}'?)" if hint else f"; verify steps: {', '.join(verifies)}"
        raise ValueError(f"@aggregate.{path}: '{name}' is not a verify step{extra}")
    return verifies[name]


def _labels_of(path: str, step: VerifyStep, labels: Sequence[str]) -> None:
    """Each of ``labels`` (named at ``path``) is a label of ``step``."""
    known = step.scale().names
    for lab in labels:
        if lab not in known:
            raise ValueError(
                f"@aggregate.{path}: '{lab}' is not a label of step '{step.key}' (labels: {', '.join(known)})"
            )


@register_kind("pipeline")
class PipelineSpec(BaseSpec):
    """A declared multi-step metric: extract lists, verify each item, aggregate the verdict counts."""

    kind: Literal["pipeline"] = "pipeline"
    inputs: Inputs = Field(description="Record fields the steps read, and which are required.")
    steps: Annotated[
        list[Step],
        BeforeValidator(_identity, json_schema_input_type=list[_ExtractEntry | _VerifyEntry]),
    ] = Field(min_length=1, description="extract / verify steps, in order.")
    aggregate: Aggregate

    @model_validator(mode="before")
    @classmethod
    def _step_shorthand(cls, data: Any) -> Any:
        """``- extract: {...}`` in YAML becomes the tagged step the union expects; unknown keys are reported
        here, where the right model (and so the right did-you-mean) is known."""
        if not isinstance(data, dict):
            return data
        _unknown_keys("", data, set(cls.model_fields))
        agg = data.get("aggregate")
        if isinstance(agg, dict):
            kind = agg.get("kind")
            if kind is None:
                raise ValueError(f"@aggregate.kind: required field is missing; use one of: {', '.join(_AGGREGATES)}")
            if not isinstance(kind, str) or kind not in _AGGREGATES:
                hint = difflib.get_close_matches(str(kind), list(_AGGREGATES), n=1)
                extra = f" (did you mean '{hint[0]}'?)" if hint else f"; use one of: {', '.join(_AGGREGATES)}"
                raise ValueError(f"@aggregate.kind: unknown kind '{kind}'{extra}")
            agg_model = _AGGREGATES[kind]
            _unknown_keys("aggregate", agg, set(agg_model.model_fields), f" for kind {kind}")
            for name, f in agg_model.model_fields.items():
                if f.is_required() and name != "kind" and name not in agg:
                    raise ValueError(f"@aggregate.{name}: required for kind {kind}")
            for part, kinds, what in (("fp", ("precision", "f1"), "positives"), ("fn", ("recall", "f1"), "negatives")):
                if kind in kinds and not agg.get(part):
                    raise ValueError(f"@aggregate.{part}: {kind} needs false {what} ('step.label')")
        if not isinstance(data.get("steps"), list):
            return data
        out: list[Any] = []
        for i, entry in enumerate(data["steps"]):
            if isinstance(entry, BaseModel):
                out.append(entry)
                continue
            if not isinstance(entry, dict) or len(entry) != 1:
                raise ValueError(f"@steps[{i}]: a step is {{extract: {{...}}}} or {{verify: {{...}}}}")
            op, body = next(iter(entry.items()))
            if op not in _STEP_FIELDS:
                hint = difflib.get_close_matches(str(op), list(_STEP_FIELDS), n=1)
                extra = f" (did you mean '{hint[0]}'?)" if hint else "; use extract or verify"
                raise ValueError(f"@steps[{i}]: unknown step '{op}'{extra}")
            if not isinstance(body, dict):
                raise ValueError(f"@steps[{i}].{op}: must be a mapping of the step's fields")
            model: type[BaseModel] = _STEP_FIELDS[op]
            _unknown_keys(f"steps[{i}].{op}", body, {f.alias or n for n, f in model.model_fields.items()} - {"op"})
            out.append({**body, "op": op})
        return {**data, "steps": out}

    @model_validator(mode="after")
    def _consistent(self) -> PipelineSpec:
        self._check_steps()
        verifies = {s.key: s for s in self.steps if isinstance(s, VerifyStep)}
        if not verifies:
            raise ValueError("@steps: declare at least one verify step (the aggregate counts its verdicts)")
        self._check_aggregate(verifies)
        if self.name in self.depends_on:
            raise ValueError("@depends_on: a metric cannot depend on itself")
        if self.dataset_aggregate == "micro" and not self.poolable:
            raise ValueError(
                "@dataset_aggregate: ranked_precision cannot be pooled over items (it is a mean over ranks); "
                "use macro (the mean of the record scores)"
            )
        return self

    def _input(self, path: str, name: str) -> None:
        """``name`` (read at ``path``) is a declared input."""
        if name not in self.inputs:
            declared = list(self.inputs)
            hint = difflib.get_close_matches(name, declared, n=1)
            extra = f" (did you mean '{hint[0]}'?)" if hint else f"; inputs: {', '.join(declared)}"
            raise ValueError(f"@{path}: '{name}' is not among the inputs{extra}")

    def _check_steps(self) -> None:
        """Each step reads declared inputs (a verify step: an earlier extraction or a record's items), and no
        two steps share a name."""
        extracts: set[str] = set()
        verify_keys: set[str] = set()
        for i, step in enumerate(self.steps):
            if isinstance(step, ExtractStep):
                where = f"steps[{i}].extract"
                self._input(f"{where}.from", step.from_)
                for j, c in enumerate(step.context):
                    self._input(f"{where}.context[{j}]", c)
                if step.name in extracts or step.name in ITEM_FIELDS:
                    raise ValueError(f"@{where}.name: '{step.name}' names two extract steps (or a record field)")
                if step.name == UNITS:
                    raise ValueError(f"@{where}.name: '{UNITS}' is reserved (the record's item count); choose another")
                extracts.add(step.name)
            else:
                where = f"steps[{i}].verify"
                if step.each not in extracts and step.each not in ITEM_FIELDS:
                    raise ValueError(
                        f"@{where}.each: '{step.each}' is neither an earlier extract step nor chunks / triples"
                    )
                if step.each in ITEM_FIELDS:
                    self._input(f"{where}.each", step.each)
                for j, a in enumerate(step.against):
                    self._input(f"{where}.against[{j}]", a)
                if step.key in verify_keys or (step.key in extracts and step.key != step.each):
                    raise ValueError(
                        f"@{where}.name: '{step.key}' is taken by another step; give this verify step its own name"
                    )
                verify_keys.add(step.key)

    def _check_aggregate(self, verifies: Mapping[str, VerifyStep]) -> None:
        """The aggregate names verify steps and their labels, and ``max_over`` an input some step reads."""
        agg = self.aggregate
        if isinstance(agg, RatioAggregate | RankedPrecisionAggregate):
            _labels_of("positive", _step_of(verifies, "step", agg.step), agg.positive)
        elif isinstance(agg, ScoreMeanAggregate):
            if _step_of(verifies, "step", agg.step).scale().scores() is None:
                raise ValueError(f"@aggregate.step: score_mean needs label scores in step '{agg.step}'")
        else:
            for part in ("tp", "fp", "fn"):
                for ref in getattr(agg, part):
                    name, dot, lab = str(ref).partition(".")
                    if not dot:
                        raise ValueError(f"@aggregate.{part}: '{ref}' must be 'step.label'")
                    _labels_of(part, _step_of(verifies, part, name), [lab])
        if agg.max_over is not None:
            self._input("aggregate.max_over", agg.max_over)
            if not any(agg.max_over in _reads(s) for s in self.steps):
                raise ValueError(f"@aggregate.max_over: no step reads '{agg.max_over}'")

    # ------------------------------------------------------------------------------ derived facts
    @property
    def poolable(self) -> bool:
        """Ratios, counts and label-score means pool over items; rank-weighted precision does not."""
        return not isinstance(self.aggregate, RankedPrecisionAggregate)

    def required_inputs(self) -> list[str]:
        return [n for n, i in self.inputs.items() if i.required]

    def extract_step(self, name: str) -> ExtractStep:
        return next(s for s in self.steps if isinstance(s, ExtractStep) and s.name == name)

    def varies(self, step: ExtractStep | VerifyStep) -> bool:
        """Whether a step runs once per value of ``aggregate.max_over`` (it reads it, or verifies a list
        extracted from it)."""
        field = self.aggregate.max_over
        if field is None:
            return False
        if field in _reads(step):
            return True
        if isinstance(step, VerifyStep) and step.each not in ITEM_FIELDS:
            return self.varies(self.extract_step(step.each))
        return False


def _reads(step: ExtractStep | VerifyStep) -> set[str]:
    if isinstance(step, ExtractStep):
        return {step.from_, *step.context}
    return {*step.against, *([step.each] if step.each in ITEM_FIELDS else [])}
