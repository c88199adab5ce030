"""Run specs over a dataset: one asyncio path, bounded adaptive concurrency, every verdict stored on arrival.

Work is (record, spec) judgements. For each record, metrics run in dependency levels: the metrics of one
level concurrently, a ``depends_on`` metric after the ones it reads. Before calling the model the store is
asked what is still missing, so a finished run costs nothing and a killed one resumes where it stopped.
Verdicts are committed in groups (:class:`GroupCommit`): at most :data:`GROUP_DELAY_S` after they arrive, one
transaction for many; a killed run loses, and judges again, only its last group.

Records flow through in chunks (:func:`plan_work`): rows → content hashes → what the store still lacks →
Records only for the rows with work left. A finished job re-run holds no dataset in memory (only its
(id, hash) pairs, the snapshot) and imports no judge stack: the evaluators are built when there is work.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import logging
import time
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal, cast

from pydantic import BaseModel, ConfigDict, Field

from greval._sync import run_sync
from greval.dataset.records import HashedRow, Record
from greval.dataset.sample import Sample, sample_items, sample_records
from greval.errors import UserError
from greval.judge.logprobs import LogprobRequest
from greval.judge.outcome import NoCall, config_for, missing_inputs, unfed
from greval.llm.config import JudgeConfig, Notify, local_concurrency, make_chat_model
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.retry import RetryPolicy
from greval.spec import BaseSpec, dependency_levels, order_specs
from greval.store.results import MetricFigures, figures
from greval.store.store import Store, spec_keys
from greval.types import JudgeResult, not_applicable

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from greval.judge.evaluators import Evaluator

#: How often a run waiting for a judgement another run holds looks again (seconds).
CLAIM_POLL_S = 0.2

#: Records whose first claims are taken at once (at most; and at most the run's concurrency).
CLAIM_BATCH = 64

#: A judgement not claimed ahead (see _judge_all).
_NOT_CLAIMED = object()

#: Group commit (see :class:`GroupCommit`): a verdict is committed at most this long after it arrived, or at
#: once when this many are waiting.
GROUP_DELAY_S = 0.05
GROUP_MAX = 64

#: Records planned at a time: the store is asked about one chunk's hashes at once (see Store.pending).
PLAN_CHUNK = 2000

#: What a run reads: Records, or a dataset file's rows already hashed (greval.dataset.records.DataFile).
Rows = Iterable[Record] | Iterable[HashedRow]


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


class RunOptions(BaseModel):
    """How to run (none of it changes a verdict's identity)."""

    concurrency: int = Field(8, ge=1, description="Model calls in flight at most.")
    adaptive: bool = Field(True, description="Halve concurrency once per rate-limit episode, then grow back.")
    method: str = Field(
        "auto",
        description="Structured-output method (json_schema, function_calling, json_mode), or auto with fallbacks.",
    )
    retry: RetryPolicy = Field(default_factory=RetryPolicy)
    retry_errors: bool = Field(False, description="Judge again what earlier runs recorded as errors.")
    direct: bool = Field(
        True,
        description="Call OpenAI-compatible models without LangChain's per-call machinery when no callback, "
        "tracer or cache is attached (same requests, less client CPU; see greval.llm.call).",
    )
    logprobs: int | None = Field(
        None,
        ge=0,
        le=20,
        description="Ask an OpenAI-compatible judge for token log-probabilities with this many alternatives per "
        "token (None: not asked): each new verdict gets its token_confidence. Not part of the judge's identity: "
        "verdicts stored without it are reused as they are (their token_confidence stays empty).",
    )
    sample: Sample | None = Field(
        None,
        description="Judge a reproducible random sample: N records and / or at most N items per record of a "
        "many-metric (greval.dataset.sample). Not part of any verdict's identity: a sampled verdict is the "
        "verdict an unsampled run would store, so it is reused by either.",
    )
    engine: Literal["local", "ray"] = Field(
        "local",
        description="Where the judging runs: this process (local), or shards of the pending records in Ray tasks "
        "(ray: greval.scale; each task opens the store by its reference and judges with this same runner).",
    )
    shards: int | None = Field(
        None, ge=1, description="With engine ray: tasks to split into (None: the cluster's CPUs)."
    )
    ray_address: str | None = Field(
        None, description="With engine ray: 'auto' or ray://host:port to join a cluster (None: start a local one)."
    )


class MetricSummary(MetricFigures):
    """One metric in a run: what this run did (judged, reused, calls, tokens) beside the figures of every
    record id the run was given (:class:`greval.store.results.MetricFigures`, the same figures every command shows)."""

    judged: int = Field(
        0,
        description="Judgements made by this run: a verdict or an error stored. A record the metric does not "
        "apply to (an input it requires is absent) is not judged: the figures count it as skipped.",
    )
    reused: int = Field(0, description="Judgements already in the store (no call).")
    tokens_in: int = 0
    tokens_out: int = 0
    calls: int = 0
    asked: bool = Field(
        True, description="Asked for by the caller (False: only pulled in as a dependency of a metric asked for)."
    )


class SampleSummary(BaseModel):
    """What a sampled run drew, stored with its summary (the run's options hold the :class:`Sample` asked for)."""

    seed: int
    records: int | None = Field(None, description="--sample N as asked (None: every record).")
    items: int | None = Field(None, description="--sample-items N as asked (None: every item).")
    records_drawn: int = Field(description="Records judged (the run's snapshot).")
    records_of: int = Field(description="Records drawn from: the dataset after --map, --limit and repeated rows.")
    items_drawn: dict[str, int] = Field(
        default_factory=dict,
        description="Many-metric -> items drawn over the run's records (each record id counted, as figures count).",
    )
    items_of: dict[str, int] = Field(default_factory=dict, description="Many-metric -> items of the run's records.")


class RunSummary(BaseModel):
    run_id: str
    records: int
    distinct_contents: int = Field(0, description="Distinct record contents (identical records cost one call).")
    judge: str
    seconds: float
    calls: int
    metrics: list[MetricSummary]
    peak_concurrency: int
    rate_limited: int
    notes: list[str] = Field(
        default_factory=list, description="What the run has to say once (token log-probabilities, the sample)."
    )
    sample: SampleSummary | None = Field(None, description="What a sampled run drew (None: not sampled).")

    @property
    def failed(self) -> int:
        """Records (per metric) with a stored error: no verdict at all, or some items without one."""
        return sum(m.failed + m.partial for m in self.metrics)

    @property
    def empty_metrics(self) -> list[MetricSummary]:
        """What failed, the one definition (``greval run`` exits 1 for it): the metrics asked for that have no
        verdict at all on a non-empty dataset. A dependency only pulled in is not among them: where it failed, the
        metrics reading it failed too; where it did not apply, they were judged without it (a note says so)."""
        return [m for m in self.metrics if m.asked and self.records and m.ok + m.partial == 0]


ProgressHook = Callable[[int, int, int], None]  # (done, total, errors)


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
    ``notify``, any callable taking a string, else logged); its parallel slots are the default concurrency."""
    opts = options or RunOptions()
    specs = order_specs(specs)
    keys = spec_keys(specs)
    cfgs = {s.name: config_for(s, cfg) for s in specs}
    wanted = {s.name: cfgs[s.name].key for s in specs}
    if (
        plan is None
        or plan.judge_keys != wanted
        or plan.retry_errors != opts.retry_errors
        or plan.sample != opts.sample
    ):
        # Before the run is recorded: a dataset that cannot be read is the user's error, not a failed run.
        plan = plan_work(specs, records, store, cfg, opts.retry_errors, opts.sample)
    serve = model is None and cfg.base_url is None and cfg.is_local and plan.judgements > 0
    if serve and "concurrency" not in opts.model_fields_set:
        opts = opts.model_copy(update={"concurrency": local_concurrency()})
    store.put_specs(specs, keys)
    for c in {c.key: c for c in cfgs.values()}.values():
        store.put_judge(c)
    on_ray = opts.engine == "ray" and bool(plan.unique)  # nothing to judge: no cluster started or joined
    if on_ray:
        from greval.scale.ray_engine import connect

        if model is not None:
            raise UserError("--engine ray: each worker builds its chat model from the judge's config; pass no model")
        connect(opts.ray_address)  # before the run is recorded: a wrong address is the user's error
    run_id = store.start_run(dataset, cfg.key, [s.name for s in specs], opts.model_dump(mode="json"))
    started = time.perf_counter()
    summaries = new_summaries(specs, keys, cfgs)
    for name, m in summaries.items():
        m.asked = asked is None or name in asked
    limiter = AdaptiveLimiter(opts.concurrency, adaptive=opts.adaptive)
    logprobs = None if opts.logprobs is None else LogprobRequest(opts.logprobs)
    totals = EngineTotals()
    status = "failed"
    try:
        with _served(cfg, notify) if serve else contextlib.nullcontext(cfg) as live:
            if on_ray:
                from greval.scale.ray_engine import judge_on_ray

                totals = await judge_on_ray(specs, plan, store.ref, live, run_id, summaries, opts, progress)
            else:
                await judge_plan(specs, plan, store, live, run_id, summaries, model, opts, limiter, progress, logprobs)
        status = "finished"
    except (KeyboardInterrupt, asyncio.CancelledError):
        status = "interrupted"
        raise
    finally:
        # Every run ends with a status and a summary, however it ended (no run stays 'running'). Records
        # judged were stored with their first verdict; the dataset's snapshot (every id) goes in now.
        store.release_claims()
        store.link_snapshot(run_id, plan.members, plan.unstored)
        metrics = _summarise(store, run_id, specs, keys, cfgs, summaries)
        drawn = _sample_summary(plan)
        if not on_ray:
            notes = logprobs.notes() if logprobs is not None else []
            totals = EngineTotals(peak=limiter.peak, rate_limited=limiter.rate_limited, notes=notes)
        summary = RunSummary(
            run_id=run_id,
            records=plan.records,
            distinct_contents=plan.distinct_contents,
            judge=cfg.label,
            seconds=time.perf_counter() - started,
            calls=sum(m.calls for m in metrics),
            metrics=metrics,
            peak_concurrency=totals.peak,
            rate_limited=totals.rate_limited,
            notes=totals.notes
            + [lo.note(pulled_in=not summaries[lo.dependency].asked) for lo in plan.left_out]
            + (sample_notes(drawn, metrics) if drawn is not None else []),
            sample=drawn,
        )
        store.finish_run(run_id, status, summary.model_dump(mode="json"))
    return summary


def _served(cfg: JudgeConfig, notify: Notify | None) -> contextlib.AbstractContextManager[JudgeConfig]:
    """The embedded llama.cpp judge, served for the block (greval.llm.local; imported only when a run needs it)."""
    from greval.llm.local.session import serve_judge

    return serve_judge(cfg, notify or logging.getLogger("greval.llm.local").info)


class EngineTotals(BaseModel):
    """What the judging reports beside the per-metric activity: the peak concurrency (summed over Ray tasks),
    rate-limited calls, and what the run has to say once (token log-probabilities)."""

    peak: int = 0
    rate_limited: int = 0
    notes: list[str] = Field(default_factory=list)


def new_summaries(
    specs: Sequence[BaseSpec], keys: dict[str, str], cfgs: dict[str, JudgeConfig]
) -> dict[str, MetricSummary]:
    """Empty per-metric activity of a run (or of one shard of it), filled in by :func:`judge_plan`."""
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


async def judge_plan(
    specs: Sequence[BaseSpec],
    plan: Plan,
    store: Store,
    cfg: JudgeConfig,
    run_id: str,
    summaries: dict[str, MetricSummary],
    model: BaseChatModel | None,
    opts: RunOptions,
    limiter: AdaptiveLimiter,
    progress: ProgressHook | None,
    logprobs: LogprobRequest | None = None,
) -> None:
    """Judge a plan's pending work under a run already recorded (neither starts nor finishes it), counting
    into ``summaries``; its verdicts are committed and its claims dropped however it ends. What :func:`arun`
    does in this process, and what each Ray task does with its shard of the plan (greval.scale)."""
    specs = order_specs(specs)
    keys = spec_keys(specs)
    cfgs = {s.name: config_for(s, cfg) for s in specs}
    group = GroupCommit(store)
    try:
        try:
            await _judge_all(
                specs,
                plan,
                store,
                group,
                cfg,
                cfgs,
                keys,
                dependency_levels(specs),
                summaries,
                run_id,
                model,
                opts,
                limiter,
                progress,
                logprobs,
            )
        finally:
            group.close()
    finally:
        store.release_claims()


async def _judge_all(
    specs: Sequence[BaseSpec],
    plan: Plan,
    store: Store,
    group: GroupCommit,
    cfg: JudgeConfig,
    cfgs: dict[str, JudgeConfig],
    keys: dict[str, str],
    levels: list[list[BaseSpec]],
    summaries: dict[str, MetricSummary],
    run_id: str,
    model: BaseChatModel | None,
    opts: RunOptions,
    limiter: AdaptiveLimiter,
    progress: ProgressHook | None,
    logprobs: LogprobRequest | None = None,
) -> None:
    """The judging itself: the plan's pending work, every record's metrics level by level."""

    # What is missing, decided up front: the progress bar's total is the real amount of work. Verdicts are
    # keyed by content, so records that share their content with an earlier one (other id, same fields) are
    # judged once: the duplicates are reused, and listed under their own ids (the run's snapshot) all the same.
    # Every content the plan left out is done for every spec (reused).
    unique, pending = plan.unique, plan.pending
    todo = [(rec, {s.name: pending[s.name][i] for s in specs}) for i, rec in enumerate(unique)]
    total = 0
    for s in specs:
        left = sum(1 for p in pending[s.name] if p is not None)
        summaries[s.name].reused += plan.records - left
        total += left
    done = errors = 0
    if progress:
        progress(0, total, 0)
    queue = [(r, p) for r, p in todo if any(v is not None for v in p.values())]
    if not queue:
        return  # nothing to judge: no chat model, no evaluator, no judge stack imported
    from greval.judge.evaluators import make_evaluator

    # The chat model is built only when some judge call is still needed: a finished run needs no key,
    # no server and no network.
    calls_needed = any(p[s.name] is not None and work_of(s, rec) == "judgement" for rec, p in todo for s in specs)
    chat = model or (make_chat_model(cfg) if calls_needed else None)
    method: Any = opts.method
    judges: dict[str, Evaluator] = {
        s.name: NoCall(s)
        if chat is None and s.needs_model
        else make_evaluator(
            s,
            chat,
            method=method,
            samples=cfg.samples,
            policy=opts.retry,
            limiter=limiter,
            direct=opts.direct,
            logprobs=logprobs,
        )
        for s in specs
    }

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
        held, res = await settle(
            store,
            judges[spec.name],
            spec,
            keys[spec.name],
            scfg,
            rec,
            pending,
            results,
            put=group.put,
            run_id=run_id,
            retry_errors=opts.retry_errors,
            sample=opts.sample,
            ahead=claimed.pop((spec.name, rec.hash), _NOT_CLAIMED),
        )
        if held is not None:
            results[spec.name] = held
        if res is None:  # judged by another run meanwhile
            summaries[spec.name].reused += 1
            done += 1
            if progress:
                progress(done, total, errors)
            return
        m = summaries[spec.name]
        if not not_applicable(res):  # the one definition of judged (MetricSummary.judged)
            m.judged += 1
        m.tokens_in += res.tokens_in
        m.tokens_out += res.tokens_out
        m.calls += len(res.calls)
        if not res.ok and not not_applicable(res):
            errors += 1
        done += 1
        if progress:
            progress(done, total, errors)

    async def judge_record(rec: Record, pend: dict[str, list[str] | None]) -> None:
        results: dict[str, JudgeResult] = {}
        for level in levels:
            if len(level) == 1:  # no task for a lone metric
                await judge_one(rec, level[0], pend[level[0].name], results)
            else:
                await asyncio.gather(*(judge_one(rec, s, pend[s.name], results) for s in level))

    # Enough records in flight to keep every slot busy, never the whole dataset at once.
    workers = max(1, min(len(queue), opts.concurrency * 2))
    it = iter(queue)
    # Claims taken ahead: the first level's model judgements of the next `batch` records are claimed in one
    # transaction and asked about again in one query per metric, instead of a transaction and a query before
    # each call (~0.15 ms of CPU a call: scripts/bench_run.py). (spec name, record hash) -> what is pending
    # now; a judgement another run holds is left out, and judge_one waits for it as before.
    claimed: dict[tuple[str, str], object] = {}
    ready: deque[tuple[Record, dict[str, list[str] | None]]] = deque()
    ahead_specs = [s for s in levels[0] if s.needs_model]
    batch = max(1, min(opts.concurrency, CLAIM_BATCH))

    def next_record() -> tuple[Record, dict[str, list[str] | None]] | None:
        if not ready:
            ready.extend(itertools.islice(it, batch))
            if not ready:
                return None
            for spec in ahead_specs:
                key, jkey = keys[spec.name], cfgs[spec.name].key
                want = [rec for rec, pend in ready if pend[spec.name] is not None]
                granted = store.claim_many([(key, jkey, rec.hash) for rec in want])
                mine = [rec for rec, ok in zip(want, granted, strict=True) if ok]
                if mine:
                    now = store.pending(key, jkey, mine, spec.each, opts.retry_errors)
                    claimed.update(((spec.name, rec.hash), p) for rec, p in zip(mine, now, strict=True))
        return ready.popleft()

    async def worker() -> None:
        while (nxt := next_record()) is not None:
            await judge_record(*nxt)

    # Everything alive now (modules, specs, the dataset) lives for the whole run: freezing it keeps each
    # full garbage collection from walking ~200k long-lived objects (74-224 ms a collection in a 768-call
    # run, ~0.3 ms per call; scripts/bench_run.py). Unfrozen afterwards, so nothing escapes collection.
    gc.freeze()
    try:
        tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
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


#: How a judgement is written: :meth:`GroupCommit.put` in a run, :meth:`Store.put_result` where it must be
#: committed at once. Arguments: run id, spec key, judge config, record, result, partial.
Put = Callable[[str | None, str, JudgeConfig, Record, JudgeResult, bool], None]


async def settle(
    store: Store,
    evaluator: Evaluator,
    spec: BaseSpec,
    key: str,
    scfg: JudgeConfig,
    rec: Record,
    pending: list[str],
    results: Mapping[str, JudgeResult],
    *,
    put: Put,
    run_id: str | None = None,
    retry_errors: bool = False,
    sample: Sample | None = None,
    ahead: object = _NOT_CLAIMED,
) -> tuple[JudgeResult | None, JudgeResult | None]:
    """One judgement the store lacked when the caller looked (``pending``: its missing items, ``[""]`` for a
    record metric): the one sequence every caller of a model goes through (``greval run``, ``greval serve``).

    For a model metric: take the judgement's claim (waiting while another live run holds it) and ask the store
    again, since another run may have judged it meanwhile (``ahead``: both already done for a batch, the
    pending items found then). Then judge what is still missing, with the dependency verdicts in ``results``,
    and write it with ``put``. Returns (what the store now holds for it — merged with earlier items for a
    partial judgement, else the new result —, the new result or None when nothing was left to judge).
    """
    if spec.needs_model:
        if ahead is _NOT_CLAIMED:
            while not store.claim(key, scfg.key, rec.hash):
                await asyncio.sleep(CLAIM_POLL_S)
            ahead = store.pending(key, scfg.key, [rec], spec.each, retry_errors)[0]
        left = drawn_items(sample, spec, rec, cast("list[str] | None", ahead))
        if left is None:
            return store.result(key, scfg.key, rec), None
        pending = left
    deps = {d: results[d] for d in spec.depends_on if d in results}
    only = pending if spec.each and pending and len(pending) < len(rec.items(spec.each)) else None
    res = await evaluator.ajudge(rec, deps, only)
    put(run_id, key, scfg, rec, res, only is not None)
    if only is not None or not res.ok:
        merged = store.result(key, scfg.key, rec)
        return (merged if merged is not None else res), res
    return res, res


def unique_contents(records: Sequence[Record]) -> list[Record]:
    """The first record of each content: verdicts are keyed by content, so only these are judged."""
    return list({r.hash: r for r in reversed(records)}.values())[::-1]


class LeftOut(BaseModel):
    """A dependency a metric is judged without on some records: they lack an input the dependency requires and
    the metric does not (greval.judge.outcome.unfed). Counted per record id, as the figures count."""

    metric: str
    dependency: str
    records: int
    absent: list[str] = Field(description="The dependency's required inputs absent from those records.")

    def note(self, pulled_in: bool) -> str:
        """The run's one-line note (``pulled_in``: the dependency was not asked for, only pulled in)."""
        text = (
            f"{self.metric}: judged without the verdicts of {self.dependency} on {self.records} record(s) that lack "
            f"{', '.join(self.absent)}, which {self.dependency} requires (the judge is told)"
        )
        if pulled_in:
            text += f"; {self.dependency} was only pulled in as a dependency, not asked for: this fails nothing"
        return text


#: What a pending judgement costs (see :func:`work_of`).
Work = Literal["judgement", "computed", "skipped"]


def work_of(spec: BaseSpec, row: Record | HashedRow) -> Work:
    """What a pending judgement costs, the one definition every count of work uses: a model call, a computed
    score, or nothing (the record lacks an input the metric requires: it is stored as skipped, no call)."""
    if missing_inputs(spec, row.data):
        return "skipped"
    return "judgement" if spec.needs_model else "computed"


class Plan(BaseModel):
    """What a run over these records still has to do, asked of the store once (the CLI prints it, the
    runner then works from it; each model call re-checks its one judgement under a claim all the same).

    Only the records with work left are held (and those the store has never seen, to store with the run's
    snapshot); of the others only their (id, content hash) pairs."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    unique: list[Record] = Field(
        description="The first record of each content with work left for some spec: only these are judged "
        "(a content already judged for every spec is not held)."
    )
    judge_keys: dict[str, str] = Field(description="Spec name -> the judge key the plan was made for.")
    pending: dict[str, list[list[str] | None]] = Field(description="Spec name -> per unique record (Store.pending).")
    judgements: int = Field(description="Judgements that still need the judge model (0: no server or key needed).")
    computed: int = Field(description="Computed judgements still to make.")
    skipped: int = Field(
        0, description="Judgements still to store as skipped: the record lacks an input the metric requires (no call)."
    )
    left_out: list[LeftOut] = Field(
        default_factory=list, description="Dependencies metrics are judged without on some records (see LeftOut)."
    )
    retry_errors: bool = False
    sample: Sample | None = Field(None, description="The sample the plan was drawn for (None: every record and item).")
    population: int = Field(0, description="Records the sample was drawn from (= records when not sampled).")
    items_drawn: dict[str, int] = Field(
        default_factory=dict, description="With --sample-items, many-metric -> items drawn over every record id."
    )
    items_of: dict[str, int] = Field(
        default_factory=dict, description="With --sample-items, many-metric -> items of every record id."
    )
    records: int = Field(0, description="Records in the dataset (ids; a row repeated exactly is read once).")
    distinct_contents: int = Field(0, description="Distinct record contents (identical records cost one call).")
    members: list[tuple[str, str]] = Field(
        default_factory=list, description="(record id, content hash) of every record: the run's snapshot."
    )
    unstored: list[Record] = Field(
        default_factory=list,
        description="Records stored with the snapshot when the store lacks it: every Record given, and the "
        "rows read from a file whose (id, content) the store has not seen.",
    )


def drawn_items(
    sample: Sample | None, spec: BaseSpec, row: Record | HashedRow, left: list[str] | None
) -> list[str] | None:
    """A many-metric's pending item ids (:meth:`Store.pending`) kept to the row's item sample (None: nothing left
    of it to judge). Record metrics, and every metric of an unsampled run, keep what is pending."""
    if sample is None or sample.items is None or spec.each is None or not left:
        return left
    chosen = set(sample_items([it["id"] for it in row.items(spec.each)], sample.items, sample.seed, row.hash))
    return [i for i in left if i in chosen] or None


def plan_work(
    specs: Sequence[BaseSpec],
    records: Rows,
    store: Store,
    cfg: JudgeConfig,
    retry_errors: bool = False,
    sample: Sample | None = None,
) -> Plan:
    """Ask the store what is still missing for every spec on these records, :data:`PLAN_CHUNK` records at a
    time (``records`` is read once, in order). A row becomes a validated Record only when it has work left
    or the store has never seen it.

    ``sample``: with ``records`` set, only the records it draws are planned (the whole dataset is read once to
    draw them, holding N rows); with ``items`` set, a many-metric's pending items are kept to each record's
    item sample (greval.dataset.sample)."""
    specs = list(specs)
    population = None
    if sample is not None and sample.records is not None:
        drawn, population = sample_records(cast("Iterable[Record | HashedRow]", records), sample.records, sample.seed)
        records = cast("Rows", drawn)
    many = [s for s in specs if s.each is not None] if sample is not None and sample.items is not None else []
    items_drawn = {s.name: 0 for s in many}
    items_of = {s.name: 0 for s in many}
    keys = spec_keys(order_specs(specs))
    judge_keys = {s.name: config_for(s, cfg).key for s in specs}
    unique: list[Record] = []
    pending: dict[str, list[list[str] | None]] = {s.name: [] for s in specs}
    members: list[tuple[str, str]] = []
    unstored: list[Record] = []
    seen: set[str] = set()  # content hashes planned so far: the first record of each content is judged
    todo: Counter[Work] = Counter()
    by_name = {s.name: s for s in specs}
    readers = [s for s in specs if s.depends_on]
    left: Counter[tuple[str, str]] = Counter()  # (metric, dependency) -> records it is judged without it
    absent: dict[tuple[str, str], set[str]] = {}

    def plan_chunk(chunk: Sequence[Record | HashedRow]) -> None:
        pairs = [(r.id, r.hash) for r in chunk]
        # Records given are in memory already: kept to store with the snapshot (if the store lacks it), as
        # they are. Of rows read from a file only those the store has never seen become Records for it.
        rows = [pair for r, pair in zip(chunk, pairs, strict=True) if not isinstance(r, Record)]
        known = store.known_records(rows) if rows else set()
        made: dict[int, Record] = {}

        def record(i: int) -> Record:
            if i not in made:
                r = chunk[i]
                made[i] = r if isinstance(r, Record) else r.record()
            return made[i]

        fresh = []
        for i, r in enumerate(chunk):
            if r.hash not in seen:
                seen.add(r.hash)
                fresh.append(i)
        # Store.pending reads each record's hash and items(), which a HashedRow has as a Record has them: the
        # rows are asked about as they are (building even unvalidated Records was ~10 % of planning a re-run).
        views = cast("list[Record]", [chunk[i] for i in fresh])
        asked = {
            s.name: [
                drawn_items(sample, s, view, left)
                for view, left in zip(
                    views, store.pending(keys[s.name], judge_keys[s.name], views, s.each, retry_errors), strict=True
                )
            ]
            for s in specs
        }
        for n, i in enumerate(fresh):
            if all(asked[s.name][n] is None for s in specs):
                continue
            unique.append(record(i))
            for s in specs:
                rest = asked[s.name][n]
                pending[s.name].append(rest)
                if rest is not None:
                    todo[work_of(s, views[n])] += 1
        unstored.extend(
            record(i)
            for i, (r, pair) in enumerate(zip(chunk, pairs, strict=True))
            if isinstance(r, Record) or pair not in known
        )
        members.extend(pairs)
        for r in chunk:  # every record id, judged now or before: what the data cannot feed stays so
            for s in readers:
                for dep, names in unfed(s, by_name, r.data).items():
                    left[s.name, dep] += 1
                    absent.setdefault((s.name, dep), set()).update(names)
        for s in many:  # counted per record id, as the figures count items
            assert s.each is not None and sample is not None and sample.items is not None
            sizes = [len(r.items(s.each)) for r in chunk]
            items_of[s.name] += sum(sizes)
            items_drawn[s.name] += sum(min(n, sample.items) for n in sizes)

    chunk: list[Record | HashedRow] = []
    for r in records:
        chunk.append(r)
        if len(chunk) >= PLAN_CHUNK:
            plan_chunk(chunk)
            chunk = []
    if chunk:
        plan_chunk(chunk)
    # Built without validating again what is already of its type (a pair per record of the dataset).
    return Plan.model_construct(
        unique=unique,
        judge_keys=judge_keys,
        pending=pending,
        judgements=todo["judgement"],
        computed=todo["computed"],
        skipped=todo["skipped"],
        left_out=[
            LeftOut(metric=m, dependency=d, records=n, absent=sorted(absent[m, d])) for (m, d), n in left.items()
        ],
        retry_errors=retry_errors,
        sample=sample,
        population=len(members) if population is None else population,
        items_drawn=items_drawn,
        items_of=items_of,
        records=len(members),
        distinct_contents=len(seen),
        members=members,
        unstored=unstored,
    )


def _sample_summary(plan: Plan) -> SampleSummary | None:
    if plan.sample is None:
        return None
    return SampleSummary(
        seed=plan.sample.seed,
        records=plan.sample.records,
        items=plan.sample.items,
        records_drawn=plan.records,
        records_of=plan.population,
        items_drawn=plan.items_drawn,
        items_of=plan.items_of,
    )


def sample_notes(drawn: SampleSummary, metrics: Sequence[MetricSummary]) -> list[str]:
    """What a sampled run says once: how many records and items were drawn of how many, and where the figures
    count more items than were drawn (verdicts earlier runs stored for these records are counted too)."""
    notes = []
    if drawn.records is not None:
        if drawn.records >= drawn.records_of:
            notes.append(
                f"sample: --sample {drawn.records} is not less than the dataset's {drawn.records_of} record(s): "
                "every record is judged"
            )
        else:
            notes.append(
                f"sample: {drawn.records_drawn} of {drawn.records_of} records drawn at random (seed {drawn.seed}; "
                "ranked by a seeded hash of each record id, so the file's order does not matter)"
            )
    if drawn.items is not None:
        if not drawn.items_of:
            notes.append(
                f"--sample-items {drawn.items}: no metric here judges items one by one (each: chunks / triples); "
                "nothing sampled"
            )
        else:
            counts = ", ".join(f"{name} {n} of {drawn.items_of[name]}" for name, n in drawn.items_drawn.items())
            notes.append(f"items sampled: at most {drawn.items} per record (seed {drawn.seed}): {counts} items drawn")
        for m in metrics:
            n = drawn.items_drawn.get(m.spec)
            if n is not None and m.items is not None and m.items > n:
                notes.append(
                    f"{m.spec}: the figures count {m.items} items, {m.items - n} more than drawn: every verdict "
                    "stored for these records is counted, and earlier runs judged more of their items"
                )
    return notes


def _summarise(
    store: Store,
    run_id: str,
    specs: Sequence[BaseSpec],
    keys: dict[str, str],
    cfgs: dict[str, JudgeConfig],
    summaries: dict[str, MetricSummary],
) -> list[MetricSummary]:
    """This run's activity beside the figures of every record id it was given (the whole dataset's state,
    not only what this run happened to call), computed where every other command computes them."""
    out = []
    for s in specs:
        m = summaries[s.name]
        found = figures(store, run_id=run_id, spec_key=keys[s.name], judge_key=cfgs[s.name].key)
        if found:
            activity = m.model_dump(include={"judged", "reused", "tokens_in", "tokens_out", "calls", "asked"})
            m = MetricSummary(**{**found[0].model_dump(), **activity})
        out.append(m)
    return out


def run(
    specs: Sequence[BaseSpec],
    records: Rows,
    store: Store,
    cfg: JudgeConfig,
    **kwargs: Any,
) -> RunSummary:
    """Synchronous wrapper around :func:`arun` for scripts and notebooks without an event loop."""
    return run_sync(arun(specs, records, store, cfg, **kwargs))
