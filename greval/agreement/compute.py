"""The entry points' old home, kept so code written against `greval.agreement.compute` still imports them.
They live in agreement.py, comparison.py, consistency.py and threshold.py; `greval.agreement` is the face."""

from greval.agreement.agreement import MISSING_SLICE, compute_agreement
from greval.agreement.comparison import compare_agreement
from greval.agreement.consistency import compute_consistency
from greval.agreement.threshold import judge_from_score

__all__ = ["MISSING_SLICE", "compare_agreement", "compute_agreement", "compute_consistency", "judge_from_score"]
