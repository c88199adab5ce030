"""Spec edits, validated: a candidate becomes a spec version only if it loads as a spec and builds a judge
(verdict schema, few-shot examples) — before it costs a judgement."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel

from greval.align.ports import Edits
from greval.errors import SpecError
from greval.spec import CategoricalScale, Spec, parse_spec
from greval.spec.verdict import check_examples, check_judge, verdict_models

_ANSWERS: dict[str, type[BaseModel]] = {}


def _answer_model(spec: Spec) -> type[BaseModel]:
    """The verdict schema of the spec's shape (name, scale, outputs, target), checked once per shape: most
    candidates change words and examples, not the answer a judge gives."""

    shape = json.dumps(spec.model_dump(mode="json", include={"name", "scale", "outputs", "target"}), sort_keys=True)
    if shape not in _ANSWERS:
        check_judge(spec.model_copy(update={"examples": []}))
        if len(_ANSWERS) > 256:
            _ANSWERS.clear()
        _ANSWERS[shape] = verdict_models(spec)[0]
    return _ANSWERS[shape]


def validated(data: Mapping[str, Any], source: str) -> Spec:
    """A spec from its data, checked as ``greval spec validate`` checks a file (its verdict schema and its
    few-shot examples against it); raises SpecError."""

    spec = parse_spec(dict(data), source)
    if not isinstance(spec, Spec):  # pragma: no cover - align edits judge specs only
        raise SpecError(source, "kind", "not a judge spec")
    check_examples(spec, _answer_model(spec))
    return spec


def scale_items(spec: Spec) -> tuple[str, ...]:
    """The labels, or the value ranges, in the spec's order (what ``Edits.scale`` describes)."""
    if isinstance(spec.scale, CategoricalScale):
        return tuple(lab.name for lab in spec.scale.labels)
    return tuple(r.text for r in spec.scale.ranges)


def apply_edits(spec: Spec, edits: Edits, source: str) -> Spec:
    """The spec with the non-empty edits applied; raises SpecError when the result is not a valid spec."""
    data = spec.model_dump(mode="json")
    if edits.description.strip():
        data["description"] = edits.description.strip()
    if edits.instructions.strip():
        data["instructions"] = edits.instructions.strip()
    steps = [s.strip() for s in edits.steps if s.strip()]
    if steps:
        data["steps"] = steps
    texts = [t.strip() for t in edits.scale]
    if any(texts):
        key = "labels" if isinstance(spec.scale, CategoricalScale) else "ranges"
        parts = data["scale"][key]
        if len(texts) != len(parts):
            raise SpecError(source, f"scale.{key}", f"{len(texts)} descriptions proposed for {len(parts)} {key}")
        for part, text in zip(parts, texts, strict=True):
            if text:
                part["description"] = text
    return validated(data, source)


__all__ = ["apply_edits", "scale_items", "validated"]
