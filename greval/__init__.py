"""greval: LLM judges for RAG and GraphRAG that people can check.

The data's path through the package: spec (``greval.spec``) -> judge (``greval.judge``) -> run/store
(``greval.runner``, ``greval.store.store``) -> annotation (``greval.annotation``) -> agreement
(``greval.agreement``) -> report.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from greval._lazy import attach

if TYPE_CHECKING:
    from greval.dataset.records import Record, load_records
    from greval.errors import DataError, GrevalError, SpecError, StoreUnavailable, UserError
    from greval.flows import Results, aevaluate, evaluate
    from greval.flows.run import arun, run
    from greval.judge.evaluators import compile, compile_suite
    from greval.judge.judge import Judge
    from greval.llm.config import JudgeConfig, make_chat_model
    from greval.runner.options import RunOptions, RunSummary
    from greval.spec import BaseSpec, Spec, load_spec, load_spec_file, parse_spec, resolve_specs
    from greval.store.export import export_results
    from greval.store.results import load_results
    from greval.store.store import Store
    from greval.types import ItemVerdict, JudgeResult

# Names are imported on first use (PEP 562): `import greval` and the `greval` command stay light, and a
# Ctrl-C while a command starts is handled instead of landing in the middle of an import.
_WHERE = {
    "Results": "greval.flows.results",
    "aevaluate": "greval.flows.evaluation",
    "evaluate": "greval.flows.evaluation",
    "Record": "greval.dataset.records",
    "DataError": "greval.errors",
    "GrevalError": "greval.errors",
    "StoreUnavailable": "greval.errors",
    "SpecError": "greval.errors",
    "UserError": "greval.errors",
    "load_records": "greval.dataset.records",
    "compile": "greval.judge.evaluators",
    "compile_suite": "greval.judge.evaluators",
    "ItemVerdict": "greval.types",
    "Judge": "greval.judge.judge",
    "JudgeResult": "greval.types",
    "JudgeConfig": "greval.llm.config",
    "make_chat_model": "greval.llm.config",
    "export_results": "greval.store.export",
    "load_results": "greval.store.results",
    "RunOptions": "greval.runner.options",
    "RunSummary": "greval.runner.options",
    "arun": "greval.flows.run",
    "run": "greval.flows.run",
    "BaseSpec": "greval.spec",
    "Spec": "greval.spec",
    "load_spec": "greval.spec",
    "load_spec_file": "greval.spec",
    "parse_spec": "greval.spec",
    "resolve_specs": "greval.spec",
    "Store": "greval.store.store",
}


__all__ = [
    "BaseSpec",
    "DataError",
    "GrevalError",
    "ItemVerdict",
    "Judge",
    "JudgeConfig",
    "JudgeResult",
    "Record",
    "Results",
    "RunOptions",
    "RunSummary",
    "Spec",
    "SpecError",
    "Store",
    "StoreUnavailable",
    "UserError",
    "aevaluate",
    "arun",
    "compile",
    "compile_suite",
    "evaluate",
    "export_results",
    "load_records",
    "load_results",
    "load_spec",
    "load_spec_file",
    "make_chat_model",
    "parse_spec",
    "resolve_specs",
    "run",
]
__version__ = "0.1.0"

__getattr__, __dir__ = attach(__name__, _WHERE, [*__all__, "__version__"])
