"""The local OpenAI-compatible test server under its first name: what tests, scripts and users import, and the
command ``python -m greval.testing.openai_server --port 0`` (prints ``READY http://HOST:PORT/v1``), which is how
`OpenAIServer` starts it. The code lives in `greval.testing.openai`, one module per job; `build_app` (the only name
here that needs aiohttp) is imported on first use.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from greval.testing.openai.logprobs import tokenize
from greval.testing.openai.process import OpenAIServer, main
from greval.testing.openai.rules import ServerConfig
from greval.testing.openai.schema_gen import generate_instance

if TYPE_CHECKING:
    from greval.testing.openai.app import build_app

__all__ = ["OpenAIServer", "ServerConfig", "build_app", "generate_instance", "main", "tokenize"]


def __getattr__(name: str) -> Any:
    if name == "build_app":
        return importlib.import_module("greval.testing.openai.app").build_app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


if __name__ == "__main__":
    main()
