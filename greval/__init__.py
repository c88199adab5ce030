"""greval: LLM judges for RAG and GraphRAG that people can check.

The data's path through the package: spec (``greval.spec``) -> judge (``greval.judge.judge``) -> run/store
(``greval.runner``, ``greval.store.store``) -> annotation (``greval.annotation``) -> agreement
(``greval.agreement``) -> report.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from greval.dataset.records import Record, load_records
    from greval.judge.evaluators import compile_suite
    from greval.judge.judge import ItemVerdict, Judge, JudgeResult, compile
    from greval.llm.config import JudgeConfig, make_chat_model
    from greval.runner import RunOptions, RunSummary, arun, run
    from greval.spec import Spec, load_spec_file, parse_spec, resolve_specs
    from greval.store.results import export_results, load_results
    from greval.store.store import Store

# Names are imported on first use (PEP 562): `import greval` and the `greval` command stay light, and a
# Ctrl-C while a command starts is handled instead of landing in the middle of an import.
_WHERE = {
    "Record": "greval.dataset.records",
    "load_records": "greval.dataset.records",
    "compile_suite": "greval.judge.evaluators",
    "ItemVerdict": "greval.judge.judge",
    "Judge": "greval.judge.judge",
    "JudgeResult": "greval.judge.judge",
    "compile": "greval.judge.judge",
    "JudgeConfig": "greval.llm.config",
    "make_chat_model": "greval.llm.config",
    "export_results": "greval.store.results",
    "load_results": "greval.store.results",
    "RunOptions": "greval.runner",
    "RunSummary": "greval.runner",
    "arun": "greval.runner",
    "run": "greval.runner",
    "Spec": "greval.spec",
    "load_spec_file": "greval.spec",
    "parse_spec": "greval.spec",
    "resolve_specs": "greval.spec",
    "Store": "greval.store.store",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name]), name)
    raise AttributeError(f"module 'greval' has no attribute {name!r}")


__all__ = [
    "ItemVerdict",
    "Judge",
    "JudgeConfig",
    "JudgeResult",
    "Record",
    "RunOptions",
    "RunSummary",
    "Spec",
    "Store",
    "arun",
    "compile",
    "compile_suite",
    "export_results",
    "load_records",
    "load_results",
    "load_spec_file",
    "make_chat_model",
    "parse_spec",
    "resolve_specs",
    "run",
]
__version__ = "0.1.0"
