"""greval where its users already work: :func:`evaluate` / :func:`aevaluate` (a DataFrame, a list of dicts, a
Hugging Face Dataset or a file, judged in one call) and the :class:`Results` they return. Imported on first
use by ``greval.evaluate``, so ``import greval`` stays light."""

from __future__ import annotations

from greval.api.evaluate import aevaluate, evaluate
from greval.api.results import Results

__all__ = ["Results", "aevaluate", "evaluate"]
