"""agreement/design.py: design-weighted (1/π) estimates on non-random samples are unbiased and cover; strata, census
strata, slices as domains."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm

from greval.agreement import AgreementOptions, AgreementScale, compute_agreement
from tests.agreement.conftest import TOL


def test_design_figures_only_when_the_sample_was_not_taken_whole() -> None:
    """Every item taken with certainty: no design section (the plain figures are the design's); items with no
    recorded selection next to sampled ones: their own stratum, with a note."""
    scale = AgreementScale(kind="categorical", labels=["fail", "pass"])
    rows = [
        {"item": f"r{i}", "judge": "pass", "human": "pass" if i % 3 else "fail", "probability": 1.0} for i in range(12)
    ]
    assert compute_agreement(pd.DataFrame(rows), scale, AgreementOptions(bootstrap=0)).design is None
    for i, r in enumerate(rows):
        r["probability"] = 0.5 if i < 6 else float("nan")
    design = compute_agreement(pd.DataFrame(rows), scale, AgreementOptions(bootstrap=50)).design
    assert design is not None and design.strata == {"imported": 6, "sample": 6}
    assert any("as if taken with certainty" in n for n in design.notes)


def _population(n: int, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Human labels (70 % pass), judge confidence, and a calibrated judge: right with probability = its
    confidence, so the least confident items are the ones it gets wrong most."""
    rng = np.random.default_rng(seed)
    human = (rng.random(n) < 0.7).astype(np.int64)
    confidence = rng.uniform(0.5, 1.0, n)
    judge = np.where(rng.random(n) < confidence, human, 1 - human).astype(np.int64)
    return human, judge, confidence


@pytest.mark.slow
def test_design_weighted_estimates_are_unbiased_and_cover_on_uncertain_first_samples() -> None:
    """500 repetitions of greval's own uncertain-first selection (default 20 % random control) from one
    population of 4,000 judged items: the 1/π-weighted accuracy, κ, prevalence, balanced accuracy, macro F1
    and a label's recall are unbiased (mean within
    2 standard errors of the population's figure), their 95 % intervals cover it 93-97 % of the time, and
    the unweighted figures - what agreement showed before - are far off."""
    from greval.agreement.design import DesignSample, design_estimates
    from greval.annotation.selection import Unit, select

    labels = ["fail", "pass"]
    human, judge, confidence = _population(4000, seed=7)
    truth = {
        "accuracy": skm.accuracy_score(human, judge),
        "kappa": skm.cohen_kappa_score(human, judge),
        "prevalence[fail]": float(np.mean(human == 0)),
        "prevalence[pass]": float(np.mean(human == 1)),
        "balanced_accuracy": skm.balanced_accuracy_score(human, judge),
        "macro_f1": skm.f1_score(human, judge, average="macro"),
        "recall[fail]": skm.recall_score(human, judge, pos_label=0),
    }
    units = [Unit(f"r{i:05d}", "", labels[judge[i]], float(confidence[i])) for i in range(len(human))]
    row = {u.record_hash: i for i, u in enumerate(units)}
    got: dict[str, list[tuple[float, float, float, float]]] = {name: [] for name in truth}
    for rep in range(500):
        picks = select(units, "uncertain", n=400, seed=rep)
        rows = [row[p.unit.record_hash] for p in picks]
        sample = DesignSample(
            human=human[rows].tolist(),
            judge=judge[rows].tolist(),
            probability=[p.probability for p in picks],
            stratum=[p.selection for p in picks],
        )
        for est in design_estimates(sample, labels, resamples=1000, seed=rep):
            assert est.weighted is not None and est.ci_low is not None and est.ci_high is not None, est
            assert est.unweighted is not None
            if est.name in got:
                got[est.name].append((est.weighted, est.unweighted, est.ci_low, est.ci_high))
    for name, true in truth.items():
        a = np.asarray(got[name])
        se = a[:, 0].std(ddof=1) / math.sqrt(len(a))
        assert abs(a[:, 0].mean() - true) <= 2 * se, (name, a[:, 0].mean(), true, se)
        coverage = float(np.mean((a[:, 2] <= true) & (true <= a[:, 3])))
        assert 0.93 <= coverage <= 0.97, (name, coverage)
    # The plain figures on the same samples: uncertain-first over-represents the judge's mistakes.
    for name in ("accuracy", "kappa"):
        a = np.asarray(got[name])
        assert a[:, 1].mean() < truth[name] - 0.1, (name, a[:, 1].mean(), truth[name])


def test_design_estimates_on_a_simple_random_sample_equal_the_plain_figures() -> None:
    """Equal probabilities: weighting changes nothing, and the figures are scikit-learn's."""
    from greval.agreement.design import DesignSample, design_estimates

    human, judge, _ = _population(300, seed=3)
    sample = DesignSample(human=human.tolist(), judge=judge.tolist(), probability=[0.1] * 300, stratum=["random"] * 300)
    est = {e.name: e for e in design_estimates(sample, ["fail", "pass"], resamples=200)}
    assert est["accuracy"].weighted == pytest.approx(skm.accuracy_score(human, judge), abs=TOL)
    assert est["kappa"].weighted == pytest.approx(skm.cohen_kappa_score(human, judge), abs=TOL)
    assert est["balanced_accuracy"].weighted == pytest.approx(skm.balanced_accuracy_score(human, judge), abs=TOL)
    assert est["macro_f1"].weighted == pytest.approx(skm.f1_score(human, judge, average="macro"), abs=TOL)
    p, r, f, _ = skm.precision_recall_fscore_support(human, judge, labels=[0, 1])
    for i, label in enumerate(["fail", "pass"]):
        assert est[f"precision[{label}]"].weighted == pytest.approx(p[i], abs=TOL)
        assert est[f"recall[{label}]"].weighted == pytest.approx(r[i], abs=TOL)
        assert est[f"f1[{label}]"].weighted == pytest.approx(f[i], abs=TOL)
    for e in est.values():
        assert e.weighted == pytest.approx(e.unweighted, abs=TOL)
        assert e.ci_low is not None and e.ci_high is not None and e.ci_low < e.weighted < e.ci_high  # type: ignore[operator]


def test_a_census_stratum_is_not_resampled() -> None:
    """Items taken whole (π = 1) are in every resample exactly once; a sampled stratum keeps its size."""
    from greval.agreement.design import stratified_counts

    strata = np.array([0, 0, 0, 1, 1, 1, 1], dtype=np.int64)
    counts = stratified_counts(strata, resamples=50, seed=1, census=np.array([True, False]))
    assert np.all(counts[:, :3] == 1.0)
    assert np.all(counts[:, 3:].sum(axis=1) == 4.0)
    assert counts[:, 3:].std() > 0


@pytest.mark.slow
def test_review_rounds_keep_the_design_estimates_unbiased_even_half_labelled() -> None:
    """500 reviews of 3 rounds of 150 (``greval review``: the take-all doubt prefix grows each round, the
    stratified control sample is topped up) from 4,000 judged items, the last round only half labelled, at
    random: the cumulative probabilities of the last round, corrected for the unlabelled items per stratum
    (``for_respondents``), give unbiased accuracy and prevalence (mean within 2 standard errors) with 93-97 %
    coverage. κ, a ratio of weighted sums, carries its small-sample bias (about -0.007 here, on ~110 labelled
    control items; measured 2.1 SE): it is held to within 2 % of the truth instead."""
    from greval.agreement.design import DesignSample, design_estimates, for_respondents
    from greval.annotation.selection import Unit, review_round

    labels = ["fail", "pass"]
    human, judge, confidence = _population(4000, seed=11)
    truth = {
        "accuracy": skm.accuracy_score(human, judge),
        "kappa": skm.cohen_kappa_score(human, judge),
        "prevalence[fail]": float(np.mean(human == 0)),
    }
    units = [Unit(f"r{i:05d}", "", labels[judge[i]], float(confidence[i])) for i in range(len(human))]
    row = {u.record_hash: i for i, u in enumerate(units)}
    got: dict[str, list[tuple[float, float, float]]] = {name: [] for name in truth}
    for rep in range(500):
        previous: dict[tuple[str, str], str] = {}
        for round_no in (1, 2, 3):
            picks = review_round(units, previous, 150, 0.3, seed=rep, round_no=round_no)
            new = [p for p in picks if p.unit.key not in previous]
            assert len(new) == 150 and {p.unit.key for p in picks} >= set(previous)
            previous = {p.unit.key: p.selection for p in picks}
        rng = np.random.default_rng(rep)
        dropped = {p.unit.key for p in new if rng.random() < 0.5}
        frame = pd.DataFrame(
            {
                "item": [p.unit.record_hash for p in picks],
                "stratum": [p.selection for p in picks],
                "probability": [p.probability for p in picks],
            }
        )
        selected = frame["stratum"].value_counts().to_dict()
        prob = dict(zip(frame["stratum"], frame["probability"], strict=True))
        kept = frame[[(h, "") not in dropped for h in frame["item"]]]
        adjusted, notes = for_respondents(kept, selected, prob)
        assert notes and "no human label yet" in notes[0]
        rows = [row[h] for h in adjusted["item"]]
        sample = DesignSample(
            human=human[rows].tolist(),
            judge=judge[rows].tolist(),
            probability=adjusted["probability"].tolist(),
            stratum=adjusted["stratum"].tolist(),
        )
        for est in design_estimates(sample, labels, resamples=1000, seed=rep):
            if est.name in got:
                assert est.weighted is not None and est.ci_low is not None and est.ci_high is not None, est
                got[est.name].append((est.weighted, est.ci_low, est.ci_high))
    for name, true in truth.items():
        a = np.asarray(got[name])
        se = a[:, 0].std(ddof=1) / math.sqrt(len(a))
        allowed = max(2 * se, 0.02 * abs(true)) if name == "kappa" else 2 * se
        assert abs(a[:, 0].mean() - true) <= allowed, (name, a[:, 0].mean(), true, se)
        coverage = float(np.mean((a[:, 1] <= true) & (true <= a[:, 2])))
        assert 0.93 <= coverage <= 0.97, (name, coverage)


def test_value_scale_design_figures_are_weighted_means() -> None:
    """A 1-5 scale on an uncertain-first sample: people's mean score, the judge's, its errors and exact /
    within-one agreement weighted by 1/π (Hájek means, computed here by hand), beside the plain means; a
    census stratum stays whole in every resample, so its share of the weight never varies."""
    scale = AgreementScale(kind="value", min=1, max=5)
    human = [1, 2, 5, 4, 3, 5, 4, 4, 2, 5]
    judge = [3, 2, 4, 4, 5, 5, 4, 3, 2, 5]
    prob = [1.0, 1.0, 1.0, 1.0, 0.25, 0.25, 0.25, 0.25, 0.25, 0.25]
    frame = pd.DataFrame(
        {
            "item": [f"r{i}" for i in range(10)],
            "judge": judge,
            "human": human,
            "probability": prob,
            "stratum": ["uncertain"] * 4 + ["control"] * 6,
        }
    )
    report = compute_agreement(frame, scale, AgreementOptions(bootstrap=200, seed=1))
    assert report.design is not None
    est = {e.name: e for e in report.design.estimates}
    w = np.array([1 / p for p in prob])
    h, j = np.array(human, dtype=float), np.array(judge, dtype=float)
    want = {
        "mean_human": (w * h).sum() / w.sum(),
        "mean_judge": (w * j).sum() / w.sum(),
        "mean_error": (w * (j - h)).sum() / w.sum(),
        "mae": (w * abs(j - h)).sum() / w.sum(),
        "rmse": math.sqrt((w * (j - h) ** 2).sum() / w.sum()),
        "exact": (w * (j == h)).sum() / w.sum(),
        "within_1": (w * (abs(j - h) <= 1)).sum() / w.sum(),
    }
    for name, value in want.items():
        assert est[name].weighted == pytest.approx(value, abs=TOL), name
        ci_low, ci_high = est[name].ci_low, est[name].ci_high
        assert ci_low is not None and ci_high is not None and ci_low <= value + TOL and value - TOL <= ci_high
    assert est["mean_human"].unweighted == pytest.approx(h.mean(), abs=TOL)


def test_slices_are_domains_of_the_design() -> None:
    """Sliced by system, each slice's design-weighted accuracy is the Hájek estimate over that slice's items
    with the whole sample's weights (by hand here), and the HTML slice table shows it; items selected but
    not labelled (the `selected` column) are corrected for once, on the whole frame."""
    from greval.report.agreement import render_html

    scale = AgreementScale(kind="categorical", labels=["fail", "pass"])
    rows = []
    for i in range(24):
        certain = i < 8
        rows.append(
            {
                "item": f"r{i}",
                "judge": "pass" if i % 4 else "fail",
                "human": "pass" if i % 3 else "fail",
                "probability": 1.0 if certain else 0.2,
                "stratum": "uncertain" if certain else "control",
                "selected": 8 if certain else 20,  # 4 control items were selected and never labelled
                "system": "A" if i % 2 else "B",
            }
        )
    frame = pd.DataFrame(rows)
    report = compute_agreement(frame, scale, AgreementOptions(bootstrap=100, seed=2, slices=["system"]))
    assert report.design is not None and any("no human label yet" in n for n in report.design.notes)
    for system, part in report.slices["system"].items():
        sub = [r for r in rows if r["system"] == system]
        w = [1 / (r["probability"] * (16 / 20 if r["stratum"] == "control" else 1)) for r in sub]
        right = [r["judge"] == r["human"] for r in sub]
        want = sum(wi for wi, ok in zip(w, right, strict=True) if ok) / sum(w)
        assert part.design is not None
        got = next(e for e in part.design.estimates if e.name == "accuracy")
        assert got.weighted == pytest.approx(want, abs=TOL)
    page = render_html(report, frame)
    assert "accuracy (1/π)" in page and "kappa (1/π)" in page


def test_a_stratum_nobody_labelled_is_counted_and_named() -> None:
    """The store's frame lists every selection stratum in ``attrs`` (a stratum without a labelled item has no
    row to carry its count): its items count among the unlabelled, and a note says the figures cannot cover
    what it stands for."""
    from greval.agreement.design import SELECTION_ATTR

    scale = AgreementScale(kind="categorical", labels=["fail", "pass"])
    rows = [
        {
            "item": f"r{i}",
            "judge": "pass" if i % 3 else "fail",
            "human": "pass" if i % 4 else "fail",
            "probability": 1.0 if i < 6 else 0.25,
            "stratum": "uncertain" if i < 6 else "control:pass",
            "selected": 6 if i < 6 else 4,
        }
        for i in range(10)
    ]
    frame = pd.DataFrame(rows)
    frame.attrs[SELECTION_ATTR] = {"uncertain": (6, 1.0), "control:pass": (4, 0.25), "control:fail": (3, 0.5)}
    report = compute_agreement(frame, scale, AgreementOptions(bootstrap=50, seed=0))
    assert report.design is not None
    notes = " | ".join(report.design.notes)
    assert "3 selected item(s) have no human label yet" in notes
    assert "stratum control:fail: none of its 3 selected items is labelled yet" in notes
    # Only the doubtful slice labelled: equal weights, no design table, but the gap is still said.
    census = frame[frame["stratum"] == "uncertain"].copy()
    census.attrs[SELECTION_ATTR] = {"uncertain": (6, 1.0), "control:pass": (4, 0.25)}
    plain = compute_agreement(census, scale, AgreementOptions(bootstrap=50, seed=0))
    assert plain.design is None
    assert any("stratum control:pass: none of its 4 selected items is labelled yet" in n for n in plain.notes)


def test_a_slice_with_few_sampled_items_still_gets_an_interval() -> None:
    """A slice holding 2 control items, both right, next to 3 census items, 1 wrong: resampling the whole
    control stratum varies how many of the slice's items a resample holds, so the slice's weighted accuracy
    has an interval of some width (resampling the slice's own 2 items could not move it)."""
    scale = AgreementScale(kind="categorical", labels=["fail", "pass"])
    rows = []
    for i in range(20):
        census = i < 6
        in_a = i in (0, 1, 2, 6, 7)
        right = not (i == 0 or (not in_a and i % 3 == 0))
        rows.append(
            {
                "item": f"r{i}",
                "judge": "pass",
                "human": "pass" if right else "fail",
                "probability": 1.0 if census else 0.1,
                "stratum": "uncertain" if census else "control",
                "system": "A" if in_a else "B",
            }
        )
    report = compute_agreement(pd.DataFrame(rows), scale, AgreementOptions(bootstrap=400, seed=3, slices=["system"]))
    part = report.slices["system"]["A"]
    assert part.design is not None
    acc = next(e for e in part.design.estimates if e.name == "accuracy")
    assert acc.ci_low is not None and acc.ci_high is not None and acc.ci_high - acc.ci_low > 0.05
    assert acc.weighted == pytest.approx((2 + 2 / 0.1) / (3 + 2 / 0.1))


def test_a_resample_with_no_human_label_gives_nan_balanced_accuracy_without_a_warning() -> None:
    """A resample that drew no labelled item has no balanced accuracy (NaN) and says nothing on stderr (numpy's
    "Mean of empty slice" warning was printed twice in the quick start's output)."""
    import warnings

    from greval.agreement.design import _figures

    cm = np.zeros((2, 3, 3))
    cm[0] = [[3, 1, 0], [0, 2, 0], [0, 0, 0]]  # the third code: no label
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = _figures(cm, 2, ["a", "b"])
    assert out["balanced_accuracy"][0] == pytest.approx((3 / 4 + 2 / 2) / 2)
    assert math.isnan(out["balanced_accuracy"][1])
