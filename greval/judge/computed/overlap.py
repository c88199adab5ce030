"""Lexical overlap with references: ROUGE (Google's ``rouge-score``) and sentence BLEU (``nltk``, tokenised
as valor-lite does). Both score a prediction against one or more reference texts; neither is re-implemented."""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

from greval.judge.computed.common import ComputeError, library, record_verdict, texts, units_of
from greval.spec.computed import BleuParams, RougeParams
from greval.types import ItemVerdict


@lru_cache(maxsize=16)
def _rouge_scorer(types: tuple[str, ...], use_stemmer: bool) -> Any:
    scorer: Any = library("rouge_score.rouge_scorer", "rouge-score").RougeScorer(list(types), use_stemmer=use_stemmer)
    return scorer


def _prediction_and_references(data: Mapping[str, Any], prediction: str, reference: str) -> tuple[str, list[str]]:
    """The text to score (a list is joined) and its references (a list means several); no reference is an error."""
    refs = texts(data.get(reference))
    if not refs:
        raise ComputeError(f"{reference}: no reference text")
    return " ".join(texts(data.get(prediction))), refs


def rouge(p: RougeParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """ROUGE F-measure of a prediction against one or more references (max over references)."""
    prediction, refs = _prediction_and_references(data, p.prediction, p.reference)
    scorer = _rouge_scorer(tuple(p.types), p.use_stemmer)
    # score_multi keeps, per type, the reference with the best F-measure (valor-lite: max per type).
    scores = scorer.score_multi(refs, prediction)
    outputs: dict[str, Any] = {}
    for t in p.types:
        s = scores[t]
        outputs[t] = float(s.fmeasure)
        outputs[f"{t}_precision"] = float(s.precision)
        outputs[f"{t}_recall"] = float(s.recall)
    main = p.main_type
    others = ", ".join(f"{t} {outputs[t]:.3f}" for t in p.types if t != main)
    reason = f"{main} F-measure {outputs[main]:.3f}" + (f" ({others})" if others else "")
    if len(refs) > 1:
        reason += f"; best of {len(refs)} references"
    outputs["units"] = units_of(outputs[main], 1)  # one score per record: it averages nothing
    return [record_verdict(outputs[main], reason)], outputs


def bleu(p: BleuParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Sentence BLEU of a prediction against its references (nltk counts all references together)."""
    prediction, refs = _prediction_and_references(data, p.prediction, p.reference)
    score, hyp, ref_tokens = bleu_score(prediction, refs, p)
    outputs = {
        "bleu": score,
        "weights": list(p.weights),
        "prediction_tokens": len(hyp),
        "reference_tokens": [len(r) for r in ref_tokens],
        "units": units_of(score, 1),
    }
    n = len(p.weights)
    reason = f"BLEU-{n} {score:.3f} over {len(hyp)} tokens against {len(refs)} reference(s)"
    if score == 0.0 and p.smoothing == "none" and hyp:
        reason += " (no smoothing: an n-gram order with no match gives 0)"
    return [record_verdict(score, reason)], outputs


def bleu_score(prediction: str, references: Sequence[str], p: BleuParams) -> tuple[float, list[str], list[list[str]]]:
    """nltk sentence BLEU with the spec's tokenizer, weights and smoothing; the tokens for the outputs."""
    tokenize = library("nltk.tokenize", "nltk")
    nltk_bleu = library("nltk.translate.bleu_score", "nltk")
    tok = tokenize.RegexpTokenizer(p.tokenizer)

    def split(text: str) -> list[str]:
        return list(tok.tokenize(text.lower() if p.lowercase else text))

    hyp = split(prediction)
    refs = [split(r) for r in references]
    unsmoothed = p.smoothing == "none"
    smoothing = _no_smoothing if unsmoothed else getattr(nltk_bleu.SmoothingFunction(), p.smoothing)
    if unsmoothed and hyp and refs:
        # Unsmoothed BLEU is a geometric mean: one order with no match makes it 0. nltk returns ~1e-155 there
        # (it substitutes the smallest float for the zero precision), which reads as a score; 0 it is.
        for order, weight in enumerate(p.weights, start=1):
            if weight > 0 and nltk_bleu.modified_precision(refs, hyp, order).numerator == 0:
                return 0.0, hyp, refs
    value = nltk_bleu.sentence_bleu(refs, hyp, weights=tuple(p.weights), smoothing_function=smoothing)
    return max(float(value), 0.0), hyp, refs


def _no_smoothing(p_n: Sequence[Any], *args: Any, **kwargs: Any) -> list[Any]:
    """nltk's ``SmoothingFunction().method0`` (no smoothing, what ``smoothing_function=None`` uses) without its
    warning on each zero n-gram overlap: silencing that with ``warnings.catch_warnings`` in a worker thread
    swapped the whole process's warning filters under the other threads (it is not thread-safe)."""
    return [p if p.numerator != 0 else sys.float_info.min for p in p_n]
