"""agreement/stopping.py: labels still needed for a target CI half-width, and why there is no advice yet."""

from __future__ import annotations

import pytest


def test_stopping_advice_from_the_interval() -> None:
    """n more labels = n·((h/target)² − 1) with h the current CI half-width; reached when h ≤ target; the
    target's spelling is checked with a one-line error."""
    from greval.agreement.stopping import Target, advise
    from greval.errors import UserError

    assert Target.parse("kappa±0.05") == Target(figure="kappa", half_width=0.05)
    assert Target.parse("prevalence[Not Acceptable] +- 0.1").figure == "prevalence[Not Acceptable]"
    assert Target.parse("accuracy+/-.03").half_width == 0.03
    for bad in ("kappa=0.05", "kappa±0", "±0.05"):
        with pytest.raises(UserError, match=r"FIGURE±WIDTH|positive"):
            Target.parse(bad)
    adv = advise(Target(figure="kappa", half_width=0.05), 40, 0.3, 0.5)  # h = 0.1: 4× the labels
    assert adv.more == 120 and not adv.reached and "120 more labels" in adv.line
    assert advise(Target(figure="kappa", half_width=0.05), 40, 0.41, 0.49).reached
    assert advise(Target(figure="kappa", half_width=0.05), 0, None, None).more is None


def test_review_advice_says_why_there_is_none_yet() -> None:
    """The stopping advice of `greval review status`: no interval while a sampled stratum has fewer than 2
    labels; no estimate while some judged items had no chance of selection; capped at the items left; exact
    once every judged item is labelled."""
    from greval.agreement.stopping import Target
    from greval.flows.review import ReviewStatus, StratumCount, advice_for, narrow_interval_notes

    def status(strata: dict[str, StratumCount], labelled: int, population: int, uncovered: int = 0) -> ReviewStatus:
        return ReviewStatus(
            spec="s",
            dataset="d",
            judge="j",
            rounds=1,
            population=population,
            strata=strata,
            labels=labelled,
            labelled_units=labelled,
            report=None,
            judge_over_all={},
            advice=None,
            uncovered=uncovered,
        )

    target = Target.parse("kappa±0.05")
    thin = status({"uncertain": StratumCount(8, 8, 1.0), "control:No": StratumCount(2, 1, 0.1)}, 9, 100)
    assert "fewer than 2 labels in control:No (1 of 2)" in advice_for(thin, target).line
    assert "1 label (control:No)" in narrow_interval_notes(thin.strata)[0]
    assert narrow_interval_notes({"uncertain": StratumCount(8, 8, 1.0)}) == []
    partial = status({"uncertain": StratumCount(8, 1, 1.0), "control:No": StratumCount(2, 2, 0.1)}, 3, 100)
    assert "uncertain (1 of 8)" in advice_for(partial, target).line
    gap = status({"uncertain": StratumCount(10, 10, 1.0)}, 10, 100, uncovered=90)
    assert advice_for(gap, target).line.startswith("no estimate over every judged item yet: 90")
    done = advice_for(status({"uncertain": StratumCount(30, 30, 1.0)}, 30, 30), target)
    assert done.reached and done.more == 0 and "every judged item is labelled" in done.line
    # A narrow interval resting on 3 labels of a sampled stratum is no reason to stop.
    from greval.agreement.models import AgreementReport, DesignEstimate, DesignReport

    narrow = DesignEstimate(name="kappa", weighted=0.5, unweighted=0.4, ci_low=0.47, ci_high=0.53)
    design = DesignReport(estimates=[narrow], strata={}, resamples=100, summary="s")
    few = status({"uncertain": StratumCount(10, 10, 1.0), "control:No": StratumCount(3, 3, 0.05)}, 13, 100)
    few.report = AgreementReport.model_construct(design=design, metrics={})
    adv = advice_for(few, target)
    assert not adv.reached and "fewer than 5 labels in control:No (3 of 3)" in adv.line
    few.strata["control:No"] = StratumCount(6, 6, 0.1)
    assert advice_for(few, target).reached
