"""A package face whose names load on first use (PEP 562), written once for every face of greval: ``import
greval`` and the ``greval`` command stay light, and a name's module is imported only when someone asks for it."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def attach(
    package: str, where: Mapping[str, str], shown: Any = ()
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: each name of ``where`` is read from its module (name →
    module path) when first asked for; ``dir()`` lists them beside ``shown`` (e.g. the face's own names)."""

    def __getattr__(name: str) -> Any:
        if name in where:
            return getattr(importlib.import_module(where[name]), name)
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    def __dir__() -> list[str]:
        return sorted({*where, *shown})

    return __getattr__, __dir__


__all__ = ["attach"]
