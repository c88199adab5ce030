"""Composed flows: what strings the stages together for a user — the one front door of a run
(:func:`run_dataset` / :func:`arun_dataset`, :mod:`greval.flows.run`), ``greval.evaluate`` and its
:class:`Results`, ``spec try`` (:mod:`greval.flows.trial`), the review loop (:mod:`greval.flows.review`) and a
run's progress bar (:mod:`greval.flows.progress`). Names load on first use, so ``import greval`` stays light."""

from __future__ import annotations

from typing import TYPE_CHECKING

from greval._lazy import attach

if TYPE_CHECKING:
    from greval.flows.evaluation import aevaluate, evaluate
    from greval.flows.results import Results
    from greval.flows.run import DatasetRun, RunInterrupted, arun_dataset, run_dataset

_WHERE = {
    "Results": "greval.flows.results",
    "aevaluate": "greval.flows.evaluation",
    "evaluate": "greval.flows.evaluation",
    "DatasetRun": "greval.flows.run",
    "RunInterrupted": "greval.flows.run",
    "arun_dataset": "greval.flows.run",
    "run_dataset": "greval.flows.run",
}


__all__ = ["DatasetRun", "Results", "RunInterrupted", "aevaluate", "arun_dataset", "evaluate", "run_dataset"]

__getattr__, __dir__ = attach(__name__, _WHERE, __all__)
