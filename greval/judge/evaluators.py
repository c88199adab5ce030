"""One interface for every kind of metric, so the runner, the store and the reports treat them alike.

A judge spec becomes a :class:`greval.judge.judge.Judge`; other kinds (computed, pipeline) build their own
evaluator through ``spec.evaluator(...)``. Every evaluator answers ``ajudge(record, deps, only_items)`` with a
:class:`greval.types.JudgeResult`: record-level verdicts have ``item_id == RECORD_ITEM``; item verdicts
(chunks, triples, extracted statements) carry their own ids. :func:`compile` and :func:`compile_suite` make
LangChain runnables of any of them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Literal, Protocol, TypedDict, Unpack

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel
from pydantic import BaseModel

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.judge.judge import Judge
from greval.judge.logprobs import LogprobRequest
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.retry import RetryPolicy
from greval.spec import BaseSpec, Spec, dependency_levels
from greval.types import JudgeResult, Method


class Evaluator(Protocol):
    """What the runner needs from a metric."""

    async def ajudge(
        self,
        record: Record | Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None = None,
        only_items: Sequence[str] | None = None,
    ) -> JudgeResult: ...


class Options(TypedDict, total=False):
    """How an evaluator calls its model; every key may be left out (the defaults of :class:`Judge`)."""

    method: Method | Literal["auto"]  # the structured-output method, or "auto": each in turn, falling back
    samples: int  # independent answers per judgement, combined by majority
    policy: RetryPolicy | None  # transport retries, parse re-asks, item re-ask rounds
    limiter: AdaptiveLimiter | None  # shared concurrency limit that backs off on rate limits
    direct: bool  # False: every call through LangChain's ainvoke (see greval.llm.call)
    # token log-probabilities for each verdict's token_confidence (judge specs only; see greval.judge.judge)
    logprobs: LogprobRequest | int | None


def make_evaluator(spec: BaseSpec, model: BaseChatModel | None, **options: Unpack[Options]) -> Evaluator:
    """The evaluator for any registered spec kind (``logprobs`` reaches judge specs only: a pipeline's steps
    and computed metrics have no single verdict token to read)."""
    if isinstance(spec, Spec):
        if model is None:
            raise ValueError("a judge spec needs a chat model")
        judge: Evaluator = Judge(spec, model, **options)
        return judge
    build = getattr(spec, "evaluator", None)
    if build is None:
        raise TypeError(f"spec kind {spec.kind!r} has no evaluator")
    rest = {k: v for k, v in options.items() if k != "logprobs"}
    evaluator: Evaluator = build(model=model, **rest)
    return evaluator


def _unpack(inp: Any) -> tuple[Record | Mapping[str, Any], Mapping[str, JudgeResult] | None]:
    """Runnable input: a Record, a mapping of record fields, or ``{"record": ..., "depends_on": {...}}``."""
    if isinstance(inp, Record):
        return inp, None
    if isinstance(inp, Mapping) and "record" in inp:
        deps = {
            k: (v if isinstance(v, JudgeResult) else JudgeResult.model_validate(v))
            for k, v in (inp.get("depends_on") or {}).items()
        }
        return inp["record"], deps
    if isinstance(inp, Mapping):
        return inp, None
    raise TypeError("judge input must be a Record, a mapping of record fields, or {record, depends_on}")


def as_runnable(
    evaluator: Evaluator, name: str, input_type: type[BaseModel] | None = None
) -> Runnable[Any, JudgeResult]:
    """An evaluator as a LangChain runnable (``invoke`` / ``ainvoke`` / ``batch``; see :func:`compile`).

    ``input_type`` (a record model, :func:`greval.judge.schemas.input_model`) is what the runnable declares as
    its input schema (LangServe's ``/input_schema``, the playground); it does not restrict what ``invoke``
    accepts. The output schema is :class:`JudgeResult`."""

    async def ainvoke(inp: Any) -> JudgeResult:
        record, deps = _unpack(inp)
        return await evaluator.ajudge(record, deps)

    def invoke(inp: Any) -> JudgeResult:
        return run_sync(ainvoke(inp))

    runnable = RunnableLambda(invoke, afunc=ainvoke, name=f"greval:{name}")
    if input_type is None:
        return runnable.with_types(output_type=JudgeResult)
    return runnable.with_types(input_type=input_type, output_type=JudgeResult)


def compile(
    spec: BaseSpec, model: BaseChatModel | None = None, **options: Unpack[Options]
) -> Runnable[Any, JudgeResult]:
    """Compile a spec of any kind into a LangChain runnable: record in, checked :class:`JudgeResult` out.

    The input is a :class:`Record`, a mapping of record fields, or ``{"record": ..., "depends_on": {name:
    JudgeResult}}``. Judge and pipeline specs need ``model``; computed ones do not. ``options``: see
    :class:`Options` (``direct=False`` sends every model call through ``ainvoke`` even when no callback,
    tracer or cache is attached: the verdicts are the same, the client CPU is higher). Its input schema is the
    spec's record model (:func:`greval.judge.schemas.input_model`: its declared inputs, chunks / triples
    shapes), so ``langserve.add_routes(app, compile(spec, model))`` serves a typed ``/input_schema``.
    """
    from greval.judge.schemas import input_model

    return as_runnable(make_evaluator(spec, model, **options), spec.name, input_model(spec))


def compile_suite(
    specs: Sequence[BaseSpec], model: BaseChatModel | None = None, **options: Unpack[Options]
) -> Runnable[Any, dict[str, JudgeResult]]:
    """Several specs of any kind as one runnable: independent metrics run concurrently (RunnableParallel),
    and ``depends_on`` metrics run after the ones they read, receiving their verdicts (``options``: see
    :class:`Options`)."""

    def start(rec: Any) -> dict[str, Any]:
        return {"record": rec, "results": {}}

    state: Runnable[Any, Any] = RunnableLambda(start, name="greval:record")
    for level in dependency_levels(specs):
        branches: dict[str, Runnable[Any, Any]] = {}
        for s in level:
            judge = make_evaluator(s, model, **options)

            async def run(st: dict[str, Any], j: Evaluator = judge) -> JudgeResult:
                return await j.ajudge(st["record"], st["results"])

            def run_blocking(st: dict[str, Any], j: Evaluator = judge) -> JudgeResult:
                return run_sync(j.ajudge(st["record"], st["results"]))

            branches[s.name] = RunnableLambda(run_blocking, afunc=run, name=f"greval:{s.name}")
        parallel = RunnableParallel(branches)

        async def merge(st: dict[str, Any], p: RunnableParallel[Any] = parallel) -> dict[str, Any]:
            done = await p.ainvoke(st)
            return {"record": st["record"], "results": {**st["results"], **done}}

        def merge_blocking(st: dict[str, Any], p: RunnableParallel[Any] = parallel) -> dict[str, Any]:
            return {"record": st["record"], "results": {**st["results"], **p.invoke(st)}}

        state = state | RunnableLambda(merge_blocking, afunc=merge, name="greval:level")

    def results_of(st: dict[str, Any]) -> dict[str, JudgeResult]:
        return dict(st["results"])

    return state | RunnableLambda(results_of, name="greval:results")
