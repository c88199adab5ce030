"""The pure core of ``greval align``: the split, the objective (the agreement stage's definitions), the search's
honest nesting (leakage), the decision rule under the null, and the budget — driven by simulated answers.

Simulated on purpose (the issue allows it for the repetitions): 200 seeded align runs through the test server
would take an hour; the end-to-end runs are in test_align_store.py.
"""

from __future__ import annotations

import asyncio
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd
import pytest

from greval.agreement import AgreementOptions, compute_agreement
from greval.agreement.models import AgreementScale
from greval.align.core import Outcome, align_units
from greval.align.meter import Meter
from greval.align.models import AlignOptions, Annotation, Answer, Unit
from greval.align.objective import Scorer
from greval.align.split import split_units
from greval.errors import UserError
from greval.spec import Spec
from tests.align.sim import LABELS, SCALE, SimJudge, SimOptimizer, records, spec_two_labels, units


def _run(us: list[Unit], judge: Any, optimizer: Any, options: AlignOptions, **kw: Any) -> Outcome:
    return asyncio.run(align_units(spec_two_labels(), us, SCALE, judge, optimizer, options, records=records(us), **kw))


# ------------------------------------------------------------------------------------------------ split
def test_the_split_is_by_record_stratified_seeded_and_independent_of_order() -> None:
    us = units(60, chunks=3)  # three units per record: they must stay together
    split = split_units(us, 0.3, 5, seed=3)
    search = {u.record_hash for u in split.search.units}
    test = {u.record_hash for u in split.test}
    assert not search & test
    assert len(test) == 18 and len(search) == 42
    assert all(split.search.fold_units(k) for k in range(5))
    for k in range(5):  # a fold's training units never include the fold's own records
        fold = {u.record_hash for u in split.search.fold_units(k)}
        assert not fold & {u.record_hash for u in split.search.training_units(k)}
    again = split_units(list(reversed(us)), 0.3, 5, seed=3)
    assert {u.key for u in again.test} == {u.key for u in split.test}
    assert again.search.folds == split.search.folds
    other = split_units(us, 0.3, 5, seed=4)
    assert {u.key for u in other.test} != {u.key for u in split.test}
    share = {lab: sum(1 for u in split.test if u.human == lab) / len(split.test) for lab in (0.0, 1.0)}
    overall = {lab: sum(1 for u in us if u.human == lab) / len(us) for lab in (0.0, 1.0)}
    assert all(abs(share[lab] - overall[lab]) < 0.1 for lab in share)  # stratified by label


def test_too_few_labelled_records_for_the_folds_is_one_line() -> None:
    with pytest.raises(UserError) as err:
        split_units(units(9), 0.3, 5, seed=0)
    assert str(err.value) == (
        "9 labelled record(s); 5 folds with a test share of 0.3 need at least 14 (2 per fold, 2 for the test): "
        "label more records, or lower `folds`"
    )


# -------------------------------------------------------------------------------------------- objective
def _frame(us: list[Unit], answers: dict[str, Answer], with_design: bool = False) -> pd.DataFrame:
    rows = []
    for u in us:
        a = answers.get(u.key)
        judged = None if a is None else (a.label if a.label is not None else a.value)
        for ann in u.annotations:
            row = {"item": u.key, "judge": judged, "human": ann.answer, "annotator": ann.annotator}
            if with_design:
                row.update(probability=u.probability, stratum=u.stratum)
            rows.append(row)
    return pd.DataFrame(rows)


def _categorical_units(n: int, k: int, rng: np.random.Generator, labels: list[str]) -> list[Unit]:
    out = []
    for i in range(n):
        h = int(rng.integers(0, k))
        out.append(
            Unit(
                key=f"u{i}",
                record_id=f"u{i}",
                record_hash=f"h{i}",
                human=float(h),
                annotations=(Annotation(annotator="a", answer=labels[h]),),
            )
        )
    return out


@pytest.mark.parametrize("ordered", [False, True])
def test_the_objective_is_the_agreement_reports_figure(ordered: bool) -> None:
    """κ, weighted κ, accuracy and macro F1 of align equal ``greval agreement``'s to 1e-12, invalid answers
    (counted as wrong) included: one definition."""
    rng = np.random.default_rng(1)
    labels = ["low", "mid", "high"]
    scale = AgreementScale(kind="categorical", labels=labels, ordered=ordered)
    us = _categorical_units(80, 3, rng, labels)
    answers = {}
    for u in us:
        r = rng.random()
        guess = labels[int(rng.integers(0, 3))] if r < 0.5 else labels[int(u.human)]
        answers[u.key] = Answer() if r < 0.1 else Answer(label=guess)
    report = compute_agreement(_frame(us, answers), scale, AgreementOptions(bootstrap=0))
    objectives = ["kappa", "accuracy", "macro_f1"] + (["weighted_kappa"] if ordered else [])
    names = {"kappa": "cohen_kappa", "weighted_kappa": "quadratic_kappa", "accuracy": "accuracy"}
    names["macro_f1"] = "macro_f1"
    for objective in objectives:
        value, _ = Scorer(scale, objective).point(us, answers)  # type: ignore[arg-type]
        assert value == pytest.approx(report.metrics[names[objective]].value, abs=1e-12), objective


def test_value_objectives_are_the_agreement_reports_figures() -> None:
    rng = np.random.default_rng(2)
    scale = AgreementScale(kind="value", min=1, max=5)
    us = [
        Unit(
            key=f"u{i}",
            record_id=f"u{i}",
            record_hash=f"h{i}",
            human=float(h),
            annotations=(Annotation(annotator="a", answer=str(h)),),
        )
        for i, h in enumerate(rng.integers(1, 6, 60))
    ]
    answers = {u.key: (Answer() if i % 9 == 0 else Answer(value=float(rng.integers(1, 6)))) for i, u in enumerate(us)}
    report = compute_agreement(_frame(us, answers), scale, AgreementOptions(bootstrap=0))
    for objective, name in (("mae", "mae"), ("spearman", "spearman"), ("weighted_kappa", "quadratic_kappa")):
        value, _ = Scorer(scale, objective).point(us, answers)  # type: ignore[arg-type]
        assert value == pytest.approx(report.metrics[name].value, abs=1e-12), objective


def test_design_weights_give_the_agreement_reports_weighted_kappa() -> None:
    rng = np.random.default_rng(3)
    us = []
    for i, u in enumerate(_categorical_units(60, 2, rng, LABELS)):
        p = 1.0 if i < 20 else 0.25
        us.append(u.model_copy(update={"probability": p, "stratum": "uncertain" if p == 1.0 else "control"}))
    answers = {u.key: Answer(label=LABELS[int(u.human) if rng.random() < 0.7 else 1 - int(u.human)]) for u in us}
    report = compute_agreement(_frame(us, answers, with_design=True), SCALE, AgreementOptions(bootstrap=0))
    assert report.design is not None
    weighted = next(e.weighted for e in report.design.estimates if e.name == "kappa")
    assert Scorer(SCALE, "kappa").point(us, answers)[0] == pytest.approx(weighted, abs=1e-12)
    d = Scorer(SCALE, "kappa").difference(us, answers, answers, 200, 0, 0.95)
    assert d.weighted and d.unit == "units within design strata" and d.gain == 0.0


def test_an_objective_that_does_not_fit_the_scale_is_one_line() -> None:
    with pytest.raises(UserError, match="objective 'mae' does not fit a categorical scale; use one of: kappa"):
        Scorer(SCALE, "mae")
    with pytest.raises(UserError, match="'weighted_kappa' does not fit unordered labels"):
        Scorer(SCALE, "weighted_kappa")


# ---------------------------------------------------------------------------------------------- leakage
@dataclass
class Recorder:
    """Every unit any view handed out, by phase, in order."""

    seen: list[tuple[str, frozenset[str]]] = field(default_factory=list)

    def touched(self, phase: str, keys: Iterable[str]) -> None:
        self.seen.append((phase, frozenset(keys)))


def test_no_test_unit_reaches_a_generator_or_the_selection_and_no_candidate_is_scored_on_its_examples() -> None:
    us = units(60, chunks=2)
    split = split_units(us, 0.3, 4, seed=5)
    test_keys = {u.key for u in split.test}
    test_records = {u.record_id for u in split.test}

    def p(spec: Spec, unit: Unit) -> float:  # candidates help: the search goes on and the decision is made
        return 0.6 + 0.2 * bool(spec.examples) + 0.15 * any("rule" in s for s in spec.steps)

    tracer, judge, optimizer = Recorder(), SimJudge(seed=5, p_correct=p), SimOptimizer()
    options = AlignOptions(folds=4, seed=5, rounds=3)
    out = _run(us, judge, optimizer, options, tracer=tracer)

    decide_at = next(i for i, (phase, _) in enumerate(tracer.seen) if phase == "decide")
    assert all(phase == "decide" for phase, _ in tracer.seen[decide_at:])
    before = [(phase, keys) for phase, keys in tracer.seen[:decide_at]]
    assert before and not any(keys & test_keys for _, keys in before)  # generators, scorers, selection
    assert {phase.split(":")[0] for phase, _ in before} == {"train", "score", "select", "final"}
    for phase, keys in before:  # an instance for fold k learns from the other folds only
        if phase.startswith("train:"):
            k = int(phase.split(":")[1])
            assert not keys & {u.key for u in split.search.fold_units(k)}
    # The judge saw test units only in the decision's two calls (the current spec, then the winner).
    test_calls = [i for i, (_, keys) in enumerate(judge.calls) if set(keys) & test_keys]
    assert len(judge.calls) - 2 == test_calls[0] and len(test_calls) == 2
    # Nothing the optimizer was shown came from the test part.
    shown = [d.record for r in optimizer.requests for d in r.disagreements]
    shown += [r.record for r in optimizer.reason_requests]
    leaked = [rid for text in shown for rid in test_records if re.search(rf"question {rid}\b", text)]
    assert shown and not leaked
    # A candidate is never scored on a unit it holds as a few-shot example, nor on one of its records.
    checked = 0
    for c in out.search.candidates:
        for f in c.folds:
            fold = {u.key for u in split.search.fold_units(f.fold)}
            assert not set(f.examples) & fold
            checked += len(f.examples)
    assert checked > 0
    assert out.examples and {e.unit for e in out.examples} <= {u.key for u in split.search.units}


# ------------------------------------------------------------------------------------------------ null
@pytest.mark.slow
def test_when_no_candidate_can_help_align_adopts_in_at_most_5_percent_of_200_seeded_runs() -> None:
    """Answers independent of the prompt (right 70 % of the time, drawn per spec version: every candidate is the
    current spec plus sampling noise). The search still finds a "winner" by cross-validation nearly every time
    (the winner's curse); the once-only test-part decision must refuse it. Under a true rate of 5 %, 200 runs
    adopt more than 16 times with probability 2.4 % (binomial): the bound asserted."""
    adopted = winners = 0
    for seed in range(200):
        us = units(100, seed=seed)
        out = _run(us, SimJudge(seed=seed), SimOptimizer(), AlignOptions(seed=seed, rounds=2))
        adopted += out.decision.adopted
        winners += out.final is not None
    assert winners > 100  # the search did propose (and the decision had something to refuse)
    tail = sum(math.comb(200, k) * 0.05**k * 0.95 ** (200 - k) for k in range(17, 201))
    assert tail < 0.03  # the bound's margin: P(X ≥ 17 | p = 0.05)
    assert adopted <= 16, f"adopted in {adopted}/200 runs"


# ------------------------------------------------------------------------------------------------ power
def test_a_judge_that_learns_from_examples_is_improved_and_the_gain_is_the_truth_within_its_ci() -> None:
    """The judge is right on a unit whose label has a few-shot example in the prompt, else at chance."""

    def p(spec: Spec, unit: Unit) -> float:
        shown = {str(ex.output.get("label")) for ex in spec.examples}
        return 1.0 if LABELS[int(unit.human)] in shown else 0.5

    us = units(100, seed=11)
    out = _run(us, SimJudge(seed=11, p_correct=p), SimOptimizer(), AlignOptions(seed=11, rewrites=0, label_order=False))
    d = out.decision.difference
    assert out.decision.adopted and d is not None and out.final is not None
    assert {str(ex.output["label"]) for ex in out.final.examples} == set(LABELS)
    assert d.new == 1.0 and d.gain == pytest.approx(1.0 - (d.old or 0.0))
    assert d.ci_low is not None and d.ci_high is not None and d.ci_low <= 1.0 <= d.ci_high  # the truth: 1 - 0


# ----------------------------------------------------------------------------------------------- budget
@pytest.mark.parametrize("calls", [250, 400, 900])
def test_the_budget_is_never_exceeded_and_the_decision_keeps_its_reserve(calls: int) -> None:
    def p(spec: Spec, unit: Unit) -> float:  # examples help: there is a winner to decide on
        return 0.9 if spec.examples else 0.6

    us = units(80, seed=2)
    meter = Meter(calls, 10**9)
    judge = SimJudge(seed=2, p_correct=p)
    out = _run(us, judge, SimOptimizer(), AlignOptions(seed=2, budget_calls=calls), meter=meter)
    assert out.spent.calls <= calls
    statuses = [c.status for c in out.search.candidates]
    assert ("skipped" in statuses) == (calls < 900), statuses
    assert out.final is not None and out.decision.difference is not None  # the reserve paid for the decision
    assert judge.calls[-1][1] == tuple(u.key for u in split_units(us, 0.3, 5, 2).test)


def test_a_token_budget_too_small_for_the_current_spec_is_one_line() -> None:
    us = units(40, seed=3)
    judge = SimJudge(seed=3)
    with pytest.raises(UserError, match="the current spec cannot be scored on the search part"):
        _run(us, judge, SimOptimizer(), AlignOptions(budget_tokens=100))
    assert not judge.calls
