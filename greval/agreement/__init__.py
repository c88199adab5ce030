"""Judge-vs-human agreement: statistics with bootstrap CIs, human ceiling, slices and version comparison.

Public API: `compute_agreement(frame, scale, options) -> AgreementReport` and
`compare_agreement({version: frame}, scale, options) -> ComparisonReport`;
`compute_consistency(frame, scale, options)` compares two runs of the judge with each other; `read_table` and
`to_agreement_frame` read files; `AgreementBatch` holds several tables' reports (`greval agreement`'s batch
JSON); `greval.report.agreement` renders HTML/Markdown.
"""

from greval.agreement.agreement import compute_agreement
from greval.agreement.comparison import compare_agreement
from greval.agreement.consistency import compute_consistency
from greval.agreement.models import (
    AgreementBatch,
    AgreementOptions,
    AgreementReport,
    AgreementScale,
    ComparisonReport,
    ConsistencyReport,
    Estimate,
)
from greval.agreement.tables import read_table, to_agreement_frame

__all__ = [
    "AgreementBatch",
    "AgreementOptions",
    "AgreementReport",
    "AgreementScale",
    "ComparisonReport",
    "ConsistencyReport",
    "Estimate",
    "compare_agreement",
    "compute_agreement",
    "compute_consistency",
    "read_table",
    "to_agreement_frame",
]
