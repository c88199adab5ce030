"""greval.judge.parse: the answer turned into verdicts (majority of samples)."""

from __future__ import annotations

import pytest


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        ([4, 4, 2], 4),  # the mode, not round(mean) = 3
        ([2, 3], 2),  # a tie equally near the median 2.5: the smaller (round(2.5) is 2 by banker's rounding too)
        ([3, 4], 3),  # ... and round(3.5) would give 4: ties do not depend on parity
        ([1, 1, 5, 5, 4], 5),  # tie 1 vs 5, median 4: 5 is nearer
        ([1, 1, 2, 5, 5], 1),  # tie 1 vs 5, median 2: 1 is nearer
        ([1, 5], 1),  # no value in between is invented (round(mean) = 3 was)
        ([2, 2, 2, 5], 2),
    ],
)
def test_majority_value_is_the_mode_with_ties_toward_the_median(values: list[int], expected: int) -> None:
    from greval.judge.parse import majority_value

    assert majority_value(values) == expected
