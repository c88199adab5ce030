"""greval: LLM judges for RAG and GraphRAG that people can check.

The data's path through the package: spec (``greval.spec``) -> judge (``greval.judge``) -> run/store
(``greval.runner``, ``greval.store``) -> annotation (``greval.annotation``) -> agreement
(``greval.agreement``) -> report.
"""

from __future__ import annotations

from greval.data import Record, load_records
from greval.evaluators import compile_suite
from greval.judge import ItemVerdict, Judge, JudgeResult, compile
from greval.models import JudgeConfig, make_chat_model
from greval.results import export_results, load_results
from greval.runner import RunOptions, RunSummary, arun, run
from greval.spec import Spec, load_spec_file, parse_spec, resolve_specs
from greval.store import Store

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
