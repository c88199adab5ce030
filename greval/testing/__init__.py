"""Test helpers for greval: a local OpenAI-compatible server speaking real HTTP.

Names are imported lazily so ``python -m greval.testing.openai_server`` does not import the
module twice (runpy warns when the package already imported it).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from greval.testing.openai_server import OpenAIServer, ServerConfig, build_app, generate_instance

__all__ = ["OpenAIServer", "ServerConfig", "build_app", "generate_instance"]


def __getattr__(name: str) -> Any:
    if name in __all__:
        return getattr(importlib.import_module("greval.testing.openai_server"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
