"""The kind table: which model validates ``kind: <kind>``, and which module declares each built-in kind.

A kind's module is imported only when a spec of that kind is read, so a judge spec alone imports neither the
computed nor the pipeline declarations. Every kind is declared in ``greval.spec``, and only declared: which
evaluator runs a kind is greval.judge.evaluators' table (``EVALUATORS``), so ``greval spec validate`` imports no
LangChain whatever the kind.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from greval.spec.model import BaseSpec

SPEC_KINDS: dict[str, type[BaseSpec]] = {}


def register_kind(kind: str) -> Any:
    """Class decorator: make ``kind: <kind>`` in a spec file validate with this model."""

    def deco(cls: type[BaseSpec]) -> type[BaseSpec]:
        SPEC_KINDS[kind] = cls
        return cls

    return deco


#: The built-in kinds and the module that registers each. A module is imported when a spec of its kind is
#: read (a judge spec alone imports neither the computed nor the pipeline declarations);
#: an import error is not hidden.
BUILTIN_KINDS: dict[str, str] = {
    "judge": "greval.spec.model",
    "computed": "greval.spec.computed",
    "pipeline": "greval.spec.pipeline",
}


def kind_model(kind: str) -> type[BaseSpec] | None:
    """The model of one kind, its module imported if needed; None for an unknown kind."""
    if kind not in SPEC_KINDS and kind in BUILTIN_KINDS:
        importlib.import_module(BUILTIN_KINDS[kind])
    return SPEC_KINDS.get(kind)


def all_kinds() -> dict[str, type[BaseSpec]]:
    """Every kind: the built-in ones, in a fixed order (their modules register themselves on import), then
    any other registered."""
    for module in BUILTIN_KINDS.values():
        importlib.import_module(module)
    return {**{kind: SPEC_KINDS[kind] for kind in BUILTIN_KINDS}, **SPEC_KINDS}
