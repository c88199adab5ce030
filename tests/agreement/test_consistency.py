"""agreement/consistency.py: the judge against itself over two runs per item (--pair-by)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as hs
from sklearn import metrics as skm

from greval.agreement import AgreementOptions, AgreementScale
from tests.agreement.conftest import DOCS, SETTINGS, TOL, cli_json, close


@SETTINGS
@given(
    k=hs.integers(2, 4),
    pairs=hs.lists(hs.tuples(hs.integers(0, 4), hs.integers(0, 4), hs.integers(0, 2)), min_size=1, max_size=50),
    policy=hs.sampled_from(["agree", "disagree"]),
)
def test_pair_by_consistency_matches_sklearn(k: int, pairs: list[tuple[int, int, int]], policy: str) -> None:
    from greval.agreement import compute_consistency

    labels = [f"L{i}" for i in range(k)]

    def ans(x: int) -> str:
        return labels[x] if x < k else "garbled"  # codes ≥ k are invalid answers

    rows = []
    for n, (a, b, _) in enumerate(pairs):
        rows += [
            {"item": f"i{n}", "run": "original", "judge": ans(a)},
            {"item": f"i{n}", "run": "swapped", "judge": ans(b)},
        ]
    f = pd.DataFrame(rows)
    opts = AgreementOptions(bootstrap=0, invalid_pairs=policy)  # type: ignore[arg-type]
    rep = compute_consistency(f, AgreementScale(labels=labels), opts, column="run")
    a = np.array([min(x, k) for x, _, _ in pairs])
    b = np.array([min(y, k) for _, y, _ in pairs])
    if policy == "disagree":
        b = np.where((a == k) & (b == k), k + 1, b)
    assert rep.runs == ["original", "swapped"] and rep.counts.items_paired == len(pairs)
    assert close(rep.metrics["consistency"].value, skm.accuracy_score(a, b))
    if len(pairs) >= 2 and len(set(a) | set(b)) > 1:
        assert close(rep.metrics["cohen_kappa"].value, skm.cohen_kappa_score(a, b, labels=list(range(k + 2))))
    # pivoted and per group: the mean of the per-group figures
    f["group"] = f["item"].map({f"i{n}": f"g{p[2]}" for n, p in enumerate(pairs)})
    per = compute_consistency(f, AgreementScale(labels=labels), opts.model_copy(update={"protocol": "per-group"}))
    g = np.array([f"g{p[2]}" for p in pairs])
    ref = np.mean([skm.accuracy_score(a[g == x], b[g == x]) for x in sorted(set(g))])
    assert close(per.metrics["consistency"].value, float(ref))


def _positional_table() -> pd.DataFrame:
    """The worked example of docs/agreement.md (--pair-by): a pairwise judge run twice, answers in the
    original and the swapped order already mapped back to the same answer names (A = the first response)."""
    verdicts = {
        "q1": ("A", "A"),
        "q2": ("A", "B"),
        "q3": ("B", "B"),
        "q4": ("tie", "A"),
        "q5": ("A", "A"),
        "q6": ("B", "B"),
        "q7": ("??", "??"),
        "q8": ("B", "A"),
    }
    rows = []
    for q, (o, s) in verdicts.items():
        rows += [{"id": q, "order": "original", "winner": o}, {"id": q, "order": "swapped", "winner": s}]
    return pd.DataFrame(rows)


@pytest.mark.parametrize("policy", ["agree", "disagree"])
def test_pair_by_worked_example(tmp_path: Path, policy: str) -> None:
    t = _positional_table()
    f = tmp_path / "pos.csv"
    t.to_csv(f, index=False)
    args = [str(f), "--judge", "winner", "--item", "id", "--pair-by", "order", "--labels", "A,B,tie"]
    data = cli_json(tmp_path, [*args, "--invalid-pairs", policy, "--bootstrap", "0"])
    wide = t.pivot(index="id", columns="order", values="winner")
    a = wide["original"].to_numpy()
    b = wide["swapped"].to_numpy()
    if policy == "disagree":
        b = np.where((a == "??") & (b == "??"), "??-second", b)
    assert data["metrics"]["consistency"]["value"] == pytest.approx(skm.accuracy_score(a, b), abs=TOL)
    assert data["metrics"]["cohen_kappa"]["value"] == pytest.approx(skm.cohen_kappa_score(a, b), abs=TOL)
    assert data["counts"]["items_both_invalid"] == 1 and data["runs"] == ["original", "swapped"]
    row = f"| `{policy}` | {skm.accuracy_score(a, b):.3f} | {skm.cohen_kappa_score(a, b):.3f} |"
    assert row in DOCS.read_text(encoding="utf-8"), row
    assert "consistency" in data["_output"] and f"[{policy}]" in data["_output"]
