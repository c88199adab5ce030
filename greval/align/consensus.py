"""The people's consensus on a unit as the judge would answer it, and whether the judge's answer missed it:
read by the generators (:mod:`greval.align.generators`) and the optimizer's text (:mod:`greval.align.text`)."""

from __future__ import annotations

from greval.agreement.models import AgreementScale
from greval.align.models import Answer, Unit


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
