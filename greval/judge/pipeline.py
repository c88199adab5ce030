"""Declared multi-step LLM metrics (``kind: pipeline``): extract lists, verify every item, aggregate counts.

Metrics such as faithfulness or answer correctness cannot be read off one verdict: the judge first lists the
claims of a text, then decides for each claim whether the contexts imply it, and a formula turns the verdict
counts into a score. A pipeline spec declares those steps in YAML, without Python::

    kind: pipeline
    name: faithfulness
    inputs: [answer, chunks]
    steps:
      - extract: {name: claims, from: answer, what: factual claims}
      - verify:
          each: claims
          against: [chunks]
          labels: {implied: ..., not_implied: ...}
    aggregate: {kind: ratio, step: claims, positive: [implied]}

Each verify step is compiled into a generated judge :class:`~greval.spec.Spec` (categorical, one verdict per
item) and run by :class:`greval.judge.judge.Judge`, so transport retries, structured-output fallbacks, parse
re-asks and re-asking of missing item ids come for free. Nothing intermediate is thrown away: the extracted
lists go into ``outputs``, every item verdict (with its reason) into the result as ``<step>:<id>``, and each
extraction as a ``<step>`` verdict whose value is the number of items - so people can check every count
behind a score.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal

from pydantic import (
    ConfigDict,
    Field,
    create_model,
)

from greval.dataset.records import CONVERSATION, Record
from greval.judge.judge import Judge
from greval.judge.options import CallOptions
from greval.judge.outcome import Failed, begin, error_verdicts, failure_of
from greval.judge.parse import Answer, validate_one
from greval.judge.prompt import (
    PREAMBLE,
    absent_dependency,
    describe_scale,
    each_answer,
    render_conversation,
    render_item,
    schema_note,
    steps_text,
    title,
    wire_schema,
)
from greval.llm.openai_chat import Message
from greval.spec import ITEM_FIELDS, CategoricalScale, EachTarget, InputSpec, Label, Spec
from greval.spec.pipeline import (
    CountsAggregate,
    ExtractStep,
    PipelineSpec,
    RankedPrecisionAggregate,
    RatioAggregate,
    ScoreMeanAggregate,
    VerifyStep,
)
from greval.spec.verdict import verdict_fields
from greval.types import RECORD_ITEM, UNITS, CallLog, ErrorKind, ItemVerdict, JudgeResult, Method, not_applicable

if TYPE_CHECKING:
    from greval.llm.openai_chat import ChatModel


# ---------------------------------------------------------------------------------------- rendering
def _value_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return "\n".join(f"- {v}" for v in value)
    return json.dumps(value, ensure_ascii=False, default=str)


def _field_block(name: str, value: Any, note: str | None = None) -> str:
    head = f"## {title(name)}" + (f" ({note})" if note else "")
    if name in ITEM_FIELDS and isinstance(value, list):
        sep = "\n\n" if name == "chunks" else "\n"
        return head + "\n" + sep.join(render_item(name, it) for it in value)
    if name == CONVERSATION and isinstance(value, list):
        return head + "\n" + render_conversation(value)
    return head + "\n" + _value_text(value)


def _deps_blocks(deps: Mapping[str, JudgeResult] | None) -> list[str]:
    parts = []
    for dep_name, res in (deps or {}).items():
        if not_applicable(res):
            parts.append(absent_dependency(dep_name, res))
            continue
        lines = [f"## Verdicts of the metric '{dep_name}'"]
        for v in res.verdicts:
            if v.status == "ok":
                verdict = v.label if v.label is not None else (v.value if v.value is not None else v.score)
                who = f"[{v.item_id}] " if v.item_id else ""
                lines.append(f"- {who}{verdict}: {v.reason or ''}".rstrip())
        parts.append("\n".join(lines))
    return parts


# ------------------------------------------------------------------------------------------ step judges
def _step_spec(spec: PipelineSpec, name: str, each: Literal["chunks", "triples"], step: VerifyStep | None) -> Spec:
    """A generated judge spec for one step: what :class:`Judge` needs to build and check its answers.

    An extract step has no labels; it gets placeholder ones (its answer model and prompt are its own)."""
    labels = step.labels if step else [Label(name="done", description="-"), Label(name="none", description="-")]
    return Spec(
        name=f"{spec.name}__{name}",
        description=spec.description,
        instructions=step.instructions if step else None,
        steps=(step.steps if step and step.steps else ["Judge each item on its own."]),
        inputs={each: InputSpec()},
        scale=CategoricalScale(labels=labels, ordered=step.ordered if step else False),
        target=EachTarget(each=each),
        depends_on=list(spec.depends_on) if step else [],
    )


class _Extractor(Judge):
    """An extract step: Judge's calling machinery (retries, fallbacks, parse re-asks) with a list answer."""

    def __init__(self, spec: PipelineSpec, step: ExtractStep, model: ChatModel, calls: CallOptions) -> None:
        super().__init__(_step_spec(spec, step.name, "chunks", None), model, calls)
        self.pipeline = spec
        self.step = step
        model_name = "".join(w.capitalize() for w in f"{spec.name}_{step.name}".split("_"))
        self.answer_model = create_model(
            f"{model_name}Extraction",
            __config__=ConfigDict(extra="forbid"),
            reason=(str, Field(description="Briefly, how you read and split the text. Write it first.")),
            items=(list[str], Field(description=f"The {step.what}, one self-contained sentence each, in order")),
        )
        self.item_model = self.answer_model
        self.schema = wire_schema(self.answer_model)

    def system_text(self, method: Method) -> str:
        s = self.step
        parts = [
            PREAMBLE,
            f"Metric: {self.pipeline.name}\n{self.pipeline.description.strip()}",
            f"Task: List the {s.what} made in the {title(s.from_).lower()}. Another step will check each "
            "of them, so make every item a short, self-contained sentence (resolve pronouns), state each "
            "only once, and add nothing the text does not say.",
        ]
        if s.instructions:
            parts.append(f"Instructions: {s.instructions.strip()}")
        parts.append(
            f"Answer with `reason` first, then `items`: the {s.what} in the order they appear; "
            "an empty list if there are none."
        )
        return "\n\n".join(parts + schema_note(method, self.schema))

    def messages(
        self,
        method: Method,
        data: Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None,
        item_ids: Sequence[str] | None,
    ) -> list[Message]:
        fields = data["fields"]
        blocks = [_field_block(n, fields[n]) for n in self.step.context if fields.get(n) not in (None, "", [])]
        blocks.append(_field_block(self.step.from_, fields[self.step.from_], f"list the {self.step.what} of this"))
        return [self.system_message(method), {"role": "user", "content": "\n\n".join(blocks)}]

    def validate(self, payload: dict[str, Any], item_ids: Sequence[str] | None) -> Answer:
        one = validate_one(self.answer_model, payload)
        one["items"] = [t.strip() for t in one["items"] if t.strip()]
        return {"items": {RECORD_ITEM: one}, "outputs": {}, "notes": []}

    async def extract(self, fields: Mapping[str, Any], log: list[CallLog]) -> tuple[str, list[str]]:
        answer = await self.ask({"fields": fields}, None, None, log)
        one = answer["items"][RECORD_ITEM]
        return str(one["reason"]), list(one["items"])


class _Verifier(Judge):
    """A verify step: a generated many-judge over the items, with its own prompt wording."""

    def __init__(self, spec: PipelineSpec, step: VerifyStep, model: ChatModel, calls: CallOptions) -> None:
        self.item_field: Literal["chunks", "triples"] = "triples" if step.each == "triples" else "chunks"
        super().__init__(_step_spec(spec, step.key, self.item_field, step), model, calls)
        self.pipeline = spec
        self.step = step
        if step.each in ITEM_FIELDS:
            self.noun = "retrieved chunks" if step.each == "chunks" else "knowledge-graph triples"
            self.heading = title(step.each)
        else:
            source = spec.extract_step(step.each)
            self.noun = source.what
            self.heading = f"{source.what.capitalize()} (from the {title(source.from_).lower()})"
        model_name = "".join(w.capitalize() for w in f"{spec.name}_{step.key}".split("_"))
        item = create_model(
            f"{model_name}ItemVerdict",
            __config__=ConfigDict(extra="forbid"),
            id=(str, Field(description="The item id, exactly as listed")),
            **verdict_fields(self.spec),
        )
        self.item_model = item
        self.answer_model = create_model(
            f"{model_name}Verdicts",
            __config__=ConfigDict(extra="forbid"),
            verdicts=(list[item], Field(description="One verdict per listed item id, each id exactly once")),
        )
        self.schema = wire_schema(self.answer_model)

    def system_text(self, method: Method) -> str:
        s = self.step
        names = [f"the {title(a).lower()}" for a in s.against]
        against = " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)
        parts = [
            PREAMBLE,
            f"Metric: {self.pipeline.name}\n{self.pipeline.description.strip()}",
            f"Task: Judge each of the {self.noun} listed below"
            + (f" against {against}." if against else " on its own."),
        ]
        if s.instructions:
            parts.append(f"Instructions: {s.instructions.strip()}")
        if s.steps:
            parts.append(steps_text(s.steps))
        parts += [describe_scale(self.spec), each_answer("item", "label", steps=bool(s.steps))]
        return "\n\n".join(parts + schema_note(method, self.schema))

    def messages(
        self,
        method: Method,
        data: Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None,
        item_ids: Sequence[str] | None,
    ) -> list[Message]:
        fields = data["fields"]
        blocks = [_field_block(n, fields[n]) for n in self.step.against if fields.get(n) not in (None, "", [])]
        wanted = set(item_ids or [])
        items = [it for it in data[self.item_field] if it["id"] in wanted]
        sep = "\n\n" if self.item_field == "chunks" and self.step.each == "chunks" else "\n"
        blocks.append(f"## {self.heading}\n" + sep.join(render_item(self.item_field, it) for it in items))
        blocks += _deps_blocks(deps)
        blocks.append("Item ids: " + ", ".join(item_ids or []))
        return [self.system_message(method), {"role": "user", "content": "\n\n".join(blocks)}]


# ------------------------------------------------------------------------------------------ evaluator
_Key = tuple[str, int | None]  # (step name, variant index or None when the step runs once)


@dataclasses.dataclass
class _RecordRun:
    """One record's pass through a pipeline: its variants (one per ``max_over`` value), and what each step's
    run (a key) produced, why it failed and the calls it made."""

    rec: Record
    variants: list[Any]
    max_over: str | None
    extracted: dict[_Key, tuple[str, list[str]]] = dataclasses.field(default_factory=dict)
    ext_errors: dict[_Key, Failed] = dataclasses.field(default_factory=dict)
    ext_logs: dict[_Key, list[CallLog]] = dataclasses.field(default_factory=dict)
    verdicts: dict[_Key, list[ItemVerdict]] = dataclasses.field(default_factory=dict)
    ver_errors: dict[_Key, Failed] = dataclasses.field(default_factory=dict)
    ver_logs: dict[_Key, list[CallLog]] = dataclasses.field(default_factory=dict)

    @property
    def n(self) -> int:
        return len(self.variants)

    def fields(self, v: int | None) -> dict[str, Any]:
        """The record's fields as variant ``v`` reads them (its own ``max_over`` value)."""
        data = dict(self.rec.data)
        if v is not None and self.max_over is not None:
            data[self.max_over] = self.variants[v]
        return data


class PipelineEvaluator:
    """Runs a pipeline spec on a record: extract steps concurrently, then verify steps, then the formula."""

    def __init__(self, spec: PipelineSpec, model: ChatModel, calls: CallOptions | None = None) -> None:
        """``calls``: how the steps call the model (no log-probabilities: a step's answer has no one verdict
        token; an extraction is asked once, whatever ``samples`` says)."""
        self.spec = spec
        verify = (calls or CallOptions()).without_logprobs()
        extract = dataclasses.replace(verify, samples=1)
        self.extractors = {
            s.name: _Extractor(spec, s, model, extract) for s in spec.steps if isinstance(s, ExtractStep)
        }
        self.verifiers = {s.key: _Verifier(spec, s, model, verify) for s in spec.steps if isinstance(s, VerifyStep)}

    def _variants(self, data: Mapping[str, Any]) -> list[Any]:
        field = self.spec.aggregate.max_over
        if field is None:
            return [None]
        value = data.get(field)
        if isinstance(value, list) and len(value) > 1:
            return list(value)
        return [value[0] if isinstance(value, list) and value else value]

    def _keys(self, step: ExtractStep | VerifyStep, n: int) -> list[_Key]:
        name = step.name if isinstance(step, ExtractStep) else step.key
        return [(name, v) for v in range(n)] if self.spec.varies(step) else [(name, None)]

    @staticmethod
    def _id(key: _Key, n: int) -> str:
        name, v = key
        return name if v is None or n == 1 else f"{name}#{v + 1}"

    async def ajudge(
        self,
        record: Record | Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None = None,
        only_items: Sequence[str] | None = None,
    ) -> JudgeResult:
        """Judge one record. Model trouble never raises: a failed step leaves an explicit error verdict."""
        rec, result, deps = begin(self.spec, record, deps)
        if deps is None:
            return result
        run = _RecordRun(rec, self._variants(rec.data), self.spec.aggregate.max_over)
        # 1. extract: every list at once (a list read per max_over value is extracted once per value)
        ext_keys = [k for e in self.extractors.values() for k in self._keys(e.step, run.n)]
        run.ext_logs = {k: [] for k in ext_keys}
        await asyncio.gather(*(self._extract(run, k) for k in ext_keys))
        # 2. verify: every verify step at once, each one call per step (plus re-asks), all items together
        ver_keys = [k for j in self.verifiers.values() for k in self._keys(j.step, run.n)]
        await asyncio.gather(*(self._verify(run, k, deps) for k in ver_keys))
        # 3. keep everything, in step order: extraction rows, item verdicts, texts, calls; then the score
        self._keep(result, run, ext_keys, ver_keys)
        verdict, units = self._score(run.verdicts, run.ver_errors, run.n)
        result.verdicts.insert(0, verdict)
        if units is not None:
            result.outputs[UNITS] = units
        return result

    async def _extract(self, run: _RecordRun, key: _Key) -> None:
        source = self.extractors[key[0]].step.from_
        if run.fields(key[1]).get(source) in (None, "", []):  # an optional field left empty: nothing to list
            run.extracted[key] = (f"no {source} to extract from", [])
            return
        try:
            run.extracted[key] = await self.extractors[key[0]].extract(run.fields(key[1]), run.ext_logs[key])
        except Exception as exc:
            run.ext_errors[key] = failure_of(exc)  # typed and redacted like every other failure

    async def _verify(self, run: _RecordRun, key: _Key, deps: Mapping[str, JudgeResult]) -> None:
        step = self.verifiers[key[0]].step
        rec = run.rec
        if step.each in ITEM_FIELDS:
            items = rec.items(step.each)
            field = step.each
        else:
            varies = self.spec.varies(self.spec.extract_step(step.each))
            src: _Key = (step.each, key[1] if varies else None)
            if src not in run.extracted:
                kind = run.ext_errors[src].kind if src in run.ext_errors else ErrorKind.UNKNOWN
                run.ver_errors[key] = Failed(kind, f"the extraction '{self._id(src, run.n)}' failed")
                return
            items = [{"id": f"s{i}", "text": t} for i, t in enumerate(run.extracted[src][1], 1)]
            field = "chunks"  # the generated judge's item field; the prompt names the items properly
        if not items:  # nothing to judge: the aggregate's `empty` value applies
            run.verdicts[key] = []
            return
        synthetic = Record(id=rec.id, hash=rec.hash, data={field: items, "fields": run.fields(key[1])})
        res = await self.verifiers[key[0]].ajudge(synthetic, deps)
        run.ver_logs[key] = res.calls
        if res.error:  # the generated judge could not start (it has its items and no dependency of its own)
            run.ver_errors[key] = Failed(ErrorKind.UNKNOWN, res.error)
        else:
            run.verdicts[key] = res.verdicts

    def _keep(self, result: JudgeResult, run: _RecordRun, ext_keys: list[_Key], ver_keys: list[_Key]) -> None:
        """The steps' rows and calls into ``result``, in step order: each extraction (its count and texts, or its
        error), then each verify step's item verdicts under its prefix."""
        for key in ext_keys:
            sid = self._id(key, run.n)
            if key in run.extracted:
                reason, items = run.extracted[key]
                result.verdicts.append(ItemVerdict(item_id=sid, value=len(items), reason=reason))
                result.outputs[sid] = items
            else:
                failed = run.ext_errors.get(key, Failed(ErrorKind.UNKNOWN, "no answer"))
                result.verdicts += error_verdicts(failed, [sid], f"extraction failed: {failed.text}")
            for c in run.ext_logs[key]:
                c.items = [sid]
            result.calls.extend(run.ext_logs[key])
        for key in ver_keys:
            prefix = self._id(key, run.n)
            for v in run.verdicts.get(key, []):
                result.verdicts.append(v.model_copy(update={"item_id": f"{prefix}:{v.item_id}"}))
            for c in run.ver_logs.get(key, []):
                c.items = [f"{prefix}:{i}" for i in c.items]
            result.calls.extend(run.ver_logs.get(key, []))

    def _score(
        self, verdicts: dict[_Key, list[ItemVerdict]], errors: dict[_Key, Failed], n: int
    ) -> tuple[ItemVerdict, float | None]:
        """The record-level verdict: the formula over the verdict counts (best variant for max_over), and the
        number of units its score is over (None: not poolable, or failed)."""
        agg = self.spec.aggregate
        scored: list[tuple[float | None, str, float | None]] = []
        for v in range(n):
            labels: dict[str, list[str | None]] = {}
            failed: list[Failed] = []
            for name, judge in self.verifiers.items():
                key: _Key = (name, v if self.spec.varies(judge.step) else None)
                if key in errors:
                    failed.append(Failed(errors[key].kind, f"{self._id(key, n)}: {errors[key].text}"))
                    continue
                got = verdicts.get(key, [])
                bad = [x for x in got if x.status != "ok"]
                if bad:
                    kind = bad[0].error_kind or ErrorKind.INCOMPLETE
                    missing = ", ".join(x.item_id for x in bad)
                    failed.append(Failed(kind, f"{self._id(key, n)}: no verdict for {missing}"))
                labels[name] = [x.label for x in got]
            if failed:  # the first failure's kind: what to fix first
                [verdict] = error_verdicts(failed[0], [RECORD_ITEM], "; ".join(f.text for f in failed)[:1000])
                return verdict, None
            scored.append(aggregate_counts(agg, labels, {s.key: s.scale() for s in self.verifiers_steps()}))
        best = max(range(n), key=lambda i: _or(scored[i][0], -1.0))
        score, reason, units = scored[best]
        if n > 1:
            each = ", ".join(f"#{i + 1}: {'-' if s is None else round(s, 4)}" for i, (s, _, _) in enumerate(scored))
            reason = f"best of {n} values of {agg.max_over} (#{best + 1}; {each}) - {reason}"
        return ItemVerdict(score=score, reason=reason), units

    def verifiers_steps(self) -> list[VerifyStep]:
        return [j.step for j in self.verifiers.values()]


# ---------------------------------------------------------------------------------------------- formula
def _or(x: float | None, default: float) -> float:
    return default if x is None else x


def _fmt(x: float) -> str:
    return f"{x:.4g}"


def aggregate_counts(
    agg: RatioAggregate | CountsAggregate | RankedPrecisionAggregate | ScoreMeanAggregate,
    labels: Mapping[str, Sequence[str | None]],
    scales: Mapping[str, CategoricalScale],
) -> tuple[float | None, str, float | None]:
    """(score, how it was computed, units) from each verify step's labels in item order. Pure: no model call.

    ``units``: the score's denominator (items, or tp + fp … for counts), so that records pool into a dataset
    score as Σ numerators / Σ denominators; None for rank-weighted precision, which does not pool."""
    empty = agg.empty
    undefined = "nothing to count" + (f"; score {_fmt(empty)} by definition" if empty is not None else "; no score")
    if isinstance(agg, RatioAggregate):
        labs = list(labels.get(agg.step, []))
        pos = sum(1 for lab in labs if lab in agg.positive)
        if not labs:
            return empty, f"{agg.step}: {undefined}", 0
        share = pos / len(labs)
        return share, f"{pos} of {len(labs)} {agg.step} are {' / '.join(agg.positive)}: {_fmt(share)}", len(labs)
    if isinstance(agg, RankedPrecisionAggregate):
        labs = list(labels.get(agg.step, []))
        if not labs:
            return empty, f"{agg.step}: {undefined}", None
        hits = 0
        terms: list[str] = []
        total = 0.0
        for k, lab in enumerate(labs, 1):
            if lab in agg.positive:
                hits += 1
                total += hits / k
                terms.append(f"{hits}/{k}")
        if not hits:
            return 0.0, f"none of the {len(labs)} {agg.step} is {' / '.join(agg.positive)}: 0", None
        mean = total / hits
        terms_text = " + ".join(terms)
        return mean, f"mean precision@k at the positive ranks = ({terms_text}) / {hits} = {_fmt(mean)}", None
    if isinstance(agg, ScoreMeanAggregate):
        named = [lab for lab in labels.get(agg.step, []) if lab is not None]
        scores: dict[str, float] = scales[agg.step].scores() or {}
        if not named:
            return empty, f"{agg.step}: {undefined}", 0
        avg = sum(scores[lab] for lab in named) / len(named)
        return avg, f"mean label score of {len(named)} {agg.step}: {_fmt(avg)}", len(named)

    def count(refs: Sequence[str]) -> int:
        total = 0
        for ref in refs:
            step, _, lab = ref.partition(".")
            total += sum(1 for x in labels.get(step, []) if x == lab)
        return total

    tp, fp, fn = count(agg.tp), count(agg.fp), count(agg.fn)
    counts = f"tp={tp}, fp={fp}, fn={fn}"
    den: float
    if agg.kind == "precision":
        den, formula = tp + fp, "tp / (tp + fp)"
    elif agg.kind == "recall":
        den, formula = tp + fn, "tp / (tp + fn)"
    else:
        den, formula = tp + 0.5 * (fp + fn), "tp / (tp + ½(fp + fn))"
    if den == 0:
        return empty, f"{counts}: {undefined}", 0
    return tp / den, f"{counts}; {agg.kind} = {formula} = {_fmt(tp / den)}", den
