"""agreement/categorical.py: the confusion matrix with its invalid column, the judge's bias on an ordered scale, and
prevalence over every judged item."""

from __future__ import annotations

import numpy as np
from sklearn import metrics as skm

from greval.agreement import AgreementScale, compute_agreement
from tests.agreement.conftest import NO_BOOT, close, frame, value


def test_invalid_as_wrong_is_its_own_nominal_category_and_worst_case_for_ordered() -> None:
    labels = ["a", "b", "c"]
    h = ["a", "b", "c", "a", "c", "b"]
    j = ["a", "b", "c", None, "zzz", "a"]
    rep = compute_agreement(frame(h, j), AgreementScale(labels=labels, ordered=True), NO_BOOT)
    assert rep.counts.items_invalid_judge == 2 and rep.counts.items_compared == 6
    hc = np.array([0, 1, 2, 0, 2, 1])
    nom = np.array([0, 1, 2, 3, 3, 0])  # invalid = code 3
    ordc = np.array([0, 1, 2, 2, 0, 0])  # farthest label from the human's
    assert close(value(rep, "accuracy"), skm.accuracy_score(hc, nom))
    assert close(value(rep, "cohen_kappa"), skm.cohen_kappa_score(hc, nom, labels=[0, 1, 2, 3]))
    assert close(value(rep, "quadratic_kappa"), skm.cohen_kappa_score(hc, ordc, labels=[0, 1, 2], weights="quadratic"))
    assert rep.categorical is not None
    assert rep.categorical.confusion.judge_labels[-1] == "<invalid>"
    assert [row[-1] for row in rep.categorical.confusion.counts] == [1, 0, 1]


def test_signed_score_bias_uses_the_scale_scores() -> None:
    scale = AgreementScale(labels=["low", "mid", "high"], ordered=True, scores={"low": 0.0, "mid": 0.5, "high": 1.0})
    rep = compute_agreement(frame(["low", "mid", "high", "low"], ["mid", "mid", "low", "high"]), scale, NO_BOOT)
    assert rep.categorical is not None
    b = rep.categorical.bias
    assert b.mean_signed_score is not None and close(b.mean_signed_score.value, (0.5 + 0 - 1 + 1) / 4)
    assert b.judge_above_rate is not None and b.judge_above_rate.value == 0.5


def test_prevalence_uses_unlabelled_judged_items() -> None:
    f = frame(["a", "b", None, None], ["a", "b", "b", "b"])
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), NO_BOOT)
    assert rep.categorical is not None and rep.categorical.prevalence is not None
    p = rep.categorical.prevalence
    assert p.n_judged == 4 and p.n_labelled == 2 and p.observed == [0.25, 0.75]
    assert p.corrected[1].value == 0.75  # a perfect judge needs no correction
