"""Run specs over a dataset: one asyncio path, bounded adaptive concurrency, every verdict stored on arrival.

Work is (record, spec) judgements. For each record, metrics run in dependency levels: the metrics of one
level concurrently, a ``depends_on`` metric after the ones it reads. Before calling the model the store is
asked what is still missing, so a finished run costs nothing and a killed one resumes where it stopped.
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from langchain_core.language_models import BaseChatModel
from pydantic import BaseModel, Field

from greval._sync import run_sync
from greval.data import Record
from greval.evaluators import Evaluator, config_for, make_evaluator
from greval.execution import AdaptiveLimiter, JudgeUnavailable, RetryPolicy
from greval.judge import JudgeResult, Method, not_applicable
from greval.models import JudgeConfig, make_chat_model
from greval.spec import BaseSpec, CategoricalScale, Spec, ValueScale, dependency_levels, order_specs
from greval.store import Store, spec_keys


class RunOptions(BaseModel):
    """How to run (none of it changes a verdict's identity)."""

    concurrency: int = Field(8, ge=1, description="Model calls in flight at most.")
    adaptive: bool = Field(True, description="Halve concurrency on 429s, then grow back.")
    method: Method | str = Field("auto", description="Structured-output method, or auto with fallbacks.")
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    retry_errors: bool = Field(False, description="Judge again what earlier runs recorded as errors.")
    direct: bool = Field(
        True,
        description="Call OpenAI-compatible models without LangChain's per-call machinery when no callback, "
        "tracer or cache is attached (same requests, less client CPU; see greval.direct).",
    )


class MetricSummary(BaseModel):
    """What one metric produced in a run (this run's new verdicts plus those reused from the store)."""

    spec: str
    spec_hash: str
    judged: int = 0
    reused: int = 0
    failed: int = 0
    verdicts: int = 0
    items_failed: int = 0
    distribution: dict[str, int] = Field(default_factory=dict)
    mean_score: float | None = None
    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0
    errors: dict[str, int] = Field(default_factory=dict)


class RunSummary(BaseModel):
    run_id: str
    records: int
    judge: str
    seconds: float
    calls: int
    metrics: list[MetricSummary]
    peak_concurrency: int
    rate_limited: int

    @property
    def failed(self) -> int:
        return sum(m.failed for m in self.metrics)


ProgressHook = Callable[[int, int, int], None]  # (done, total, errors)


def _error_kind(text: str | None) -> str:
    if not text:
        return "unknown"
    return text.split(":")[0][:60]


async def arun(
    specs: Sequence[BaseSpec],
    records: Sequence[Record],
    store: Store,
    cfg: JudgeConfig,
    *,
    model: BaseChatModel | None = None,
    options: RunOptions | None = None,
    dataset: str = "",
    progress: ProgressHook | None = None,
) -> RunSummary:
    """Judge every record with every spec; store each verdict as it arrives; return the summary."""
    opts = options or RunOptions()
    specs = order_specs(specs)
    keys = spec_keys(specs)
    cfgs = {s.name: config_for(s, cfg) for s in specs}
    levels = dependency_levels(specs)
    store.put_specs(specs, keys)
    for c in {c.key: c for c in cfgs.values()}.values():
        store.put_judge(c)
    run_id = store.start_run(dataset, cfg.key, [s.name for s in specs], opts.model_dump(mode="json"))
    started = time.perf_counter()
    summaries = {s.name: MetricSummary(spec=s.name, spec_hash=s.hash) for s in specs}

    # What is missing, decided up front: the progress bar's total is the real amount of work.
    pending = {s.name: store.pending(keys[s.name], cfgs[s.name].key, records, s.each, opts.retry_errors) for s in specs}
    todo = [(rec, {s.name: pending[s.name][i] for s in specs}) for i, rec in enumerate(records)]
    total = 0
    for s in specs:
        reused = sum(1 for p in pending[s.name] if p is None)
        summaries[s.name].reused += reused
        total += len(records) - reused
    # The chat model is built only when some judge call is still needed: a finished run needs no key,
    # no server and no network.
    calls_needed = any(p[s.name] is not None and s.needs_model for _, p in todo for s in specs)
    chat = model or (make_chat_model(cfg) if calls_needed else None)
    limiter = AdaptiveLimiter(opts.concurrency, adaptive=opts.adaptive)
    method: Any = opts.method
    judges: dict[str, Evaluator] = {
        s.name: make_evaluator(
            s, chat, method=method, samples=cfg.samples, policy=opts.retry, limiter=limiter, direct=opts.direct
        )
        for s in specs
        if chat is not None or not s.needs_model
    }
    done = errors = 0
    if progress:
        progress(0, total, 0)

    async def judge_one(
        rec: Record, spec: BaseSpec, pending: list[str] | None, results: dict[str, JudgeResult]
    ) -> None:
        nonlocal done, errors
        scfg = cfgs[spec.name]
        if pending is None:
            stored = store.result(keys[spec.name], scfg.key, rec)
            if stored is not None:
                results[spec.name] = stored
            return
        deps = {d: results[d] for d in spec.depends_on if d in results}
        only = pending if spec.each and pending and len(pending) < len(rec.items(spec.each)) else None
        res = await judges[spec.name].ajudge(rec, deps, only)
        store.put_result(run_id, keys[spec.name], scfg, rec, res, partial=only is not None)
        if only is not None or not res.ok:
            merged = store.result(keys[spec.name], scfg.key, rec)
            results[spec.name] = merged if merged is not None else res
        else:
            results[spec.name] = res
        m = summaries[spec.name]
        m.judged += 1
        m.tokens_in += res.tokens_in
        m.tokens_out += res.tokens_out
        m.calls += len(res.calls)
        if not res.ok and not not_applicable(res):
            errors += 1
            m.failed += 1
            for v in res.verdicts:
                if v.status == "error":
                    m.errors[_error_kind(v.error)] = m.errors.get(_error_kind(v.error), 0) + 1
            if res.error:
                m.errors[_error_kind(res.error)] = m.errors.get(_error_kind(res.error), 0) + 1
        done += 1
        if progress:
            progress(done, total, errors)

    async def judge_record(rec: Record, pend: dict[str, list[str] | None]) -> None:
        results: dict[str, JudgeResult] = {}
        for level in levels:
            await asyncio.gather(*(judge_one(rec, s, pend[s.name], results) for s in level))

    queue = [(r, p) for r, p in todo if any(v is not None for v in p.values())]
    # Enough records in flight to keep every slot busy, never the whole dataset at once.
    workers = max(1, min(len(queue), opts.concurrency * 2))
    it = iter(queue)

    async def worker() -> None:
        for rec, pend in it:
            await judge_record(rec, pend)

    status = "finished"
    # Everything alive now (modules, specs, the dataset) lives for the whole run: freezing it keeps each
    # full garbage collection from walking ~200k long-lived objects (74-224 ms a collection in a 768-call
    # run, ~0.3 ms per call; scripts/bench_run.py). Unfrozen afterwards, so nothing escapes collection.
    gc.freeze()
    try:
        await asyncio.gather(*(worker() for _ in range(workers)))
    except JudgeUnavailable:
        status = "failed"
        raise
    except BaseException:
        status = "interrupted"
        raise
    finally:
        gc.unfreeze()
        # Each judged record was stored with its first verdict (nothing to store before the first call);
        # the rest — already judged earlier, or not reached if the run stopped — are stored now.
        store.put_records(records, run_id)
        summary = _summarise(store, run_id, specs, keys, cfgs, summaries)
        result = RunSummary(
            run_id=run_id,
            records=len(records),
            judge=cfg.label,
            seconds=time.perf_counter() - started,
            calls=sum(m.calls for m in summary),
            metrics=summary,
            peak_concurrency=limiter.peak,
            rate_limited=limiter.rate_limited,
        )
        store.finish_run(run_id, status, result.model_dump(mode="json"))
    return result


def pending_calls(
    specs: Sequence[BaseSpec], records: Sequence[Record], store: Store, cfg: JudgeConfig, retry_errors: bool = False
) -> int:
    """How many (record, metric) judgements still need the judge model (0: no server, key or network needed)."""
    keys = spec_keys(order_specs(specs))
    return sum(
        sum(1 for p in store.pending(keys[s.name], cfg.key, records, s.each, retry_errors) if p is not None)
        for s in specs
        if s.needs_model
    )


def _summarise(
    store: Store,
    run_id: str,
    specs: Sequence[BaseSpec],
    keys: dict[str, str],
    cfgs: dict[str, JudgeConfig],
    summaries: dict[str, MetricSummary],
) -> list[MetricSummary]:
    """Fill the distribution, mean and failures from the store: the state of the whole dataset (every
    record of this run), not only of what this run happened to call."""
    out = []
    for s in specs:
        m = summaries[s.name]
        groups = store.verdict_tally(keys[s.name], cfgs[s.name].key, run_id)
        m.items_failed = sum(g.verdicts for g in groups if g.status == "error")
        ok = [g for g in groups if g.status == "ok"]
        m.verdicts = sum(g.verdicts for g in ok)
        if not isinstance(s, Spec):  # computed / pipeline metrics: the record-level scores
            ok = [g for g in ok if g.whole_record]
        scale = s.scale if isinstance(s, Spec) else None
        if isinstance(scale, CategoricalScale):
            counts = Counter[str]()
            for g in ok:
                counts[g.label or ""] += g.verdicts
            m.distribution = {name: counts.get(name, 0) for name in scale.names}
        elif isinstance(scale, ValueScale):
            vcounts = Counter[int]()
            for g in ok:
                if g.value is not None:
                    vcounts[g.value] += g.verdicts
            m.distribution = {str(v): vcounts.get(v, 0) for v in range(scale.min, scale.max + 1)}
        scored = sum(g.scored for g in ok)
        m.mean_score = sum(g.score_sum for g in ok) / scored if scored else None
        out.append(m)
    return out


def run(
    specs: Sequence[BaseSpec],
    records: Sequence[Record],
    store: Store,
    cfg: JudgeConfig,
    **kwargs: Any,
) -> RunSummary:
    """Synchronous wrapper around :func:`arun` for scripts and notebooks without an event loop."""
    return run_sync(arun(specs, records, store, cfg, **kwargs))
