"""A run from start to end: :func:`arun` (and :func:`run`, its sync wrapper) plans, records the run, judges the
plan here, in local worker processes or on Ray, and always ends the run with a status and a summary.

Before calling the model the store is asked what is still missing (:func:`greval.runner.plan.plan_work`), so a
finished run costs nothing and a killed one resumes where it stopped. The embedded llama.cpp judge is served
around a run that needs it (its package imported only then). Two imports wait for a run that needs them, at
this package's edge: the judge stack (:mod:`greval.runner.judging`; the openai SDK with the first call, LangChain
only when a call needs it: greval.llm.openai_chat) when the plan has work, and :mod:`greval.scale` when the
plan is judged in several processes (``RunOptions.workers``, or ``RunOptions.engine`` ``ray``); ``greval run``
on a finished job imports neither.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import logging
import os
import time
from collections.abc import Collection, Sequence
from types import ModuleType
from typing import TYPE_CHECKING, Any

from greval._sync import run_sync, work_saved
from greval.errors import DataError, UserError, option
from greval.judge.options import CallOptions
from greval.judge.outcome import config_for
from greval.llm.config import JudgeConfig, Notify, local_concurrency
from greval.llm.limiter import AdaptiveLimiter
from greval.runner.job import RunJob
from greval.runner.options import (
    EngineTotals,
    MetricSummary,
    ProgressHook,
    RunOptions,
    RunSummary,
    default_workers,
)
from greval.runner.plan import Plan, Rows, plan_work, sample_notes, sample_summary
from greval.spec import BaseSpec, order_specs
from greval.store.results import figures
from greval.store.store import Store

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

__all__ = ["arun", "check_arguments", "run"]


async def arun(
    specs: Sequence[BaseSpec],
    records: Rows,
    store: Store,
    cfg: JudgeConfig,
    *,
    model: BaseChatModel | None = None,
    options: RunOptions | None = None,
    dataset: str = "",
    progress: ProgressHook | None = None,
    plan: Plan | None = None,
    asked: Collection[str] | None = None,
    notify: Notify | None = None,
) -> RunSummary:
    """Judge every record with every spec; store each verdict as it arrives; return the summary.

    ``records`` is read once, chunk by chunk, unless ``plan`` (:func:`plan_work` already made for these
    records, store and judge) saves asking again; a plan made for another judge (a served local model's
    config), spec set or retry choice is made again, reading ``records`` again (a list or a DataFile can be).

    ``asked``: the names of the specs the caller asked for (None: every spec given); the others are dependencies
    pulled in, whose lack of verdicts alone fails nothing (:attr:`RunSummary.empty_metrics`). A judge named
    ``local`` or ``gguf:PATH`` (:meth:`JudgeConfig.parse`) without a ``base_url`` or ``model`` is served by the
    embedded llama.cpp server while calls are to be made, as ``greval run`` does (what it starts is said through
    ``notify``, any callable taking a string, else logged); its parallel slots are the default concurrency.
    Past what one event loop feeds, the plan is sharded across local worker processes (``RunOptions.workers``,
    :func:`default_workers`; greval.scale.processes): one run, one summary, each judgement paid once."""
    check_arguments(specs, records)
    opts = options or RunOptions()
    specs = order_specs(specs)
    wanted = {s.name: config_for(s, cfg).key for s in specs}
    if plan is None or not plan.made_for(wanted, opts.retry_errors, opts.sample):
        # Before the run is recorded: a dataset that cannot be read is the user's error, not a failed run.
        plan = plan_work(specs, records, store, cfg, opts.retry_errors, opts.sample)
    serve = model is None and cfg.base_url is None and cfg.is_local and plan.judgements > 0
    if serve and "concurrency" not in opts.model_fields_set:
        opts = opts.model_copy(update={"concurrency": local_concurrency()})
    job, where = _record(RunJob(specs, cfg, store, plan, opts, model=model), dataset)
    for name, m in job.summaries.items():
        m.asked = asked is None or name in asked
    started = time.perf_counter()
    calls = opts.call_options(cfg.samples, AdaptiveLimiter(opts.concurrency, adaptive=opts.adaptive))
    totals: EngineTotals | None = None
    status = "failed"
    try:
        with _served(cfg, notify) if serve else contextlib.nullcontext(cfg) as live:
            totals = await _judge(dataclasses.replace(job, cfg=live), calls, progress, where)
        status = "finished"
    except (KeyboardInterrupt, asyncio.CancelledError):
        status = "interrupted"
        raise
    finally:
        # Every verdict received is committed by now (judge_plan's end): a command's second Ctrl-C may end the
        # process without waiting for the bookkeeping below (a large dataset's snapshot: seconds, on 100k records).
        work_saved()
        # Every run ends with a status and a summary, however it ended (no run stays 'running').
        if totals is None:  # the judging failed: what the limiter saw here, none of the shards'
            totals = EngineTotals.of(calls) if where.here else EngineTotals(workers=where.workers)
        summary = _finish(job, status, time.perf_counter() - started, totals)
    return summary


def check_arguments(specs: object, records: object) -> None:
    """What a newcomer from Ragas / DeepEval types first (metric names, a DataFrame) gets one line pointing to
    :func:`greval.evaluate`, which takes both, instead of an AttributeError deep in the plan."""
    hint = "greval.evaluate(data, metrics) takes metric names and a DataFrame, a list of dicts or a file"
    if isinstance(specs, str | BaseSpec) or not all(isinstance(s, BaseSpec) for s in specs):  # type: ignore[attr-defined]
        raise UserError(f"greval.run takes loaded specs (greval.resolve_specs, greval.load_spec); {hint}")
    if isinstance(records, str | bytes) or type(records).__name__ in {"DataFrame", "Dataset"}:
        raise UserError(f"greval.run takes Records (greval.load_records) or hashed rows; {hint}")


def run(
    specs: Sequence[BaseSpec],
    records: Rows,
    store: Store,
    cfg: JudgeConfig,
    **kwargs: Any,
) -> RunSummary:
    """Synchronous wrapper around :func:`arun` for scripts and notebooks without an event loop."""
    return run_sync(arun(specs, records, store, cfg, **kwargs))


@dataclasses.dataclass(frozen=True)
class _Where:
    """Where a job is judged: on Ray, or in ``workers`` local processes (1: this one)."""

    ray: bool = False
    workers: int = 1

    @property
    def here(self) -> bool:
        return not self.ray and self.workers == 1


def _where(job: RunJob) -> _Where:
    """Where the job's judging goes, decided before the run is recorded (a wrong Ray address, or workers asked
    for with a chat model the caller built, is the user's error). Nothing to judge: here (no cluster is started
    or joined, no process)."""
    opts = job.options
    if opts.engine == "ray" and opts.workers is not None:
        raise UserError(f"{option('workers')} goes with {option('engine')} local (Ray splits a run into its shards)")
    if not job.plan.unique:
        return _Where()
    if opts.engine == "ray":
        _no_model(job, f"{option('engine')} ray")
        _ray_engine().connect(opts.ray_address)
        return _Where(ray=True)
    if opts.workers is None:
        return _Where(workers=_default_workers(job))
    if opts.workers > 1:
        _no_model(job, f"{option('workers')} {opts.workers}")
        if job.store.ref == ":memory:":
            raise UserError(f"{option('workers')} {opts.workers}: worker processes cannot share an in-memory store")
    return _Where(workers=opts.workers)


def _no_model(job: RunJob, what: str) -> None:
    if job.model is not None:
        raise UserError(f"{what}: each worker builds its chat model from the judge's config; pass no model")


def _default_workers(job: RunJob) -> int:
    """:func:`default_workers` for the job: one process for a chat model the caller built or an in-memory store,
    which no other process can use."""
    if job.model is not None or job.store.ref == ":memory:":
        return 1
    work = job.plan.judgements + job.plan.computed
    return default_workers(job.options.concurrency, work, _cores(), local_judge=job.cfg.is_local)


def _cores() -> int:
    """The cores this process may run on."""
    affinity = getattr(os, "sched_getaffinity", None)
    return len(affinity(0)) if affinity is not None else os.cpu_count() or 1


def _record(job: RunJob, dataset: str) -> tuple[RunJob, _Where]:
    """The specs and judges put in the store and the run started: (the job under its run id, where it is
    judged)."""
    store, opts = job.store, job.options
    if opts.experiment is not None and opts.promote:
        raise UserError(f"an experiment never changes a production version: drop {option('promote')}")
    store.put_specs(job.specs, job.keys, experiment=opts.experiment is not None)
    for c in {c.key: c for c in job.cfgs.values()}.values():
        store.put_judge(c)
    where = _where(job)
    run_id = store.start_run(
        dataset,
        job.cfg.key,
        [s.name for s in job.specs],
        opts.model_dump(mode="json"),
        kind="run" if opts.experiment is None else "experiment",
        purpose=opts.experiment,
        dataset_name=opts.dataset_name,
    )
    return dataclasses.replace(job, run_id=run_id), where


async def _judge(job: RunJob, calls: CallOptions, progress: ProgressHook | None, where: _Where) -> EngineTotals:
    """The job judged on Ray, in worker processes, or here (the judge stack imported only when the plan has
    work)."""
    if where.ray:
        shards: EngineTotals = await _ray_engine().judge_on_ray(job, progress)
        return shards
    if where.workers > 1:
        from greval.scale.processes import judge_in_processes  # imports the judge stack too

        parts: EngineTotals = await judge_in_processes(job, progress, where.workers)
        return parts
    if job.plan.unique:
        from greval.runner.judging import judge_plan  # the judge stack: only for a plan with work

        await judge_plan(job, calls, progress)
    else:
        job.start(progress)  # every judgement is in the store already
    return EngineTotals.of(calls)


def _ray_engine() -> ModuleType:
    """greval.scale.ray_engine: imported only by a run asked to use Ray (it imports this package)."""
    from greval.scale import ray_engine

    return ray_engine


def _served(cfg: JudgeConfig, notify: Notify | None) -> contextlib.AbstractContextManager[JudgeConfig]:
    """The embedded llama.cpp judge, served for the block (its package imported only for a local judge)."""
    if not cfg.is_local:
        return contextlib.nullcontext(cfg)
    from greval.llm.local.session import serve_judge

    return serve_judge(cfg, notify or logging.getLogger("greval.llm.local").info)


def _finish(job: RunJob, status: str, seconds: float, totals: EngineTotals) -> RunSummary:
    """The run's end, however it ended: claims dropped, the dataset's snapshot (every id) linked — records
    judged were stored with their first verdict —, the summary computed and stored with the status."""
    store, plan, run_id = job.store, job.plan, job.run_id
    assert run_id is not None
    store.release_claims()
    changed: DataError | None = None
    try:
        store.link_snapshot(run_id, plan.members, plan.unstored)  # may read a large plan's file again
    except DataError as exc:  # the file changed under the run: it fails, and still ends with its summary
        changed = exc
    experiment = job.options.experiment is not None
    if not experiment:  # what experiments judged of this run's records is the run's now
        store.adopt(run_id, [(job.keys[s.name], job.cfgs[s.name].key) for s in job.specs])
    metrics = _summarise(job)
    drawn = sample_summary(plan)
    notes = [lo.note(pulled_in=not job.summaries[lo.dependency].asked) for lo in plan.left_out]
    summary = RunSummary(
        run_id=run_id,
        records=plan.records,
        distinct_contents=plan.distinct_contents,
        judge=job.cfg.label,
        seconds=seconds,
        calls=sum(m.calls for m in metrics),
        metrics=metrics,
        peak_concurrency=totals.peak,
        rate_limited=totals.rate_limited,
        workers=totals.workers,
        notes=totals.notes + notes + (sample_notes(drawn, metrics) if drawn is not None else []),
        sample=drawn,
    )
    if status == "finished" and changed is None and not experiment:
        summary.notes += _production(job)
    store.finish_run(run_id, status if changed is None else "failed", summary.model_dump(mode="json"))
    if changed is not None and status == "finished":
        raise changed  # else the judging's own error (or the interrupt) is on its way
    return summary


def _production(job: RunJob) -> list[str]:
    """After a finished run: the production versions it changed (asked to promote, or the same spec under a
    new key), and what it judged that stays beside production — said in the run's notes."""
    assert job.run_id is not None
    asked = [s.name for s in job.specs] if job.options.promote else []
    follow = job.store.follow(job.specs, job.keys, promote=asked, run_id=job.run_id)
    said = [
        f"{p.name}: the production version is now {p.spec_hash}"
        + (" (the same spec, judged again under a new prompt layout or dependency)" if p.source == "same spec" else "")
        for p in follow.promoted
    ]
    return said + follow.notes


def _summarise(job: RunJob) -> list[MetricSummary]:
    """This run's activity beside the figures of every record id it was given (the whole dataset's state,
    not only what this run happened to call), computed where every other command computes them."""
    out = []
    for s in job.specs:
        m = job.summaries[s.name]
        found = figures(job.store, run_id=job.run_id, spec_key=job.keys[s.name], judge_key=job.cfgs[s.name].key)
        if found:
            activity = m.model_dump(
                include={"judged", "reused", "tokens_in", "tokens_out", "tokens_cached", "calls", "asked"}
            )
            m = MetricSummary(**{**found[0].model_dump(), **activity})
        out.append(m)
    return out
