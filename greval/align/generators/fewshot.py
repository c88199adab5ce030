"""Few-shot examples from the labelled training units: the parent's mistakes first, balanced over labels,
within a prompt-token budget, each with the people's label and a short reason (an annotator's comment when
there is one, else one the optimizer writes for that label, else the label's own description).

For a per-item metric (a trajectory's steps, a conversation's turns, chunks) a unit is one item: its example is
the whole record with the people's verdict on that item alone, and the example's prompt lists that item's id
only (:func:`greval.judge.prompt.example_messages`), as the judge is asked about the items it must answer."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from greval.align.consensus import human_answer, is_wrong
from greval.align.edits import validated
from greval.align.generators.base import Instance, TrainContext
from greval.align.models import AlignOptions, FewShotStep, Recipe, Step, Unit
from greval.align.ports import ReasonRequest
from greval.align.text import record_text
from greval.dataset.sample import rank
from greval.spec import CategoricalScale, Spec

CHARS_PER_TOKEN = 4
"""Characters per token when sizing examples against ``example_tokens`` (a typical English tokenizer)."""


def meaning(spec: Spec, answer: str) -> str:
    """The spec's description of a label, or of the range a value falls in."""
    if isinstance(spec.scale, CategoricalScale):
        return next((lab.description for lab in spec.scale.labels if lab.name == answer), "")
    value = int(answer)
    return next((r.description for r in spec.scale.ranges if r.min <= value <= r.max), "")


def comment(unit: Unit, answer: str) -> str | None:
    """The first comment of a person who gave the consensus answer."""
    for a in unit.annotations:
        if a.comment and a.comment.strip() and a.answer is not None and _same(a.answer, answer):
            return a.comment.strip()
    return None


def _same(given: str, answer: str) -> bool:
    try:
        return float(given) == float(answer)
    except ValueError:
        return given == answer


class FewShot:
    """``few_shot``: examples per label drawn from the training view."""

    kind = "few_shot"

    def propose(self, parent: Recipe, base: Spec, round_no: int, options: AlignOptions) -> Sequence[Step]:
        if parent.has(self.kind) or base.outputs:
            return []
        return [FewShotStep(per_label=n) for n in options.shots]

    async def apply(self, step: Step, ctx: TrainContext) -> Instance:
        assert isinstance(step, FewShotStep)
        spec = ctx.spec
        if spec.outputs:
            return Instance(None, "few-shot examples are made for metrics without extra outputs")
        chosen = self.choose(step, ctx)
        if not chosen:
            return Instance(None, "no training unit fits the few-shot token budget")
        answers = [human_answer(u, ctx.scale) for u in chosen]
        reasons: list[str | None] = [comment(u, a) for u, a in zip(chosen, answers, strict=True)]
        sources = ["comment" if r else "" for r in reasons]
        asked = [i for i, r in enumerate(reasons) if r is None]
        if asked:
            requests = [
                ReasonRequest(
                    record=record_text(spec, ctx.view.record(chosen[i]), chosen[i].item_id),
                    answer=answers[i],
                    meaning=meaning(spec, answers[i]),
                )
                for i in asked
            ]
            written = (await ctx.optimizer.reasons(requests)).reasons
            for i, text in zip(asked, written, strict=True):
                if text and text.strip():
                    reasons[i], sources[i] = text.strip(), "optimizer"
                else:
                    reasons[i] = f'People chose "{answers[i]}": {meaning(spec, answers[i])}'.strip()
                    sources[i] = "label description"
        examples = [self.example(spec, ctx, u, a, r or "") for u, a, r in zip(chosen, answers, reasons, strict=True)]
        data = spec.model_dump(mode="json")
        data["examples"] = [*data.get("examples", []), *examples]
        new = validated(data, f"{spec.name} (few-shot)")
        shown = tuple((u.key, a, r or "", s) for u, a, r, s in zip(chosen, answers, reasons, sources, strict=True))
        return Instance(new, examples=tuple(u.key for u in chosen), shown=shown)

    def choose(self, step: FewShotStep, ctx: TrainContext) -> list[Unit]:
        """Per label, the parent's mistakes first (then a seeded order), one unit per record, dealt label by
        label until ``per_label`` each or the token budget is spent."""
        view, scale = ctx.view, ctx.scale
        order = sorted(
            view.units,
            key=lambda u: (not is_wrong(u, view.answer(u), scale), rank(ctx.options.seed, ctx.salt, "few-shot", u.key)),
        )
        by_label: dict[str, list[Unit]] = {}
        for u in order:
            by_label.setdefault(human_answer(u, scale), []).append(u)
        labels = sorted(
            by_label, key=lambda a: (scale.labels or []).index(a) if scale.kind == "categorical" else float(a)
        )
        budget = ctx.options.example_tokens * CHARS_PER_TOKEN
        used, chosen, records = 0, [], set()
        for _ in range(step.per_label):
            for label in labels:
                for u in by_label[label]:
                    if u.record_hash in records:
                        continue
                    size = len(record_text(ctx.spec, view.record(u), u.item_id, limit=None)) + 200  # + answer, reason
                    if used + size > budget:
                        continue
                    chosen.append(u)
                    records.add(u.record_hash)
                    used += size
                    break
        return chosen

    @staticmethod
    def example(spec: Spec, ctx: TrainContext, unit: Unit, answer: str, reason: str) -> dict[str, Any]:
        data = ctx.view.record(unit)
        inputs = {name: data[name] for name in spec.inputs if name in data}
        verdict: dict[str, Any] = (
            {"label": answer} if isinstance(spec.scale, CategoricalScale) else {"value": int(answer)}
        )
        if spec.each:  # one item's verdict: the example asks about that item alone
            return {"inputs": inputs, "output": {"verdicts": [{"id": unit.item_id, "reason": reason, **verdict}]}}
        return {"inputs": inputs, "output": {"reason": reason, **verdict}}


__all__ = ["CHARS_PER_TOKEN", "FewShot", "comment", "meaning"]
