"""One judging job: :class:`RunJob`, what :func:`greval.runner.judging.judge_plan`, :func:`settle` and a Ray
shard share instead of a dozen loose parameters.

A job is a plan (:class:`greval.runner.plan.Plan`) to judge with these specs and this judge into this store,
under a run already recorded (``run_id``; None for a served judgement, which belongs to no run), with the
run's options; it counts what it does into ``summaries``. The keys, per-spec judges and dependency levels are
derived once, when the job is made.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from greval.judge.outcome import config_for
from greval.llm.config import JudgeConfig
from greval.runner.options import MetricSummary, ProgressHook, RunOptions
from greval.runner.plan import Plan
from greval.spec import BaseSpec, dependency_levels, order_specs
from greval.store.store import Store, spec_keys

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

__all__ = ["RunJob", "new_summaries"]


def new_summaries(
    specs: Sequence[BaseSpec], keys: dict[str, str], cfgs: dict[str, JudgeConfig]
) -> dict[str, MetricSummary]:
    """Empty per-metric activity of a run (or of one shard of it), filled in by judging."""
    return {
        s.name: MetricSummary(
            spec=s.name,
            spec_hash=s.hash,
            spec_key=keys[s.name],
            kind=s.kind,
            judge=cfgs[s.name].label,
            judge_key=cfgs[s.name].key,
        )
        for s in specs
    }


@dataclass(frozen=True)
class RunJob:
    """A plan to judge: the specs (put in dependency order), the judge, the store, the run's options and id,
    and the per-metric activity it counts into (new, empty ones unless given: a run's, shared by its parts)."""

    specs: Sequence[BaseSpec]
    #: The run's judge (while a local judge is served: its live address); each spec's is in ``cfgs``.
    cfg: JudgeConfig
    store: Store
    plan: Plan
    options: RunOptions = field(default_factory=RunOptions)
    run_id: str | None = None
    summaries: dict[str, MetricSummary] = field(default_factory=dict)
    #: A chat model the caller built (None: built from ``cfg`` when some call is needed).
    model: BaseChatModel | None = None
    keys: dict[str, str] = field(init=False)
    cfgs: dict[str, JudgeConfig] = field(init=False)
    levels: list[list[BaseSpec]] = field(init=False)

    def __post_init__(self) -> None:
        specs = order_specs(self.specs)
        keys = spec_keys(specs)
        cfgs = {s.name: config_for(s, self.cfg) for s in specs}
        object.__setattr__(self, "specs", specs)
        object.__setattr__(self, "keys", keys)
        object.__setattr__(self, "cfgs", cfgs)
        object.__setattr__(self, "levels", dependency_levels(specs))
        if not self.summaries:
            self.summaries.update(new_summaries(specs, keys, cfgs))

    def start(self, progress: ProgressHook | None) -> int:
        """Count every judgement the plan leaves out as reused, report that nothing is done yet, and return the
        judgements left: what is missing is decided up front, so the progress total is the real work. Verdicts
        are keyed by content, so records sharing an earlier one's content are reused (listed under their own
        ids in the run's snapshot all the same)."""
        total = 0
        for s in self.specs:
            left = sum(1 for p in self.plan.pending[s.name] if p is not None)
            self.summaries[s.name].reused += self.plan.records - left
            total += left
        if progress:
            progress(0, total, 0)
        return total
