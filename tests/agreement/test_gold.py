"""Gold labels and reviewer quality (greval.agreement.gold): label models recover simulated annotators within
their sampling error, every per-reviewer figure equals scikit-learn's on the same items, ties are reported and
never broken, and the ceiling is the agreement stage's."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn.metrics import accuracy_score, cohen_kappa_score

from greval.agreement import AgreementOptions, AgreementScale, compute_agreement
from greval.agreement.gold import Answers, estimate_gold
from greval.agreement.gold.quality import labels_per_hour
from greval.agreement.models import AgreementReport, GoldChoice, ReviewerRow
from greval.cli import main
from greval.errors import DataError
from greval.store.store import Store
from tests import test_report_explorer
from tests.agreement.conftest import DATA, TOL, judged_store

_page = test_report_explorer._page
browser = test_report_explorer.browser  # the module's Chromium (a fixture)

SUMMEVAL = DATA / "summeval" / "summaries_expert_scores.jsonl"
YES_NO = AgreementScale(labels=["no", "yes"])


def _crowd(seed: int, n: int, confusions: dict[str, list[list[float]]], prior: list[float]) -> tuple[Answers, Any]:
    """Every annotator answers every item, drawing from their confusion row of the item's true label."""
    rng = np.random.default_rng(seed)
    k = len(prior)
    truth = rng.choice(k, size=n, p=prior)
    by_item = {
        f"i{i}": {w: int(rng.choice(k, p=np.asarray(m)[truth[i]])) for w, m in confusions.items()} for i in range(n)
    }
    return Answers([f"L{c}" for c in range(k)], by_item), truth


def test_dawid_skene_recovers_simulated_confusion_matrices() -> None:
    """Six annotators with known, asymmetric confusion matrices label 2,000 items (seed 0). Each estimated cell
    P(label | true) is within 4 binomial standard errors of the true one, sqrt(p(1 − p) / n_c) with n_c the
    simulated items of that true label: the error of the best possible estimate, the share counted with the
    true labels known. Dawid–Skene does not know them; with six annotators it recovers ≥ 95 % of them (checked),
    so its error stays near that bound (largest cell 2.4 standard errors here, 3.0 over seeds 0–4, measured)
    and 4 standard errors over 54 cells leaves room, yet fails a transposed matrix (rows true vs columns
    answered swapped: 7 standard errors off on annotator a's first row) or a majority-vote count."""
    confusions = {
        "a": [[0.9, 0.05, 0.05], [0.1, 0.8, 0.1], [0.1, 0.1, 0.8]],
        "b": [[0.7, 0.2, 0.1], [0.2, 0.7, 0.1], [0.3, 0.1, 0.6]],
        "c": [[0.8, 0.1, 0.1], [0.05, 0.9, 0.05], [0.2, 0.2, 0.6]],
        "d": [[0.6, 0.2, 0.2], [0.3, 0.5, 0.2], [0.2, 0.2, 0.6]],
        "e": [[0.85, 0.1, 0.05], [0.1, 0.85, 0.05], [0.05, 0.15, 0.8]],
        "f": [[0.75, 0.05, 0.2], [0.15, 0.75, 0.1], [0.1, 0.1, 0.8]],
    }
    prior = [0.5, 0.3, 0.2]
    answers, truth = _crowd(0, 2000, confusions, prior)
    gold = estimate_gold(answers, GoldChoice(method="dawid-skene"))
    n_c = np.bincount(truth, minlength=3)
    for who, true in confusions.items():
        est, p = np.asarray(gold.model_confusion[who]), np.asarray(true)
        se = np.sqrt(p * (1 - p) / n_c[:, None])
        assert np.all(np.abs(est - p) <= 4 * se), (who, est.round(3).tolist())
        assert np.allclose(est.sum(axis=1), 1.0)
    # its gold is nearer the truth than people's majority, and every item has a posterior
    majority = estimate_gold(answers, GoldChoice(method="majority"))
    right = [sum(g.codes[f"i{i}"] == truth[i] for i in range(len(truth))) for g in (gold, majority)]
    assert right[0] >= 0.95 * len(truth) and right[0] > right[1]
    assert all(g.posterior is not None and 0 < g.posterior <= 1 for g in gold.items.values())


def test_mace_recovers_simulated_competences() -> None:
    """MACE's own model (seed 1): annotator w knows the label with probability θ_w, else guesses from ξ_w. 400
    items, four annotators; each estimated competence is within 4 binomial standard errors sqrt(θ(1 − θ) / n)
    of θ (the error of the share of items the annotator knew, were it observed; the largest here is 2.4, for
    the weakest annotator, measured), and its implied confusion rows (θ on the diagonal plus (1 − θ)·ξ) sum
    to 1."""
    rng = np.random.default_rng(1)
    k, n = 3, 400
    theta = {"a": 0.9, "b": 0.7, "c": 0.5, "d": 0.3}
    guess = {"a": [0.6, 0.2, 0.2], "b": [0.2, 0.6, 0.2], "c": [1 / 3] * 3, "d": [0.2, 0.2, 0.6]}
    truth = rng.integers(0, k, size=n)
    by_item = {
        f"i{i}": {w: int(truth[i]) if rng.random() < t else int(rng.choice(k, p=guess[w])) for w, t in theta.items()}
        for i in range(n)
    }
    gold = estimate_gold(Answers(["x", "y", "z"], by_item), GoldChoice(method="mace"), seed=0)
    for w, t in theta.items():
        assert abs(gold.competence[w] - t) <= 4 * np.sqrt(t * (1 - t) / n), (w, gold.competence[w])
        assert np.allclose(np.asarray(gold.model_confusion[w]).sum(axis=1), 1.0)
    assert gold.competence["a"] > gold.competence["b"] > gold.competence["c"] > gold.competence["d"]


def _people(rows: list[tuple[str, str, str, str]]) -> pd.DataFrame:
    """(item, annotator, human, judge) rows."""
    return pd.DataFrame(rows, columns=["item", "annotator", "human", "judge"])


def test_majority_ties_are_reported_never_broken() -> None:
    frame = _people(
        [
            ("i1", "ann", "yes", "yes"),
            ("i1", "bob", "no", "yes"),  # a tie: no gold, left out and counted
            ("i2", "ann", "yes", "yes"),
            ("i2", "bob", "yes", "yes"),
            ("i3", "ann", "no", "yes"),
            ("i3", "bob", "no", "yes"),
            ("i3", "cy", "yes", "yes"),
        ]
    )
    report = compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice(method="majority"))
    rev = report.reviewers
    assert rev is not None
    gold = {g.item: g for g in rev.gold_labels}
    assert gold["i1"].label is None and gold["i1"].tied == ["no", "yes"] and gold["i1"].posterior is None
    assert gold["i3"].label == "no" and gold["i3"].posterior == pytest.approx(2 / 3)
    assert report.counts.items_tied_majority == 1 and report.counts.items_compared == 2
    assert rev.counts.tied == 1 and rev.counts.with_gold == 2
    assert any("1 item(s) whose gold label is tied" in n for n in report.notes)


def test_a_label_model_tie_is_reported() -> None:
    """Two equally good annotators, perfectly symmetric answers: on the items they split, Dawid–Skene's
    posteriors are equal, and the item is a tie (never given the first label)."""
    rows = []
    for i in range(8):
        a, b = ("yes", "yes") if i < 3 else ("no", "no") if i < 6 else ("yes", "no") if i == 6 else ("no", "yes")
        if i in (0, 3):
            a, b = ("no", "no") if i == 0 else ("yes", "yes")
        rows += [(f"i{i}", "ann", a, "yes"), (f"i{i}", "bob", b, "yes")]
    report = compute_agreement(
        _people(rows), YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice(method="dawid-skene")
    )
    assert report.reviewers is not None
    gold = {g.item: g for g in report.reviewers.gold_labels}
    assert gold["i6"].label is None and gold["i6"].tied == ["no", "yes"]
    assert gold["i7"].label is None
    assert gold["i1"].label == "yes" and gold["i4"].label == "no"


def _two_annotators(seed: int = 3, n: int = 80) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    rows = []
    for i in range(n):
        t = int(rng.integers(3))
        judge = t if rng.random() < 0.75 else int(rng.integers(3))
        for who, acc in (("ann", 0.85), ("bob", 0.7)):
            if rng.random() < 0.9:
                said = t if rng.random() < acc else int(rng.integers(3))
                rows.append((f"i{i}", who, f"L{said}", f"L{judge}"))
    return _people(rows)


def test_two_annotator_ceiling_equals_greval_agreement_human_human() -> None:
    """Two people: the pair's κ in the reviewers table is `greval agreement`'s human–human κ (the ceiling, with
    or without a gold) and scikit-learn's on every item both labelled — disagreements included, though a
    majority of two leaves those items out of the judge comparison as ties."""
    frame = _two_annotators()
    scale = AgreementScale(labels=["L0", "L1", "L2"])
    options = AgreementOptions(bootstrap=200)
    plain = compute_agreement(frame, scale, options)
    report = compute_agreement(frame, scale, options, gold=GoldChoice(method="majority"))
    assert plain.ceiling is not None and report.ceiling is not None and report.reviewers is not None
    (pair,) = report.reviewers.pairs
    wide = frame.pivot(index="item", columns="annotator", values="human").dropna()
    expected = cohen_kappa_score(wide["ann"], wide["bob"])
    assert abs(pair.estimate.value - expected) <= TOL  # type: ignore[operator]
    assert pair.estimate.n == len(wide)
    assert plain.ceiling.human_pairwise_mean.value == pair.estimate.value
    assert report.ceiling.human_pairwise_mean.value == pair.estimate.value
    assert pair.estimate.ci_low is not None and pair.estimate.ci_low < pair.estimate.value < pair.estimate.ci_high  # type: ignore[operator]
    assert report.counts.items_tied_majority == int((wide["ann"] != wide["bob"]).sum())


def _row(report: AgreementReport, name: str) -> ReviewerRow:
    assert report.reviewers is not None
    return next(r for r in report.reviewers.rows if r.name == name)


def _check_rows_against_sklearn(report: AgreementReport, frame: pd.DataFrame, labels: list[str]) -> None:
    """Every person's and the judge's figures on that person's items, and the judge's own row, as
    scikit-learn computes them from the gold the report lists."""
    assert report.reviewers is not None
    gold = {g.item: g.label for g in report.reviewers.gold_labels if g.label is not None}
    judge = frame.groupby("item")["judge"].first()
    for row in report.reviewers.rows[:-1]:
        mine = frame[(frame["annotator"] == row.name) & frame["item"].isin(gold)]
        g = [gold[i] for i in mine["item"]]
        j = [judge[i] for i in mine["item"]]
        assert row.n == len(mine)
        for figures, said in ((row.figures, list(mine["human"])), (row.judge, j)):
            assert abs(figures["accuracy"].value - accuracy_score(g, said)) <= TOL  # type: ignore[operator]
            assert abs(figures["cohen_kappa"].value - cohen_kappa_score(g, said, labels=labels)) <= TOL  # type: ignore[operator]
            if "quadratic_kappa" in figures:
                qk = cohen_kappa_score(g, said, labels=labels, weights="quadratic")
                assert abs(figures["quadratic_kappa"].value - qk) <= TOL  # type: ignore[operator]
        d = row.difference["cohen_kappa"].value
        assert abs(d - (row.judge["cohen_kappa"].value - row.figures["cohen_kappa"].value)) <= TOL  # type: ignore[operator]
        counts = pd.crosstab(pd.Categorical(g, labels), pd.Categorical(list(mine["human"]), labels), dropna=False)
        assert row.confusion is not None and row.confusion.counts == counts.to_numpy().tolist()
    last = report.reviewers.rows[-1]
    assert last.role == "judge" and last.n == report.counts.items_compared
    for name, est in last.figures.items():  # the judge's own row is the headline, CIs included
        assert est == report.metrics[name]


def test_reviewer_figures_equal_scikit_learn_and_the_judge_row_is_the_headline() -> None:
    frame = _two_annotators(seed=5, n=120)
    extra = frame[frame["annotator"] == "ann"].assign(annotator="cy")
    flip = np.random.default_rng(0).random(len(extra)) < 0.3
    extra.loc[flip, "human"] = "L0"
    frame = pd.concat([frame, extra], ignore_index=True)
    labels = ["L0", "L1", "L2"]
    for method in ("majority", "dawid-skene"):
        report = compute_agreement(
            frame, AgreementScale(labels=labels), AgreementOptions(bootstrap=100), gold=GoldChoice(method=method)
        )  # type: ignore[arg-type]
        _check_rows_against_sklearn(report, frame, labels)
        rows = report.reviewers.rows  # type: ignore[union-attr]
        assert [r.name for r in rows] == ["cy", "ann", "bob", "judge"]  # the ceiling's order: shortest name first
        assert all(r.judge_vs in ("better", "as well", "worse") for r in rows[:-1])


def test_adjudicated_gold_wins_and_adjudicators_are_not_reviewers() -> None:
    frame = _people(
        [
            ("i1", "ann", "yes", "yes"),
            ("i1", "bob", "no", "yes"),
            ("i1", "sam", "no", "yes"),  # the adjudicator settles the split
            ("i2", "ann", "yes", "no"),
            ("i2", "bob", "yes", "no"),  # no adjudication: majority
            ("i3", "ann", "no", "no"),
            ("i3", "bob", "yes", "no"),  # split, not adjudicated: a tie
            ("i4", "ann", "no", "no"),
            ("i4", "bob", "yes", "no"),
            ("i4", "sam", "yes", "no"),
            ("i4", "tom", "no", "no"),  # two adjudicators who disagree: a tie, not broken
        ]
    )
    choice = GoldChoice.parse("adjudicated:sam,tom")
    report = compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=choice)
    rev = report.reviewers
    assert rev is not None
    gold = {g.item: g for g in rev.gold_labels}
    assert (gold["i1"].label, gold["i1"].source) == ("no", "adjudicator")
    assert (gold["i2"].label, gold["i2"].source) == ("yes", "majority")
    assert gold["i3"].label is None and gold["i4"].label is None and gold["i4"].source == "adjudicator"
    assert rev.counts.adjudicated == 1 and rev.counts.tied == 2
    assert [r.name for r in rev.rows] == ["ann", "bob", "judge"]
    assert report.ceiling is not None and report.ceiling.n_annotators == 2
    assert {(p.a, p.b) for p in rev.pairs} == {("ann", "bob")}
    with pytest.raises(DataError, match=r"^`gold` adjudicated: zed answered nothing here"):
        compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice.parse("adjudicated:zed"))
    with pytest.raises(DataError, match=r"needs the adjudicators' names"):
        compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice.parse("adjudicated"))


def test_one_annotator_as_the_gold() -> None:
    frame = _people(
        [
            ("i1", "ann", "yes", "yes"),
            ("i1", "bob", "no", "yes"),
            ("i2", "ann", "no", "yes"),
            ("i2", "bob", "no", "yes"),
            ("i3", "bob", "yes", "no"),  # ann did not label it: no gold
        ]
    )
    report = compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice.parse("ann"))
    assert report.reviewers is not None
    assert report.counts.items_compared == 2 and report.reviewers.counts.without_gold == 1
    assert any("1 labelled item(s) without a gold (annotator ann did not label them)" in n for n in report.notes)
    assert _row(report, "ann").figures["accuracy"].value == 1.0
    with pytest.raises(DataError, match=r"^`gold` 'zed': no such annotator; annotators are ann, bob$"):
        compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice.parse("zed"))


def test_a_label_model_needs_named_annotators() -> None:
    frame = _people([("i1", "a", "yes", "yes"), ("i1", "b", "no", "yes")]).drop(columns="annotator")
    with pytest.raises(DataError, match=r"^`gold` dawid-skene tells people apart: give the annotator column"):
        compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice(method="dawid-skene"))
    report = compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice(method="majority"))
    assert report.counts.items_tied_majority == 1


def test_labels_per_hour_counts_work_not_breaks() -> None:
    """Answers at 0, 60 and 120 s, a two-hour break, then two more 30 s apart: 4 answers over 180 s of work."""
    times = [0.0, 60.0, 120.0, 7320.0, 7350.0, 7380.0]
    est = labels_per_hour(times)
    assert est.value == pytest.approx(4 / (180 / 3600)) and est.n == 6
    assert labels_per_hour([5.0]).value is None
    frame = _people([(f"i{i}", "ann", "yes", "yes") for i in range(6)]).assign(
        answered_at=[pd.Timestamp(1_700_000_000 + t, unit="s").isoformat() for t in times]
    )
    report = compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice(method="majority"))
    lph = _row(report, "ann").labels_per_hour
    assert lph is not None and lph.value == pytest.approx(80.0)


def test_without_a_gold_the_report_is_unchanged() -> None:
    """No gold: no reviewers key in the JSON (a report reads as before there was a gold)."""
    frame = _two_annotators()
    report = compute_agreement(frame, AgreementScale(labels=["L0", "L1", "L2"]), AgreementOptions(bootstrap=50))
    assert report.reviewers is None and "reviewers" not in json.loads(report.model_dump_json())
    assert AgreementReport.model_validate_json(report.model_dump_json()) == report


def _summeval() -> pd.DataFrame:
    rows = [json.loads(line) for line in SUMMEVAL.read_text(encoding="utf-8").splitlines()]
    out = []
    for r in rows:
        item = f"{r['doc_id']}/{r['system_id']}"
        judge = str(round(r["scores"]["relevance"]))
        for dim in ("coherence", "consistency", "fluency"):
            out.append((item, dim, str(round(r["scores"][dim])), judge))
    return _people(out)


@pytest.mark.skipif(not SUMMEVAL.exists(), reason=f"SummEval data not found at {DATA} (needs ../shared/data)")
@pytest.mark.parametrize("method", ["majority", "dawid-skene"])
def test_summeval_reviewer_figures_equal_an_independent_computation(method: str) -> None:
    """No data set under ../shared/data holds several annotators' individual labels on the same items:
    SummEval gives the mean of its 3 experts per dimension, UniEval's files per-item means too, BEGIN one label
    per response. So this check is built on SummEval with what it has: its 1,600 summaries rated 1–5 on four
    dimensions, each expert mean rounded (a mean of three whole numbers is never halfway), and the coherence,
    consistency and fluency ratings read as three "reviewers" of the same summaries, relevance as the "judge".
    They are not annotators of one question — the check is of the computation on real, skewed 5-label data
    with ties, not of these raters: majority ties (three different ratings) are reported; each reviewer's and
    the judge's accuracy, κ and quadratic κ against the gold, their confusion with it, and every pair's
    quadratic κ (the ceiling's) equal scikit-learn's."""
    frame = _summeval()
    labels = ["1", "2", "3", "4", "5"]
    scale = AgreementScale(labels=labels, ordered=True)
    report = compute_agreement(frame, scale, AgreementOptions(bootstrap=0), gold=GoldChoice(method=method))  # type: ignore[arg-type]
    assert report.reviewers is not None and report.ceiling is not None
    if method == "majority":
        expected_ties = sum(
            1
            for _, g in frame.groupby("item")["human"]
            if Counter(g).most_common(2)[-1][1] == Counter(g).most_common(1)[0][1] and len(set(g)) > 1
        )
        assert expected_ties > 0 and report.reviewers.counts.tied == expected_ties
        assert report.counts.items_tied_majority == expected_ties
    _check_rows_against_sklearn(report, frame, labels)
    wide = frame.pivot(index="item", columns="annotator", values="human")
    for pair in report.reviewers.pairs:
        qk = cohen_kappa_score(wide[pair.a], wide[pair.b], labels=labels, weights="quadratic")
        assert abs(pair.estimate.value - qk) <= TOL  # type: ignore[operator]
    assert [(p.a, p.b, p.estimate.value) for p in report.reviewers.pairs] == [
        (p.a, p.b, p.value) for p in report.ceiling.human_pairs
    ]


@pytest.mark.skipif(not SUMMEVAL.exists(), reason=f"SummEval data not found at {DATA} (needs ../shared/data)")
def test_summeval_dawid_skene_gold_and_confusions_equal_crowd_kit_called_directly() -> None:
    """The same SummEval reading as above (the three rounded expert-mean dimensions as three "reviewers", see
    its docstring for why), on a slice: the first 120 summaries, 360 labels. Here the independent computation
    is crowd-kit's DawidSkene called directly on the file's own (summary, dimension, rating) rows — names and
    ratings as they are, not greval's numbering — with the settings docs/agreement.md states (100 iterations,
    tol 1e-5): each summary's gold is its argmax with that posterior, each reviewer's model confusion is its
    error matrix, and each reviewer's κ against the gold is scikit-learn's against crowd-kit's gold."""
    from crowdkit.aggregation import DawidSkene

    frame = _summeval()
    frame = frame[frame["item"].isin(list(dict.fromkeys(frame["item"]))[:120])].reset_index(drop=True)
    assert len(frame) == 360
    labels = ["1", "2", "3", "4", "5"]
    scale = AgreementScale(labels=labels, ordered=True)
    report = compute_agreement(frame, scale, AgreementOptions(bootstrap=0), gold=GoldChoice(method="dawid-skene"))
    assert report.reviewers is not None

    ds = DawidSkene(n_iter=100, tol=1e-5)
    with warnings.catch_warnings():  # crowd-kit's pandas calls warn of pandas' future
        warnings.simplefilter("ignore", FutureWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        probas = ds.fit_predict_proba(frame.rename(columns={"item": "task", "annotator": "worker", "human": "label"}))
    direct = {str(task): (str(row.idxmax()), float(row.max())) for task, row in probas.iterrows()}
    gold = {g.item: g for g in report.reviewers.gold_labels}
    assert set(gold) == set(direct)
    for item, (label, posterior) in direct.items():
        assert gold[item].label == label and abs((gold[item].posterior or 0.0) - posterior) <= 1e-9, item
    errors = ds.errors_
    for row in report.reviewers.rows[:-1]:
        est = np.asarray(row.model_confusion)
        want = np.zeros((5, 5))
        for (worker, observed), probs in errors.iterrows():
            if worker == row.name:
                for true, p in probs.items():
                    want[labels.index(str(true)), labels.index(str(observed))] = p
        assert np.allclose(est, want, atol=1e-9), row.name
        mine = frame[frame["annotator"] == row.name]
        g = [direct[i][0] for i in mine["item"]]
        kappa = cohen_kappa_score(g, list(mine["human"]), labels=labels)
        assert row.n == 120 and abs(row.figures["cohen_kappa"].value - kappa) <= TOL  # type: ignore[operator]


def test_reviewers_json_round_trips(tmp_path: Path) -> None:
    frame = _two_annotators()
    report = compute_agreement(
        frame, AgreementScale(labels=["L0", "L1", "L2"]), AgreementOptions(bootstrap=20), gold=GoldChoice.parse("ann")
    )
    again = AgreementReport.model_validate_json(report.model_dump_json())
    assert again == report and again.reviewers is not None and again.reviewers.gold.annotator == "ann"


# ------------------------------------------------------------------------------------------- the command line
def _team_csv(tmp_path: Path) -> tuple[Path, pd.DataFrame]:
    frame = _two_annotators(seed=11, n=90).rename(columns={"item": "id", "annotator": "who", "human": "label"})
    path = tmp_path / "team.csv"
    frame.to_csv(path, index=False)
    return path, frame.rename(columns={"id": "item", "who": "annotator", "label": "human"})


def test_cli_gold_in_file_mode_prints_writes_and_refuses(tmp_path: Path) -> None:
    path, frame = _team_csv(tmp_path)
    base = ["agreement", str(path), "--judge", "judge", "--human", "label", "--item", "id", "--bootstrap", "60"]
    out, md = tmp_path / "a.json", tmp_path / "a.md"
    res = CliRunner().invoke(
        main, [*base, "--annotator", "who", "--gold", "majority", "--json", str(out), "--markdown", str(md)]
    )
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    expected = compute_agreement(
        frame, AgreementScale(labels=["L0", "L1", "L2"]), AgreementOptions(bootstrap=60), GoldChoice(method="majority")
    )
    assert data["reviewers"] == json.loads(expected.model_dump_json())["reviewers"]
    assert "Reviewers against the gold: majority" in res.output and "The judge agrees with the gold" in res.output
    assert "The judge agrees with the gold" in md.read_text() and "| ann | bob |" in md.read_text()
    plain = tmp_path / "plain.json"
    res = CliRunner().invoke(main, [*base, "--annotator", "who", "--json", str(plain)])
    assert res.exit_code == 0 and "reviewers" not in json.loads(plain.read_text()) and "Reviewers" not in res.output
    for extra, message in (
        (["--gold", "mace"], "error: --gold mace tells people apart: give the annotator column (--annotator)"),
        (["--annotator", "who", "--gold", "zed"], "error: --gold 'zed': no such annotator; annotators are ann, bob"),
        (["--annotator", "who", "--gold", "majority", "--judge", "label"], "error: --gold compares one judge"),
    ):
        res = CliRunner().invoke(main, [*base, *extra])
        assert res.exit_code == 2 and res.output.startswith(message), res.output
        assert "Traceback" not in res.output


def test_cli_gold_from_the_store_with_an_adjudicator_and_answer_times(llm: Any, tmp_path: Path) -> None:
    """Two reviewers and an adjudicator on a judged store (answer times as Argilla stores them): the judge is
    compared with the adjudicated gold (scikit-learn's κ on the gold the report lists), the adjudicator is no
    reviewer, and each reviewer's labels per hour come from their answer times."""
    import sqlite3

    store = tmp_path / "s.sqlite"
    ann = judged_store(llm, store)
    labels = ["Correct", "Acceptable", "Not Acceptable", "Incorrect"]
    extra = []
    for n, row in enumerate(ann):
        if row["spec_name"] != "answer_alignment":
            continue
        bob = labels[(n + (n % 3 == 0)) % 4]  # agrees with ann on two items in three
        extra.append({**row, "annotator": "bob", "label": bob, "answered_at": 1_700_000_000.0 + 90 * n})
        if bob != row["label"] and n % 2:
            extra.append({**row, "annotator": "sam", "label": bob, "answered_at": 1_700_100_000.0 + 60 * n})
    with Store(store) as st:
        st.put_human_labels(extra)
    out, page = tmp_path / "a.json", tmp_path / "a.html"
    args = ["agreement", "--store", str(store), "--spec", "answer_alignment", "--bootstrap", "50"]
    res = CliRunner().invoke(main, [*args, "--gold", "adjudicated:sam", "--json", str(out), "--html", str(page)])
    assert res.exit_code == 0, res.output
    rev = json.loads(out.read_text())["reviewers"]
    assert [r["name"] for r in rev["rows"]] == ["ann", "bob", "judge"]
    assert rev["counts"]["adjudicated"] == sum(1 for e in extra if e["annotator"] == "sam") > 0
    bob_times = sorted(e["answered_at"] for e in extra if e["annotator"] == "bob")
    assert rev["rows"][1]["labels_per_hour"]["value"] == pytest.approx(labels_per_hour(bob_times).value)
    assert rev["rows"][0]["labels_per_hour"] is None  # ann's answers carry no time
    gold = {g["item"]: g["label"] for g in rev["gold_labels"] if g["label"] is not None}
    db = sqlite3.connect(store)
    verdicts = dict(
        db.execute(
            "SELECT record_id, label FROM verdicts WHERE spec_name='answer_alignment' AND status='ok'"
        ).fetchall()
    )
    items = sorted(gold)
    report = json.loads(out.read_text())
    kappa = cohen_kappa_score([gold[i] for i in items], [verdicts[i] for i in items])
    assert report["metrics"]["cohen_kappa"]["value"] == pytest.approx(kappa, abs=1e-12)
    assert report["ceiling"]["n_annotators"] == 2
    assert "Reviewers against the gold: adjudicated (sam; else majority)" in page.read_text()


def test_the_reviewers_table_reads_in_chromium(browser: Any, tmp_path: Path) -> None:
    """The agreement page's reviewers table, as a reader sees it, holds the report's figures: each reviewer's
    κ, the judge's on the same items and their difference, each with its CI."""
    from greval.report.agreement import render_html
    from greval.report.format import fmt_value_ci

    frame = _two_annotators(seed=2, n=70)
    report = compute_agreement(
        frame,
        AgreementScale(labels=["L0", "L1", "L2"]),
        AgreementOptions(bootstrap=80),
        GoldChoice(method="dawid-skene"),
    )
    path = tmp_path / "page.html"
    path.write_text(render_html(report, frame), encoding="utf-8")
    page = _page(browser)
    page.goto(path.as_uri())
    rows = page.evaluate(
        """() => {
            const h = [...document.querySelectorAll('h2')].find((e) => e.textContent.startsWith('Reviewers'));
            const t = h.nextElementSibling;
            const head = [...t.querySelectorAll('th')].map((c) => c.innerText.trim());
            return [...t.querySelectorAll('tbody tr')].map((r) =>
                Object.fromEntries([...r.children].map((c, i) => [head[i], c.innerText.trim()])));
        }"""
    )
    assert report.reviewers is not None and page.errors == []
    assert [r["reviewer"] for r in rows] == ["ann", "bob", "judge (every item)"]
    for shown, row in zip(rows, report.reviewers.rows, strict=True):
        assert shown["cohen_kappa [CI]"] == fmt_value_ci(row.figures["cohen_kappa"])
        if row.role == "annotator":
            assert shown["judge cohen_kappa, same items [CI]"] == fmt_value_ci(row.judge["cohen_kappa"])
            assert shown["judge − reviewer [CI]"] == fmt_value_ci(row.difference["cohen_kappa"])
            assert shown["judge is"] == row.judge_vs
    assert page.locator("text=The judge agrees with the gold").count() == 2


def test_the_gallery_shows_the_gold_the_judge_was_compared_with() -> None:
    """The page's disagreements are with the gold: ann's labels here, though bob and cy outvote her on i1."""
    from greval.report.agreement import gallery

    frame = _people(
        [
            ("i1", "ann", "yes", "no"),
            ("i1", "bob", "no", "no"),
            ("i1", "cy", "no", "no"),
            ("i2", "ann", "no", "no"),
            ("i2", "bob", "no", "no"),
        ]
    )
    report = compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0), gold=GoldChoice.parse("ann"))
    shown = gallery(report, frame)
    assert shown[["item", "human", "judge"]].values.tolist() == [["i1", "yes", "no"]]
    plain = compute_agreement(frame, YES_NO, AgreementOptions(bootstrap=0))
    assert gallery(plain, frame).empty  # against the majority the judge never departs


def test_value_scale_reviewers_equal_scipy() -> None:
    """Ratings 1–5 on a value scale: each distinct value a category for the gold (majority), each reviewer's and
    the judge's Pearson r against it as scipy computes it, exact agreement and MAE as numpy does."""
    from scipy.stats import pearsonr

    rng = np.random.default_rng(4)
    rows = []
    for i in range(80):
        t = int(rng.integers(1, 6))
        judge = int(np.clip(t + rng.integers(-1, 2), 1, 5))
        for who, noise in (("ann", 0.2), ("bob", 0.5), ("cy", 0.8)):
            said = int(np.clip(t + (rng.integers(-1, 2) if rng.random() < noise else 0), 1, 5))
            rows.append((f"i{i}", who, said, judge))
    frame = _people(rows)  # type: ignore[arg-type]
    scale = AgreementScale(kind="value", min=1, max=5)
    report = compute_agreement(frame, scale, AgreementOptions(bootstrap=50), gold=GoldChoice(method="majority"))
    assert report.reviewers is not None and report.reviewers.metric == "pearson"
    gold = {g.item: float(g.label) for g in report.reviewers.gold_labels if g.label is not None}
    judge = frame.groupby("item")["judge"].first()
    for row in report.reviewers.rows[:-1]:
        mine = frame[(frame["annotator"] == row.name) & frame["item"].isin(gold)]
        g = np.array([gold[i] for i in mine["item"]])
        for figures, said in (
            (row.figures, mine["human"].to_numpy(float)),
            (row.judge, judge[mine["item"]].to_numpy(float)),
        ):
            assert abs(figures["pearson"].value - pearsonr(g, said).statistic) <= 1e-12  # type: ignore[operator]
            assert abs(figures["mae"].value - np.mean(np.abs(said - g))) <= 1e-12  # type: ignore[operator]
            assert abs(figures["exact_agreement"].value - np.mean(said == g)) <= 1e-12  # type: ignore[operator]
