"""Serving the judge of a command: for a local model, llama-server runs while the command's block runs.

:func:`serve_judge` serves a judge already resolved (:meth:`greval.llm.config.JudgeConfig.parse`),
:func:`judge_session` resolves one by name and serves it. The only module of ``greval.llm.local`` that reads
the judge's config: the model file and its identity, which the config reads too, are :mod:`greval.llm.gguf`'s.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

from greval.errors import UserError
from greval.llm.config import JudgeConfig, Notify, resolve_judge
from greval.llm.local.common import LocalJudgeError
from greval.llm.local.server import LocalJudgeServer

__all__ = ["judge_session", "serve_judge"]


@contextlib.contextmanager
def serve_judge(cfg: JudgeConfig, notify: Notify, needed: bool = True) -> Iterator[JudgeConfig]:
    """For a local model, run the embedded llama-server while the block runs (only when calls are needed);
    what it starts is said through ``notify`` (any callable taking a string: ``print`` will do)."""
    if not cfg.is_local or not needed:
        yield cfg
        return
    with contextlib.ExitStack() as stack:
        try:
            server = LocalJudgeServer(model=None if cfg.provider == "local" else cfg.model)
            notify("starting the embedded local judge (llama.cpp) …")
            info = stack.enter_context(server).info
        except LocalJudgeError as exc:
            raise UserError(str(exc)) from None
        notify(
            f"local judge {info.identity} at {info.base_url} ({info.engine}; {info.threads} threads, "
            f"{info.parallel} slots)"
        )
        yield cfg.model_copy(update={"model": info.model, "base_url": info.base_url})


@contextlib.contextmanager
def judge_session(ref: str, notify: Notify, **params: Any) -> Iterator[JudgeConfig]:
    """Resolve the judge and, for a local model, serve it for the duration of the block."""
    with serve_judge(resolve_judge(ref, **params), notify) as cfg:
        yield cfg
