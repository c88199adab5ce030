"""field_stats (greval.judge.computed.fields): self-reported numbers read from records."""

from __future__ import annotations

from typing import Any

import pytest

from greval.types import ErrorKind
from tests.judge.computed.conftest import computed_judge, computed_score, spec


def test_field_stats_reads_a_value_a_dotted_path_or_a_list_and_flags_below_the_threshold() -> None:
    one = computed_judge(spec("field_stats"), {"confidence": 0.9})
    assert computed_score(one) == 0.9 and one.verdicts[0].label == "ok"
    assert (one.outputs["n"], one.outputs["flagged"], one.outputs["units"]) == (1, 0, 1)
    edge = computed_judge(spec("field_stats"), {"confidence": 0.8})
    assert edge.verdicts[0].label == "ok"  # "< 0.8 flagged": 0.8 itself is not
    nested = computed_judge(
        spec("field_stats", {"field": "extraction.confidence"}), {"extraction": {"confidence": "0.75"}}
    )
    assert computed_score(nested) == 0.75 and nested.verdicts[0].label == "flagged"
    values = [0.95, 0.6, 0.85, 0.7]
    res = computed_judge(
        spec("field_stats", {"field": "claims", "key": "confidence"}),
        {"claims": [{"text": str(i), "confidence": v} for i, v in enumerate(values)]},
    )
    assert computed_score(res) == pytest.approx((0.95 + 0.6 + 0.85 + 0.7) / 4)  # 0.775 < 0.8
    assert res.verdicts[0].label == "flagged"
    assert res.outputs == {
        "n": 4,
        "mean": pytest.approx(0.775),
        "min": 0.6,
        "max": 0.95,
        "flagged": 2,
        "flagged_rate": 0.5,
        "threshold": 0.8,
        "units": 4,
    }
    assert [v.label for v in res.verdicts[1:]] == ["ok", "flagged", "ok", "flagged"]
    lenient = computed_judge(spec("field_stats", {"field": "scores", "threshold": 0.5}), {"scores": values})
    assert lenient.verdicts[0].label == "ok" and lenient.outputs["flagged"] == 0


@pytest.mark.parametrize(
    ("params", "data", "message"),
    [
        ({}, {"confidence": "high"}, "confidence: expected a number, got 'high'"),
        ({}, {"confidence": True}, "confidence: expected a number, got True"),
        ({}, {"confidence": "inf"}, "confidence: expected a finite number"),
        ({}, {"confidence": {"value": 1}}, "confidence: expected a number, got dict (set params.key"),
        ({"field": "a.b"}, {"a": {"c": 1}}, "a.b: expected a number, got nothing"),
        (
            {"field": "claims", "key": "confidence"},
            {"claims": [{"confidence": 1}, {}]},
            "claims[1].confidence: expected",
        ),
        (
            {"field": "claims", "key": "confidence"},
            {"claims": ["x"]},
            "claims[0]: expected an object with 'confidence'",
        ),
    ],
)
def test_field_stats_non_numbers_are_per_record_errors(
    params: dict[str, Any], data: dict[str, Any], message: str
) -> None:
    res = computed_judge(spec("field_stats", params), data)
    (bad,) = res.verdicts
    assert bad.status == "error" and bad.error_kind is ErrorKind.INVALID_INPUT
    assert (bad.error or "").startswith(message), bad.error


def test_field_stats_shows_the_digits_that_decide_a_flag() -> None:
    """Issue 40: the mean of 0.5, 0.9 and 1.0 is 0.7999999999999999 in floating point: flagged below 0.8, and the
    reason said "mean 0.8". The reason now shows the digits where the short form would read as the other side."""
    data = {"claims": [{"confidence": 0.5}, {"confidence": 0.9}, {"confidence": 1.0}]}
    res = computed_judge(spec("field_stats", {"field": "claims", "key": "confidence"}), data)
    record = res.verdicts[0]
    assert record.label == "flagged" and record.score == 0.7999999999999999
    assert record.reason == "mean 0.7999999999999999 < 0.8 of 3 values (claims[].confidence), 1 below 0.8"
    one = computed_judge(spec("field_stats", {"threshold": 0.3}), {"confidence": 0.1 + 0.2})  # 0.30000000000000004
    assert one.verdicts[0].label == "ok" and one.verdicts[0].reason == "confidence = 0.3 ≥ 0.3"  # the same side
    short = computed_judge(
        spec("field_stats", {"field": "claims", "key": "confidence"}), {"claims": [{"confidence": 0.75}]}
    )
    assert short.verdicts[0].reason == "mean 0.75 < 0.8 of 1 values (claims[].confidence), 1 below 0.8"
    assert [v.reason for v in short.verdicts[1:]] == ["claims[0].confidence = 0.75 < 0.8"]
