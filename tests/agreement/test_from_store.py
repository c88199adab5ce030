"""agreement/from_store.py: stored verdicts joined exactly with stored human labels, and a non-random sample weighted
back."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from greval.cli import main
from tests.agreement.conftest import judged_store


def test_agreement_from_the_store_joins_exactly(llm: Any, tmp_path: Path) -> None:
    import sqlite3

    from sklearn.metrics import accuracy_score, cohen_kappa_score

    store = tmp_path / "s.sqlite"
    judged_store(llm, store)
    out = tmp_path / "a.json"
    res = CliRunner().invoke(
        main,
        ["agreement", "--store", str(store), "--spec", "answer_alignment", "--bootstrap", "50", "--json", str(out)],
    )
    assert res.exit_code == 0, res.output
    db = sqlite3.connect(store)
    pairs = db.execute(
        "SELECT v.label, h.label FROM verdicts v JOIN human_labels h ON h.record_hash = v.record_hash"
        " AND h.item_id = v.item_id AND h.spec_name = v.spec_name"
        " WHERE v.spec_name='answer_alignment'"
    ).fetchall()
    assert len(pairs) == 16
    judge, human = [p[0] for p in pairs], [p[1] for p in pairs]
    metrics = json.loads(out.read_text())["metrics"]
    assert metrics["accuracy"]["value"] == pytest.approx(accuracy_score(human, judge), abs=1e-12)
    assert metrics["cohen_kappa"]["value"] == pytest.approx(cohen_kappa_score(human, judge), abs=1e-12)
    res = CliRunner().invoke(
        main,
        [
            "agreement",
            "--store",
            str(store),
            "--spec",
            "chunk_evaluation",
            "--level",
            "record",
            "--bootstrap",
            "50",
            "--json",
            str(out),
        ],
    )
    assert res.exit_code == 0, res.output
    assert json.loads(out.read_text())["counts"]["items_compared"] == 16  # one aggregated score per record
    res = CliRunner().invoke(main, ["agreement", "--store", str(store), "--spec", "nope"])
    assert res.exit_code == 2 and "no metric 'nope'" in res.output


def test_agreement_from_the_store_weights_a_non_random_sample_back(llm: Any, tmp_path: Path) -> None:
    """Labels of a push that took 8 records whole (uncertain, π = 1) and 8 of the other 32 at random
    (control, π = 0.25): the agreement report shows the plain figures and, beside them, the 1/π-weighted ones
    over every judged item, computed by hand here; labels from no recorded push count as their own stratum."""
    import sqlite3

    from greval.store.store import Store

    store = tmp_path / "s.sqlite"
    judged_store(llm, store)
    db = sqlite3.connect(store)
    pairs = db.execute(
        "SELECT v.record_hash, v.record_id, v.label, h.label FROM verdicts v JOIN human_labels h"
        " ON h.record_hash = v.record_hash AND h.item_id = v.item_id AND h.spec_name = v.spec_name"
        " WHERE v.spec_name='answer_alignment' ORDER BY v.record_id"
    ).fetchall()
    db.close()
    probability = {rid: 1.0 if i < 8 else 0.25 for i, (_, rid, _, _) in enumerate(pairs)}
    with Store(store) as st:
        version, spec = st.reader_spec("answer_alignment")
        spec_key = version.spec_key
        st.start_push(
            "p1",
            spec_name="answer_alignment",
            spec_key=spec_key,
            spec_hash=spec.hash,
            judge_key="j",
            dataset="import",  # where judged_store's labels are filed
            workspace=None,
            api_url="http://argilla.invalid",
            strategy="uncertain",
            params="{}",
            population=40,
            units=[
                {
                    "record_hash": h,
                    "item_id": "",
                    "record_id": rid,
                    "argilla_id": rid,
                    "stratum": "uncertain" if probability[rid] == 1.0 else "control",
                    "probability": probability[rid],
                    "rank": i,
                }
                for i, (h, rid, _, _) in enumerate(pairs)
            ],
        )
    out = tmp_path / "a.json"
    args = ["agreement", "--store", str(store), "--spec", "answer_alignment", "--bootstrap", "200", "--json", str(out)]
    res = CliRunner().invoke(main, args)
    assert res.exit_code == 0, res.output
    assert "design-weighted" in res.output and "not a simple random sample" in " ".join(res.output.split())
    report = json.loads(out.read_text())
    design = report["design"]
    assert design["strata"] == {"control": 8, "uncertain": 8}
    w = [1 / probability[rid] for _, rid, _, _ in pairs]
    right = [float(j == h) for _, _, j, h in pairs]
    est = {e["name"]: e for e in design["estimates"]}
    assert est["accuracy"]["weighted"] == pytest.approx(
        sum(a * b for a, b in zip(w, right, strict=True)) / sum(w), abs=1e-12
    )
    assert est["accuracy"]["unweighted"] == pytest.approx(report["metrics"]["accuracy"]["value"], abs=1e-12)
    assert est["accuracy"]["ci_low"] <= est["accuracy"]["weighted"] <= est["accuracy"]["ci_high"]
