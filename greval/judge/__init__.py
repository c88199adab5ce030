"""② Spec → evaluator: one record in, one result out (LLM judges, pipelines, computed metrics).

``judge.py`` holds the LLM judge (:class:`Judge`: calling, retrying, the error ladder), ``prompt.py`` the
messages built from a spec, ``parse.py`` the answer turned into verdicts, ``options.py`` how an evaluator
calls its model (:class:`CallOptions`, one frozen bundle per run), ``evaluators.py`` the one dispatch from a
spec's kind to its evaluator (:func:`make_evaluator`, :func:`compile`, :func:`compile_suite`),
``pipeline.py`` and ``computed/`` the other kinds. The verdict models a judge asks for are part of the spec
(:mod:`greval.spec.verdict`). Names are imported on first use (PEP 562): the options, the outcome ladder and
the log-probability arithmetic import no LangChain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from greval._lazy import attach

if TYPE_CHECKING:
    from greval.judge.evaluators import Evaluator, compile, compile_suite, make_evaluator, register_evaluator
    from greval.judge.judge import Judge
    from greval.judge.options import CallOptions

_WHERE = {
    "CallOptions": "greval.judge.options",
    "Evaluator": "greval.judge.evaluators",
    "register_evaluator": "greval.judge.evaluators",
    "compile_suite": "greval.judge.evaluators",
    "make_evaluator": "greval.judge.evaluators",
    "compile": "greval.judge.evaluators",
    "Judge": "greval.judge.judge",
}


__all__ = ["CallOptions", "Evaluator", "Judge", "compile", "compile_suite", "make_evaluator", "register_evaluator"]

__getattr__, __dir__ = attach(__name__, _WHERE, __all__)
