"""Citation coverage / validity / density and the share of orphan claims (claims citing nothing): every
citation is read by :mod:`.sources` (the one reader) and checked against the record's own chunks."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from greval.judge.computed.common import ComputeError, record_verdict, short, texts, units_of, word_tokens
from greval.judge.computed.sources import (
    Citation,
    ClaimCites,
    Reading,
    check_citation,
    claim_citations,
    reading_of,
    strip_citations,
)
from greval.spec.computed import CitationParams, OrphanParams
from greval.types import ItemVerdict

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+|\n+")


def split_sentences(text: str) -> list[str]:
    """Sentences of an answer (regex: no punkt download). A fragment that is only citations joins the
    sentence before it; markdown headings are not claims and are dropped."""
    out: list[str] = []
    for raw in _SENTENCE_END.split(text):
        s = raw.strip()
        if not s or s.startswith("#"):
            continue
        rest = strip_citations(s)
        if not re.search(r"\w", rest) and out:
            out[-1] = f"{out[-1]} {s}"
            continue
        if re.search(r"\w", s):
            out.append(s)
    return out


def _units(p: CitationParams, data: Mapping[str, Any]) -> tuple[list[ClaimCites], str]:
    """The units that should cite, read: the items of ``p.items``, else the sentences of ``p.field``."""
    if p.items:
        value = data.get(p.items)
        if not isinstance(value, list):
            raise ComputeError(f"{p.items}: expected a list, got {type(value).__name__}")
        reading = reading_of(p)
        return [claim_citations(it, reading) for it in value], "item"
    sentences = split_sentences(" ".join(texts(data.get(p.field))))
    reading = Reading(styles=tuple(p.styles))  # a sentence is a claim that is all text
    return [claim_citations(u, reading) for u in sentences], "sentence"


def citations(p: CitationParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Citation coverage (sentences or items citing something) and validity (citations that resolve)."""
    chunks = [c for c in data.get("chunks") or [] if isinstance(c, Mapping)]
    reads, unit_name = _units(p, data)
    units = [r.text or f"{unit_name} {i} (no text)" for i, r in enumerate(reads, start=1)]
    per_unit = [r.citations for r in reads]
    # Density counts the words the units say, without their citation markup (see word_tokens).
    tokens = sum(len(word_tokens(r.words)) for r in reads)
    cites: list[Citation] = []
    problems: list[str | None] = []
    uncited: list[int] = []
    evidenced = 0
    for i, found in enumerate(per_unit):
        if not found:
            uncited.append(i)
        why = [check_citation(c, chunks, p) for c in found]
        evidenced += any(w is None for w in why)
        cites.extend(found)
        problems.extend(why)
    valid = sum(1 for x in problems if x is None)
    n = len(units)
    coverage = (n - len(uncited)) / n if units else None
    evidence_coverage = evidenced / n if units else None
    validity = valid / len(cites) if cites else None
    per_sentence = len(cites) / n if units else None
    per_100 = 100.0 * len(cites) / tokens if tokens else None
    items = [
        ItemVerdict(
            item_id=f"citation:{i}",
            label="valid" if why is None else "invalid",
            score=1.0 if why is None else 0.0,
            reason=f"{c.text}: " + ("resolves" if why is None else why),
        )
        for i, (c, why) in enumerate(zip(cites, problems, strict=True), start=1)
    ]
    cov_text = f"{n - len(uncited)}/{n} {unit_name}s cite" if units else f"no {unit_name}s"
    val_text = f"{valid}/{len(cites)} citations valid" if cites else "no citations found"
    ev_text = f"{evidenced}/{n} {unit_name}s have a valid citation" if units else f"no {unit_name}s"
    first_bad = next((f"{c.text}: {w}" for c, w in zip(cites, problems, strict=True) if w), None)
    score: float | None
    if p.score == "validity":
        score, reason, units_n = validity, f"{val_text}; {cov_text}", len(cites)
    elif p.score == "coverage":
        score, reason, units_n = coverage, f"{cov_text}; {val_text}", n
    elif p.score == "evidence_coverage":
        score, reason, units_n = evidence_coverage, f"{ev_text}; {val_text}", n
    elif p.score == "density_per_sentence":
        score, units_n = per_sentence, 1
        reason = f"{len(cites)} citations in {n} {unit_name}s" if units else f"no {unit_name}s"
    else:
        score, units_n = per_100, 1
        reason = f"{len(cites)} citations in {tokens} word tokens" if tokens else "no word tokens"
    if first_bad:
        reason += f" (first invalid: {short(first_bad, 120)})"
    outputs: dict[str, Any] = {
        "coverage": coverage,
        "validity": validity,
        "evidence_coverage": evidence_coverage,
        "density_per_sentence": per_sentence,
        "density_per_100_tokens": per_100,
        "units": units_of(score, units_n),
        "segments": n,
        "cited_segments": n - len(uncited),
        "evidenced_segments": evidenced,
        "tokens": tokens,
        "citations": len(cites),
        "valid_citations": valid,
        "uncited": [short(units[i]) for i in uncited[:20]],
        "invalid": [f"{c.text}: {w}" for c, w in zip(cites, problems, strict=True) if w][:20],
    }
    return [record_verdict(score, reason), *items], outputs


def orphan_claims(p: OrphanParams, data: Mapping[str, Any]) -> tuple[list[ItemVerdict], dict[str, Any]]:
    """Share of claims that cite nothing (lower is better): every form the reader knows is a source, whether
    it resolves or not (that is ``citations``' validity)."""
    value = data.get(p.field)
    if not isinstance(value, list):
        raise ComputeError(f"{p.field}: expected a list of claims, got {type(value).__name__}")
    reading = reading_of(p)
    items: list[ItemVerdict] = []
    orphans = 0
    for i, claim in enumerate(value, start=1):
        read = claim_citations(claim, reading)
        orphan = not read.citations
        orphans += orphan
        cited = ", ".join(c.text for c in read.citations[:3]) + (", …" if len(read.citations) > 3 else "")
        items.append(
            ItemVerdict(
                item_id=f"claim:{i}",
                label="orphan" if orphan else "sourced",
                score=1.0 if orphan else 0.0,
                reason=f"{short(read.text, 60)}: " + ("no source" if orphan else f"cites {cited}"),
            )
        )
    rate = orphans / len(value) if value else None
    reason = f"{orphans}/{len(value)} claims have no source" if value else "no claims"
    outputs = {"claims": len(value), "orphans": orphans, "orphan_rate": rate, "units": units_of(rate, len(value))}
    return [record_verdict(rate, reason), *items], outputs
