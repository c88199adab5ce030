"""agreement/threshold.py: the judge's labels from its score, at a given threshold or one chosen on selection rows
(the worked example of docs/agreement.md)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from sklearn import metrics as skm

from tests.agreement.conftest import DOCS, TOL, cli_json

DETECTOR_CSV = """id,split,label,p_halluc
1,dev,faithful,0.10
2,dev,faithful,0.35
3,dev,hallucinated,0.40
4,dev,faithful,0.40
5,dev,hallucinated,0.70
6,dev,faithful,0.55
7,dev,hallucinated,0.90
8,dev,faithful,0.20
9,test,faithful,0.15
10,test,hallucinated,0.50
11,test,faithful,0.50
12,test,hallucinated,0.65
13,test,faithful,0.30
14,test,hallucinated,0.45
15,test,faithful,0.60
16,test,hallucinated,0.80
17,test,faithful,0.05
18,test,faithful,0.40
19,test,hallucinated,0.35
20,test,faithful,0.25
"""


def _detector_table() -> pd.DataFrame:
    """The worked example of docs/agreement.md (--score): a hallucination detector's probability, dev + test."""
    return pd.read_csv(io.StringIO(DETECTOR_CSV))


def test_docs_show_the_detector_table() -> None:
    assert DETECTOR_CSV.strip() in DOCS.read_text(encoding="utf-8")


@pytest.mark.parametrize("rule", ["gt", "ge"])
def test_fixed_threshold_worked_example(tmp_path: Path, rule: str) -> None:
    t = _detector_table()
    f = tmp_path / "det.csv"
    t.to_csv(f, index=False)
    args = [str(f), "--score", "p_halluc", "--human", "label", "--pos-label", "hallucinated", "--item", "id"]
    data = cli_json(tmp_path, [*args, "--threshold", "0.5", "--threshold-rule", rule, "--bootstrap", "0"])
    y = t["label"].to_numpy() == "hallucinated"
    s = t["p_halluc"].to_numpy()
    pred = s > 0.5 if rule == "gt" else s >= 0.5
    m = data["metrics"]
    assert m["accuracy"]["value"] == pytest.approx(skm.accuracy_score(y, pred), abs=TOL)
    assert m["f1"]["value"] == pytest.approx(skm.f1_score(y, pred), abs=TOL)
    assert m["roc_auc"]["value"] == pytest.approx(skm.roc_auc_score(y, s), abs=TOL)
    assert m["pr_auc"]["value"] == pytest.approx(skm.average_precision_score(y, s), abs=TOL)
    assert data["threshold"]["threshold"] == 0.5 and data["threshold"]["rule"] == rule
    refs = (skm.accuracy_score(y, pred), skm.precision_score(y, pred), skm.recall_score(y, pred), skm.f1_score(y, pred))
    refs += (skm.roc_auc_score(y, s), skm.average_precision_score(y, s))
    op = ">" if rule == "gt" else "≥"
    row = f"| all 20, score {op} 0.5 | 20 | 0.5 | " + " | ".join(f"{x:.3f}" for x in refs) + " |"
    assert row in DOCS.read_text(encoding="utf-8"), row


@pytest.mark.parametrize("criterion", ["max-f1", "max-balanced-accuracy", "youden"])
def test_chosen_threshold_worked_example(tmp_path: Path, criterion: str) -> None:
    t = _detector_table()
    f = tmp_path / "det.csv"
    t.to_csv(f, index=False)
    args = [str(f), "--score", "p_halluc", "--human", "label", "--pos-label", "hallucinated", "--item", "id"]
    args += ["--choose-threshold", criterion, "--select-on", "split=dev", "--bootstrap", "0"]
    data = cli_json(tmp_path, args)
    dev, test = t[t["split"] == "dev"], t[t["split"] == "test"]
    yd, sd = dev["label"].to_numpy() == "hallucinated", dev["p_halluc"].to_numpy()
    grid = np.unique(sd)
    crit = []
    for c in grid:
        p = sd >= c
        if criterion == "max-f1":
            crit.append(skm.f1_score(yd, p, zero_division=0))
        else:
            crit.append(skm.balanced_accuracy_score(yd, p))  # Youden's J = 2 × balanced accuracy − 1: same argmax
    best = grid[int(np.argmax(crit))]
    assert data["threshold"]["threshold"] == best and data["threshold"]["candidates"] == len(grid)
    yt, pt = test["label"].to_numpy() == "hallucinated", test["p_halluc"].to_numpy() >= best
    assert data["counts"]["items_compared"] == len(test)
    assert data["metrics"]["accuracy"]["value"] == pytest.approx(skm.accuracy_score(yt, pt), abs=TOL)
    assert data["metrics"]["f1"]["value"] == pytest.approx(skm.f1_score(yt, pt), abs=TOL)
    auc = skm.roc_auc_score(yt, test["p_halluc"].to_numpy())
    assert data["metrics"]["roc_auc"]["value"] == pytest.approx(auc, abs=TOL)
    if criterion == "max-f1":
        ap = skm.average_precision_score(yt, test["p_halluc"].to_numpy())
        row = (
            f"| T by max-f1 on dev, test rows | {len(test)} | {best:g} | {skm.accuracy_score(yt, pt):.3f} | "
            f"{skm.precision_score(yt, pt):.3f} | {skm.recall_score(yt, pt):.3f} | "
            f"{skm.f1_score(yt, pt):.3f} | {auc:.3f} | {ap:.3f} |"
        )
        assert row in DOCS.read_text(encoding="utf-8"), row
