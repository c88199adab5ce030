"""``greval gate``, in one package: the conditions and their checks (:mod:`greval.gate.checks`: a figure of an
agreement report or a dataset score against a threshold, on its value or an end of its CI), what a gate reads
from a store (:mod:`greval.gate.gate`: agreement, a metric's dataset score on a run's records, its change
against a baseline) and its JUnit XML report (:mod:`greval.gate.junit`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from greval._lazy import attach

if TYPE_CHECKING:
    from greval.gate.checks import Check, Condition, GateResult, check, evaluate
    from greval.gate.gate import GateOutcome, GateRequest, find_run, run_gate
    from greval.gate.junit import write_junit

_WHERE = {
    "Check": "greval.gate.checks",
    "Condition": "greval.gate.checks",
    "GateResult": "greval.gate.checks",
    "check": "greval.gate.checks",
    "evaluate": "greval.gate.checks",
    "GateOutcome": "greval.gate.gate",
    "GateRequest": "greval.gate.gate",
    "find_run": "greval.gate.gate",
    "run_gate": "greval.gate.gate",
    "write_junit": "greval.gate.junit",
}

__all__ = [
    "Check",
    "Condition",
    "GateOutcome",
    "GateRequest",
    "GateResult",
    "check",
    "evaluate",
    "find_run",
    "run_gate",
    "write_junit",
]

__getattr__, __dir__ = attach(__name__, _WHERE, __all__)
