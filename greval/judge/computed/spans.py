"""Claims against the text they cite: each claim's citations (span objects ``{chunk_id, start, end}``, written
citations, bare chunk ids) are resolved to text from the record's own chunks, then compared with the claim —
by word overlap (``span_consistency``: Jaccard of token sets) or by meaning (``cited_span_similarity``: cosine
of the packaged sentence embeddings). A claim that cites nothing, or nothing that resolves, gets an item
verdict with the reason and no score: it is counted, not scored 0."""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from statistics import fmean
from typing import Any

from greval.judge.computed.citations import Citation, cited_text, parse_citations, resolve_chunk, strip_citations
from greval.judge.computed.common import ComputeError, record_verdict, short, units_of, word_tokens
from greval.judge.computed.embedding import paired_cosines
from greval.spec.computed import CitedSpanSimilarityParams, SpanConsistencyParams, SpanParams
from greval.types import ItemVerdict

#: Keys of a span object naming its chunk, its start and its end (the first present wins).
SPAN_ID_KEYS = ("chunk_id", "chunk", "id", "source")
SPAN_START_KEYS = ("start", "start_char")
SPAN_END_KEYS = ("end", "end_char")


@dataclass
class ClaimEvidence:
    """One claim: its words (citations removed), the cited text it is compared with, or why there is none."""

    index: int
    text: str
    cites: list[str] = field(default_factory=list)  # how each citation reads, for reasons
    evidence: str | None = None  # the resolved texts joined by a space; None: nothing resolved
    unresolved: list[str] = field(default_factory=list)  # "<citation>: <why>" per citation that did not resolve

    @property
    def label(self) -> str | None:
        """``uncited`` / ``unresolved`` for a claim that cannot be scored, else None."""
        if self.evidence is not None:
            return None
        return "unresolved" if self.unresolved else "uncited"

    def why_unscored(self) -> str:
        if self.unresolved:
            return "no cited text resolves: " + "; ".join(self.unresolved[:3])
        return "cites nothing"


def _first(obj: Mapping[str, Any], keys: Sequence[str]) -> Any:
    return next((obj[k] for k in keys if obj.get(k) not in (None, "")), None)


def _as_offset(v: Any) -> int | None:
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, str) and v.strip().isdigit():
        return int(v)
    return None


def span_object(obj: Mapping[str, Any], id_keys: Sequence[str] = SPAN_ID_KEYS) -> Citation | str:
    """A span given as ``{chunk_id, start, end}`` (start and end optional together: without them the whole
    chunk), or why it is not one."""
    ref = _first(obj, id_keys)
    if ref is None:
        return f"span {short(str(dict(obj)), 60)}: no chunk id (one of {', '.join(id_keys)})"
    start_v, end_v = _first(obj, SPAN_START_KEYS), _first(obj, SPAN_END_KEYS)
    if start_v is None and end_v is None:
        return Citation(text=str(ref), ref=str(ref))
    start, end = _as_offset(start_v), _as_offset(end_v)
    if start is None or end is None:
        return f"span {ref}:{start_v}-{end_v}: start and end must both be whole numbers"
    return Citation(text=f"{ref}:{start}-{end}", ref=str(ref), start=start, end=end)


def claim_citations(claim: Any, p: SpanParams) -> tuple[str, list[Citation | str]]:
    """A claim's words (its text without citation markup) and what it cites: citations, or for a malformed
    span object the reason it cannot be read."""
    text = str(claim.get(p.text_key, "") or "") if isinstance(claim, Mapping) else str(claim)
    found: list[Citation | str] = []
    if p.inline_citations:
        found.extend(parse_citations(text, p.styles))
    if not isinstance(claim, Mapping):
        return strip_citations(text, p.styles), found
    used: set[str] = set()
    if _first(claim, SPAN_START_KEYS) is not None or _first(claim, SPAN_END_KEYS) is not None:
        # The claim itself carries {chunk_id, start, end} (its own `id` is the claim's, not a chunk's).
        used = {k for k in SPAN_ID_KEYS if k != "id"}
        found.append(span_object(claim, [k for k in SPAN_ID_KEYS if k in used]))
    for k in p.source_keys:
        if k in used:
            continue
        v = claim.get(k)
        for x in v if isinstance(v, list | tuple) else [] if v is None else [v]:
            if isinstance(x, Mapping):
                found.append(span_object(x))
                continue
            s = str(x).strip()
            if not s:
                continue
            written = parse_citations(s, p.styles)
            found.extend(written or [Citation(text=ref, ref=ref) for ref in re.split(r"\s*[,;]\s*", s) if ref])
    return strip_citations(text, p.styles), found


def resolve_claims(p: SpanParams, data: Mapping[str, Any]) -> list[ClaimEvidence]:
    """Every claim of ``p.field`` with the text it cites (several cited texts joined by a space, in order)."""
    value = data.get(p.field)
    if not isinstance(value, list):
        raise ComputeError(f"{p.field}: expected a list of claims, got {type(value).__name__}")
    chunks = [c for c in data.get("chunks") or [] if isinstance(c, Mapping)]
    out: list[ClaimEvidence] = []
    for i, claim in enumerate(value, start=1):
        words, cites = claim_citations(claim, p)
        ce = ClaimEvidence(index=i, text=" ".join(words.split()))
        resolved: list[str] = []
        seen: set[tuple[str, int | None, int | None]] = set()
        for c in cites:
            if not isinstance(c, str):  # the same span cited twice (in the text and a source key) counts once
                key = (c.text, c.start, c.end)
                if key in seen:
                    continue
                seen.add(key)
            if isinstance(c, str):
                ce.unresolved.append(c)
                ce.cites.append(c.split(":", 1)[0])
                continue
            ce.cites.append(c.text)
            chunk, why = resolve_chunk(c, chunks, p.id_keys)
            piece: str | None = None
            if chunk is not None:
                piece, why = cited_text(c, chunk)
            if piece is None:
                ce.unresolved.append(f"{c.text}: {why}")
            else:
                resolved.append(piece)
        if resolved:
            ce.evidence = " ".join(resolved)
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


def span_consistency(p: SpanConsistencyParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
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
