"""agreement/comparison.py: judge versions side by side, with paired differences — from frames, files and the store."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner
from sklearn import metrics as skm

from greval.agreement import AgreementOptions, AgreementScale, compare_agreement
from greval.cli import main
from greval.cli.agreement import agreement
from tests.agreement.conftest import close, frame, grouped_frame, judged_store


@pytest.mark.slow
def test_compare_versions_paired() -> None:
    rng = np.random.default_rng(2)
    h = rng.integers(0, 2, 120)
    v1 = np.where(rng.random(120) < 0.7, h, 1 - h)
    v2 = np.where(rng.random(120) < 0.95, h, 1 - h)
    scale = AgreementScale(labels=["0", "1"])
    opts = AgreementOptions(bootstrap=60)
    frames = {name: frame(h.tolist(), v.tolist()) for name, v in (("v1", v1), ("v1b", v1), ("v2", v2))}
    comp = compare_agreement(frames, scale, opts)
    acc = next(d for d in comp.differences if d.metric == "accuracy" and d.b == "v1b")
    assert acc.estimate.value == 0.0 and acc.beyond_ci is False and acc.estimate.ci_low == acc.estimate.ci_high == 0
    kappa = next(d for d in comp.differences if d.metric == "cohen_kappa" and d.b == "v2")
    ref = skm.cohen_kappa_score(h, v2) - skm.cohen_kappa_score(h, v1)
    assert close(kappa.estimate.value, ref) and kappa.beyond_ci is True


@pytest.mark.slow
def test_cli_compares_versions(tmp_path: Path) -> None:
    f = tmp_path / "d.csv"
    pd.DataFrame({"v1": list("aabbaabb"), "v2": list("abababab"), "h": list("abababab")}).to_csv(f, index=False)
    res = CliRunner().invoke(agreement, [str(f), "--judge", "v1", "--judge", "v2", "--human", "h", "--bootstrap", "50"])
    assert res.exit_code == 0, res.output
    assert "paired differences" in res.output
    long = tmp_path / "long.csv"
    pd.DataFrame(
        {
            "id": list(range(8)) * 2,
            "ver": ["v1"] * 8 + ["v2"] * 8,
            "j": list("aabbaabb") + list("abababab"),
            "h": list("abababab") * 2,
        }
    ).to_csv(long, index=False)
    args = [str(long), "--judge", "j", "--version", "ver", "--item", "id", "--human", "h", "--bootstrap", "20"]
    res = CliRunner().invoke(agreement, [*args, "--json", str(tmp_path / "c.json")])
    assert res.exit_code == 0, res.output
    data = json.loads((tmp_path / "c.json").read_text())
    assert set(data["reports"]) == {"v1", "v2"} and data["common_items"] == 8
    acc = next(d for d in data["differences"] if d["metric"] == "accuracy")
    assert acc["a"] == "v1" and acc["b"] == "v2" and acc["estimate"]["value"] == 0.5


def test_version_comparison_reports_its_resampling_unit() -> None:
    f = grouped_frame(9, n=30)
    frames = {"v1": f, "v1-again": f}
    scale = AgreementScale(labels=["L0", "L1", "L2"])
    comp = compare_agreement(frames, scale, AgreementOptions(bootstrap=30, protocol="per-group"))
    assert comp.bootstrap is not None and comp.bootstrap.unit == "items within groups"
    acc = next(d for d in comp.differences if d.metric == "accuracy")
    assert acc.estimate.value == 0.0 and acc.estimate.ci_low == acc.estimate.ci_high == 0.0
    plain = compare_agreement(frames, scale, AgreementOptions(bootstrap=30))
    assert plain.bootstrap is not None and plain.bootstrap.unit == "groups"


def test_agreement_compares_spec_versions_from_the_store(llm: Any, tmp_path: Path) -> None:
    import sqlite3

    store = tmp_path / "s.sqlite"
    judged_store(llm, store, versions=2)
    hashes = [
        h
        for (h,) in sqlite3.connect(store).execute(
            "SELECT spec_hash FROM specs WHERE name='answer_alignment' ORDER BY created_at"
        )
    ]
    assert len(hashes) == 2
    out = tmp_path / "cmp.json"
    res = CliRunner().invoke(
        main,
        [
            "agreement",
            "--store",
            str(store),
            "--spec",
            f"answer_alignment@{hashes[0]}",
            "--spec",
            f"answer_alignment@{hashes[1]}",
            "--bootstrap",
            "50",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    comparison = json.loads(out.read_text())
    assert set(comparison["reports"]) == {f"answer_alignment@{h}" for h in hashes}
    assert comparison["differences"]


def test_independent_comparison_is_two_independent_bootstraps() -> None:
    """Two sides with no item in common (two systems answering their own questions): each side's figure is its
    own agreement report's, and the CI of B − A is the percentile interval of resample r of B minus resample r
    of A, each side drawing its own items (seeds 0 and 1) — written out here with numpy."""
    from greval.agreement.comparison import compare_independent

    rng = np.random.default_rng(4)
    ha, hb = rng.integers(0, 2, 40), rng.integers(0, 2, 55)
    ja, jb = np.where(rng.random(40) < 0.6, ha, 1 - ha), np.where(rng.random(55) < 0.9, hb, 1 - hb)
    scale, opts = AgreementScale(labels=["0", "1"]), AgreementOptions(bootstrap=400)
    fb = frame(hb.tolist(), jb.tolist())
    fb["item"] = [f"b{i}" for i in range(55)]
    comp = compare_independent({"A": frame(ha.tolist(), ja.tolist()), "B": fb}, scale, opts)
    assert not comp.paired and comp.common_items == 0
    acc = next(d for d in comp.differences if d.metric == "accuracy")
    a, b = (comp.reports[k].metrics["accuracy"].value for k in ("A", "B"))
    assert a == pytest.approx((ha == ja).mean()) and b == pytest.approx((hb == jb).mean())
    assert acc.estimate.value == pytest.approx(b - a) and acc.estimate.n == 95
    da = np.random.default_rng(0).integers(0, 40, size=(400, 40))
    db = np.random.default_rng(1).integers(0, 55, size=(400, 55))
    diffs = (hb[db] == jb[db]).mean(axis=1) - (ha[da] == ja[da]).mean(axis=1)
    low, high = np.quantile(diffs, [0.025, 0.975])
    assert (acc.estimate.ci_low, acc.estimate.ci_high) == (pytest.approx(low), pytest.approx(high))
    assert any("independent differences" in n for n in comp.notes)
