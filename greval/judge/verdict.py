"""Moved to :mod:`greval.spec.verdict` (the verdict schema is part of a spec's declaration); this path keeps
working for code that imports it from here."""

from greval.spec.verdict import (
    check_examples,
    check_judge,
    first_error,
    output_fields,
    outputs_model,
    verdict_fields,
    verdict_models,
)

__all__ = [
    "check_examples",
    "check_judge",
    "first_error",
    "output_fields",
    "outputs_model",
    "verdict_fields",
    "verdict_models",
]
