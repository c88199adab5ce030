"""Rewrites: the optimizer sees the spec, the confusion of the parent's answers with people's on the training
units and a seeded sample of its disagreements there (the record as the judge read it, its reason, people's
answers and comments), and proposes structured edits; each is validated as a spec before it costs a judgement."""

from __future__ import annotations

from collections.abc import Sequence

from greval.align.consensus import human_answer, is_wrong
from greval.align.edits import apply_edits, scale_items
from greval.align.generators.base import Instance, TrainContext
from greval.align.models import AlignOptions, Recipe, RewriteStep, Step, Unit
from greval.align.ports import Disagreement, RewriteRequest
from greval.align.text import confusion_text, record_text, spec_yaml
from greval.dataset.sample import rank
from greval.errors import SpecError
from greval.spec import Spec


def _people(unit: Unit, consensus: str) -> str:
    parts = []
    for a in unit.annotations:
        said = a.answer if a.answer is not None else "no answer"
        parts.append(f"{said}" + (f' (comment: "{a.comment.strip()}")' if a.comment and a.comment.strip() else ""))
    return f"{consensus} — " + "; ".join(parts) if parts else consensus


class Rewrite:
    """``rewrite``: proposal n of ``options.rewrites`` per parent and round."""

    kind = "rewrite"

    def propose(self, parent: Recipe, base: Spec, round_no: int, options: AlignOptions) -> Sequence[Step]:
        return [RewriteStep(proposal=i) for i in range(options.rewrites)]

    async def apply(self, step: Step, ctx: TrainContext) -> Instance:
        assert isinstance(step, RewriteStep)
        view, scale, spec = ctx.view, ctx.scale, ctx.spec
        units = view.units
        wrong = [u for u in units if is_wrong(u, view.answer(u), scale)]
        if not wrong:
            return Instance(None, "the parent agrees with people on every training unit: nothing to rewrite for")
        salt = (ctx.options.seed, ctx.salt, "rewrite", str(step.proposal))
        wrong.sort(key=lambda u: rank(salt[0], *salt[1:], u.key))
        shown = []
        for u in wrong[: ctx.options.disagreements]:
            a = view.answer(u)
            judged = "no valid answer" if a is None or not a.ok else (a.label or str(round(a.value or 0)))
            shown.append(
                Disagreement(
                    record=record_text(spec, view.record(u), u.item_id),
                    judge=judged,
                    judge_reason=(a.reason or "") if a is not None else "",
                    people=_people(u, human_answer(u, scale)),
                )
            )
        answers = {u.key: a for u in units if (a := view.answer(u)) is not None}
        request = RewriteRequest(
            spec_yaml=spec_yaml(spec),
            confusion=confusion_text(units, answers, scale),
            disagreements=tuple(shown),
            proposal=step.proposal,
            proposals=ctx.options.rewrites,
            scale_items=scale_items(spec),
        )
        proposal = await ctx.optimizer.rewrite(request)
        if proposal.edits is None or proposal.edits.empty:
            return Instance(None, proposal.note or "the optimizer proposed no edit")
        try:
            return Instance(apply_edits(spec, proposal.edits, f"{spec.name} (rewrite #{step.proposal + 1})"))
        except SpecError as exc:
            return Instance(None, f"the proposed edit is not a valid spec: {exc}")


__all__ = ["Rewrite"]
