"""Test helpers for greval: a local OpenAI-compatible server speaking real HTTP (`greval.testing.openai`) and a
throwaway PostgreSQL server (`greval.testing.postgres`).

Names are imported lazily (PEP 562): ``import greval.testing`` costs nothing, ``python -m
greval.testing.openai_server`` does not import the module twice (runpy warns when the package already imported
it), and only what runs the server needs aiohttp (the ``testing`` extra): without it, `build_app` and starting an
`OpenAIServer` raise one clear line, ``… needs aiohttp, which is not installed: pip install 'greval[testing]'``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

from greval._lazy import attach

if TYPE_CHECKING:
    from greval.testing.openai.app import build_app
    from greval.testing.openai.process import OpenAIServer
    from greval.testing.openai.rules import ServerConfig
    from greval.testing.openai.schema_gen import generate_instance

__all__ = ["OpenAIServer", "ServerConfig", "build_app", "generate_instance"]

#: Where each name lives.
_HOMES: Final = {
    "OpenAIServer": "greval.testing.openai.process",
    "ServerConfig": "greval.testing.openai.rules",
    "build_app": "greval.testing.openai.app",
    "generate_instance": "greval.testing.openai.schema_gen",
}

__getattr__, __dir__ = attach(__name__, _HOMES, __all__)
