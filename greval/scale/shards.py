"""What every engine that judges a run in several processes shares: the plan dealt into shards
(:func:`split_plan`), what a shard is sent (:class:`Shard`) and says back (:class:`ShardReport`), a limiter
that tells the other shards when it cuts on a rate-limit episode and follows their cuts
(:class:`SignalledLimiter`), and the shards' activity added into the run's (:func:`add_reports`).

Two engines use it: Ray tasks (:mod:`greval.scale.ray_engine`) and local worker processes
(:mod:`greval.scale.processes`). Each shard is judged by the runner's own code
(:func:`greval.runner.judging.judge_plan`) against the same store, which is what holds a sharded run together:
verdicts are keyed by content and written idempotently, and each model judgement is claimed before its call.
Nothing here imports Ray or starts a process.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, Field

from greval.dataset.compact import Pairs
from greval.dataset.records import Record
from greval.llm.config import JudgeConfig
from greval.llm.limiter import AdaptiveLimiter
from greval.runner.job import RunJob
from greval.runner.options import EngineTotals, MetricSummary, RunOptions
from greval.runner.plan import Plan, PlannedRows, work_of
from greval.spec import BaseSpec
from greval.store.store import Store

__all__ = [
    "ACTIVITY",
    "SAME_EPISODE_S",
    "Shard",
    "ShardReport",
    "SignalledLimiter",
    "add_reports",
    "shard_options",
    "split_plan",
    "start_shards",
]

#: Cuts by other workers within this many seconds of a worker's own cut answer the same episode: not followed.
SAME_EPISODE_S = 1.0

#: The per-metric activity a shard counts, added into the run's (:class:`MetricSummary` fields).
ACTIVITY = ("judged", "reused", "tokens_in", "tokens_out", "tokens_cached", "calls")


def split_plan(plan: Plan, specs: Sequence[BaseSpec], shards: int) -> list[Plan]:
    """The plan's records dealt round-robin into at most ``shards`` plans (no empty one). A shard plan holds
    no snapshot: the driver links the run's snapshot once."""
    n = max(1, min(shards, len(plan.unique)))
    dealt: list[list[Record]] = [[] for _ in range(n)]
    for i, rec in enumerate(plan.unique):  # read once, in order (a large plan reads its file again here)
        dealt[i % n].append(rec)
    out = []
    for k in range(n):
        idx = range(k, len(plan.unique), n)
        pending = {name: [rows[i] for i in idx] for name, rows in plan.pending.items()}
        work = Counter(
            work_of(s, rec) for s in specs for rec, left in zip(dealt[k], pending[s.name], strict=True) if left
        )
        out.append(
            Plan.model_construct(
                unique=PlannedRows(records=dealt[k]),
                judge_keys=plan.judge_keys,
                pending=pending,
                judgements=work["judgement"],
                computed=work["computed"],
                skipped=work["skipped"],
                retry_errors=plan.retry_errors,
                sample=plan.sample,
                population=len(idx),
                items_drawn={},
                items_of={},
                records=len(idx),
                distinct_contents=len(idx),
                members=Pairs(),
                unstored=PlannedRows(),
            )
        )
    return out


def start_shards(job: RunJob) -> int:
    """The driver's part of :meth:`RunJob.start`: the records with nothing pending are in no shard and count as
    reused here (each shard counts its own); returns the judgements the shards hold between them."""
    plan = job.plan
    for s in job.specs:
        job.summaries[s.name].reused += plan.records - len(plan.unique)
    return sum(1 for s in job.specs for p in plan.pending[s.name] if p is not None)


def shard_options(options: RunOptions, shards: int) -> RunOptions:
    """A shard's options: the run's, with its share of the concurrency (at least 1)."""
    return options.model_copy(update={"concurrency": max(1, options.concurrency // shards)})


@dataclass(frozen=True)
class Shard:
    """What one shard's worker is sent: its part of the run's job, with the store by its reference (a connection
    does not travel), and its place among the shards."""

    specs: Sequence[BaseSpec]
    plan: Plan
    store_ref: str
    cfg: JudgeConfig
    run_id: str
    options: RunOptions
    index: int

    def job(self, store: Store) -> RunJob:
        """The shard's job on the worker's own store connection (its claims held as the shard's owner)."""
        # Every attempt at this shard holds its claims as one owner: a retry (its worker died, maybe on another
        # host, where the dead pid cannot be checked) takes over the claims of the attempt before at once
        # instead of waiting out their lease.
        store.owner = f"{self.run_id}/{self.index}"
        return RunJob(self.specs, self.cfg, store, self.plan, self.options, run_id=self.run_id)


class ShardReport(BaseModel):
    """What one shard's worker did (its activity; the figures are read from the store by the driver)."""

    shard: int
    pid: int
    metrics: list[MetricSummary]
    peak: int = 0
    rate_limited: int = 0
    followed_cuts: int = Field(0, description="Limit cuts made because another worker was rate limited.")
    notes: list[str] = Field(default_factory=list)
    cpu_s: float = Field(0.0, description="CPU seconds of the worker process (user + system), where it can tell.")


class SignalledLimiter(AdaptiveLimiter):
    """A shard's :class:`AdaptiveLimiter` that says when it cuts on a rate-limit episode (``tell``, with the
    429's Retry-After) and cuts when another shard did (:meth:`follow`; the provider's limit is per key, shared
    by every worker): once per cut signalled, unless this worker cut itself within :data:`SAME_EPISODE_S` (the
    same episode)."""

    def __init__(self, limit: int, adaptive: bool = True, *, shard: int, tell: Callable[[float | None], None]) -> None:
        super().__init__(limit, adaptive)
        self.shard = shard
        self.tell = tell
        self.seen = 0  # the signal's epoch followed last
        self.own_cut_at = -float("inf")  # wall time of this worker's last cut
        self.followed = 0  # cuts made on another worker's signal

    def on_rate_limited(self, started: float | None = None, retry_after: float | None = None) -> None:
        before = self.cuts
        super().on_rate_limited(started, retry_after)
        if self.cuts > before:
            self.own_cut_at = time.time()
            self.tell(retry_after)

    def follow(self, epoch: int, shard: int, at: float, retry_after: float | None) -> bool:
        """Apply the signal's latest cut if it is new, another worker's, and not this worker's own episode."""
        if epoch <= self.seen:
            return False
        self.seen = epoch
        if shard == self.shard or not self.adaptive or abs(at - self.own_cut_at) < SAME_EPISODE_S:
            return False
        self.cut(retry_after)  # the cut of AdaptiveLimiter.on_rate_limited, on another worker's evidence
        self.own_cut_at = at
        self.followed += 1
        return True


def add_reports(job: RunJob, reports: Iterable[ShardReport]) -> EngineTotals:
    """The shards' activity added into ``job.summaries``, and their totals: the peak concurrency summed, the
    rate-limited calls, the notes once each, and how many cuts followed another worker's."""
    reports = list(reports)
    for rep in reports:
        for m in rep.metrics:
            mine = job.summaries[m.spec]
            for name in ACTIVITY:
                setattr(mine, name, getattr(mine, name) + getattr(m, name))
    notes = list(dict.fromkeys(n for rep in reports for n in rep.notes))
    followed = sum(rep.followed_cuts for rep in reports)
    if followed:
        notes.append(f"{followed} concurrency cut(s) made because another worker was rate limited")
    return EngineTotals(
        peak=sum(rep.peak for rep in reports),
        rate_limited=sum(rep.rate_limited for rep in reports),
        notes=notes,
        workers=len({rep.shard for rep in reports}),
    )
