"""agreement/agreement.py: compute_agreement's report — seeded CIs, slices (rows without a slice value included), and
its notes."""

from __future__ import annotations

import numpy as np
import pandas as pd

from greval.agreement import AgreementOptions, AgreementScale, compute_agreement
from tests.agreement.conftest import frame, no_nan


def test_bootstrap_is_seeded_and_brackets_the_estimate() -> None:
    rng = np.random.default_rng(1)
    h = rng.integers(0, 2, 80)
    j = np.where(rng.random(80) < 0.8, h, 1 - h)
    f = frame(h.tolist(), j.tolist(), group=[f"g{n // 4}" for n in range(80)])
    opts = AgreementOptions(bootstrap=50, seed=7)
    a = compute_agreement(f, AgreementScale(labels=["0", "1"]), opts)
    b = compute_agreement(f, AgreementScale(labels=["0", "1"]), opts)
    assert a.model_dump() == b.model_dump()
    e = a.metrics["cohen_kappa"]
    assert e.ci_low is not None and e.ci_high is not None and e.ci_low <= e.value <= e.ci_high  # type: ignore[operator]
    assert any("resamples of groups" in n for n in a.notes)


def test_slices_report_each_value() -> None:
    f = frame(["a", "b", "a", "b"], ["a", "b", "b", "b"], lang=["en", "en", "de", "x"])
    rep = compute_agreement(f, AgreementScale(labels=["a", "b"]), AgreementOptions(bootstrap=20, slices=["lang"]))
    assert set(rep.slices["lang"]) == {"en", "de", "x"}
    assert rep.slices["lang"]["en"].metrics["accuracy"].value == 1.0
    no_nan(rep)


def test_rows_without_a_slice_value_are_a_named_slice_with_a_note() -> None:
    """A slice column's empty cells were a slice named "nan"; now "(missing)", said in a note."""
    frame = pd.DataFrame(
        {
            "item": list("abcd"),
            "judge": ["x", "y", "x", "y"],
            "human": ["x", "y", "y", "y"],
            "sys": ["A", None, "B", "A"],
        }
    )
    options = AgreementOptions(bootstrap=0, slices=["sys"])
    rep = compute_agreement(frame, AgreementScale(kind="categorical", labels=["x", "y"]), options)
    assert sorted(rep.slices["sys"]) == ["(missing)", "A", "B"]
    assert rep.slices["sys"]["(missing)"].counts.items_compared == 1
    assert any("(missing)" in n and "1 row(s)" in n for n in rep.notes)
