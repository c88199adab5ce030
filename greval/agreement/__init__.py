"""Judge-vs-human agreement: statistics with bootstrap CIs, human ceiling, slices and version comparison.

Public API: `compute_agreement(frame, scale, options) -> AgreementReport` and
`compare_agreement({version: frame}, scale, options) -> ComparisonReport`; `read_table` and
`to_agreement_frame` read files; `greval.agreement.report` renders HTML/Markdown.
"""

from greval.agreement.compute import compare_agreement, compute_agreement
from greval.agreement.models import (
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    ComparisonReport,
    Estimate,
)
from greval.agreement.tables import read_table, to_agreement_frame

__all__ = [
    "AgreementOptions",
    "AgreementReport",
    "AgreementScale",
    "ComparisonReport",
    "Estimate",
    "compare_agreement",
    "compute_agreement",
    "read_table",
    "to_agreement_frame",
]
