"""agreement/calibration.py: the judge's confidence against human labels (ECE, MCE, Brier, reliability bins), by
hand, weighted, and from a store judged with samples."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from click.testing import CliRunner

from greval.agreement import AgreementOptions, AgreementScale, compute_agreement
from greval.cli import main
from greval.cli.agreement import agreement
from tests.agreement.conftest import DOCS, NO_BOOT, TOL, frame, judged_store


def _hand_frame() -> pd.DataFrame:
    """Six usable rows; one without a confidence, one without a human and one without a judge answer."""
    return pd.DataFrame(
        {
            "item": [f"i{n}" for n in range(9)],
            "judge": ["a", "a", "b", "b", "a", "b", "a", "a", None],
            "human": ["a", "b", "b", "b", "b", "b", "a", None, "a"],
            "judge_confidence": [0.9, 0.9, 0.8, 0.7, 0.3, 0.2, None, 0.5, 0.6],
        }
    )


def _wilson(k: float, n: float, z: float = 1.959963984540054) -> tuple[float, float]:
    p = k / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z / (1 + z * z / n) * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


def test_calibration_equals_a_hand_calculation() -> None:
    """Bins of 0.1: 0.9 (2 rows, 1 right), 0.8, 0.7 (right), 0.3 (wrong), 0.2 (right).
    ECE = (2·|0.5 − 0.9| + |1 − 0.8| + |1 − 0.7| + |0 − 0.3| + |1 − 0.2|) / 6 = 2.4 / 6 = 0.4; MCE 0.8;
    Brier = (0.1² + 0.9² + 0.2² + 0.3² + 0.3² + 0.8²) / 6 = 1.68 / 6 = 0.28. Skipped rows are counted."""
    rep = compute_agreement(_hand_frame(), AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=50))
    cal = rep.calibration
    assert cal is not None
    assert (cal.n, cal.n_without_confidence, cal.n_without_answer) == (6, 1, 2)
    assert cal.ece.value == pytest.approx(0.4, abs=TOL)
    assert cal.mce.value == pytest.approx(0.8, abs=TOL)
    assert cal.brier.value == pytest.approx(0.28, abs=TOL)
    assert cal.accuracy == pytest.approx(4 / 6, abs=TOL)
    assert cal.mean_confidence == pytest.approx(3.8 / 6, abs=TOL)
    used = {round(b.low, 1): b for b in cal.bins if b.count}
    assert sorted(used) == [0.2, 0.3, 0.7, 0.8, 0.9] and len(cal.bins) == 10
    top = used[0.9]
    assert (top.count, top.mean_confidence, top.accuracy) == (2, pytest.approx(0.9), pytest.approx(0.5))
    assert (top.ci_low, top.ci_high) == pytest.approx(_wilson(1, 2), abs=1e-12)
    assert (used[0.3].ci_low, used[0.3].ci_high) == pytest.approx(_wilson(0, 1), abs=1e-12)
    assert cal.ece.ci_low is not None and cal.ece.ci_high is not None
    assert cal.ece.ci_low <= 0.4 <= cal.ece.ci_high
    assert any(n.startswith("1 row(s) with a judge and a human answer have no judge confidence") for n in cal.notes)
    assert any(n.startswith("2 row(s) with a confidence lack") for n in cal.notes)
    docs = " ".join(DOCS.read_text(encoding="utf-8").split())
    for figure in (
        f"ECE = (2 · 0.4 + 0.2 + 0.3 + 0.3 + 0.8) / 6 = **{cal.ece.value:.3f}**",
        f"MCE = **{cal.mce.value:.3f}**",
    ):
        assert figure in docs, figure
    assert f"0.09 + 0.64) / 6 = **{cal.brier.value:.3f}**" in docs
    # Two bins: [0, 0.5) holds 0.3 and 0.2 (conf 0.25, acc 0.5), [0.5, 1] the other four (conf 0.825, acc 0.75).
    two = compute_agreement(
        _hand_frame(), AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=0, calibration_bins=2)
    ).calibration
    assert two is not None and [b.count for b in two.bins] == [2, 4]
    assert two.ece.value == pytest.approx((2 * 0.25 + 4 * 0.075) / 6, abs=TOL)
    assert two.ece.ci_low is None and two.resample_unit is None  # no bootstrap asked


def test_calibration_weights_rows_by_inverse_inclusion_probability() -> None:
    """Row i0 taken with π = 0.5 counts twice: the 0.9 bin holds weight 3 with 2 right (acc 2/3), total 7:
    ECE = (3·|2/3 − 0.9| + 0.2 + 0.3 + 0.3 + 0.8) / 7 = 2.3 / 7; Brier = (2·0.01 + 1.67) / 7."""
    f = _hand_frame().assign(probability=[0.5] + [1.0] * 8)
    cal = compute_agreement(f, AgreementScale(labels=["a", "b"]), NO_BOOT).calibration
    assert cal is not None and cal.weighted
    assert cal.ece.value == pytest.approx(2.3 / 7, abs=TOL)
    assert cal.brier.value == pytest.approx(1.69 / 7, abs=TOL)
    top = next(b for b in cal.bins if b.count == 2)
    assert top.weight == pytest.approx(3.0) and top.accuracy == pytest.approx(2 / 3)
    # Kish effective n = 3² / (2² + 1²) = 1.8 for the Wilson interval.
    assert (top.ci_low, top.ci_high) == pytest.approx(_wilson(2 / 3 * 1.8, 1.8), abs=1e-12)
    assert any("1/π" in n for n in cal.notes)
    assert f"gives ECE 2.3 / 7 = {cal.ece.value:.3f}" in " ".join(DOCS.read_text(encoding="utf-8").split())


def test_a_calibrated_judge_has_an_ece_near_zero_and_an_overconfident_one_its_gap() -> None:
    from greval.agreement.calibration import calibration

    rng = np.random.default_rng(11)
    n = 20000
    conf = rng.uniform(0.5, 1.0, n)
    calibrated = calibration(rng.random(n) < conf, conf, resamples=200, seed=1)
    assert calibrated.ece.value is not None and calibrated.ece.value < 0.015
    assert calibrated.ece.ci_low is not None and calibrated.ece.ci_low < 0.01
    assert calibrated.ece_if_calibrated is not None and calibrated.ece.value <= calibrated.ece_if_calibrated
    for b in calibrated.bins:
        if b.count:
            assert b.ci_low is not None and b.ci_high is not None and b.mean_confidence is not None
            assert b.ci_low - 0.01 <= b.mean_confidence <= b.ci_high + 0.01
    over = calibration(rng.random(n) < conf - 0.2, conf, resamples=200, seed=1)  # right 20 points less often
    assert over.ece.value == pytest.approx(0.2, abs=0.015)
    assert over.ece.ci_low is not None and over.ece.ci_high is not None
    assert over.ece.ci_low <= 0.2 <= over.ece.ci_high + 0.005
    assert over.mce.value is not None and over.mce.value >= over.ece.value
    assert over.brier.value is not None and over.brier.value > calibrated.brier.value  # type: ignore[operator]
    assert over.ece_if_calibrated is not None and over.ece_if_calibrated < 0.02


def test_calibration_resamples_items_or_groups_and_refuses_bad_confidences(tmp_path: Path) -> None:
    """Several annotators per item: each (item, annotator) row is an observation, resampled with its item;
    a group column makes the group the unit. A frame without confidences has no calibration section."""
    rows = frame(["a", "b", "a", "a"], ["a", "a", "b", "b"], judge_confidence=[0.9, 0.9, 0.6, 0.6])
    rows["item"] = ["x", "x", "y", "y"]
    rows["annotator"] = ["p", "q", "p", "q"]
    cal = compute_agreement(rows, AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=20)).calibration
    assert cal is not None and cal.n == 4 and cal.resample_unit == "items"
    grouped = rows.assign(group=["g", "g", "g", "g"])
    cal = compute_agreement(grouped, AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=20)).calibration
    assert cal is not None and cal.resample_unit == "groups"
    plain = compute_agreement(frame(["a", "b"], ["a", "a"]), AgreementScale(labels=["a", "b"]), NO_BOOT)
    empty = compute_agreement(
        frame(["a", "b"], ["a", "a"], judge_confidence=[None, None]), AgreementScale(labels=["a", "b"]), NO_BOOT
    )
    assert plain.calibration is None and empty.calibration is None
    # Value scales: exact match counts as right.
    vals = frame([4, 5, 3], [4.0, 4.0, "3"], judge_confidence=[1.0, 1.0, 0.5])
    cal = compute_agreement(vals, AgreementScale(kind="value", min=1, max=5), NO_BOOT).calibration
    assert cal is not None and cal.accuracy == pytest.approx(2 / 3)
    path = tmp_path / "c.csv"
    path.write_text("j,h,c\na,a,0.9\nb,a,1.2\n")
    res = CliRunner().invoke(agreement, [str(path), "--judge", "j", "--human", "h", "--confidence", "c"])
    assert res.exit_code == 2 and "outside [0, 1]" in res.output
    path.write_text("j,h,judge_confidence\na,a,0.9\nb,a,0.6\nb,b,0.6\n")
    out = tmp_path / "c.json"
    res = CliRunner().invoke(agreement, [str(path), "--judge", "j", "--human", "h", "--json", str(out)])
    assert res.exit_code == 0, res.output
    assert "Is the judge's confidence calibrated?" in res.output
    assert json.loads(out.read_text())["calibration"]["n"] == 3


def test_agreement_from_a_store_judged_with_samples_has_a_calibration_section(llm: Any, tmp_path: Path) -> None:
    """A judge run with --samples 3 (the test server answers 'Incorrect' at random 40 % of the time, so the
    samples disagree): the store's verdict confidences reach the agreement report, whose ECE equals one
    computed here from the database's rows; two annotators per record are two observations each."""
    import sqlite3

    from greval.dataset.records import Record
    from greval.llm.config import JudgeConfig
    from greval.llm.retry import RetryPolicy
    from greval.runner.driver import run
    from greval.runner.options import RunOptions
    from greval.spec import resolve_specs
    from greval.store.store import Store

    llm.script(
        [
            {
                "match": "favouring the stricter label",
                "probability": 0.4,
                "action": {"type": "respond", "content": {"reason": "r", "label": "Incorrect"}},
            }
        ]
    )
    recs = [
        Record.from_mapping({"id": f"r{i}", "question": f"q{i}", "expected_answer": "e", "answer": f"a{i}"})
        for i in range(16)
    ]
    store = tmp_path / "s.sqlite"
    cfg = JudgeConfig.parse("openai:judge-test", base_url=llm.base_url, samples=3)
    with Store(store) as st:
        run(resolve_specs(["answer_alignment"]), recs, st, cfg, options=RunOptions(retry=RetryPolicy(base_delay=0.01)))
        verdicts = st.query("SELECT record_hash, record_id, label, confidence FROM verdicts ORDER BY record_id")
        assert {round(v["confidence"], 3) for v in verdicts} >= {0.667, 1.0}  # the samples disagreed somewhere
        human = [
            {
                "spec_name": "answer_alignment",
                "record_hash": v["record_hash"],
                "item_id": "",
                "annotator": who,
                "record_id": v["record_id"],
                "label": v["label"] if (who == "p" and i % 3) else "Correct",
                "status": "submitted",
            }
            for i, v in enumerate(verdicts)
            for who in ("p", "q")
        ]
        st.put_human_labels(human)
    out, page = tmp_path / "a.json", tmp_path / "a.html"
    args = ["agreement", "--store", str(store), "--spec", "answer_alignment", "--bootstrap", "100"]
    res = CliRunner().invoke(main, [*args, "--json", str(out), "--html", str(page)])
    assert res.exit_code == 0, res.output
    assert "Is the judge's confidence calibrated?" in res.output
    cal = json.loads(out.read_text())["calibration"]
    db = sqlite3.connect(store)
    pairs = db.execute(
        "SELECT v.confidence, v.label = h.label FROM verdicts v JOIN human_labels h ON h.record_hash = v.record_hash"
        " AND h.item_id = v.item_id AND h.spec_name = v.spec_name"
    ).fetchall()
    db.close()
    assert cal["n"] == len(pairs) == 32 and cal["n_without_confidence"] == 0
    by_bin: dict[int, list[tuple[float, int]]] = {}
    for c, right in pairs:
        by_bin.setdefault(min(int(c * 10 + 1e-9), 9), []).append((c, right))
    ece = sum(abs(sum(r for _, r in b) / len(b) - sum(c for c, _ in b) / len(b)) * len(b) for b in by_bin.values())
    assert cal["ece"]["value"] == pytest.approx(ece / len(pairs), abs=1e-12)
    assert cal["resample_unit"] == "records"  # the store frame groups by record, and says so
    assert 'alt="reliability diagram"' in page.read_text()
    # A judge asked once has no confidence: no calibration section, and nothing said about it.
    single = tmp_path / "one.sqlite"
    judged_store(llm, single)
    res = CliRunner().invoke(
        main, ["agreement", "--store", str(single), "--spec", "answer_alignment", "--json", str(out)]
    )
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["calibration"] is None and "calibrat" not in res.output
