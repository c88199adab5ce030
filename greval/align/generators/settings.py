"""Settings the spec allows changing without new words: the labels' order (the judge's position bias).

Only unordered labels are reordered (an ordered scale's order is its meaning). Sampling settings (samples,
temperature) change the judge's identity rather than the spec's version, so two versions could no longer be
told apart by ``NAME@HASH``: they are not searched here.
"""

from __future__ import annotations

from collections.abc import Sequence

from greval.align.edits import validated
from greval.align.generators.base import Instance, TrainContext
from greval.align.models import AlignOptions, LabelOrderStep, Recipe, Step
from greval.spec import CategoricalScale, Spec


class LabelOrder:
    """``label_order``: the labels listed in reverse order."""

    kind = "label_order"

    def propose(self, parent: Recipe, base: Spec, round_no: int, options: AlignOptions) -> Sequence[Step]:
        scale = base.scale
        if not options.label_order or parent.has(self.kind) or not isinstance(scale, CategoricalScale):
            return []
        return [] if scale.ordered else [LabelOrderStep()]

    async def apply(self, step: Step, ctx: TrainContext) -> Instance:
        data = ctx.spec.model_dump(mode="json")
        data["scale"]["labels"] = list(reversed(data["scale"]["labels"]))
        return Instance(validated(data, f"{ctx.spec.name} (labels reversed)"))


__all__ = ["LabelOrder"]
