"""③ One run over a dataset: plan what the store lacks, judge it concurrently, store every verdict on arrival.

``options.py`` what a run is asked and what it reports (:class:`RunOptions`, :class:`RunSummary`),
``plan.py`` what is still to do (:func:`plan_work`, :class:`Plan`, :func:`work_of`), ``job.py`` one judging
job (:class:`RunJob`: what judging, :func:`settle` and a Ray shard share), ``judging.py`` the judging itself
(:func:`judge_plan`, :func:`settle`, :class:`GroupCommit`), ``driver.py`` a run from start to end (:func:`arun`,
:func:`run`). ``greval.runner.NAME`` keeps working for every public name, imported on first use (PEP 562):
the judge stack only comes with the judging.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from greval._lazy import attach

if TYPE_CHECKING:
    from greval.runner.driver import arun, run
    from greval.runner.job import RunJob, new_summaries
    from greval.runner.judging import (
        CLAIM_BATCH,
        CLAIM_POLL_S,
        GROUP_DELAY_S,
        GROUP_MAX,
        GroupCommit,
        Put,
        judge_plan,
        settle,
    )
    from greval.runner.options import (
        EngineTotals,
        MetricSummary,
        ProgressHook,
        RunOptions,
        RunSummary,
        SampleSummary,
    )
    from greval.runner.plan import (
        PLAN_CHUNK,
        LeftOut,
        Plan,
        Rows,
        Work,
        drawn_items,
        plan_work,
        sample_notes,
        unique_contents,
        work_of,
    )

_WHERE = {
    "arun": "greval.runner.driver",
    "run": "greval.runner.driver",
    "RunJob": "greval.runner.job",
    "new_summaries": "greval.runner.job",
    "CLAIM_BATCH": "greval.runner.judging",
    "CLAIM_POLL_S": "greval.runner.judging",
    "GROUP_DELAY_S": "greval.runner.judging",
    "GROUP_MAX": "greval.runner.judging",
    "GroupCommit": "greval.runner.judging",
    "Put": "greval.runner.judging",
    "judge_plan": "greval.runner.judging",
    "settle": "greval.runner.judging",
    "EngineTotals": "greval.runner.options",
    "MetricSummary": "greval.runner.options",
    "ProgressHook": "greval.runner.options",
    "RunOptions": "greval.runner.options",
    "RunSummary": "greval.runner.options",
    "SampleSummary": "greval.runner.options",
    "PLAN_CHUNK": "greval.runner.plan",
    "LeftOut": "greval.runner.plan",
    "Plan": "greval.runner.plan",
    "Rows": "greval.runner.plan",
    "Work": "greval.runner.plan",
    "drawn_items": "greval.runner.plan",
    "plan_work": "greval.runner.plan",
    "sample_notes": "greval.runner.plan",
    "unique_contents": "greval.runner.plan",
    "work_of": "greval.runner.plan",
}


__all__ = [
    "CLAIM_BATCH",
    "CLAIM_POLL_S",
    "GROUP_DELAY_S",
    "GROUP_MAX",
    "PLAN_CHUNK",
    "EngineTotals",
    "GroupCommit",
    "LeftOut",
    "MetricSummary",
    "Plan",
    "ProgressHook",
    "Put",
    "Rows",
    "RunJob",
    "RunOptions",
    "RunSummary",
    "SampleSummary",
    "Work",
    "arun",
    "drawn_items",
    "judge_plan",
    "new_summaries",
    "plan_work",
    "run",
    "sample_notes",
    "settle",
    "unique_contents",
    "work_of",
]

__getattr__, __dir__ = attach(__name__, _WHERE, __all__)
