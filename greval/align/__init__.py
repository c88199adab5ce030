"""⑦ Align: from people's labels to a better judge, proven on labels the search never read.

``greval align`` reads a spec's stored verdicts and the human labels in the store, splits the labelled records
once into a search part and a test part, searches candidate spec versions (few-shot examples, rewrites,
label order) by cross-validation on the search part, and compares the best with the current spec once on the
test part: adopted only when the paired bootstrap CI of the gain lies above zero. See docs/align.md.

Modules, one job each: ``models`` (the typed boundary), ``split`` (by record, folds), ``view`` (what a step may
read), ``objective`` (the agreement stage's figures on answers and resamples), ``generators/`` (few-shot,
rewrite, settings), ``edits`` (validated spec edits), ``search`` (rounds, cross-validation, selection),
``decide`` (the test-part comparison), ``meter`` (the budget), ``core`` (the whole run, without I/O),
``labels`` (units from the store), ``optimizer`` (the optimizer's questions as specs), ``store_judge`` (judging
through the run path), ``output`` and ``page`` (files), ``api`` (:func:`align`, :func:`plan`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from greval._lazy import attach

if TYPE_CHECKING:
    from greval.align.entry import Target, aalign, align, plan, run_options
    from greval.align.models import AlignOptions, AlignPlan, AlignResult, Decision, Objective

_WHERE = {
    "Target": "greval.align.entry",
    "aalign": "greval.align.entry",
    "align": "greval.align.entry",
    "plan": "greval.align.entry",
    "run_options": "greval.align.entry",
    "AlignOptions": "greval.align.models",
    "AlignPlan": "greval.align.models",
    "AlignResult": "greval.align.models",
    "Decision": "greval.align.models",
    "Objective": "greval.align.models",
}


__all__ = [
    "AlignOptions",
    "AlignPlan",
    "AlignResult",
    "Decision",
    "Objective",
    "Target",
    "aalign",
    "align",
    "plan",
    "run_options",
]

__getattr__, __dir__ = attach(__name__, _WHERE, __all__)
