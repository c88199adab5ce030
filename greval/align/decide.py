"""The decision: the winner against the current spec, once, on the test part no search step read.

The gain (the objective of the new version minus the old one's; for MAE the old minus the new) gets a paired
bootstrap CI over whole records, or over units within the strata of a review design with 1/π weights. The
winner is adopted only when the CI's lower bound exceeds ``min_gain`` (0 by default); otherwise the current
spec stays. Beside it: the people's agreement with each other (the ceiling), as ``greval agreement`` reports it
over every item two of them labelled (greval.align.labels.human_ceiling).
"""

from __future__ import annotations

from collections.abc import Sequence

from greval.align.meter import Meter
from greval.align.models import REPORT_NAME, AlignOptions, Ceiling, ConfusionTable, Decision, Difference, Unit
from greval.align.objective import Scorer, part_table, reached
from greval.align.ports import JudgeFn
from greval.align.view import LabelView, Tracer
from greval.spec import Spec

CEILING_METRIC = {"cohen_kappa": "kappa", "quadratic_kappa": "weighted_kappa"}
"""The agreement report's ceiling metric, as an objective (the ceiling stops the search only when they match)."""


def fmt_gain(x: float | None) -> str:
    """A gain, signed (the one way align writes one)."""
    return "undefined" if x is None else f"{x:+.3f}"


def fmt_gain_ci(d: Difference) -> str:
    return "undefined" if d.ci_low is None or d.ci_high is None else f"[{d.ci_low:+.3f}, {d.ci_high:+.3f}]"


def table_line(t: ConfusionTable) -> str:
    """One version's test-part figures beside the objective, as the terminal and the page say them."""
    per = "; ".join(f"{lab}: P {t.precision[lab]:.2f} R {t.recall[lab]:.2f}" for lab in t.labels)
    return f"{t.version} on {t.n} test units: accuracy {t.accuracy:.3f}; {per}"


def _message(d: Difference, adopted: bool, objective: str, min_gain: float) -> str:
    name = REPORT_NAME[objective]
    ci = fmt_gain_ci(d)
    gain = fmt_gain(d.gain)
    where = f"{d.n_units} test unit(s) of {d.n_records} record(s)"
    if adopted:
        return f"adopted: {name} gain {gain}, {d.level:.0%} CI {ci} on {where}, lower bound above {min_gain:g}"
    return (
        f"no improvement shown: {name} gain {gain}, {d.level:.0%} CI {ci} on {where} (the lower bound must "
        f"exceed {min_gain:g}); the current spec stays"
    )


async def decide(
    base: Spec,
    final: Spec | None,
    test: Sequence[Unit],
    judge: JudgeFn,
    scorer: Scorer,
    options: AlignOptions,
    meter: Meter,
    tracer: Tracer | None = None,
    ceiling: Ceiling | None = None,
) -> Decision:
    """Judge both versions on the test part (with the budget's reserve) and apply the decision rule."""
    objective = scorer.objective
    if final is None or final.hash == base.hash:
        return Decision(
            objective=objective,
            adopted=False,
            min_gain=options.min_gain,
            message="no improvement shown: no candidate beat the current spec in cross-validation; the current "
            "spec stays (the test part was not used)",
            ceiling=ceiling,
        )
    view = LabelView(test, "decide", tracer=tracer)
    units = view.units
    answers = []
    for spec in (base, final):
        meter.check(judge.estimate(spec, units), reserve=True)
        judged = await judge(spec, units)
        meter.charge(judged.cost)
        answers.append(judged.answers)
    diff = scorer.paired_gain(units, answers[0], answers[1], options.resampling)
    both = reached(reached(units, answers[0]), answers[1])
    tables = (
        tuple(part_table(scorer, both, a, v) for a, v in zip(answers, ("current", "winner"), strict=True))
        if scorer.labels
        else ()
    )
    adopted = diff.ci_low is not None and diff.gain is not None and diff.ci_low > options.min_gain
    return Decision(
        objective=objective,
        adopted=adopted,
        min_gain=options.min_gain,
        difference=diff,
        ceiling=ceiling,
        message=_message(diff, adopted, objective, options.min_gain),
        tables=tables,
    )


__all__ = ["CEILING_METRIC", "decide", "fmt_gain", "fmt_gain_ci", "table_line"]
