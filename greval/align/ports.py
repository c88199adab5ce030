"""The two things the pure core asks of the outside world: verdicts of a spec version on some units, and an
optimizer's proposals. The store implements both (``greval.align.store_judge``); the tests simulate them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from pydantic import Field

from greval.align.models import Cost, Frozen, Judged, Unit
from greval.spec import Spec


class JudgeFn(Protocol):
    """Verdicts of spec version ``spec`` on ``units`` (paid once: what is stored is reused)."""

    def estimate(self, spec: Spec, units: Sequence[Unit], *, fresh: bool = False, extra_chars: int = 0) -> Cost:
        """What judging these units would cost now (``fresh``: as if nothing were stored; ``extra_chars``: a
        longer prompt, e.g. examples still to come): exact calls, an upper bound on tokens."""
        ...

    async def __call__(self, spec: Spec, units: Sequence[Unit]) -> Judged: ...


class Disagreement(Frozen):
    """One unit the parent got wrong, as the optimizer sees it."""

    record: str = Field(description="The record as the judge read it (truncated).")
    judge: str = Field(description="The judge's answer, or 'no valid answer'.")
    judge_reason: str = ""
    people: str = Field(description="The people's answer(s), with their comments.")


class RewriteRequest(Frozen):
    """What the optimizer reads to propose edits: the spec, the confusion on the training units, disagreements."""

    spec_yaml: str
    confusion: str
    disagreements: tuple[Disagreement, ...]
    proposal: int
    proposals: int
    scale_items: tuple[str, ...] = Field(description="Label names (or value ranges) in the spec's order.")


class Edits(Frozen):
    """Structured edits; an empty field keeps the spec's text."""

    description: str = ""
    instructions: str = ""
    steps: tuple[str, ...] = ()
    scale: tuple[str, ...] = Field((), description="New label / range descriptions, in the spec's order.")

    @property
    def empty(self) -> bool:
        return not (self.description.strip() or self.instructions.strip() or self.steps or any(self.scale))


class ReasonRequest(Frozen):
    """Ask for a short reason why people chose ``answer`` on this record (for a few-shot example)."""

    record: str
    answer: str
    meaning: str = Field(description="The label's (or range's) description in the spec.")


class Proposal(Frozen):
    edits: Edits | None
    cost: Cost = Cost()
    note: str | None = None


class Reasons(Frozen):
    reasons: tuple[str | None, ...]
    cost: Cost = Cost()


class Optimizer(Protocol):
    """The model that proposes rewrites and writes example reasons (default: the judge itself)."""

    def estimate_rewrite(self, request: RewriteRequest) -> Cost: ...

    async def rewrite(self, request: RewriteRequest) -> Proposal: ...

    def estimate_reasons(self, requests: Sequence[ReasonRequest]) -> Cost: ...

    async def reasons(self, requests: Sequence[ReasonRequest]) -> Reasons: ...

    def allowance(self, spec: Spec, rewrites: int, reasons: int) -> Cost:
        """An upper bound on ``rewrites`` rewrite calls and ``reasons`` reason calls for this spec (the reserve
        the final instantiation may need)."""
        ...


__all__ = ["Disagreement", "Edits", "JudgeFn", "Optimizer", "Proposal", "ReasonRequest", "Reasons", "RewriteRequest"]
