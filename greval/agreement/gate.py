"""A gate for pipelines: does a judge agree with people well enough? Pure: conditions in, a verdict and its
one-line reason out, from an :class:`~greval.agreement.models.AgreementReport` computed elsewhere."""

from __future__ import annotations

import math
import operator
import re
from collections.abc import Callable, Sequence
from typing import Literal

from pydantic import BaseModel

from greval.agreement.design import report_name
from greval.agreement.models import AgreementReport, Estimate
from greval.errors import UserError, option

Side = Literal["value", "lower", "upper"]

ALIASES = {"kappa": "cohen_kappa", "κ": "cohen_kappa", "f1": "macro_f1", "alpha": "alpha_nominal"}
"""Short names people write for report metrics (any report metric name works as written)."""

_OPS: dict[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "≥": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "≤": operator.le,
    "<": operator.lt,
}
_CONDITION = re.compile(r"^\s*([^\s<>=≥≤]+)\s*(>=|<=|≥|≤|>|<)\s*([-+]?\d*\.?\d+(?:[eE][-+]?\d+)?)\s*$")


class Condition(BaseModel):
    """``metric op threshold``, e.g. ``kappa>=0.6`` or ``mae<=0.5``."""

    metric: str
    op: str
    threshold: float

    @classmethod
    def parse(cls, text: str) -> Condition:
        m = _CONDITION.match(text)
        if m is None:
            raise UserError(f"condition {text!r}: write METRIC OP NUMBER, e.g. 'kappa>=0.6' or 'mae<=0.5'")
        name, op, value = m.groups()
        return cls(metric=ALIASES.get(name, name), op=op, threshold=float(value))

    def __str__(self) -> str:
        return f"{self.metric} {self.op} {self.threshold:g}"


class GateResult(BaseModel):
    """Whether every condition held, and a one-line reason per condition (failed ones first)."""

    passed: bool
    reasons: list[str]

    @property
    def line(self) -> str:
        return f"gate {'passed' if self.passed else 'failed'}: " + "; ".join(self.reasons)


def _side(e: Estimate, side: Side, what: str = "") -> tuple[float | None, str]:
    """The value tested and how it is described (``what``: which figure it is, when that needs saying)."""
    parts = [what] if what else []
    x = e.value
    if side != "value":
        x = e.ci_low if side == "lower" else e.ci_high
        parts.append(f"{side} end of its {'CI' if x is not None else 'CI, which is undefined'}")
    return x, f" ({'; '.join(parts)})" if parts else ""


def evaluate(
    report: AgreementReport, conditions: Sequence[Condition], side: Side = "value", vs_ceiling: float | None = None
) -> GateResult:
    """Check each condition on the report's figure (its point value, or an end of its bootstrap CI) — the
    design-weighted one when the labelled items were not a random sample and the figure has one — and with
    ``vs_ceiling`` F that the judge agrees with people at least F times as well as people agree with each
    other (mean pairwise figure of the human ceiling). An undefined figure fails, saying why."""
    failed: list[str] = []
    held: list[str] = []
    weighted = {report_name(d.name): d for d in report.design.estimates} if report.design else {}
    for c in conditions:
        if c.metric not in report.metrics and c.metric not in weighted:
            known = [*report.metrics, *(w for w in weighted if w not in report.metrics)]
            raise UserError(f"no metric {c.metric!r} in this report; it has: {', '.join(known)}")
        if c.metric in weighted:  # a non-random sample: the figure weighted back to every judged item
            d = weighted[c.metric]
            e = Estimate(value=d.weighted, n=0, ci_low=d.ci_low, ci_high=d.ci_high, note=d.note)
            x, how = _side(e, side, "design-weighted")
        else:
            e = report.metrics[c.metric]
            x, how = _side(e, side, "unweighted, on a non-random sample" if report.design is not None else "")
        if x is None or math.isnan(x):
            failed.append(f"{c.metric}{how} is undefined ({e.note or 'no value'}), needs {c.op} {c.threshold:g}")
        elif _OPS[c.op](x, c.threshold):
            held.append(f"{c.metric}{how} {x:.3f} {c.op} {c.threshold:g}")
        else:
            failed.append(f"{c.metric}{how} {x:.3f}, needs {c.op} {c.threshold:g}")
    if vs_ceiling is not None:
        ok, text = _vs_ceiling(report, side, vs_ceiling)
        (held if ok else failed).append(text)
    return GateResult(passed=not failed, reasons=failed + held)


def _vs_ceiling(report: AgreementReport, side: Side, factor: float) -> tuple[bool, str]:
    """Whether the judge agrees with people at least `factor` times as well as people agree with each other
    (mean pairwise figures of the human ceiling), and the reason."""
    ce = report.ceiling
    if ce is None:
        return False, f"no human ceiling (needs items labelled by 2 or more people) for {option('vs_ceiling')}"
    judge, human = _side(ce.judge_pairwise_mean, side)[0], ce.human_pairwise_mean.value
    if judge is None or human is None or math.isnan(judge) or math.isnan(human):
        return False, f"the ceiling's {ce.metric} is undefined, needed for {option('vs_ceiling')}"
    ok = judge >= factor * human
    return ok, f"judge–human {ce.metric} {judge:.3f} {'≥' if ok else '<'} {factor:g} × human–human {human:.3f}"
