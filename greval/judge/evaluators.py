"""One interface for every kind of metric, and the one place a spec's kind becomes its evaluator.

Specs only declare. :data:`EVALUATORS` maps each kind to what builds its evaluator from a spec, a chat model
and the run's :class:`~greval.judge.options.CallOptions`: a judge spec becomes a
:class:`greval.judge.judge.Judge`, a pipeline a :class:`greval.judge.pipeline.PipelineEvaluator`, a computed
metric a :class:`greval.judge.computed.ComputedEvaluator`; a kind registered elsewhere
(:func:`greval.spec.register_kind`) adds its evaluator with :func:`register_evaluator`. Every evaluator answers
``ajudge(record, deps, only_items)`` with a :class:`greval.types.JudgeResult`: record-level verdicts have
``item_id == RECORD_ITEM``; item verdicts (chunks, triples, extracted statements) carry their own ids.
:func:`compile` and :func:`compile_suite` make LangChain runnables of any of them (LangChain imported then; a
kind's evaluator module when a spec of that kind is built).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, Unpack

from pydantic import BaseModel

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.judge.judge import Judge
from greval.judge.options import CallOptions, Options
from greval.judge.pipeline import PipelineEvaluator
from greval.judge.schemas import input_model
from greval.spec import BaseSpec, Spec, dependency_levels
from greval.spec.pipeline import PipelineSpec
from greval.types import JudgeResult

if TYPE_CHECKING:
    from langchain_core.runnables import Runnable

    from greval.llm.openai_chat import ChatModel

__all__ = [
    "EVALUATORS",
    "Build",
    "Evaluator",
    "as_runnable",
    "compile",
    "compile_suite",
    "make_evaluator",
    "register_evaluator",
]


class Evaluator(Protocol):
    """What the runner needs from a metric."""

    async def ajudge(
        self,
        record: Record | Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None = None,
        only_items: Sequence[str] | None = None,
    ) -> JudgeResult: ...


#: What builds one kind's evaluator: (spec, chat model or None, how calls are made) -> evaluator.
Build: TypeAlias = "Callable[[BaseSpec, ChatModel | None, CallOptions], Evaluator]"


def _judge(spec: BaseSpec, model: ChatModel | None, calls: CallOptions) -> Evaluator:
    if not isinstance(spec, Spec):
        raise TypeError(f"{spec.name}: kind 'judge' is built from a Spec, not {type(spec).__name__}")
    if model is None:
        raise ValueError("a judge spec needs a chat model")
    return Judge(spec, model, calls)


def _pipeline(spec: BaseSpec, model: ChatModel | None, calls: CallOptions) -> Evaluator:

    if not isinstance(spec, PipelineSpec):
        raise TypeError(f"{spec.name}: kind 'pipeline' is built from a PipelineSpec, not {type(spec).__name__}")
    if model is None:
        raise ValueError("a pipeline metric needs a chat model")
    return PipelineEvaluator(spec, model, calls)


def _computed(spec: BaseSpec, model: ChatModel | None, calls: CallOptions) -> Evaluator:
    """No model, method, samples, limiter or transport option applies: computation is local. Imported here:
    the computed metrics' module and their spec's models cost a run of judge specs ~0.06 s before its first call."""
    from greval.judge.computed import ComputedEvaluator
    from greval.spec.computed import ComputedSpec

    if not isinstance(spec, ComputedSpec):
        raise TypeError(f"{spec.name}: kind 'computed' is built from a ComputedSpec, not {type(spec).__name__}")
    return ComputedEvaluator(spec)


#: Spec kind -> what builds its evaluator: the one dispatch (a spec never builds its own judge).
EVALUATORS: dict[str, Build] = {"judge": _judge, "pipeline": _pipeline, "computed": _computed}


def register_evaluator(kind: str, build: Build) -> None:
    """Add the evaluator of a spec kind registered with :func:`greval.spec.register_kind`."""
    EVALUATORS[kind] = build


def make_evaluator(spec: BaseSpec, model: ChatModel | None, calls: CallOptions | None = None) -> Evaluator:
    """The evaluator for a spec of any registered kind, calling ``model`` as ``calls`` says (default: the
    defaults of :class:`CallOptions`)."""
    build = EVALUATORS.get(spec.kind)
    if build is None:
        raise TypeError(f"spec kind {spec.kind!r} has no evaluator (greval.judge.evaluators.register_evaluator)")
    return build(spec, model, calls or CallOptions())


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
    from langchain_core.runnables import RunnableLambda

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
    spec: BaseSpec, model: ChatModel | None = None, calls: CallOptions | None = None, **options: Unpack[Options]
) -> Runnable[Any, JudgeResult]:
    """Compile a spec of any kind into a LangChain runnable: record in, checked :class:`JudgeResult` out.

    The input is a :class:`Record`, a mapping of record fields, or ``{"record": ..., "depends_on": {name:
    JudgeResult}}``. Judge and pipeline specs need ``model``; computed ones do not. ``calls`` (how the model is
    called, :class:`CallOptions`) and the keyword ``options`` over it: ``direct=False`` sends every model call
    through ``ainvoke`` even when no callback, tracer or cache is attached (the verdicts are the same, the
    client CPU is higher). Its input schema is the
    spec's record model (:func:`greval.judge.schemas.input_model`: its declared inputs, chunks / triples
    shapes), so ``langserve.add_routes(app, compile(spec, model))`` serves a typed ``/input_schema``.
    """
    return as_runnable(make_evaluator(spec, model, CallOptions.of(calls, **options)), spec.name, input_model(spec))


def compile_suite(
    specs: Sequence[BaseSpec],
    model: ChatModel | None = None,
    calls: CallOptions | None = None,
    **options: Unpack[Options],
) -> Runnable[Any, dict[str, JudgeResult]]:
    """Several specs of any kind as one runnable: independent metrics run concurrently (RunnableParallel),
    and ``depends_on`` metrics run after the ones they read, receiving their verdicts (``calls`` and
    ``options``: see :func:`compile`; one bundle for every metric)."""
    from langchain_core.runnables import RunnableLambda, RunnableParallel

    shared = CallOptions.of(calls, **options)

    def start(rec: Any) -> dict[str, Any]:
        return {"record": rec, "results": {}}

    state: Runnable[Any, Any] = RunnableLambda(start, name="greval:record")
    for level in dependency_levels(specs):
        branches: dict[str, Runnable[Any, Any]] = {}
        for s in level:
            judge = make_evaluator(s, model, shared)

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
