"""The verdict schema a judge spec asks for: pydantic models generated from its scale (reason first).

Part of the declaration: loading a spec checks its few-shot examples against it, and ``greval spec validate``
checks what building a judge checks (verdict schema, outputs, examples) without importing the model-calling
code. :mod:`greval.judge.judge` asks the model for these answers.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model

from greval.errors import SpecError
from greval.spec.model import CategoricalScale, Spec

__all__ = [
    "check_examples",
    "check_judge",
    "first_error",
    "output_fields",
    "outputs_model",
    "verdict_fields",
    "verdict_models",
]

_PY_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "list[string]": list[str],
    "list[integer]": list[int],
    "list[number]": list[float],
}


def verdict_fields(spec: Spec) -> dict[str, Any]:
    reason = (
        str,
        Field(description="Your step-by-step reasoning, following the evaluation steps. Write it first."),
    )
    if isinstance(spec.scale, CategoricalScale):
        labels = tuple(spec.scale.names)
        label_type: Any = Literal.__getitem__(labels)
        verdict: Any = (label_type, Field(description="The label: " + ", ".join(labels)))
        return {"reason": reason, "label": verdict}
    s = spec.scale
    bounded = Annotated[int, Field(ge=s.min, le=s.max)]
    return {"reason": reason, "value": (bounded, Field(description=f"An integer from {s.min} to {s.max}"))}


def output_fields(spec: Spec) -> dict[str, Any]:
    return {name: (_PY_TYPES[o.type], Field(description=o.description)) for name, o in spec.outputs.items()}


_FORBID = ConfigDict(extra="forbid")


def verdict_models(spec: Spec) -> tuple[type[BaseModel], type[BaseModel]]:
    """(answer model the judge must produce, model of one item's verdict).

    Record metrics: the answer is ``{reason, label|value, <outputs>}``. Many metrics: ``{verdicts: [{id,
    reason, label|value}], <outputs>}``. The reason precedes the verdict in every schema.
    """
    title = "".join(w.capitalize() for w in spec.name.split("_"))
    if spec.each is None:
        answer = create_model(f"{title}Verdict", __config__=_FORBID, **verdict_fields(spec), **output_fields(spec))
        return answer, answer
    noun = {"chunks": "chunk", "triples": "triple", "turns": "assistant turn", "steps": "step"}[spec.each]
    item: type[BaseModel] = create_model(
        f"{title}ItemVerdict",
        __config__=_FORBID,
        id=(str, Field(description=f"The {noun} id, exactly as listed")),
        **verdict_fields(spec),
    )
    items_type: Any = list.__class_getitem__(item)
    many: type[BaseModel] = create_model(
        f"{title}Verdicts",
        __config__=_FORBID,
        verdicts=(items_type, Field(description=f"One verdict per listed {noun} id, each id exactly once")),
        **output_fields(spec),
    )
    return many, item


def outputs_model(spec: Spec, answer: type[BaseModel]) -> type[BaseModel] | None:
    """The model of the spec's extra outputs alone (None when it declares none)."""
    return create_model(f"{answer.__name__}Outputs", **output_fields(spec)) if spec.outputs else None


def check_examples(spec: Spec, answer: type[BaseModel]) -> None:
    """Every few-shot example's output must be an answer the judge could give."""
    for i, ex in enumerate(spec.examples):
        try:
            answer.model_validate(ex.output)
        except ValidationError as exc:
            raise SpecError(spec.name, f"examples[{i}].output", first_error(exc)) from None


def check_judge(spec: Spec) -> None:
    """What building a :class:`greval.judge.judge.Judge` checks before any model call: the verdict schema, the
    outputs model and the few-shot examples (raises :class:`SpecError`)."""
    answer, _ = verdict_models(spec)
    answer.model_json_schema()
    outputs_model(spec, answer)
    check_examples(spec, answer)


def first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    where = ".".join(str(p) for p in err["loc"])
    return f"{where}: {err['msg']}" if where else str(err["msg"])
