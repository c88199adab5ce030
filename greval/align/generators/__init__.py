"""Candidate generators: each a small strategy behind one interface (:class:`Generator`).

A generator *proposes* steps from a parent recipe without reading any label, and *applies* a step to the
parent's instance with a :class:`TrainContext`, whose view holds only the units that instance may learn from
(the other folds, or the whole search part for the final instance). To add one: a step model in
``greval.align.models``, a module here, one entry in :func:`generators`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from greval.agreement.models import AgreementScale
from greval.align.models import AlignOptions, Answer, Recipe, Step, Unit
from greval.align.ports import Optimizer
from greval.align.view import LabelView
from greval.spec import Spec

__all__ = ["Generator", "Instance", "TrainContext", "generators", "human_answer", "is_wrong"]


@dataclass(frozen=True)
class TrainContext:
    """What a step may read while instantiating: the training view (units, the parent's answers on them,
    their records), the parent's instance, the optimizer, and a salt that seeds its draws."""

    view: LabelView
    spec: Spec
    scale: AgreementScale
    optimizer: Optimizer
    options: AlignOptions
    salt: str


@dataclass(frozen=True)
class Instance:
    """A step's result: the new spec (None: not applicable here, ``note`` says why) and the units it holds as
    few-shot examples."""

    spec: Spec | None
    note: str | None = None
    examples: tuple[str, ...] = ()
    shown: tuple[tuple[str, str, str, str], ...] = field(default=())  # (unit, answer, reason, reason_from)


class Generator(Protocol):
    kind: str

    def propose(self, parent: Recipe, base: Spec, round_no: int, options: AlignOptions) -> Sequence[Step]:
        """The steps worth trying on top of ``parent`` (no label is read here)."""
        ...

    async def apply(self, step: Step, ctx: TrainContext) -> Instance:
        """The parent's instance with this step applied, learnt from ``ctx.view`` only."""
        ...


def human_answer(unit: Unit, scale: AgreementScale) -> str:
    """The people's consensus as the judge would answer it: the label's name, or the (rounded) value."""
    if scale.kind == "categorical":
        return (scale.labels or [])[int(unit.human)]
    return str(round(unit.human))


def is_wrong(unit: Unit, answer: Answer | None, scale: AgreementScale) -> bool:
    """Whether the judge's answer differs from the people's consensus (no valid answer is wrong)."""
    if answer is None or not answer.ok:
        return True
    if scale.kind == "categorical":
        return answer.label != human_answer(unit, scale)
    return answer.value is None or abs(answer.value - unit.human) >= 0.5


def generators() -> dict[str, Generator]:
    """Every generator, by its step kind."""
    from greval.align.generators.fewshot import FewShot
    from greval.align.generators.rewrite import Rewrite
    from greval.align.generators.settings import LabelOrder

    found: list[Generator] = [FewShot(), Rewrite(), LabelOrder()]
    return {g.kind: g for g in found}
