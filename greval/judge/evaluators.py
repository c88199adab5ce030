"""One interface for every kind of metric, so the runner, the store and the reports treat them alike.

A judge spec becomes a :class:`greval.judge.judge.Judge`; other kinds (computed, pipeline) build their own
evaluator through ``spec.evaluator(...)``. Every evaluator answers ``ajudge(record, deps, only_items)`` with a
:class:`greval.judge.judge.JudgeResult`: record-level verdicts have ``item_id == ""``; item verdicts (chunks,
triples, extracted statements) carry their own ids.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from langchain_core.runnables import Runnable, RunnableLambda, RunnableParallel

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.judge.judge import Judge, JudgeResult
from greval.llm.config import JudgeConfig
from greval.llm.limiter import AdaptiveLimiter
from greval.llm.retry import RetryPolicy
from greval.spec import BaseSpec, Spec, dependency_levels


class Evaluator(Protocol):
    """What the runner needs from a metric."""

    async def ajudge(
        self,
        record: Record | Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None = None,
        only_items: Sequence[str] | None = None,
    ) -> JudgeResult: ...


def make_evaluator(
    spec: BaseSpec,
    model: BaseChatModel | None,
    *,
    method: Any = "auto",
    samples: int = 1,
    policy: RetryPolicy | None = None,
    limiter: AdaptiveLimiter | None = None,
    direct: bool = True,
) -> Evaluator:
    """The evaluator for any registered spec kind."""
    opts: dict[str, Any] = dict(method=method, samples=samples, policy=policy, limiter=limiter, direct=direct)
    if isinstance(spec, Spec):
        if model is None:
            raise ValueError("a judge spec needs a chat model")
        judge: Evaluator = Judge(spec, model, **opts)
        return judge
    build = getattr(spec, "evaluator", None)
    if build is None:
        raise TypeError(f"spec kind {spec.kind!r} has no evaluator")
    evaluator: Evaluator = build(model=model, **opts)
    return evaluator


def config_for(spec: BaseSpec, cfg: JudgeConfig) -> JudgeConfig:
    """The judge identity a metric's verdicts are keyed by: the model's, or for computed metrics a fixed
    identity (changing the judge model must not recompute them)."""
    if spec.needs_model:
        return cfg
    identity = getattr(spec, "computed_identity", None)
    return JudgeConfig(provider="computed", model=str(identity() if callable(identity) else "greval"), temperature=None)


def compile_suite(
    specs: Sequence[Spec],
    model: BaseChatModel,
    **options: Any,
) -> Runnable[Any, dict[str, JudgeResult]]:
    """Several specs as one runnable: independent metrics run concurrently (RunnableParallel), and
    ``depends_on`` metrics run after the ones they read, receiving their verdicts."""

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
