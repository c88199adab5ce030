"""A local OpenAI-compatible chat-completions server for greval's tests and benchmarks.

It is a real HTTP server (aiohttp), so tests exercise the same client stack as production (``openai`` SDK,
``langchain-openai``, retries, timeouts) while answers stay deterministic and free. It understands the three
ways ``ChatOpenAI.with_structured_output`` asks for structured output (``json_schema`` response format, function
calling, JSON mode) and fabricates schema-valid instances from a stable hash of the prompt, so answers differ
between items yet repeat exactly for the same request. Faults, latency and malformed answers are injected
through scripted rules posted to ``/_admin/script``.

One module per job: `schema_gen` (JSON Schema → instances), `rules` (knobs, fault rules, stats), `protocol`
(requests and answers in OpenAI's JSON), `logprobs` (token log-probabilities), `app` (the aiohttp server and its
admin API: the only module that needs aiohttp), `process` (`OpenAIServer`, the server as a subprocess, and the
command ``python -m greval.testing.openai_server --port 0``, which prints ``READY http://HOST:PORT/v1``).
Nothing is imported here, so `OpenAIServer` and `generate_instance` work where aiohttp is not installed.
"""

from __future__ import annotations

import importlib.util
from typing import Final

__all__ = ["AIOHTTP_MISSING", "missing_aiohttp", "require_aiohttp"]

#: The one line a user sees when the server cannot run here.
AIOHTTP_MISSING: Final = (
    "greval's OpenAI test server needs aiohttp, which is not installed: pip install 'greval[testing]'"
)


def missing_aiohttp(exc: ModuleNotFoundError) -> ModuleNotFoundError:
    """What to raise for a failed ``import aiohttp``: the install hint when aiohttp itself is missing (not when
    aiohttp is there and one of its own dependencies is not: that error is raised as it is)."""
    if exc.name != "aiohttp":
        return exc
    return ModuleNotFoundError(AIOHTTP_MISSING, name="aiohttp")


def require_aiohttp() -> None:
    """Raise the install hint (ModuleNotFoundError) before starting a server that could not run."""
    if importlib.util.find_spec("aiohttp") is None:
        raise ModuleNotFoundError(AIOHTTP_MISSING, name="aiohttp")
