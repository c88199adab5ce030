"""When to stop labelling: how many more labels a figure's interval needs to shrink to a target width.

Pure arithmetic on a figure already estimated with its bootstrap interval. The rule assumes the interval's
half-width falls like ``1/sqrt(n)`` as labels are added with the same design (the same mix of uncertain and
control items): ``n_needed = n * (h / target)^2``. That is the usual large-sample rate; with few labels, or
when later rounds change the mix, it is a planning figure, so the advice is recomputed after every round.
"""

from __future__ import annotations

import math
import re

from pydantic import BaseModel, Field

from greval.errors import UserError, option

_TARGET = re.compile(r"^\s*([A-Za-z_][\w\[\]. -]*?)\s*(?:±|\+-|\+/-)\s*([0-9]*\.?[0-9]+)\s*$")


class Target(BaseModel):
    """A figure and the CI half-width wanted for it (``"kappa±0.05"``)."""

    figure: str
    half_width: float = Field(gt=0)

    @classmethod
    def parse(cls, text: str) -> Target:
        m = _TARGET.match(text)
        if m is None:
            raise UserError(
                f"{option('target')} {text!r}: write FIGURE±WIDTH, e.g. 'kappa±0.05' or 'accuracy+-0.03' "
                "(figures: accuracy, kappa, prevalence[LABEL])"
            )
        width = float(m.group(2))
        if width <= 0:
            raise UserError(f"{option('target')} {text!r}: the half-width must be positive")
        return cls(figure=m.group(1).strip(), half_width=width)


class Advice(BaseModel):
    """What the interval of one figure says about labelling more."""

    figure: str
    target: float
    labelled: int = Field(description="labelled items the current interval rests on")
    half_width: float | None = Field(None, description="(CI high - CI low) / 2 now")
    more: int | None = Field(None, description="further labels expected to reach the target (0: reached)")
    reached: bool = False
    line: str


def advise(target: Target, labelled: int, ci_low: float | None, ci_high: float | None) -> Advice:
    """The stopping recommendation for one figure from its current interval."""
    base = {"figure": target.figure, "target": target.half_width, "labelled": labelled}
    if ci_low is None or ci_high is None or labelled < 1:
        return Advice(
            **base, line=f"{target.figure}: no interval yet (label more items, then run `greval review status`)"
        )
    h = (ci_high - ci_low) / 2.0
    if h <= target.half_width:
        return Advice(
            **base,
            half_width=h,
            more=0,
            reached=True,
            line=f"stop: the {target.figure} interval's half-width {h:.3f} is within ±{target.half_width:g}",
        )
    more = math.ceil(labelled * ((h / target.half_width) ** 2 - 1.0))
    return Advice(
        **base,
        half_width=h,
        more=more,
        line=(
            f"continue: about {more} more labels expected to bring the {target.figure} half-width from {h:.3f} "
            f"to ±{target.half_width:g} (from {labelled} labelled items, assuming it shrinks like 1/sqrt(n))"
        ),
    )
