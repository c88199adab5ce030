"""``kind: computed`` metrics scored: one module per family of computation, and the evaluator that runs them.

The families differ in what they read and what they need: ``overlap`` (ROUGE, BLEU: a prediction's words
against reference texts, via rouge-score / nltk), ``embedding`` (semantic similarity: a packaged
sentence-transformers model, loaded once under a lock), ``sources`` (the one reader of citations: what a
claim, item or sentence cites and where it points in the record's chunks; every metric below reads them
there), ``citations`` (citation coverage, validity and density, orphan claims), ``spans`` (claims against the
text of the spans / chunks they cite: Jaccard overlap and embedding similarity; and the spans cited for the
same fact against each other), ``fields`` (numbers a record reports, such as a confidence)
and ``triples`` (knowledge-graph triples against the user's relationship table). ``common`` holds what they
share, among it ``outputs["units"]``: how many items each record score is a mean or share over. The specs
themselves are declared in :mod:`greval.spec.computed`; :func:`compute` maps each to its family.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from greval._sync import run_sync
from greval.dataset.records import Record
from greval.judge.computed.citations import citations, orphan_claims, split_sentences
from greval.judge.computed.common import ComputeError, word_tokens
from greval.judge.computed.embedding import (
    cosine_similarities,
    embedding_model,
    embedding_model_dir,
    embedding_similarity,
    paired_cosines,
)
from greval.judge.computed.fields import field_stats
from greval.judge.computed.overlap import bleu, bleu_score, rouge
from greval.judge.computed.sources import (
    Citation,
    ClaimCites,
    Pointed,
    Reading,
    check_citation,
    claim_citations,
    parse_citations,
    point_at,
    reading_of,
    resolve_chunk,
    strip_citations,
)
from greval.judge.computed.spans import (
    char_jaccard,
    cited_span_overlap,
    cited_span_similarity,
    fact_span_consistency,
    jaccard,
    resolve_claims,
)
from greval.judge.computed.trajectory import first_wrong_step, tool_call_f1, tool_call_validity, trajectory_match
from greval.judge.computed.triples import parse_arrow_triples, triple_validity
from greval.judge.outcome import Failed, begin, error_verdicts
from greval.spec.computed import (
    BleuSpec,
    CitationSpec,
    CitedSpanOverlapSpec,
    CitedSpanSimilaritySpec,
    ComputedSpec,
    EmbeddingSpec,
    FactSpanConsistencySpec,
    FieldStatsSpec,
    FirstWrongStepSpec,
    OrphanSpec,
    RougeSpec,
    TableUnavailable,
    ToolCallF1Spec,
    ToolCallValiditySpec,
    TrajectoryMatchSpec,
    TripleSpec,
)
from greval.types import ErrorKind, ItemVerdict, JudgeResult

#: What a scorer gives for one record: its verdicts and outputs.
Scored = tuple[list[ItemVerdict], dict[str, Any]]


#: Each computed kind's scorer, by spec class (a subclass too: CitedSpanOverlapSpec answers for its deprecated
#: name, span_consistency); the triple kind also needs its table, below.
_SCORERS: tuple[tuple[type[Any], Callable[[Any, Mapping[str, Any]], Scored]], ...] = (
    (RougeSpec, rouge),
    (BleuSpec, bleu),
    (EmbeddingSpec, embedding_similarity),
    (CitationSpec, citations),
    (OrphanSpec, orphan_claims),
    (CitedSpanOverlapSpec, cited_span_overlap),
    (CitedSpanSimilaritySpec, cited_span_similarity),
    (FactSpanConsistencySpec, fact_span_consistency),
    (FieldStatsSpec, field_stats),
    (TrajectoryMatchSpec, trajectory_match),
    (ToolCallF1Spec, tool_call_f1),
    (FirstWrongStepSpec, first_wrong_step),
    (ToolCallValiditySpec, tool_call_validity),
)


def compute(spec: ComputedSpec, data: Mapping[str, Any]) -> Scored:
    """Score one record's data: the verdicts (record-level first, item ids after) and outputs."""
    for kind, score in _SCORERS:
        if isinstance(spec, kind):
            return score(spec.params, data)
    if isinstance(spec, TripleSpec):
        try:
            table = spec.table
        except TableUnavailable as exc:
            raise ComputeError(str(exc), ErrorKind.UNKNOWN) from None
        return triple_validity(spec.params, table, data)
    raise TypeError(f"computed metric {spec.metric!r} has no computation")


class ComputedEvaluator:
    """Runs a computed spec on records; CPU work goes to a thread so the event loop keeps serving judges."""

    def __init__(self, spec: ComputedSpec) -> None:
        self.spec = spec

    async def ajudge(
        self,
        record: Record | Mapping[str, Any],
        deps: Mapping[str, JudgeResult] | None = None,
        only_items: Sequence[str] | None = None,
    ) -> JudgeResult:
        rec, result, ready = begin(self.spec, record, deps)
        if ready is None:
            return result
        try:
            verdicts, outputs = await asyncio.to_thread(compute, self.spec, rec.data)
        except ComputeError as exc:
            result.verdicts = error_verdicts(Failed(exc.kind, str(exc)))
            return result
        result.verdicts = verdicts
        result.outputs = outputs
        return result

    def judge(self, record: Record | Mapping[str, Any]) -> JudgeResult:
        """Synchronous convenience for scripts and tests."""
        return run_sync(self.ajudge(record))


__all__: list[str] = [
    "Citation",
    "ClaimCites",
    "ComputeError",
    "ComputedEvaluator",
    "Pointed",
    "Reading",
    "bleu_score",
    "char_jaccard",
    "check_citation",
    "claim_citations",
    "compute",
    "cosine_similarities",
    "embedding_model",
    "embedding_model_dir",
    "jaccard",
    "paired_cosines",
    "parse_arrow_triples",
    "parse_citations",
    "point_at",
    "reading_of",
    "resolve_chunk",
    "resolve_claims",
    "split_sentences",
    "strip_citations",
    "word_tokens",
]
