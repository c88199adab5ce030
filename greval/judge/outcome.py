"""What every evaluator does before and after its work, without LangChain: check the record's inputs and
dependencies (:func:`begin`), and turn a failure into typed error verdicts - the one error ladder
(:func:`failure_of`, :func:`error_verdicts`) of LLM judges, pipelines and computed metrics alike."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from greval.dataset.records import CONVERSATION, TRAJECTORY, Record, item_list
from greval.errors import SpecError
from greval.llm.config import JudgeConfig
from greval.llm.retry import JudgeUnavailable, classify, describe_error
from greval.spec import BaseSpec
from greval.types import MISSING_INPUT, RECORD_ITEM, ErrorKind, ItemVerdict, JudgeResult, not_applicable


def missing_inputs(spec: BaseSpec, data: Mapping[str, Any]) -> list[str]:
    """Required inputs the record lacks (absent, empty text or empty list); for a per-turn (per-step) metric, a
    conversation without an assistant turn (a trajectory without an agent step) lacks what is judged."""
    missing = [n for n in spec.required_inputs() if data.get(n) in (None, "", [])]
    if spec.each == "turns" and CONVERSATION not in missing and not item_list(data, "turns"):
        absent = data.get(CONVERSATION) in (None, "", [])
        missing.append(CONVERSATION if absent else f"{CONVERSATION} (no assistant turn)")
    if spec.each == "steps" and TRAJECTORY not in missing and not item_list(data, "steps"):
        absent = data.get(TRAJECTORY) in (None, "", [])
        missing.append(TRAJECTORY if absent else f"{TRAJECTORY} (no agent step)")
    return missing


def unfed(spec: BaseSpec, specs: Mapping[str, BaseSpec], data: Mapping[str, Any]) -> dict[str, list[str]]:
    """The dependencies a record cannot feed although ``spec`` applies to it: dependency name -> its required
    inputs the record lacks. ``spec`` is judged there without their verdicts, and its prompt says so
    (:func:`begin`); ``specs``: the run's specs by name."""
    if not spec.depends_on or missing_inputs(spec, data):
        return {}
    out: dict[str, list[str]] = {}
    for name in spec.depends_on:
        dep = specs.get(name)
        absent = missing_inputs(dep, data) if dep is not None else []
        if absent:
            out[name] = absent
    return out


def begin(
    spec: BaseSpec,
    record: Record | Mapping[str, Any],
    deps: Mapping[str, JudgeResult] | None,
    *,
    spec_hash: str | None = None,
) -> tuple[Record, JudgeResult, dict[str, JudgeResult] | None]:
    """What every evaluator checks before working: the record, an empty result, and the dependency verdicts
    to show. ``None`` for the latter means the judgement cannot run and ``result.error`` says why (a required
    input is absent — then it is skipped, see :func:`not_applicable` — or a dependency is missing or failed).
    A dependency that does not apply to the record (:func:`unfed`) is shown as it is: the judge runs without
    its verdicts, and the prompt says why they are absent.

    ``spec_hash``: the spec's hash when the caller holds it (hashing the spec serialises it: ~30 µs a call)."""
    rec = record if isinstance(record, Record) else Record.from_mapping(record)
    result = JudgeResult(spec=spec.name, spec_hash=spec.hash if spec_hash is None else spec_hash)
    missing = missing_inputs(spec, rec.data)
    if missing:
        result.error = f"{MISSING_INPUT}: " + ", ".join(missing)
        return rec, result, None
    given = dict(deps or {})
    for name in spec.depends_on:
        dep = given.get(name)
        if dep is None:
            result.error = f"{ErrorKind.DEPENDENCY}: needs the verdicts of {name!r}, which were not given"
            return rec, result, None
        if not dep.ok and not not_applicable(dep):
            result.error = f"{ErrorKind.DEPENDENCY}: depends on {name!r}, which failed for this record"
            return rec, result, None
    return rec, result, {k: given[k] for k in spec.depends_on}


# ------------------------------------------------------------------------------------- the error ladder
@dataclass(frozen=True)
class Failed:
    """Why a judgement (or a part of it) has no verdict: its kind and its one-line, redacted text."""

    kind: ErrorKind
    text: str  # "<kind>: <detail>"

    @property
    def detail(self) -> str:
        """The text without its kind prefix."""
        return self.text.split(": ", 1)[-1]


def failure_of(exc: Exception) -> Failed:
    """The one error ladder of every evaluator. What makes every judgement fail the same way raises again
    and stops the run (the spec is unusable, or the judge itself: see :class:`JudgeUnavailable`); anything
    else is about this judgement only (its prompt is too long, the answer is unusable, the server kept
    failing …) and becomes a typed failure, and the run goes on."""
    if isinstance(exc, SpecError | JudgeUnavailable):
        raise exc
    return Failed(classify(exc).kind, describe_error(exc))


def error_verdicts(
    failed: Failed, item_ids: Iterable[str] = (RECORD_ITEM,), text: str | None = None
) -> list[ItemVerdict]:
    """The error verdicts a failure leaves: one per item id, each with its kind; ``text`` replaces the
    failure's own text (to say which step, or after how many calls)."""
    return [
        ItemVerdict(item_id=iid, status="error", error=failed.text if text is None else text, error_kind=failed.kind)
        for iid in item_ids
    ]


class NoCall:
    """The evaluator of a model metric in a run with no model call to make (every record it is pending on lacks
    an input the metric requires, or a dependency failed): :func:`begin`'s result, without a chat model, a key
    or a judge server. A judgement that would call the model is a bug of the plan, and raises."""

    def __init__(self, spec: BaseSpec) -> None:
        self.spec = spec

    async def ajudge(
        self,
        record: Record | Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None = None,
        only_items: Sequence[str] | None = None,
    ) -> JudgeResult:
        rec, result, ready = begin(self.spec, record, deps)
        if ready is not None:
            raise RuntimeError(f"{self.spec.name}: record {rec.id} needs a model call the run's plan did not count")
        return result


def config_for(spec: BaseSpec, cfg: JudgeConfig) -> JudgeConfig:
    """The judge identity a metric's verdicts are keyed by: the model's, or for computed metrics a fixed
    identity (changing the judge model must not recompute them)."""
    if spec.needs_model:
        return cfg
    identity = getattr(spec, "computed_identity", None)
    return JudgeConfig(provider="computed", model=str(identity() if callable(identity) else "greval"), temperature=None)
