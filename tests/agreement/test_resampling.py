"""agreement/resampling.py: the per-group protocol (each figure inside each group, averaged; its bootstrap resamples
items within groups) and the resampling unit every report states."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as hs
from scipy import stats as sps
from sklearn import metrics as skm

from greval.agreement import AgreementOptions, AgreementScale, compute_agreement
from greval.agreement.tables import read_table, to_agreement_frame
from greval.cli.agreement import agreement
from tests.agreement.conftest import (
    DATA,
    DOCS,
    NO_BOOT,
    SETTINGS,
    TOL,
    UNIEVAL_README,
    cli_json,
    close,
    frame,
    grouped_frame,
    no_nan,
    value,
)


def test_per_group_protocol_averages_group_correlations() -> None:
    rng = np.random.default_rng(0)
    h = rng.normal(size=60)
    j = h + rng.normal(size=60)
    g = np.repeat(["a", "b", "c"], 20)
    g_list = g.tolist()
    g_list[-1] = "lonely"  # a one-item group: skipped, counted
    f = frame(h.tolist(), j.tolist(), group=g_list)
    rep = compute_agreement(f, AgreementScale(kind="value"), AgreementOptions(bootstrap=0, protocol="per-group"))
    groups = np.array(g_list)
    ref = np.mean([sps.spearmanr(j[groups == x], h[groups == x])[0] for x in ("a", "b", "c")])
    assert close(value(rep, "spearman"), float(ref))
    assert rep.value is not None and rep.value.n_groups == 3 and rep.value.groups_skipped == 1


def test_per_group_protocol_for_categorical_statistics() -> None:
    f = grouped_frame(4)
    labels = ["L0", "L1", "L2"]
    rep = compute_agreement(f, AgreementScale(labels=labels), AgreementOptions(bootstrap=0, protocol="per-group"))
    per: dict[str, list[float]] = {"accuracy": [], "macro_f1": [], "cohen_kappa": []}
    for _, sub in f.groupby("group"):
        per["accuracy"].append(skm.accuracy_score(sub["human"], sub["judge"]))
        per["macro_f1"].append(
            skm.f1_score(sub["human"], sub["judge"], labels=labels, average="macro", zero_division=0)
        )
        per["cohen_kappa"].append(skm.cohen_kappa_score(sub["human"], sub["judge"], labels=labels))
    for name, vals in per.items():
        assert close(value(rep, name), float(np.mean(vals))), name
    assert [g.group for g in rep.per_group] == sorted(f["group"].unique())
    g0 = f[f["group"] == rep.per_group[0].group]
    assert close(rep.per_group[0].metrics["accuracy"].value, skm.accuracy_score(g0["human"], g0["judge"]))


def test_per_group_bootstrap_resamples_items_within_groups() -> None:
    # group a: the judge always right, group b: always wrong. Within-group resampling keeps every group's
    # accuracy fixed, so the mean's CI is one point; resampling groups or pooled items would not.
    f = frame(["x", "y"] * 5 + ["x", "y"] * 5, ["x", "y"] * 5 + ["y", "x"] * 5, group=["a"] * 10 + ["b"] * 10)
    scale = AgreementScale(labels=["x", "y"])
    rep = compute_agreement(f, scale, AgreementOptions(bootstrap=200, protocol="per-group"))
    acc = rep.metrics["accuracy"]
    assert acc.value == 0.5 and acc.ci_low == 0.5 and acc.ci_high == 0.5
    assert rep.bootstrap is not None and rep.bootstrap.unit == "items within groups" and rep.bootstrap.n_units == 2
    pooled = compute_agreement(f, scale, AgreementOptions(bootstrap=200))
    assert pooled.bootstrap is not None and pooled.bootstrap.unit == "groups"
    assert pooled.metrics["accuracy"].ci_low == 0.0 and pooled.metrics["accuracy"].ci_high == 1.0


def test_resampled_unit_is_reported_in_every_case() -> None:
    opts = AgreementOptions(bootstrap=20)
    scale = AgreementScale(labels=["a", "b"])
    rows = compute_agreement(frame(["a", "b", "a"], ["a", "b", "b"]), scale, opts)
    assert rows.bootstrap is not None and rows.bootstrap.unit == "rows" and rows.bootstrap.n_units == 3
    several = pd.DataFrame(
        {"item": ["x", "x", "y", "y"], "annotator": ["p", "q"] * 2, "judge": ["a"] * 4, "human": ["a", "a", "b", "b"]}
    )
    items = compute_agreement(several, scale, opts)
    assert items.bootstrap is not None and items.bootstrap.unit == "items" and items.bootstrap.n_units == 2
    assert any("resamples of items (2)" in n for n in items.notes)
    assert compute_agreement(several, scale, NO_BOOT).bootstrap is None


def test_stacked_conditions_resample_by_item(tmp_path: Path) -> None:
    # one item under two conditions: rows are the compared units, --group clusters them by item
    f = tmp_path / "stacked.csv"
    pd.DataFrame(
        {
            "id": [1, 1, 2, 2, 3, 3, 4, 4],
            "cond": ["plain", "cot"] * 4,
            "j": list("abababba"),
            "h": list("aabbaabb"),
        }
    ).to_csv(f, index=False)
    data = cli_json(tmp_path, [str(f), "--judge", "j", "--human", "h", "--group", "id", "--bootstrap", "50"])
    assert data["bootstrap"]["unit"] == "groups" and data["bootstrap"]["n_units"] == 4
    assert data["counts"]["items_compared"] == 8
    res = CliRunner().invoke(agreement, [str(f), "--judge", "j", "--human", "h", "--item", "id", "--bootstrap", "0"])
    assert res.exit_code == 2 and "--group" in res.output


@SETTINGS
@given(
    k=hs.integers(2, 4),
    rows=hs.lists(hs.tuples(hs.integers(0, 3), hs.integers(0, 3), hs.integers(0, 3)), min_size=1, max_size=50),
)
def test_per_group_categorical_equals_mean_of_sklearn_per_group(k: int, rows: list[tuple[int, int, int]]) -> None:
    h = np.array([a % k for a, _, _ in rows])
    j = np.array([b % k for _, b, _ in rows])
    g = np.array([f"g{c}" for _, _, c in rows])
    labels = [f"L{i}" for i in range(k)]
    f = frame([labels[x] for x in h], [labels[x] for x in j], group=g.tolist())
    opts = AgreementOptions(bootstrap=0, protocol="per-group", pos_label="L0")
    rep = compute_agreement(f, AgreementScale(labels=labels, ordered=True), opts)
    no_nan(rep)
    codes = list(range(k))
    refs: dict[str, list[float]] = {}
    for name in ("accuracy", "macro_f1", "cohen_kappa", "quadratic_kappa", "precision", "recall"):
        refs[name] = []
    for x in sorted(set(g)):
        hh, jj = h[g == x], j[g == x]
        refs["accuracy"].append(skm.accuracy_score(hh, jj))
        refs["macro_f1"].append(skm.f1_score(hh, jj, labels=codes, average="macro", zero_division=0))
        if len(hh) >= 2 and len(set(hh) | set(jj)) > 1:
            refs["cohen_kappa"].append(skm.cohen_kappa_score(hh, jj, labels=codes))
            refs["quadratic_kappa"].append(skm.cohen_kappa_score(hh, jj, labels=codes, weights="quadratic"))
        if (jj == 0).any():
            refs["precision"].append(skm.precision_score(hh == 0, jj == 0))
        if (hh == 0).any():
            refs["recall"].append(skm.recall_score(hh == 0, jj == 0))
    for name, vals in refs.items():
        if vals:
            assert close(value(rep, name), float(np.mean(vals))), name
        else:
            assert value(rep, name) is None and rep.metrics[name].note, name
    assert [p.n for p in rep.per_group] == [int((g == x).sum()) for x in sorted(set(g))]


@SETTINGS
@given(
    rows=hs.lists(
        hs.tuples(hs.floats(0, 10, allow_nan=False), hs.floats(0, 10, allow_nan=False), hs.integers(0, 2)),
        min_size=2,
        max_size=40,
    )
)
def test_per_group_value_equals_mean_of_scipy_per_group(rows: list[tuple[float, float, int]]) -> None:
    h = np.array([r[0] for r in rows])
    j = np.array([r[1] for r in rows])
    g = np.array([f"g{r[2]}" for r in rows])
    f = frame(h.tolist(), j.tolist(), group=g.tolist())
    rep = compute_agreement(f, AgreementScale(kind="value"), AgreementOptions(bootstrap=0, protocol="per-group"))
    no_nan(rep)
    mae = [skm.mean_absolute_error(h[g == x], j[g == x]) for x in sorted(set(g))]
    assert close(value(rep, "mae"), float(np.mean(mae)))
    for name, fn in (("pearson", sps.pearsonr), ("spearman", sps.spearmanr), ("kendall", sps.kendalltau)):
        vals = [
            fn(j[g == x], h[g == x])[0]
            for x in sorted(set(g))
            if (g == x).sum() >= 2 and np.ptp(h[g == x]) > 0 and np.ptp(j[g == x]) > 0
        ]
        vals = [v for v in vals if math.isfinite(v)]
        if vals:
            assert value(rep, name) == pytest.approx(float(np.mean(vals)), abs=TOL), name
        else:
            assert value(rep, name) is None


@pytest.mark.skipif(not UNIEVAL_README.exists(), reason=f"UniEval data not found at {DATA} (needs ../shared/data)")
def test_topical_chat_per_dialogue_worked_example() -> None:
    raw = read_table(DATA / "unieval" / "topical_chat_result.json.gz")
    f = to_agreement_frame(raw, "predict_scores.overall", "scores.overall", group="source")
    rep = compute_agreement(f, AgreementScale(kind="value"), AgreementOptions(bootstrap=0, protocol="per-group"))
    docs = DOCS.read_text(encoding="utf-8")
    shown = []
    for name, fn in (("pearson", sps.pearsonr), ("spearman", sps.spearmanr), ("kendall", sps.kendalltau)):
        vals = [
            fn(g["judge"].astype(float), g["human"].astype(float))[0]
            for _, g in f.groupby("group")
            if g["judge"].nunique() > 1 and g["human"].nunique() > 1
        ]
        ref = float(np.mean(vals))
        assert value(rep, name) == pytest.approx(ref, abs=TOL), name
        shown.append(f"{ref:.4f}")
    assert f"| per dialogue, averaged (60 groups) | {' | '.join(shown)} |" in docs
    assert len(rep.per_group) == 60


@pytest.mark.skipif(not UNIEVAL_README.exists(), reason=f"UniEval data not found at {DATA} (needs ../shared/data)")
def test_topical_chat_clusters_resample_dialogues() -> None:
    raw = read_table(DATA / "unieval" / "topical_chat_result.json.gz")
    f = to_agreement_frame(raw, "predict_scores.overall", "scores.overall", group="source")
    rep = compute_agreement(f, AgreementScale(kind="value"), AgreementOptions(bootstrap=20))
    assert rep.bootstrap is not None and (rep.bootstrap.unit, rep.bootstrap.n_units) == ("groups", 60)
    assert close(value(rep, "spearman"), sps.spearmanr(f["judge"], f["human"])[0])


def test_per_group_protocol_with_a_slice_that_has_no_compared_item(tmp_path: Path) -> None:
    """A slice whose items no person labelled has nothing to compare: under the per-group protocol it is shown
    empty, like the pooled protocol shows it (it was a KeyError traceback)."""
    f = tmp_path / "f.csv"
    f.write_text("item,judge,human,slice,group\na,yes,yes,p,g1\nb,no,yes,p,g2\nc,yes,,q,g1\nd,no,,q,g2\n")
    args = [str(f), "--judge", "judge", "--human", "human", "--item", "item", "--group", "group", "--slice", "slice"]
    out = tmp_path / "report.json"
    res = CliRunner().invoke(agreement, [*args, "--protocol", "per-group", "--json", str(out), "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    report = json.loads(out.read_text())
    empty = report["slices"]["slice"]["q"]
    assert empty["counts"]["items_compared"] == 0
    assert empty["metrics"]["accuracy"]["value"] is None
    assert empty["categorical"]["bias"]["disagreement_rate"]["value"] is None
