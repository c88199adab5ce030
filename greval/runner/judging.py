"""The judging of a plan: every pending (record, spec) judgement, concurrently, each stored on arrival.

For each record, metrics run in dependency levels: the metrics of one level concurrently, a ``depends_on``
metric after the ones it reads. :func:`settle` is the one sequence around a new judgement (claim, a second
look at the store, the call, the write), what a run and ``greval serve`` both go through. Verdicts are
committed in groups (:class:`GroupCommit`): at most :data:`GROUP_DELAY_S` after they arrive, one transaction
for many; a killed run loses, and judges again, only its last group.

This module imports the judge stack (LangChain): the run's driver imports it only when a plan has work, so a
finished job re-run imports none of it.
"""

from __future__ import annotations

import asyncio
import gc
import itertools
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import cast

from greval.dataset.records import Record
from greval.judge.evaluators import Evaluator, make_evaluator
from greval.judge.options import CallOptions
from greval.judge.outcome import NoCall
from greval.llm.config import JudgeConfig, judge_model
from greval.llm.openai_chat import OpenAIChat
from greval.runner.job import RunJob
from greval.runner.options import ProgressHook
from greval.runner.plan import drawn_items
from greval.spec import BaseSpec
from greval.store.store import Store
from greval.types import JudgeResult, not_applicable

__all__ = [
    "CLAIM_BATCH",
    "CLAIM_POLL_S",
    "GROUP_DELAY_S",
    "GROUP_MAX",
    "NOT_CLAIMED",
    "GroupCommit",
    "Put",
    "judge_plan",
    "settle",
]

#: How often a run waiting for a judgement another run holds looks again (seconds).
CLAIM_POLL_S = 0.2

#: Records whose first claims are taken at once (at most; and at most the run's concurrency).
CLAIM_BATCH = 64

#: A judgement not claimed ahead (see :class:`_Judging`).
NOT_CLAIMED = object()

#: Group commit (see :class:`GroupCommit`): a verdict is committed at most this long after it arrived, or at
#: once when this many are waiting.
GROUP_DELAY_S = 0.05
GROUP_MAX = 64

#: How a judgement is written: :meth:`GroupCommit.put` in a run, :meth:`Store.put_result` where it must be
#: committed at once. Arguments: run id, spec key, judge config, record, result, partial.
Put = Callable[[str | None, str, JudgeConfig, Record, JudgeResult, bool], None]

#: A record and, per spec name, its pending item ids (None: nothing left for that spec).
_Todo = tuple[Record, dict[str, list[str] | None]]


class GroupCommit:
    """A run's verdicts, committed in groups instead of one transaction each.

    A commit costs more client CPU than writing the verdict's rows (~0.25 ms of ~0.5 ms per verdict on this
    machine: scripts/bench_run.py); grouped, the pages a verdict touches are written once per group. A
    verdict waits at most :data:`GROUP_DELAY_S`, or until :data:`GROUP_MAX` wait. Claims are still committed
    one by one before their calls (a call must not wait). A process killed meanwhile loses only the
    verdicts of its last group: their claims die with it, and the next run judges exactly those again.
    """

    def __init__(self, store: Store) -> None:
        self.store = store
        self._timer: asyncio.TimerHandle | None = None
        self._error: BaseException | None = None  # a timed commit that failed: raised by the next put or close

    def put(
        self, run_id: str | None, spec_key: str, cfg: JudgeConfig, record: Record, res: JudgeResult, partial: bool
    ) -> None:
        """:meth:`Store.put_result`, committed with its group."""
        if self._error is not None:
            raise self._error
        self.store.put_result(run_id, spec_key, cfg, record, res, partial, defer=True)
        if self.store.queued >= GROUP_MAX:
            self.commit()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(GROUP_DELAY_S, self.commit)

    def commit(self) -> None:
        """Commit the waiting verdicts (one transaction)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        try:
            self.store.flush()
        except Exception as exc:  # a timer has no caller: the next put, or the run's end, raises it
            self._error = exc

    def close(self) -> None:
        """Commit what waits and raise a failed timed commit (the run's end, however it ended)."""
        self.commit()
        if self._error is not None:
            raise self._error


async def judge_plan(job: RunJob, calls: CallOptions, progress: ProgressHook | None = None) -> None:
    """Judge a job's plan under its run, already recorded (neither starts nor finishes it), counting into
    ``job.summaries``; every model call is made as ``calls`` says (its limiter bounds them). The verdicts are
    committed and the claims dropped however it ends. What the driver does in this process, and what each Ray
    task does with its shard of the plan (greval.scale)."""
    group = GroupCommit(job.store)
    try:
        try:
            await _Judging(job, calls, group, progress).run()
        finally:
            group.close()
    finally:
        job.store.release_claims()


class _Judging:
    """One :func:`judge_plan`: the evaluators, the progress counts and the claims taken ahead."""

    def __init__(self, job: RunJob, calls: CallOptions, group: GroupCommit, progress: ProgressHook | None) -> None:
        self.job, self.calls, self.group, self.progress = job, calls, group, progress
        self.total = self.done = self.errors = 0
        # Claims taken ahead: the first level's model judgements of the next batch of records are claimed in one
        # transaction and asked about again in one query per metric, instead of a transaction and a query before
        # each call (~0.15 ms of CPU a call: scripts/bench_run.py). (spec name, record hash) -> what is pending
        # now; a judgement another run holds is left out, and judge_one waits for it as before.
        self.claimed: dict[tuple[str, str], object] = {}
        self.ready: deque[_Todo] = deque()
        self.ahead = [s for s in job.levels[0] if s.needs_model] if job.levels else []
        self.batch = max(1, min(job.options.concurrency, CLAIM_BATCH))
        self.judges: dict[str, Evaluator] = {}
        self.built: object = None  # the chat model built here (None: the caller's own, or none needed)

    async def run(self) -> None:
        plan, specs = self.job.plan, self.job.specs
        self.total = self.job.start(self.progress)
        if not plan.unique:
            return  # nothing to judge: no chat model, no evaluator
        self.judges = self._evaluators()
        # Each record with work left, made as the workers reach it: a plan past PLAN_HOLD rows reads its file
        # again here, so the dataset is never in memory at once.
        todo = ((rec, {s.name: plan.pending[s.name][i] for s in specs}) for i, rec in enumerate(plan.unique))
        it = ((r, p) for r, p in todo if any(v is not None for v in p.values()))
        # Enough records in flight to keep every slot busy, never the whole dataset at once.
        workers = max(1, min(len(plan.unique), self.job.options.concurrency * 2))
        # Everything alive now (modules, specs, the plan) lives for the whole run: freezing it keeps each
        # full garbage collection from walking ~200k long-lived objects (74-224 ms a collection in a 768-call
        # run, ~0.3 ms per call; scripts/bench_run.py). Unfrozen afterwards, so nothing escapes collection.
        gc.freeze()
        try:
            tasks = [asyncio.ensure_future(self._worker(it)) for _ in range(workers)]
            try:
                await asyncio.gather(*tasks)
            except BaseException:
                # One worker failing (the judge unavailable, an interrupt) stops the others before the run is
                # recorded: none may call the model or write to the store afterwards.
                for t in tasks:
                    t.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                raise
        finally:
            gc.unfreeze()
            if isinstance(self.built, OpenAIChat):  # the judge built for this run: its connections end with it
                await self.built.aclose()

    def _evaluators(self) -> dict[str, Evaluator]:
        """Every spec's evaluator. The chat model is built only when some judge call is still needed (the
        plan's count of them, greval.runner.plan.work_of): a run with only computed or skipped work left needs
        no key, no server and no network."""
        job = self.job
        chat = job.model or (judge_model(job.cfg) if job.plan.judgements > 0 else None)
        self.built = None if job.model is not None else chat
        return {
            s.name: NoCall(s) if chat is None and s.needs_model else make_evaluator(s, chat, self.calls)
            for s in job.specs
        }

    async def _worker(self, it: Iterator[_Todo]) -> None:
        while (nxt := self._next_record(it)) is not None:
            await self._judge_record(*nxt)

    def _next_record(self, it: Iterator[_Todo]) -> _Todo | None:
        if not self.ready:
            self.ready.extend(itertools.islice(it, self.batch))
            if not self.ready:
                return None
            self._claim_ahead()
        return self.ready.popleft()

    def _claim_ahead(self) -> None:
        job = self.job
        for spec in self.ahead:
            key, jkey = job.keys[spec.name], job.cfgs[spec.name].key
            want = [rec for rec, pend in self.ready if pend[spec.name] is not None]
            granted = job.store.claim_many([(key, jkey, rec.hash) for rec in want])
            mine = [rec for rec, ok in zip(want, granted, strict=True) if ok]
            if mine:
                now = job.store.pending(key, jkey, mine, spec.each, job.options.retry_errors)
                self.claimed.update(((spec.name, rec.hash), p) for rec, p in zip(mine, now, strict=True))

    async def _judge_record(self, rec: Record, pend: dict[str, list[str] | None]) -> None:
        results: dict[str, JudgeResult] = {}
        for level in self.job.levels:
            if len(level) == 1:  # no task for a lone metric
                await self._judge_one(rec, level[0], pend[level[0].name], results)
            else:
                await asyncio.gather(*(self._judge_one(rec, s, pend[s.name], results) for s in level))

    async def _judge_one(
        self, rec: Record, spec: BaseSpec, pending: list[str] | None, results: dict[str, JudgeResult]
    ) -> None:
        job = self.job
        if pending is None:
            stored = job.store.result(job.keys[spec.name], job.cfgs[spec.name].key, rec)
            if stored is not None:
                results[spec.name] = stored
            return
        ahead = self.claimed.pop((spec.name, rec.hash), NOT_CLAIMED)
        held, res = await settle(
            job, spec, rec, pending, results, evaluator=self.judges[spec.name], put=self.group.put, ahead=ahead
        )
        if held is not None:
            results[spec.name] = held
        m = job.summaries[spec.name]
        if res is None:  # judged by another run meanwhile
            m.reused += 1
        else:
            if not not_applicable(res):  # the one definition of judged (MetricSummary.judged)
                m.judged += 1
            m.tokens_in += res.tokens_in
            m.tokens_out += res.tokens_out
            m.tokens_cached += res.tokens_cached
            m.calls += len(res.calls)
            if not res.ok and not not_applicable(res):
                self.errors += 1
        self.done += 1
        if self.progress:
            self.progress(self.done, self.total, self.errors)


async def settle(
    job: RunJob,
    spec: BaseSpec,
    rec: Record,
    pending: list[str],
    results: Mapping[str, JudgeResult],
    *,
    evaluator: Evaluator,
    put: Put,
    ahead: object = NOT_CLAIMED,
) -> tuple[JudgeResult | None, JudgeResult | None]:
    """One judgement the store lacked when the caller looked (``pending``: its missing items, ``[""]`` for a
    record metric): the one sequence every caller of a model goes through (``greval run``, ``greval serve``).

    For a model metric: take the judgement's claim in ``job.store`` (waiting while another live run holds it)
    and ask the store again, since another run may have judged it meanwhile (``ahead``: both already done for a
    batch, the pending items found then). Then judge what is still missing with ``evaluator``, with the
    dependency verdicts in ``results``, and write it with ``put`` under ``job.run_id``. Returns (what the store
    now holds for it — merged with earlier items for a partial judgement, else the new result —, the new result
    or None when nothing was left to judge).
    """
    store, key, scfg = job.store, job.keys[spec.name], job.cfgs[spec.name]
    if spec.needs_model:
        if ahead is NOT_CLAIMED:
            while not store.claim(key, scfg.key, rec.hash):
                await asyncio.sleep(CLAIM_POLL_S)
            ahead = store.pending(key, scfg.key, [rec], spec.each, job.options.retry_errors)[0]
        left = drawn_items(job.options.sample, spec, rec, cast("list[str] | None", ahead))
        if left is None:
            return store.result(key, scfg.key, rec), None
        pending = left
    deps = {d: results[d] for d in spec.depends_on if d in results}
    only = pending if spec.each and pending and len(pending) < len(rec.items(spec.each)) else None
    res = await evaluator.ajudge(rec, deps, only)
    put(job.run_id, key, scfg, rec, res, only is not None)
    if only is not None or not res.ok:
        merged = store.result(key, scfg.key, rec)
        return (merged if merged is not None else res), res
    return res, res
