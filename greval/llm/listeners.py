"""Whether LangChain would attach anything to a chat-model call: a callback handler (tracing, callbacks, hooks)
or an LLM cache. Imports LangChain's callback machinery (and with it langsmith's tracing context): only
imported once LangChain is loaded or configured (see :func:`greval.llm.openai_chat.langchain_may_listen`).
"""

from __future__ import annotations

from typing import Any

from langchain_core.callbacks import AsyncCallbackManager
from langchain_core.globals import get_llm_cache, get_verbose
from langchain_core.runnables.config import ensure_config

__all__ = ["default_listening", "listening"]


def listening(callbacks: Any, verbose: bool, tags: list[str] | None, metadata: dict[str, Any] | None) -> bool:
    """Whether LangChain would attach any callback handler to a call of a model with these settings.

    Built exactly as ``BaseChatModel.agenerate`` builds it, from the current run's config (a parent
    runnable's callbacks reach us through a context variable) and the model's own callbacks.
    """
    config = ensure_config()
    manager = AsyncCallbackManager.configure(
        config.get("callbacks"),
        callbacks,
        verbose,
        config.get("tags"),
        tags,
        config.get("metadata"),
        metadata,
    )
    return bool(manager.handlers)


def default_listening() -> str | None:
    """What LangChain would attach to a call of a ``ChatOpenAI`` built with its defaults (no callbacks, tags,
    metadata or cache of its own): a reason, or None when nothing."""
    if get_llm_cache() is not None:
        return "a global LLM cache is set"
    if listening(None, get_verbose(), None, None):
        return "LangChain callbacks or tracing listen"
    return None
