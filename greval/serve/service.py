"""The judging behind every route of ``greval serve``: the store first, the model only for what it lacks, one
call for a judgement however many requests ask for it at once.

A request's records are asked of the store the way a run asks (:func:`greval.runner.plan.plan_work`: one query per
spec for the whole request); what is stored is read back (:meth:`Store.result`) with no model call and no run
recorded, so a warm request costs a few SQLite reads. What is missing is judged by the evaluator ``greval run``
builds (:func:`greval.judge.evaluators.make_evaluator`, the same :class:`~greval.judge.options.CallOptions`, one
shared adaptive limiter) through the run's own sequence (:func:`greval.runner.judging.settle`, with the
request as its :class:`~greval.runner.job.RunJob`: the store's claim, a second look, the call, the write), and
committed at once by :meth:`Store.put_result`: the rows are the rows a run writes (without a run id: a served
verdict belongs to no run). Concurrent requests for the same (spec key, judge key, record content) share one
in-flight future, so fifty identical requests make one call.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import importlib
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, Field

from greval.dataset.records import Record
from greval.errors import StoreUnavailable, first_line
from greval.judge.evaluators import Evaluator, make_evaluator
from greval.judge.outcome import config_for
from greval.llm.config import JudgeConfig, judge_model
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.openai_chat import sdk_reason
from greval.llm.retry import redact
from greval.runner.job import RunJob
from greval.runner.judging import settle
from greval.runner.options import RunOptions
from greval.runner.plan import plan_work, unique_contents
from greval.spec import BaseSpec, dependency_levels, order_specs, with_dependencies
from greval.store.backend import RECONNECT_WAIT_S, display
from greval.store.store import Store, spec_keys
from greval.types import ErrorKind, ItemVerdict, JudgeResult, not_applicable

if TYPE_CHECKING:
    from langchain_core.language_models import BaseChatModel

    from greval.llm.openai_chat import ChatModel


class ServedVerdict(BaseModel):
    """One metric's judgement of one record, as every route answers it (stored or new alike)."""

    spec: str
    spec_hash: str = Field(description="The spec's content hash (its version).")
    spec_key: str = Field(description="The key verdicts are stored under: the hash folded with dependencies'.")
    judge_key: str = Field(description="The judge's identity key (model and parameters).")
    record_id: str
    record_hash: str = Field(description="The record's content hash (what the cache is keyed by).")
    ok: bool = Field(description="Every verdict is ok and the judgement has no error.")
    error: str | None = Field(None, description="The judgement's error ('<kind>: …', keys redacted).")
    error_kind: ErrorKind | None = None
    verdicts: list[ItemVerdict] = Field(
        default_factory=list, description="Record metrics: one verdict (item_id ''); many metrics: one per item."
    )
    outputs: dict[str, Any] = Field(default_factory=dict, description="Record score and the spec's extra outputs.")
    cached: bool = Field(description="Read from the store: no model call was made for this request.")
    calls: int = Field(0, description="Model calls this request made for it (0 when cached or shared).")


class ServiceStats:
    """Counters the /metrics route reads (per process)."""

    def __init__(self) -> None:
        self.cache_hits: dict[str, int] = {}
        self.judged: dict[str, int] = {}
        self.shared: dict[str, int] = {}
        self.model_calls: dict[str, int] = {}
        self.errors: dict[str, int] = {}

    @staticmethod
    def bump(counter: dict[str, int], key: str, n: int = 1) -> None:
        counter[key] = counter.get(key, 0) + n


class JudgeService:
    """The served specs over one store and one judge: lookups, new judgements, in-flight sharing, draining."""

    def __init__(
        self,
        specs: Sequence[BaseSpec],
        store_path: str | Path,
        cfg: JudgeConfig,
        options: RunOptions | None = None,
        model: BaseChatModel | None = None,
        store_wait: float = RECONNECT_WAIT_S,
    ) -> None:
        self.specs = order_specs(specs)
        self.by_name = {s.name: s for s in self.specs}
        self.keys = spec_keys(self.specs)
        self.cfg = cfg
        self.cfgs = {s.name: config_for(s, cfg) for s in self.specs}
        self.options = options or RunOptions()
        self.store_path = store_path
        self.store_wait = store_wait
        self.store: Store | None = None
        self._model = model
        self._chat: ChatModel | None = model
        self._evaluators: dict[str, Evaluator] = {}
        self._inflight: dict[tuple[str, str, str], asyncio.Future[tuple[JudgeResult, bool, int]]] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._stray_claims = False
        self.limiter = AdaptiveLimiter(self.options.concurrency, adaptive=self.options.adaptive)
        # The options a run would call the model with, without log-probabilities (a served verdict belongs to
        # no run that could say its notes).
        self.calls = dataclasses.replace(self.options.call_options(cfg.samples, self.limiter), logprobs=None)
        # A served request judges what the store lacks; stored errors are answered as they are, nothing sampled.
        self._job_options = self.options.model_copy(update={"retry_errors": False, "sample": None})
        self.stats = ServiceStats()

    # ------------------------------------------------------------------------------- lifecycle
    def open(self) -> None:
        """Open the store and record the served specs and judges in it (as a run does before judging)."""
        self.store = Store(self.store_path, wait_s=self.store_wait)
        self.store.put_specs(self.specs, self.keys)
        for c in {c.key: c for c in self.cfgs.values()}.values():
            self.store.put_judge(c)

    def warm(self) -> str | None:
        """Build the chat model and every evaluator now (importing the judge stack takes about a second), so
        the first request does not pay for it. Returns why it could not (e.g. no API key: requests needing the
        model then answer 503, cached ones still work), else None."""
        try:
            for s in self.specs:
                self._evaluator(s)
            # A run's judge imports its HTTP client with its first call (greval.llm.openai_chat: aiohttp, or the
            # openai SDK when a setting needs it): here that would be inside the event loop, stalling every open
            # connection (their timeouts too).
            importlib.import_module("greval.llm.wire")
            if sdk_reason() is not None:
                importlib.import_module("greval.llm.sdk")
        except Exception as exc:
            return redact(f"{type(exc).__name__}: {exc}")
        return None

    async def drain(self, timeout: float | None = None) -> None:
        """Wait for every judgement in flight to finish and be stored (graceful shutdown)."""
        if self._tasks:
            await asyncio.wait(set(self._tasks), timeout=timeout)

    def close(self) -> None:
        if self.store is not None:
            if self.store.unavailable is None:
                self.store.release_claims()
            self.store.close()
            self.store = None

    @property
    def inflight(self) -> int:
        return len(self._inflight)

    def closure(self, names: Sequence[str]) -> list[BaseSpec]:
        """The specs asked for and the ones they depend on, in dependency order."""
        return with_dependencies(names, self.specs)

    # ---------------------------------------------------------------------------------- judging
    async def judge(self, names: Sequence[str], records: Sequence[Record]) -> list[dict[str, ServedVerdict]]:
        """Each record's verdict for each spec named (dependencies judged, not returned), in order."""
        store = self._open_store()
        specs = self.closure(names)
        levels = dependency_levels(specs)
        unique = unique_contents(list(records))
        plan = plan_work(specs, unique, store, self.cfg)
        job = RunJob(specs, self.cfg, store, plan, self._job_options)
        pending: dict[str, dict[str, list[str] | None]] = {s.name: {} for s in specs}
        for i, rec in enumerate(plan.unique):
            for s in specs:
                pending[s.name][rec.hash] = plan.pending[s.name][i]

        # As a run does: enough records in flight to keep every model slot busy, not a whole request at once
        # (a request of 1,000 records then claims its judgements as it reaches them, not all up front).
        slots = asyncio.Semaphore(max(1, 2 * self.options.concurrency))

        async def one_record(rec: Record) -> dict[str, tuple[JudgeResult, bool, int]]:
            async with slots:
                return await judge_record(rec)

        async def judge_record(rec: Record) -> dict[str, tuple[JudgeResult, bool, int]]:
            results: dict[str, tuple[JudgeResult, bool, int]] = {}
            for level in levels:
                done = await asyncio.gather(
                    *(self._judge_one(job, s, rec, pending[s.name].get(rec.hash), results) for s in level)
                )
                results.update(zip((s.name for s in level), done, strict=True))
            return results

        by_hash = dict(
            zip((r.hash for r in unique), await asyncio.gather(*(one_record(r) for r in unique)), strict=True)
        )
        out = []
        for rec in records:
            got = by_hash[rec.hash]
            out.append({n: self._served(n, rec, *got[n]) for n in names})
        return out

    async def _judge_one(
        self,
        job: RunJob,
        spec: BaseSpec,
        rec: Record,
        pending: list[str] | None,
        results: dict[str, tuple[JudgeResult, bool, int]],
    ) -> tuple[JudgeResult, bool, int]:
        """(result, cached, calls made for this request) of one judgement."""
        store = self._open_store()
        key, jkey = self.keys[spec.name], self.cfgs[spec.name].key
        if pending is None:
            stored = store.result(key, jkey, rec)
            if stored is not None:
                ServiceStats.bump(self.stats.cache_hits, spec.name)
                return stored, True, 0
        fkey = (key, jkey, rec.hash)
        fut = self._inflight.get(fkey)
        if fut is not None:
            ServiceStats.bump(self.stats.shared, spec.name)
            res, cached, _ = await asyncio.shield(fut)
            return res, cached, 0
        fut = asyncio.get_running_loop().create_future()
        self._inflight[fkey] = fut
        deps = {d: results[d][0] for d in spec.depends_on if d in results}
        task = asyncio.create_task(self._fresh(job, spec, rec, pending, deps, fut))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return await asyncio.shield(fut)

    async def _fresh(
        self,
        job: RunJob,
        spec: BaseSpec,
        rec: Record,
        pending: list[str] | None,
        deps: dict[str, JudgeResult],
        fut: asyncio.Future[tuple[JudgeResult, bool, int]],
    ) -> None:
        """Judge and store one judgement through the run's own sequence (:func:`greval.runner.judging.settle`: claim,
        ask the store again, judge, write at once, read back merged), resolving ``fut`` with what the store now
        holds. Runs as its own task: a client that goes away does not cancel a judgement half stored."""
        store = self._open_store()
        key, scfg = self.keys[spec.name], self.cfgs[spec.name]
        fkey = (key, scfg.key, rec.hash)
        if pending is None:  # the store said done but holds nothing to read: judge it whole
            pending = [it["id"] for it in rec.items(spec.each)] if spec.each else [""]
        try:
            try:
                held, res = await settle(
                    job, spec, rec, pending, deps, evaluator=self._evaluator(spec), put=store.put_result
                )
            except BaseException:
                self._stray_claims = self._stray_claims or spec.needs_model
                raise
            if res is None:  # judged by another process meanwhile: the claim taken for it is stale
                self._stray_claims = self._stray_claims or spec.needs_model
                if held is None:
                    raise RuntimeError(f"{spec.name}: the store says judged but holds no verdict")
                ServiceStats.bump(self.stats.cache_hits, spec.name)
                fut.set_result((held, True, 0))
                return
            ServiceStats.bump(self.stats.judged, spec.name)
            ServiceStats.bump(self.stats.model_calls, spec.name, len(res.calls))
            if not res.ok and not not_applicable(res):
                kind = _kind_of(res)
                ServiceStats.bump(self.stats.errors, (kind or ErrorKind.UNKNOWN).value)
            fut.set_result((held if held is not None else res, False, len(res.calls)))
        except asyncio.CancelledError:
            fut.cancel()
            raise
        except Exception as exc:
            fut.set_exception(exc)
            fut.exception()  # retrieved: a judgement nobody waits for any more is not "never retrieved"
        finally:
            self._inflight.pop(fkey, None)
            if not self._inflight and self._stray_claims:
                # Nothing in flight: every claim this connection still holds is stale (a judgement found done
                # after its claim, or one that failed); drop them so other runs need not wait for the lease.
                self._stray_claims = False
                store.release_claims()

    def _evaluator(self, spec: BaseSpec) -> Evaluator:
        """The evaluator a run builds for this spec (same options), made on first use."""
        if spec.name not in self._evaluators:
            if spec.needs_model and self._chat is None:
                self._chat = judge_model(self.cfg)
            self._evaluators[spec.name] = make_evaluator(spec, self._chat, self.calls)
        return self._evaluators[spec.name]

    def _served(self, name: str, rec: Record, res: JudgeResult, cached: bool, calls: int) -> ServedVerdict:
        spec = self.by_name[name]
        return ServedVerdict(
            spec=name,
            spec_hash=spec.hash,
            spec_key=self.keys[name],
            judge_key=self.cfgs[name].key,
            record_id=rec.id,
            record_hash=rec.hash,
            ok=res.ok,
            error=res.error,
            error_kind=_kind_of(res),
            verdicts=res.verdicts,
            outputs=res.outputs,
            cached=cached,
            calls=calls,
        )

    # ---------------------------------------------------------------------------------- reading
    def stored(self, names: Sequence[str], record_id: str) -> list[ServedVerdict]:
        """Stored verdicts of a record id (every content it was stored with) for the served specs named."""
        store = self._open_store()
        out = []
        for rec in store.records_with_ids([record_id]):
            for name in names:
                res = store.result(self.keys[name], self.cfgs[name].key, rec)
                if res is not None:
                    out.append(self._served(name, rec, res, True, 0))
        return out

    def _open_store(self) -> Store:
        """The store, opened again when the last connection gave it up (a PostgreSQL server that went away for
        longer than ``store_wait``): requests answer 503 while it is gone and work again once it is back,
        without restarting the server."""
        if self.store is not None and self.store.unavailable is not None:
            gone, self.store = self.store, None
            with contextlib.suppress(Exception):  # the old connection is dead; closing it may fail too
                gone.close()
        if self.store is None:
            try:
                self.open()
            except StoreUnavailable:
                raise
            except Exception as exc:  # e.g. "cannot connect to PostgreSQL": the server is still down
                where = display(str(self.store_path))
                raise StoreUnavailable(f"{where}: the store is unavailable ({first_line(exc)})") from None
        assert self.store is not None
        return self.store


def _kind_of(res: JudgeResult) -> ErrorKind | None:
    """The judgement's error kind: its first failed verdict's, else the prefix of its error text."""
    for v in res.verdicts:
        if v.error_kind is not None:
            return v.error_kind
    if res.error:
        prefix = res.error.split(":", 1)[0].strip()
        try:
            return ErrorKind(prefix)
        except ValueError:
            return ErrorKind.UNKNOWN if not res.error.startswith("missing required input") else None
    return None
