"""Judge-vs-human agreement: statistics with bootstrap CIs, human ceiling, slices and version comparison.

Public API: `compute_agreement(frame, scale, options) -> AgreementReport` and
`compare_agreement({version: frame}, scale, options) -> ComparisonReport`; `load_table` reads files.
"""

from greval.agreement.compute import compare_agreement, compute_agreement
from greval.agreement.models import (
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    ComparisonReport,
    Estimate,
)

__all__ = [
    "AgreementOptions",
    "AgreementReport",
    "AgreementScale",
    "ComparisonReport",
    "Estimate",
    "compare_agreement",
    "compute_agreement",
]
