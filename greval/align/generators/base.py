"""The one interface every candidate generator implements (:class:`Generator`), what a step reads while
instantiating (:class:`TrainContext`) and what it gives back (:class:`Instance`): below the generators and
their table (:func:`greval.align.generators.generators`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol

from greval.agreement.models import AgreementScale
from greval.align.models import AlignOptions, Recipe, Step
from greval.align.ports import Optimizer
from greval.align.view import LabelView
from greval.spec import Spec


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
