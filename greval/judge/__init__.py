"""② Spec → evaluator: one record in, one result out (LLM judges, pipelines, computed metrics).

``judge.py`` holds the LLM judge (:class:`Judge`: calling, retrying, the error ladder), ``prompt.py`` the
messages built from a spec, ``parse.py`` the answer turned into verdicts, ``verdict.py`` the verdict models
built from a scale, ``evaluators.py`` the dispatch from any spec kind (:func:`make_evaluator`,
:func:`compile`, :func:`compile_suite`), ``pipeline.py`` and ``computed.py`` the other kinds. Names are
imported on first use (PEP 562): reading a spec's verdict schema (``greval.judge.verdict``) must not import
LangChain.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from greval.judge.evaluators import Evaluator, compile, compile_suite, make_evaluator
    from greval.judge.judge import Judge

_WHERE = {
    "Evaluator": "greval.judge.evaluators",
    "compile_suite": "greval.judge.evaluators",
    "make_evaluator": "greval.judge.evaluators",
    "compile": "greval.judge.evaluators",
    "Judge": "greval.judge.judge",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'greval.judge' has no attribute {name!r}")


__all__ = ["Evaluator", "Judge", "compile", "compile_suite", "make_evaluator"]
