"""Claims against the text they cite: each claim's citations (read by :mod:`.sources`: span objects
``{chunk_id, start, end}``, written citations, bare chunk ids) are resolved to text from the record's own
chunks, then compared with the claim — by word overlap (``cited_span_overlap``, formerly ``span_consistency``:
Jaccard of token sets) or by meaning (``cited_span_similarity``: cosine of the packaged sentence embeddings) —
or with what other claims of the same fact cite (``fact_span_consistency``: Jaccard of the cited characters).
A claim that cites nothing, or nothing that resolves, gets an item verdict with the reason and no score: it is
counted, not scored 0."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from greval.judge.computed.common import ComputeError, record_verdict, short, units_of, word_tokens
from greval.judge.computed.embedding import paired_cosines
from greval.judge.computed.sources import Pointed, claim_citations, point_at, reading_of
from greval.spec.computed import (
    CitedSpanOverlapParams,
    CitedSpanSimilarityParams,
    FactSpanConsistencyParams,
    SpanParams,
    match_key,
)
from greval.types import ItemVerdict


@dataclass
class ClaimEvidence:
    """One claim: its words (citations removed), the cited text it is compared with, or why there is none."""

    index: int
    text: str
    claim: Any = None  # the claim as the record gives it
    cites: list[str] = field(default_factory=list)  # how each citation reads, for reasons
    pointed: list[Pointed] = field(default_factory=list)  # where each citation that resolves points
    unresolved: list[str] = field(default_factory=list)  # "<citation>: <why>" per citation that did not resolve

    @property
    def evidence(self) -> str | None:
        """The resolved texts joined by a space, in order; None: nothing resolved."""
        return " ".join(p.text for p in self.pointed) if self.pointed else None

    @property
    def label(self) -> str | None:
        """``uncited`` / ``unresolved`` for a claim that cannot be scored, else None."""
        if self.pointed:
            return None
        return "unresolved" if self.unresolved else "uncited"

    def why_unscored(self) -> str:
        if self.unresolved:
            return "no cited text resolves: " + "; ".join(self.unresolved[:3])
        return "cites nothing"


def resolve_claims(p: SpanParams, data: Mapping[str, Any]) -> list[ClaimEvidence]:
    """Every claim of ``p.field`` with what it cites and where that points in the record's chunks."""
    value = data.get(p.field)
    if not isinstance(value, list):
        raise ComputeError(f"{p.field}: expected a list of claims, got {type(value).__name__}")
    chunks = [c for c in data.get("chunks") or [] if isinstance(c, Mapping)]
    reading = reading_of(p)
    out: list[ClaimEvidence] = []
    for i, claim in enumerate(value, start=1):
        read = claim_citations(claim, reading)
        ce = ClaimEvidence(index=i, text=read.words, claim=claim)
        for c in read.citations:
            ce.cites.append(c.text)
            where, why = point_at(c, chunks, p.id_keys)
            if where is None:
                ce.unresolved.append(f"{c.text}: {why}")
            else:
                ce.pointed.append(where)
        out.append(ce)
    return out


def _counts(claims: list[ClaimEvidence]) -> dict[str, Any]:
    return {
        "claims": len(claims),
        "uncited": sum(c.label == "uncited" for c in claims),
        "unresolved": sum(c.label == "unresolved" for c in claims),
        "unresolved_citations": sum(len(c.unresolved) for c in claims),
        "unresolved_reasons": [f"claim:{c.index}: {u}" for c in claims for u in c.unresolved][:20],
    }


def _unscored(c: ClaimEvidence) -> ItemVerdict:
    return ItemVerdict(item_id=f"claim:{c.index}", label=c.label, reason=f"{short(c.text, 60)}: {c.why_unscored()}")


def jaccard(a: str, b: str) -> tuple[float | None, int, int]:
    """Jaccard overlap of the two texts' token sets (:func:`word_tokens`), with |A ∩ B| and |A ∪ B|;
    None when neither has a word."""
    x, y = set(word_tokens(a)), set(word_tokens(b))
    union = len(x | y)
    inter = len(x & y)
    return (inter / union if union else None), inter, union


def cited_span_overlap(p: CitedSpanOverlapParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Per claim, the Jaccard overlap of its words with the words it cites; the record score is their mean."""
    claims = resolve_claims(p, data)
    items: list[ItemVerdict] = []
    scores: list[float] = []
    for c in claims:
        if c.evidence is None:
            items.append(_unscored(c))
            continue
        value, inter, union = jaccard(c.text, c.evidence)
        if value is None:
            items.append(
                ItemVerdict(item_id=f"claim:{c.index}", label="empty", reason="no words in the claim or its span")
            )
            continue
        scores.append(value)
        items.append(
            ItemVerdict(
                item_id=f"claim:{c.index}",
                score=value,
                reason=f"{short(c.text, 60)}: Jaccard {inter}/{union} = {value:.3f} with {', '.join(c.cites)}",
            )
        )
    mean = fmean(scores) if scores else None
    outputs = {**_counts(claims), "scored": len(scores), "mean": mean, "units": units_of(mean, len(scores))}
    outputs["empty"] = sum(it.label == "empty" for it in items)
    reason = (
        f"mean Jaccard {mean:.3f} over {len(scores)}/{len(claims)} claims"
        if mean is not None
        else f"no claim could be scored ({len(claims)} claims)"
    )
    skipped = outputs["uncited"] + outputs["unresolved"]
    if skipped:
        reason += f"; {outputs['uncited']} cite nothing, {outputs['unresolved']} cite nothing that resolves"
    return [record_verdict(mean, reason), *items], outputs


def cited_span_similarity(
    p: CitedSpanSimilarityParams, data: Mapping[str, Any]
) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Per claim, the cosine similarity of its embedding with the cited text's; the record score is their mean
    or the share of all claims at or above ``min_similarity`` (well supported)."""
    claims = resolve_claims(p, data)
    scorable = [c for c in claims if c.evidence is not None]
    sims = paired_cosines([c.text for c in scorable], [c.evidence or "" for c in scorable], p.model)
    by_index = {c.index: s for c, s in zip(scorable, sims, strict=True)}
    items: list[ItemVerdict] = []
    for c in claims:
        sim = by_index.get(c.index)
        if sim is None:
            items.append(_unscored(c))
            continue
        good = sim >= p.min_similarity
        items.append(
            ItemVerdict(
                item_id=f"claim:{c.index}",
                label="well_supported" if good else "weakly_supported",
                score=sim,
                reason=f"{short(c.text, 60)}: cosine {sim:.3f} {'≥' if good else '<'} {p.min_similarity} "
                f"with {', '.join(c.cites)}",
            )
        )
    well = sum(s >= p.min_similarity for s in sims)
    mean = fmean(sims) if sims else None
    rate = well / len(claims) if claims else None
    score, n = (mean, len(sims)) if p.score == "mean" else (rate, len(claims))
    outputs = {
        **_counts(claims),
        "scored": len(sims),
        "mean": mean,
        "well_supported": well,
        "well_supported_rate": rate,
        "min_similarity": p.min_similarity,
        "model": p.model,
        "units": units_of(score, n),
    }
    head = (
        f"mean cosine {mean:.3f} over {len(sims)}/{len(claims)} claims"
        if mean is not None
        else f"no claim could be scored ({len(claims)} claims)"
    )
    tail = f"{well}/{len(claims)} claims well supported (cosine ≥ {p.min_similarity})"
    reason = f"{head}; {tail}" if p.score == "mean" else f"{tail}; {head}"
    return [record_verdict(score, reason), *items], outputs


# --------------------------------------------------------------------------- spans cited for the same fact
#: The characters a claim's citations cover: per chunk (its place in the record), sorted disjoint
#: ``[start, end)`` intervals in the spans' own coordinates.
Chars = dict[int, list[tuple[int, int]]]


def cited_chars(pointed: Sequence[Pointed]) -> Chars:
    """The characters covered by every citation of a claim that resolves (overlapping spans merged)."""
    by_chunk: dict[int, list[tuple[int, int]]] = {}
    for p in pointed:
        by_chunk.setdefault(p.chunk, []).append((p.start, p.end))
    out: Chars = {}
    for chunk, spans in by_chunk.items():
        merged: list[tuple[int, int]] = []
        for a, b in sorted(spans):
            if merged and a <= merged[-1][1]:
                merged[-1] = (merged[-1][0], max(merged[-1][1], b))
            else:
                merged.append((a, b))
        out[chunk] = merged
    return out


def char_jaccard(x: Chars, y: Chars) -> tuple[float | None, int, int]:
    """|X ∩ Y| / |X ∪ Y| over cited characters (spans in different chunks share none), with both counts;
    None when neither covers a character."""
    inter = sum(max(0, min(b, d) - max(a, c)) for chunk, xs in x.items() for a, b in xs for c, d in y.get(chunk, ()))
    size = sum(b - a for spans in (*x.values(), *y.values()) for a, b in spans)
    union = size - inter
    return (inter / union if union else None), inter, union


def _fact(c: ClaimEvidence, key: str) -> str | None:
    v = c.claim.get(key) if isinstance(c.claim, Mapping) else None
    return match_key(str(v)) if v is not None and str(v).strip() else None


def same_fact_pairs(
    p: FactSpanConsistencyParams, claims: Sequence[ClaimEvidence]
) -> list[tuple[ClaimEvidence, ClaimEvidence, str]]:
    """Every pair of claims about the same fact, with why: equal ``fact_key`` values, or (no ``fact_key``)
    word sets whose Jaccard is at least ``min_claim_overlap``."""
    pairs: list[tuple[ClaimEvidence, ClaimEvidence, str]] = []
    for i, a in enumerate(claims):
        for b in claims[i + 1 :]:
            if p.fact_key is not None:
                fact = _fact(a, p.fact_key)
                if fact is not None and fact == _fact(b, p.fact_key):
                    pairs.append((a, b, f"{p.fact_key} {fact!r}"))
            else:
                sim, _, _ = jaccard(a.text, b.text)
                if sim is not None and sim >= p.min_claim_overlap:
                    pairs.append((a, b, f"words {sim:.2f}"))
    return pairs


def fact_span_consistency(
    p: FactSpanConsistencyParams, data: Mapping[str, Any]
) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Per pair of claims about the same fact that both cite something that resolves, the Jaccard of the
    characters they cite; the record score is the mean over those pairs (none: no score)."""
    claims = resolve_claims(p, data)
    chars = {c.index: cited_chars(c.pointed) for c in claims}
    items: list[ItemVerdict] = []
    scores: list[float] = []
    paired: set[int] = set()
    unscored = 0
    for a, b, same in same_fact_pairs(p, claims):
        value, inter, union = char_jaccard(chars[a.index], chars[b.index])
        if value is None or not (a.pointed and b.pointed):  # one side cites nothing that resolves
            unscored += 1
            continue
        scores.append(value)
        paired |= {a.index, b.index}
        items.append(
            ItemVerdict(
                item_id=f"pair:{a.index}-{b.index}",
                score=value,
                reason=f"claims {a.index} and {b.index} ({same}): {inter}/{union} characters = {value:.3f} "
                f"({', '.join(a.cites)} ~ {', '.join(b.cites)})",
            )
        )
    items.extend(_unpaired(p, c, claims) for c in claims if c.index not in paired)
    mean = fmean(scores) if scores else None
    outputs = {**_counts(claims), "pairs": len(scores), "unscored_pairs": unscored, "mean": mean}
    outputs.update({k: sum(it.label == k for it in items) for k in ("alone", "no_fact")})
    outputs["units"] = units_of(mean, len(scores))
    reason = (
        f"mean character Jaccard {mean:.3f} over {len(scores)} pairs of claims of the same fact"
        if mean is not None
        else f"no two claims of the same fact both cite a span that resolves ({len(claims)} claims)"
    )
    if outputs["alone"]:
        reason += f"; {outputs['alone']} claims have no other claim of their fact to compare with"
    return [record_verdict(mean, reason), *items], outputs


def _unpaired(p: FactSpanConsistencyParams, c: ClaimEvidence, claims: Sequence[ClaimEvidence]) -> ItemVerdict:
    """The item verdict of a claim in no scored pair: why it was not compared — under the word rule, the claim
    that came closest to being its fact and by how much it missed (the rule pairs "Patient has diabetes" with
    "Diabetes diagnosis" only at min_claim_overlap 0.25, where it also pairs different facts sharing words)."""
    if c.label is not None:
        return _unscored(c)
    if p.fact_key is not None and _fact(c, p.fact_key) is None:
        return ItemVerdict(item_id=f"claim:{c.index}", label="no_fact", reason=f"{short(c.text, 60)}: no {p.fact_key}")
    why = "no other claim of its fact cites a span that resolves"
    if p.fact_key is None:
        near = [(jaccard(c.text, o.text)[0] or 0.0, o.index) for o in claims if o.index != c.index]
        sim, other = max(near, key=lambda t: (t[0], -t[1]), default=(0.0, None))
        if other is not None and sim < p.min_claim_overlap:
            why = (
                f"no other claim shares min_claim_overlap {p.min_claim_overlap:g} of its words (closest: claim "
                f"{other}, {sim:.2f}); name each claim's fact with fact_key to pair claims worded differently"
            )
    return ItemVerdict(item_id=f"claim:{c.index}", label="alone", reason=f"{short(c.text, 60)}: {why}")
