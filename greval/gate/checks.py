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


class Check(BaseModel):
    """One condition checked: its name (a JUnit test case's), whether it held, and its one-line reason."""

    name: str
    passed: bool
    text: str


class GateResult(BaseModel):
    """Whether every condition held, and a one-line reason per condition (failed ones first)."""

    passed: bool
    reasons: list[str]
    checks: list[Check] = []

    @property
    def line(self) -> str:
        return f"gate {'passed' if self.passed else 'failed'}: " + "; ".join(self.reasons)

    @classmethod
    def of(cls, checks: Sequence[Check]) -> GateResult:
        failed = [c for c in checks if not c.passed]
        held = [c for c in checks if c.passed]
        return cls(passed=not failed, reasons=[c.text for c in failed + held], checks=list(checks))

    @property
    def lines(self) -> list[str]:
        """What a terminal shows: one line when every condition held, else one line per failed condition."""
        if self.passed:
            return [self.line]
        return [f"gate failed: {c.text}" for c in self.checks if not c.passed]


def side_of(e: Estimate, side: Side, what: str = "") -> tuple[float | None, str]:
    """The value tested and how it is described (``what``: which figure it is, when that needs saying)."""
    parts = [what] if what else []
    x = e.value
    if side != "value":
        x = e.ci_low if side == "lower" else e.ci_high
        parts.append(f"{side} end of its {'CI' if x is not None else 'CI, which is undefined'}")
    return x, f" ({'; '.join(parts)})" if parts else ""


def check(label: str, e: Estimate, op: str, threshold: float, side: Side = "value", what: str = "") -> Check:
    """Whether ``label``'s figure (its point value, or an end of its CI) holds ``op threshold``; an undefined
    figure fails, saying why. The one test of every gate condition (agreement metrics, dataset scores)."""
    x, how = side_of(e, side, what)
    name = f"{label} {op} {threshold:g}"
    if x is None or math.isnan(x):
        text = f"{label}{how} is undefined ({e.note or 'no value'}), needs {op} {threshold:g}"
        return Check(name=name, passed=False, text=text)
    if _OPS[op](x, threshold):
        return Check(name=name, passed=True, text=f"{label}{how} {x:.3f} {op} {threshold:g}")
    return Check(name=name, passed=False, text=f"{label}{how} {x:.3f}, needs {op} {threshold:g}")


def evaluate(
    report: AgreementReport, conditions: Sequence[Condition], side: Side = "value", vs_ceiling: float | None = None
) -> GateResult:
    """Check each condition on the report's figure (its point value, or an end of its bootstrap CI) — the
    design-weighted one when the labelled items were not a random sample and the figure has one — and with
    ``vs_ceiling`` F that the judge agrees with people at least F times as well as people agree with each
    other (mean pairwise figure of the human ceiling). An undefined figure fails, saying why."""
    checks: list[Check] = []
    weighted = {report_name(d.name): d for d in report.design.estimates} if report.design else {}
    for c in conditions:
        if c.metric not in report.metrics and c.metric not in weighted:
            known = [*report.metrics, *(w for w in weighted if w not in report.metrics)]
            raise UserError(f"no metric {c.metric!r} in this report; it has: {', '.join(known)}")
        if c.metric in weighted:  # a non-random sample: the figure weighted back to every judged item
            d = weighted[c.metric]
            e = Estimate(value=d.weighted, n=0, ci_low=d.ci_low, ci_high=d.ci_high, note=d.note)
            checks.append(check(c.metric, e, c.op, c.threshold, side, "design-weighted"))
        else:
            what = "unweighted, on a non-random sample" if report.design is not None else ""
            checks.append(check(c.metric, report.metrics[c.metric], c.op, c.threshold, side, what))
    if vs_ceiling is not None:
        checks.append(_ceiling_check(report, side, vs_ceiling))
    return GateResult.of(checks)


def _ceiling_check(report: AgreementReport, side: Side, factor: float) -> Check:
    """Whether the judge agrees with people at least `factor` times as well as people agree with each other
    (mean pairwise figures of the human ceiling), and the reason."""
    name = f"judge-human >= {factor:g} x human-human"
    ce = report.ceiling
    if ce is None:
        text = f"no human ceiling (needs items labelled by 2 or more people) for {option('vs_ceiling')}"
        return Check(name=name, passed=False, text=text)
    judge, human = side_of(ce.judge_pairwise_mean, side)[0], ce.human_pairwise_mean.value
    if judge is None or human is None or math.isnan(judge) or math.isnan(human):
        text = f"the ceiling's {ce.metric} is undefined, needed for {option('vs_ceiling')}"
        return Check(name=name, passed=False, text=text)
    ok = judge >= factor * human
    text = f"judge–human {ce.metric} {judge:.3f} {'≥' if ok else '<'} {factor:g} × human–human {human:.3f}"
    return Check(name=name, passed=ok, text=text)
