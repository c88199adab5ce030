"""agreement/ceiling.py: the human–human ceiling equals the reference libraries."""

from __future__ import annotations

import krippendorff
import numpy as np
import pandas as pd
from sklearn import metrics as skm

from greval.agreement import AgreementScale, compute_agreement
from tests.agreement.conftest import NO_BOOT, close


def test_ceiling_matches_libraries() -> None:
    rng = np.random.default_rng(3)
    rows = []
    for i in range(40):
        truth = int(rng.integers(0, 3))
        for a in ("p", "q", "r"):
            lab = truth if rng.random() < 0.8 else int(rng.integers(0, 3))
            rows.append({"item": f"i{i}", "annotator": a, "human": lab, "judge": truth if i % 3 else (truth + 1) % 3})
    f = pd.DataFrame(rows)
    rep = compute_agreement(f, AgreementScale(labels=["0", "1", "2"]), NO_BOOT)
    assert rep.ceiling is not None
    wide = f.pivot(index="annotator", columns="item", values="human")
    for pair in rep.ceiling.human_pairs:
        ref = skm.cohen_kappa_score(wide.loc[pair.a], wide.loc[pair.b], labels=[0, 1, 2])
        assert close(pair.value, ref)
    ref_alpha = krippendorff.alpha(wide.to_numpy(dtype=float), value_domain=[0, 1, 2], level_of_measurement="nominal")
    assert close(rep.ceiling.human_alpha.value, ref_alpha)
    assert rep.ceiling.human_alpha.n == 40
